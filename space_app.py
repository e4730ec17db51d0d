"""The zoo's Gradio app (a Hugging Face Space): compare face de-identification methods side by side.

    python space_app.py                  # http://127.0.0.1:7860 (PORT / GRADIO_SERVER_PORT to change)

This file starts the app; the app itself is the package ``app/`` (its docstring describes the tabs, how
requests are limited, where files go and what is logged).

Environment
* ``ZOO_METHODS``: comma-separated methods to offer (default: every registered method).
* ``ZOO_CHECKPOINTS``: a folder with ``<method>/`` checkpoints (``save_pretrained`` layout), used
  instead of the Hub cache: ``zoo.load(name, local_dir=ZOO_CHECKPOINTS/name)``.
* ``ZOO_MAX_VIDEO_SECONDS`` (default 10), ``ZOO_MAX_VIDEO_FRAMES`` (default 300), ``ZOO_MAX_VIDEO_PIXELS``
  (per frame, default 1920x1080): the longest and largest video the Anonymize tab takes.
* ``ZOO_APP_MAX_PIXELS`` (default 16 MP), ``ZOO_MAX_UPLOAD`` (default ``20mb``), ``ZOO_CONCURRENCY``
  (default 2 jobs at a time), ``ZOO_QUEUE_SIZE`` (default 32), ``ZOO_CACHE_SECONDS`` (default 900),
  ``PORT`` / ``GRADIO_SERVER_PORT``, ``GRADIO_SERVER_NAME``.
* On a GPU Space the ``spaces`` package's ``GPU`` decorator wraps the heavy handlers (``ZOO_GPU_SECONDS``,
  default 120, is its time budget per call); without it they run as they are (CUDA when available).
"""

from __future__ import annotations

import logging

from app.common import SLOTS, key_or_error
from app.files import app_dir, gradio_temp_dir
from app.main import build_app, launch
from app.methods import method_catalog
from app.photos import example_photos

__all__ = ["SLOTS", "app_dir", "build_app", "example_photos", "gradio_temp_dir", "key_or_error", "launch", "method_catalog"]

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    launch()
