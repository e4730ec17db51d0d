"""A stage's generator losses on held-out batches, per checkpoint (training analysis; moved out of the
library so that ``zoo`` never imports ``training``).

    python -m training.stage_losses --method dbaf --config C --stage 2 --model stage1/model stage2/model
"""

from __future__ import annotations

import argparse
import json

import torch

from training.data import build_source
from training.train import load_config, load_init, resolve_method_class


def stage_losses(
    cls: type,
    config: str | dict,
    stage: int,
    model_dir: str,
    batches: int = 8,
    batch_size: int | None = None,
    seed: int = 1234,
) -> dict[str, float]:
    """Mean of every logged generator-loss term of ``stage`` over ``batches`` batches, for the
    checkpoint in ``model_dir`` (loaded into ``cls.from_config(config)``, components in eval mode).

    Keys and batches are the same for every checkpoint (seeded), so two checkpoints (e.g. the start and
    the end of stage 2) are compared on equal terms. With synthetic data the faces are held out (another
    face seed); folder / Hub data are read as configured.
    """
    cfg = load_config(config)
    method = cls.from_config(cfg)
    load_init(method, model_dir)
    method.to("cpu")
    for comp in method.components.values():
        comp.eval()
    bs = int(batch_size or cfg["stages"][stage].get("batch_size", 4))
    data = dict(cfg.get("data") or {"source": "synthetic"})
    if data.get("source", "synthetic") == "synthetic":  # held-out faces: another face seed, unbounded set
        data = {"source": "synthetic", "seed": int(data.get("seed", 0)) + 1_000_003, "size": None}
    source = build_source(data, int(cfg["resolution"]), int(cfg.get("seed", 0)))
    totals: dict[str, float] = {}
    for b in range(batches):
        batch = source.batch([b * bs + j for j in range(bs)])
        method.train_generator = torch.Generator().manual_seed(seed + b)
        _, logs = method.compute_losses(stage, "g", batch, step=1)
        for k, v in logs.items():
            totals[k] = totals.get(k, 0.0) + v / batches
    return totals


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m training.stage_losses", description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", required=True, help="zoo name (dbaf, hford, ...) or module:Class")
    ap.add_argument("--config", required=True)
    ap.add_argument("--stage", type=int, required=True)
    ap.add_argument("--model", nargs="+", required=True, help="checkpoint folder(s), e.g. stage1/model stage2/model")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch-size", type=int)
    args = ap.parse_args(argv)
    cls = resolve_method_class(args.method)
    rows = {m: stage_losses(cls, args.config, args.stage, m, args.batches, args.batch_size) for m in args.model}
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
