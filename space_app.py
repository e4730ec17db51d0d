"""The zoo's Gradio app (a Hugging Face Space): compare face de-identification methods side by side.

    python space_app.py                  # http://127.0.0.1:7860 (PORT / GRADIO_SERVER_PORT to change)

Tabs
* Anonymize: a photo (upload, webcam or a bundled example) through any number of methods at once, each
  with its own controls; per-face identity similarity to the original as measured by a judge model
  (SFace by default), and the time each method took. Below it, a short video through one method
  (:func:`anonymize_clip`, :func:`zoo.video.anonymize_video`: faces tracked, one key per track, audio kept)
  with a progress bar, a per-track table and the report; the upload is checked as it arrives and again
  before any work (:func:`read_video_info`: a video container by its content, length, frames, frame size).
* Recover: anonymize with a key, then recover with that key and with a wrong one, for every reversible
  method; or recover an anonymized image saved earlier (the real use).
* Diversity: one face, N keys, one row per method, with the mean pairwise identity similarity.

Every result can be downloaded as a zip of PNGs (a video: its MP4) with a JSON report each (the key's fingerprint,
never the key); galleries and zips hold results only, never the uploaded photo (it stays in the input), and
their files are named after what they hold (``anonymized_<method>.png``, ``anonymized_<methods>.zip``, ...).
Methods whose weights are not installed are listed as unavailable; a tab that cannot work here (Recover
without a reversible method) says so and its button is disabled. No key is fixed at start-up: empty key
fields mean a fresh random key per run.

Requests: uploads over ``ZOO_MAX_UPLOAD`` are refused by the server; every photo and video input checks a new upload
at once (never limited by the queue). Events are not held in Gradio's queue: a request's inputs are read and checked
at once (a bad upload is answered in well under a second however busy the app is) and only the methods wait
for one of ``ZOO_CONCURRENCY`` slots (:class:`HeavySlots`; beyond ``ZOO_QUEUE_SIZE`` waiting, "busy").

Files: Gradio's uploads and cache go to a private folder per process (:func:`gradio_temp_dir`:
``tempfile.mkdtemp``, mode 0700, inside ``$GRADIO_TEMP_DIR`` or the system temp folder, never the shared
``/tmp/gradio``), whose files are deleted ``ZOO_CACHE_SECONDS`` (default 900) after they were made and the
whole folder at exit. The app's own files go to another private folder (0700; files 0600), one subfolder per
request; a request's files are handed to Gradio's cache (still 0600, in a 0700 folder of their own) and the
request's folder is deleted at once; leftovers (a direct call, a crash) are swept after an hour.

Logging: a user's mistake (no photo, unreadable file, no key, ...) is logged as one line, without a
traceback; an unexpected failure inside a method is logged with its traceback.

Environment
* ``ZOO_METHODS``: comma-separated methods to offer (default: every registered method).
* ``ZOO_CHECKPOINTS``: a folder with ``<method>/`` checkpoints (``save_pretrained`` layout), used
  instead of the Hub cache: ``zoo.load(name, local_dir=ZOO_CHECKPOINTS/name)``.
* ``ZOO_MAX_VIDEO_SECONDS`` (default 10), ``ZOO_MAX_VIDEO_FRAMES`` (default 300), ``ZOO_MAX_VIDEO_PIXELS``
  (per frame, default 1920x1080): the longest and largest video the Anonymize tab takes.
* ``ZOO_APP_MAX_PIXELS`` (default 16 MP), ``ZOO_MAX_UPLOAD`` (default ``20mb``), ``ZOO_CONCURRENCY``
  (default 2 jobs at a time), ``ZOO_QUEUE_SIZE`` (default 32), ``PORT`` / ``GRADIO_SERVER_PORT``,
  ``GRADIO_SERVER_NAME``.
* On a GPU Space the ``spaces`` package's ``GPU`` decorator wraps the heavy handlers (``ZOO_GPU_SECONDS``,
  default 120, is its time budget per call); without it they run as they are (CUDA when available).
"""

from __future__ import annotations

import atexit
import contextvars
import importlib.util
import inspect
import itertools
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Sequence

import gradio as gr
import numpy as np
from PIL import Image

import zoo
from zoo import imageio
from zoo.keys import Secret, key_text, new_secret

log = logging.getLogger("space_app")

TITLE = "Face de-identification zoo"
MAX_PIXELS = int(os.environ.get("ZOO_APP_MAX_PIXELS", 16_000_000))
MAX_UPLOAD = os.environ.get("ZOO_MAX_UPLOAD", "20mb")
CONCURRENCY = int(os.environ.get("ZOO_CONCURRENCY", 2))
QUEUE_SIZE = int(os.environ.get("ZOO_QUEUE_SIZE", 32))
MAX_KEYS = 8
#: dlib first: no method trains with it and no setting uses it; FaceRes: no method trains with it, the privacy guard's
#: second recognizer; SFace: the demo checkpoints' training encoder and the guard's first recognizer
JUDGES = ("dlib", "faceres", "sface")
JUDGE_LABELS = {"dlib": "dlib (independent)", "faceres": "FaceRes (independent, privacy guard)", "sface": "SFace (used in training, privacy guard)"}
RUN_KEEP_SECONDS = 3600.0  # request folders left behind (direct calls, crashes) are swept after this
CACHE_SECONDS = int(os.environ.get("ZOO_CACHE_SECONDS", 900))  # uploads and served results live this long
_EXAMPLES = "examples"  # the app folder's subfolder for generated example photos (never swept)
MAX_VIDEO_SECONDS = float(os.environ.get("ZOO_MAX_VIDEO_SECONDS", 10))
MAX_VIDEO_FRAMES = int(os.environ.get("ZOO_MAX_VIDEO_FRAMES", 300))
MAX_VIDEO_PIXELS = int(os.environ.get("ZOO_MAX_VIDEO_PIXELS", 1920 * 1080))  # per frame


# ============================================================================ GPU decorator
def _gpu_decorator() -> Callable[[Callable], Callable]:
    """``spaces.GPU`` on a Hugging Face GPU Space, a no-op everywhere else."""
    if importlib.util.find_spec("spaces") is None:
        return lambda fn: fn
    try:
        import spaces

        return spaces.GPU(duration=int(os.environ.get("ZOO_GPU_SECONDS", 120)))
    except Exception as err:  # noqa: BLE001 - a broken `spaces` install must not stop the app
        log.warning("spaces.GPU unavailable (%s); running without it", err)
        return lambda fn: fn


GPU = _gpu_decorator()


# ============================================================================ methods
@dataclass
class MethodStatus:
    """What the app knows about one method: whether it can run here and why not."""

    name: str
    available: bool
    reason: str
    summary: str = ""
    reversible: bool = False
    uses_key: bool = True
    controls: tuple = ()
    local_dir: str | None = None
    evaluation: str = ""  # measured privacy/recovery of the weights in use, one line


def _requested_methods() -> list[str]:
    env = os.environ.get("ZOO_METHODS", "").strip()
    if not env:
        return zoo.list_methods()
    return [m.strip().lower() for m in env.split(",") if m.strip()]


def method_catalog(names: Sequence[str] | None = None, checkpoints: str | None = None) -> dict[str, MethodStatus]:
    """Status of every method to offer, in order; never raises (a broken method is just unavailable)."""
    names = list(names) if names is not None else _requested_methods()
    checkpoints = checkpoints if checkpoints is not None else os.environ.get("ZOO_CHECKPOINTS")
    out: dict[str, MethodStatus] = {}
    for name in names:
        local = Path(checkpoints) / name if checkpoints else None
        try:
            info = zoo.info(name)
            choice = zoo.registry.resolve_weights(name, local_dir=str(local)) if local is not None and local.is_dir() else None
            cls = zoo.registry.runtime_class(name, choice)  # a demo checkpoint runs the demo variant (its controls)
        except Exception as err:  # noqa: BLE001 - unknown name or a module that does not import
            log.warning("method %s cannot be offered: %s", name, _one_line(str(err), 300))
            out[name] = MethodStatus(name, False, _one_line(f"cannot be loaded: {str(err).strip(chr(39) + chr(34))}"))
            continue
        evaluation = info.get("evaluation")
        if choice is not None:
            available, reason, local_dir, evaluation = True, f"local checkpoint {local.name}/: {choice.label}", str(local), choice.evaluation
        else:
            available, reason, local_dir = bool(info.get("weights_available")), str(info.get("weights_status", "")), None
            if not available:  # the library's advice (local_dir=..., hf download) is for the operator, not a visitor
                log.warning("method %s is unavailable: %s (put its checkpoint in ZOO_CHECKPOINTS/%s/ or the Hub cache)", name, _one_line(reason, 400), name)
                repo = info.get("default_repo")
                reason = "its weights are not installed on this server" + (f" (Hub repo {repo})" if repo else "")
        out[name] = MethodStatus(
            name=name,
            available=available,
            reason=_one_line(reason),
            summary=str(info.get("summary") or ""),
            reversible=bool(info.get("reversible")),
            uses_key=bool(info.get("uses_key", True)),
            controls=tuple(getattr(cls, "controls", ())),
            local_dir=local_dir,
            evaluation=_evaluation_line(evaluation) if available and info.get("weights_kind") != "none" else "",
        )
    return out


def _evaluation_line(evaluation) -> str:
    """One line from a checkpoint's stored evaluation (dlib judge), or the warning that it has none."""
    if not isinstance(evaluation, dict):
        return str(evaluation or "warning: this checkpoint carries no evaluation summary; its privacy is unmeasured")
    parts = []
    for data, block in evaluation.items():
        if isinstance(block, dict):
            vals = [f"{k.replace('_', ' ')} {v['value']:.2f}" for k, v in block.items() if isinstance(v, dict) and "value" in v]
            parts.append(
                f"{data} ({block.get('judge', 'dlib')}, n={next((v['n'] for v in block.values() if isinstance(v, dict) and 'n' in v), '?')}): "
                + ", ".join(vals)
            )
    return "; ".join(parts)


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_LOAD_LOCK = threading.Lock()
_METHODS: dict[str, Any] = {}


def get_method(status: MethodStatus):
    """The loaded method (cached); raises :class:`MethodFailed` with a one-line reason when it cannot be loaded."""
    with _LOAD_LOCK:
        if status.name not in _METHODS:
            try:
                _METHODS[status.name] = zoo.load(status.name, local_dir=status.local_dir) if status.local_dir else zoo.load(status.name)
            except Exception as err:  # noqa: BLE001
                raise MethodFailed(f"{status.name}: could not load ({_one_line(f'{type(err).__name__}: {err}')})") from err
        return _METHODS[status.name]


class MethodFailed(RuntimeError):
    """One method failed; the others still run and the failure is shown in its place."""


def user_error(message: str) -> gr.Error:
    """A ``gr.Error`` for a user's mistake: shown to the user, logged as one line without a traceback
    (Gradio prints a full traceback for every ``gr.Error`` unless told not to)."""
    log.info("user error: %s", _one_line(message, 300))
    return gr.Error(message, print_exception=False)


def _gradio_checks_as_user_errors(component: gr.components.Component) -> None:
    """Gradio's own input checks (a value that is not among a CheckboxGroup's or Dropdown's choices, a
    number outside a Slider's range) raise ``gr.Error`` with a printed traceback: re-raise them as
    :func:`user_error` (same message, one log line). Replaces the instance's ``preprocess``."""
    preprocess = component.preprocess

    def checked(payload):
        try:
            return preprocess(payload)
        except gr.Error as err:
            if not getattr(err, "print_exception", True):  # already a user_error
                raise
            raise user_error(str(getattr(err, "message", err))) from None

    component.preprocess = checked


def _method_failed(name: str, err: Exception, notes: list[str]) -> None:
    """Note one method's failure for the status line and log it: a user-side failure (bad control
    value, wrong input, weights that do not load) in one line, anything else with its traceback."""
    if isinstance(err, (MethodFailed, ValueError)):
        msg = _one_line(str(err))
        log.warning("%s failed: %s", name, msg)
    else:
        msg = _one_line(f"{type(err).__name__}: {err}")
        log.error("%s failed", name, exc_info=err)
    notes.append(f"**{name}** failed: {msg}")


# ============================================================================ judge
_JUDGES: dict[str, Any] = {}
_JUDGE_LOCK = threading.Lock()


class JudgeColumn:
    """The app's identity-similarity column: a :class:`zoo.judges.Judge` (a face recognizer the methods
    do not use) scoring the faces of two photos, with the column's label.

    Reports the judge's own metric (cosine for SFace, Euclidean distance for dlib) with its published
    threshold; faces are measured at the positions found in the original. A missing embedding or
    score is ``None``, never an error.
    """

    def __init__(self, name: str):
        from zoo import judges

        self.name = name
        self.model = judges.get_judge(name)
        self.metric = self.model.metric
        self.threshold = float(self.model.threshold)
        self.higher_is_same = self.metric == "cosine"

    def embed(self, rgb: np.ndarray, faces: list) -> list[np.ndarray | None]:
        if not faces:
            return []
        embs = self.model.embed_photo_faces(np.ascontiguousarray(rgb), faces)
        return [np.asarray(e, dtype=np.float64) for e in embs]

    def score(self, a: np.ndarray | None, b: np.ndarray | None) -> float | None:
        if a is None or b is None:
            return None
        return float(self.model.score(a, b)[0])

    def same(self, value: float | None) -> bool | None:
        return None if value is None else self.model.same_score(value)

    @property
    def column(self) -> str:
        rule = f"same person when {'≥' if self.higher_is_same else '<'} {self.threshold:g}"
        return f"{self.name} {self.metric} ({rule})"


def judge_column(name: str) -> JudgeColumn | None:
    """The (cached) similarity column of judge ``name``, or None when that judge cannot load here."""
    with _JUDGE_LOCK:
        if name not in _JUDGES:
            try:
                _JUDGES[name] = JudgeColumn(name)
            except Exception as err:  # noqa: BLE001 - no judge means no similarity column, not a crash
                log.warning("judge %s unavailable: %s", name, err)
                _JUDGES[name] = None
        return _JUDGES[name]


# ============================================================================ images and examples
def photo_input(**kwargs: Any) -> gr.Image:
    """A ``gr.Image`` (filepath) that hands the uploaded file's path over untouched, so that a broken or
    huge upload is read by ``zoo.imageio.load_image`` and reported as a readable error instead of failing
    inside Gradio's own preprocessing (which opens the file with PIL first).

    The instance's ``preprocess`` is replaced rather than subclassing ``gr.Image``: Gradio writes a ``.pyi``
    stub next to any module that defines a component subclass."""
    kwargs.setdefault("type", "filepath")
    kwargs.setdefault("sources", ["upload", "webcam", "clipboard"])
    image = gr.Image(**kwargs)
    gradio_preprocess = image.preprocess

    def preprocess(payload):
        if payload is None:
            return None
        path = getattr(payload, "path", None)
        url = getattr(payload, "url", None) or ""
        if path and not url.startswith("data:"):
            return str(path)
        try:
            return gradio_preprocess(payload)
        except Exception as err:  # noqa: BLE001
            raise user_error(f"That file is not an image this app can read ({type(err).__name__}).") from None

    image.preprocess = preprocess
    return image


def read_photo(path: str | None) -> np.ndarray:
    """uint8 RGB [H,W,3] of an uploaded file, or gr.Error with a readable reason."""
    if not path:
        raise user_error("Please upload a photo first (or pick an example).")

    def say(err: Exception) -> str:  # the server's temp path means nothing to the user: show the file name
        return str(err).replace(str(path), Path(path).name)

    try:
        rgb, _alpha = imageio.load_image(path, max_pixels=MAX_PIXELS)
    except imageio.ImageTooLargeError as err:
        raise user_error(f"Image too large: {say(err)}") from None
    except imageio.InvalidImageError as err:
        raise user_error(f"Not a readable image: {say(err)}") from None
    except FileNotFoundError:
        raise user_error("The uploaded file is gone; please upload it again.") from None
    except Exception as err:  # noqa: BLE001
        raise user_error(f"Cannot read this file as an image ({type(err).__name__}).") from None
    return rgb


def example_photos() -> list[str]:
    """Example photos available offline: ``zoo.assets.example_images()`` (bundled photos and photos that
    installed packages ship), else insightface's group photo and scikit-image's astronaut."""
    try:
        from zoo.assets import example_images

        found = [str(p) for p in example_images().values()]
        if found:
            return found
    except ImportError:
        pass
    found = []
    spec = importlib.util.find_spec("insightface")
    if spec is not None and spec.submodule_search_locations:
        t1 = Path(list(spec.submodule_search_locations)[0]) / "data" / "images" / "t1.jpg"
        if t1.is_file():
            found.append(str(t1))
    try:
        from skimage import data as skdata

        folder = _app_dir() / _EXAMPLES
        folder.mkdir(mode=0o700, exist_ok=True)
        astro = folder / "astronaut.png"
        if not astro.is_file():
            _save_png(skdata.astronaut(), folder, "astronaut")
        found.append(str(astro))
    except Exception as err:  # noqa: BLE001
        log.info("no scikit-image example: %s", err)
    return found


def _detect(rgb: np.ndarray) -> list:
    from zoo import pipeline

    return pipeline.detect_faces(rgb)


# ============================================================================ files
_APP_DIR: Path | None = None
_APP_DIR_LOCK = threading.Lock()


def _app_dir() -> Path:
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


def _sweep_gradio_dir(root: Path, age: float) -> None:
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


class HeavySlots:
    """At most ``limit`` heavy jobs (the methods and judges) run at a time; at most ``waiting`` more wait.

    The app's events are not limited by Gradio's queue, so every request is read and checked at once (a bad
    upload, a missing key, an unknown method are answered in well under a second however busy the app is);
    only the heavy part of a good request runs here, in one of ``limit`` worker threads that run at a lower
    CPU priority (``nice``, Linux: per thread), so that the web server and the checks keep their share of a
    small machine. A request that would wait beyond ``waiting`` others is answered "busy" at once."""

    def __init__(self, limit: int, waiting: int, nice: int = int(os.environ.get("ZOO_HEAVY_NICE", 5))):
        self.limit, self.max_waiting, self.nice = int(limit), int(waiting), int(nice)
        self._lock = threading.Lock()
        self._pending = 0  # running + waiting
        self._pool = None

    def _lower_priority(self) -> None:
        if self.nice > 0 and hasattr(os, "setpriority") and hasattr(threading, "get_native_id"):
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)  # this thread only (Linux)
            except OSError:
                pass

    def run(self, fn: Callable, *args: Any) -> Any:
        """``fn(*args)`` in a worker thread once one is free; its result or its exception."""
        from concurrent.futures import ThreadPoolExecutor

        with self._lock:
            if self._pending >= self.limit + self.max_waiting:
                raise user_error("The app is busy right now; please try again in a minute.")
            self._pending += 1
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.limit, thread_name_prefix="zoo-heavy", initializer=self._lower_priority)
        try:
            # in the request's context (Gradio's progress bar finds its event through context variables)
            return self._pool.submit(contextvars.copy_context().run, fn, *args).result()
        finally:
            with self._lock:
                self._pending -= 1


SLOTS = HeavySlots(CONCURRENCY, QUEUE_SIZE)


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


def _save_png(image: Image.Image | np.ndarray, folder: Path, name: str) -> str:
    img = image if isinstance(image, Image.Image) else Image.fromarray(image)
    return _write_private(folder / f"{name}.png", lambda f: img.save(f, format="PNG"))


def _save_json(data: Any, folder: Path, name: str) -> str:
    return _write_private(folder / f"{name}.json", lambda f: f.write(json.dumps(data, indent=2).encode()))


def _run_dir(kind: str, keep_seconds: float = RUN_KEEP_SECONDS) -> Path:
    """A fresh private folder for one request's files (``tempfile.mkdtemp``, 0700) with a ``results``
    subfolder (0700) for what goes into the request's zip; request folders older than ``keep_seconds``
    (left behind by a direct call or a crash) are removed."""
    base = _app_dir()
    now = time.time()
    for old in base.iterdir():
        try:
            if old.name != _EXAMPLES and now - old.stat().st_mtime > keep_seconds:
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        except OSError:
            pass
    if _GRADIO_DIR is not None and _GRADIO_DIR.is_dir():
        _sweep_gradio_dir(_GRADIO_DIR, CACHE_SECONDS)
    folder = Path(tempfile.mkdtemp(prefix=f"{kind}_", dir=base))
    (folder / "results").mkdir(mode=0o700)
    os.chmod(folder / "results", 0o700)  # whatever the umask
    return folder


def _results(run: Path) -> Path:
    """The subfolder of a request folder whose files (and only those) go into the request's zip."""
    return run / "results"


def _zip(run: Path, name: str) -> str:
    """``<name>.zip`` (0600) in the request folder, of every file in its ``results`` subfolder."""

    def write(f: IO[bytes]) -> None:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in sorted(_results(run).iterdir()):
                zf.write(p, arcname=p.name)

    return _write_private(run / f"{name}.zip", write)


def _tag(methods: Sequence["MethodStatus"]) -> str:
    """The methods of a request, for a download's name: ``blur-pixelate`` (or ``3_methods`` when long)."""
    tag = "-".join(s.name for s in methods)
    return tag if len(tag) <= 60 else f"{len(methods)}_methods"


def _hand_over(outputs: Any, cache_dir: str | os.PathLike) -> Any:
    """Copy every file of this app's folder named in a handler's ``outputs`` into Gradio's cache (same
    name and mode 0600, each in a fresh 0700 folder there, which Gradio's ``delete_cache`` removes), point
    the outputs at the copies and delete the request folders they came from: the app keeps nothing once
    Gradio holds what it serves."""
    base = _app_dir().resolve()
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
        if len(rel.parts) < 2 or rel.parts[0] == _EXAMPLES or not path.is_file():
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


# ============================================================================ controls
def _control_component(method: str, c) -> gr.components.Component:
    label = f"{method} {c.name}"
    info = c.help or None
    if c.kind in ("float", "int") and c.minimum is not None and c.maximum is not None:
        step = 1 if c.kind == "int" else (float(c.maximum) - float(c.minimum)) / 100.0
        return gr.Slider(minimum=c.minimum, maximum=c.maximum, value=c.default, step=step, label=label, info=info)
    if c.kind in ("float", "int"):
        return gr.Number(value=c.default, label=label, info=info, precision=0 if c.kind == "int" else None)
    return gr.Textbox(value=str(c.default), label=label, info=info)


def _control_inputs(catalog: dict[str, MethodStatus], only: Callable[[MethodStatus], bool] = lambda s: True):
    """Build the control widgets of every available method; returns (components, [(method, control name)])."""
    components, keys = [], []
    for s in catalog.values():
        if not (s.available and only(s)) or not s.controls:
            continue
        for c in s.controls:
            components.append(_control_component(s.name, c))
            keys.append((s.name, c.name))
    return components, keys


def _handler(fn: Callable, names: list[str], control_keys: list[tuple[str, str]], cache_dir: str | None = None, progress: bool = False) -> Callable:
    """``fn`` wrapped by the GPU decorator, with a signature naming every input (controls become
    ``<method>_<control>``), so that API users (gradio_client) can pass them by name. With ``cache_dir``
    (the Blocks' Gradio cache), the files ``fn`` returns are handed over to it and the app's own copies
    deleted (:func:`_hand_over`). With ``progress``, a last ``progress=gr.Progress()`` parameter makes
    Gradio pass its progress bar as ``fn``'s last argument."""
    on_gpu = GPU(fn)

    def wrapped(*args: Any) -> Any:
        out = on_gpu(*args)
        return out if cache_dir is None else _hand_over(out, cache_dir)

    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    params += [inspect.Parameter(f"{m}_{c}", inspect.Parameter.POSITIONAL_OR_KEYWORD) for m, c in control_keys]
    if progress:
        params.append(inspect.Parameter("progress", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=gr.Progress()))
    wrapped.__signature__ = inspect.Signature(params)
    return wrapped


def _controls_for(keys: list[tuple[str, str]], values: Sequence[Any], method: str) -> dict[str, Any]:
    return {cname: v for (m, cname), v in zip(keys, values) if m == method and v is not None}


def _changed_controls(method, controls: dict[str, Any]) -> dict[str, Any]:
    """The controls whose slider the user moved off the method's default: a slider always sends a value,
    and video keeps its own defaults for the ones left alone (zoo.video: no identity re-inversion)."""
    defaults = {c.name: c.default for c in getattr(method, "controls", ())}
    return {k: v for k, v in controls.items() if k not in defaults or v != defaults[k]}


# ============================================================================ shared bits
@dataclass
class FaceScores:
    judge: JudgeColumn | None
    faces: list
    original: list = field(default_factory=list)

    """The faces of the original photo and the judge's embeddings of them, to score results against."""

    @classmethod
    def of(cls, rgb: np.ndarray, judge_name: str | None) -> "FaceScores":
        faces = _detect(rgb)
        judge = judge_column(judge_name) if judge_name else None
        original: list = []
        if judge and faces:
            try:
                original = judge.embed(rgb, faces)
            except Exception as err:  # noqa: BLE001 - a judge failure costs the scores, not the results
                log.warning("judge %s failed on the original: %s", judge.name, err)
                judge = None
        return cls(judge, faces, original)

    def against(self, rgb: np.ndarray) -> list[float | None]:
        """The judge's score of every original face against the same place in ``rgb`` (None if it failed)."""
        if not self.judge or not self.faces:
            return []
        try:
            embs = self.judge.embed(rgb, self.faces)
        except Exception as err:  # noqa: BLE001
            log.warning("judge %s failed: %s", self.judge.name, err)
            return [None] * len(self.faces)
        return [self.judge.score(a, b) for a, b in zip(self.original, embs)]


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _scores_caption(scores: list[float | None], judge: JudgeColumn | None) -> str:
    if judge is None or not scores:
        return ""
    return f"{judge.name}: " + ", ".join(_fmt(v) for v in scores)


def _resolve(names: Sequence[str] | None, catalog: dict[str, MethodStatus], need_reversible: bool = False) -> list[MethodStatus]:
    if not names:
        raise user_error("Please choose at least one method.")
    chosen = []
    for n in names:
        s = catalog.get(n)
        if s is None:
            raise user_error(f"Unknown method {n!r}.")
        if not s.available:
            raise user_error(f"{n} is not available here: {s.reason}")
        if need_reversible and not s.reversible:
            raise user_error(f"{n} is not reversible.")
        chosen.append(s)
    return chosen


def _key_or_error(key: str | None, what: str = "key") -> str:
    key = key_text(key)
    if not key:
        raise user_error(f"Please enter a {what} (any text).")
    return key


def _report(result, extra: dict[str, Any]) -> dict[str, Any]:
    rep = result.report()
    rep.update(extra)
    return rep


# ============================================================================ the three tasks
def anonymize_photo(
    catalog: dict[str, MethodStatus],
    photo: str | None,
    methods: Sequence[str],
    key: str | None,
    judge_name: str | None,
    control_keys: list[tuple[str, str]],
    control_values: Sequence[Any],
):
    """Anonymize tab: -> (gallery items, table rows, zip path, status markdown).

    The inputs are checked first (answered at once, however busy the app is); the methods then run in one
    of :data:`SLOTS`. The results never include the original: it stays in the input component."""
    rgb = read_photo(photo)
    chosen = _resolve(methods, catalog)
    key = key_text(key) or None
    return SLOTS.run(_anonymize_rgb, rgb, chosen, key, judge_name, control_keys, control_values)


def _anonymize_rgb(
    rgb: np.ndarray, chosen: list[MethodStatus], key: str | None, judge_name: str | None, control_keys: list[tuple[str, str]], control_values: Sequence[Any]
):
    scores = FaceScores.of(rgb, judge_name)
    run = _run_dir("anonymize")
    out_dir = _results(run)  # what the zip holds: results only
    gallery, rows, notes = [], [], []
    for s in chosen:
        try:
            m = get_method(s)
            controls = _controls_for(control_keys, control_values, s.name)
            t0 = time.perf_counter()
            res = m.anonymize(rgb, key=key, **controls)
            seconds = time.perf_counter() - t0
        except Exception as err:  # noqa: BLE001 - one method failing must not sink the others
            _method_failed(s.name, err, notes)
            continue
        out = np.asarray(res.image.convert("RGB"))
        sims = scores.against(out)
        path = _save_png(res.image, out_dir, f"anonymized_{s.name}")
        caption = f"{s.name} · {seconds:.2f} s"
        if sims:
            caption += " · " + _scores_caption(sims, scores.judge)
        gallery.append((path, caption))
        judge_info = None
        if scores.judge:
            judge_info = {"name": scores.judge.name, "metric": scores.judge.metric, "threshold": scores.judge.threshold, "per_face": sims}
        _save_json(_report(res, {"app_seconds": round(seconds, 4), "identity_judge": judge_info}), out_dir, f"anonymized_{s.name}")
        for i, face in enumerate(res.faces or [None]):
            sim = sims[i] if i < len(sims) else None
            same = scores.judge.same(sim) if scores.judge else None
            rows.append(
                [
                    s.name,
                    i if face is not None else "-",
                    _fmt(sim),
                    "-" if same is None else ("yes" if same else "no"),
                    face.status if face is not None else "no face found",
                    round(seconds, 3),
                ]
            )
    if not gallery:
        shutil.rmtree(run, ignore_errors=True)
        raise user_error("Every chosen method failed: " + "; ".join(n.replace("**", "") for n in notes))
    status = _status_line(scores, key, notes, keyed=any(s.uses_key for s in chosen))
    return gallery, rows, _zip(run, f"anonymized_{_tag(chosen)}"), status


def _status_line(scores: FaceScores, key: str | None, notes: list[str], keyed: bool = True) -> str:
    parts = [f"{len(scores.faces)} face(s) found."]
    if key:
        parts.append(f"Key fingerprint `{Secret(key).fingerprint}` (the key itself is never stored or shown).")
    elif keyed:
        parts.append("No key given: a random key was used and forgotten, so these results cannot be recovered.")
    if scores.judge is None:
        parts.append("No identity judge available here, so no similarity is shown.")
    else:
        parts.append(f"Similarity: {scores.judge.column}, per face, against the original.")
    return " ".join(parts) + ("\n\n" + "\n\n".join(notes) if notes else "")


# ============================================================================ a short video (Anonymize tab)
_VIDEO_CONTAINERS = {"mov", "mp4", "matroska", "webm", "avi"}  # what PyAV names the containers of zoo.video.VIDEO_EXTS
_VIDEO_TYPES = "an MP4, MOV, MKV, WebM or AVI file"
VIDEO_TRACK_HEADERS = [
    "track",
    "first frame",
    "last frame",
    "frames detected",
    "frames bridged (detector gap)",
    "frames extended (before/after)",
    "frames anonymized",
    "frames blurred instead",
]


@dataclass
class VideoInfo:
    """What the check of an uploaded video found (see :func:`read_video_info`)."""

    name: str
    width: int
    height: int
    frames: int
    seconds: float


def _limits_text() -> str:
    return f"up to {MAX_VIDEO_SECONDS:g} s, {MAX_VIDEO_FRAMES} frames and {MAX_VIDEO_PIXELS / 1e6:.1f} MP per frame"


def read_video_info(path: str | None) -> VideoInfo:
    """Check an uploaded video before any work: a video container (probed from its content, whatever its
    name), a video stream, frames within :data:`MAX_VIDEO_PIXELS`, at most :data:`MAX_VIDEO_SECONDS` long
    and :data:`MAX_VIDEO_FRAMES` frames (packets counted without decoding, so this takes milliseconds).
    Raises a one-line :func:`user_error` saying what to do instead."""
    if not path:
        raise user_error("Please upload a short video first.")
    import av

    name = Path(path).name
    unreadable = f"Not a readable video: {name}; upload {_VIDEO_TYPES} ({_limits_text()})."
    try:
        container = av.open(str(path))
    except FileNotFoundError:
        raise user_error("The uploaded file is gone; please upload it again.") from None
    except Exception:  # noqa: BLE001 - PyAV's errors (InvalidDataError, ...) for anything that is not a media file
        raise user_error(unreadable) from None
    with container:
        kinds = set(container.format.name.split(","))
        if not kinds & _VIDEO_CONTAINERS or not container.streams.video:
            what = container.format.long_name or container.format.name
            raise user_error(f"Not a video: {name} holds {'no video stream' if kinds & _VIDEO_CONTAINERS else what}; upload {_VIDEO_TYPES}.")
        stream = container.streams.video[0]
        width, height = int(stream.codec_context.width or 0), int(stream.codec_context.height or 0)
        if width <= 0 or height <= 0:
            raise user_error(unreadable)
        if width * height > MAX_VIDEO_PIXELS:
            raise user_error(
                f"Video frames too large: {name} is {width}x{height}; frames up to {MAX_VIDEO_PIXELS / 1e6:.1f} MP are accepted here, so scale it down first."
            )
        too_long = f"Video too long: {name} {{}}; this app takes videos {_limits_text()}, so trim it first."
        seconds = container.duration / 1e6 if container.duration else 0.0
        if seconds > MAX_VIDEO_SECONDS + 0.05:  # a container's duration may round up a few milliseconds
            raise user_error(too_long.format(f"is {seconds:.1f} s long"))
        frames, end = 0, 0.0
        try:
            for packet in container.demux(stream):
                if not packet.size:  # the demuxer's final empty packet
                    continue
                frames += 1
                if frames > MAX_VIDEO_FRAMES:
                    raise user_error(too_long.format(f"has more than {MAX_VIDEO_FRAMES} frames"))
                if packet.pts is not None and packet.time_base is not None:
                    end = max(end, float((packet.pts + (packet.duration or 0)) * packet.time_base))
        except av.FFmpegError:
            raise user_error(unreadable) from None
        if frames == 0:
            raise user_error(f"Not a readable video: {name} has no frames; upload {_VIDEO_TYPES}.")
        start = float(stream.start_time * stream.time_base) if stream.start_time is not None and stream.time_base else 0.0
        seconds = seconds or max(0.0, end - start)
        if seconds > MAX_VIDEO_SECONDS + 0.05:
            raise user_error(too_long.format(f"is {seconds:.1f} s long"))
    return VideoInfo(name, width, height, frames, seconds)


def _check_video_upload(path: str | None) -> None:
    """Answer a bad video upload as soon as it is made, before any click."""
    if path:
        read_video_info(path)


def anonymize_clip(
    catalog: dict[str, MethodStatus],
    video: str | None,
    method: str | None,
    key: str | None,
    control_keys: list[tuple[str, str]],
    control_values: Sequence[Any],
    progress: Callable | None = None,
):
    """Anonymize tab, short video: -> (video path, track rows, report JSON, zip path, status markdown).

    One method per run. The upload is checked first (:func:`read_video_info`, answered at once however busy
    the app is); the method then runs in one of :data:`SLOTS` through :func:`zoo.video.anonymize_video`,
    faces tracked across frames (one key per track). ``progress``: Gradio's progress bar (or any
    ``progress((done, total), desc=...)`` callable). The results never include the original video."""
    info = read_video_info(video)
    if not method:
        raise user_error("Please choose the method for the video.")
    (s,) = _resolve([method], catalog)
    key = key_text(key) or None
    return SLOTS.run(_anonymize_clip, str(video), info, s, key, control_keys, control_values, progress)


_VIDEO_STAGES = {"detect": "1/2 finding and tracking faces", "anonymize": "2/2 anonymizing and encoding"}


def _anonymize_clip(
    video: str, info: VideoInfo, s: MethodStatus, key: str | None, control_keys: list[tuple[str, str]], control_values: Sequence[Any], progress: Callable | None
):
    from zoo.video import anonymize_video

    def step(stage: str, done: int, total: int | None) -> None:  # zoo.video's progress(stage, done, total)
        if progress is not None:
            progress((done, total or info.frames), desc=_VIDEO_STAGES.get(stage, stage), unit="frames")

    run = _run_dir("video")
    out_dir = _results(run)
    out = out_dir / f"anonymized_{s.name}.mp4"
    t0 = time.perf_counter()
    try:
        m = get_method(s)
        res = anonymize_video(m, video, out, key=key, progress=step, **_changed_controls(m, _controls_for(control_keys, control_values, s.name)))
    except Exception as err:  # noqa: BLE001 - shown as one line; an internal failure is logged with its traceback
        shutil.rmtree(run, ignore_errors=True)
        notes: list[str] = []
        _method_failed(s.name, err, notes)
        message = notes[0].replace("**", "").replace(str(video), info.name).replace(str(run), "")
        raise gr.Error(message + " (nothing was written)", print_exception=False) from None
    seconds = time.perf_counter() - t0
    os.chmod(out, 0o600)  # written by FFmpeg with the umask's mode (inside the 0700 request folder)
    report = res.report()
    report.update({"input": info.name, "output": out.name, "app_seconds": round(seconds, 3)})  # no server paths
    _save_json(report, out_dir, f"anonymized_{s.name}")
    status_of: dict[int, list[int]] = {}
    for row in res.frame_faces:
        for f in row:
            counts = status_of.setdefault(f["track"], [0, 0])
            counts[f["status"] != "processed"] += 1
    rows = [[t["track"], t["first_frame"], t["last_frame"], t["detected"], t["gap"], t["extended"], *status_of.get(t["track"], [0, 0])] for t in res.tracks]
    shown = {k: v for k, v in report.items() if k != "frame_faces"}  # the per-frame faces are in the download
    parts = [
        f"**{s.name}**: {res.frames} frames ({info.width}x{info.height}, {res.fps:g} fps), {len(res.tracks)} face track(s), "
        f"{report['faces_processed']} face(s) over all frames, {res.fallbacks} blurred instead; {seconds:.1f} s."
    ]
    if key and s.uses_key:
        parts.append(f"Key fingerprint `{Secret(key).fingerprint}` (the key itself is never stored or shown); each track keeps one key.")
    elif s.uses_key:
        parts.append("No key given: a random key was used and forgotten, so this video cannot be recovered.")
    parts.append(f"Audio: {res.audio}.")
    return str(out), rows, shown, _zip(run, f"anonymized_video_{s.name}"), " ".join(parts)


def recover_roundtrip(
    catalog: dict[str, MethodStatus],
    photo: str | None,
    methods: Sequence[str],
    key: str | None,
    wrong_key: str | None,
    judge_name: str | None,
    control_keys: list[tuple[str, str]],
    control_values: Sequence[Any],
):
    """Recover tab: anonymize with ``key``; recover with ``key`` and with ``wrong_key``."""
    rgb = read_photo(photo)
    chosen = _resolve(methods, catalog, need_reversible=True)
    key = key_text(key)
    random_key = not key
    key = key or new_secret()  # no key typed: a fresh one for this run only (shown by its fingerprint)
    wrong_key = key_text(wrong_key) or key + " (wrong)"
    if wrong_key == key:
        raise user_error("The wrong key must differ from the key; leave it empty to use the key with ' (wrong)' appended.")
    return SLOTS.run(_roundtrip_rgb, rgb, chosen, key, wrong_key, random_key, judge_name, control_keys, control_values)


def _roundtrip_rgb(
    rgb: np.ndarray,
    chosen: list[MethodStatus],
    key: str,
    wrong_key: str,
    random_key: bool,
    judge_name: str | None,
    control_keys: list[tuple[str, str]],
    control_values: Sequence[Any],
):
    scores = FaceScores.of(rgb, judge_name)
    run = _run_dir("recover")
    out_dir = _results(run)
    gallery, rows, notes = [], [], []
    for s in chosen:
        try:
            m = get_method(s)
            controls = _controls_for(control_keys, control_values, s.name)
            t0 = time.perf_counter()
            anon = m.anonymize(rgb, key=key, **controls)
            anon_png = _save_png(anon.image, out_dir, f"anonymized_{s.name}")
            # recover from the saved, lossless file, as a user would
            right = m.recover(anon_png, key=key, **controls)
            wrong = m.recover(anon_png, key=wrong_key, **controls)
            seconds = time.perf_counter() - t0
        except Exception as err:  # noqa: BLE001
            _method_failed(s.name, err, notes)
            continue
        row_scores = []
        for label, res in (("anonymized", anon), ("recovered, right key", right), ("recovered, wrong key", wrong)):
            sims = scores.against(np.asarray(res.image.convert("RGB")))
            row_scores.append(sims)
            path = anon_png if label == "anonymized" else _save_png(res.image, out_dir, f"recovered_{label.split(', ')[-1].replace(' ', '_')}_{s.name}")
            cap = f"{s.name} · {label}" + (" · " + _scores_caption(sims, scores.judge) if sims else "")
            gallery.append((path, cap))
        reports = {"anonymized": anon.report(), "recovered_right_key": right.report(), "recovered_wrong_key": wrong.report()}
        reports["wrong_key_fingerprint"] = Secret(wrong_key).fingerprint
        _save_json(reports, out_dir, f"report_{s.name}")
        n = max((len(x) for x in row_scores), default=0)
        for i in range(max(n, 1)):
            pick = [(x[i] if i < len(x) else None) for x in row_scores]
            rows.append([s.name, i if n else "-", *map(_fmt, pick), round(seconds, 3)])
    if not gallery:
        shutil.rmtree(run, ignore_errors=True)
        raise user_error("Every chosen method failed: " + "; ".join(n.replace("**", "") for n in notes))
    status = (
        f"Key `{Secret(key).fingerprint}`{' (a fresh random key for this run)' if random_key else ''}, "
        f"wrong key `{Secret(wrong_key).fingerprint}`. "
        "Recovery reads the anonymized PNG back from disk, as it would be after a download."
    )
    if notes:
        status += "\n\n" + "\n\n".join(notes)
    return gallery, rows, _zip(run, f"recovery_{_tag(chosen)}"), status


def recover_file(
    catalog: dict[str, MethodStatus], photo: str | None, method: str | None, key: str | None, control_keys: list[tuple[str, str]], control_values: Sequence[Any]
):
    """Recover an anonymized image saved earlier: -> (image path, report JSON, zip path)."""
    rgb = read_photo(photo)
    if not method:
        raise user_error("Please choose the method that anonymized the image.")
    (s,) = _resolve([method], catalog, need_reversible=True)
    key = _key_or_error(key, "key used to anonymize")

    def recover() -> Any:
        return get_method(s).recover(rgb, key=key, **_controls_for(control_keys, control_values, s.name))

    try:
        res = SLOTS.run(recover)
    except MethodFailed as err:
        raise user_error(str(err)) from None
    except ValueError as err:
        raise user_error(_one_line(str(err))) from None
    run = _run_dir("recover_file")
    path = _save_png(res.image, _results(run), f"recovered_{s.name}")
    report = res.report()
    _save_json(report, _results(run), f"recovered_{s.name}")
    return path, report, _zip(run, f"recovered_{s.name}")


def diversity_grid(
    catalog: dict[str, MethodStatus],
    photo: str | None,
    methods: Sequence[str],
    n_keys: int,
    base_key: str | None,
    judge_name: str | None,
    control_keys: list[tuple[str, str]],
    control_values: Sequence[Any],
):
    """Diversity tab: the photo with N keys per method (one gallery row per method) and the mean
    pairwise identity similarity of the largest face across the N results."""
    rgb = read_photo(photo)
    chosen = _resolve(methods, catalog)
    n = int(n_keys or 4)
    if not 2 <= n <= MAX_KEYS:
        raise user_error(f"Choose between 2 and {MAX_KEYS} keys.")
    base_key = key_text(base_key)
    keys = [f"{base_key}#{i + 1}" if base_key else new_secret() for i in range(n)]
    return SLOTS.run(_diversity_rgb, rgb, chosen, keys, judge_name, control_keys, control_values)


def _diversity_rgb(
    rgb: np.ndarray, chosen: list[MethodStatus], keys: list[str], judge_name: str | None, control_keys: list[tuple[str, str]], control_values: Sequence[Any]
):
    n = len(keys)
    scores = FaceScores.of(rgb, judge_name)
    main = None
    if scores.faces:
        main = max(range(len(scores.faces)), key=lambda i: scores.faces[i].width * scores.faces[i].height)
    judge = scores.judge
    run = _run_dir("diversity")
    out_dir = _results(run)
    gallery, rows, notes = [], [], []
    for s in chosen:
        try:
            m = get_method(s)
            controls = _controls_for(control_keys, control_values, s.name)
            t0 = time.perf_counter()
            with m.run_scope():  # one request: the N keys share each face's GAN inversion (dropped after)
                results = [m.anonymize(rgb, key=k, **controls) for k in keys]
            seconds = time.perf_counter() - t0
        except Exception as err:  # noqa: BLE001
            _method_failed(s.name, err, notes)
            continue
        embs, to_orig = [], []
        for j, res in enumerate(results):
            out = np.asarray(res.image.convert("RGB"))
            if judge is not None and main is not None:
                e = judge.embed(out, [scores.faces[main]])[0]
                embs.append(e)
                to_orig.append(judge.score(scores.original[main], e))
            cap = f"{s.name} · key {res.key_fingerprint or j + 1}"
            if to_orig and to_orig[-1] is not None:
                cap += f" · {judge.name} vs original {to_orig[-1]:.3f}"
            gallery.append((_save_png(res.image, out_dir, f"anonymized_{s.name}_key{j + 1}"), cap))
        pairs = [judge.score(a, b) for a, b in itertools.combinations(embs, 2)] if judge is not None else []
        pairs = [p for p in pairs if p is not None]
        mean_pair = float(np.mean(pairs)) if pairs else None
        valid = [v for v in to_orig if v is not None]
        mean_orig = float(np.mean(valid)) if valid else None
        note = "" if s.uses_key else "ignores the key: every key gives the same result"
        rows.append([s.name, n, _fmt(mean_pair), _fmt(mean_orig), round(seconds / n, 3), note])
        _save_json(
            {
                "method": s.name,
                "results": [r.report() for r in results],
                "face_index": main,
                "identity_judge": None if judge is None else {"name": judge.name, "metric": judge.metric, "threshold": judge.threshold},
                "mean_pairwise": mean_pair,
                "mean_to_original": mean_orig,
            },
            out_dir,
            f"diversity_{s.name}",
        )
    if not gallery:
        shutil.rmtree(run, ignore_errors=True)
        raise user_error("Every chosen method failed: " + "; ".join(x.replace("**", "") for x in notes))
    status = (
        f"{n} keys per method; each row of the grid is one method. Similarities are for face #{main} (the largest)."
        if main is not None
        else f"{n} keys per method; no face was found, so no similarity is shown."
    )
    if notes:
        status += "\n\n" + "\n\n".join(notes)
    return gallery, rows, _zip(run, f"diversity_{_tag(chosen)}"), status


# ============================================================================ the app
def _unavailable_md(catalog: dict[str, MethodStatus]) -> str:
    off = [s for s in catalog.values() if not s.available]
    if not off:
        return ""
    lines = ["**Not available on this server:**"]
    lines += [f"- ~~{s.name}~~: {s.reason}" for s in off]
    return "\n".join(lines)


def _weights_md(catalog: dict[str, MethodStatus]) -> str:
    """Which weights each available neural method runs on, with its stored evaluation."""
    on = [s for s in catalog.values() if s.available and s.evaluation]
    if not on:
        return ""
    lines = ["**Weights in use** (rates: fraction the dlib judge calls the same person):"]
    lines += [f"- **{s.name}**: {s.reason}. {s.evaluation}" for s in on]
    return "\n".join(lines)


def tab_problem(catalog: dict[str, MethodStatus], tab: str) -> str | None:
    """Why a tab cannot work on this server (shown on the tab before any click, its buttons disabled), or None."""
    on = [s for s in catalog.values() if s.available]
    if not on:
        return "No method can run on this server (none has its weights installed), so there is nothing to run here."
    if tab == "recover" and not any(s.reversible for s in on):
        return (
            "No reversible method is installed on this server, so there is nothing to recover with. "
            "The methods here (" + ", ".join(s.name for s in on) + ") cannot undo what they did."
        )
    return None


def _method_picker(catalog: dict[str, MethodStatus], label: str, only: Callable[[MethodStatus], bool] = lambda s: True, default: int = 2):
    on = [s.name for s in catalog.values() if s.available and only(s)]
    off = [s.name for s in catalog.values() if not s.available and only(s)]
    picker = gr.CheckboxGroup(choices=on, value=on[:default], label=label, info=None if on else "no method can run here")
    if off:
        gr.CheckboxGroup(choices=off, value=[], label="Not installed (disabled)", interactive=False)
    return picker


def _gallery(label: str, columns: int, elem_id: str | None = None) -> gr.Gallery:
    return gr.Gallery(label=label, columns=columns, height="auto", object_fit="contain", format="png", interactive=False, elem_id=elem_id)


def _examples(examples: list[str], target: gr.components.Component) -> None:
    if examples:
        gr.Examples(examples=[[p] for p in examples], inputs=[target], label="Examples")


def _check_upload(path: str | None) -> None:
    """Answer a bad upload as soon as it is made, before any click (never limited by the queue)."""
    if path:
        read_photo(path)


def _check_on_arrival(component: gr.components.Component, check: Callable[[Any], Any]) -> None:
    """Run ``check`` on every new upload of ``component``, before any click (not in the API).

    The event goes through Gradio's queue but is never limited by it (``concurrency_limit=None``), so it
    is answered at once however busy the app is. Not ``queue=False``: Gradio's page (6.x) shows no message
    for an error of an unqueued event (its toast is created with ``visible`` unset, i.e. hidden)."""
    component.upload(check, component, None, concurrency_limit=None, show_progress="hidden", api_visibility="private")


def _photo_checked(**kwargs: Any) -> gr.Image:
    """A :func:`photo_input` whose uploads are checked as they arrive (:func:`_check_on_arrival`)."""
    photo = photo_input(**kwargs)
    _check_on_arrival(photo, _check_upload)
    return photo


def _run_button(label: str, problem: str | None, elem_id: str | None = None) -> gr.Button:
    if problem:
        gr.Markdown(f"**This tab cannot run here.** {problem}")
    return gr.Button(label, variant="primary", interactive=problem is None, elem_id=elem_id)


@dataclass
class _Tab:
    """What one tab's event needs: its inputs, outputs, the controls' (method, name) pairs."""

    inputs: list
    outputs: list
    control_keys: list
    button: gr.Button


def _anonymize_tab(catalog: dict[str, MethodStatus], examples: list[str], judges: list) -> tuple[_Tab, _Tab]:
    """Anonymize: one photo through several methods; below it, a short video through one method (its own
    input, method and key; the method controls are shared)."""
    with gr.Row():
        with gr.Column(scale=1):
            photo = _photo_checked(label="Photo", elem_id="anon_photo")
            _examples(examples, photo)
            methods = _method_picker(catalog, "Methods")
            key = gr.Textbox(
                value="",
                label="Key",
                type="password",
                elem_id="anon_key",
                info="any text; keep it secret. Empty: a random key is used and forgotten (no recovery)",
            )
            judge = gr.Dropdown(choices=judges, value=JUDGES[0], label="Identity judge")
            with gr.Accordion("Method controls", open=False):
                ctrls, keys = _control_inputs(catalog)
                if not ctrls:
                    gr.Markdown("The available methods have no controls besides the key.")
            problem = tab_problem(catalog, "anonymize")
            run = _run_button("Anonymize", problem, elem_id="anon_run")
        with gr.Column(scale=2):
            gallery = _gallery("Results", columns=3, elem_id="anon_gallery")
            status = gr.Markdown(label="Status", elem_id="anon_status")
            table = gr.Dataframe(
                elem_id="anon_table",
                label="Per face",
                interactive=False,
                headers=["method", "face", "identity score vs original", "same person?", "status", "seconds"],
            )
            zipped = gr.File(label="Download (PNGs and JSON reports)", interactive=False)
    photo_tab = _Tab([photo, methods, key, judge, *ctrls], [gallery, table, zipped, status], keys, run)

    on = [s.name for s in catalog.values() if s.available]
    gr.Markdown(
        f"### A short video\nA{_VIDEO_TYPES[1:]}, {_limits_text()}. One method per video run; every "
        "face is tracked across the frames and keeps one key (one fake identity) for the whole clip. "
        "The method controls above apply. Audio is kept."
    )
    with gr.Row():
        with gr.Column(scale=1):
            video = gr.Video(label="Video", sources=["upload"], format=None, elem_id="anon_video")
            _check_on_arrival(video, _check_video_upload)
            v_method = gr.Dropdown(
                choices=on, value=on[0] if on else None, label="Method for the video", info="one method per video run", elem_id="anon_video_method"
            )
            v_key = gr.Textbox(
                value="", label="Key for the video", type="password", elem_id="anon_video_key", info="empty: a random key is used and forgotten (no recovery)"
            )
            v_run = _run_button("Anonymize the video", None if problem is None else "See above.", elem_id="anon_video_run")
        with gr.Column(scale=2):
            v_out = gr.Video(label="Anonymized video", interactive=False, elem_id="anon_video_out")
            v_status = gr.Markdown(label="Video status", elem_id="anon_video_status")
            v_table = gr.Dataframe(label="Per face track", headers=VIDEO_TRACK_HEADERS, interactive=False, elem_id="anon_video_tracks")
            v_report = gr.JSON(label="Video report (per-frame faces in the download)")
            v_zip = gr.File(label="Download (video and JSON report)", interactive=False)
    video_tab = _Tab([video, v_method, v_key, *ctrls], [v_out, v_table, v_report, v_zip, v_status], keys, v_run)
    return photo_tab, video_tab


def _recover_tab(catalog: dict[str, MethodStatus], examples: list[str], judges: list) -> tuple[_Tab, _Tab]:
    """Recover: anonymize-then-recover (right and wrong key), and recovery of a saved anonymized image."""
    problem = tab_problem(catalog, "recover")
    reversible = [s.name for s in catalog.values() if s.available and s.reversible]
    gr.Markdown("### Anonymize, then recover with the right key and a wrong one")
    with gr.Row():
        with gr.Column(scale=1):
            photo = _photo_checked(label="Photo", elem_id="rec_photo")
            _examples(examples, photo)
            methods = _method_picker(catalog, "Reversible methods", only=lambda s: s.reversible, default=3)
            key = gr.Textbox(value="", label="Key", type="password", info="empty: a fresh random key for this run only; type your own to reuse it")
            wrong = gr.Textbox(value="", label="Wrong key", info="empty = the key with ' (wrong)' appended", type="password")
            judge = gr.Dropdown(choices=judges, value=JUDGES[0], label="Identity judge")
            with gr.Accordion("Method controls", open=False):
                ctrls, keys = _control_inputs(catalog, only=lambda s: s.reversible)
            run = _run_button("Anonymize and recover", problem)
        with gr.Column(scale=2):
            gallery = _gallery("Anonymized, recovered with the right key, recovered with a wrong key", columns=3)
            status = gr.Markdown(label="Status")
            table = gr.Dataframe(
                label="Identity score per face",
                interactive=False,
                headers=["method", "face", "anonymized vs original", "right key vs original", "wrong key vs original", "seconds"],
            )
            zipped = gr.File(label="Download (PNGs and JSON reports)", interactive=False)
    roundtrip = _Tab([photo, methods, key, wrong, judge, *ctrls], [gallery, table, zipped, status], keys, run)

    gr.Markdown("### Recover an anonymized image you saved (PNG; lossy formats lose what recovery needs)")
    with gr.Row():
        with gr.Column(scale=1):
            f_photo = _photo_checked(label="Anonymized image", sources=["upload", "clipboard"], elem_id="file_photo")
            f_method = gr.Dropdown(choices=reversible, value=reversible[0] if reversible else None, label="Method it was anonymized with")
            f_key = gr.Textbox(value="", label="Key", type="password")
            f_run = _run_button("Recover", None if problem is None else "See above.")
        with gr.Column(scale=2):
            out = gr.Image(label="Recovered", type="filepath", format="png", interactive=False)
            report = gr.JSON(label="Report")
            f_zip = gr.File(label="Download (PNG and JSON report)", interactive=False)
    from_file = _Tab([f_photo, f_method, f_key, *ctrls], [out, report, f_zip], keys, f_run)
    return roundtrip, from_file


def _diversity_tab(catalog: dict[str, MethodStatus], examples: list[str], judges: list) -> _Tab:
    """Diversity: one face, N keys, one gallery row per method."""
    with gr.Row():
        with gr.Column(scale=1):
            photo = _photo_checked(label="Photo (the largest face is measured)", elem_id="div_photo")
            _examples(examples, photo)
            methods = _method_picker(catalog, "Methods")
            n_keys = gr.Slider(minimum=2, maximum=MAX_KEYS, value=4, step=1, label="Number of keys")
            base_key = gr.Textbox(value="", label="Base key", type="password", info="empty = fresh random keys; else keys are '<base>#1', '<base>#2', ...")
            judge = gr.Dropdown(choices=judges, value=JUDGES[0], label="Identity judge")
            with gr.Accordion("Method controls", open=False):
                ctrls, keys = _control_inputs(catalog)
            run = _run_button("Make the grid", tab_problem(catalog, "diversity"))
        with gr.Column(scale=2):
            gallery = _gallery("One row per method, one column per key", columns=4)
            status = gr.Markdown(label="Status")
            table = gr.Dataframe(
                label="Diversity",
                interactive=False,
                headers=["method", "keys", "mean pairwise identity score", "mean identity score vs original", "seconds per key", "note"],
            )
            zipped = gr.File(label="Download (PNGs and JSON reports)", interactive=False)
    # one gallery row per method: as many columns as keys
    n_keys.change(lambda n: gr.Gallery(columns=int(n)), n_keys, gallery, queue=False, api_visibility="private")
    return _Tab([photo, methods, n_keys, base_key, judge, *ctrls], [gallery, table, zipped, status], keys, run)


def _wire(tab: _Tab, task: Callable, names: list[str], api_name: str, catalog: dict[str, MethodStatus], cache: str, progress: bool = False) -> None:
    """``tab.button`` runs ``task(catalog, *named inputs, control_keys, control values)`` (with ``progress``:
    and Gradio's progress bar as a last argument).

    Not limited by Gradio's queue (``concurrency_limit=None``): the task checks its inputs at once and waits
    for one of :data:`SLOTS` only for the heavy part, so bad requests are never stuck behind good ones."""
    n = len(names)

    def run(*args):
        if progress:
            *args, bar = args
            return task(catalog, *args[:n], tab.control_keys, tuple(args[n:]), bar)
        return task(catalog, *args[:n], tab.control_keys, args[n:])

    handler = _handler(run, names, tab.control_keys, cache, progress=progress)
    tab.button.click(handler, tab.inputs, tab.outputs, api_name=api_name, concurrency_limit=None)


def _header(catalog: dict[str, MethodStatus]) -> None:
    gr.Markdown(
        f"# {TITLE}\nFace de-identification methods side by side: every face in the photo is detected, aligned, "
        "changed and pasted back; everything else stays as it was. The identity similarity is measured by a face "
        "recognizer that none of the methods uses. Uploads and results are kept on this server only while you "
        f"use them (about {max(1, CACHE_SECONDS // 60)} minutes), readable by this app alone; downloads never "
        "contain your original photo."
    )
    for text in (_weights_md(catalog), _unavailable_md(catalog)):
        if text:
            gr.Markdown(text)


def build_app(catalog: dict[str, MethodStatus] | None = None) -> gr.Blocks:
    """The Gradio Blocks app. ``catalog`` defaults to :func:`method_catalog`. Gradio's uploads and cache go
    to this process's private folder (:func:`gradio_temp_dir`)."""
    catalog = method_catalog() if catalog is None else catalog
    gradio_temp_dir()
    examples = example_photos()
    judges = [(JUDGE_LABELS[j], j) for j in JUDGES]
    sweep = max(60, CACHE_SECONDS // 3)
    with gr.Blocks(title=TITLE, analytics_enabled=False, delete_cache=(sweep, CACHE_SECONDS)) as demo:
        _header(catalog)
        cache = demo.GRADIO_CACHE
        with gr.Tab("Anonymize", id="anonymize"):
            photo_tab, video_tab = _anonymize_tab(catalog, examples, judges)
            _wire(photo_tab, anonymize_photo, ["photo", "methods", "key", "judge"], "anonymize", catalog, cache)
            _wire(video_tab, anonymize_clip, ["video", "method", "key"], "anonymize_video", catalog, cache, progress=True)
        with gr.Tab("Recover", id="recover"):
            roundtrip, from_file = _recover_tab(catalog, examples, judges)
            _wire(roundtrip, recover_roundtrip, ["photo", "methods", "key", "wrong_key", "judge"], "recover_roundtrip", catalog, cache)
            _wire(from_file, recover_file, ["photo", "method", "key"], "recover_file", catalog, cache)
        with gr.Tab("Diversity", id="diversity"):
            _wire(_diversity_tab(catalog, examples, judges), diversity_grid, ["photo", "methods", "n_keys", "base_key", "judge"], "diversity", catalog, cache)
    for block in demo.blocks.values():
        if isinstance(block, gr.components.Component) and getattr(block, "interactive", None) is not False:
            _gradio_checks_as_user_errors(block)
    _sweep_gradio_dir(gradio_temp_dir(), CACHE_SECONDS)  # the examples Gradio just copied: 0600
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=QUEUE_SIZE)
    return demo


def launch(demo: gr.Blocks | None = None, *, server_port: int | None = None, server_name: str | None = None, **kwargs: Any):
    """Launch with the app's limits (upload size); port from ``server_port``, ``PORT`` or ``GRADIO_SERVER_PORT``."""
    demo = demo or build_app()
    port = server_port or int(os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT") or 7860)
    kwargs.setdefault("max_file_size", MAX_UPLOAD)
    kwargs.setdefault("show_error", False)  # gr.Error messages are shown; other exceptions are not dumped
    # threads for every request that may be waiting for a slot, plus room for quick answers
    kwargs.setdefault("max_threads", CONCURRENCY + QUEUE_SIZE + 16)
    # the example photos' folders only: request files reach users through Gradio's cache (see _hand_over)
    kwargs.setdefault("allowed_paths", sorted({str(Path(p).parent) for p in example_photos()}))
    return demo.launch(server_port=port, server_name=server_name or os.environ.get("GRADIO_SERVER_NAME"), **kwargs)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    launch()
