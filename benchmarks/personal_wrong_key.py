"""What a wrong password leaves of the original in `personal`'s closed-form inverse (eq. 16-17), per level.

    python -m benchmarks.personal_wrong_key [--faces 400] [--seed 3]

Latent path only (no judge): unit codes of held-out synthetic faces (``zoo.synthetic.latent_for``), a
random password to anonymize (eq. 13-14, oriented reference) and another to recover. Per level d = 0..9:
mean cosine of the anonymized code to the original, of the wrong-password recovery to the original
(mean +- std), and the smallest cosine of the right-password recovery. Writes
``benchmarks/results/personal_wrong_key.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

OUT = Path(__file__).resolve().parent / "results" / "personal_wrong_key"


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--faces", type=int, default=400)
    p.add_argument("--seed", type=int, default=3)
    args = p.parse_args(argv)
    from zoo import load
    from zoo.methods.personal import orient_reference, rotate_identity, unrotate_direction
    from zoo.synthetic import latent_for

    m = load("personal", device="cpu")
    n = args.faces
    z = F.normalize(torch.stack([latent_for(args.seed, i) for i in range(n)]), dim=1)
    rng = random.Random(args.seed)
    right = m.password_references([f"{rng.randrange(10**6):06d}" for _ in range(n)])
    wrong = m.password_references([f"{rng.randrange(10**6):06d}" for _ in range(n)])
    rows = []
    for level in range(10):
        u = F.normalize(rotate_identity(z, orient_reference(z, right, level), level), dim=1)
        w = unrotate_direction(u, wrong, level, m.overlap_prior, oriented=True)
        r = unrotate_direction(u, right, level, m.overlap_prior, oriented=True)
        cw = (w * z).sum(1)
        rows.append(
            {
                "level": level,
                "anonymized_cosine": float((u * z).sum(1).mean()),
                "wrong_key_cosine_mean": float(cw.mean()),
                "wrong_key_cosine_std": float(cw.std()),
                "right_key_cosine_min": float((r * z).sum(1).min()),
            }
        )
    command = " ".join(["python -m benchmarks.personal_wrong_key", *(argv if argv is not None else sys.argv[1:])])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.with_suffix(".json").write_text(json.dumps({"command": command, "faces": n, "rows": rows}, indent=1))
    md = [
        f"Command: `{command}`; {n} unit latents, one random password to anonymize and another to recover.",
        "",
        "| level d | anonymized . original | wrong-password recovery . original | right-password recovery . original (min) |",
        "|---|---|---|---|",
    ]
    md += [
        f"| {r['level']} | {r['anonymized_cosine']:.3f} | {r['wrong_key_cosine_mean']:.3f} +- {r['wrong_key_cosine_std']:.3f} | {r['right_key_cosine_min']:.4f} |"
        for r in rows
    ]
    OUT.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return rows


if __name__ == "__main__":
    main()
