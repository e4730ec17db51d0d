"""The app's files: its private folders (its own, with one subfolder per request, and Gradio's uploads and
cache), files written with mode 0600, a request's results zipped, and handed over to Gradio's cache."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import IO, Any, Callable, Sequence

import numpy as np
from PIL import Image

from app.common import CACHE_SECONDS
from app.methods import MethodStatus

RUN_KEEP_SECONDS = 3600.0  # request folders left behind (direct calls, crashes) are swept after this
EXAMPLES = "examples"  # the app folder's subfolder for generated example photos (never swept)

_APP_DIR: Path | None = None
_APP_DIR_LOCK = threading.Lock()


def app_dir() -> Path:
    """This process's private folder for the app's files: made by ``tempfile.mkdtemp`` (mode 0700, a
    fresh unpredictable name, never a shared fixed path) and removed when the process exits."""
    global _APP_DIR
    with _APP_DIR_LOCK:
        if _APP_DIR is None or not _APP_DIR.is_dir():
            _APP_DIR = Path(tempfile.mkdtemp(prefix="deid_zoo_app_"))
            atexit.register(shutil.rmtree, _APP_DIR, True)
        return _APP_DIR


_GRADIO_DIR: Path | None = None
_GRADIO_PARENT = os.environ.get("GRADIO_TEMP_DIR") or None  # as set before the app changed it


def gradio_temp_dir() -> Path:
    """This process's private folder for Gradio's uploads and served results: a ``tempfile.mkdtemp`` folder
    (mode 0700) made inside ``$GRADIO_TEMP_DIR`` (default: the system temp folder, never Gradio's shared
    ``/tmp/gradio``), set as ``GRADIO_TEMP_DIR`` for this process and removed at exit. Gradio writes an
    upload as a 0600 file in a subfolder of it, so no other user of the machine can read an uploaded photo.
    Call before any ``gr.Blocks`` is made (:func:`build_app` does)."""
    global _GRADIO_DIR
    with _APP_DIR_LOCK:
        if _GRADIO_DIR is None or not _GRADIO_DIR.is_dir():
            if _GRADIO_PARENT:
                Path(_GRADIO_PARENT).mkdir(parents=True, exist_ok=True)
            _GRADIO_DIR = Path(tempfile.mkdtemp(prefix="deid_zoo_gradio_", dir=_GRADIO_PARENT))
            atexit.register(shutil.rmtree, _GRADIO_DIR, True)
        os.environ["GRADIO_TEMP_DIR"] = str(_GRADIO_DIR)
        return _GRADIO_DIR


def sweep_gradio_dir(root: Path, age: float) -> None:
    """Remove folders in Gradio's cache left empty by its ``delete_cache`` (which deletes files only) and
    anything older than ``age`` seconds; files Gradio copied in with their own mode (the example photos, 0644)
    become 0600 like the rest."""
    now = time.time()
    for f in root.rglob("*"):
        try:
            if f.is_file() and not f.is_symlink() and f.stat().st_mode & 0o077:
                os.chmod(f, 0o600)
        except OSError:
            pass
    for folder in sorted((d for d in root.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
        try:
            if now - folder.stat().st_mtime > age:
                shutil.rmtree(folder, ignore_errors=True)
            elif not any(folder.iterdir()) and now - folder.stat().st_mtime > 60:
                folder.rmdir()
        except OSError:
            pass


def _write_private(path: Path, write: Callable[[IO[bytes]], Any]) -> str:
    """Create (or replace) ``path`` with mode 0600, whatever the umask, and fill it with ``write(file)``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)
        f = os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        write(f)
    return str(path)


def save_png(image: Image.Image | np.ndarray, folder: Path, name: str) -> str:
    img = image if isinstance(image, Image.Image) else Image.fromarray(image)
    return _write_private(folder / f"{name}.png", lambda f: img.save(f, format="PNG"))


def save_json(data: Any, folder: Path, name: str) -> str:
    return _write_private(folder / f"{name}.json", lambda f: f.write(json.dumps(data, indent=2).encode()))


def run_dir(kind: str, keep_seconds: float = RUN_KEEP_SECONDS) -> Path:
    """A fresh private folder for one request's files (``tempfile.mkdtemp``, 0700) with a ``results``
    subfolder (0700) for what goes into the request's zip; request folders older than ``keep_seconds``
    (left behind by a direct call or a crash) are removed."""
    base = app_dir()
    now = time.time()
    for old in base.iterdir():
        try:
            if old.name != EXAMPLES and now - old.stat().st_mtime > keep_seconds:
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        except OSError:
            pass
    if _GRADIO_DIR is not None and _GRADIO_DIR.is_dir():
        sweep_gradio_dir(_GRADIO_DIR, CACHE_SECONDS)
    folder = Path(tempfile.mkdtemp(prefix=f"{kind}_", dir=base))
    (folder / "results").mkdir(mode=0o700)
    os.chmod(folder / "results", 0o700)  # whatever the umask
    return folder


def results_dir(run: Path) -> Path:
    """The subfolder of a request folder whose files (and only those) go into the request's zip."""
    return run / "results"


def zip_results(run: Path, name: str) -> str:
    """``<name>.zip`` (0600) in the request folder, of every file in its ``results`` subfolder."""

    def write(f: IO[bytes]) -> None:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in sorted(results_dir(run).iterdir()):
                zf.write(p, arcname=p.name)

    return _write_private(run / f"{name}.zip", write)


def download_tag(methods: Sequence["MethodStatus"]) -> str:
    """The methods of a request, for a download's name: ``blur-pixelate`` (or ``3_methods`` when long)."""
    tag = "-".join(s.name for s in methods)
    return tag if len(tag) <= 60 else f"{len(methods)}_methods"


def hand_over(outputs: Any, cache_dir: str | os.PathLike) -> Any:
    """Copy every file of this app's folder named in a handler's ``outputs`` into Gradio's cache (same
    name and mode 0600, each in a fresh 0700 folder there, which Gradio's ``delete_cache`` removes), point
    the outputs at the copies and delete the request folders they came from: the app keeps nothing once
    Gradio holds what it serves."""
    base = app_dir().resolve()
    copies: dict[str, str] = {}
    runs: set[Path] = set()

    def move(x: Any) -> Any:
        if isinstance(x, (list, tuple)):
            return type(x)(move(v) for v in x)
        if not isinstance(x, str) or not os.path.isabs(x):
            return x
        path = Path(x).resolve()
        try:
            rel = path.relative_to(base)
        except ValueError:
            return x
        if len(rel.parts) < 2 or rel.parts[0] == EXAMPLES or not path.is_file():
            return x
        runs.add(base / rel.parts[0])
        if x not in copies:
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
            dest = Path(tempfile.mkdtemp(prefix="deid_", dir=cache_dir)) / path.name
            shutil.copy2(path, dest)
            os.chmod(dest, 0o600)
            copies[x] = str(dest)
        return copies[x]

    try:
        return move(outputs)
    finally:
        for run in runs:
            shutil.rmtree(run, ignore_errors=True)
