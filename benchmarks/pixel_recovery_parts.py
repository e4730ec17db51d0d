"""Where right-key recovery from the pixels alone loses the person, on the FFHQ-grade W+ tier.

    python -m benchmarks.pixel_recovery_parts [--methods dbaf,ifadit] [--faces 20] [--steps 20]

A reversible method anonymizes a face's inverted W+ code w into w_anon (identity code u -> u_anon = T(u, key), the
other identity content rotated with the key, :mod:`zoo.nn.wplus_identity`). Recovery from a lossless save reads
w_anon from the carrier (:mod:`zoo.carrier`); from the pixels alone it re-inverts the anonymized face into w_hat and
reads u_hat = identity(w_hat). This benchmark takes the recovery apart on the **tuning** faces (FFHQ-aligned 256 px
crops of :func:`benchmarks.reconstruct_real.packaged_faces`), judged with the guard's recognizers only (SFace and
FaceRes at their lines; dlib is not used):

* how well w_hat redraws the anonymized face (SFace distance between the two drawings) and how close u_hat is to
  u_anon (cosine);
* the recovered face against the original with each part taken from the carried code or from the pixels: both
  carried (exact), u from the pixels, the rest of the code from the pixels, both from the pixels (the zoo's
  pixel path), and the carried code with one group of W+ slots replaced by the re-inversion's.

Writes ``benchmarks/results/pixel_recovery_parts.{json,md}``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.reconstruct_real import packaged_faces
from benchmarks.report import command_line, rate, rate_text, write_results
from zoo import load
from zoo.imageio import from_tensor, to_tensor
from zoo.judges import get_judge

OUT = Path(__file__).resolve().parent / "results" / "pixel_recovery_parts"
#: W+ slot groups swapped one at a time (:data:`zoo.nn.mobilestylegan.SLOT_RESOLUTIONS`): the pose slots, the 8 px
#: block's convs, the identity slots (16-64 px), the 128 px block, the 256 px block (the 512 px head's), the image head
SLOT_GROUPS = {"0-1": (0, 1), "2-3": (2, 3), "4-12": tuple(range(4, 13)), "13-15": (13, 14, 15), "16-18": (16, 17, 18), "22": (22,)}


def _parts(method, codes: torch.Tensor, keys, steps: int) -> dict[str, np.ndarray]:
    """The recoveries of every face (uint8 crops ``[N,256,256,3]``) by where each part comes from, plus the
    anonymized face and its redrawing from the re-inversion; ``u_cos``: cosine of u_hat and u_anon per face."""
    identity = method.wplus.identity
    fit = method.inversion_fit(steps, None, None, 0.0)
    with torch.no_grad():
        u_anon, w_anon = method.keyed_codes(codes, keys)
        anon = from_tensor(method.decode(w_anon))
        w_hat = torch.cat([method.encode(to_tensor(a[None]), fit) for a in anon])
        u_hat = method.read_identity(identity.code(w_hat))
        u_exact, u_pixels = method.recovered_code(u_anon, keys), method.recovered_code(u_hat, keys)

        def draw(code: torch.Tensor, u: torch.Tensor) -> np.ndarray:
            return from_tensor(method.decode(method.with_identity(code, u, keys, True)))

        out = {
            "anonymized": anon,
            "redrawn": from_tensor(method.decode(w_hat)),
            "carried": draw(w_anon, u_exact),
            "u from pixels": draw(w_anon, u_pixels),
            "rest from pixels": draw(w_hat, u_exact),
            "pixels": draw(w_hat, u_pixels),
        }
        for name, slots in SLOT_GROUPS.items():
            mixed = w_anon.clone()
            mixed[:, list(slots)] = w_hat[:, list(slots)]
            out[f"slots {name} from pixels"] = draw(mixed, u_exact)
        out["u_cos"] = torch.nn.functional.cosine_similarity(u_hat, u_anon).numpy()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default="dbaf,ifadit")
    p.add_argument("--faces", type=int, default=20, help="the first N tuning faces")
    p.add_argument("--steps", type=int, default=20, help="refinement steps of every inversion")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    rows = [r for r in packaged_faces() if r[1] == "tuning"][: args.faces]
    if not rows:
        raise SystemExit("no tuning faces: run python -m benchmarks.real_photos --fetch")
    crops = np.stack([r[3] for r in rows])
    judges = {n: get_judge(n) for n in ("sface", "faceres")}
    original = {n: j.embed_aligned(crops) for n, j in judges.items()}
    methods = {name: load(name, latent_space="wplus") for name in args.methods.split(",")}
    first = next(iter(methods.values()))
    fit = first.inversion_fit(args.steps, None, None, 0.0)
    with torch.no_grad():
        codes = torch.cat([first.encode(to_tensor(c[None]), fit) for c in crops])
    result: dict = {
        "command": command_line("benchmarks.pixel_recovery_parts", argv),
        "faces": [f"{r[0]}:{r[2]}" for r in rows],
        "steps": args.steps,
        "methods": {},
    }
    for name, method in methods.items():
        keys = method.face_keys(method.run_secret("pixel-recovery-parts-key"), len(crops))
        parts = _parts(method, codes, keys, args.steps)
        sface = judges["sface"]
        row: dict = {
            "u_hat_cosine_median": round(float(np.median(parts.pop("u_cos"))), 3),
            "redrawn_sface_distance_median": round(
                float(np.median(sface.distance(sface.embed_aligned(parts["redrawn"]), sface.embed_aligned(parts["anonymized"])))), 3
            ),
        }
        for part, faces in parts.items():
            if part == "redrawn":
                continue
            cell = {}
            for n, j in judges.items():
                emb = j.embed_aligned(faces)
                cell[f"{n}_distance_median"] = round(float(np.median(j.distance(emb, original[n]))), 3)
                cell[f"{n}_same"] = rate(int(j.same_person(emb, original[n]).sum()), len(crops))
            row[part] = cell
        result["methods"][name] = row
        print(name, row, flush=True)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    write_results(args.out, result, _markdown(result))
    return 0


def _markdown(result: dict) -> list[str]:
    lines = [
        "# Right-key recovery from the pixels, taken apart (W+ tier, tuning faces)",
        "",
        f"`{result['command'].strip()}` ({len(result['faces'])} tuning faces, {result['steps']} refinement steps per inversion, "
        f"{result['seconds']} s). SFace and FaceRes at the guard's lines against the original crop; k/n [95% Wilson]; dlib not used.",
        "",
        "| method | u_hat vs u_anon cosine (median) | re-inversion redraws the anonymized face (SFace distance, median) |",
        "|---|---|---|",
    ]
    for name, row in result["methods"].items():
        lines.append(f"| {name} | {row['u_hat_cosine_median']} | {row['redrawn_sface_distance_median']} |")
    lines += ["", "| method | recovered from | SFace distance (median) | SFace same | FaceRes same |", "|---|---|---|---|---|"]
    for name, row in result["methods"].items():
        for part, cell in row.items():
            if isinstance(cell, dict):
                s, f = cell["sface_same"], cell["faceres_same"]
                lines.append(f"| {name} | {part} | {cell['sface_distance_median']} | {rate_text(s, 2)} | {rate_text(f, 2)} |")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
