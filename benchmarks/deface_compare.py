"""Baselines against deface 1.5.0, same photos, same run: faces still recognised, distances, photos/s.

    python -m benchmarks.deface_compare [--methods blur,pixelate,noise,mask] [--threads 2]
                                        [-c blur:strength=0.7 ...]

Photos and known faces: ``real_photos.py`` (t1, astronaut, camera, crowd: 62 faces), each as taken,
turned 90/180/270, mirrored, 0.25x and grayscale. Every zoo baseline runs at its defaults (or ``-c``
overrides) through ``method.anonymize`` (detection included); deface runs its CenterFace detector and
its default anonymisation (threshold 0.2, blur, ellipse, mask scale 1.3) through its Python functions,
in memory like ours (no file I/O on either side). The outputs are turned back upright and every known
face is judged at its original place against the unprocessed photo (turned back too):

* dlib (independent of every zoo method): matched when the distance is < 0.6; dlib locates its
  landmarks in the unprocessed photo (``zoo.judges.embed_at_original_places``);
* SFace (OpenCV zoo): matched when cosine >= 0.363; aligned from YuNet's landmarks of the unprocessed
  photo (faces YuNet cannot find there are judged by dlib only);
* untouched: the face box changed by less than 2 grey levels on average.

Speed: photos per second over all photos and transforms, anonymisation only (not the judging); the
key of the keyed method (``noise``) is stretched once for the run, as a CLI run over many photos does.
Writes ``results/deface_compare.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from benchmarks import real_photos as RP

HERE = Path(__file__).resolve().parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _deface_runner(threshold: float = 0.2, mask_scale: float = 1.3):
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # deface prints its execution provider
        from deface.centerface import CenterFace
        from deface.deface import anonymize_frame

        cf = CenterFace(in_shape=None, backend="auto")

    def run(rgb: np.ndarray) -> np.ndarray:
        frame = np.array(rgb, copy=True)
        dets, _ = cf(frame, threshold=threshold)
        anonymize_frame(dets, frame, mask_scale=mask_scale, replacewith="blur", ellipse=True, draw_scores=False, replaceimg=None, mosaicsize=20)
        return frame

    return run


def _judge_faces(ref: np.ndarray, boxes: np.ndarray):
    """DetectedFace per known box: YuNet's landmarks where YuNet finds the face in ``ref``, else None."""
    from zoo.detection import detect_faces
    from zoo.detectors import DetectedFace

    found = detect_faces(ref, "yunet")
    out = []
    for b in boxes:
        hit = None
        for f in found:
            if RP.matches(np.array([b]), np.array([f.box]))[0]:
                hit = f
                break
        out.append((DetectedFace(b, hit.landmarks if hit is not None else np.zeros((5, 2)), 1.0), hit is not None))
    return out


def judge(ref: np.ndarray, out: np.ndarray, faces, dlib, sface) -> dict:
    from zoo.judges import embed_at_original_places

    all_faces = [f for f, _ in faces]
    d = dlib.distance(dlib.embed_photo_faces(ref, all_faces), embed_at_original_places(dlib, ref, out, all_faces))
    sf = [f for f, ok in faces if ok]
    s = sface.distance(sface.embed_photo_faces(ref, sf), sface.embed_photo_faces(out, sf)) if sf else np.zeros(0)
    untouched = []
    for f in all_faces:
        x0, y0, x1, y1 = (int(round(v)) for v in f.box)
        a, b = ref[max(0, y0) : y1, max(0, x0) : x1].astype(np.float32), out[max(0, y0) : y1, max(0, x0) : x1].astype(np.float32)
        untouched.append(bool(a.size == 0 or np.abs(a - b).mean() < 2.0))
    size = [float(max(f.box[2] - f.box[0], f.box[3] - f.box[1])) for f in all_faces]
    judged = [ok for _, ok in faces]
    return {"dlib": d.tolist(), "sface": s.tolist(), "untouched": untouched, "size": size, "sface_face": judged}


#: faces smaller than this (box side, px) are below what the judges work at: dlib "matches" a 9 px face
#: with a flat gray disc in its place. They are counted (untouched or not) but not judged.
MIN_JUDGED = 20.0


def summarise(rows: list[dict], dlib_thr: float, sface_thr: float) -> dict:
    cat = lambda k, dt=float: np.concatenate([np.asarray(r[k], dt) for r in rows]) if rows else np.zeros(0, dt)  # noqa: E731
    d, s, u, size, sf_ok = cat("dlib"), cat("sface"), cat("untouched", bool), cat("size"), cat("sface_face", bool)
    big = size >= MIN_JUDGED
    dm = (d < dlib_thr) & big
    sm = (s < sface_thr) & big[sf_ok]
    return {
        "faces": int(len(d)),
        "judged": int(big.sum()),
        "too_small_to_judge": int((~big).sum()),
        "dlib_matched": int(dm.sum()),
        "dlib_mean_distance": round(float(d[big].mean()), 4) if big.any() else None,
        "sface_judged": int(big[sf_ok].sum()),
        "sface_matched": int(sm.sum()),
        "untouched": int(u.sum()),
        "matched_or_untouched": int((dm | u).sum() + 0 * sm.sum()),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", default="blur,pixelate,noise,mask")
    p.add_argument("-c", "--control", action="append", default=[], help="METHOD:NAME=VALUE")
    p.add_argument("--transforms", default=",".join(RP.TRANSFORMS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-deface", action="store_true")
    p.add_argument("--detector", default=None, help="zoo face detector (sets ZOO_DETECTOR; default: auto)")
    p.add_argument("--out", default=str(HERE / "results" / "deface_compare"))
    args = p.parse_args(argv)
    import cv2
    import torch

    import zoo
    from zoo.judges import get_judge

    torch.set_num_threads(args.threads)
    cv2.setNumThreads(args.threads)
    if args.detector:
        os.environ["ZOO_DETECTOR"] = args.detector
    from zoo.detectors import resolve_detector

    detector = resolve_detector("auto")
    controls: dict[str, dict] = {}
    for c in args.control:
        m, _, kv = c.partition(":")
        k, _, v = kv.partition("=")
        controls.setdefault(m, {})[k] = v
    dlib, sface = get_judge("dlib"), get_judge("sface")
    photos = RP.photos()
    transforms = [t.strip() for t in args.transforms.split(",") if t.strip()]
    runners = {}
    key = zoo.Secret("benchmark")  # stretched once for the run, as the CLI does (noise is keyed)
    for name in [m.strip() for m in args.methods.split(",") if m.strip()]:
        method = zoo.load(name, device="cpu")
        runners[name] = (lambda m, c: lambda img: np.asarray(m.anonymize(img, key=key, **c)))(method, controls.get(name, {}))
    if not args.no_deface:
        runners["deface 1.5.0"] = _deface_runner()
    for run in runners.values():  # warm up (model loading, first-call costs)
        run(photos["astronaut"][0])
    per: dict[str, dict[str, list]] = {n: {t: [] for t in transforms} for n in runners}
    seconds = {n: 0.0 for n in runners}
    count = 0
    for how in transforms:
        for pname, (rgb, boxes) in photos.items():
            img, _ = RP.transformed(rgb, boxes, how)
            ref, ref_boxes = RP.upright_reference(rgb, boxes, how)
            faces = _judge_faces(ref, ref_boxes)
            count += 1
            for n, run in runners.items():
                t = time.perf_counter()
                out = run(img)
                seconds[n] += time.perf_counter() - t
                r = judge(ref, RP.undo(out, how), faces, dlib, sface)
                r["photo"] = pname
                per[n][how].append(r)
        print(how, "done", flush=True)
    res = {
        "photos": {n: len(b) for n, (_, b) in photos.items()},
        "transforms": transforms,
        "controls": controls,
        "detector": detector,
        "threads": args.threads,
        "cpu": platform.processor() or platform.machine(),
        "photo_runs": count,
        "methods": {},
    }
    for n in runners:
        rows_all = [r for t in transforms for r in per[n][t]]
        res["methods"][n] = {
            "all": summarise(rows_all, dlib.threshold, sface.distance_threshold),
            "per_transform": {t: summarise(per[n][t], dlib.threshold, sface.distance_threshold) for t in transforms},
            "photos_per_second": round(count / seconds[n], 3),
            "per_photo": {t: [{k: (np.round(v, 4).tolist() if k in ("dlib", "sface") else v) for k, v in r.items()} for r in per[n][t]] for t in transforms},
        }
    if "deface 1.5.0" in runners:
        base = res["methods"]["deface 1.5.0"]["photos_per_second"]
        for n in runners:
            res["methods"][n]["speed_vs_deface"] = round(res["methods"][n]["photos_per_second"] / base, 3)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(res, indent=1) + "\n")
    md = to_markdown(res)
    Path(args.out + ".md").write_text(md)
    print(md)
    return 0


def to_markdown(res: dict) -> str:
    n = sum(res["photos"].values())
    tr = res["transforms"]
    lines = [
        f"# Baselines vs deface 1.5.0 ({', '.join(f'{k} {v}' for k, v in res['photos'].items())} = {n} known faces per transform)",
        "",
        f"`python -m benchmarks.deface_compare`; CPU, {res['threads']} threads, {res['photo_runs']} photo runs per method, zoo detector `{res.get('detector')}`."
        + (f" Controls: {res['controls']}." if res["controls"] else " Defaults."),
        "",
        f"Faces matched by dlib (< 0.6) / by SFace (>= 0.363 cosine) / untouched, per transform. Faces under {MIN_JUDGED:g} px "
        "(the crowd at 0.25x: ~9 px) are not judged (dlib matches them even to a flat gray disc) but are counted when untouched.",
        "",
        "| method | " + " | ".join(tr) + " | all: dlib / SFace / untouched | dlib mean distance | photos/s | vs deface |",
        "|---|" + "---|" * (len(tr) + 4),
    ]
    for name, m in res["methods"].items():
        cells = [f"{v['dlib_matched']}/{v['sface_matched']}/{v['untouched']}" for v in (m["per_transform"][t] for t in tr)]
        a = m["all"]
        lines.append(
            f"| {name} | "
            + " | ".join(cells)
            + f" | {a['dlib_matched']} (of {a['judged']}) / {a['sface_matched']} (of {a['sface_judged']}) / {a['untouched']} (of {a['faces']})"
            + f" | {a['dlib_mean_distance']} | {m['photos_per_second']} | {m.get('speed_vs_deface', '')} |"
        )
    lines += ["", "dlib mean distance per transform:", "", "| method | " + " | ".join(tr) + " |", "|---|" + "---|" * len(tr)]
    for name, m in res["methods"].items():
        lines.append(f"| {name} | " + " | ".join(str(m["per_transform"][t]["dlib_mean_distance"]) for t in tr) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
