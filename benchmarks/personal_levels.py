"""SFace identity cosine to the original at every privacy level d of a `personal` checkpoint, and of its
reconstruction (identity unchanged), on held-out synthetic faces (the evaluator's synthetic:N:777).

    python benchmarks/personal_levels.py --local-dir outputs/personal/stage1/model [--faces 32]

Prints one line per row (the format of benchmarks/results/personal_tiny_cpu_levels.txt).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch


from training.evaluate import load_eval_images  # noqa: E402
from zoo import imageio, load  # noqa: E402
from zoo.judges import get_judge  # noqa: E402
from zoo.keys import Secret  # noqa: E402
from zoo.methods.personal import privacy_angle  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--local-dir", required=True)
    p.add_argument("--faces", type=int, default=32)
    p.add_argument("--key", default="evaluation key")
    args = p.parse_args(argv)

    m = load("personal", local_dir=args.local_dir, device="cpu")
    judge = get_judge("sface")
    crops, _ = load_eval_images(f"synthetic:{args.faces}:777", 256)
    e0 = judge.embed_aligned(crops)
    x = imageio.to_tensor(np.stack([imageio.resize_square(c, m.resolution) for c in crops]), m.resolution)

    def cosine_to_original(fn) -> np.ndarray:
        with torch.no_grad():
            y = torch.cat([fn(x[i : i + 8], i) for i in range(0, len(x), 8)])
        out = np.stack([imageio.resize_to(o, (256, 256)) for o in imageio.from_tensor(y)])
        e = judge.embed_aligned(out)
        return (e0 * e).sum(1) / (np.linalg.norm(e0, axis=1) * np.linalg.norm(e, axis=1))

    def report(label: str, c: np.ndarray) -> None:
        print(f"{label}: SFace cosine {c.mean():.3f} +- {c.std():.3f}, still matched (>= {judge.threshold}) {np.mean(c >= judge.threshold):.3f}, N={len(c)}")

    report("reconstruction (identity unchanged)", cosine_to_original(lambda b, i: m.reconstruct_faces(b)))
    keys = m.face_keys(Secret(args.key), len(x))
    for d in range(10):
        c = cosine_to_original(lambda b, i, d=d: m.anonymize_faces(b, keys[i : i + len(b)], level=d))
        report(f"anonymized, level d={d} (g={privacy_angle(d):.0f} deg)", c)


if __name__ == "__main__":
    main()
