"""What users see: does each method's new face belong in the photo? Judged by dlib, beside identity.

    python -m benchmarks.appearance [--methods dbaf,hford,ifadit,personal,ideudemon] [--paste | --blend poisson] [--sheet PNG]

The real photos of :data:`benchmarks.real_photos.REAL_PHOTOS`, split before measuring (``tuning``: t1.jpg, 6 faces, and
biden; ``held-out``: astronaut, camera, grace_hopper, Tom Hanks and five photos of Obama). Every method anonymizes every photo at its defaults
(key ``appearance``; privacy guard at its default). For each face the original's dlib CNN detector found, at the
place of that face (all measures use dlib, which no method uses):

* ``status``: what the zoo's report says of the face (``processed``, ``guard_blur``: the privacy guard blurred it);
* ``detected``: dlib's CNN detector finds a face in the output overlapping the original's box (IoU >= 0.3);
* ``same``: dlib same person (descriptor distance < 0.6) at the original's place;
* ``nme``: mean distance of dlib's 68 landmarks, output against original, over the outer-eye-corner distance;
* ``yaw`` / ``pitch``: head-pose yaw and pitch change in degrees (68 landmarks + solvePnP,
  :func:`zoo.face3d.landmarks.head_pose`); medians and 90th percentiles;
* ``mouth`` / ``eyes``: change of the inner-lip gap and of the eye opening, in outer-eye-corner distances;
* ``face_de``: CIE76 dE between the mean Lab colours inside the original's 68-landmark hull (jaw and brows);
* ``ring_de``: the same for the skin ring just outside that hull (from 2% to 8% of the face size);
* ``sharpness``: Laplacian variance inside the hull, output over original;
* reversible methods: the anonymized photo recovered with the right key (as a saved PNG would be: the carrier
  block is read back from the pixels) and with a wrong key: ``recovered_same`` / ``wrong_key_same`` (dlib same
  person at the original's place) and ``recovered_closer`` (the recovery nearer the original than the anonymized
  face, by dlib distance).

``--paste`` measures the plain 5-point paste (compositing off) for comparison, ``--blend poisson`` the compositing
with the gradient-domain blend instead of the feathered one (:func:`zoo.compositing.blend`). Medians with the tuning and
held-out splits apart; rates with 95% Wilson intervals. Writes ``benchmarks/results/appearance[_paste].{json,md}``;
``--sheet`` also draws a contact sheet (original | each method | dbaf recovered with the right key).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import cv2
import numpy as np

from benchmarks.real_photos import REAL_PHOTOS, packaged_photos
from benchmarks.report import add_control_option, command_line, method_controls, rate, rate_text, rows_not_run, write_results
from zoo.compositing import BLEND_MODES, delta_e, laplacian_variance, mean_lab
from zoo.detectors import DetectedFace
from zoo.face3d.landmarks import angle_difference, head_pose, predict_landmarks68

OUT = Path(__file__).resolve().parent / "results" / "appearance"
KEY = "appearance"
DEFAULT_METHODS = ("dbaf", "hford", "ifadit", "personal", "ideudemon")


class DlibEye:
    """dlib's CNN face detector, 68-point predictor and face descriptor: the judge of every measure here."""

    def __init__(self) -> None:
        import dlib

        from zoo.detectors import package_dir
        from zoo.judges import get_judge

        models = Path(package_dir("face_recognition_models")) / "models"
        self.cnn = dlib.cnn_face_detection_model_v1(str(models / "mmod_human_face_detector.dat"))
        self.judge = get_judge("dlib")

    def boxes(self, rgb: np.ndarray) -> list[np.ndarray]:
        """dlib CNN face boxes [x0, y0, x1, y1] (one upsampling pass for small photos)."""
        up = 1 if max(rgb.shape[:2]) < 800 else 0
        return [np.array([d.rect.left(), d.rect.top(), d.rect.right(), d.rect.bottom()], np.float64) for d in self.cnn(np.ascontiguousarray(rgb), up)]


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    x0, y0, x1, y1 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x1 - x0) * max(0.0, y1 - y0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / max(union, 1e-9)


def record_at(result, box: np.ndarray, min_iou: float = 0.2):
    """The report entry (:class:`zoo.methods.base.FaceRecord`) of the face the tool found at ``box`` [x0, y0, x1, y1]:
    the one overlapping it most, if by more than ``min_iou``; else None."""
    record = max(result.faces, key=lambda f: box_iou(box, np.asarray(f.box)), default=None)
    return record if record is not None and box_iou(box, np.asarray(record.box)) > min_iou else None


def _hull_masks(shape: tuple[int, int], lm68: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(face, ring) boolean masks: the hull of jaw (0-16) and brows (17-26), and the ring just outside it."""
    pts = np.rint(lm68[:27]).astype(np.int32)
    face = np.zeros(shape, np.uint8)
    cv2.fillConvexPoly(face, cv2.convexHull(pts), 1)
    size = float(max(np.ptp(lm68[:, 0]), np.ptp(lm68[:, 1])))
    dist = cv2.distanceTransform(1 - face, cv2.DIST_L2, 5)
    ring = (dist > 0.02 * size) & (dist <= 0.08 * size)
    return face.astype(bool), ring


def _openings(lm: np.ndarray) -> tuple[float, float]:
    """(inner-lip gap, mean eye opening) over the outer-eye-corner distance."""
    scale = max(float(np.hypot(*(lm[45] - lm[36]))), 1e-6)
    mouth = float(np.hypot(*(lm[66] - lm[62])))
    eyes = (np.hypot(*(lm[37] - lm[41])) + np.hypot(*(lm[38] - lm[40])) + np.hypot(*(lm[43] - lm[47])) + np.hypot(*(lm[44] - lm[46]))) / 4
    return mouth / scale, float(eyes) / scale


def _turn_of_face(found: list[DetectedFace], box: np.ndarray) -> int:
    """Quarter turns that put the face at ``box`` upright (:func:`zoo.judges.upright_turn` of the landmarks of the face
    of ``found``, the zoo detector's faces of the photo, overlapping it most; 0 where none overlaps it)."""
    from zoo.judges import upright_turn

    face = max(found, key=lambda f: box_iou(box, f.box), default=None)
    return upright_turn(face.landmarks) if face is not None and box_iou(box, face.box) > 0.2 else 0


@dataclass
class OriginalFace:
    """One face of the original photo as dlib sees it, measured once for every output compared with it."""

    photo: np.ndarray  # uint8 [H, W, 3], the original
    box: np.ndarray  # dlib CNN box [x0, y0, x1, y1]
    lm68: np.ndarray  # [68, 2] dlib landmarks in the original
    place: DetectedFace  # the box and 5 of those landmarks: where dlib's descriptor reads every image
    descriptor: np.ndarray  # dlib's descriptor of the original face

    @classmethod
    def measure_all(cls, eye: DlibEye, photo: np.ndarray, boxes) -> list["OriginalFace"]:
        """:meth:`measure` of every box of ``photo`` (the zoo detector runs once for the photo)."""
        from zoo.detection import detect_faces

        found = detect_faces(photo)
        return [cls.measure(eye, photo, np.asarray(box, np.float64), found) for box in boxes]

    @classmethod
    def measure(cls, eye: DlibEye, photo: np.ndarray, box: np.ndarray, found: list[DetectedFace]) -> "OriginalFace":
        """The face at ``box``; ``found``: the zoo detector's faces of ``photo``, which say whether it lies on its side."""
        box = np.asarray(box, np.float64)
        lm68 = predict_landmarks68(photo, tuple(int(round(v)) for v in box))
        place = DetectedFace(box, lm68[[36, 45, 30, 48, 54]].astype(np.float64), 1.0, "dlib")
        turn = _turn_of_face(found, box)
        if turn:  # a face on its side in the photo: dlib's landmarks only fit it upright, so read them there
            from zoo.detection import turned_face

            turned = np.ascontiguousarray(np.rot90(photo, turn))
            tbox = turned_face(place, turn, photo.shape).box
            lm_turned = predict_landmarks68(turned, tuple(int(round(v)) for v in tbox))
            back = turned_face(DetectedFace(tbox, lm_turned[[36, 45, 30, 48, 54]].astype(np.float64), 1.0, "dlib"), 4 - turn, turned.shape)
            place = DetectedFace(box, back.landmarks, 1.0, "dlib")
        return cls(photo, box, lm68, place, eye.judge.embed_photo_faces(photo, [place]))

    def distance(self, eye: DlibEye, image: np.ndarray) -> float:
        """dlib descriptor distance between the original face and ``image`` at the original's place."""
        return float(eye.judge.distance(self.descriptor, eye.judge.embed_photo_faces(image, [self.place], shapes_from=self.photo))[0])


def judged_photos(eye: DlibEye, photos: list[str]) -> Iterator[tuple[str, str, np.ndarray, list[OriginalFace]]]:
    """(photo, split, uint8 RGB, its faces as dlib sees them) for each of ``photos`` (:func:`packaged_photos`) where
    dlib's CNN detector finds a face; the others are skipped, and said so."""
    for name, split, rgb in packaged_photos(photos):
        boxes = eye.boxes(rgb)
        if not boxes:
            print(f"skipped {name}: dlib finds no face in the original")
            continue
        yield name, split, rgb, OriginalFace.measure_all(eye, rgb, boxes)


def measure_face(eye: DlibEye, ref: OriginalFace, output: np.ndarray, out_boxes: list[np.ndarray]) -> dict:
    """Every appearance measure of the original face ``ref`` in ``output``."""
    original, box, lm_in = ref.photo, ref.box, ref.lm68
    lm_out = predict_landmarks68(output, tuple(int(round(v)) for v in box))
    scale = max(float(np.hypot(*(lm_in[45] - lm_in[36]))), 1e-6)
    face, ring = _hull_masks(original.shape[:2], lm_in)
    pose_in, pose_out = head_pose(lm_in, original.shape[:2]), head_pose(lm_out, original.shape[:2])
    yaw = float(abs(angle_difference(pose_out[0], pose_in[0])))
    pitch = float(abs(angle_difference(pose_out[1], pose_in[1])))
    (m_in, e_in), (m_out, e_out) = _openings(lm_in), _openings(lm_out)
    d = ref.distance(eye, output)
    return {
        "detected": any(box_iou(box, o) >= 0.3 for o in out_boxes),
        "same": d < eye.judge.threshold,
        "dlib_distance": round(d, 4),
        "nme": round(float(np.linalg.norm(lm_out - lm_in, axis=1).mean() / scale), 4),
        "yaw": round(yaw, 2),
        "pitch": round(pitch, 2),
        "mouth": round(abs(m_out - m_in), 4),
        "eyes": round(abs(e_out - e_in), 4),
        "face_de": round(delta_e(mean_lab(original, face), mean_lab(output, face)), 2),
        "ring_de": round(delta_e(mean_lab(original, ring), mean_lab(output, ring)), 2),
        "sharpness": round(laplacian_variance(output, face) / max(laplacian_variance(original, face), 1e-6), 3),
    }


def summarise(rows: list[dict]) -> dict:
    """Rates over every face; medians of the appearance measures over the faces the method drew (status
    ``processed``: a face the guard blurred is counted in ``guard_blurred``, not in how drawn faces look)."""
    if not rows:
        return {"n": 0}
    drawn = [r for r in rows if r.get("status") == "processed"]
    med = {
        k: (round(float(np.median([r[k] for r in drawn])), 3) if drawn else None) for k in ("nme", "yaw", "mouth", "eyes", "face_de", "ring_de", "sharpness")
    }
    posed = [r for r in drawn if "pitch" in r and np.isfinite(r["yaw"]) and np.isfinite(r["pitch"])]  # rows from before the pitch column lack it
    for k in ("yaw", "pitch"):
        med[f"{k}_p50"] = round(float(np.median([r[k] for r in posed])), 2) if posed else None
        med[f"{k}_p90"] = round(float(np.percentile([r[k] for r in posed], 90)), 2) if posed else None
    n = len(rows)
    recovery = {}
    if all("recovered_same" in r for r in rows):
        recovery = {k: rate(sum(r[k] for r in rows), n) for k in ("recovered_same", "recovered_closer", "wrong_key_same")}
    return {
        **recovery,
        "n": n,
        "detected": rate(sum(r["detected"] for r in rows), n),
        "same": rate(sum(r["same"] for r in rows), n),
        "guard_blurred": rate(sum(r.get("status") == "guard_blur" for r in rows), n),
        "ring_de_ok": rate(sum(r["ring_de"] <= 2.5 for r in rows), n),
        "face_de_ok": rate(sum(r["face_de"] <= 6 for r in rows), n),
        "sharpness_ok": rate(sum(0.6 <= r["sharpness"] <= 1.4 for r in rows), n),
        "drawn": len(drawn),
        "median": med,
    }


def _pose_cell(med: dict) -> str:
    if med.get("yaw_p50") is None:  # face rows measured before the pitch column: the yaw median alone
        return f"{med['yaw']} / -"
    return f"{med['yaw_p50']} ({med['yaw_p90']}) / {med['pitch_p50']} ({med['pitch_p90']})"


def _recovery_cells(s: dict) -> str:
    if "recovered_same" not in s:
        return "- | -"
    n = s["n"]
    return f"{rate_text(s['recovered_same'])} / {s['recovered_closer']['k']}/{n} | {rate_text(s['wrong_key_same'])}"


def contact_sheet(photo: np.ndarray, columns: list[tuple[str, np.ndarray]], box: np.ndarray | None = None, height: int = 256) -> np.ndarray:
    """One row of labelled tiles (uint8 RGB), each cut to the head around ``box`` (a face box, grown 70% on each
    side; the whole photo without one) and scaled to ``height`` pixels."""
    if box is not None:
        x0, y0, x1, y1 = np.asarray(box, np.float64)
        g = 0.7 * max(x1 - x0, y1 - y0)
        h, w = photo.shape[:2]
        cx0, cy0, cx1, cy1 = int(max(0, x0 - g)), int(max(0, y0 - g)), int(min(w, x1 + g)), int(min(h, y1 + g))
        photo = photo[cy0:cy1, cx0:cx1]
        columns = [(label, img[cy0:cy1, cx0:cx1]) for label, img in columns]
    tiles = []
    for label, img in [("original", photo), *columns]:
        k = height / img.shape[0]
        tile = cv2.resize(img, (int(round(img.shape[1] * k)), height), interpolation=cv2.INTER_AREA)
        tile = np.concatenate([np.full((24, tile.shape[1], 3), 255, np.uint8), tile], 0)
        cv2.putText(tile, label, (4, 17), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
        tiles.append(tile)
        tiles.append(np.full((tile.shape[0], 4, 3), 255, np.uint8))
    return np.concatenate(tiles[:-1], 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    ap.add_argument("--photos", default=",".join(REAL_PHOTOS), help="names from benchmarks.real_photos.REAL_PHOTOS")
    ap.add_argument("--paste", action="store_true", help="compositing off: the plain 5-point paste")
    ap.add_argument("--blend", choices=BLEND_MODES, default=None, help="the compositing's blend (default: each method's)")
    ap.add_argument("--sheet", default=None, help="also write a contact sheet PNG (the --sheet-photo's first face)")
    ap.add_argument("--sheet-photo", default="astronaut")
    ap.add_argument("--no-recovery", action="store_true", help="skip the right- and wrong-key recoveries")
    ap.add_argument("--add", action="store_true", help="add to the results file: keep its rows of the methods and photos not run now")
    ap.add_argument("--out", default=None)
    add_control_option(ap)
    ap.add_argument("--summarise", action="store_true", help="only write the summaries again from the results file's face rows")
    args = ap.parse_args(argv)
    controls = method_controls(args)
    out_path = Path(args.out) if args.out else OUT.with_name(OUT.name + ("_paste" if args.paste else ""))
    if args.summarise:
        write_report(json.loads(out_path.with_suffix(".json").read_text()), out_path)
        return 0

    import zoo

    eye = DlibEye()
    methods = [m for m in args.methods.split(",") if m]
    rows: dict[str, list[dict]] = {m: [] for m in methods}
    seconds: dict[str, float] = {m: 0.0 for m in methods}
    sheet_cols: list[tuple[str, np.ndarray]] = []
    sheet_photo, sheet_box = None, None
    for name, split, rgb, refs in judged_photos(eye, args.photos.split(",")):
        for method in methods:
            m = zoo.load(method)
            if args.paste:
                m.draws_new_face = False
            if args.blend:
                m.blend_mode = args.blend
            t0 = time.perf_counter()
            result = m.anonymize(rgb, key=KEY, **controls)
            seconds[method] += time.perf_counter() - t0
            out = np.asarray(result)
            out_boxes = eye.boxes(out)
            recovered = wrong = None
            if m.reversible and not args.no_recovery:
                recovered = np.asarray(m.recover(out, key=KEY, **controls))
                wrong = np.asarray(m.recover(out, key=KEY + " (wrong)", **controls))
            for i, ref in enumerate(refs):
                record = record_at(result, ref.box)
                status = record.status if record is not None else "not found"
                row = {"photo": name, "split": split, "face": i, "status": status, **measure_face(eye, ref, out, out_boxes)}
                if record is not None and record.guard:  # the guard's own distances (SFace, FaceRes), beside dlib's
                    row["guard"] = record.guard
                if recovered is not None:
                    d_rec = ref.distance(eye, recovered)
                    row.update(
                        recovered_distance=round(d_rec, 4),
                        recovered_same=d_rec < eye.judge.threshold,
                        recovered_closer=d_rec < row["dlib_distance"],
                        wrong_key_same=ref.distance(eye, wrong) < eye.judge.threshold,
                    )
                rows[method].append(row)
                print(method, name, i, row, flush=True)
            if args.sheet and name == args.sheet_photo:
                sheet_photo, sheet_box = rgb, refs[0].box
                sheet_cols.append((method, out))
                if method == "dbaf" and recovered is not None:
                    sheet_cols.append(("dbaf recovered (right key)", recovered))

    command = command_line("benchmarks.appearance", argv)
    if args.add and out_path.with_suffix(".json").is_file():  # one results file built over several runs
        before = json.loads(out_path.with_suffix(".json").read_text())
        for m, kept in rows_not_run(before.get("methods", {}), "faces", methods, set(args.photos.split(","))).items():
            rows[m] = kept + rows.get(m, [])
            seconds[m] = seconds.get(m, 0.0) + ((before["methods"][m].get("seconds") or 0.0) if kept else 0.0)
        command = before["command"] + " ; " + command
    result = {
        "command": command,
        "compositing": "off (plain 5-point paste)" if args.paste else f"on (zoo.compositing{', ' + args.blend + ' blend' if args.blend else ''})",
        "methods": {m: {"seconds": round(seconds[m], 1), "faces": rs} for m, rs in rows.items()},
    }
    write_report(result, out_path)
    if args.sheet and sheet_photo is not None:
        sheet = contact_sheet(sheet_photo, sheet_cols, sheet_box)
        Path(args.sheet).parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(args.sheet, cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 9])
        print("wrote", args.sheet)
    return 0


def write_report(result: dict, out_path: Path) -> None:
    """Summaries (tuning and held-out apart) from each method's face rows, then the JSON and Markdown results."""
    for per in result["methods"].values():
        rs = per["faces"]
        per["tuning"] = summarise([r for r in rs if r["split"] == "tuning"])
        per["held-out"] = summarise([r for r in rs if r["split"] == "held-out"])
    md = [
        f"# Appearance of the output faces ({result['compositing']})",
        "",
        f"`{result['command']}`. dlib judges every column. Rates over every face; medians over the faces the method drew "
        "(not blurred by the guard); targets: ring dE <= 2.5, face dE <= 6, sharpness 0.6-1.4.",
        "",
        "| method | split | N | blurred by the guard | dlib finds face | dlib same | face dE | ring dE | sharpness | yaw / pitch change deg, median (p90) | NME | mouth | eyes | right key: same / closer | wrong key: same |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m, r in result["methods"].items():
        for split in ("tuning", "held-out"):
            s = r[split]
            if not s.get("n"):
                continue
            med = s["median"]
            md.append(
                f"| {m} | {split} | {s['n']} | {s['guard_blurred']['k']}/{s['n']} | {s['detected']['k']}/{s['n']} | {rate_text(s['same'])} | "
                f"{med['face_de']} | {med['ring_de']} | {med['sharpness']} | {_pose_cell(med)} | {med['nme']} | {med['mouth']} | {med['eyes']} | {_recovery_cells(s)} |"
            )
    write_results(out_path, result, md)
    print("\n".join(md))


if __name__ == "__main__":
    raise SystemExit(main())
