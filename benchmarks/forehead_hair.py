"""Fringes across a bare forehead: how often a method's kept face has one, with the guard's look check on and off.

    python -m benchmarks.forehead_hair [--methods dbaf,ifadit] [--photos t1,biden,...] [--sheet DIR] [--out PATH]

A generated face may draw a fringe where the photo's face shows a bare forehead; the replaced region ends at the
hairline, so the fringe is cut into a band of hair across the forehead. The privacy guard measures it
(:func:`zoo.compositing.forehead_hair`) and draws such a face again with another key variant, keeping one without
it among the variants that pass (:mod:`zoo.guard`). Each method anonymizes each photo at its defaults (guard on)
twice: as shipped, and with the look check off (:data:`zoo.compositing.FOREHEAD_HAIR_LIMIT` set to 1, so only
privacy picks the variant). For every face dlib's CNN detector finds in the original:

* ``forehead_hair`` of the kept face (the guard's report) and whether it is over the limit (a fringe kept);
* the key variants tried, whether the guard blurred the face, the seconds per photo;
* dlib's distance of the anonymized face to the original (same person below 0.6; dlib is the judge, never used by a
  method or setting).

Reported per split (``tuning`` / ``held-out``, :mod:`benchmarks.real_photos`; the limit was set on tuning faces)
with 95% Wilson intervals. ``--sheet DIR`` writes, per face kept with a fringe by either run, the original, the
look check off and on side by side. Writes ``benchmarks/results/forehead_hair.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import cv2
import numpy as np

from benchmarks.appearance import DlibEye, OriginalFace, contact_sheet, judged_photos, record_at
from benchmarks.report import add_control_option, command_line, method_controls, rate, rate_text, rows_not_run, write_results

OUT = Path(__file__).resolve().parent / "results" / "forehead_hair"
KEY = "forehead-hair"
DEFAULT_PHOTOS = "t1,biden,feat_f1_surprise,feat_m7_disgust,astronaut,camera,grace_hopper,tom_hanks,obama,obama2,obama3,obama_partial_face,obama_partial_face2,feat_f15_happy,feat_f13_anger,feat_single_face,feat_multi_face"
RUNS = ("off", "on")


def anonymized(method, rgb: np.ndarray, look_check: bool, controls: dict):
    """(result, seconds) of ``method`` on ``rgb`` with the guard's look check on or off."""
    from zoo import compositing

    limit = compositing.FOREHEAD_HAIR_LIMIT
    compositing.FOREHEAD_HAIR_LIMIT = limit if look_check else 1.0
    try:
        t0 = time.perf_counter()
        result = method.anonymize(rgb, key=KEY, **controls)
        return result, time.perf_counter() - t0
    finally:
        compositing.FOREHEAD_HAIR_LIMIT = limit


def face_row(eye: DlibEye, ref: OriginalFace, result, out: np.ndarray, limit: float) -> dict:
    record = record_at(result, ref.box)
    guard = (record.guard or {}) if record is not None else {}
    hair = guard.get("forehead_hair")
    return {
        "status": record.status if record is not None else "not found",
        "forehead_hair": hair,
        "fringe": hair is not None and hair > limit and not guard.get("blurred", False),
        "tried": guard.get("tried"),
        "variant": guard.get("variant"),
        "blurred": bool(guard.get("blurred", False)),
        "dlib": round(ref.distance(eye, out), 4),
    }


def summarise(rows: list[dict], threshold: float) -> dict:
    n = len(rows)
    out: dict = {"faces": n}
    for run in RUNS:
        rs = [r[run] for r in rows]
        out[run] = {
            "fringe": rate(sum(r["fringe"] for r in rs), n),
            "matched": rate(sum(r["dlib"] < threshold for r in rs), n),
            "blurred": sum(r["blurred"] for r in rs),
            "tried_mean": round(float(np.mean([r["tried"] or 1 for r in rs])), 2) if rs else None,
        }
    return out


def write_report(result: dict, out: Path) -> None:
    threshold = result["dlib_threshold"]
    for per in result["methods"].values():
        for split in ("tuning", "held-out"):
            per[split] = summarise([r for r in per["faces_rows"] if r["split"] == split], threshold)
    lines = [
        "# Fringes across a bare forehead, with the guard's look check off and on",
        "",
        f"`{result['command']}`",
        "",
        "Each method at its defaults (guard on), once with the look check off (only privacy picks the key variant) and once as "
        f"shipped (a kept face whose drawn fringe covers more than {result['limit']} of the forehead band where the original "
        "shows skin is drawn again with the next variant, among those that pass). Fringe kept: the kept face is over the "
        "limit and not blurred. dlib judges at 0.6 (no setting uses it). k/n [95% Wilson].",
        "",
        "| method | split | faces | fringe kept, off | fringe kept, on | dlib matched, off / on | guard blurred, off / on | variants tried (mean), off / on | s per photo, off / on |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, per in result["methods"].items():
        for split in ("tuning", "held-out"):
            s = per[split]
            if not s["faces"]:
                continue
            off, on = s["off"], s["on"]
            secs = per["seconds"]
            lines.append(
                f"| {m} | {split} | {s['faces']} | {rate_text(off['fringe'])} | {rate_text(on['fringe'])} | "
                f"{off['matched']['k']} / {on['matched']['k']} | {off['blurred']} / {on['blurred']} | {off['tried_mean']} / {on['tried_mean']} | "
                f"{secs['off'] if secs['off'] is not None else '-'} / {secs['on'] if secs['on'] is not None else '-'} |"
            )
    write_results(out, result, lines)


def run_seconds(photo_seconds: dict[str, dict[str, float]]) -> dict[str, dict]:
    """``seconds_total`` and ``seconds`` (mean per photo) of each run over the photos timed for it, and how many
    photos that is (``photos_timed``): a photo whose off run was taken from an earlier file without a time for it
    counts in no run's off time."""
    timed = {run: [p[run] for p in photo_seconds.values() if run in p] for run in RUNS}
    return {
        "seconds_total": {run: round(sum(v), 1) for run, v in timed.items()},
        "seconds": {run: round(sum(v) / len(v), 1) if v else None for run, v in timed.items()},
        "photos_timed": {run: len(v) for run, v in timed.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="dbaf,ifadit")
    ap.add_argument("--photos", default=DEFAULT_PHOTOS, help="names from benchmarks.real_photos.REAL_PHOTOS")
    ap.add_argument("--sheet", default=None, help="a folder for side-by-side PNGs of the faces kept with a fringe")
    ap.add_argument(
        "--off-from",
        default=None,
        help="take the look-check-off rows and times from this earlier results JSON of the same photos (the off run does not depend on the look rule)",
    )
    ap.add_argument("--add", action="store_true", help="keep the results file's rows of the methods and photos not run now")
    ap.add_argument("--out", default=None)
    add_control_option(ap)
    args = ap.parse_args(argv)
    controls = method_controls(args)
    out_path = Path(args.out) if args.out else OUT

    import zoo
    from zoo import compositing

    eye = DlibEye()
    methods = [m for m in args.methods.split(",") if m]
    photos = [p for p in args.photos.split(",") if p]
    rows: dict[str, list[dict]] = {m: [] for m in methods}
    # method -> photo -> run -> seconds; a reused off run brings the earlier file's time of that photo, where it has one
    photo_seconds: dict[str, dict[str, dict[str, float]]] = {m: {} for m in methods}
    earlier = json.loads(Path(args.off_from).read_text())["methods"] if args.off_from else {}
    off_rows = {(m, r["photo"], r["face"]): r["off"] for m, per in earlier.items() for r in per["faces_rows"]}
    for name, split, rgb, refs in judged_photos(eye, photos):
        for method in methods:
            m = zoo.load(method)
            runs = {}
            reuse = method in earlier and all((method, name, i) in off_rows for i in range(len(refs)))
            for run in RUNS:
                if run == "off" and reuse:
                    earlier_secs = earlier[method].get("photo_seconds", {}).get(name, {}).get("off")
                    if earlier_secs is not None:
                        photo_seconds[method].setdefault(name, {})["off"] = earlier_secs
                    continue
                result, secs = anonymized(m, rgb, run == "on", controls)
                photo_seconds[method].setdefault(name, {})[run] = round(secs, 2)
                runs[run] = (result, np.asarray(result))
            for i, ref in enumerate(refs):
                measured = {run: face_row(eye, ref, result, out, compositing.FOREHEAD_HAIR_LIMIT) for run, (result, out) in runs.items()}
                if reuse:
                    measured = {"off": off_rows[(method, name, i)], **measured}
                row = {"photo": name, "split": split, "face": i, **measured}
                rows[method].append(row)
                print(method, name, i, row, flush=True)
                if args.sheet and "off" in runs and (measured["off"]["fringe"] or measured["on"]["fringe"]):
                    Path(args.sheet).mkdir(parents=True, exist_ok=True)
                    sheet = contact_sheet(rgb, [("look check off", runs["off"][1]), ("look check on", runs["on"][1])], ref.box)
                    cv2.imwrite(str(Path(args.sheet) / f"{method}_{name}_{i}.png"), cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR))

    command = command_line("benchmarks.forehead_hair", argv)
    if args.add and out_path.with_suffix(".json").is_file():
        before = json.loads(out_path.with_suffix(".json").read_text())
        for m, kept in rows_not_run(before.get("methods", {}), "faces_rows", methods, set(photos)).items():
            rows[m] = kept + rows.get(m, [])
            kept_seconds = before["methods"][m].get("photo_seconds", {})
            photo_seconds[m] = {**{p: kept_seconds[p] for p in {r["photo"] for r in kept} if p in kept_seconds}, **photo_seconds.get(m, {})}
        command = before["command"] + " ; " + command
    result = {
        "command": command,
        "limit": compositing.FOREHEAD_HAIR_LIMIT,
        "dlib_threshold": float(eye.judge.threshold),
        "methods": {m: {**run_seconds(photo_seconds.get(m, {})), "photo_seconds": photo_seconds.get(m, {}), "faces_rows": rs} for m, rs in rows.items()},
    }
    write_report(result, out_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
