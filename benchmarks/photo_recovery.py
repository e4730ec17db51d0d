"""Recovery on real photos, with and without the identity-aware re-inversion (``identity_refine``, ``identity_check``).

For every demo method, every face of the packaged photos (insightface's group photo, the astronaut) and
``--keys`` keys: anonymize the whole photo (privacy guard on, the default), save nothing, recover from the
anonymized pixels with the same key, and judge each face at its original place with dlib (never used by
any method, the guard or the refinement). Per setting of the controls:

* faces dlib still matches after anonymization (must be 0),
* faces whose right-key recovery is closer to the original than the anonymized face (target 90%),
* faces whose right-key recovery dlib calls the same person as the original,
* the same two comparisons by SFace (the guard's and the refinement's recognizer), so that a face where the
  two recognizers disagree can be told from one where recovery did not move back at all,
* mean dlib distances, and seconds per photo (anonymize + recover),
* every face-key that misses a target (still matched, or recovery not closer), with both distances.

    python -m benchmarks.photo_recovery            # -> benchmarks/results/photo_recovery_cpu.{md,json}
    python -m benchmarks.photo_recovery --methods ifadit --keys 2 --settings "identity_refine=0" "" "identity_check=1"
    python -m benchmarks.photo_recovery --key-names "evaluation key" --settings "" --threads 1   # training.bundle's key

Settings: comma-separated controls; "" = the defaults (the identity-aware re-inversion of faces whose pixel
fit SFace puts below cosine 0.4), ``identity_refine=0`` = the pixel fit alone.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="personal,ifadit,dbaf,hford")
    ap.add_argument("--keys", type=int, default=4)
    ap.add_argument("--key-names", nargs="+", help="these keys instead of --keys generated ones")
    ap.add_argument("--settings", nargs="+", default=["identity_refine=0", ""])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "photo_recovery_cpu"))
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    import zoo
    from training.evaluate import parse_controls, rate
    from zoo.assets import example_images
    from zoo.detection import detect_faces
    from zoo.imageio import load_image
    from zoo.judges import embed_at_original_places, get_judge

    dlib, sface = get_judge("dlib"), get_judge("sface")
    thr = dlib.distance_threshold
    keys = list(args.key_names) if args.key_names else [f"photo recovery key {j}" for j in range(args.keys)]
    ex = example_images()
    photos = []
    for name in ("group", "astronaut"):
        rgb, _ = load_image(str(ex[name]))
        faces = detect_faces(rgb)
        photos.append((Path(ex[name]).name, rgb, faces, dlib.embed_photo_faces(rgb, faces), sface.embed_photo_faces(rgb, faces)))
    rows = []
    for method in args.methods.split(","):
        m = zoo.load(method, device="cpu")
        for text in args.settings:
            controls = parse_controls(text.split(","))
            d_anon, d_rec, s_anon, s_rec, seconds, misses = [], [], [], [], [], []
            for key in keys:
                for photo, rgb, faces, e0, s0 in photos:
                    t0 = time.perf_counter()
                    anon = np.asarray(m.anonymize(rgb, key=key, **controls).image.convert("RGB"))
                    rec = np.asarray(m.recover(anon, key=key, **controls).image.convert("RGB"))
                    seconds.append(time.perf_counter() - t0)
                    per_face = [j.distance(e, embed_at_original_places(j, rgb, img, faces)) for j, e in ((dlib, e0), (sface, s0)) for img in (anon, rec)]
                    for target, got in zip((d_anon, d_rec, s_anon, s_rec), per_face):
                        target += [float(x) for x in got]
                    for i, (a, b, sa, sr) in enumerate(zip(*per_face)):
                        if a < thr or b >= a:
                            misses.append(
                                {
                                    "photo": photo,
                                    "face": i,
                                    "key": key,
                                    "dlib_anonymized": float(a),
                                    "dlib_recovered": float(b),
                                    "sface_anonymized": float(sa),
                                    "sface_recovered": float(sr),
                                }
                            )
            da, dr, sa, sr = np.array(d_anon), np.array(d_rec), np.array(s_anon), np.array(s_rec)
            rows.append(
                {
                    "method": method,
                    "controls": controls,
                    "face_keys": int(da.size),
                    "anonymized_same_person": rate(da < thr),
                    "recovery_closer_than_anonymized": rate(dr < da),
                    "recovery_same_person": rate(dr < thr),
                    "sface_anonymized_same_person": rate(sa < sface.distance_threshold),
                    "sface_recovery_closer_than_anonymized": rate(sr < sa),
                    "misses": misses,
                    "mean_distance_anonymized": float(da.mean()),
                    "mean_distance_recovered": float(dr.mean()),
                    "seconds_per_photo": float(np.mean(seconds)),
                }
            )
            print(json.dumps(rows[-1], default=str), flush=True)
    command = ("python -m benchmarks.photo_recovery " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))).strip()
    out = {
        "photos": [p[0] for p in photos],
        "faces": sum(len(p[2]) for p in photos),
        "keys": len(keys),
        "rows": rows,
        "command": command,
        "machine": f"{platform.machine()}, {args.threads} torch thread(s)",
    }
    stem = Path(args.out)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(out, indent=1, default=str))

    def r(e):
        return f"{e['k']}/{e['n']} [{e['ci95'][0]:.2f}, {e['ci95'][1]:.2f}]"

    md = [
        "# Recovery on real photos, dlib judge at 0.6 (faces at their original places)",
        "",
        f"Command: `{command}`; machine: {out['machine']}.",
        f"Photos: {', '.join(out['photos'])} ({out['faces']} faces) x {len(keys)} keys per method and setting; privacy guard on; "
        "recovery from the anonymized pixels (the carried code) with the same key and controls. k/n [95% Wilson interval].",
        "",
        "| method | controls | anonymized, still matched | recovery closer than anonymized | recovery, same person | SFace: still matched | SFace: recovery closer | mean distance anonymized / recovered | s per photo (anonymize + recover) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ctl = ", ".join(f"{k}={v:g}" for k, v in row["controls"].items()) or "defaults"
        md.append(
            f"| {row['method']} | {ctl} | {r(row['anonymized_same_person'])} | {r(row['recovery_closer_than_anonymized'])} | "
            f"{r(row['recovery_same_person'])} | {r(row['sface_anonymized_same_person'])} | {r(row['sface_recovery_closer_than_anonymized'])} | {row['mean_distance_anonymized']:.3f} / {row['mean_distance_recovered']:.3f} | {row['seconds_per_photo']:.1f} |"
        )
    missed = [(row, x) for row in rows for x in row["misses"]]
    if missed:
        md += [
            "",
            "Face-keys that miss a target (dlib still matches the anonymized face, or the recovery is no closer), with SFace's distances beside dlib's:",
            "",
            "| method | controls | photo, face | key | dlib anonymized / recovered | SFace anonymized / recovered |",
            "|---|---|---|---|---|---|",
        ]
        for row, x in missed:
            ctl = ", ".join(f"{k}={v:g}" for k, v in row["controls"].items()) or "defaults"
            md.append(
                f"| {row['method']} | {ctl} | {x['photo']}, {x['face']} | {x['key']} | {x['dlib_anonymized']:.3f} / {x['dlib_recovered']:.3f} | "
                f"{x['sface_anonymized']:.3f} / {x['sface_recovered']:.3f} |"
            )
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return out


if __name__ == "__main__":
    main()
