"""Train the W+ encoder of :mod:`zoo.encoder` on the FFHQ-grade generator's own samples.

Data: styles from :func:`training.mobilestylegan_heads.sample_wplus` (truncated w's, style-mixed, jittered per
slot: inverted codes are W+, not one w), each drawn at 256 px through the generator's 256 px head and kept as
(uint8 image ``[3,256,256]``, fp16 W+ ``[23,512]``) in resumable shards.

    python -m training.wplus_encoder data --n 4096 --out runs/encoder/data          # resumable shards
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from zoo.nn.mobilestylegan import load_mobilestylegan

__all__ = ["make_shards", "main"]

SHARD_SIZE = 64
RENDER_BATCH = 8


def make_shards(out: Path, n: int, seed: int = 0) -> None:
    """Write ``shard_XXXX.safetensors`` (``image`` uint8 [64,3,256,256], ``wplus`` fp16 [64,23,512]) until ``n``
    samples exist; shard ``i`` is drawn from seed ``(seed, i)``, so a rerun continues where it stopped."""
    from training.mobilestylegan_heads import sample_wplus

    out.mkdir(parents=True, exist_ok=True)
    model = load_mobilestylegan("cpu")
    for i in range((n + SHARD_SIZE - 1) // SHARD_SIZE):
        path = out / f"shard_{i:04d}.safetensors"
        if path.exists():
            continue
        t0 = time.time()
        rng = np.random.default_rng([seed, i])
        with torch.no_grad():
            wplus = sample_wplus(model, SHARD_SIZE, rng)
            images = torch.cat([model.synthesis(wplus[j : j + RENDER_BATCH], size=256) for j in range(0, SHARD_SIZE, RENDER_BATCH)])
        image_u8 = ((images.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
        tmp = path.with_suffix(".tmp")
        save_file({"image": image_u8.contiguous(), "wplus": wplus.half().contiguous()}, str(tmp))
        tmp.rename(path)
        print(f"{path.name}: {time.time() - t0:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data", help="generator samples -> resumable shards")
    d.add_argument("--n", type=int, default=4096)
    d.add_argument("--out", type=Path, default=Path("runs/encoder/data"))
    d.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.cmd == "data":
        make_shards(a.out, a.n, a.seed)


if __name__ == "__main__":
    main()
