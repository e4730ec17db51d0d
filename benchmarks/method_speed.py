"""Seconds per face of each method on whole packaged photos, at its defaults and in its fast mode, anonymize and
recover, with where the time goes.

    python -m benchmarks.method_speed                                   # the four reversible methods, 2 threads
    python -m benchmarks.method_speed --methods dbaf --photos biden --repeat 3

For each method, each mode (``defaults``: the method as shipped; ``fast``: ``-c refine_steps=0``, the W+ encoder's
estimate without refinement) and each photo of ``--photos`` (:data:`benchmarks.real_photos.REAL_PHOTOS`): the
photo anonymized with one key (the privacy guard on, as shipped), then that output recovered with the same key,
each ``--repeat`` times (one untimed warm-up per method and mode, on the first photo); seconds divided by the faces the report lists. Then one more
anonymization of the first photo under ``cProfile`` gives the stages' inclusive seconds per face: detection
(every orientation pass), the inversion (encoder, pose turn, refinement steps: the W+ methods' encode), the privacy guard (its key variants,
wider regions, stand-in wrong-key recoveries, with their draws, composites and recognizers), the compositing
(every composite, inside the guard and out) and the recognizers (SFace, FaceRes, MobileFace at the faces' places).
The profiler adds a little to each stage; the totals come from the timed runs. Writes
``benchmarks/results/method_speed_cpu.{json,md}``.

Targets (issues "DBAF and HFORD on the FFHQ-grade backbone" and "iFADIT and personal on the FFHQ-grade backbone",
2 cores): fast mode anonymizes in <= 1.5 s and recovers in <= 1.0 s per face; the defaults anonymize in <= 10 s.
"""

from __future__ import annotations

import argparse
import cProfile
import platform
import pstats
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.real_photos import packaged_photos
from benchmarks.report import command_line, cpu_name, write_results

OUT = Path(__file__).resolve().parent / "results" / "method_speed_cpu"
MODES = {"defaults": {}, "fast": {"refine_steps": 0}}
#: stage -> (file suffix, function name) whose cumulative profile time is the stage's
STAGES = {
    "detection": ("zoo/detection.py", "detect_faces"),
    "inversion": ("zoo/methods/wplus_latents.py", "encode"),
    "guard": ("zoo/guard.py", "protect"),
    "compositing": ("zoo/compositing.py", "composite_face"),
    "recognizers": ("zoo/guard.py", "photo_embeddings"),
}
TARGETS = {"fast": {"anonymize": 1.5, "recover": 1.0}, "defaults": {"anonymize": 10.0}}


def stage_seconds(profile: cProfile.Profile) -> dict[str, float]:
    """Inclusive seconds of each of :data:`STAGES` in ``profile`` (0 for a stage that never ran)."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    out = dict.fromkeys(STAGES, 0.0)
    for (file, _line, func), (_cc, _nc, _tt, cumulative, _callers) in stats.items():
        for stage, (suffix, name) in STAGES.items():
            if func == name and file.replace("\\", "/").endswith(suffix):
                out[stage] += cumulative
    return out


def time_photo(method, rgb: np.ndarray, key: str, controls: dict, repeat: int, warm_up: bool = True) -> dict:
    """Median seconds per face of anonymizing ``rgb`` and recovering that output, ``repeat`` runs (after an
    untimed one with ``warm_up``)."""
    anonymized = method.anonymize(rgb, key=key, **controls) if warm_up else None
    times: dict[str, list[float]] = {"anonymize": [], "recover": []}
    for _ in range(repeat):
        t0 = time.perf_counter()
        anonymized = method.anonymize(rgb, key=key, **controls)
        seconds = time.perf_counter() - t0
        faces = max(len(anonymized.report()["faces"]), 1)
        image = np.asarray(anonymized.image)
        times["anonymize"].append(seconds / faces)
        t0 = time.perf_counter()
        method.recover(image, key=key, **controls)
        times["recover"].append((time.perf_counter() - t0) / faces)
    assert anonymized is not None
    statuses = [f["status"] for f in anonymized.report()["faces"]]
    return {
        "faces": faces,
        "statuses": {s: statuses.count(s) for s in sorted(set(statuses))},
        **{f"{op}_s_per_face": round(statistics.median(v), 2) for op, v in times.items()},
        **{f"{op}_range": [round(min(v), 2), round(max(v), 2)] for op, v in times.items()},
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="dbaf,hford,ifadit,personal")
    ap.add_argument("--photos", default="biden,t1", help="names from benchmarks.real_photos.REAL_PHOTOS")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {sorted(MODES)}")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.repeat < 1:
        raise SystemExit("--repeat must be at least 1")
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise SystemExit(f"unknown mode(s) {unknown}: choose from {sorted(MODES)}")
    torch.set_num_threads(args.threads)
    from zoo import load

    photos = [(name, rgb) for name, _split, rgb in packaged_photos(args.photos.split(","))]
    if not photos:
        raise SystemExit("none of --photos is installed: run scripts/setup.sh")
    rows = []
    for name in args.methods.split(","):
        method = load(name, device="cpu")
        key = "042917" if name == "personal" else "speed key"
        for mode in modes:
            controls = MODES[mode]
            for i, (photo, rgb) in enumerate(photos):  # one warm-up per method and mode (loading, first-call costs)
                rows.append({"method": name, "mode": mode, "photo": photo, **time_photo(method, rgb, key, controls, args.repeat, warm_up=i == 0)})
                print(rows[-1], flush=True)
            profile = cProfile.Profile()
            profile.enable()
            faces = max(len(method.anonymize(photos[0][1], key=key, **controls).report()["faces"]), 1)
            profile.disable()
            stages = {k: round(v / faces, 2) for k, v in stage_seconds(profile).items()}
            rows.append({"method": name, "mode": mode, "photo": photos[0][0], "stages_s_per_face": stages})
            print(rows[-1], flush=True)
    result = {
        "command": command_line("benchmarks.method_speed", argv),
        "threads": args.threads,
        "repeat": args.repeat,
        "machine": f"{platform.machine()}, {cpu_name()}, torch {torch.__version__}",
        "targets": TARGETS,
        "rows": rows,
    }
    write_results(args.out, result, report_lines(result))
    return result


def report_lines(result: dict) -> list[str]:
    """The markdown page of a :func:`main` result."""
    timed = [r for r in result["rows"] if "anonymize_s_per_face" in r]
    staged = [r for r in result["rows"] if "stages_s_per_face" in r]
    lines = [
        "# Seconds per face on whole photos: anonymize and recover, defaults and fast mode",
        "",
        f"`{result['command']}`; {result['machine']}, {result['threads']} threads; median of {result['repeat']} run(s) after a"
        " warm-up per method and mode (min - max in brackets), seconds divided by the faces in the report. Privacy guard on (as shipped);"
        " fast = `-c refine_steps=0`. Targets: fast mode anonymize <= 1.5 s and recover <= 1.0 s per face, defaults"
        " anonymize <= 10 s per face (2 cores).",
        "",
        "| method | mode | photo | faces (status) | anonymize s/face | recover s/face |",
        "|---|---|---|---|---|---|",
    ]
    for r in timed:
        status = ", ".join(f"{k} {v}" for k, v in r["statuses"].items())
        a, b = r["anonymize_range"], r["recover_range"]
        lines.append(
            f"| {r['method']} | {r['mode']} | {r['photo']} | {r['faces']} ({status}) | {r['anonymize_s_per_face']} [{a[0]} - {a[1]}] |"
            f" {r['recover_s_per_face']} [{b[0]} - {b[1]}] |"
        )
    if staged:
        lines += [
            "",
            "Where an anonymization's time goes (one run under `cProfile`, inclusive seconds per face; the guard holds its"
            " own draws, composites and recognizers, so the columns overlap):",
            "",
            "| method | mode | photo | " + " | ".join(STAGES) + " |",
            "|---|---|---|" + "---|" * len(STAGES),
        ]
        for r in staged:
            lines.append(f"| {r['method']} | {r['mode']} | {r['photo']} | " + " | ".join(str(r["stages_s_per_face"][s]) for s in STAGES) + " |")
    return lines


if __name__ == "__main__":
    main()
