"""The judge's floor on real photos: how often dlib calls two different people of the same photo the same person.

    python -m benchmarks.judge_floor_real [--photos NAME,...] [--out PATH]

Every pair of known faces of one photo (:data:`benchmarks.real_photos.REAL_PHOTOS`, faces listed in
``fixtures/real_faces.json``; in these photos every face is a different person) is compared by dlib's descriptor,
each face read at its own place as every benchmark reads it (:class:`benchmarks.appearance.OriginalFace`).
Pairs are grouped by face size: both small (eyes < :data:`zoo.compositing.SMALL_FACE_EYE_DISTANCE` px apart, by
dlib's landmarks) or both larger, per split. A method's output face at a small face's place can only be told
from the person as well as dlib tells two people of that photo apart: what it matches there is measured against
this floor. Writes ``benchmarks/results/judge_floor_real.{json,md}``.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np

from benchmarks.appearance import DlibEye, OriginalFace
from benchmarks.real_photos import FIXTURE, REAL_PHOTOS, packaged_photos
from benchmarks.report import command_line, rate, rate_text, write_results
from zoo.compositing import SMALL_FACE_EYE_DISTANCE

OUT = Path(__file__).resolve().parent / "results" / "judge_floor_real"


def eye_distance(face: OriginalFace) -> float:
    """Outer eye corners' distance (dlib points 36, 45) in pixels."""
    return float(np.hypot(*(face.lm68[45] - face.lm68[36])))


def pair_rows(eye: DlibEye, names: list[str]) -> list[dict]:
    """One row per unordered pair of known faces of one photo: photo, split, faces, eye distances, dlib distance."""
    boxes = json.loads(FIXTURE.read_text())
    rows = []
    for name, split, rgb in packaged_photos(names):
        faces = OriginalFace.measure_all(eye, rgb, boxes[name]["boxes"])
        for i, j in itertools.combinations(range(len(faces)), 2):
            d = float(np.ravel(eye.judge.distance(faces[i].descriptor, faces[j].descriptor))[0])
            rows.append(
                {
                    "photo": name,
                    "split": split,
                    "faces": [i, j],
                    "eye_px": [round(eye_distance(faces[i]), 1), round(eye_distance(faces[j]), 1)],
                    "dlib": round(d, 4),
                }
            )
    return rows


def summarise(rows: list[dict], threshold: float) -> dict:
    """split -> size group -> rate of pairs dlib calls the same person (below ``threshold``)."""
    out: dict = {}
    for split in ("tuning", "held-out"):
        for group, keep in (("both small", lambda e: max(e) < SMALL_FACE_EYE_DISTANCE), ("both larger", lambda e: min(e) >= SMALL_FACE_EYE_DISTANCE)):
            sel = [r for r in rows if r["split"] == split and keep(r["eye_px"])]
            out.setdefault(split, {})[group] = {**rate(sum(r["dlib"] < threshold for r in sel), len(sel)), "photos": sorted({r["photo"] for r in sel})}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", default=None, help="names from benchmarks.real_photos.REAL_PHOTOS (default: every photo with two or more faces)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    boxes = json.loads(FIXTURE.read_text())
    # "crowd" tiles one photo, so its faces repeat people
    names = args.photos.split(",") if args.photos else [n for n in REAL_PHOTOS if n != "crowd" and len(boxes.get(n, {}).get("boxes", [])) > 1]
    eye = DlibEye()
    rows = pair_rows(eye, names)
    summary = summarise(rows, eye.judge.threshold)
    result = {"command": command_line("benchmarks.judge_floor_real", argv), "threshold": eye.judge.threshold, "summary": summary, "pairs": rows}
    lines = [
        "# dlib on two different people of the same real photo",
        "",
        f"`{result['command']}`. Pairs of known faces of one photo (different people), each read at its own place; "
        f"'same' = dlib distance < {eye.judge.threshold}. Small: eyes < {SMALL_FACE_EYE_DISTANCE} px apart. k/n [95% Wilson].",
        "",
        "| split | faces | dlib same, different people | photos |",
        "|---|---|---|---|",
    ]
    for split, groups in summary.items():
        for group, r in groups.items():
            lines.append(f"| {split} | {group} | {rate_text(r) if r['n'] else '-'} | {', '.join(r['photos'])} |")
    write_results(Path(args.out) if args.out else OUT, result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
