"""Right-key recovery of faces the privacy guard blurred: the recovered face drawn over the whole blurred rectangle
(:func:`zoo.paste.restore_blurred`, as shipped) against composited over the face region only and matched to the blur
(what recovery did before the carried block said the face was blurred).

    python -m benchmarks.blurred_recovery --methods dbaf --split tuning

Every face of the split's packaged photos (:data:`benchmarks.real_photos.REAL_PHOTOS`) is anonymized at the
method's defaults with the guard made to blur it (so every face is a blurred one: on real photos the guard blurs a
few in a hundred), then recovered from the lossless output with the right key both ways. Each face is judged at its
place in the whole photo against the original by the guard's recognizers (SFace, FaceRes, MobileFace cosine
distances; "same" = within both SFace's and FaceRes's blur floors, :mod:`zoo.guard`) and by the PSNR of the blurred
rectangle, and by dlib (the judge, reported beside them). Writes
``benchmarks/results/blurred_recovery_<split>.{json,md}``.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from benchmarks.real_photos import REAL_PHOTOS
from benchmarks.report import command_line, rate, rate_text, write_results

OUT = Path(__file__).resolve().parent / "results" / "blurred_recovery"
WAYS = ("blurred (anonymized)", "face region, matched to the blur", "whole blurred rectangle (shipped)")


def _blur_every_face(self, guard, place, flat, crops, key_indices, secret, controls, outs, latents, n_variants=None):
    """Stand-in for ``DeidPipeline._guard_faces``: every face kept as drawn and marked to be blurred."""
    from zoo.guard import GuardCheck

    return outs, latents, [0] * len(outs), [GuardCheck(0.5, 0.5, blurred=True, blur_reason="face") for _ in outs]


def measure(method, eye, rgb: np.ndarray, refs: list, key: str) -> list[dict]:
    """One photo: anonymized with every face blurred, recovered both ways; a row per face dlib finds in the original
    (``refs``, :class:`benchmarks.appearance.OriginalFace`) and way."""
    from unittest import mock

    from benchmarks.appearance import record_at
    from zoo import carrier, paste, pipeline
    from zoo.detectors import DetectedFace
    from zoo.guard import guard_for

    with mock.patch.object(pipeline.DeidPipeline, "_guard_faces", _blur_every_face):
        anon = method.anonymize(rgb, key=key)
    arr = np.asarray(anon)
    whole = np.asarray(method.recover(arr, key=key))
    real_extract = carrier.extract_all
    with mock.patch.object(carrier, "extract_all", lambda *a, **k: [replace(c, blurred=False) for c in real_extract(*a, **k)]):
        region = np.asarray(method.recover(arr, key=key))
    guard = guard_for()
    places = [r.place for r in refs]
    originals = guard.photo_embeddings(rgb, places)
    rows = []
    for way, img in zip(WAYS, (arr, region, whole)):
        d = guard.distances(originals, guard.photo_embeddings(img, places))
        for i, ref in enumerate(refs):
            record = record_at(anon, ref.box)
            rect = paste.blur_box(rgb.shape, DetectedFace(np.array(record.box), np.array(record.landmarks), 1.0)) if record is not None else None
            psnr = None
            if rect is not None:
                x0, y0, x1, y1, _ = rect
                mse = float(np.mean((img[y0:y1, x0:x1].astype(np.float64) - rgb[y0:y1, x0:x1]) ** 2))
                psnr = round(10 * np.log10(255.0**2 / max(mse, 1e-6)), 2)
            rows.append(
                {
                    "face": i,
                    "way": way,
                    "sface": round(float(d[i, 0]), 4),
                    "faceres": round(float(d[i, 1]), 4),
                    "mobileface": round(float(d[i, 2]), 4),
                    "same": bool(d[i, 0] < guard.floors[0] and d[i, 1] < guard.floors[1]),
                    "dlib": round(ref.distance(eye, img), 4),
                    "psnr": psnr,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="dbaf")
    ap.add_argument("--split", choices=("tuning", "held-out"), default="tuning")
    ap.add_argument("--photos", default=None, help="names from benchmarks.real_photos.REAL_PHOTOS (default: the split's)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/blurred_recovery_<split>")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from benchmarks.appearance import DlibEye, judged_photos
    from zoo import load

    eye = DlibEye()

    names = args.photos.split(",") if args.photos else [n for n, (split, _) in REAL_PHOTOS.items() if split == args.split]
    result: dict = {"command": command_line("benchmarks.blurred_recovery", argv), "split": args.split, "methods": {}}
    for method_name in args.methods.split(","):
        method = load(method_name, device="cpu")
        rows: list[dict] = []
        for name, split, rgb, refs in judged_photos(eye, names):
            if split != args.split:
                raise SystemExit(f"{name} is a {split} photo, not {args.split}")
            rows += [{"photo": name, **r} for r in measure(method, eye, rgb, refs, key=f"blurred-recovery/{name}")]
            print(method_name, name, flush=True)
        summary = {}
        for way in WAYS:
            got = [r for r in rows if r["way"] == way]
            psnrs = [r["psnr"] for r in got if r["psnr"] is not None]
            summary[way] = {
                "faces": len(got),
                "same": rate(sum(r["same"] for r in got), len(got)),
                "dlib_same": rate(sum(r["dlib"] < 0.6 for r in got), len(got)),
                **{k: round(float(np.median([r[k] for r in got])), 3) if got else None for k in ("sface", "faceres", "mobileface", "dlib")},
                "psnr": round(float(np.median(psnrs)), 2) if psnrs else None,
            }
        result["methods"][method_name] = {"summary": summary, "rows": rows}
    md = [
        "# Right-key recovery of faces the guard blurred (guard's recognizers, never dlib)",
        "",
        f"`{result['command']}`. Every face of the {args.split} photos anonymized at the method's defaults with the guard made"
        " to blur it, then recovered with the right key from the lossless output. At each face's place against the"
        " original (the faces dlib's CNN finds in it): medians of the cosine distances, of dlib's distance and of the"
        " blurred rectangle's PSNR; 'same': within SFace's and FaceRes's blur floors (the guard's recognizers, what the"
        " shipped choice was made on, tuning photos), 'dlib same': below 0.6 (the judge), k/n [95% Wilson].",
        "",
        "| method | recovery | faces | same | dlib same | SFace | FaceRes | MobileFace | dlib | rectangle PSNR dB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method_name, got in result["methods"].items():
        for way, s in got["summary"].items():
            md.append(
                f"| {method_name} | {way} | {s['faces']} | {rate_text(s['same'])} | {rate_text(s['dlib_same'])} | {s['sface']} | {s['faceres']} |"
                f" {s['mobileface']} | {s['dlib']} | {s['psnr']} |"
            )
    write_results(args.out or OUT.with_name(f"{OUT.name}_{args.split.replace('-', '_')}"), result, md)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
