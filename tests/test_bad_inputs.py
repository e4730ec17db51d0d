"""Bad and unusual inputs: clear errors, nothing half-written, odd formats handled."""

from __future__ import annotations

import io
import struct
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import zoo
from zoo.imageio import (
    ImageTooLargeError,
    InvalidImageError,
    load_image,
    save_image_atomic,
    write_text_atomic,
)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height RGB pixels, with almost no pixel data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + _chunk(b"IEND", b"")


def _jpeg_bytes(rgb: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=92, **kw)
    return buf.getvalue()


@pytest.fixture(scope="module")
def blur():
    return zoo.load("blur", device="cpu")


# ---------------------------------------------------------------------- clear errors
def test_truncated_jpeg(tmp_path, astronaut_rgb, blur):
    data = _jpeg_bytes(astronaut_rgb)
    path = tmp_path / "cut.jpg"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidImageError, match="truncated or corrupt"):
        load_image(path)
    with pytest.raises(InvalidImageError):
        blur.anonymize(path)


def test_text_file_renamed_png(tmp_path, blur):
    path = tmp_path / "notes.png"
    path.write_text("this is not an image\n" * 10)
    with pytest.raises(InvalidImageError, match="not a readable image"):
        load_image(path)
    with pytest.raises(InvalidImageError):
        blur.anonymize(str(path))
    with pytest.raises(InvalidImageError, match="empty"):
        load_image(b"")
    with pytest.raises(FileNotFoundError):
        load_image(tmp_path / "missing.png")


def test_one_pixel_image(tmp_path):
    path = tmp_path / "dot.png"
    Image.new("RGB", (1, 1), (10, 20, 30)).save(path)
    with pytest.raises(InvalidImageError, match="1x1"):
        load_image(path)
    with pytest.raises(InvalidImageError, match="1x1"):
        load_image(np.zeros((1, 1, 3), np.uint8))


def test_huge_png_header_is_refused_before_decoding(tmp_path, blur):
    path = tmp_path / "huge.png"
    path.write_bytes(png_header_only(30000, 30000))
    assert path.stat().st_size < 200
    tracemalloc.start()
    try:
        with pytest.raises(ImageTooLargeError, match="30000x30000|900000000"):
            load_image(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000  # 2.7 GB of pixels were never allocated
    with pytest.raises(ImageTooLargeError):
        blur.anonymize(path)
    # between our limit (40 MP) and Pillow's bomb guard: still refused by ours, from the header
    with pytest.raises(ImageTooLargeError, match="8000x6000 = 48.0 megapixels"):
        load_image(png_header_only(8000, 6000))
    # the limit is configurable
    small = np.zeros((100, 100, 3), np.uint8)
    with pytest.raises(ImageTooLargeError):
        load_image(small, max_pixels=5000)
    assert load_image(small, max_pixels=10_000)[0].shape == (100, 100, 3)


def test_photo_without_a_face_is_returned_unchanged(no_face_rgb, blur):
    result = blur.anonymize(no_face_rgb, key="k")
    assert np.array_equal(np.asarray(result), no_face_rgb)
    report = result.report()
    assert report["faces_found"] == 0 and report["faces"] == [] and report["fallbacks"] == []


# ---------------------------------------------------------------------- unusual but valid inputs
def test_exif_rotated_jpeg_is_loaded_upright(tmp_path, t1_rgb, blur):
    # store the photo rotated 90 degrees counter-clockwise, tagged "rotate 90 CW to display" (orientation 6)
    stored = np.ascontiguousarray(np.rot90(t1_rgb, 1))
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "rotated.jpg"
    path.write_bytes(_jpeg_bytes(stored, exif=exif.tobytes()))
    rgb, alpha = load_image(path)
    assert alpha is None and rgb.shape == t1_rgb.shape
    assert np.abs(rgb.astype(int) - t1_rgb).mean() < 3  # upright again (JPEG noise only)
    result = blur.anonymize(path)
    assert result.image.size == (t1_rgb.shape[1], t1_rgb.shape[0]) and len(result.faces) == 6


def test_grayscale_input(tmp_path, astronaut_rgb, blur):
    gray = np.asarray(Image.fromarray(astronaut_rgb).convert("L"))
    path = tmp_path / "gray.png"
    Image.fromarray(gray).save(path)
    rgb, alpha = load_image(path)
    assert rgb.shape == (*gray.shape, 3) and alpha is None
    assert np.array_equal(rgb[..., 0], gray) and np.array_equal(rgb[..., 1], gray)
    result = blur.anonymize(path)
    assert result.image.size == (512, 512) and len(result.faces) == 1


def test_rgba_alpha_is_preserved(tmp_path, astronaut_rgb, blur):
    alpha = np.tile(np.linspace(0, 255, 512).astype(np.uint8), (512, 1))
    path = tmp_path / "rgba.png"
    Image.fromarray(np.dstack([astronaut_rgb, alpha])).save(path)
    rgb, a = load_image(path)
    assert np.array_equal(rgb, astronaut_rgb) and np.array_equal(a, alpha)
    result = blur.anonymize(path)
    assert result.image.mode == "RGBA"
    out = np.asarray(result.image)
    assert np.array_equal(out[..., 3], alpha)
    assert len(result.faces) == 1 and not np.array_equal(out[..., :3], astronaut_rgb)
    # palette with transparency and LA keep alpha too
    pal = Image.fromarray(astronaut_rgb).convert("P")
    pal.info["transparency"] = 0
    assert load_image(pal)[1] is not None
    la = Image.fromarray(np.dstack([astronaut_rgb[..., 0], alpha]), "LA")
    assert np.array_equal(load_image(la)[1], alpha)


def test_16_bit_inputs_are_scaled_not_clipped(tmp_path, astronaut_rgb):
    import cv2

    g8 = astronaut_rgb[..., 1]
    g16 = g8.astype(np.uint16) * 257  # full 16-bit range
    path = tmp_path / "gray16.png"
    Image.fromarray(g16).save(path)  # Pillow writes an I;16 PNG
    assert Image.open(path).mode.startswith("I")
    rgb, _ = load_image(path)
    assert np.array_equal(rgb[..., 0], g8)
    rgb16 = astronaut_rgb.astype(np.uint16) * 257
    path = tmp_path / "rgb16.png"
    assert cv2.imwrite(str(path), np.ascontiguousarray(rgb16[..., ::-1]))  # 16-bit RGB PNG
    assert path.read_bytes()[24] == 16  # bit depth in IHDR
    rgb, _ = load_image(path)
    assert np.abs(rgb.astype(int) - astronaut_rgb).max() <= 1
    tif = tmp_path / "rgb16.tif"
    assert cv2.imwrite(str(tif), np.ascontiguousarray(rgb16[..., ::-1]))
    assert np.abs(load_image(tif)[0].astype(int) - astronaut_rgb).max() <= 1
    # arrays: uint16, float in [0, 1], float in [0, 255], bool
    assert np.abs(load_image(rgb16)[0].astype(int) - astronaut_rgb).max() <= 1
    assert np.abs(load_image(astronaut_rgb / 255.0)[0].astype(int) - astronaut_rgb).max() <= 1
    assert np.abs(load_image(astronaut_rgb.astype(np.float32) * 1.0)[0].astype(int) - astronaut_rgb).max() <= 1


def test_cmyk_and_deid_result_inputs(tmp_path, astronaut_rgb, blur):
    cmyk = Image.fromarray(astronaut_rgb).convert("CMYK")
    path = tmp_path / "cmyk.jpg"
    cmyk.save(path, quality=95)
    rgb, alpha = load_image(path)
    assert rgb.shape == astronaut_rgb.shape and alpha is None
    assert np.abs(rgb.astype(int) - astronaut_rgb).mean() < 8
    result = blur.anonymize(astronaut_rgb)
    again, _ = load_image(result)  # a DeidResult is accepted as an image
    assert np.array_equal(again, np.asarray(result))


# ---------------------------------------------------------------------- nothing half-written
def test_atomic_save_leaves_nothing_half_written(tmp_path, astronaut_rgb, monkeypatch):
    target = tmp_path / "out.png"
    save_image_atomic(Image.fromarray(astronaut_rgb), target)
    original = target.read_bytes()
    assert np.array_equal(np.asarray(Image.open(target)), astronaut_rgb)

    def broken_save(self, fp, format=None, **kw):  # writes some bytes, then fails
        fp.write(b"\x89PNG partial")
        raise OSError("disk full")

    monkeypatch.setattr(Image.Image, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_image_atomic(Image.fromarray(astronaut_rgb[::-1]), target)
    with pytest.raises(OSError, match="disk full"):
        save_image_atomic(Image.fromarray(astronaut_rgb), tmp_path / "new.png")
    assert target.read_bytes() == original  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.png"]  # no partial or temp files
    with pytest.raises(ValueError, match="format"):
        save_image_atomic(Image.fromarray(astronaut_rgb), tmp_path / "out.unknownext")
    write_text_atomic('{"a": 1}', tmp_path / "r.json")
    assert Path(tmp_path / "r.json").read_text() == '{"a": 1}'


def test_signal_right_after_the_temp_file_is_created_leaves_no_temp_file(tmp_path, monkeypatch):
    """SIGTERM unwinds as SystemExit; landing between the temp file's creation and the write must not leave it."""
    import os

    import zoo.imageio as imageio

    real_open = os.open

    def open_then_signal(path, flags, mode=0o777):
        real_open(path, flags, mode)  # the file exists now; the "signal" arrives before the descriptor is kept
        raise SystemExit(143)

    monkeypatch.setattr(imageio.os, "open", open_then_signal)
    with pytest.raises(SystemExit):
        write_text_atomic('{"a": 1}', tmp_path / "group.json")
    assert list(tmp_path.iterdir()) == []


def test_animated_gif_is_refused_not_cut_to_one_frame(tmp_path):
    from PIL import Image

    from zoo.imageio import InvalidImageError, load_image

    frames = [Image.new("RGB", (32, 32), (i * 60, 0, 0)) for i in range(3)]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50, loop=0)
    with pytest.raises(InvalidImageError, match="3 frames"):
        load_image(str(path))
    with pytest.raises(InvalidImageError, match="3 frames"):
        load_image(path.read_bytes())
    with Image.open(path) as im:
        with pytest.raises(InvalidImageError, match="frames"):
            load_image(im)
    single = tmp_path / "one.gif"
    frames[0].save(single)
    assert load_image(str(single))[0].shape == (32, 32, 3)  # a still GIF is fine
