"""What compositing costs per face: :func:`zoo.compositing.composite_face` on the packaged real photos.

    python -m benchmarks.compositing_cost [--repeat 5] [--blend feather|poisson]

Every face of the packaged photos (:data:`benchmarks.real_photos.REAL_PHOTOS`) gets a 256 px aligned crop (the
face's own crop, colour-shifted, standing in for a method's output) composited back: face mesh, mask, colour,
grain, blend. Reports the median milliseconds per face over ``--repeat`` runs, the torch/OpenCV thread count and
which mask each face got; and the same for another face drawn at that place through the face's
:func:`~zoo.compositing.plan_region` made once (``planned_ms``: what each of the privacy guard's candidates costs,
:class:`zoo.composer.PhotoComposer`). Goal: at most 50 ms per face on 2 cores. Writes
``benchmarks/results/compositing_cost[_poisson].{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import cv2
import numpy as np

from benchmarks.real_photos import packaged_photos
from benchmarks.report import command_line, write_results
from zoo.alignment import align_face
from zoo.compositing import composite_face, plan_region
from zoo.detection import detect_faces

OUT = Path(__file__).resolve().parent / "results" / "compositing_cost"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--blend", default="feather", choices=["feather", "poisson"])
    args = ap.parse_args(argv)

    rows = []
    for name, split, rgb in packaged_photos():
        for i, face in enumerate(detect_faces(rgb)):
            al = align_face(rgb, face.landmarks, 256)
            new = np.clip(al.crop.astype(np.int16) + np.array([25, -10, -25], np.int16), 0, 255).astype(np.uint8)
            composite_face(rgb, rgb, new, al.matrix, face.landmarks, blend_mode=args.blend)  # warm-up (mesh model load)
            times, planned = [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                _, info = composite_face(rgb, rgb, new, al.matrix, face.landmarks, blend_mode=args.blend)
                times.append(time.perf_counter() - t0)
            plan, other = plan_region(rgb, al.matrix, face.landmarks, 256), np.ascontiguousarray(new[:, ::-1])  # another candidate
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                composite_face(rgb, rgb, other, al.matrix, face.landmarks, blend_mode=args.blend, plan=plan)
                planned.append(time.perf_counter() - t0)
            rows.append(
                {
                    "photo": name,
                    "split": split,
                    "face": i,
                    "face_px": round(float(face.width), 1),
                    "ms": round(1000 * statistics.median(times), 2),
                    "planned_ms": round(1000 * statistics.median(planned), 2),
                    "mask": info.mask,
                    "sharpness": info.sharpness,
                }
            )
            print(rows[-1], flush=True)
    ms = [r["ms"] for r in rows]
    result = {
        "command": command_line("benchmarks.compositing_cost", argv),
        "cpu_threads": cv2.getNumThreads(),
        "cpus": os.cpu_count(),
        "blend": args.blend,
        "faces": len(rows),
        "median_ms": round(statistics.median(ms), 2) if ms else None,
        "max_ms": round(max(ms), 2) if ms else None,
        "planned_median_ms": round(statistics.median(r["planned_ms"] for r in rows), 2) if rows else None,
        "goal_ms": 50,
        "rows": rows,
    }
    md = [
        f"# Compositing cost per face ({args.blend} blend)",
        "",
        f"`{result['command']}` on {result['cpus']} CPUs (OpenCV threads {result['cpu_threads']}): {len(rows)} faces, "
        f"median {result['median_ms']} ms, max {result['max_ms']} ms per face (goal <= 50). Another face composited at"
        f" the same place through the face's region plan (each of the privacy guard's candidates): median"
        f" {result['planned_median_ms']} ms.",
        "",
        "| photo | face | face width (px) | ms | again, planned (ms) | mask | sharpness step |",
        "|---|---|---|---|---|---|---|",
        *[f"| {r['photo']} | {r['face']} | {r['face_px']} | {r['ms']} | {r['planned_ms']} | {r['mask']} | {r['sharpness']} |" for r in rows],
    ]
    write_results(OUT.with_name(OUT.name + ("" if args.blend == "feather" else "_poisson")), result, md)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
