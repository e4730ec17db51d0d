"""What the carrier blocks of an anonymized photo give someone who has the photo but not the key. Judged by dlib.

    python -m benchmarks.carrier_attack [--methods dbaf,hford,ifadit,personal] [--photos t1,biden,...] [--out PATH]

Each reversible method anonymizes each photo of :data:`benchmarks.real_photos.REAL_PHOTOS` once at its defaults (key
``carrier-attack``, privacy guard on). Someone without the key then reads every face's block (:mod:`zoo.carrier`)
from the lossless output and draws what it holds, bypassing the tool's key check:

* ``unsealed``: what the block would give if its code rode in the clear (the code the right key opens): the
  anonymized face's own code, drawn with no keyed inverse. Where the privacy guard blurred a face because its
  anonymized face was still recognizable, this is that face;
* ``sealed``: what the sealed block gives: its bytes read as if they were the code, then recovered with a key of
  the attacker's own (``carrier-attack / attacker``), as a wrong key's recovery would be without the key check.

For every face dlib's CNN detector finds in the original, at the original's place: the dlib descriptor distance of
the anonymized photo, of each drawing, and the face's guard record. Reported per split (``tuning`` / ``held-out``,
:mod:`benchmarks.real_photos`): faces dlib matches (< 0.6) with their 95% Wilson intervals, over all faces and over the
faces the guard blurred. Writes ``benchmarks/results/carrier_attack.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import numpy as np

from benchmarks.appearance import DlibEye, judged_photos, record_at
from benchmarks.real_photos import REAL_PHOTOS
from benchmarks.report import command_line, rate, rate_text, rows_not_run, write_results
from zoo.methods.fit_controls import FACE_FIT_CONTROL, REFINE_CONTROL

OUT = Path(__file__).resolve().parent / "results" / "carrier_attack"
KEY = "carrier-attack"
ATTACKER = f"{KEY} / attacker"
REVERSIBLE = ("dbaf", "hford", "ifadit", "personal")


@contextlib.contextmanager
def drawing_the_anonymized_code(method) -> Iterator[None]:
    """Within: ``method.recover`` draws each face's carried anonymized code as it is, without the keyed inverse (what
    an unsealed block gives anyone)."""

    def draw(
        y, keys, refine_steps=REFINE_CONTROL.default, carried=None, identity_refine=None, identity_check=None, face_fit=FACE_FIT_CONTROL.default, **controls
    ):
        code, _ = method.anonymized_codes(y, carried, method.inversion_fit(refine_steps, identity_refine, identity_check, face_fit))
        return method.decode(code)

    method.recover_faces = draw
    try:
        yield
    finally:
        del method.recover_faces


def _finite(a: np.ndarray) -> np.ndarray:
    """Bytes read as float16 are partly inf and NaN: kept within +-8, as the methods keep an identity code."""
    return np.clip(np.nan_to_num(a, nan=0.0, posinf=8.0, neginf=-8.0), -8.0, 8.0).astype(np.float32)


@contextlib.contextmanager
def reading_sealed_bytes_as_code() -> Iterator[None]:
    """Within: every block passes the key check and its sealed bytes are read as if they were the code (what someone
    without the key can take from a sealed block)."""
    from zoo import carrier

    cls = carrier.CarriedLatent
    saved = cls.key_matches, cls.opened

    def as_code(block, key):
        if block.sealed_latent is None:
            return block
        latent = np.frombuffer(block.sealed_latent[:-4], dtype=np.float16).astype(np.float32)
        code = carrier._code_from_bytes(block.sealed_code, *block.code_shape) if block.sealed_code is not None and block.code_shape else None
        return replace(block, latent=_finite(latent), code=None if code is None else _finite(code), sealed_latent=None, sealed_code=None)

    cls.key_matches, cls.opened = (lambda block, key: True), as_code
    try:
        yield
    finally:
        cls.key_matches, cls.opened = saved


def summarise(rows: list[dict]) -> dict:
    blurred = [r for r in rows if r["guard_blurred"]]
    out = {"faces": len(rows), "guard_blurred": len(blurred)}
    for part in ("anonymized", "unsealed", "sealed"):
        out[part] = rate(sum(r[part] < 0.6 for r in rows), len(rows))
        out[f"{part}_blurred"] = rate(sum(r[part] < 0.6 for r in blurred), len(blurred))
        out[f"{part}_min"] = round(min((r[part] for r in rows), default=float("nan")), 4)
    return out


def write_report(result: dict, out: Path) -> None:
    lines = [
        "# What the carrier blocks give without the key",
        "",
        f"`{result['command']}`",
        "",
        "Each face anonymized once at the method's defaults (guard on); the lossless output's blocks then read without the key, "
        "the tool's key check bypassed. *Unsealed*: the code the block holds, drawn as it is (what a block in the clear gives "
        "anyone). *Sealed*: the sealed bytes read as a code and recovered with an attacker's key. dlib judges at 0.6 at the "
        "original's place; k/n [95% Wilson interval]."
        + ("" if result.get("small_face_region", "on") == "on" else " Small faces composited with the region of large ones (`--small-face-region off`)."),
        "",
        "| method | split | faces | guard blurred | anonymized photo: matched | unsealed block drawn: matched | of them guard-blurred faces | sealed block, attacker's key: matched | min dlib distance (unsealed / sealed) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method, per in result["methods"].items():
        for split in ("tuning", "held-out"):
            s = per.get(split)
            if not s:
                continue
            lines.append(
                f"| {method} | {split} | {s['faces']} | {s['guard_blurred']} | {rate_text(s['anonymized'])} | {rate_text(s['unsealed'])} | "
                f"{rate_text(s['unsealed_blurred'])} | {rate_text(s['sealed'])} | {s['unsealed_min']} / {s['sealed_min']} |"
            )
    write_results(out, result, lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=",".join(REVERSIBLE))
    ap.add_argument("--photos", default=",".join(REAL_PHOTOS), help="names from benchmarks.real_photos.REAL_PHOTOS")
    ap.add_argument("--out", default=None)
    ap.add_argument("--add", action="store_true", help="add to the results file: keep its rows of the methods and photos not run now")
    ap.add_argument(
        "--small-face-region", choices=("on", "off"), default="on", help="off: small faces get the region of large ones (zoo.compositing.is_small_face)"
    )
    args = ap.parse_args(argv)
    out_path = Path(args.out) if args.out else OUT

    import zoo
    from zoo import compositing

    if args.small_face_region == "off":
        compositing.SMALL_FACE_EYE_DISTANCE = 0.0
    eye = DlibEye()
    methods = [m for m in args.methods.split(",") if m]
    rows: dict[str, list[dict]] = {m: [] for m in methods}
    seconds = {m: 0.0 for m in methods}
    command = command_line("benchmarks.carrier_attack", argv)
    if args.add and out_path.with_suffix(".json").is_file():  # one results file built over several runs
        command = earlier_rows(out_path, rows, seconds, set(args.photos.split(","))) + " ; " + command
    for name, split, rgb, refs in judged_photos(eye, args.photos.split(",")):
        for method in methods:
            m = zoo.load(method)
            t0 = time.perf_counter()
            result = m.anonymize(rgb, key=KEY)
            seconds[method] += time.perf_counter() - t0
            out = np.asarray(result)
            with drawing_the_anonymized_code(m):
                unsealed = np.asarray(m.recover(out, key=KEY))
            with reading_sealed_bytes_as_code():
                sealed = np.asarray(m.recover(out, key=ATTACKER))
            for i, ref in enumerate(refs):
                record = record_at(result, ref.box)
                row = {
                    "photo": name,
                    "split": split,
                    "face": i,
                    "status": record.status if record is not None else "not found",
                    "guard_blurred": bool(record is not None and record.status == "guard_blur"),
                    "blur_reason": (record.guard or {}).get("blur_reason") if record is not None else None,
                    "anonymized": round(ref.distance(eye, out), 4),
                    "unsealed": round(ref.distance(eye, unsealed), 4),
                    "sealed": round(ref.distance(eye, sealed), 4),
                }
                rows[method].append(row)
                print(method, name, i, row["status"], row["anonymized"], row["unsealed"], row["sealed"], flush=True)
        save(out_path, rows, seconds, command, args.small_face_region)  # after every photo
    print(f"wrote {out_path.with_suffix('.md')}")
    return 0


def earlier_rows(out_path: Path, rows: dict[str, list[dict]], seconds: dict[str, float], photos: set[str]) -> str:
    """Into ``rows`` (method -> face rows): the results file's rows of the methods and photos not run now (their
    anonymize seconds kept only for methods not run now); returns the file's command."""
    before = json.loads(out_path.with_suffix(".json").read_text())
    for m, kept in rows_not_run(before["methods"], "faces_rows", set(rows), photos).items():
        seconds[m] = seconds.get(m, 0.0) + (before["methods"][m]["seconds_anonymize"] if m not in rows else 0.0)
        rows[m] = kept + rows.get(m, [])
    return before["command"]


def save(out_path: Path, rows: dict[str, list[dict]], seconds: dict[str, float], command: str, small_face_region: str = "on") -> None:
    result = {
        "command": command,
        "small_face_region": small_face_region,
        "methods": {
            m: {
                "seconds_anonymize": round(seconds[m], 1),
                **{split: summarise([r for r in per if r["split"] == split]) for split in ("tuning", "held-out") if any(r["split"] == split for r in per)},
                "faces_rows": per,
            }
            for m, per in rows.items()
        },
    }
    write_report(result, out_path)


def merge(paths: list[Path], out: Path) -> None:
    """One results file from runs of different methods (``--out`` per process)."""
    rows: dict[str, list[dict]] = {}
    seconds: dict[str, float] = {}
    commands = []
    for p in paths:
        r = json.loads(p.with_suffix(".json").read_text())
        commands.append(r["command"])
        for m, per in r["methods"].items():
            rows[m] = per["faces_rows"]
            seconds[m] = per["seconds_anonymize"]
    save(out, rows, seconds, " ; ".join(commands))


if __name__ == "__main__":
    raise SystemExit(main())
