"""Writing a benchmark's results: ``<out>.json`` (the numbers) and ``<out>.md`` (the table people read)."""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path


def command_line(module: str, argv: list[str] | None) -> str:
    """The command that reproduces a run: ``python -m <module> <args>`` (``argv`` None: this process's own)."""
    return f"python -m {module} " + shlex.join(sys.argv[1:] if argv is None else argv)


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` says."""
    import platform

    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine() or "cpu"


def run_seconds(fn: Callable[[], object], repeat: int) -> list[float]:
    """Wall seconds of each of ``repeat`` calls of ``fn``, after one untimed warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def add_control_option(parser) -> None:
    """``--control NAME=VALUE`` / ``-c`` (repeatable): a method control for every run, as ``zoo anonymize -c`` takes it
    (read with :func:`method_controls`)."""
    parser.add_argument(
        "--control", "-c", action="append", default=None, metavar="NAME=VALUE", help="a method control for every run, e.g. -c refine_steps=40 -c face_fit=3"
    )


def method_controls(args) -> dict[str, str]:
    """The ``--control`` values of :func:`add_control_option` as {name: value} (the method validates them)."""
    from zoo.cli_args import CLIError, parse_controls

    try:
        return parse_controls(args.control)
    except CLIError as e:
        raise SystemExit(str(e)) from None


def write_results(out: Path, result: dict, markdown_lines: list[str]) -> None:
    """``out.json`` from ``result`` and ``out.md`` from ``markdown_lines``, folders made as needed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text("\n".join(markdown_lines) + "\n")


def rows_not_run(before_methods: dict, rows_key: str, methods_run, photos_run) -> dict[str, list[dict]]:
    """For ``--add`` (one results file built over several runs): from a results file's ``methods`` (method -> entry
    holding face rows under ``rows_key``), each method's rows that this run does not redo: all of them for a method
    not in ``methods_run``, else those of photos not in ``photos_run``."""
    return {m: [r for r in per[rows_key] if m not in methods_run or r["photo"] not in photos_run] for m, per in before_methods.items()}


def rate(k: int, n: int) -> dict:
    """k of n with its 95% Wilson interval, as the results files write it."""
    from training.evaluate import wilson_interval

    lo, hi = wilson_interval(k, n)
    return {"k": k, "n": n, "rate": round(k / n, 3) if n else None, "95ci": [round(lo, 3), round(hi, 3)]}


def rate_text(r: dict, digits: int | None = None) -> str:
    """A :func:`rate` as the results tables write it: ``k/n [lo, hi]``, the interval's ends as stored or, with
    ``digits``, to that many decimal places."""
    interval = r["95ci"] if digits is None else f"[{r['95ci'][0]:.{digits}f}, {r['95ci'][1]:.{digits}f}]"
    return f"{r['k']}/{r['n']} {interval}"
