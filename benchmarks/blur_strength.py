"""How much of a face the fail-closed blur leaves: every known face of the real photos hard-blurred
(:func:`zoo.paste.blur_face`) at several strengths, then judged at its place against the unblurred photo.

The fail-closed blur is what the tool returns for a face it cannot vouch for (the guard's ``guard_blur``, a face too
small to verify, a face no method could process), so it must leave as little as possible that a recognizer can use.
The strength is chosen on the **tuning** photos with the guard's recognizers only: the fewest faces any of SFace,
FaceRes, MobileFace still recognizes at the guard's blur lines, ties broken by the larger smallest per-recognizer
median distance. dlib (never used by the tool) judges both splits, and the held-out photos are reported beside them.

Strength = pixelation cells across the face before the Gaussian (:data:`zoo.paste.BLUR_CELLS`); fewer cells, less left.
Faces under 20 px (box side), and known faces the zoo's detector does not find on the photo, are left out (as
:mod:`benchmarks.fail_closed` leaves them unjudged).

    python -m benchmarks.blur_strength [--cells 6,4,3,2,1] [--photos t1,biden,...]   # -> results/blur_strength.{json,md}
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from benchmarks import real_photos as RP
from benchmarks.fail_closed import MIN_JUDGED, judge_places
from benchmarks.report import command_line, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
OUT = Path(__file__).resolve().parent / "results" / "blur_strength"
JUDGES = ("sface", "faceres", "mobileface", "dlib")  # the guard's recognizers (zoo.guard.RECOGNIZERS), then the judge


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", default="6,4,3,2,1")
    p.add_argument("--photos", default=",".join(RP.REAL_PHOTOS))
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)

    from training.evaluate import wilson_interval
    from zoo.guard import RECOGNIZERS, guard_for
    from zoo.judges import embed_at_original_places, get_judge
    from zoo.paste import blur_face

    guard = guard_for()
    judges = {name: get_judge(name) for name in JUDGES}
    floors = dict(zip(RECOGNIZERS, guard.floors))
    strengths = [float(c) for c in a.cells.split(",")]
    rows: list[dict] = []
    t0 = time.time()
    for name, (rgb, boxes) in RP.photos(a.photos.split(",")).items():
        faces = judge_places(rgb, boxes)
        judged = [(i, f) for i, (b, f) in enumerate(zip(boxes, faces)) if f is not None and max(b[2] - b[0], b[3] - b[1]) >= MIN_JUDGED]
        if not judged:
            continue
        ref = {j: judges[j].embed_photo_faces(rgb, [f for _, f in judged]) for j in JUDGES}
        for cells in strengths:
            got = {j: [] for j in JUDGES}
            for _, f in judged:  # one face blurred at a time: its neighbours stay as taken
                out = blur_face(rgb, f, cells=cells)
                for j in JUDGES:
                    got[j].append(embed_at_original_places(judges[j], rgb, out, [f])[0])
            dist = {j: judges[j].distance(ref[j], np.stack(got[j])) for j in JUDGES}
            for k, (i, _) in enumerate(judged):
                rows.append({"photo": name, "face": i, "split": RP.split_of(name), "cells": cells, **{j: round(float(dist[j][k]), 4) for j in JUDGES}})
        print(name, f"{time.time() - t0:.0f}s", flush=True)

    summary: dict = {}
    for split in ("tuning", "held-out"):
        for cells in strengths:
            rs = [r for r in rows if r["split"] == split and r["cells"] == cells]
            if not rs:
                continue
            n = len(rs)
            recognized = sum(any(r[j] < floors[j] for j in floors) for r in rs)
            dlib_hits = sum(r["dlib"] < judges["dlib"].distance_threshold for r in rs)
            summary[f"{split}:{cells:g}"] = {
                "faces": n,
                "guard_recognized": recognized,
                "guard_recognized_ci95": [round(v, 4) for v in wilson_interval(recognized, n)],
                "dlib_matched": dlib_hits,
                "dlib_matched_ci95": [round(v, 4) for v in wilson_interval(dlib_hits, n)],
                **{f"{j}_median": round(float(np.median([r[j] for r in rs])), 4) for j in JUDGES},
                **{f"{j}_min": round(float(np.min([r[j] for r in rs])), 4) for j in JUDGES},
            }
    tuned = [c for c in strengths if f"tuning:{c:g}" in summary]

    def rule(c: float) -> tuple[int, float]:  # fewest recognized, then the larger smallest median
        s = summary[f"tuning:{c:g}"]
        return (s["guard_recognized"], -min(s[f"{j}_median"] for j in floors))

    chosen = min(tuned, key=rule) if tuned else None
    result = {
        "command": command_line("benchmarks.blur_strength", argv),
        "chosen_on_tuning": chosen,
        "seconds": round(time.time() - t0, 1),
        "floors": floors,
        "summary": summary,
        "rows": rows,
    }
    lines = [
        "# Fail-closed blur strength on real photos",
        "",
        f"`{result['command']}`",
        "",
        "Each known face hard-blurred alone (`zoo.paste.blur_face`, box grown 0.35) at `cells` pixelation cells across the face, judged at its place "
        "against the photo as taken. Recognized by the guard = any of SFace / FaceRes / MobileFace nearer than its blur line "
        f"({', '.join(f'{j} {v:.4f}' for j, v in floors.items())}, cosine distance). dlib matched = distance < 0.6 (the judge; never used to choose). "
        "Medians and minima are cosine distances (dlib: euclidean).",
        "",
        "| split | cells | faces | guard recognized [95% CI] | dlib matched [95% CI] | SFace median / min | FaceRes median / min | MobileFace median / min | dlib median / min |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, s in summary.items():
        split, cells = key.split(":")
        lines.append(
            f"| {split} | {cells} | {s['faces']} | {s['guard_recognized']} {s['guard_recognized_ci95']} | {s['dlib_matched']} {s['dlib_matched_ci95']} | "
            + " | ".join(f"{s[f'{j}_median']} / {s[f'{j}_min']}" for j in JUDGES)
            + " |"
        )
    if chosen is not None:
        lines += ["", f"Chosen on the tuning faces by the rule above: {chosen:g} cells (`zoo.paste.BLUR_CELLS`)."]
    dlib_rows = sorted((r for r in rows if r["dlib"] < judges["dlib"].distance_threshold), key=lambda r: (r["split"], r["cells"]))
    if dlib_rows:
        lines += [
            "",
            "Faces dlib still matches: " + "; ".join(f"{r['split']} {r['photo']}:{r['face']} cells {r['cells']:g} dlib {r['dlib']}" for r in dlib_rows) + ".",
        ]
    write_results(a.out, result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
