"""The privacy guard's recognizers on real photographs of the same people: where do its lines fall?

    python -m benchmarks.recognizer_pairs                    # -> results/recognizer_pairs.{json,md}
    python -m benchmarks.recognizer_pairs --face-px 40 --out benchmarks/results/recognizer_pairs_40px
    python -m benchmarks.recognizer_pairs --gray --out benchmarks/results/recognizer_pairs_gray
    python -m benchmarks.recognizer_pairs --landmarks retinaface --out benchmarks/results/recognizer_pairs_retinaface
    python -m benchmarks.recognizer_pairs --landmarks both --out benchmarks/results/recognizer_pairs_two_alignments

Labelled faces: :data:`benchmarks.real_photos.LABELLED_FACES` (dlib 19.5.0's example "johns": 5 people, 11 different
photographs each, 150 px chips; fetched by ``python -m benchmarks.real_photos --fetch``). Each chip is padded by
reflection, its face found by the zoo's detector (with ``--face-px``, the padded chip is then area-downscaled so
that the face's box is that wide: a small face in a group photo; with ``--gray`` every chip is made grey first, as
a black-and-white photo holds it), and embedded by SFace, FaceRes and MobileFace at its place,
as the guard measures a face in a photo (:meth:`zoo.guard.PrivacyGuard.photo_embeddings`). Same-person pairs: two photographs of one person (5 x 55); different-person
pairs: photographs of two people (10 x 121). ``--landmarks retinaface`` aligns every face by RetinaFace's 5 landmarks
(found in the same padded chip) instead of the zoo detector's; ``--landmarks both`` takes, for each pair and
recognizer, the nearer of the two alignments (each pair's two faces aligned by the same detector's landmarks): what a
guard that measured at both would see. For each recognizer, at the guard's blur floor and re-key target
(:mod:`zoo.guard`), the share of same-person pairs it calls the same person (its recall: what the guard can catch)
and of different-person pairs it calls the same (false matches), with 95% Wilson intervals. No photograph here is
used by any method, and these people are in no benchmark photo.
"""

from __future__ import annotations

import argparse
from itertools import combinations
from pathlib import Path

import cv2
import numpy as np

from benchmarks.real_photos import labelled_faces, read_image, transformed
from benchmarks.report import command_line, rate, rate_text, write_results

OUT = Path(__file__).resolve().parent / "results" / "recognizer_pairs"


def chip_faces(
    paths: list[Path], face_px: int | None = None, gray: bool = False, detector: str | None = "auto"
) -> tuple[list[tuple[np.ndarray, object]], list[int]]:
    """(padded chip uint8 [H,W,3], its detected face) for every chip the detector finds a face in, and their indices.
    ``face_px``: the chip area-downscaled so that the face's box is that many pixels wide (the face as a photo holds
    it: a small face in a group photo), box and landmarks scaled with it. ``gray``: the chip's luma in all three
    channels (a black-and-white photo). ``detector``: whose box and landmarks (:func:`zoo.detection.detect_faces`)."""
    from zoo.detection import detect_faces
    from zoo.detectors import DetectedFace

    found, kept = [], []
    for i, path in enumerate(paths):
        chip = read_image(path)
        if gray:
            chip = transformed(chip, np.zeros((0, 4)), "gray")[0]  # as benchmarks.fail_closed's "gray" transform
        pad = chip.shape[0] // 2
        padded = cv2.copyMakeBorder(chip, pad, pad, pad, pad, cv2.BORDER_REFLECT_101)
        faces = detect_faces(padded, detector)
        if not faces:
            continue
        centre = np.array(padded.shape[1::-1], float) / 2
        face = min(faces, key=lambda f: float(np.hypot(*(np.asarray(f.center) - centre))))  # the chip's own face
        if face_px is not None:
            scale = face_px / float(face.box[2] - face.box[0])
            size = (max(1, round(padded.shape[1] * scale)), max(1, round(padded.shape[0] * scale)))
            padded = cv2.resize(padded, size, interpolation=cv2.INTER_AREA)
            face = DetectedFace(face.box * scale, face.landmarks * scale, face.score, face.detector)
        found.append((padded, face))
        kept.append(i)
    return found, kept


def embeddings_at_place(guard, found: list) -> np.ndarray:
    """The guard's embeddings ``[M, D]`` of each chip's face at its place, as it measures a face in a photo."""
    return np.concatenate([guard.photo_embeddings(rgb, [face]) for rgb, face in found])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--face-px", type=int, default=None, help="measure each face area-downscaled to this box width (px)")
    ap.add_argument("--gray", action="store_true", help="every chip made grey first (a black-and-white photo)")
    ap.add_argument(
        "--landmarks",
        choices=("detector", "retinaface", "both"),
        default="detector",
        help="align by the zoo detector's landmarks, RetinaFace's, or the nearer of both",
    )
    args = ap.parse_args(argv)
    from zoo.guard import guard_for

    people = labelled_faces()
    if not people:
        raise SystemExit("the labelled faces are not here: run python -m benchmarks.real_photos --fetch")
    guard = guard_for()
    sources = {"detector": ("auto",), "retinaface": ("retinaface",), "both": ("auto", "retinaface")}[args.landmarks]
    embeddings: list[list[np.ndarray]] = [[] for _ in sources]
    owner, missed = [], 0
    for person, paths in people.items():
        found = [chip_faces(paths, args.face_px, args.gray, detector) for detector in sources]
        kept = sorted(set.intersection(*(set(k) for _, k in found)))  # chips every source finds a face in
        missed += len(paths) - len(kept)
        for j, (faces, k) in enumerate(found):
            embeddings[j].append(embeddings_at_place(guard, [faces[k.index(i)] for i in kept]))
        owner += [person] * len(kept)
    pairs = list(combinations(range(len(owner)), 2))
    a, b = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    d = np.min([guard.distances(e[a], e[b]) for e in (np.concatenate(x) for x in embeddings)], axis=0)
    same = np.array([owner[i] == owner[j] for i, j in pairs])
    lines = {
        "sface": {"blur floor": guard.floor, "re-key target": guard.target},
        "faceres": {"blur floor": guard.faceres_floor, "re-key target": guard.faceres_target},
        "mobileface": {"blur floor": guard.mobileface_floor, "re-key target": guard.mobileface_target},
    }
    rows: list[dict] = []
    for k, (name, marks) in enumerate(lines.items()):
        for label, line in marks.items():
            called = d[:, k] < line
            rows.append(
                {
                    "recognizer": name,
                    "line": label,
                    "cosine distance": round(float(line), 4),
                    "same-person pairs called same": rate(int((called & same).sum()), int(same.sum())),
                    "different-person pairs called same": rate(int((called & ~same).sum()), int((~same).sum())),
                }
            )
    either = (d < np.array(guard.floors)).any(axis=1)
    either_rates = {
        "same-person pairs called same": rate(int((either & same).sum()), int(same.sum())),
        "different-person pairs called same": rate(int((either & ~same).sum()), int((~same).sum())),
    }
    result = {
        "command": command_line("benchmarks.recognizer_pairs", argv),
        "people": len(people),
        "faces": len(owner),
        "face_px": args.face_px,
        "gray": bool(args.gray),
        "landmarks": args.landmarks,
        "chips_without_a_face": missed,
        "rows": rows,
        "either_at_blur_floor": either_rates,
        "median_distance": {
            name: {"same": round(float(np.median(d[same, k])), 4), "different": round(float(np.median(d[~same, k])), 4)} for k, name in enumerate(lines)
        },
    }
    md = [
        "# The guard's recognizers on real photographs of the same people",
        "",
        f"`{result['command']}`",
        "",
        f"{result['people']} people, {result['faces']} photographs ({missed} chips without a detected face), "
        + (f"each face area-downscaled to a {args.face_px} px box, " if args.face_px else "")
        + ("every chip made grey, " if args.gray else "")
        + {"detector": "", "retinaface": "aligned by RetinaFace's landmarks, ", "both": "the nearer of the zoo detector's and RetinaFace's alignments, "}[
            args.landmarks
        ]
        + f'{int(same.sum())} same-person and {int((~same).sum())} different-person pairs (dlib 19.5.0\'s example "johns"). '
        "Called same = cosine distance below the line; k/n [95% Wilson interval].",
        "",
        "| recognizer | line | cosine distance | same-person pairs called same | different-person pairs called same |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        sp, dp = r["same-person pairs called same"], r["different-person pairs called same"]
        md.append(f"| {r['recognizer']} | {r['line']} | {r['cosine distance']} | {rate_text(sp)} | {rate_text(dp)} |")
    s, df = either_rates["same-person pairs called same"], either_rates["different-person pairs called same"]
    md += [
        "",
        f"Any recognizer at its blur floor (the guard's blur rule): same-person {rate_text(s)}, different-person {rate_text(df)}.",
    ]
    write_results(args.out, result, md)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
