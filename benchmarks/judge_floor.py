"""The judge's floor on the evaluator's generated faces: how often an unrelated random face is called the
same person as the original. No method's "anonymized" or "wrong-key recovery" rate can be expected below it.

    python -m benchmarks.judge_floor [--faces 200] [--seed 1] [--draws 4] [--judge dlib]

The originals are the evaluator's held-out faces (``synthetic:N:SEED``, the bundle's default seed 1). For
each, ``--draws`` random faces are drawn from the packaged DCGAN two ways: a fresh prior code z ~ N(0, I)
(a random generated face), and a random direction at the norm of the original's inverted code (where a
norm-keeping method such as `personal` puts a wrong-key recovery). Rows: original vs random face, and two
random faces of one draw set with each other (the floor of the "4 keys, pairwise" row).
Writes ``benchmarks/results/judge_floor_cpu.{json,md}`` (``--out`` to change the stem).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from training.evaluate import format_entry, load_eval_images, rate
from zoo import imageio, load
from zoo.judges import get_judge
from zoo.methods.fit_controls import InversionFit

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--faces", type=int, default=200)
    p.add_argument("--seed", type=int, default=1, help="seed of the held-out generated faces (the bundle's: 1)")
    p.add_argument("--draws", type=int, default=4, help="random faces per original")
    p.add_argument("--judge", default="dlib")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "judge_floor_cpu"))
    args = p.parse_args(argv)
    t0 = time.perf_counter()

    backbone = load("ifadit", device="cpu")  # any demo checkpoint: only its generator and encoder are used
    judge = get_judge(args.judge)
    crops, ds = load_eval_images(f"synthetic:{args.faces}:{args.seed}", backbone.resolution)
    n = len(crops)
    e0 = judge.embed_aligned(crops)
    gen = torch.Generator().manual_seed(12345)
    with torch.no_grad():
        norms = backbone.encode(imageio.to_tensor(crops, backbone.resolution), InversionFit(20)).norm(dim=1, keepdim=True)
        sets = {
            "prior": [torch.randn(n, 100, generator=gen) for _ in range(args.draws)],
            "at_inverted_norm": [F.normalize(torch.randn(n, 100, generator=gen), dim=1) * norms for _ in range(args.draws)],
        }
        rows = {}
        for name, codes in sets.items():
            embs = [judge.embed_aligned(imageio.from_tensor(backbone.decode(c).float())) for c in codes]
            rows[name] = {
                "original_vs_random_same_person": rate(np.concatenate([judge.same_person(e0, e) for e in embs])),
                "random_pairs_same_person": rate(np.concatenate([judge.same_person(a, b) for a, b in itertools.combinations(embs, 2)])),
            }
    command = ("python -m benchmarks.judge_floor " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))).strip()
    out = {
        "judge": args.judge,
        "dataset": ds,
        "draws": args.draws,
        "rows": rows,
        "command": command,
        "mean_inverted_code_norm": float(norms.mean()),
        "torch_threads": torch.get_num_threads(),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    stem = Path(args.out)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(out, indent=1, default=str))

    md = [
        f"# The {args.judge} judge's floor on generated faces",
        "",
        f"Faces: {ds['name']} ({n}), {args.draws} random faces each. Command: `{command}`.",
        "Rates: value [95% Wilson interval] (n = compared pairs; pairs sharing an original are not independent).",
        "",
        "| random faces drawn | original vs random face, same person | two random faces, same person |",
        "|---|---|---|",
        f"| prior code z ~ N(0, I) | {format_entry(rows['prior']['original_vs_random_same_person'])} | {format_entry(rows['prior']['random_pairs_same_person'])} |",
        f"| random direction at the original's inverted code norm (mean {float(norms.mean()):.2f}) | "
        f"{format_entry(rows['at_inverted_norm']['original_vs_random_same_person'])} | {format_entry(rows['at_inverted_norm']['random_pairs_same_person'])} |",
    ]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return out


if __name__ == "__main__":
    main()
