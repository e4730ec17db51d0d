"""``python -m zoo.judges IMAGE [--methods ...] [--judge dlib]``: how anonymous each method leaves a photo's faces, by a judge."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from . import JUDGES, get_judge, measure


def _error(message: str) -> None:
    """One line on stderr (a user's mistake: no traceback)."""
    import sys

    print("error: " + " ".join(str(message).split()).strip("'\""), file=sys.stderr)


def _read_photo(item: str) -> np.ndarray:
    """A photo path, or ``example:NAME`` (a bundled example photo, as in ``python -m zoo``)."""
    from ..imageio import load_image

    if item.startswith("example:"):
        from ..assets import example_images

        examples = example_images()
        name = item.split(":", 1)[1]
        if name not in examples:
            raise ValueError(f"no example {name!r} on this machine; available: {', '.join(examples) or 'none'}")
        item = str(examples[name])
    elif not Path(item).expanduser().is_file():
        raise ValueError(f"no such image file: {item} (give the path of a photo, or example:group)")
    return load_image(item)[0]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m zoo.judges IMAGE [--methods blur,pixelate] [--judge dlib]``: anonymity at default strength.

    Prints a JSON report on stdout. Every error is one line on stderr, printed once; exit status 2 for a
    usage error (nothing measured), 1 when a method failed (the others are still measured), else 0."""
    import argparse
    import contextlib
    import json
    import sys

    from .. import load
    from ..detection import detect_faces
    from ..keys import Secret

    p = argparse.ArgumentParser(prog="python -m zoo.judges", description=main.__doc__.split("\n\n")[0])
    p.add_argument("image", help="a photo, or example:NAME (group, astronaut, ...)")
    p.add_argument("--methods", default="blur,pixelate,noise,mask", help="comma-separated methods (python -m zoo list)")
    p.add_argument("--judge", default="dlib", help=f"one of {', '.join(JUDGES)}")
    p.add_argument("--key", default="judge-check")
    args = p.parse_args(argv)
    methods = list(dict.fromkeys(m.strip().lower() for m in args.methods.split(",") if m.strip()))
    try:
        if not methods:
            raise ValueError("give at least one method: --methods blur,pixelate (see `python -m zoo list`)")
        secret = Secret(args.key)  # stretched once; an empty key is refused once here, not once per method
        rgb = _read_photo(args.image)
        judge = get_judge(args.judge)
    except (OSError, ValueError, ImportError) as err:
        _error(err)
        return 2
    try:
        faces = detect_faces(rgb)
        rows, failed = {}, False
        for name in methods:
            # stdout carries the JSON report only (some loaders print progress lines)
            with contextlib.redirect_stdout(sys.stderr):
                try:
                    out = np.asarray(load(name).anonymize(rgb, key=secret))
                except (KeyError, OSError, ValueError, TypeError) as err:  # unknown method, no weights, bad control
                    msg = " ".join(str(err).split()).strip("'\"")
                    _error(f"{name}: {msg}")
                    rows[name], failed = {"error": msg}, True
                    continue
                rows[name] = measure(rgb, out, faces, judge)
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except Exception as err:  # noqa: BLE001 - anything else: one line, not a traceback
        _error(f"{type(err).__name__}: {err} (please report this with the command you ran)")
        return 1
    print(json.dumps({"image": args.image, "faces": len(faces), "judge": judge.name, "threshold": judge.distance_threshold, "methods": rows}, indent=1))
    return 1 if failed else 0
