"""The privacy guard's distances at other alignments: would the faces it kept still pass if aligned otherwise?

    python -m benchmarks.guard_alignment --methods dbaf --photos t1,biden,...   # -> results/guard_alignment.{json,md}

The guard (:mod:`zoo.guard`) embeds each output face, and the original, at the original's place aligned by the zoo
detector's 5 landmarks. Someone else may align the same face differently. Each method anonymizes each photo at its
defaults (key ``guard-alignment``, guard on); every face is then measured again by the guard's three recognizers,
original and output aligned alike by

* ``retinaface``: RetinaFace's 5 landmarks, the face searched again in a crop around it (the zoo's second detector);
* ``mesh``: 5 points of the 468-point face mesh (:mod:`zoo.face_mesh`): each eye's contour centre, the nose tip and
  the mouth corners.

Reported per method: how far those landmarks lie from the detector's (the largest of the 5 point distances, in
eye distances), each recognizer's change of distance against the guard's own alignment (median, min, max), and how
many faces the guard kept (not blurred) fall below a blur floor at another alignment, with 95% Wilson intervals.
dlib is not used. Run it on the tuning photos (:mod:`benchmarks.real_photos`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks.real_photos import packaged_photos
from benchmarks.report import command_line, rate, rate_text, write_results

OUT = Path(__file__).resolve().parent / "results" / "guard_alignment"
KEY = "guard-alignment"
#: face-mesh indices of the nose tip and the mouth corners (the eyes: zoo.compositing.FEATURE_POINTS' first two contours)
MESH_NOSE, MESH_MOUTH = 1, (61, 291)
ALIGNMENTS = ("retinaface", "mesh")


def mesh_landmarks(rgb: np.ndarray, landmarks: np.ndarray) -> np.ndarray | None:
    """5 points ``[5,2]`` (photo pixels, the detectors' order) of the face mesh placed from ``landmarks``; None without a mesh."""
    from zoo.compositing import FEATURE_POINTS
    from zoo.face_mesh import face_mesh

    points = face_mesh(rgb, landmarks)
    if points is None:
        return None
    eyes = [points[list(eye)].mean(0) for eye in FEATURE_POINTS[:2]]  # image-left eye, image-right eye
    return np.stack([*eyes, points[MESH_NOSE], *points[list(MESH_MOUTH)]])


def retinaface_landmarks(rgb: np.ndarray, face) -> np.ndarray | None:
    """RetinaFace's 5 points for ``face``, searched in a crop around it (enlarged to a 160 px face); None if not found."""
    from zoo.detection import find_again

    found = find_again(rgb, face, "retinaface")
    return None if found is None else found.landmarks


def measure(guard, rgb: np.ndarray, out: np.ndarray, face) -> dict:
    """The face's guard distances (original against output) at the detector's alignment and at each other one."""
    from zoo.detectors import DetectedFace

    eye = float(np.linalg.norm(face.landmarks[1] - face.landmarks[0]))
    row = {"base": guard.distances(guard.photo_embeddings(rgb, [face]), guard.photo_embeddings(out, [face]))[0].round(4).tolist()}
    for name, points in (("retinaface", retinaface_landmarks(rgb, face)), ("mesh", mesh_landmarks(rgb, face.landmarks))):
        if points is None:
            continue
        other = DetectedFace(face.box, points, face.score, name)
        row[name] = guard.distances(guard.photo_embeddings(rgb, [other]), guard.photo_embeddings(out, [other]))[0].round(4).tolist()
        row[name + "_shift"] = round(float(np.linalg.norm(points - face.landmarks, axis=1).max() / eye), 3)
    return row


def summarise(rows: list[dict], floors: tuple[float, ...]) -> dict:
    from zoo.guard import RECOGNIZERS

    kept = [r for r in rows if r["status"] == "processed"]
    out: dict = {"faces": len(rows), "kept": len(kept)}
    for name in ALIGNMENTS:
        measured = [r for r in kept if name in r]
        shifts = [r[name + "_shift"] for r in rows if name in r]
        below = [r for r in measured if any(d < f for d, f in zip(r[name], floors))]
        out[name] = {
            "shift_median": round(float(np.median(shifts)), 3) if shifts else None,
            "shift_max": round(float(np.max(shifts)), 3) if shifts else None,
            "kept_below_a_floor": rate(len(below), len(measured)),
            "below": [f"{r['photo']}:{r['face']}" for r in below],
            "change": {
                rec: [round(float(f(np.array([r[name][k] - r["base"][k] for r in measured]))), 3) for f in (np.median, np.min, np.max)]
                for k, rec in enumerate(RECOGNIZERS)
                if measured
            },
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="dbaf")
    ap.add_argument("--photos", required=True, help="names from benchmarks.real_photos.REAL_PHOTOS (the tuning ones)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    from zoo import load
    from zoo.detectors import DetectedFace
    from zoo.guard import guard_for

    guard = guard_for()
    result: dict = {"command": command_line("benchmarks.guard_alignment", argv), "methods": {}}
    for method_name in args.methods.split(","):
        method = load(method_name)
        rows = []
        for photo, split, rgb in packaged_photos(args.photos.split(",")):
            anonymized = method.anonymize(rgb, key=KEY)
            out = np.asarray(anonymized.image)
            for record in anonymized.report()["faces"]:
                face = DetectedFace(record["box"], record["landmarks"], record["score"])
                rows.append({"photo": photo, "split": split, "face": record["index"], "status": record["status"], **measure(guard, rgb, out, face)})
                print(method_name, rows[-1], flush=True)
        result["methods"][method_name] = {"summary": summarise(rows, guard.floors), "rows": rows}
    md = [
        "# The guard's distances at other alignments",
        "",
        f"`{result['command']}`",
        "",
        "Each face the guard kept (not blurred), original and output aligned alike by RetinaFace's or the face mesh's 5 points"
        " instead of the zoo detector's. Shift: the farthest of the 5 points from the detector's, in eye distances. Change:"
        " distance at that alignment minus the guard's (median, min, max; negative = nearer the person). k/n [95% Wilson].",
        "",
        "| method | faces (kept) | alignment | shift median (max) | SFace change | FaceRes change | MobileFace change | kept faces below a blur floor there |",
        "|---|---|---|---|---|---|---|---|",
    ]
    from zoo.guard import RECOGNIZERS

    for method_name, got in result["methods"].items():
        s = got["summary"]
        for name in ALIGNMENTS:
            a = s[name]
            change = [" / ".join(f"{v:+.3f}" for v in a["change"].get(rec, [])) for rec in RECOGNIZERS]
            md.append(
                f"| {method_name} | {s['faces']} ({s['kept']}) | {name} | {a['shift_median']} ({a['shift_max']}) | {' | '.join(change)} | "
                f"{rate_text(a['kept_below_a_floor'])} {', '.join(a['below'])} |"
            )
    write_results(args.out, result, md)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
