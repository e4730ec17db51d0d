"""Command-line argument handling shared by the ``python -m zoo`` subcommands.

Inputs (files, folders, glob patterns, ``example:NAME``), ``--method`` lists, ``--control NAME=VALUE``
pairs, the key (``--key``, ``--key-file`` or ``ZOO_KEY``) and the run options every anonymizing command
passes with the controls (``--min-face-score``, ``--privacy-guard``). Usage errors are :class:`CLIError`.
"""

from __future__ import annotations

import argparse
import glob
import os
from pathlib import Path
from typing import Any, Sequence

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".gif", ".ppm", ".pgm"}
VIDEO_EXTS = {".mp4", ".mov", ".m4v", ".mkv", ".webm", ".avi"}  # = zoo.video.VIDEO_EXTS (not imported: PyAV is lazy)


class CLIError(Exception):
    """A usage error the CLI reports in one line (exit status 2)."""


# ---------------------------------------------------------------------- inputs
def expand_inputs(items: Sequence[str]) -> list[tuple[Path, Path]]:
    """Files, folders (recursive, image extensions only) and globs -> [(path, relative output stem)].

    The relative stem keeps a folder input's sub-folders (``in/a/b.jpg`` -> ``a/b``) so outputs of
    different sub-folders do not collide. Missing paths raise :class:`CLIError`.
    """
    found: list[tuple[Path, Path]] = []
    for item in items:
        if item.startswith("example:"):  # a bundled/packaged example photo, e.g. example:group
            from .assets import example_images

            examples = example_images()
            name = item.split(":", 1)[1]
            if name not in examples:
                raise CLIError(f"no example {name!r} on this machine; available: {', '.join(examples)}")
            found.append((examples[name], Path(name)))
            continue
        p = Path(item).expanduser()
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in IMAGE_EXTS | VIDEO_EXTS and not f.name.startswith("."))
            found += [(f, f.relative_to(p).with_suffix("")) for f in files]
        elif p.is_file():
            found.append((p, Path(p.stem)))
        elif glob.has_magic(item):
            matches = sorted(Path(m) for m in glob.glob(os.path.expanduser(item), recursive=True))
            files = [m for m in matches if m.is_file()]
            if not files:
                raise CLIError(f"no files match {item!r}")
            found += [(m, Path(m.stem)) for m in files]
        else:
            raise CLIError(f"no such file or folder: {item}")
    seen: set[Path] = set()
    unique = []
    for path, stem in found:  # the same file given twice is processed once
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append((path, stem))
    return unique


def parse_methods(values: Sequence[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out += [m.strip().lower() for m in v.split(",") if m.strip()]
    if not out:
        raise CLIError("give at least one --method (see `python -m zoo list`)")
    return list(dict.fromkeys(out))


def parse_controls(values: Sequence[str] | None) -> dict[str, str]:
    controls: dict[str, str] = {}
    for v in values or []:
        name, sep, value = v.partition("=")
        if not sep or not name.strip():
            raise CLIError(f"--control takes name=value, got {v!r}")
        controls[name.strip()] = value.strip()
    return controls


def read_key(args: argparse.Namespace) -> tuple[bytes | str | None, str]:
    """(secret, where it came from). Never printed, never written. Key text follows
    :func:`zoo.keys.key_text`, the rule the app and the API use (surrounding whitespace dropped)."""
    from .keys import key_text

    if args.key is not None and args.key_file is not None:
        raise CLIError("give --key or --key-file, not both")
    if args.key is not None:
        key = key_text(args.key)
        if not key:
            raise CLIError("--key is empty")
        return key, "--key"
    if args.key_file is not None:
        path = Path(args.key_file).expanduser()
        if not path.is_file():
            raise CLIError(f"key file not found: {path}")
        data = key_text(path.read_bytes())  # as typed in the app: no surrounding whitespace
        if not data:
            raise CLIError(f"key file {path} is empty")
        return data, "--key-file"
    env = key_text(os.environ.get("ZOO_KEY", ""))
    if env:
        return env, "ZOO_KEY"
    return None, "none (random, not recoverable)"


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The run options every anonymizing command passes with the method controls: the detector threshold
    (``--min-face-score``) and the privacy guard (``--privacy-guard``)."""
    options: dict[str, Any] = {}
    if args.min_face_score is not None:
        if not 0.0 < args.min_face_score < 1.0:
            raise CLIError(f"--min-face-score must be between 0 and 1 (exclusive), got {args.min_face_score}")
        options["min_face_score"] = args.min_face_score
    if getattr(args, "privacy_guard", None) is not None:
        options["privacy_guard"] = _guard_option(args.privacy_guard)
    return options


def _guard_option(text: str) -> bool | float:
    """``--privacy-guard on|off|DISTANCE`` -> the ``privacy_guard`` run option (zoo.guard)."""
    value = text.strip().lower()
    if value in ("on", "off"):
        return value == "on"
    try:
        return float(value)
    except ValueError:
        raise CLIError(f"--privacy-guard takes on, off or an SFace distance such as 0.85, got {text!r}") from None
