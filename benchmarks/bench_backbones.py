"""Throughput of the shared backbones: StyleGAN2-256 generator and the e4e encoder (images/s).

For every model x batch x dtype x mode it times forward passes under ``torch.inference_mode``:

* models: ``stylegan2`` (``zoo.nn.stylegan2.Generator(256)``, config-f, ``synthesize`` of a random
  W+ with the stored noise; ``--modconv`` picks the grouped (rosinality default) or the
  activation-modulated ModulatedConv2d path) and ``e4e`` (``zoo.nn.psp.Encoder4Editing()``, IR-SE50,
  256 px input; skipped with a message when that module is not there);
* batches: 1 and 32 (``--batches``); dtypes: fp32 and bf16 (autocast); modes: eager and
  ``torch.compile`` (a compile failure is recorded and the run goes on).

Weights are random (throughput does not depend on them), so it runs offline. Results go to
``benchmarks/results/<device-name>.json`` and ``.md``.

    python -m benchmarks.bench_backbones                 # CUDA if available, else CPU
    python -m benchmarks.bench_backbones --quick         # CPU-friendly: 1 timed iteration
    python -m benchmarks.bench_backbones --device cpu --batches 1 --modes eager
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

import torch

from benchmarks.report import cpu_name

ROOT = Path(__file__).resolve().parents[1]


QUICK_NOTE = (
    " (quick: no warmup; batch < 8: one call, then 1 timed iteration; batch >= 8: the single first call is timed; torch.compile only at the smallest batch)"
)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"cpu-{torch.get_num_threads()}threads-{cpu_name()}"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_stylegan2(device: torch.device, modconv: str) -> tuple[torch.nn.Module, Callable, Callable[[int], Any]]:
    from zoo.nn.stylegan2 import Generator, ModulatedConv2d

    g = Generator(256).eval().to(device)
    for m in g.modules():
        if isinstance(m, ModulatedConv2d):
            m.fused = modconv == "grouped"

    def make_input(batch: int) -> torch.Tensor:
        return torch.randn(batch, g.n_latent, g.style_dim, device=device)

    return g, g.synthesize, make_input


def build_e4e(device: torch.device) -> tuple[torch.nn.Module, Callable, Callable[[int], Any]]:
    from zoo.nn.psp import Encoder4Editing  # written by another helper; may be absent

    enc = Encoder4Editing().eval().to(device)

    def make_input(batch: int) -> torch.Tensor:
        return torch.rand(batch, 3, 256, 256, device=device) * 2 - 1

    return enc, enc.forward, make_input


def time_case(
    fn: Callable,
    make_input: Callable[[int], Any],
    batch: int,
    dtype: str,
    mode: str,
    device: torch.device,
    warmup: int,
    iters: int,
) -> dict[str, Any]:
    row: dict[str, Any] = {"batch": batch, "dtype": dtype, "mode": mode}
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bf16" else nullcontext()
    run = fn
    if mode == "compile":
        torch._dynamo.reset()
        run = torch.compile(fn)
    x = make_input(batch)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        with torch.inference_mode(), autocast:
            t0 = time.perf_counter()
            run(x)  # first call: compilation (compile mode) / allocator and kernel selection
            _sync(device)
            row["first_call_s"] = round(time.perf_counter() - t0, 3)
            if iters == 0:  # quick mode at a large batch: the first call is the measurement
                dt, iters = row["first_call_s"], 1
                row["note"] = "first call timed"
            else:
                for _ in range(warmup):
                    run(x)
                _sync(device)
                t0 = time.perf_counter()
                for _ in range(iters):
                    run(x)
                _sync(device)
                dt = time.perf_counter() - t0
    except Exception as err:  # noqa: BLE001 - compile on an unsupported platform, OOM, ...: reported in the row
        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return row
    row.update(
        iters=iters,
        ms_per_batch=round(1000 * dt / iters, 2),
        images_per_s=round(batch * iters / dt, 2),
    )
    if device.type == "cuda":
        row["peak_mem_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return row


def to_markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Backbone throughput on {report['device']}",
        "",
        f"torch {report['torch']}, {report['date']}, warmup {report['warmup']}, iters {report['iters']}{QUICK_NOTE if report['quick'] else ''}.",
        "Command: `" + report["command"] + "`",
        "",
        "| model | batch | dtype | mode | images/s | ms/batch | first call s | peak GiB | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        lines.append(
            f"| {r['model']} | {r.get('batch', '')} | {r.get('dtype', '')} | {r.get('mode', '')} | "
            f"{r.get('images_per_s', '')} | {r.get('ms_per_batch', '')} | {r.get('first_call_s', '')} | "
            f"{r.get('peak_mem_gib', '')} | {r.get('error', r.get('note', ''))} |"
        )
    for note in report["notes"]:
        lines.append(f"\n{note}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--models", default="stylegan2,e4e")
    p.add_argument("--batches", default="1,32")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--modconv", default=None, help="grouped,activations (default: both on CUDA, grouped on CPU)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--quick", action="store_true", help=QUICK_NOTE.strip(" ()"))
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)

    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    modconvs = (args.modconv or ("grouped,activations" if device.type == "cuda" else "grouped")).split(",")
    batches = [int(b) for b in args.batches.split(",")]
    name = device_name(device)
    report: dict[str, Any] = {
        "device": name,
        "torch": torch.__version__,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": args.quick,
        "warmup": 0 if args.quick else args.warmup,
        "iters": "quick" if args.quick else args.iters,
        "command": "python -m benchmarks.bench_backbones " + " ".join(argv if argv is not None else sys.argv[1:]),
        "notes": [
            "Random weights; TF32 allowed on CUDA. stylegan2 = Generator(256) config-f synthesize(W+) with "
            "const noise; e4e = Encoder4Editing() IR-SE50 forward on 256x256. images/s = batch * iters / time."
        ],
        "results": [],
    }

    builders: dict[str, Callable[[], tuple]] = {}
    for model in args.models.split(","):
        if model == "stylegan2":
            for mc in modconvs:
                builders[f"stylegan2-256 ({mc})"] = lambda mc=mc: build_stylegan2(device, mc)
        elif model == "e4e":
            builders["e4e-256"] = lambda: build_e4e(device)
        else:
            raise SystemExit(f"unknown model {model!r}")

    for label, build in builders.items():
        try:
            module, fn, make_input = build()
        except Exception as err:  # noqa: BLE001 - a backbone that cannot be built here is reported as skipped
            msg = f"skipped: {type(err).__name__}: {err}"
            print(f"[{label}] {msg}", flush=True)
            report["results"].append({"model": label, "note": msg})
            if not isinstance(err, ImportError):
                traceback.print_exc()
            continue
        n_params = sum(p.numel() for p in module.parameters())
        for mode in args.modes.split(","):
            for dtype in args.dtypes.split(","):
                for batch in batches:
                    warmup = 0 if args.quick else args.warmup
                    iters = (1 if batch < 8 else 0) if args.quick else args.iters
                    if args.quick and mode == "compile" and batch != min(batches):
                        continue
                    row = {"model": label, "params": n_params}
                    row.update(time_case(fn, make_input, batch, dtype, mode, device, warmup, iters))
                    print(json.dumps(row), flush=True)
                    report["results"].append(row)
        del module, fn
        if device.type == "cuda":
            torch.cuda.empty_cache()

    if device.type == "cpu" and hasattr(os, "getloadavg"):
        report["notes"].append(
            f"CPU load average (1/5/15 min) at the end: {', '.join(f'{v:.1f}' for v in os.getloadavg())} "
            f"on {os.cpu_count()} cores; other jobs sharing the machine slow every number down."
        )
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out_dir / f"{name}.md").write_text(to_markdown(report))
    print(f"wrote {out_dir / (name + '.json')} and .md")
    return report


if __name__ == "__main__":
    main()
