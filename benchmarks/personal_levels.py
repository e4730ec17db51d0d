"""`personal` at every privacy level d = 0..9, judged by dlib (never used in training) on held-out faces.

    python -m benchmarks.personal_levels [--local-dir DIR] [--faces 100] [--judge dlib]

Per level: anonymized faces still matched to the original, mean judge distance to the original (must
rise with d), right-key recovery and wrong-key recovery matched, and two passwords' outputs of one face
matched to each other. Recovery starts from the carried anonymized code (``zoo.carrier``), rounded to
float16 exactly as the carrier stores it; every face is encoded once and shared by all levels (for a
demo checkpoint; a paper-scale checkpoint goes through ``anonymize_faces`` / ``recover_faces``).
Writes ``benchmarks/results/personal_demo_levels.{json,md}`` (``--out`` to change the stem).
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

from training.evaluate import load_eval_images, rate
from zoo import imageio, load
from zoo.judges import get_judge
from zoo.keys import Secret
from zoo.methods.fit_controls import InversionFit
from zoo.methods.latent_demo import LatentDemoMethod
from zoo.methods.personal import privacy_angle

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--local-dir", help="checkpoint folder (default: what load('personal') finds)")
    p.add_argument("--faces", type=int, default=100)
    p.add_argument("--seed", type=int, default=777, help="seed of the held-out generated faces")
    p.add_argument("--judge", default="dlib")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "personal_demo_levels"))
    args = p.parse_args(argv)
    t0 = time.perf_counter()

    m = load("personal", local_dir=args.local_dir, device="cpu")
    judge = get_judge(args.judge)
    crops, ds = load_eval_images(f"synthetic:{args.faces}:{args.seed}", m.resolution)
    x = imageio.to_tensor(crops, m.resolution)
    e0 = judge.embed_aligned(crops)
    n = len(crops)
    right = m.face_keys(Secret(b"levels: right password"), n)
    wrong = m.face_keys(Secret(b"levels: wrong password"), n)
    other = m.face_keys(Secret(b"levels: second password"), n)
    demo = isinstance(m, LatentDemoMethod)

    def images(t: torch.Tensor) -> np.ndarray:
        return imageio.from_tensor(t.float())

    with torch.no_grad():
        z = m.encode(x, InversionFit(20)) if demo else None
        rows = []
        for d in range(10):
            if demo:
                z_an = m.anonymized_code(z, right, level=d).half().float()  # what the carrier stores
                anon = images(m.decode(z_an))
                rec = images(m.decode(m.recovered_code(z_an, right, level=d)))
                bad = images(m.decode(m.recovered_code(z_an, wrong, level=d)))
                anon2 = images(m.decode(m.anonymized_code(z, other, level=d)))
            else:
                y = m.anonymize_faces(x, right, level=d)
                anon, rec = images(y), images(m.recover_faces(y, right, level=d))
                bad, anon2 = images(m.recover_faces(y, wrong, level=d)), images(m.anonymize_faces(x, other, level=d))
            e_an, e_rec, e_bad, e_an2 = (judge.embed_aligned(a) for a in (anon, rec, bad, anon2))
            dist = judge.distance(e0, e_an)
            rows.append(
                {
                    "level": d,
                    "angle_deg": float(privacy_angle(d)),
                    "anonymized_same_person": rate(judge.same_person(e0, e_an)),
                    "distance_to_original": {"mean": float(dist.mean()), "std": float(dist.std()), "n": n},
                    "right_key_recovery_same_person": rate(judge.same_person(e0, e_rec)),
                    "wrong_key_recovery_same_person": rate(judge.same_person(e0, e_bad)),
                    "two_passwords_same_person": rate(judge.same_person(e_an, e_an2)),
                }
            )
    command = "python -m benchmarks.personal_levels " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    out = {
        "method": "personal",
        "weights": m.weights_text,
        "judge": args.judge,
        "dataset": ds,
        "rows": rows,
        "command": command,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "torch_threads": torch.get_num_threads(),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    stem = Path(args.out)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(out, indent=1, default=str))

    def r(e):
        return f"{e['value']:.3f} [{e['ci95'][0]:.3f}, {e['ci95'][1]:.3f}]"

    md = [
        f"# personal: every privacy level, judged by {args.judge}",
        "",
        f"Weights: {m.weights_text}.",
        f"Faces: {ds['name']} ({n}). Command: `{command}`.",
        "Rates: value [95% Wilson interval], n = number of faces. Recovery from the carried code (float16). The method's transform alone: no privacy guard (the bundle's rows at the default level are with it).",
        "",
        "| d | g(d) | anonymized, same person | distance to original (mean ± std) | right-key recovery, same person | wrong-key recovery, same person | two passwords, same person |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        dd = row["distance_to_original"]
        md.append(
            f"| {row['level']} | {row['angle_deg']:.0f} deg | {r(row['anonymized_same_person'])} | {dd['mean']:.3f} ± {dd['std']:.3f} | "
            f"{r(row['right_key_recovery_same_person'])} | {r(row['wrong_key_recovery_same_person'])} | {r(row['two_passwords_same_person'])} |"
        )
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return out


if __name__ == "__main__":
    main()
