"""How the privacy guard should strengthen a face, judged without dlib: leave one recognizer out.

    python -m benchmarks.guard_variants [--methods hford] [--photos <the tuning photos>] [--variants 7] [-c NAME=VALUE]
    python -m benchmarks.guard_variants --from-json RUN.json     # replay an earlier run's candidates

The guard (:func:`zoo.guard.protect`) draws a face again with up to ``guard_variants`` key variants, then over wider
compositing regions, and keeps the first candidate past every recognizer's target, else the best by
:meth:`~zoo.guard.GuardCheck.rank`. Whether more variants, other targets or another rule for widening leave faces
farther from the person cannot be read off the recognizers that made the choice. So each face here is drawn with
variants 0..``--variants``, each at the default reach and at every reach of :data:`zoo.guard.STRONGER_REACHES`, every
candidate measured as the guard measures it (at its place in the composed photo; the anonymized face and its recovery
with one stand-in wrong key, three recognizers each), and the choice is replayed offline for each widening rule
(:data:`WIDENING`), target line (:data:`TARGET_LINES`) and variant count, with all three recognizers deciding and with
each left out in turn: the left-out one judges what the other two kept (a kept face below its floor is a leak that a
recognizer the guard does not consult would find, as dlib is to the guard). dlib is not used: this benchmark is for
choosing settings on tuning photos.

Writes ``benchmarks/results/guard_variants.{json,md}`` (``--out`` to put them elsewhere).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import numpy as np

from benchmarks.real_photos import REAL_PHOTOS, in_split, photos, split_of
from benchmarks.report import add_control_option, command_line, method_controls, rate, rate_text, write_results
from zoo.guard import RECOGNIZERS, STRONGER_REACHES, GuardCheck, guard_for

OUT = Path(__file__).resolve().parent / "results" / "guard_variants"
KEY = "guard-variants"


@contextlib.contextmanager
def recording_candidates(n_variants: int, sink: list[dict]) -> Iterator[None]:
    """Within: the pipeline's guard step, instead of choosing, draws every face with key variants 0..``n_variants``
    and appends one record per (face, variant) to ``sink`` (the distances of :func:`zoo.guard.protect`'s own
    ``distances`` and wrong-key probe); the faces are then composed as first drawn, unguarded."""
    import zoo.guard as guard_module
    from zoo.compositing import forehead_hair

    real = guard_module.protect

    def record(pipeline, guard, crops, key_indices, secret, controls, outs, latents, distances, n_variants_=None, reaches=(), face_widths=None):
        probe = guard_module.wrong_key_probe(pipeline, key_indices, secret, controls, distances)
        live = [i for i in range(len(outs)) if outs[i] is not None and (face_widths is None or face_widths[i] >= guard_module.MIN_VERIFIED_FACE_PX)]
        for number in range(n_variants + 1):
            if number == 0:
                drawn, codes = list(outs), list(latents)
            else:
                k, ctl = pipeline.method.guard_variant(pipeline.keys_for("anonymize", secret, [key_indices[i] for i in live]), controls, number)
                o, _, lat = pipeline.process_isolated("anonymize", crops[live], k, ctl)
                drawn, codes = list(outs), list(latents)
                for pos, i in enumerate(live):
                    drawn[i], codes[i] = o[pos], lat[pos]
            which = [i for i in live if drawn[i] is not None]
            hair = {i: round(float(forehead_hair(crops[i], drawn[i])), 3) for i in which}
            for reach in (None, *reaches):
                at = None if reach is None else {i: float(reach) for i in which}
                face = distances(drawn, which, at)
                wrong = probe(drawn, codes, which, number, 0, at) if probe is not None else {}
                for i in which:
                    sink.append(
                        {
                            "face": int(i),
                            "variant": number,
                            "reach": reach,
                            "width": None if face_widths is None else round(float(face_widths[i]), 1),
                            "face_distances": [round(float(v), 4) for v in face[i]],
                            "wrong_key_distances": [round(float(v), 4) for v in wrong[i]] if i in wrong else None,
                            "forehead_hair": hair[i],
                        }
                    )
        return outs, latents, [0] * len(outs), [None] * len(outs)

    guard_module.protect = record
    try:
        yield
    finally:
        guard_module.protect = real


#: the independent recognizers' targets replayed, as the share of different-person pairs that reach them
#: (``benchmarks/results/faceres_calibration.md``, ``mobileface_calibration.md``): FaceRes and MobileFace cosines
TARGET_LINES = {"10%": (0.5803, 0.2937), "20%": (0.5351, 0.2256)}
#: when the guard draws a face over a wider region: ``rank`` (as :func:`zoo.guard.protect` does: any face short of a
#: target, the (reach, variant) candidates ordered by :meth:`~zoo.guard.GuardCheck.rank`) or ``independent`` (only a
#: face recognized or short of an independent recognizer's target, and only for a candidate past a line it was short of)
WIDENING = ("rank", "independent")


def sighted(guard, left_out: int | None, lines: str) -> SimpleNamespace:
    """The guard's floors and targets, with the independent recognizers' targets at ``lines`` (a key of
    :data:`TARGET_LINES`) and recognizer ``left_out`` (an index of :data:`zoo.guard.RECOGNIZERS`) made to have no say:
    every face is far past its lines."""
    floors, targets = list(guard.floors), list(guard.targets)
    targets[1:] = [1.0 - c for c in TARGET_LINES[lines]]
    if left_out is not None:
        floors[left_out], targets[left_out] = -10.0, -9.0
    return SimpleNamespace(floors=tuple(floors), targets=tuple(targets))


def check_of(candidate: dict) -> GuardCheck:
    """A recorded candidate as the guard's :class:`~zoo.guard.GuardCheck`."""
    check = GuardCheck(*candidate["face_distances"], variant=candidate["variant"], reach=candidate["reach"], forehead_hair=candidate["forehead_hair"])
    if candidate.get("wrong_key_distances"):
        check.add_wrong_key(*candidate["wrong_key_distances"])
    return check


def _independent_strength(check: GuardCheck, sight) -> tuple[bool, bool]:
    """The ``independent`` widening's order: not recognized, then past both independent recognizers' targets."""
    return (not check.recognized(sight), all(s >= t for s, t in zip(check.scores()[1:], sight.targets[1:])))


def replay_guard(candidates: list[dict], n_variants: int, sight, reaches: tuple[float, ...], widening: str = "rank") -> GuardCheck:
    """The candidate the guard keeps for one face among its recorded ones (key variants 0..``n_variants``;
    ``sight``: the floors and targets it goes by): variants in turn at the default reach until one is
    :meth:`~zoo.guard.GuardCheck.done`, else the best by :meth:`~zoo.guard.GuardCheck.rank`; then each wider reach's
    variants, as :func:`zoo.guard.protect` does (``widening="rank"``) or by the ``independent`` rule of
    :data:`WIDENING`."""
    at = {(c["reach"], c["variant"]): check_of(c) for c in candidates if c["variant"] <= n_variants}
    kept = at[(None, 0)]
    for number in range(1, n_variants + 1):
        if kept.done(sight):
            break
        if at[(None, number)].rank(sight) > kept.rank(sight):
            kept = at[(None, number)]
    if widening == "rank":
        strong, order = (lambda c: c.passes(sight)), (lambda c: c.rank(sight))
    else:
        strong, order = (lambda c: all(_independent_strength(c, sight))), (lambda c: (*_independent_strength(c, sight), c.looks_right()))
    for reach in reaches:
        if strong(kept):
            break
        for number in range(n_variants + 1):
            check = at[(reach, number)]
            if not check.recognized(sight) and order(check) > order(kept):
                kept = check
            if strong(kept) and kept.looks_right():
                break
    return kept


def replay(faces: list[list[dict]], counts: list[int], guard, reaches: tuple[float, ...]) -> list[dict]:
    """For every widening rule, target line and variant count, with all three recognizers and with each left out:
    faces the guard would blur, and what the left-out recognizer says of the faces it would keep."""
    rows = []
    for widening in WIDENING:
        for lines in TARGET_LINES:
            for n in counts:
                for left_out in (None, 0, 1, 2):
                    sight = sighted(guard, left_out, lines)
                    kept = [replay_guard(c, n, sight, reaches, widening) for c in faces]
                    shown = [k for k in kept if not k.recognized(sight)]
                    row = {"widening": widening, "targets": lines, "variants": n, "left_out": None if left_out is None else RECOGNIZERS[left_out]}
                    row |= {"faces": len(kept), "blurred": len(kept) - len(shown), "wider_region": sum(k.reach is not None for k in shown)}
                    row["fringed"] = sum(not k.looks_right() for k in shown)
                    if left_out is None:
                        row["short_of_a_target"] = rate(sum(not k.passes(sight) for k in shown), len(shown))
                    else:
                        judged = [k.scores()[left_out] for k in shown]
                        row["median_distance"] = round(float(np.median(judged)), 4) if judged else None
                        row["short_of_target"] = rate(sum(d < sighted(guard, None, lines).targets[left_out] for d in judged), len(judged))
                        row["below_floor"] = rate(sum(d < guard.floors[left_out] for d in judged), len(judged))
                    rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="hford")
    ap.add_argument("--photos", default=",".join(in_split(REAL_PHOTOS, "tuning")))
    ap.add_argument("--variants", type=int, default=7, help="key variants drawn per face beyond the plain key")
    ap.add_argument("--from-json", default=None, help="replay the candidates of an earlier run's JSON instead of drawing them")
    ap.add_argument("--out", default=None)
    add_control_option(ap)
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else OUT

    from zoo import load

    guard = guard_for()
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
    else:
        controls = method_controls(args)
        result = {"command": command_line("benchmarks.guard_variants", argv), "variants": args.variants, "controls": controls, "methods": {}}
        for name in args.methods.split(","):
            method = load(name)
            rows, t0 = [], time.perf_counter()
            for photo, (rgb, _) in photos(args.photos.split(",")).items():
                sink: list[dict] = []
                with recording_candidates(args.variants, sink):
                    method.anonymize(rgb, key=f"{KEY} {photo}", **controls)
                rows += [{"photo": photo, "split": split_of(photo), **r} for r in sink]
                print(f"{name} {photo}: {len({r['face'] for r in sink})} faces, {time.perf_counter() - t0:.0f} s", flush=True)
            result["methods"][name] = {"seconds": round(time.perf_counter() - t0, 1), "candidates": rows}
    counts = sorted({min(3, result["variants"]), result["variants"]} | ({5} if result["variants"] > 5 else set()))
    for name, per in result["methods"].items():
        grouped: dict[tuple[str, int], list[dict]] = {}
        for r in per["candidates"]:
            grouped.setdefault((r["photo"], r["face"]), []).append(r)
        per["faces"] = len(grouped)
        per["replay"] = replay(list(grouped.values()), counts, guard, STRONGER_REACHES)
    write_report(result, out, guard)
    return 0


def write_report(result: dict, out: Path, guard) -> None:
    lines = [
        "# Choosing how the privacy guard strengthens a face, one recognizer left out",
        "",
        f"`{result['command']}`",
        "",
        f"Each face drawn with key variants 0..{result['variants']}, each at the default compositing reach and at {', '.join(map(str, STRONGER_REACHES))} "
        f"(controls {result.get('controls') or 'default'}), every candidate measured as the guard measures it (at its place in the photo; the face "
        "and its recovery with one stand-in wrong key). The guard's choice is replayed with all three recognizers, and with two, the third "
        "judging the faces kept (the nearer of the face and its wrong-key recovery, against its own floor). Widening `rank`: every face short of a "
        "target is drawn wider, candidates ordered by GuardCheck.rank (zoo.guard.protect); `independent`: only faces recognized or short of "
        "FaceRes's or MobileFace's target, and only for a candidate past a line it was short of. Targets: the FaceRes and MobileFace cosines "
        + ", ".join(f"{k} of different-person pairs reach ({a} / {b})" for k, (a, b) in TARGET_LINES.items())
        + f"; SFace {guard.targets[0]:.3f} distance. Floors: "
        + ", ".join(f"{n} {f:.3f}" for n, f in zip(RECOGNIZERS, guard.floors))
        + " (cosine distance). Rates: k/n faces kept (not blurred) [95% Wilson interval]. No dlib.",
        "",
        "| method | widening | targets | variants | recognizers deciding | faces | blurred | wider region | fringed | left-out: median distance | left-out: short of its target | left-out: below its floor (a leak) | all three: short of a target |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    totals: dict[tuple, int] = {}
    for method, per in result["methods"].items():
        for r in per["replay"]:
            deciding = "all three" if r["left_out"] is None else " + ".join(n for n in RECOGNIZERS if n != r["left_out"])
            if r["left_out"] is None:
                judged = f"- | - | - | {rate_text(r['short_of_a_target'])}"
            else:
                judged = f"{r['left_out']} {r['median_distance']} | {rate_text(r['short_of_target'])} | {rate_text(r['below_floor'])} | -"
                key = (r["widening"], r["targets"], r["variants"])
                totals[key] = totals.get(key, 0) + r["below_floor"]["k"]
            lines.append(
                f"| {method} | {r['widening']} | {r['targets']} | {r['variants']} | {deciding} | {r['faces']} | {r['blurred']} | {r['wider_region']} | {r['fringed']} | {judged} |"
            )
    lines += [
        "",
        "Leaks summed over the methods and the three left-out recognizers: "
        + "; ".join(f"{w}, {t}, {n} variants: {k}" for (w, t, n), k in totals.items())
        + ".",
    ]
    write_results(out, result, lines)


if __name__ == "__main__":
    raise SystemExit(main())
