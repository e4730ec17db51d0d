"""The privacy guard (zoo.guard) on real photos: faces dlib still matches, with and without the guard.

For every demo method and every face of the packaged photos (insightface's group photo, the astronaut),
anonymize with ``--keys`` different keys, once with the guard off and once with it on (the default),
and judge each face at its original place with dlib (the independent judge; the guard uses SFace only).
Reports per method: faces dlib matches (distance < 0.6) without / with the guard, faces the guard
re-keyed (a variant other than 0 kept), faces it blurred, the mean dlib distance, seconds per photo, and,
with the guard on, faces dlib matches after recovering the saved output with a wrong key. Rates come
with 95% Wilson intervals, and every face that dlib matched is listed (photo:face).

``random-face`` is a chance floor, not a method: the demo backbone (``dbaf``'s checkpoint: the packaged
DCGAN and its encoder) with the keyed transform replaced by a draw from the generator's prior, z ~ N(0, I)
seeded by the key, so the new face does not depend on the person at all; the pixel fit only (its code is
thrown away), same alignment, paste-back and guard. Whatever dlib still matches there is chance: a rate
that no face replacement on this backbone, judged by dlib and guarded by SFace, can be expected to beat.

    python -m benchmarks.privacy_guard                      # -> benchmarks/results/privacy_guard_cpu.{md,json}
    python -m benchmarks.privacy_guard --methods dbaf --keys 2
    python -m benchmarks.privacy_guard --modes on             # guard on only (the off columns read '-')
    python -m benchmarks.privacy_guard --methods random-face,hford --keys 24 --out benchmarks/results/privacy_guard_floor_cpu
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

#: pseudo-method: a person-independent random face through the same pipeline and guard (module docstring)
RANDOM_FACE = "random-face"


def load_method(name: str):
    """(method, controls): a zoo method at its defaults, or the :data:`RANDOM_FACE` floor."""
    import torch

    import zoo

    if name != RANDOM_FACE:
        return zoo.load(name), {}
    m = zoo.load("dbaf")

    def random_code(z, keys, **controls):
        return torch.stack([torch.randn(z.shape[1], generator=k.generator("random face floor")) for k in keys]).to(z)

    m.anonymized_code = random_code  # instance attribute: only this benchmark's copy draws random faces
    return m, {"identity_refine": 0}


def run(methods: list[str], n_keys: int, threads: int, modes: tuple[str, ...] = ("off", "on"), guard_variants: int | None = None) -> dict:
    import torch

    torch.set_num_threads(threads)
    from training.evaluate import rate
    from zoo.assets import example_images
    from zoo.detection import detect_faces
    from zoo.imageio import load_image
    from zoo.judges import embed_at_original_places, get_judge

    dlib = get_judge("dlib")
    ex = example_images()
    photos = [ex[k] for k in ("group", "astronaut") if k in ex]
    loaded = []
    for p in photos:
        rgb, _ = load_image(p)
        faces = detect_faces(rgb)
        loaded.append((Path(p).name, rgb, faces, dlib.embed_photo_faces(rgb, faces)))
    rows = {}
    for name in methods:
        m, controls = load_method(name)
        if guard_variants is not None:
            m.guard_variants = guard_variants  # this instance only
        dist = {"off": [], "on": []}
        where: dict[str, list[str]] = {"off": [], "on": []}
        seconds = {"off": [], "on": []}
        wrong_key: list[float] = []
        rekeyed = blurred = 0
        for k in range(n_keys):
            key = f"guard benchmark key {k}"
            for photo, rgb, faces, e0 in loaded:
                for mode in modes:
                    t0 = time.perf_counter()
                    out = m.anonymize(rgb, key=key, privacy_guard=(mode == "on"), **controls)
                    seconds[mode].append(time.perf_counter() - t0)
                    arr = np.asarray(out)
                    got = dlib.distance(e0, embed_at_original_places(dlib, rgb, arr, faces)).tolist()
                    dist[mode] += got
                    where[mode] += [f"{photo}:{i}" for i, d in enumerate(got) if d < dlib.threshold]
                    if mode == "on":
                        rekeyed += sum(1 for f in out.faces if f.guard and f.guard["variant"] > 0)
                        blurred += sum(1 for f in out.faces if f.status == "guard_blur")
                        if m.reversible and name != RANDOM_FACE:  # the saved output (lossless: the carried codes) with a wrong key
                            rec = np.asarray(m.recover(arr, key=f"{key} (wrong)"))
                            wrong_key += dlib.distance(e0, embed_at_original_places(dlib, rgb, rec, faces)).tolist()
        n = len(dist[modes[-1]])

        def stat(fn, values):
            return round(float(fn(values)), 4) if values else None

        rows[name] = {
            "face_keys": n,
            "matched_without_guard": int(sum(d < dlib.threshold for d in dist["off"])) if dist["off"] else None,
            "matched_with_guard": int(sum(d < dlib.threshold for d in dist["on"])) if dist["on"] else None,
            "rate_without_guard": rate(np.array(dist["off"]) < dlib.threshold) if dist["off"] else None,
            "rate_with_guard": rate(np.array(dist["on"]) < dlib.threshold) if dist["on"] else None,
            "matched_faces_without_guard": where["off"],
            "matched_faces_with_guard": where["on"],
            "rekeyed": rekeyed,
            "blurred": blurred,
            "mean_dlib_distance_without": stat(np.mean, dist["off"]),
            "mean_dlib_distance_with": stat(np.mean, dist["on"]),
            "min_dlib_distance_without": stat(np.min, dist["off"]),
            "min_dlib_distance_with": stat(np.min, dist["on"]),
            "seconds_per_photo_without": stat(np.mean, seconds["off"]),
            "seconds_per_photo_with": stat(np.mean, seconds["on"]),
            "matched_after_wrong_key_recovery": int(sum(d < dlib.threshold for d in wrong_key)) if wrong_key else None,
        }
        print(name, rows[name], flush=True)
    return {"photos": [p[0] for p in loaded], "faces_per_key": sum(len(p[2]) for p in loaded), "keys": n_keys, "methods": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="personal,ifadit,dbaf,hford")
    ap.add_argument("--keys", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--modes", default="off,on", help="guard settings to run: off,on (default) or one of them")
    ap.add_argument("--guard-variants", type=int, help="key variants the guard may try per face (default: each method's own)")
    ap.add_argument("--out", default="benchmarks/results/privacy_guard_cpu")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    modes = tuple(x.strip() for x in args.modes.split(",") if x.strip())
    if not modes or set(modes) - {"off", "on"}:
        ap.error("--modes takes off, on or off,on")
    result = run([m.strip() for m in args.methods.split(",") if m.strip()], args.keys, args.threads, modes, args.guard_variants)
    result["command"] = "python -m benchmarks.privacy_guard " + " ".join(argv if argv is not None else sys.argv[1:])
    result["machine"] = f"{platform.processor() or platform.machine()}, {args.threads} thread(s)"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    lines = [
        "# Privacy guard on real photos (dlib judge at 0.6, faces at their original places)",
        "",
        f"Command: `{result['command'].strip()}`; machine: {result['machine']}.",
        f"Photos: {', '.join(result['photos'])} ({result['faces_per_key']} faces) x {result['keys']} keys per method.",
        "",
        "| method | face-keys | dlib matched, guard off | dlib matched, guard on | re-keyed | blurred | mean dlib distance off / on | min off / on | s per photo off / on | matched after a wrong-key recovery (guard on) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(v, fmt="{}"):
        return "-" if v is None else fmt.format(v)

    def share(r):
        return "-" if r is None else f"{r['k']}/{r['n']} = {r['value']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]"

    for name, r in result["methods"].items():
        lines.append(
            f"| {name} | {r['face_keys']} | {cell(r['matched_without_guard'])} | {cell(r['matched_with_guard'])} | {r['rekeyed']} | {r['blurred']} | "
            f"{cell(r['mean_dlib_distance_without'], '{:.3f}')} / {cell(r['mean_dlib_distance_with'], '{:.3f}')} | "
            f"{cell(r['min_dlib_distance_without'], '{:.3f}')} / {cell(r['min_dlib_distance_with'], '{:.3f}')} | "
            f"{cell(r['seconds_per_photo_without'], '{:.2f}')} / {cell(r['seconds_per_photo_with'], '{:.2f}')} | {cell(r['matched_after_wrong_key_recovery'])} |"
        )
    lines += [
        "",
        "Rates (95% Wilson interval) and the faces dlib matched (photo:face x times):",
        "",
        "| method | matched, guard off | matched, guard on | faces, guard off | faces, guard on |",
        "|---|---|---|---|---|",
    ]

    def faces(names):
        return ", ".join(f"{n} x{names.count(n)}" for n in sorted(set(names))) or "none"

    for name, r in result["methods"].items():
        lines.append(
            f"| {name} | {share(r['rate_without_guard'])} | {share(r['rate_with_guard'])} | "
            f"{faces(r['matched_faces_without_guard']) if r['rate_without_guard'] else '-'} | {faces(r['matched_faces_with_guard']) if r['rate_with_guard'] else '-'} |"
        )
    if RANDOM_FACE in result["methods"]:
        lines += [
            "",
            f"`{RANDOM_FACE}` is a chance floor, not a method: the demo backbone with the keyed transform replaced by "
            "z ~ N(0, I) seeded by the key (a new face that does not depend on the person), pixel fit only, same paste-back and guard.",
        ]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
