"""Photo inputs: the upload component that hands the file over untouched, reading an upload (or refusing it in
one line) and the example photos."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np

from app.common import log, user_error
from app.files import EXAMPLES, app_dir, save_png
from zoo import imageio

MAX_PIXELS = int(os.environ.get("ZOO_APP_MAX_PIXELS", 16_000_000))


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
        except Exception as err:  # noqa: BLE001 - Gradio's decoder raises many types; all mean: not an image
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
    except Exception as err:  # noqa: BLE001 - any other decoding failure is one line to the user
        raise user_error(f"Cannot read this file as an image ({type(err).__name__}).") from None
    return rgb


def check_upload(path: str | None) -> None:
    """Answer a bad upload as soon as it is made, before any click (never limited by the queue)."""
    if path:
        read_photo(path)


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

        folder = app_dir() / EXAMPLES
        folder.mkdir(mode=0o700, exist_ok=True)
        astro = folder / "astronaut.png"
        if not astro.is_file():
            save_png(skdata.astronaut(), folder, "astronaut")
        found.append(str(astro))
    except Exception as err:  # noqa: BLE001 - the example photo is optional
        log.info("no scikit-image example: %s", err)
    return found
