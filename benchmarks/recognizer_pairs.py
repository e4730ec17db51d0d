"""The privacy guard's two recognizers on real photographs of the same people: where do its lines fall?

    python -m benchmarks.recognizer_pairs        # -> results/recognizer_pairs.{json,md}

Labelled faces: :data:`benchmarks.real_photos.LABELLED_FACES` (dlib 19.5.0's example "johns": 5 people, 11 different
photographs each, 150 px chips; fetched by ``python -m benchmarks.real_photos --fetch``). Each chip is padded by
reflection, its face found by the zoo's detector and FFHQ-aligned at 256 px, then embedded by SFace and FaceRes
(:class:`zoo.guard.PrivacyGuard`). Same-person pairs: two photographs of one person (5 x 55); different-person
pairs: photographs of two people (10 x 121). For each recognizer, at the guard's blur floor and re-key target
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

from benchmarks.real_photos import labelled_faces, read_image
from benchmarks.reconstruct_real import rate, rate_text
from benchmarks.report import command_line, write_results

OUT = Path(__file__).resolve().parent / "results" / "recognizer_pairs"


def aligned_crops(paths: list[Path], size: int = 256) -> tuple[np.ndarray, list[int]]:
    """uint8 FFHQ-aligned crops ``[M, size, size, 3]`` of the chips the detector finds a face in, and their indices."""
    from zoo.alignment import align_face
    from zoo.detection import detect_faces

    crops, kept = [], []
    for i, path in enumerate(paths):
        chip = read_image(path)
        pad = chip.shape[0] // 2
        padded = cv2.copyMakeBorder(chip, pad, pad, pad, pad, cv2.BORDER_REFLECT_101)
        faces = detect_faces(padded)
        if not faces:
            continue
        centre = np.array(padded.shape[1::-1], float) / 2
        face = min(faces, key=lambda f: float(np.hypot(*(np.asarray(f.center) - centre))))  # the chip's own face
        crops.append(align_face(padded, face.landmarks, size).crop)
        kept.append(i)
    return np.stack(crops), kept


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    from zoo.guard import guard_for

    people = labelled_faces()
    if not people:
        raise SystemExit("the labelled faces are not here: run python -m benchmarks.real_photos --fetch")
    guard = guard_for()
    embeddings, owner, missed = [], [], 0
    for person, paths in people.items():
        crops, kept = aligned_crops(paths)
        missed += len(paths) - len(kept)
        embeddings.append(guard.crop_embeddings(crops))
        owner += [person] * len(kept)
    emb = np.concatenate(embeddings)
    pairs = list(combinations(range(len(owner)), 2))
    a, b = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    d = guard.distances(emb[a], emb[b])
    same = np.array([owner[i] == owner[j] for i, j in pairs])
    lines = {
        "sface": {"blur floor": guard.floor, "re-key target": guard.target},
        "faceres": {"blur floor": guard.faceres_floor, "re-key target": guard.faceres_target},
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
    either = (d[:, 0] < guard.floor) | (d[:, 1] < guard.faceres_floor)
    either_rates = {
        "same-person pairs called same": rate(int((either & same).sum()), int(same.sum())),
        "different-person pairs called same": rate(int((either & ~same).sum()), int((~same).sum())),
    }
    result = {
        "command": command_line("benchmarks.recognizer_pairs", argv),
        "people": len(people),
        "faces": len(owner),
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
        f'{int(same.sum())} same-person and {int((~same).sum())} different-person pairs (dlib 19.5.0\'s example "johns"). '
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
        f"Either recognizer at its blur floor (the guard's blur rule): same-person {rate_text(s)}, different-person {rate_text(df)}.",
    ]
    write_results(args.out, result, md)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
