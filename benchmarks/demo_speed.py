"""Seconds per aligned face for the bundled demo checkpoints on this machine (anonymize and recover).

    python -m benchmarks.demo_speed --threads 2 --methods personal,ifadit
    python -m benchmarks.demo_speed --settings "" identity_refine=0 identity_check=1

One 64 px generated face through ``anonymize(..., aligned=True)`` and ``recover``, once per ``--settings``
entry (controls as NAME=VALUE,...; "" = the defaults: 20 refinement steps, and the identity-aware
re-inversion only where SFace finds the pixel fit far, which a generated face is not; ``identity_check=1``
forces it, the cost a real face pays), median of ``--repeat`` runs
after one warm-up; writes ``benchmarks/results/demo_speed_cpu.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

import zoo
from training.evaluate import parse_controls
from zoo.synthetic import synthetic_faces_uint8

OUT = Path(__file__).resolve().parent / "results" / "demo_speed_cpu"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--methods", default="personal,ifadit")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--settings", nargs="+", default=[""], help='controls per row, "NAME=VALUE,..." ("" = defaults)')
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    face = synthetic_faces_uint8(1, seed=1, offset=10**9)[0]
    rows = []
    for name in args.methods.split(","):
        m = zoo.load(name, device="cpu")
        key = "042917" if name == "personal" else "speed key"
        for setting in args.settings:
            controls = parse_controls(setting.split(","))
            times = {"anonymize": [], "recover": []}
            anon = np.asarray(m.anonymize(face, key=key, aligned=True, **controls))  # warm-up
            for _ in range(args.repeat):
                t = time.perf_counter()
                anon = np.asarray(m.anonymize(face, key=key, aligned=True, **controls))
                times["anonymize"].append(time.perf_counter() - t)
                t = time.perf_counter()
                m.recover(anon, key=key, aligned=True, **controls)
                times["recover"].append(time.perf_counter() - t)
            rows.append({"method": name, "controls": controls, **{k: round(statistics.median(v), 3) for k, v in times.items()}, "weights": m.weights.label})
            print(rows[-1], flush=True)
    cmd = ("python -m benchmarks.demo_speed " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))).strip()
    machine = f"{platform.processor() or platform.machine()}, {args.threads} torch threads, torch {torch.__version__}"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.with_suffix(".json").write_text(json.dumps({"command": cmd, "machine": machine, "rows": rows}, indent=1))
    md = [
        f"Command: `{cmd}`; {machine}; median of {args.repeat} runs, one aligned 64 px face (privacy guard on, the default).",
        "",
        "| method | controls | anonymize (s) | recover (s) |",
        "|---|---|---|---|",
    ]
    md += [f"| {r['method']} | {', '.join(f'{k}={v:g}' for k, v in r['controls'].items()) or 'defaults'} | {r['anonymize']} | {r['recover']} |" for r in rows]
    OUT.with_suffix(".md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
