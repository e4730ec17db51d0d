"""Fail closed on real photos under every transform, for every method at its defaults: faces dlib still matches,
faces left untouched, and what a wrong key gives back.

Photos: :data:`benchmarks.real_photos.REAL_PHOTOS`, split by person before measuring into **tuning** and
**held-out** (:func:`benchmarks.real_photos.split_of`; nothing was tuned on the held-out photos). Each photo runs as taken, turned 90/180/270, mirrored, at 0.25x and in
grey, through ``method.anonymize`` at the method's defaults (detection, privacy guard and all). The output is turned
back upright and every known face (dlib CNN annotation) is judged at its original place:

* **matched**: dlib (never used by any method, guard or setting) distance < 0.6 to the unprocessed face;
* **untouched**: the face box changed by less than 2 grey levels on average;
* the guard's recognizers' distances are reported beside dlib's (SFace, FaceRes, MobileFace; cosine distance);
* for each matched face, ``grey_oval_dlib``: dlib's distance to the same photo with the face's head-sized region
  (:func:`zoo.methods.baselines.head_box`) a flat grey oval, i.e. what dlib says there when nothing of the face is
  left (:func:`grey_oval_distance`); below 0.6 the judge matches the place, not the face;
* reversible keyed methods: the output is recovered (in memory, the carried code included, as from a lossless
  save) with a wrong key, and dlib judges that recovery too.

Faces under 20 px (box side) are counted but not judged (dlib "matches" a grey disc at that size).

    python -m benchmarks.fail_closed [--methods blur,pixelate,noise,mask,dbaf,hford,ifadit,personal,ideudemon]
        [--transforms upright,rot90,...] [--photos t1,biden,astronaut,...]   # -> results/fail_closed.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks import real_photos as RP
from benchmarks.report import add_control_option, command_line, method_controls, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
OUT = Path(__file__).resolve().parent / "results" / "fail_closed"
METHODS = "blur,pixelate,noise,mask,dbaf,hford,ifadit,personal,ideudemon"
MIN_JUDGED = 20.0
KEY, WRONG_KEY = "fail-closed benchmark key", "some other key"


def judge_places(ref: np.ndarray, boxes: np.ndarray) -> list:
    """DetectedFace per known box, with landmarks from the zoo's detector on the unprocessed photo (None where it finds
    no face there: that face is checked for being untouched but not judged)."""
    from zoo.detection import detect_faces
    from zoo.detectors import DetectedFace

    found = detect_faces(ref)
    out = []
    for b in boxes:
        hit = next((f for f in found if RP.matches(np.array([b]), np.array([f.box]))[0]), None)
        out.append(DetectedFace(b, hit.landmarks, 1.0) if hit is not None else None)
    return out


def judge(ref: np.ndarray, out: np.ndarray, boxes: np.ndarray, faces: list, judges: dict) -> list[dict]:
    from zoo.judges import embed_at_original_places

    rows = []
    for b, f in zip(boxes, faces):
        x0, y0, x1, y1 = (int(round(v)) for v in b)
        a, c = ref[max(0, y0) : y1, max(0, x0) : x1].astype(np.float32), out[max(0, y0) : y1, max(0, x0) : x1].astype(np.float32)
        row = {"size": float(max(b[2] - b[0], b[3] - b[1])), "untouched": bool(a.size == 0 or np.abs(a - c).mean() < 2.0)}
        if f is not None:
            for name, j in judges.items():
                row[name] = round(float(j.distance(j.embed_photo_faces(ref, [f]), embed_at_original_places(j, ref, out, [f]))[0]), 4)
        rows.append(row)
    return rows


def grey_oval_distance(ref: np.ndarray, face, judge) -> float:
    """dlib (``judge``) distance between the face at ``face`` (a DetectedFace of ``ref``) and ``ref`` with that face's
    head-sized region a flat grey oval (the ``mask`` baseline at its defaults): the judge's floor at that place."""
    import zoo

    blank, _ = zoo.load("mask").anonymize_in_photo(ref, [face], [None])
    return round(float(judge.distance(judge.embed_photo_faces(ref, [face]), judge.embed_photo_faces(blank, [face], shapes_from=ref))[0]), 4)


def matched(row: dict, dlib_thr: float) -> bool:
    """A judged face (box side >= :data:`MIN_JUDGED`) that dlib still calls the same person."""
    return row["size"] >= MIN_JUDGED and row.get("dlib", 9) < dlib_thr


def summarise(rows: list[dict], dlib_thr: float, key: str = "dlib") -> dict:
    from training.evaluate import wilson_interval

    judged = [r for r in rows if r["size"] >= MIN_JUDGED and key in r]
    hits = [r for r in judged if r[key] < dlib_thr]
    untouched = sum(r["untouched"] for r in rows) if key == "dlib" else None
    out = {
        "faces": len(rows),
        "judged": len(judged),
        "matched": len(hits),
        "matched_ci95": [round(v, 4) for v in wilson_interval(len(hits), len(judged))] if judged else None,
        "untouched": untouched,
    }
    for name in ("sface", "faceres", "mobileface"):
        vals = [r[name] for r in judged if name in r]
        if vals:
            out[f"{name}_median_distance"] = round(float(np.median(vals)), 4)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", default=METHODS)
    p.add_argument("--transforms", default=",".join(RP.TRANSFORMS))
    p.add_argument("--photos", default=",".join(RP.REAL_PHOTOS))
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--add", action="store_true", help="keep the results file's entries of the methods not run now")
    add_control_option(p)
    a = p.parse_args(argv)
    controls = method_controls(a)

    import zoo
    from zoo.judges import get_judge

    judges = {name: get_judge(name) for name in ("dlib", "sface", "faceres", "mobileface")}
    dlib_thr = judges["dlib"].threshold
    photos = RP.photos(a.photos.split(","))
    result: dict = {"command": command_line("benchmarks.fail_closed", argv), "split": {k: RP.split_of(k) for k in photos}, "methods": {}}
    for method_name in a.methods.split(","):
        method = zoo.load(method_name)
        keyed = method.uses_key
        rows: dict[str, list] = {"tuning": [], "held-out": []}
        wrong: dict[str, list] = {"tuning": [], "held-out": []}
        leaks: list[str] = []
        leak_rows: list[dict] = []  # each leak's judge distances (dlib, and the guard's recognizers)
        statuses: dict[str, Counter] = {"tuning": Counter(), "held-out": Counter()}  # the report's face statuses
        t0 = time.time()
        for name, (rgb, boxes) in photos.items():
            for how in a.transforms.split(","):
                img, _ = RP.transformed(rgb, boxes, how)
                ref, ref_boxes = RP.upright_reference(rgb, boxes, how)
                faces = judge_places(ref, ref_boxes)
                result_obj = method.anonymize(img, key=KEY, **controls) if keyed else method.anonymize(img, **controls)
                out = RP.undo(np.asarray(result_obj), how)
                statuses[RP.split_of(name)].update(f.status for f in result_obj.faces)
                got = judge(ref, out, ref_boxes, faces, judges)
                rows[RP.split_of(name)] += got
                new = [(f"{name}:{how}:{i}", r) for i, r in enumerate(got) if r["untouched"] or matched(r, dlib_thr)]
                leaks += [k for k, _ in new]
                for k, r in new:
                    i = int(k.rsplit(":", 1)[1])
                    blank = {"grey_oval_dlib": grey_oval_distance(ref, faces[i], judges["dlib"])} if "dlib" in r else {}
                    leak_rows.append({"face": k, **r, **blank})
                if method.reversible and keyed:
                    rec = method.recover(result_obj, key=WRONG_KEY, **controls)
                    back = RP.undo(np.asarray(rec), how)
                    got_w = judge(ref, back, ref_boxes, faces, {"dlib": judges["dlib"]})
                    wrong[RP.split_of(name)] += got_w
                    leaks += [f"{name}:{how}:{i}:wrong-key" for i, r in enumerate(got_w) if matched(r, dlib_thr)]
        entry = {"seconds": round(time.time() - t0, 1), "leaks": leaks, "leak_rows": leak_rows}
        for split in ("tuning", "held-out"):
            entry[split] = summarise(rows[split], dlib_thr)
            entry[split]["statuses"] = dict(sorted(statuses[split].items()))
            if wrong[split]:
                entry[split]["wrong_key"] = summarise(wrong[split], dlib_thr)
        result["methods"][method_name] = entry
        print(method_name, entry, flush=True)

    if a.add and a.out.with_suffix(".json").is_file():  # one results file built over several runs
        before = json.loads(a.out.with_suffix(".json").read_text())
        if before.get("split") == result["split"]:
            result["methods"] = {**{m: e for m, e in before["methods"].items() if m not in result["methods"]}, **result["methods"]}
            result["command"] = before["command"] + " ; " + result["command"]
    write_report(result, list(photos), a.transforms.split(","), a.out)
    return 0


def write_report(result: dict, photos: list[str], transforms: list[str], out: Path) -> None:
    """``out``.{json,md}: the table of ``result`` (methods x splits) over ``photos`` and ``transforms``."""
    lines = [
        f"# Fail closed on real photos x {len(transforms)} transform(s)",
        "",
        f"`{result['command']}`",
        "",
        " ".join(
            f"{label}: {', '.join(names)}."
            for label, names in (
                ("Tuning", RP.in_split(photos, "tuning")),
                ("Held-out", RP.in_split(photos, "held-out")),
                ("Transforms", transforms),
            )
            if names
        ),
        "dlib matched = distance < 0.6 (judged faces >= 20 px); untouched = box changed < 2 levels; SFace / FaceRes / MobileFace: median",
        "cosine distance to the original (the guard's recognizers; '-': not measured by that run). Wrong key: the output recovered with another key.",
        "",
        "| method | split | dlib matched [95% CI] | untouched | SFace median | FaceRes median | MobileFace median | wrong key: dlib matched | faces reported: status |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, e in result["methods"].items():
        for split in ("tuning", "held-out"):
            s = e[split]
            if not s["faces"]:
                continue
            ci = s["matched_ci95"] or [0, 0]
            w = s.get("wrong_key")
            lines.append(
                f"| {m} | {split} | {s['matched']} of {s['judged']} [{ci[0]}, {ci[1]}] | {s['untouched']} of {s['faces']} | "
                f"{s.get('sface_median_distance', '-')} | {s.get('faceres_median_distance', '-')} | {s.get('mobileface_median_distance', '-')} | "
                f"{(str(w['matched']) + ' of ' + str(w['judged'])) if w else '-'} | "
                f"{', '.join(f'{k} {v}' for k, v in s['statuses'].items()) if 'statuses' in s else '-'} |"
            )
    all_leaks = [f"{m}: {', '.join(e['leaks'])}" for m, e in result["methods"].items() if e["leaks"]]
    lines += ["", "Faces matched or untouched: " + ("; ".join(all_leaks) if all_leaks else "none") + "."]
    floors = [
        f"{m} {r['face']} {r['dlib']} ({r['grey_oval_dlib']})" for m, e in result["methods"].items() for r in e.get("leak_rows", []) if "grey_oval_dlib" in r
    ]
    if floors:
        lines += [
            "",
            "dlib's distance for each matched face, and in brackets for the same photo with a flat grey oval over the face's "
            "head-sized region (below 0.6: dlib matches that place with nothing of the face left): " + "; ".join(floors) + ".",
        ]
    write_results(out, result, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
