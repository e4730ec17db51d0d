"""What the privacy guard costs: each recognizer per face, and the whole guard per face for a method at its defaults.

* recognizer per face: ``judge.embed_photo_faces`` on one face of a photo (alignment, crop and network), median of
  ``--repeats`` runs after a warm-up; FaceRes also as a batch of 8 aligned crops (per face);
* the guard per face: ``method.anonymize`` on the tuning photo (t1, 6 faces) with the guard on minus off, divided by
  the faces, median of ``--repeats`` runs each (a guard that re-keys a face pays for that variant too).

    python -m benchmarks.guard_cost [--methods personal,dbaf] [--repeats 5]   # -> results/guard_cost_cpu.{json,md}
    python -m benchmarks.guard_cost --methods "" --out benchmarks/results/guard_cost_recognizers_cpu   # recognizers only
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

import numpy as np

from benchmarks.report import command_line, run_seconds, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
OUT = Path(__file__).resolve().parent / "results" / "guard_cost_cpu"


def _median_seconds(fn, repeats: int) -> float:
    return float(np.median(run_seconds(fn, repeats)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", default="personal,dbaf")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)

    import torch

    import zoo
    from benchmarks.real_photos import package_file, read_image
    from zoo.alignment import align_face
    from zoo.detection import detect_faces
    from zoo.judges import get_judge

    torch.set_num_threads(a.threads)
    t1 = read_image(package_file("insightface", "data", "images", "t1.jpg"))
    faces = detect_faces(t1)
    crops = np.stack([align_face(t1, f.landmarks, 256).crop for f in faces[:6]] * 2)[:8]
    result: dict = {
        "command": command_line("benchmarks.guard_cost", argv),
        "cpu": platform.processor() or platform.machine(),
        "threads": a.threads,
        "recognizer_ms_per_face": {},
        "guard_ms_per_face": {},
    }
    for name in ("faceres", "mobileface", "sface"):
        j = get_judge(name)
        result["recognizer_ms_per_face"][name] = round(1000 * _median_seconds(lambda j=j: j.embed_photo_faces(t1, faces[:1]), a.repeats * 4), 1)
    fr = get_judge("faceres")
    result["recognizer_ms_per_face"]["faceres_batch8"] = round(1000 * _median_seconds(lambda: fr.embed_aligned(crops), a.repeats) / 8, 1)
    for m in [m for m in a.methods.split(",") if m]:
        method = zoo.load(m)
        kw = {"key": "guard cost"} if method.uses_key else {}
        on = _median_seconds(lambda method=method, kw=kw: method.anonymize(t1, **kw), a.repeats)
        off = _median_seconds(lambda method=method, kw=kw: method.anonymize(t1, privacy_guard=False, **kw), a.repeats)
        out = method.anonymize(t1, **kw)
        result["guard_ms_per_face"][m] = {
            "faces": len(out.faces),
            "anonymize_s_guard_on": round(on, 2),
            "anonymize_s_guard_off": round(off, 2),
            "guard_ms_per_face": round(1000 * (on - off) / max(len(out.faces), 1), 1),
            "faces_rekeyed": sum(1 for f in out.faces if f.guard and f.guard["variant"] > 0),
        }
    r = result["recognizer_ms_per_face"]
    lines = [
        "# Privacy guard cost (CPU)",
        "",
        f"`{result['command']}` ({result['cpu']}, {a.threads} threads; medians)",
        "",
        "| recognizer | ms per face |",
        "|---|---|",
        f"| FaceRes (align, crop 192, resize 224, MobileNet) | {r['faceres']} |",
        f"| FaceRes, batch of 8 aligned crops | {r['faceres_batch8']} |",
        f"| MobileFace (ArcFace 112 px warp, MobileNet) | {r['mobileface']} |",
        f"| SFace (OpenCV) | {r['sface']} |",
        "",
        "| method (t1, defaults) | faces | anonymize, guard on (s) | guard off (s) | guard per face (ms) | faces re-keyed |",
        "|---|---|---|---|---|---|",
    ]
    for m, e in result["guard_ms_per_face"].items():
        lines.append(f"| {m} | {e['faces']} | {e['anonymize_s_guard_on']} | {e['anonymize_s_guard_off']} | {e['guard_ms_per_face']} | {e['faces_rekeyed']} |")
    write_results(a.out, result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
