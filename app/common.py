"""Settings and helpers that every part of the app shares: the logger, the request limits, the GPU decorator,
user errors and the slots for heavy jobs (:data:`SLOTS`)."""

from __future__ import annotations

import contextvars
import importlib.util
import logging
import os
import threading
from typing import Any, Callable

import gradio as gr

from zoo.keys import key_text

log = logging.getLogger("space_app")  # every module of the app logs as "space_app"

MAX_UPLOAD = os.environ.get("ZOO_MAX_UPLOAD", "20mb")
CONCURRENCY = int(os.environ.get("ZOO_CONCURRENCY", 2))
QUEUE_SIZE = int(os.environ.get("ZOO_QUEUE_SIZE", 32))
CACHE_SECONDS = int(os.environ.get("ZOO_CACHE_SECONDS", 900))  # uploads and served results live this long


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


def one_line(text: str, limit: int = 160) -> str:
    """``text`` on one line (whitespace runs made one space), cut to ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def user_error(message: str) -> gr.Error:
    """A ``gr.Error`` for a user's mistake: shown to the user, logged as one line without a traceback
    (Gradio prints a full traceback for every ``gr.Error`` unless told not to)."""
    log.info("user error: %s", one_line(message, 300))
    return gr.Error(message, print_exception=False)


def key_or_error(key: str | None, what: str = "key") -> str:
    """The key as typed (:func:`zoo.keys.key_text`), or a :func:`user_error` asking for the ``what``."""
    key = key_text(key)
    if not key:
        raise user_error(f"Please enter a {what} (any text).")
    return key


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
