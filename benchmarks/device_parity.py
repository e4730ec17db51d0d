"""Every method on an accelerator against the CPU: same faces and decisions, close pixels, seconds per photo.

    python -m benchmarks.device_parity --device cuda
    python -m benchmarks.device_parity --device cuda --methods dbaf,personal --photos group.jpg

Each method is loaded twice (``device="cpu"`` and ``--device``) and anonymizes each photo with one fixed key, then
recovers its own output with that key. Per photo and method: the face statuses of both runs (they should agree: a
guard decision that flips between devices is reported, not hidden), the mean and 99th-percentile absolute
difference of the two outputs (uint8 levels) over the whole photo, and the seconds of a warm second call on each
device. The default photo is the bundled astronaut. Writes ``<out>.json`` and ``<out>.md``
(default ``benchmarks/results/device_parity_<device name>``).
"""

from __future__ import annotations

import argparse
import platform
import re
import time
from pathlib import Path

import numpy as np
import torch

import zoo
from benchmarks.report import command_line, write_results
from zoo.assets import ASSETS_DIR

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_METHODS = ("dbaf", "hford", "ifadit", "personal", "ideudemon")
KEYS = {"personal": "042917"}  # personal takes a 6-digit password; the others any secret


def device_name(device: torch.device) -> str:
    """``cpu-...`` or the accelerator's marketing name, lower-case with dashes (for the results file name)."""
    if device.type == "cuda":
        return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(device).lower()).strip("-")
    return re.sub(r"[^a-z0-9]+", "-", (platform.processor() or platform.machine()).lower()).strip("-")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_run(method, operation: str, image, key: str, device: torch.device):
    """(result, seconds) of ``method.<operation>(image, key=key)``, the device synchronized before the clock stops."""
    _synchronize(device)
    start = time.perf_counter()
    result = getattr(method, operation)(image, key=key)
    _synchronize(device)
    return result, time.perf_counter() - start


def pixel_difference(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Mean and 99th-percentile absolute difference of two uint8 images (levels 0-255)."""
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return {"mean": round(float(diff.mean()), 3), "p99": float(np.percentile(diff, 99))}


def compare(name: str, photo: Path, devices: list[torch.device]) -> dict:
    """One method on one photo, on each device: statuses, outputs, warm seconds."""
    key = KEYS.get(name, "device parity key")
    runs = {}
    for device in devices:
        method = zoo.load(name, device=device)
        timed_run(method, "anonymize", photo, key, device)  # warm-up: weights to the device, kernels, caches
        anon, anon_s = timed_run(method, "anonymize", photo, key, device)
        back, back_s = timed_run(method, "recover", np.asarray(anon), key, device)
        runs[device.type] = {
            "anonymized": np.asarray(anon),
            "recovered": np.asarray(back),
            "statuses": [f.status for f in anon.faces],
            "recover_statuses": [f.status for f in back.faces],
            "anonymize_s": round(anon_s, 3),
            "recover_s": round(back_s, 3),
        }
        print(
            f"{name} {photo.name} {device}: {runs[device.type]['statuses']} -> {runs[device.type]['recover_statuses']}, {anon_s:.2f} s + {back_s:.2f} s",
            flush=True,
        )
    cpu, acc = runs["cpu"], runs[devices[-1].type]
    return {
        "method": name,
        "photo": photo.name,
        "faces": len(cpu["statuses"]),
        "statuses_cpu": cpu["statuses"],
        "statuses_device": acc["statuses"],
        "statuses_agree": cpu["statuses"] == acc["statuses"] and cpu["recover_statuses"] == acc["recover_statuses"],
        "anonymized_difference": pixel_difference(cpu["anonymized"], acc["anonymized"]),
        "recovered_difference": pixel_difference(cpu["recovered"], acc["recovered"]),
        "seconds_cpu": {"anonymize": cpu["anonymize_s"], "recover": cpu["recover_s"]},
        "seconds_device": {"anonymize": acc["anonymize_s"], "recover": acc["recover_s"]},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="the accelerator to compare with the CPU")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    p.add_argument("--photos", nargs="+", type=Path, default=[ASSETS_DIR / "astronaut.jpg"], help="photo files")
    p.add_argument("--out", type=Path, default=None, help="results path without suffix")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("device_parity: --device cuda, but torch sees no CUDA device")
    devices = [torch.device("cpu")] + ([device] if device.type != "cpu" else [])
    rows = [compare(name, photo, devices) for name in args.methods.split(",") for photo in args.photos]
    out = args.out or RESULTS / f"device_parity_{device_name(device)}"
    result = {
        "command": command_line("benchmarks.device_parity", argv),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
        "rows": rows,
    }
    lines = [
        f"# The methods on {result['device']} against the CPU",
        "",
        f"`{result['command']}` (torch {torch.__version__}, {result['cpu_threads']} CPU threads)",
        "",
        "Each method anonymizes the photo with one key on both devices, then recovers its own output. Pixel differences: uint8 levels over the whole photo; seconds: a warm second call.",
        "",
        "| method | photo | faces | statuses agree | anonymized diff mean / p99 | recovered diff mean / p99 | anonymize s, CPU / device | recover s, CPU / device |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        a, b = r["anonymized_difference"], r["recovered_difference"]
        lines.append(
            f"| {r['method']} | {r['photo']} | {r['faces']} | {'yes' if r['statuses_agree'] else 'no: ' + str(r['statuses_cpu']) + ' / ' + str(r['statuses_device'])} "
            f"| {a['mean']} / {a['p99']:g} | {b['mean']} / {b['p99']:g} | {r['seconds_cpu']['anonymize']} / {r['seconds_device']['anonymize']} "
            f"| {r['seconds_cpu']['recover']} / {r['seconds_device']['recover']} |"
        )
    write_results(out, result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
