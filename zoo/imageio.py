"""Image conversions and file I/O at the zoo's edges.

Public APIs take PIL images or uint8 HxWx3 arrays; tensors inside are float NCHW in [-1, 1].

* :func:`to_tensor` / :func:`from_tensor`: uint8 NHWC <-> float NCHW in [-1, 1].
* :func:`load_image`: path / bytes / PIL / array / DeidResult -> (uint8 RGB, alpha | None), with EXIF
  orientation, mode conversion, 16-bit scaling, and a size limit checked before decoding.
* :func:`save_image_atomic` / :func:`write_text_atomic`: nothing half-written, ever.
"""

from __future__ import annotations

import io
import os
import secrets
import warnings
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, UnidentifiedImageError

__all__ = ["to_tensor", "from_tensor"]


def to_tensor(images: np.ndarray, size: int | None = None) -> torch.Tensor:
    """uint8 [N,H,W,3] (or [H,W,3]) -> float32 [N,3,H,W] in [-1,1], optionally resized to ``size``."""
    arr = np.asarray(images)
    if arr.ndim == 3:
        arr = arr[None]
    if arr.dtype != np.uint8 or arr.ndim != 4 or arr.shape[-1] != 3:
        raise ValueError(f"expected uint8 [N,H,W,3], got {arr.dtype} {arr.shape}")
    x = torch.from_numpy(np.ascontiguousarray(arr)).permute(0, 3, 1, 2).float() / 127.5 - 1.0
    if size is not None and x.shape[-2:] != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return x


def from_tensor(x: torch.Tensor) -> np.ndarray:
    """float [N,3,H,W] in [-1,1] -> uint8 [N,H,W,3] (clamped, rounded)."""
    x = x.detach().float().clamp(-1, 1).add(1).mul(127.5).round().to(torch.uint8)
    return x.permute(0, 2, 3, 1).cpu().numpy()


# ====================================================================== loading, resizing, saving
# Everything below works on uint8 arrays (RGB [H,W,3], alpha [H,W]) and PIL images.


__all__ += [
    "InvalidImageError",
    "ImageTooLargeError",
    "MAX_PIXELS",
    "MIN_SIDE",
    "load_image",
    "resize_square",
    "resize_to",
    "to_pil",
    "save_image_atomic",
    "write_text_atomic",
]

#: default largest accepted image, in pixels (width * height); override with ``ZOO_MAX_PIXELS`` or ``max_pixels=``
MAX_PIXELS = int(os.environ.get("ZOO_MAX_PIXELS", 40_000_000))
#: default smallest accepted side, in pixels (a smaller image cannot hold a face)
MIN_SIDE = 8

_EXIF_ORIENTATION = 0x0112
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


class InvalidImageError(ValueError):
    """The input is not a usable image (not an image file, truncated/corrupt data, too small)."""


class ImageTooLargeError(ValueError):
    """The image has more pixels than the configured limit (checked from the header, before decoding)."""


def _check_size(width: int, height: int, max_pixels: int | None, min_side: int | None, what: str = "image") -> None:
    max_pixels = MAX_PIXELS if max_pixels is None else int(max_pixels)
    min_side = MIN_SIDE if min_side is None else int(min_side)
    if width * height > max_pixels:
        raise ImageTooLargeError(
            f"{what} is {width}x{height} = {width * height / 1e6:.1f} megapixels, above the limit of "
            f"{max_pixels / 1e6:.1f} megapixels (raise it with max_pixels=... or ZOO_MAX_PIXELS)"
        )
    if min(width, height) < min_side:
        raise InvalidImageError(f"{what} is only {width}x{height} pixels; at least {min_side}x{min_side} is needed")


def _to_uint8(arr: np.ndarray) -> np.ndarray:
    """Any numeric array -> uint8. uint16 (and int arrays above 255) are scaled by 255/65535; floats are
    read as [0, 1] when their maximum is <= 1, else as [0, 255]; out-of-range values are clipped."""
    if arr.dtype == np.uint8:
        return arr
    if arr.dtype == np.bool_:
        return arr.astype(np.uint8) * 255
    if arr.dtype == np.uint16:
        return ((arr.astype(np.float32) * (255.0 / 65535.0)) + 0.5).astype(np.uint8)
    if np.issubdtype(arr.dtype, np.integer):
        if arr.size and (arr.max() > 255 or arr.min() < 0):
            return _to_uint8(np.clip(arr, 0, 65535).astype(np.uint16))
        return arr.astype(np.uint8)
    if np.issubdtype(arr.dtype, np.floating):
        a = np.nan_to_num(arr.astype(np.float32), nan=0.0, posinf=1.0, neginf=0.0)
        if a.size and a.max() <= 1.0:
            a = a * 255.0
        return (np.clip(a, 0, 255) + 0.5).astype(np.uint8)
    raise InvalidImageError(f"unsupported array dtype {arr.dtype}")


def _split_array(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """[H,W], [H,W,1], [H,W,2] (gray+alpha), [H,W,3], [H,W,4] -> (uint8 RGB, uint8 alpha | None)."""
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] not in (1, 2, 3, 4):
        raise InvalidImageError(f"expected an image array [H,W], [H,W,3] or [H,W,4], got shape {arr.shape}")
    arr = _to_uint8(arr)
    c = arr.shape[2]
    alpha = arr[:, :, c - 1].copy() if c in (2, 4) else None
    rgb = arr[:, :, :3] if c >= 3 else np.repeat(arr[:, :, :1], 3, axis=2)
    return np.ascontiguousarray(rgb), alpha


def _from_pil(im: Image.Image) -> tuple[np.ndarray, np.ndarray | None]:
    """Decoded PIL image of any mode -> (uint8 RGB, uint8 alpha | None)."""
    mode = im.mode
    if mode in ("RGB", "L"):
        return _split_array(np.asarray(im))
    if mode in ("RGBA", "LA"):
        return _split_array(np.asarray(im))
    if mode in ("P", "PA"):
        has_alpha = mode == "PA" or "transparency" in im.info
        return _split_array(np.asarray(im.convert("RGBA" if has_alpha else "RGB")))
    if mode.startswith("I;16") or mode in ("I", "F"):
        arr = np.asarray(im)
        if mode.startswith("I;16"):
            arr = arr.astype(np.uint16)
        elif mode == "I" and arr.size and arr.max() <= 255 and arr.min() >= 0:
            arr = arr.astype(np.uint8)  # 8-bit data stored as int32
        return _split_array(arr)
    if mode == "1":
        return _split_array(np.asarray(im.convert("L")))
    if mode == "RGBa":
        return _split_array(np.asarray(im.convert("RGBA")))
    # CMYK, YCbCr, LAB, HSV, RGBX, ...: PIL's own conversion to RGB
    return _split_array(np.asarray(im.convert("RGB")))


def _orient(rgb: np.ndarray, alpha: np.ndarray | None, orientation: int) -> tuple[np.ndarray, np.ndarray | None]:
    method = _TRANSPOSE.get(int(orientation or 1))
    if method is None:
        return rgb, alpha
    rgb = np.asarray(Image.fromarray(rgb).transpose(method))
    if alpha is not None:
        alpha = np.asarray(Image.fromarray(alpha).transpose(method))
    return np.ascontiguousarray(rgb), alpha


def _decode_bytes(data: bytes, name: str, max_pixels: int | None, min_side: int | None):
    if len(data) == 0:
        raise InvalidImageError(f"{name}: the file is empty")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data))  # reads the header only
    except Image.DecompressionBombError as err:
        raise ImageTooLargeError(f"{name}: {err}") from None
    except UnidentifiedImageError:
        raise InvalidImageError(
            f"{name}: not a readable image file (its content is not PNG, JPEG, WebP, TIFF, BMP, GIF or another format Pillow knows)"
        ) from None
    except Exception as err:  # noqa: BLE001 - corrupt headers raise many types
        raise InvalidImageError(f"{name}: corrupt image header ({type(err).__name__}: {err})") from None
    _check_size(*im.size, max_pixels, min_side, what=name)
    frames = int(getattr(im, "n_frames", 1) or 1)
    if frames > 1:  # never cut an animation to its first frame: the other frames' faces would leave untouched
        raise InvalidImageError(
            f"{name}: an animated or multi-page image with {frames} frames; split it into single images "
            f"(e.g. `ffmpeg -i in.gif frame_%04d.png`) and process those"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im.load()
    except Exception as err:  # noqa: BLE001 - truncated data: OSError, SyntaxError, ValueError, zlib.error...
        raise InvalidImageError(f"{name}: truncated or corrupt image data ({type(err).__name__}: {err})") from None
    try:
        orientation = im.getexif().get(_EXIF_ORIENTATION, 1)
    except Exception:  # noqa: BLE001 - a broken EXIF block must not stop us
        orientation = 1
    rgb, alpha = _from_pil(im)
    return _orient(rgb, alpha, orientation)


def load_image(src: Any, *, max_pixels: int | None = None, min_side: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Load any supported image input as ``(rgb uint8 [H,W,3], alpha uint8 [H,W] | None)``.

    ``src``: a file path (str / PathLike), encoded file bytes, a PIL image, a numpy array (uint8,
    uint16, bool, int or float; [H,W], [H,W,1|2|3|4]) or anything with an ``.image`` attribute (a
    :class:`~zoo.methods.base.DeidResult`). Arrays with 3/4 channels are taken as RGB/RGBA.

    * The EXIF orientation of files is applied (the array comes out upright).
    * Grayscale, palette, CMYK, YCbCr, ... become RGB; the alpha of RGBA/LA/PA images is returned
      separately so it can be put back on the result.
    * 16-bit data is scaled to 8 bits (v * 255 / 65535), never clipped.
    * Size is checked from the header before any pixel is decoded: more than ``max_pixels``
      (default :data:`MAX_PIXELS` = 40 MP) raises :class:`ImageTooLargeError`; a side shorter than
      ``min_side`` (default 8) raises :class:`InvalidImageError`. Pillow's own decompression-bomb cap
      (about 179 MP) also applies to files.
    * Non-image files and truncated/corrupt data raise :class:`InvalidImageError`.
    """
    if hasattr(src, "image") and not isinstance(src, (np.ndarray, Image.Image)):
        src = src.image
    if isinstance(src, (str, os.PathLike)):
        path = Path(src)
        if not path.is_file():
            raise FileNotFoundError(f"no such image file: {path}")
        return _decode_bytes(path.read_bytes(), str(path), max_pixels, min_side)
    if isinstance(src, (bytes, bytearray, memoryview)):
        return _decode_bytes(bytes(src), "image bytes", max_pixels, min_side)
    if isinstance(src, Image.Image):
        _check_size(*src.size, max_pixels, min_side)
        frames = int(getattr(src, "n_frames", 1) or 1)
        if frames > 1:
            raise InvalidImageError(f"an animated or multi-page image with {frames} frames; pass its frames one by one")
        try:
            src.load()
        except Exception as err:  # noqa: BLE001 - PIL raises many types for bad data; all mean: not a readable image
            raise InvalidImageError(f"truncated or corrupt image data ({type(err).__name__}: {err})") from None
        try:
            orientation = src.getexif().get(_EXIF_ORIENTATION, 1)
        except Exception:  # noqa: BLE001 - a broken EXIF block only loses the orientation tag
            orientation = 1
        rgb, alpha = _from_pil(src)
        return _orient(rgb, alpha, orientation)
    if isinstance(src, np.ndarray):
        if src.ndim not in (2, 3):
            raise InvalidImageError(f"expected an image array [H,W] or [H,W,C], got shape {src.shape}")
        _check_size(src.shape[1], src.shape[0], max_pixels, min_side)
        return _split_array(src)
    if isinstance(src, torch.Tensor):
        raise TypeError("load_image takes images (path, bytes, PIL, uint8 array); use to_tensor/from_tensor for tensors")
    raise TypeError(f"cannot read an image from {type(src).__name__}")


def _resize(rgb: np.ndarray, width: int, height: int) -> np.ndarray:
    h, w = rgb.shape[:2]
    if (w, h) == (width, height):
        return rgb.copy()
    shrinking = width < w and height < h
    return cv2.resize(rgb, (int(width), int(height)), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_CUBIC)


def resize_square(rgb: np.ndarray, size: int) -> np.ndarray:
    """uint8 [H,W,C] -> uint8 [size,size,C] (area filter when shrinking, bicubic when enlarging).

    A non-square input is stretched, not cropped, so :func:`resize_to` back to (H, W) restores its shape.
    """
    return _resize(rgb, size, size)


def resize_to(rgb: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    """uint8 [h,w,C] -> uint8 [H,W,C] for ``hw = (H, W)``."""
    return _resize(rgb, hw[1], hw[0])


def to_pil(rgb: np.ndarray, alpha: np.ndarray | None = None) -> Image.Image:
    """uint8 RGB [H,W,3] (+ optional alpha [H,W]) -> PIL ``RGB`` (or ``RGBA``) image."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    if alpha is None:
        return Image.fromarray(rgb, "RGB")
    if alpha.shape != rgb.shape[:2]:
        alpha = cv2.resize(alpha, (rgb.shape[1], rgb.shape[0]), interpolation=cv2.INTER_LINEAR)
    return Image.fromarray(np.dstack([rgb, alpha]).astype(np.uint8), "RGBA")


def _atomic_write(path: str | os.PathLike, write) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The name is chosen before the file exists and the file is created inside ``try``: a signal (SIGTERM unwinds
    # as SystemExit) that lands right after creation still finds the name to remove. Private (0600) like mkstemp.
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def save_image_atomic(image: Image.Image | np.ndarray, path: str | os.PathLike, **save_kwargs: Any) -> Path:
    """Save an image so that ``path`` is either the complete new file or untouched (temp file + os.replace).

    The format follows the extension (``.png`` lossless is what recovery needs; ``.jpg`` drops alpha).
    """
    pil = image if isinstance(image, Image.Image) else to_pil(*_split_array(np.asarray(image)))
    fmt = Image.registered_extensions().get(Path(path).suffix.lower())
    if fmt is None:
        raise ValueError(f"cannot tell the image format from the file name {str(path)!r} (use .png, .jpg, .webp, ...)")
    if fmt == "JPEG" and pil.mode not in ("RGB", "L"):
        pil = pil.convert("RGB")
        save_kwargs.setdefault("quality", 95)
    return _atomic_write(path, lambda fh: pil.save(fh, format=fmt, **save_kwargs))


def write_text_atomic(text: str, path: str | os.PathLike) -> Path:
    """Write a text file (e.g. a JSON report) atomically."""
    return _atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))
