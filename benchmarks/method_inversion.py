"""The W+ methods' inversion of the original face, at other settings: what a longer fit with the face-region term
would change in the whole-photo output (privacy guard on), measured face by face.

Each setting is ``STEPS:FACE_WEIGHT``: the methods' ``refine_steps`` and ``face_fit`` controls (the face-region term
of :func:`zoo.inversion.reconstruction_loss`; the methods' defaults are ``20:0``, ``zoo reconstruct`` uses ``40:3``). Every
method runs at its defaults otherwise (detection, guard, compositing) on whole real photos
(:mod:`benchmarks.real_photos`, tuning and held-out kept apart), with one key; each known face is measured at its
place:

* the guard's outcome (blurred, drawn over a wider region) and its two recognizers' cosine distances (SFace, FaceRes)
  from the original to the anonymized face and to the right key's recovery (from the carried code, as from the
  saved PNG);
* the recovery's PSNR over the face box (dB) against the original;
* the anonymized face's head-pose change (face mesh yaw and pitch, degrees; :func:`zoo.face_mesh.mesh_head_pose`);
* dlib (judge only; ``--no-dlib`` for a run that chooses a setting): anonymized and recovered same person (< 0.6);
* seconds per photo.

    python -m benchmarks.method_inversion --methods dbaf,personal --settings 20:0,40:3 --split tuning --no-dlib
    # -> results/method_inversion.{json,md} (--add keeps the runs of other methods, settings and splits)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from benchmarks import real_photos as RP
from benchmarks.report import command_line, rate, rate_text, write_results
from zoo.judges import FACERES_THRESHOLD
from zoo.nn.sface import COSINE_THRESHOLD as SFACE_THRESHOLD

os.environ.setdefault("HF_HUB_OFFLINE", "1")
OUT = Path(__file__).resolve().parent / "results" / "method_inversion"
KEY = "method inversion benchmark key"
#: the two guard recognizers' same-person lines used in the table, as cosine distances: SFace's published cosine
#: threshold and FaceRes's at a 1% false-match rate
SFACE_LINE, FACERES_LINE = 1 - SFACE_THRESHOLD, 1 - FACERES_THRESHOLD


def parse_settings(text: str) -> list[tuple[int, float]]:
    """``"20:0,40:3"`` -> [(20, 0.0), (40, 3.0)]; a clear error for anything else."""
    out = []
    for part in text.split(","):
        steps, _, weight = part.partition(":")
        try:
            out.append((int(steps), float(weight)))
        except ValueError:
            raise SystemExit(f"--settings: expected STEPS:FACE_WEIGHT pairs such as 20:0,40:3, got {part!r}") from None
        if out[-1][0] < 0 or out[-1][1] < 0:
            raise SystemExit(f"--settings: steps and face weight must be >= 0, got {part!r}")
    return out


def box_psnr(a: np.ndarray, b: np.ndarray, box) -> float:
    """PSNR (dB) of uint8 ``b`` against ``a`` over ``box`` [x0, y0, x1, y1]."""
    x0, y0, x1, y1 = (int(round(v)) for v in box)
    pa, pb = a[max(0, y0) : y1, max(0, x0) : x1].astype(np.float64), b[max(0, y0) : y1, max(0, x0) : x1].astype(np.float64)
    return float(10 * np.log10(255.0**2 / max(float(((pa - pb) ** 2).mean()), 1e-9)))


def measure_photo(method, rgb: np.ndarray, boxes: np.ndarray, steps: int, face_fit: float, judges: dict) -> tuple[list[dict], float]:
    """Rows (one per known face) for one photo through ``method`` with ``refine_steps=steps, face_fit=face_fit``; and
    the seconds taken."""
    from benchmarks.appearance import record_at
    from benchmarks.fail_closed import judge, judge_places
    from zoo.face_mesh import mesh_head_pose

    faces = judge_places(rgb, boxes)
    t0 = time.perf_counter()
    result = method.anonymize(rgb, key=KEY, refine_steps=steps, face_fit=face_fit)
    seconds = time.perf_counter() - t0
    out = np.asarray(result)
    back = np.asarray(method.recover(result, key=KEY, refine_steps=steps, face_fit=face_fit))
    anon, rec = judge(rgb, out, boxes, faces, judges), judge(rgb, back, boxes, faces, judges)
    rows = []
    for i, (box, face) in enumerate(zip(boxes, faces)):
        record = record_at(result, np.asarray(box))
        guard = (record.guard or {}) if record is not None else {}
        row = {"face": i, "size": anon[i]["size"], "blurred": bool(guard.get("blurred")), "wider": guard.get("reach") is not None}
        if face is not None:
            for name in judges:
                row[f"anonymized_{name}"], row[f"recovered_{name}"] = anon[i].get(name), rec[i].get(name)
            row["recovered_psnr_db"] = round(box_psnr(rgb, back, box), 2)
            if not row["blurred"]:
                before, after = mesh_head_pose(rgb, face.landmarks), mesh_head_pose(out, face.landmarks)
                if np.all(np.isfinite(before[:2])) and np.all(np.isfinite(after[:2])):
                    row["yaw_change"], row["pitch_change"] = (round(float(abs(after[k] - before[k])), 2) for k in (0, 1))
        rows.append(row)
    return rows, seconds


def summarise(rows: list[dict], seconds: list[float], dlib_thr: float | None) -> dict:
    judged = [r for r in rows if "anonymized_sface" in r]
    kept = [r for r in judged if not r["blurred"]]

    def median(key: str, of: list[dict]) -> float | None:
        vals = [r[key] for r in of if r.get(key) is not None]
        return round(float(np.median(vals)), 3) if vals else None

    def count(pred, of: list[dict]) -> dict:
        return rate(sum(bool(pred(r)) for r in of), len(of))

    out = {
        "faces": len(rows),
        "judged": len(judged),
        "blurred": sum(r["blurred"] for r in rows),
        "wider": sum(r["wider"] for r in rows),
        "anonymized_sface_median": median("anonymized_sface", kept),
        "anonymized_faceres_median": median("anonymized_faceres", kept),
        "recovered_sface_median": median("recovered_sface", judged),
        "recovered_faceres_median": median("recovered_faceres", judged),
        "recovered_within_both_lines": count(lambda r: r["recovered_sface"] < SFACE_LINE and r["recovered_faceres"] < FACERES_LINE, judged),
        "recovered_psnr_db_median": median("recovered_psnr_db", judged),
        "yaw_change_median": median("yaw_change", kept),
        "pitch_change_median": median("pitch_change", kept),
        "seconds_per_face": round(sum(seconds) / max(len(rows), 1), 2),
    }
    if dlib_thr is not None:
        out["anonymized_dlib_same"] = count(lambda r: r["anonymized_dlib"] < dlib_thr, judged)
        out["recovered_dlib_same"] = count(lambda r: r["recovered_dlib"] < dlib_thr, judged)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", default="dbaf,personal")
    p.add_argument("--settings", default="20:0,40:3", help="STEPS:FACE_WEIGHT pairs (the refine_steps and face_fit controls)")
    p.add_argument("--split", choices=RP.SPLITS, default="tuning")
    p.add_argument("--photos", default=None, help="comma-separated photo names (default: every photo of --split but the built crowd)")
    p.add_argument("--no-dlib", action="store_true", help="leave the judge out (a run that chooses a setting)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--add", action="store_true", help="keep the results file's runs that this one does not redo")
    a = p.parse_args(argv)
    settings = parse_settings(a.settings)
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)

    import zoo
    from zoo.judges import get_judge

    names = ("sface", "faceres") if a.no_dlib else ("sface", "faceres", "dlib")
    judges = {n: get_judge(n) for n in names}
    dlib_thr = None if a.no_dlib else judges["dlib"].threshold
    wanted = a.photos.split(",") if a.photos else None
    photos = RP.photos(wanted)
    if not wanted:  # the split's photos (not the tuning photo t1's synthetic crowd)
        photos = {k: photos[k] for k in RP.in_split(photos, a.split) if k != "crowd"}
    runs: dict = {}
    for method_name in a.methods.split(","):
        for steps, weight in settings:
            method = zoo.load(method_name)
            if getattr(method, "wplus", None) is None:
                raise SystemExit(f"{method_name} does not run on the W+ backbone")
            rows: dict[str, list] = {"tuning": [], "held-out": []}
            seconds: dict[str, list] = {"tuning": [], "held-out": []}
            for name, (rgb, boxes) in photos.items():
                got, s = measure_photo(method, rgb, boxes, steps, weight, judges)
                rows[RP.split_of(name)] += [{"photo": name, **r} for r in got]
                seconds[RP.split_of(name)].append(s)
                print(method_name, f"{steps}:{weight:g}", name, f"{s:.1f} s", json.dumps(got), flush=True)
            for split in ("tuning", "held-out"):
                if rows[split]:
                    key = f"{method_name}|{steps}:{weight:g}|{split}"
                    runs[key] = {
                        "summary": summarise(rows[split], seconds[split], dlib_thr),
                        "rows": rows[split],
                        "photos": sorted({r["photo"] for r in rows[split]}),
                    }

    result = {"command": command_line("benchmarks.method_inversion", argv), "runs": runs}
    if a.add and a.out.with_suffix(".json").is_file():
        before = json.loads(a.out.with_suffix(".json").read_text())
        result["runs"] = {**{k: v for k, v in before["runs"].items() if k not in runs}, **runs}
        result["command"] = before["command"] + " ; " + result["command"]
    write_report(result, a.out)
    return 0


def _rate(c: dict | None) -> str:
    return rate_text(c) if c else "-"


def write_report(result: dict, out: Path) -> None:
    lines = [
        "# The W+ methods' inversion at other settings (whole photos, guard on)",
        "",
        f"`{result['command']}`",
        "",
        "Setting = the controls refine_steps : face_fit (defaults 20:0). One key; known faces measured at their place. Distances are",
        "cosine distances to the original (medians; anonymized over the faces not blurred). 'Recovered within both lines': the",
        f"right key's recovery under SFace {SFACE_LINE:.3f} and FaceRes {FACERES_LINE:.4f} (same person for both). Pose: face mesh,",
        "degrees. dlib (judge only) where the run had it. k/n [95% Wilson].",
        "",
        "| method | setting | split | faces | blurred / wider | anonymized SFace / FaceRes | recovered SFace / FaceRes | recovered within both lines | recovered PSNR dB | yaw / pitch change | anonymized dlib same | recovered dlib same | s/face |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, run in sorted(result["runs"].items()):
        method, setting, split = key.split("|")
        s = run["summary"]
        lines.append(
            f"| {method} | {setting} | {split} | {s['judged']} | {s['blurred']} / {s['wider']} | {s['anonymized_sface_median']} / {s['anonymized_faceres_median']} | "
            f"{s['recovered_sface_median']} / {s['recovered_faceres_median']} | {_rate(s['recovered_within_both_lines'])} | {s['recovered_psnr_db_median']} | "
            f"{s['yaw_change_median']} / {s['pitch_change_median']} | {_rate(s.get('anonymized_dlib_same'))} | {_rate(s.get('recovered_dlib_same'))} | {s['seconds_per_face']} |"
        )
    write_results(out, result, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
