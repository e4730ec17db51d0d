"""Batched throughput of every installed method: aligned faces per second and whole-photo latency.

    python -m benchmarks.batch_speed --threads 2 [--batch 32] [--methods blur,personal,...]

For each method whose weights are here: ``anonymize`` of ``--batch`` aligned faces in one call (the
faces go through the method in batches of ``max_batch``), and of the bundled group photo (every face
detected, aligned, anonymized in one batch, pasted back). Median of ``--repeat`` runs after one warm-up.
Writes ``benchmarks/results/batch_speed_<device>.{json,md}`` with the command and the machine.
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

import torch

import zoo
from zoo.assets import example_images
from zoo.imageio import load_image
from zoo.synthetic import synthetic_faces_uint8

OUT = Path(__file__).resolve().parent / "results"


def _median_seconds(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--methods", help="comma list (default: every method whose weights are here)")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    names = args.methods.split(",") if args.methods else [n for n in zoo.list_methods() if zoo.info(n)["weights_available"]]
    photo_path = example_images()["group"]
    photo, _ = load_image(photo_path)
    rows = []
    for name in names:
        m = zoo.load(name, device=args.device)
        faces = list(synthetic_faces_uint8(args.batch, seed=3, resolution=m.resolution))
        key = "batch speed" if m.uses_key else None
        t_batch = _median_seconds(lambda: m.anonymize(faces, key=key, aligned=True), args.repeat)
        n_faces = len(m.anonymize(photo, key=key).faces)
        t_photo = _median_seconds(lambda: m.anonymize(photo, key=key), args.repeat)
        row = {
            "method": name,
            "resolution": m.resolution,
            "weights": m.weights_text,
            "batch": args.batch,
            "faces_per_s": round(args.batch / t_batch, 2),
            "photo_s": round(t_photo, 3),
            "photo_faces": n_faces,
        }
        rows.append(row)
        print(row, flush=True)

    command = "python -m benchmarks.batch_speed " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    machine = f"{platform.machine()} {platform.processor() or ''}".strip() if args.device == "cpu" else torch.cuda.get_device_name()
    out = {
        "command": command,
        "device": args.device,
        "machine": machine,
        "threads": args.threads,
        "torch": torch.__version__,
        "photo": f"{Path(photo_path).name} ({photo.shape[1]}x{photo.shape[0]})",
        "repeat": args.repeat,
        "rows": rows,
    }
    stem = OUT / f"batch_speed_{args.device}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(out, indent=1))
    md = [
        f"Command: `{command}`; {machine}, {args.threads} torch threads, torch {torch.__version__}; median of {args.repeat} runs after a warm-up.",
        f"Aligned: {args.batch} generated faces in one `anonymize(..., aligned=True)` call. Photo: {out['photo']}, every face detected, anonymized in one batch and pasted back.",
        "",
        "| method | crop px | aligned faces / s | photo (s) | faces in the photo | weights |",
        "|---|---|---|---|---|---|",
    ]
    md += [f"| {r['method']} | {r['resolution']} | {r['faces_per_s']} | {r['photo_s']} | {r['photo_faces']} | {r['weights'] or 'none needed'} |" for r in rows]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    return out


if __name__ == "__main__":
    main()
