"""Whether the identity edit also moves W+ slots 0-1: identity left and keys told apart (SFace, FaceRes), head pose
kept (face mesh), on generated and tuning faces only.

    python -m benchmarks.coarse_slots [--methods dbaf,hford,personal,ifadit] [--generated 48] [--keys 4] [--out PATH]

Faces: ``--generated`` of the generator's own faces (seeds 7,000,000+, truncation 0.8; not the seeds of
``benchmarks.wplus_methods``), drawn from their W+ exactly, and every face of the tuning photos
(:data:`benchmarks.real_photos.REAL_PHOTOS`), FFHQ-aligned at 256 px and inverted as the methods invert real faces
(the W+ encoder + 20 refinement steps with SFace's identity term). Each method's keyed code is drawn twice: with
slots 0-1 as they were (``coarse=False``) and with the code's change added there along its pose-free directions
(``coarse=True``, :data:`zoo.nn.wplus_identity.COARSE_SLOTS`, the default). Per setting, over faces x keys: SFace and
FaceRes call the anonymized face the original person (the guard's recognizers, at their judges' cosine lines 0.363
and 0.683), two keys' faces of one face the same person, and the face mesh's |yaw| and |pitch| change
(:func:`zoo.face_mesh.mesh_head_pose`).
dlib, the judge of every published number, is not used: this chose the default. Writes
``benchmarks/results/coarse_slots.{json,md}``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from benchmarks.reconstruct_real import packaged_faces
from benchmarks.report import command_line, write_results
from benchmarks.wplus_methods import generated_faces
from zoo.face3d.landmarks import angle_difference
from zoo.methods.fit_controls import InversionFit

OUT = Path(__file__).resolve().parent / "results" / "coarse_slots"
JUDGES = ("sface", "faceres")


def faces_and_codes(method, generated: int) -> dict[str, tuple[np.ndarray, torch.Tensor]]:
    """{"generated": (uint8 crops [N,256,256,3], W+ [N,23,512]), "tuning": (...)}: the faces and their codes."""
    from zoo.imageio import to_tensor

    out = {}
    if generated > 0:
        with torch.no_grad():
            codes, crops = generated_faces(method, generated, 7_000_000)
        out["generated"] = (crops, codes)
    crops = np.stack([f[3] for f in packaged_faces() if f[1] == "tuning"])
    x = to_tensor(crops)
    out["tuning"] = (crops, torch.cat([method.encode(x[i : i + 8], InversionFit(20, 1.0, 0.4)).detach() for i in range(0, len(x), 8)]))
    return out


def measure(method_name: str, crops: np.ndarray, code: torch.Tensor, keys: int) -> dict[str, dict]:
    """coarse off/on -> {"same_<judge>": [...], "pairs_<judge>": [...], "yaw": [...], "pitch": [...]} over faces x keys."""
    from zoo import load
    from zoo.alignment import ffhq_template
    from zoo.face_mesh import mesh_head_pose
    from zoo.imageio import from_tensor
    from zoo.judges import get_judge
    from zoo.keys import Secret

    method, template = load(method_name, latent_space="wplus"), ffhq_template(256)
    judges = {n: get_judge(n) for n in JUDGES}
    original = {n: j.embed_aligned(crops) for n, j in judges.items()}
    pose0 = np.array([mesh_head_pose(c, template) for c in crops])
    out: dict[str, dict] = {}
    for label, coarse in (("off", False), ("on", True)):
        drawn_by_key = []
        row: dict = {"yaw": [], "pitch": [], **{f"same_{n}": [] for n in JUDGES}, **{f"pairs_{n}": [] for n in JUDGES}}
        for k in range(keys):
            face_keys = [Secret(f"coarse-slots/{k}").derive(method_name, i) for i in range(len(crops))]
            with torch.no_grad():
                u_anon = method.anonymized_code(method.identity_code(code), face_keys)
                drawn = method.with_identity(code, method.drawn_identity(u_anon), face_keys, coarse=coarse)
                faces = np.concatenate([from_tensor(method.decode(drawn[i : i + 8])) for i in range(0, len(crops), 8)])
            pose = np.array([mesh_head_pose(im, template) for im in faces])
            change = np.abs(angle_difference(pose, pose0))
            row["yaw"] += change[:, 0].tolist()
            row["pitch"] += change[:, 1].tolist()
            emb = {n: j.embed_aligned(faces) for n, j in judges.items()}
            for n, j in judges.items():
                row[f"same_{n}"] += np.asarray(j.same_person(emb[n], original[n])).astype(bool).tolist()
            drawn_by_key.append(emb)
        for n, j in judges.items():
            for a in range(keys):
                for b in range(a + 1, keys):
                    row[f"pairs_{n}"] += np.asarray(j.same_person(drawn_by_key[a][n], drawn_by_key[b][n])).astype(bool).tolist()
        out[label] = row
    return out


def _rate(flags: list) -> str:
    from benchmarks.report import rate, rate_text

    return rate_text(rate(int(sum(flags)), len(flags)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="dbaf,hford,personal,ifadit")
    ap.add_argument("--generated", type=int, default=48)
    ap.add_argument("--keys", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from zoo import load

    sets = faces_and_codes(load(args.methods.split(",")[0], latent_space="wplus"), args.generated)
    result: dict = {"command": command_line("benchmarks.coarse_slots", argv), "keys": args.keys, "faces": {s: len(v[0]) for s, v in sets.items()}, "rows": {}}
    lines = [
        "# The identity edit in W+ slots 0-1 (generated and tuning faces; SFace, FaceRes and the face mesh, never dlib)",
        "",
        f"`{result['command']}`. {args.keys} keys per face; faces: "
        + ", ".join(f"{s} {n}" for s, n in result["faces"].items())
        + ". k/n [95% Wilson]; SFace and FaceRes at their judges' cosine lines (0.363, 0.683); head pose change by the face mesh, degrees, median (90th percentile).",
        "",
        "| faces | method | slots 0-1 | anonymized same, SFace | FaceRes | keys pairwise same, SFace | FaceRes | yaw change | pitch change |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in args.methods.split(","):
        for set_name, (crops, code) in sets.items():
            per = measure(name, crops, code, args.keys)
            result["rows"][f"{set_name}/{name}"] = per
            for label, row in per.items():
                yaw, pitch = np.array(row["yaw"]), np.array(row["pitch"])
                lines.append(
                    f"| {set_name} | {name} | {'edited' if label == 'on' else 'kept'} | {_rate(row['same_sface'])} | {_rate(row['same_faceres'])} | "
                    f"{_rate(row['pairs_sface'])} | {_rate(row['pairs_faceres'])} | {np.nanmedian(yaw):.1f} ({np.nanquantile(yaw, 0.9):.1f}) | "
                    f"{np.nanmedian(pitch):.1f} ({np.nanquantile(pitch, 0.9):.1f}) |"
                )
            print("\n".join(lines[-2:]), flush=True)
    write_results(Path(args.out) if args.out else OUT, result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
