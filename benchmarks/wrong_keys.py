"""Wrong keys against real photos: how often does a wrong key give the person back? Judged by dlib over many keys.

    python -m benchmarks.wrong_keys [--methods dbaf,hford,ifadit,personal] [--keys 8] [--photos t1,biden,...] [--add]
    python -m benchmarks.wrong_keys --methods hford --split held-out --keys 2 --jpeg-keys 1   # the README's rows

Each reversible method anonymizes each photo of :data:`benchmarks.real_photos.REAL_PHOTOS` once at its defaults
(key ``wrong-keys``, privacy guard on), and the anonymized photo (as its lossless save holds it: the carrier block is
read back from the pixels) is recovered with ``--keys`` other keys (``wrong-keys / attacker <j>``), the attacker's
guesses. For every face the original's dlib CNN detector found and every wrong key (a *face-key*), at the original's
place:

* ``dlib``: dlib descriptor distance to the original (same person below 0.6; dlib is the judge, never used by a method);
* ``sface`` / ``faceres`` / ``mobileface``: the privacy guard's recognizers' cosine distances to the original, so the guard's own
  view of the same recoveries can be set beside the judge's;
* the face's guard record (its kept variant, its own wrong-key probes, whether it was blurred and its code dropped);
* ``refused``: the recovery refused the key (the face's carrier block holds a key check, :mod:`zoo.carrier`) or found
  no block for the face, and left the anonymized face as it was;
* beside them, the dlib distance of the anonymized face and of its right-key recovery (key ``wrong-keys``), and of
  ``--jpeg-keys`` wrong-key recoveries of a JPEG (quality 95) copy, which no block survives (each with ``refused``);
* ``--reinvert-keys``: what someone without the key can still do with a method's code: re-invert the anonymized
  face's pixels (the block, sealed, is of no use to them) and apply the method's inverse with keys of their own.

``--no-probe`` turns off the privacy guard's wrong-key probe (``guard_wrong_key_check``) for the run.

Reported per split (``tuning`` / ``held-out``, :mod:`benchmarks.real_photos`): anonymized faces and right-key recoveries
dlib matches, face-keys it matches, and faces for which at least one wrong key is matched, each with its 95% Wilson
interval. Writes
``benchmarks/results/wrong_keys.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path
from typing import Iterator

import cv2
import numpy as np

from benchmarks.appearance import DlibEye, box_iou, judged_photos, record_at
from benchmarks.real_photos import REAL_PHOTOS, SPLITS, in_split
from benchmarks.report import add_control_option, command_line, method_controls, rate, rate_text, write_results

OUT = Path(__file__).resolve().parent / "results" / "wrong_keys"
KEY = "wrong-keys"
REVERSIBLE = ("dbaf", "hford", "ifadit", "personal")


def attacker_key(j: int) -> str:
    return f"{KEY} / attacker {j}"


def jpeg_copy(rgb: np.ndarray, quality: int = 95) -> np.ndarray:
    """The photo as a lossy copy would carry it (no carrier block survives)."""
    ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(rgb[:, :, ::-1]), [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    bgr = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    assert bgr is not None
    return np.ascontiguousarray(bgr[:, :, ::-1])


def refused_at(result, box: np.ndarray) -> bool:
    """Whether recovery ``result`` (a :class:`~zoo.report.DeidResult`) left the face at ``box`` as it was: its key
    refused (``key_mismatch``) or no carried code (``no_code``)."""
    return any(f.status in ("key_mismatch", "no_code") and box_iou(box, np.asarray(f.box)) > 0.2 for f in result.faces)


@contextlib.contextmanager
def ignoring_the_blocks(method) -> Iterator[None]:
    """Within: ``method.recover`` re-inverts every face's pixels and reads no block (what someone without the key, for
    whom the sealed block holds nothing, can run)."""
    method.carries_latent = False
    try:
        yield
    finally:
        del method.carries_latent


def summarise(rows: list[dict]) -> dict:
    """Face-key and per-face rates of dlib matches over ``rows`` (one per face, each with its ``keys`` list)."""
    pairs = [k for r in rows for k in r["keys"]]
    return {
        "faces": len(rows),
        "face_keys": len(pairs),
        "anonymized_matched": rate(sum(r["anonymized_dlib"] < 0.6 for r in rows), len(rows)),
        "right_key_matched": rate(sum(r["right_key_dlib"] < 0.6 for r in rows), len(rows)),
        "face_keys_matched": rate(sum(k["dlib"] < 0.6 for k in pairs), len(pairs)),
        "faces_any_key_matched": rate(sum(any(k["dlib"] < 0.6 for k in r["keys"]) for r in rows), len(rows)),
        "jpeg_face_keys_matched": rate(sum(k["dlib"] < 0.6 for r in rows for k in r.get("jpeg_keys", [])), sum(len(r.get("jpeg_keys", [])) for r in rows)),
        "key_refused": sum(k.get("refused", False) for k in pairs),
        "jpeg_refused": sum(k.get("refused", False) for r in rows for k in r.get("jpeg_keys", [])),
        "jpeg_face_keys": sum(len(r.get("jpeg_keys", [])) for r in rows),
        "reinvert_face_keys_matched": rate(
            sum(k["dlib"] < 0.6 for r in rows for k in r.get("reinvert_keys", [])), sum(len(r.get("reinvert_keys", [])) for r in rows)
        ),
        "guard_blurred": sum(r["status"] == "guard_blur" for r in rows),
        "code_carried": sum(bool(r.get("latent_carried")) for r in rows),
        "median_dlib": round(float(np.median([k["dlib"] for k in pairs])), 4) if pairs else None,
        "min_dlib": round(float(min(k["dlib"] for k in pairs)), 4) if pairs else None,
    }


def write_report(result: dict, out: Path) -> None:
    lines = [
        "# Wrong keys on real photos",
        "",
        f"`{result['command']}`",
        "",
        f"Each face anonymized once at the method's defaults (guard on), then recovered from the lossless output with {result['keys']} "
        "wrong keys (and from a JPEG q95 copy with other wrong keys). dlib judges at 0.6 at the original's place; k/n [95% Wilson interval]. "
        "Refused: recovery left the face as it was (the block's key check failed, or the face carries no block). "
        "Wider region: faces the guard composited beyond the default reach (zoo.guard.STRONGER_REACHES).",
        "",
        "| method | split | faces | anonymized matched | right key: same person | wrong key: face-keys matched | faces with any wrong key matched | min wrong-key dlib distance | wrong keys refused | JPEG copy, wrong key: matched | JPEG copy: refused | re-inverted pixels, own key: matched | guard blurred | guard: wider region | code carried |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method, per in result["methods"].items():
        for split in ("tuning", "held-out"):
            s = per[split]
            if not s.get("faces"):
                continue
            cells = [rate_text(s[k]) for k in ("anonymized_matched", "right_key_matched", "face_keys_matched", "faces_any_key_matched")]
            wider = sum(bool((r.get("guard") or {}).get("reach")) for r in per["faces_rows"] if r["split"] == split)
            lines.append(
                f"| {method} | {split} | {s['faces']} | {' | '.join(cells)} | {s['min_dlib']} | {s['key_refused']}/{s['face_keys']} | {rate_text(s['jpeg_face_keys_matched'])} | {s.get('jpeg_refused', 0)}/{s.get('jpeg_face_keys', 0)} | {rate_text(s['reinvert_face_keys_matched']) if s.get('reinvert_face_keys_matched', {}).get('n') else '-'} | {s['guard_blurred']} | {wider} | {s['code_carried']} |"
            )
    matched = [
        f"{m}: {r['photo']}:{r['face']} ({sum(k['dlib'] < 0.6 for k in r['keys'])} keys)"
        for m, per in result["methods"].items()
        for r in per["faces_rows"]
        if any(k["dlib"] < 0.6 for k in r["keys"])
    ]
    lines += ["", "Faces a wrong key gives back: " + ("; ".join(matched) if matched else "none") + "."]
    write_results(out, result, lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=",".join(REVERSIBLE))
    ap.add_argument("--photos", default=",".join(REAL_PHOTOS), help="names from benchmarks.real_photos.REAL_PHOTOS")
    ap.add_argument("--split", choices=SPLITS, default="all", help="only this split's photos of --photos")
    ap.add_argument("--keys", type=int, default=8, help="wrong keys per face")
    ap.add_argument("--jpeg-keys", type=int, default=1, help="wrong keys per face on a JPEG (quality 95) copy")
    ap.add_argument("--reinvert-keys", type=int, default=0, help="own keys per face applied to the re-inverted pixels (no block)")
    ap.add_argument("--no-probe", action="store_true", help="the privacy guard's wrong-key probe off (guard_wrong_key_check)")
    ap.add_argument("--add", action="store_true", help="keep the results file's rows of the methods and photos not run now")
    ap.add_argument("--out", default=None)
    add_control_option(ap)
    args = ap.parse_args(argv)
    controls = method_controls(args)
    out_path = Path(args.out) if args.out else OUT

    import zoo
    from zoo.guard import guard_for

    eye, guard = DlibEye(), guard_for()
    before = json.loads(out_path.with_suffix(".json").read_text()) if args.add and out_path.with_suffix(".json").is_file() else {}
    methods = [m for m in args.methods.split(",") if m]
    rows: dict[str, list[dict]] = {m: [] for m in methods}
    seconds = {m: 0.0 for m in methods}
    names = in_split([n for n in args.photos.split(",") if n], args.split)
    for name, split, rgb, refs in judged_photos(eye, names):
        originals = guard.photo_embeddings(rgb, [r.place for r in refs])
        for method in methods:
            m = zoo.load(method)
            if args.no_probe:
                m.guard_wrong_key_check = False
            t0 = time.perf_counter()
            result = m.anonymize(rgb, key=KEY, **controls)
            seconds[method] += time.perf_counter() - t0
            out = np.asarray(result)
            right = np.asarray(m.recover(out, key=KEY, **controls))
            jpeg = [m.recover(jpeg_copy(out), key=attacker_key(j), **controls) for j in range(args.jpeg_keys)]
            with ignoring_the_blocks(m):
                reinverted = [np.asarray(m.recover(out, key=attacker_key(100 + j), **controls)) for j in range(args.reinvert_keys)]
            per_face: list[list[dict]] = [[] for _ in refs]
            for j in range(args.keys):
                attempt = m.recover(out, key=attacker_key(j), **controls)
                wrong = np.asarray(attempt)
                ours = guard.distances(originals, guard.photo_embeddings(wrong, [r.place for r in refs]))
                for i, ref in enumerate(refs):
                    refused = refused_at(attempt, ref.box)
                    per_face[i].append(
                        {
                            "dlib": round(ref.distance(eye, wrong), 4),
                            "sface": round(float(ours[i, 0]), 4),
                            "faceres": round(float(ours[i, 1]), 4),
                            "mobileface": round(float(ours[i, 2]), 4),
                            "refused": refused,
                        }
                    )
            for i, ref in enumerate(refs):
                record = record_at(result, ref.box)
                row = {
                    "photo": name,
                    "split": split,
                    "face": i,
                    "status": record.status if record is not None else "not found",
                    "latent_carried": bool(record is not None and record.latent_carried),
                    "guard": record.guard if record is not None else None,
                    "anonymized_dlib": round(ref.distance(eye, out), 4),
                    "right_key_dlib": round(ref.distance(eye, right), 4),
                    "jpeg_keys": [
                        {
                            "dlib": round(ref.distance(eye, np.asarray(attempt)), 4),
                            "refused": refused_at(attempt, ref.box),
                        }
                        for attempt in jpeg
                    ],
                    "keys": per_face[i],
                }
                if reinverted:
                    row["reinvert_keys"] = [{"dlib": round(ref.distance(eye, r), 4)} for r in reinverted]
                rows[method].append(row)
                print(method, name, i, row["status"], [k["dlib"] for k in per_face[i]], flush=True)
        save(out_path, rows, before, seconds, command_line("benchmarks.wrong_keys", argv), args.keys)  # after every photo
    print(f"wrote {out_path.with_suffix('.md')}")
    return 0


def save(out_path: Path, rows: dict[str, list[dict]], before: dict, seconds: dict[str, float], command: str, keys: int) -> None:
    """The results file: ``rows`` of the methods run now, beside ``before``'s rows (``--add``) of other methods and of
    photos not run now. ``seconds_anonymize`` adds up every run that made the file (a photo run again counts twice)."""
    merged = {m: list(per) for m, per in rows.items()}
    for m, per in before.get("methods", {}).items():
        done = {r["photo"] for r in rows.get(m, [])}
        merged[m] = [r for r in per["faces_rows"] if r["photo"] not in done] + merged.get(m, [])
    result = {
        "command": command if not before.get("command") else f"{before['command']} ; {command}",
        "keys": keys,
        "methods": {
            m: {
                "seconds_anonymize": round(seconds.get(m, 0.0) + before.get("methods", {}).get(m, {}).get("seconds_anonymize", 0.0), 1),
                "tuning": summarise([r for r in per if r["split"] == "tuning"]),
                "held-out": summarise([r for r in per if r["split"] == "held-out"]),
                "faces_rows": per,
            }
            for m, per in merged.items()
        },
    }
    write_report(result, out_path)


if __name__ == "__main__":
    raise SystemExit(main())
