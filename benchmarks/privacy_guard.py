"""The privacy guard (zoo.guard) on real photos: faces dlib still matches, with and without the guard.

For every demo method and every face of the packaged photos (insightface's group photo, the astronaut),
anonymize with ``--keys`` different keys, once with the guard off and once with it on (the default),
and judge each face at its original place with dlib (the independent judge; the guard uses SFace only).
Reports per method: faces dlib matches (distance < 0.6) without / with the guard, faces the guard
re-keyed (a variant other than 0 kept), faces it blurred, the mean dlib distance, and seconds per photo.

    python benchmarks/privacy_guard.py                      # -> benchmarks/results/privacy_guard_cpu.{md,json}
    python benchmarks/privacy_guard.py --methods dbaf --keys 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np


def run(methods: list[str], n_keys: int, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    import zoo
    from zoo.assets import example_images
    from zoo.imageio import load_image
    from zoo.judges import embed_at_original_places, get_judge
    from zoo.pipeline import detect_faces

    dlib = get_judge("dlib")
    ex = example_images()
    photos = [ex[k] for k in ("group", "astronaut") if k in ex]
    loaded = []
    for p in photos:
        rgb, _ = load_image(p)
        faces = detect_faces(rgb)
        loaded.append((Path(p).name, rgb, faces, dlib.embed_photo_faces(rgb, faces)))
    rows = {}
    for name in methods:
        m = zoo.load(name)
        dist = {"off": [], "on": []}
        seconds = {"off": [], "on": []}
        rekeyed = blurred = 0
        for k in range(n_keys):
            key = f"guard benchmark key {k}"
            for _, rgb, faces, e0 in loaded:
                for mode in ("off", "on"):
                    t0 = time.perf_counter()
                    out = m.anonymize(rgb, key=key, privacy_guard=(mode == "on"))
                    seconds[mode].append(time.perf_counter() - t0)
                    arr = np.asarray(out)
                    dist[mode] += dlib.distance(e0, embed_at_original_places(dlib, rgb, arr, faces)).tolist()
                    if mode == "on":
                        rekeyed += sum(1 for f in out.faces if f.guard and f.guard["variant"] > 0)
                        blurred += sum(1 for f in out.faces if f.status == "guard_blur")
        n = len(dist["on"])
        rows[name] = {
            "face_keys": n,
            "matched_without_guard": int(sum(d < dlib.threshold for d in dist["off"])),
            "matched_with_guard": int(sum(d < dlib.threshold for d in dist["on"])),
            "rekeyed": rekeyed,
            "blurred": blurred,
            "mean_dlib_distance_without": round(float(np.mean(dist["off"])), 4),
            "mean_dlib_distance_with": round(float(np.mean(dist["on"])), 4),
            "min_dlib_distance_without": round(float(np.min(dist["off"])), 4),
            "min_dlib_distance_with": round(float(np.min(dist["on"])), 4),
            "seconds_per_photo_without": round(float(np.mean(seconds["off"])), 3),
            "seconds_per_photo_with": round(float(np.mean(seconds["on"])), 3),
        }
        print(name, rows[name], flush=True)
    return {"photos": [p[0] for p in loaded], "faces_per_key": sum(len(p[2]) for p in loaded), "keys": n_keys, "methods": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="personal,ifadit,dbaf,hford")
    ap.add_argument("--keys", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/results/privacy_guard_cpu")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result = run([m.strip() for m in args.methods.split(",") if m.strip()], args.keys, args.threads)
    result["command"] = "python benchmarks/privacy_guard.py " + " ".join(argv if argv is not None else sys.argv[1:])
    result["machine"] = f"{platform.processor() or platform.machine()}, {args.threads} thread(s)"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    lines = [
        "# Privacy guard on real photos (dlib judge at 0.6, faces at their original places)",
        "",
        f"Command: `{result['command'].strip()}`; machine: {result['machine']}.",
        f"Photos: {', '.join(result['photos'])} ({result['faces_per_key']} faces) x {result['keys']} keys per method.",
        "",
        "| method | face-keys | dlib matched, guard off | dlib matched, guard on | re-keyed | blurred | mean dlib distance off / on | min off / on | s per photo off / on |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in result["methods"].items():
        lines.append(
            f"| {name} | {r['face_keys']} | {r['matched_without_guard']} | {r['matched_with_guard']} | {r['rekeyed']} | {r['blurred']} | "
            f"{r['mean_dlib_distance_without']:.3f} / {r['mean_dlib_distance_with']:.3f} | {r['min_dlib_distance_without']:.3f} / {r['min_dlib_distance_with']:.3f} | "
            f"{r['seconds_per_photo_without']:.2f} / {r['seconds_per_photo_with']:.2f} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
