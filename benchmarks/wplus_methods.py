"""The reversible methods on the FFHQ-grade backbone (config ``latent_space: wplus``): what they do to faces.

    python -m benchmarks.wplus_methods [--methods dbaf,hford,ifadit,personal] [--generated 24] [--steps 20]

Faces, split before measuring:

* ``generated``: the generator's own faces (seeds 5,000,000+, truncation 0.8; never used for any setting),
  drawn from W+ exactly, so recovery tests the keyed transform, not the inversion;
* real faces from photos that packages ship (:data:`benchmarks.real_photos.REAL_PHOTOS`): ``tuning`` (t1.jpg,
  6 faces) and ``held-out`` (astronaut, camera, grace_hopper, Tom_Hanks), FFHQ-aligned at 256 px and inverted
  with the W+ encoder + ``--steps`` refinement steps (SFace identity term at the method's default weight).

Per face and method, with one key per face: the anonymized face, its right-key recovery from the carried
identity code and from the pixels alone (re-inverted with the same steps), and a wrong-key recovery. Measured
on the aligned 256 px crops against the original (real faces) or the generator's own image (generated):

* dlib same person at 0.6 (the judge: no setting here uses it), and SFace / FaceRes (the guard's view);
* two keys on one face: dlib same person between the two anonymized faces;
* head pose change (yaw; 68 dlib landmarks + solvePnP, :func:`zoo.face3d.landmarks.head_pose`);
* recovery PSNR inside the face mask.

No privacy guard and no paste-back: the methods themselves. Rates carry 95% Wilson intervals. Writes
``benchmarks/results/wplus_methods.{json,md}``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.reconstruct_real import packaged_faces, rate
from benchmarks.report import command_line, write_results
from zoo import load
from zoo.alignment import ffhq_template
from zoo.carrier import quantize_code
from zoo.face3d.landmarks import detect_landmarks68, head_pose
from zoo.imageio import from_tensor, to_tensor
from zoo.judges import get_judge
from zoo.paste import face_mask

OUT = Path(__file__).resolve().parent / "results" / "wplus_methods"
METHODS = ("dbaf", "hford", "ifadit", "personal")


def _rate(flags) -> dict:
    """:func:`benchmarks.reconstruct_real.rate` of a sequence of yes/no outcomes."""
    flags = [bool(f) for f in flags]
    return rate(sum(flags), len(flags))


def _yaw(crops: np.ndarray) -> np.ndarray:
    template = ffhq_template(crops.shape[1])
    return np.array([head_pose(detect_landmarks68(c, template), c.shape[:2])[0] for c in crops])


def _psnr(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> np.ndarray:
    err = (a.astype(np.float64) - b.astype(np.float64))[:, mask]
    return 10 * np.log10(255.0**2 / np.maximum((err**2).reshape(len(a), -1).mean(1), 1e-9))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--generated", type=int, default=24)
    p.add_argument("--steps", type=int, default=20, help="refinement steps of every inversion of a real face")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    methods = {name: load(name, latent_space="wplus") for name in args.methods.split(",")}
    for name, m in methods.items():
        if m.wplus is None:
            raise SystemExit(f"{name} is not on the W+ backbone (config latent_space)")
    judges = {n: get_judge(n) for n in ("dlib", "sface", "faceres")}
    mask = face_mask(256) > 0.5
    first = next(iter(methods.values()))
    g = first.wplus.generator

    # ---------------------------------------------------------------- faces and their W+ codes
    sets: dict[str, dict] = {}
    gen = torch.Generator().manual_seed(5_000_000)
    with torch.no_grad():
        w = g.style(torch.randn(args.generated, 512, generator=gen), 0.8)[:, None].expand(-1, 23, -1).contiguous()
        images = torch.cat([g.synthesis(w[i : i + 8], 256) for i in range(0, len(w), 8)])
    sets["generated"] = {"names": [f"seed5e6+{i}" for i in range(len(w))], "crops": from_tensor(images), "codes": w, "steps": 0}
    real = packaged_faces()
    for split in ("tuning", "held-out"):
        rows = [r for r in real if r[1] == split]
        if not rows:
            continue
        crops = np.stack([r[3] for r in rows])
        t0 = time.perf_counter()
        weight, check = first.identity_controls(None, None)
        codes = torch.cat([first.encode(to_tensor(c[None]), args.steps, weight, check) for c in crops])
        sets[split] = {
            "names": [f"{r[0]}:{r[2]}" for r in rows],
            "crops": crops,
            "codes": codes,
            "steps": args.steps,
            "inversion_s_per_face": round((time.perf_counter() - t0) / len(rows), 2),
        }
        print(f"{split}: {len(rows)} faces inverted, {sets[split]['inversion_s_per_face']} s/face", flush=True)

    # ---------------------------------------------------------------- methods
    result: dict = {"command": command_line("benchmarks.wplus_methods", argv), "threads": args.threads, "steps": args.steps, "sets": {}}
    for set_name, s in sets.items():
        crops, codes = s["crops"], s["codes"]
        x = to_tensor(crops)
        emb = {n: j.embed_aligned(crops) for n, j in judges.items()}
        yaw0 = _yaw(crops)
        per_set: dict = {"n": len(crops), "faces": s["names"]}
        if "inversion_s_per_face" in s:
            per_set["inversion_s_per_face"] = s["inversion_s_per_face"]
        with torch.no_grad():
            recon = from_tensor(first.decode(codes))
        per_set["reconstruction"] = {
            "dlib_same": _rate(judges["dlib"].same_person(judges["dlib"].embed_aligned(recon), emb["dlib"])),
            "psnr_db_median": round(float(np.median(_psnr(recon, crops, mask))), 2),
        }
        for name, m in methods.items():
            t0 = time.perf_counter()
            outs = {}
            for label, secret in (("key1", "wplus-bench-key-1"), ("key2", "wplus-bench-key-2")):
                keys = m.face_keys(m.run_secret(secret), len(crops))
                with torch.no_grad():
                    u_anon = m.anonymized_code(m.identity_code(codes), keys)
                    w_anon = m.with_identity(codes, u_anon, keys)
                    y = m.decode(m.drawn_code(x, w_anon))
                # what a lossless save carries (zoo.carrier): u_anon and the anonymized W+ rows in 4-bit steps
                rows = m.wplus.carried_rows(w_anon).numpy()
                carried = [{"latent": u.numpy(), "code": quantize_code(r)} for u, r in zip(u_anon, rows)]
                outs[label] = (keys, from_tensor(y), carried)
            keys, anon, carried = outs["key1"]
            t_anon = (time.perf_counter() - t0) / (2 * len(crops))
            y = to_tensor(anon)
            t0 = time.perf_counter()
            with torch.no_grad(), m.run_scope():  # the three recoveries share one inversion of each saved face
                rec_carried = from_tensor(m.recover_faces(y, keys, refine_steps=s["steps"], carried=carried))
                t_rec = (time.perf_counter() - t0) / len(crops)
                rec_pixels = from_tensor(m.recover_faces(y, keys, refine_steps=s["steps"]))
                wrong = [k.wrong_key() for k in keys]
                rec_wrong = from_tensor(m.recover_faces(y, wrong, refine_steps=s["steps"], carried=carried))
            row: dict = {"anonymize_s_per_face": round(t_anon, 2), "recover_s_per_face": round(t_rec, 2)}
            for n, j in judges.items():
                row[f"anonymized_same_{n}"] = _rate(j.same_person(j.embed_aligned(anon), emb[n]))
            dl = judges["dlib"]
            row["two_keys_same_dlib"] = _rate(dl.same_person(dl.embed_aligned(anon), dl.embed_aligned(outs["key2"][1])))
            row["recovered_carried_same_dlib"] = _rate(dl.same_person(dl.embed_aligned(rec_carried), emb["dlib"]))
            row["recovered_pixels_same_dlib"] = _rate(dl.same_person(dl.embed_aligned(rec_pixels), emb["dlib"]))
            row["wrong_key_same_dlib"] = _rate(dl.same_person(dl.embed_aligned(rec_wrong), emb["dlib"]))
            for n in ("sface", "faceres"):
                j = judges[n]
                row[f"wrong_key_same_{n}"] = _rate(j.same_person(j.embed_aligned(rec_wrong), emb[n]))
            row["recovered_carried_psnr_db_median"] = round(float(np.median(_psnr(rec_carried, crops, mask))), 2)
            row["yaw_change_deg_median"] = round(float(np.nanmedian(np.abs(_yaw(anon) - yaw0))), 1)
            per_set[name] = row
            print(set_name, name, {k: (v["rate"] if isinstance(v, dict) else v) for k, v in row.items()}, flush=True)
        result["sets"][set_name] = per_set

    lines = [
        "# The reversible methods on the FFHQ-grade backbone (W+ identity code)",
        "",
        f"`{result['command'].strip()}`, {args.threads} threads; real faces inverted with the W+ encoder + {args.steps} refinement steps.",
        "dlib judges at 0.6 (no setting uses it); SFace and FaceRes at the guard's thresholds. Rates k/n [95% Wilson]. No privacy guard, no paste-back.",
        "",
        "| faces | method | anonymized same (dlib) | (SFace) | (FaceRes) | two keys same (dlib) | right key, carried code (dlib) | right key, pixels only (dlib) | wrong key (dlib) | yaw change deg | recovered PSNR dB | s/face anon / recover |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(r: dict) -> str:
        return f"{r['k']}/{r['n']} [{r['95ci'][0]:.2f}, {r['95ci'][1]:.2f}]"

    for set_name, per in result["sets"].items():
        for name in methods:
            r = per[name]
            lines.append(
                f"| {set_name} ({per['n']}) | {name} | {cell(r['anonymized_same_dlib'])} | {cell(r['anonymized_same_sface'])} | {cell(r['anonymized_same_faceres'])} "
                f"| {cell(r['two_keys_same_dlib'])} | {cell(r['recovered_carried_same_dlib'])} | {cell(r['recovered_pixels_same_dlib'])} | {cell(r['wrong_key_same_dlib'])} "
                f"| {r['yaw_change_deg_median']} | {r['recovered_carried_psnr_db_median']} | {r['anonymize_s_per_face']} / {r['recover_s_per_face']} |"
            )
    lines += [
        "",
        "Reconstruction (the backbone alone, identity unchanged): "
        + "; ".join(f"{k} {cell(v['reconstruction']['dlib_same'])} same person, {v['reconstruction']['psnr_db_median']} dB" for k, v in result["sets"].items()),
    ]
    write_results(args.out, result, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
