"""How well the demo backbone re-encodes its own faces: dlib same person, image L1 and latent cosine.

    python -m benchmarks.inversion --encoder outputs/dcgan_encoder/stage2/model/encoder --n 48 --steps 0,20,60

Held-out generated faces (seed 1, indices from 10^9), rounded to 8 bits; writes
``benchmarks/results/inversion_cpu.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from zoo.imageio import from_tensor
from zoo.judges import get_judge
from zoo.nn.dcgan import DCGANGenerator, InversionEncoder, invert
from zoo.synthetic import latent_for

OUT = Path(__file__).resolve().parent / "results" / "inversion_cpu"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--encoder", default=None, help="InversionEncoder folder (default: the bundled personal demo's)")
    p.add_argument("--n", type=int, default=48)
    p.add_argument("--steps", default="0,20,60")
    args = p.parse_args(argv)
    folder = args.encoder or str(Path(__file__).resolve().parents[1] / "zoo" / "weights" / "shared" / "dcgan_encoder")
    enc = InversionEncoder.from_pretrained(folder).float().eval()
    g = DCGANGenerator()
    z = torch.stack([latent_for(1, 10**9 + i) for i in range(args.n)])
    with torch.no_grad():
        x = torch.round((g(z).clamp(-1, 1) + 1) * 127.5) / 127.5 - 1
    dlib = get_judge("dlib")
    e0 = dlib.embed_aligned(from_tensor(x))
    rows = []
    for steps in [int(s) for s in args.steps.split(",")]:
        t = time.perf_counter()
        zh = invert(g, enc, x, steps)
        with torch.no_grad():
            y = g(zh)
        same = dlib.same_person(e0, dlib.embed_aligned(from_tensor(y)))
        rows.append(
            {
                "refine_steps": steps,
                "n": args.n,
                "dlib_same_person": float(same.mean()),
                "image_l1": float((y - x).abs().mean()),
                "latent_cosine": float(F.cosine_similarity(zh, z).mean()),
                "seconds": round(time.perf_counter() - t, 1),
            }
        )
        print(rows[-1], flush=True)
    cmd = "python -m benchmarks.inversion " + " ".join(sys.argv[1:] if argv is None else argv)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.with_suffix(".json").write_text(json.dumps({"command": cmd, "encoder": folder, "rows": rows}, indent=1))
    md = [
        f"Command: `{cmd}` (torch threads {torch.get_num_threads()})",
        "",
        "| refine steps | dlib same person | image L1 | latent cosine | seconds |",
        "|---|---|---|---|---|",
    ]
    md += [
        f"| {r['refine_steps']} | {r['dlib_same_person']:.3f} (n={r['n']}) | {r['image_l1']:.3f} | {r['latent_cosine']:.3f} | {r['seconds']} |" for r in rows
    ]
    OUT.with_suffix(".md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
