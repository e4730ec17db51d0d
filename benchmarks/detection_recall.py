"""Face-detection recall on real photos with known faces, per transform, and time per photo.

    python -m benchmarks.detection_recall [--configs yunet:0,yunet,yunet:2,...] [--threads 2]

A config is ``DETECTOR[:UPSCALE]`` (``DETECTOR`` as ``zoo.detection.detect_faces`` takes it, e.g.
``yunet+centerface``; ``UPSCALE`` 0 = no upscaled pass, none = the default ``zoo.detection.UPSCALE``). Photos and known faces: ``real_photos.py``
(t1, astronaut, camera, crowd = 62 faces); transforms: as taken, turned 90/180/270, mirrored, 0.25x,
grayscale. A known face is found when a detected box lies on it (``real_photos.matches``). Extra
detections (boxes on no known face) are counted too, with those on scikit-image's ``coffee`` (no
face). Writes ``results/detection_recall.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from benchmarks import real_photos as RP
from benchmarks.report import command_line

HERE = Path(__file__).resolve().parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")

DEFAULT_CONFIGS = "yunet:0,yunet,centerface:0,retinaface:0,yunet+centerface:0,yunet+centerface,yunet+retinaface"


def run(configs: list[str], transforms: list[str]) -> dict:
    import cv2
    import torch
    from skimage import data

    from zoo.detection import detect_faces

    photos = RP.photos()
    coffee = np.ascontiguousarray(data.coffee())
    rows = {}
    for cfg in configs:
        det, _, up = cfg.partition(":")
        upscale = float(up) if up else None
        per = {}
        seconds, n_photos, extra = 0.0, 0, 0
        for how in transforms:
            found_n, total = 0, 0
            for name, (rgb, boxes) in photos.items():
                img, truth = RP.transformed(rgb, boxes, how)
                t = time.perf_counter()
                faces = detect_faces(img, det, upscale=upscale)
                seconds += time.perf_counter() - t
                n_photos += 1
                got = np.array([f.box for f in faces]).reshape(-1, 4)
                hit = RP.matches(truth, got)
                found_n += int(hit.sum())
                total += len(truth)
                extra += int((~RP.matches(got, truth)).sum()) if len(got) else 0
            per[how] = {"found": found_n, "faces": total, "recall": round(found_n / total, 4)}
        coffee_faces = len(detect_faces(coffee, det, upscale=upscale))
        found_all = sum(v["found"] for v in per.values())
        total_all = sum(v["faces"] for v in per.values())
        rows[cfg] = {
            "per_transform": per,
            "found": found_all,
            "faces": total_all,
            "recall": round(found_all / total_all, 4),
            "extra_detections": extra,
            "coffee_detections": coffee_faces,
            "seconds_per_photo": round(seconds / n_photos, 3),
            "photos": n_photos,
        }
        print(
            cfg,
            rows[cfg]["recall"],
            {k: v["found"] for k, v in per.items()},
            "extra",
            extra,
            "coffee",
            coffee_faces,
            "s/photo",
            rows[cfg]["seconds_per_photo"],
            flush=True,
        )
    return {
        "photos": {n: len(b) for n, (_, b) in photos.items()},
        "transforms": transforms,
        "configs": rows,
        "threads": torch.get_num_threads(),
        "cv2_threads": cv2.getNumThreads(),
        "cpu": platform.processor() or platform.machine(),
    }


def to_markdown(res: dict) -> str:
    tr = res["transforms"]
    n = sum(res["photos"].values())
    lines = [
        f"# Face-detection recall on real photos ({', '.join(f'{k} {v}' for k, v in res['photos'].items())} = {n} faces per transform)",
        "",
        f"`{res.get('command', 'python -m benchmarks.detection_recall')}`; CPU, {res['threads']} threads. Faces found / {n} per transform.",
        "",
        "| detector:upscale | " + " | ".join(tr) + " | all | extra boxes | coffee | s/photo |",
        "|---|" + "---|" * (len(tr) + 4),
    ]
    for cfg, r in res["configs"].items():
        lines.append(
            f"| `{cfg}` | "
            + " | ".join(str(r["per_transform"][t]["found"]) for t in tr)
            + f" | {r['found']}/{r['faces']} ({100 * r['recall']:.1f}%) | {r['extra_detections']} | {r['coffee_detections']} | {r['seconds_per_photo']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", default=DEFAULT_CONFIGS)
    p.add_argument("--transforms", default=",".join(RP.TRANSFORMS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(HERE / "results" / "detection_recall"))
    args = p.parse_args(argv)
    import cv2
    import torch

    torch.set_num_threads(args.threads)
    cv2.setNumThreads(args.threads)
    res = run([c.strip() for c in args.configs.split(",") if c.strip()], [t.strip() for t in args.transforms.split(",") if t.strip()])
    res = {"command": command_line("benchmarks.detection_recall", argv), **res}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(res, indent=1) + "\n")
    Path(args.out + ".md").write_text(to_markdown(res))
    print(to_markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
