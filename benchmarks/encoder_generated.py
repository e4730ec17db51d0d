"""The W+ encoder on generated faces it never saw: same person (dlib) after the encoder alone and after refinement.

Faces: ``--n`` of the FFHQ-grade generator (seeds 3,000,000 + i: disjoint from the encoder's training data, which is
drawn from ``numpy.random.default_rng([0, shard])``; psi 0.7; 256 px). For each face the encoder's W+ is drawn
(``zoo.inversion.encode_wplus``), then refined ``--steps`` Adam steps from it, and against the generated original:

* dlib (the judge; no setting uses it) same person at 0.6, with 95% Wilson intervals;
* PSNR inside the face mask, SFace cosine, seconds per face; the same from ``w_avg`` for comparison.

``--starts``: which fits to run, among ``encoder`` and ``w_avg`` (pixel loss only), ``methods`` (the W+ methods'
inversion: the encoder's code turned to the head's yaw, SFace's identity term at 1.0) and ``default`` (the same plus
the face-region term, :data:`zoo.inversion.DEFAULT_FACE_WEIGHT`: what ``zoo reconstruct`` runs).

    python -m benchmarks.encoder_generated [--n 64] [--steps 0,10,25] [--starts encoder,w_avg]   # -> results/encoder_generated.{json,md}
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from benchmarks.report import command_line, rate_text, write_results

OUT = Path(__file__).resolve().parent / "results" / "encoder_generated"
SEED_OFFSET = 3_000_000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--steps", default="0,10,25")
    p.add_argument("--starts", default="encoder,w_avg", help="comma list of encoder, w_avg, methods, default")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    starts = [s.strip() for s in a.starts.split(",") if s.strip()]
    if not starts or not set(starts) <= {"encoder", "w_avg", "methods", "default"}:
        p.error(f"--starts must list encoder, w_avg, methods or default, got {a.starts!r}")

    from benchmarks.reconstruct_real import fidelity_curve
    from training.evaluate import wilson_interval
    from zoo.imageio import from_tensor
    from zoo.inversion import ALIGN_SIZE, DEFAULT_FACE_WEIGHT, DEFAULT_IDENTITY_WEIGHT
    from zoo.judges import get_judge
    from zoo.nn.mobilestylegan import load_mobilestylegan
    from zoo.nn.sface import load_sface
    from zoo.paste import face_mask

    torch.set_num_threads(a.threads)
    steps = sorted(int(s) for s in a.steps.split(","))
    g, sface, dlib = load_mobilestylegan(), load_sface(), get_judge("dlib")
    mask = face_mask(ALIGN_SIZE) > 0.5
    z = torch.from_numpy(np.stack([np.random.default_rng(SEED_OFFSET + i).standard_normal(512) for i in range(a.n)]).astype(np.float32))
    with torch.no_grad():  # 16 at a time: 200 faces in one batch need about 16 GB
        targets = torch.cat([g.synthesis(g.truncate(g.mapping(part), 0.7), ALIGN_SIZE).clamp(-1, 1) for part in z.split(16)])
    originals = from_tensor(targets)
    orig_dlib = dlib.embed_aligned(originals)
    rows = {start: {s: [] for s in steps} for start in starts}
    for i in range(a.n):
        target = targets[i : i + 1]
        for start_name in starts:
            identity_weight = DEFAULT_IDENTITY_WEIGHT if start_name in ("methods", "default") else 0.0
            snaps = fidelity_curve(g, target, steps, start_name, identity_weight, DEFAULT_FACE_WEIGHT if start_name == "default" else 0.0)
            for s in steps:
                image, seconds = snaps[s]
                rec = from_tensor(image)[0]
                d = float(np.linalg.norm(dlib.embed_aligned(rec)[0] - orig_dlib[i]))
                err = (rec.astype(np.float64) - originals[i])[mask]
                with torch.no_grad():
                    cos = float((sface.embed_aligned(image) * sface.embed_aligned(target)).sum())
                rows[start_name][s].append({"dlib": d, "psnr": float(10 * np.log10(255.0**2 / np.mean(err**2))), "sface": cos, "seconds": seconds})
        print(i, {k: [round(v[s][-1]["dlib"], 3) for s in steps] for k, v in rows.items()}, flush=True)
    summary: dict = {}
    for start_name, by_step in rows.items():
        for s, per in by_step.items():
            k = sum(r["dlib"] < dlib.threshold for r in per)
            summary.setdefault(start_name, {})[s] = {
                "same_person": {"k": k, "n": len(per), "rate": round(k / len(per), 4), "95ci": [round(v, 4) for v in wilson_interval(k, len(per))]},
                "psnr_face_db_median": round(float(np.median([r["psnr"] for r in per])), 2),
                "sface_cosine_median": round(float(np.median([r["sface"] for r in per])), 3),
                "seconds_per_face_median": round(float(np.median([r["seconds"] for r in per])), 2),
            }
    result = {"command": command_line("benchmarks.encoder_generated", argv), "threads": a.threads, "faces": a.n, "summary": summary}
    lines = [
        "# The W+ encoder on unseen generated faces",
        "",
        f"`{result['command'].strip()}`, {a.threads} threads; dlib judge at 0.6, k/n [95% Wilson].",
        "",
        "| start | refinement steps | same person (dlib) | face PSNR dB (median) | SFace cos (median) | s/face (median) |",
        "|---|---|---|---|---|---|",
    ]
    for start_name, per in summary.items():
        for s, r in per.items():
            sp = r["same_person"]
            lines.append(
                f"| {start_name} | {s} | {rate_text(sp, 2)} | {r['psnr_face_db_median']:.1f} | "
                f"{r['sface_cosine_median']:.3f} | {r['seconds_per_face_median']:.2f} |"
            )
    write_results(a.out, result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
