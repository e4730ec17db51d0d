"""The latent carrier: a demo-tier method's anonymized latent code, written into the low bits of its own
anonymized face so that recovery from the saved lossless image starts from the exact code.

Why: the demo backbone (a 64 px DCGAN) is not identifiable from its images: re-encoding an anonymized
face finds *another* latent code that draws the same picture (cosine 0.59 to the true one after 20
refinement steps, ``benchmarks/results/inversion_cpu.md``), and a keyed inverse applied to that code
recovers somebody else. The anonymized code ``z_anon`` is what the paper's encoder would estimate on a
backbone that is identifiable (StyleGAN2 + e4e), so carrying it beside the face is the engineering
stand-in for that estimate. It holds nothing the anonymized face does not already show: without the
key, ``z_anon`` draws the anonymized face and nothing else (the keyed transform is what maps it back).

Format: one block per face, 16 px wide and :data:`BLOCK_ROWS` rows high, centred on the face, in the
two least significant bits of R, G and B (each pixel value changes by at most 3 of 255). Its bytes::

    magic b"ZoOL" | version u8 | method tag u16 | face index u16 | block origin x, y u32
    | face box (4) + 5 landmarks (10) float32, image pixels | n u16 | z_anon n x float16
    | guard variant u8 | crc32

The guard variant (version 2) is which of the method's key variants the privacy guard chose for the face
(:mod:`zoo.guard`; 0 = the plain key); version-1 blocks read as variant 0.

The block survives a lossless save (PNG, WebP lossless, a numpy array); a lossy save (JPEG), a resize
or an edit of the face destroys it, and recovery then re-encodes the face from its pixels (reported per
face as ``latent_carried: false``). Faces smaller than :data:`MIN_FACE` px carry no block.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, replace

import numpy as np

__all__ = ["CarriedLatent", "embed", "extract_all", "method_tag", "BLOCK_WIDTH", "BLOCK_ROWS", "MIN_FACE"]

MAGIC = b"ZoOL"
VERSION = 2
_READABLE_VERSIONS = (1, 2)
BLOCK_WIDTH = 16
MAX_LATENT = 100  # the demo backbone's latent size
_HEAD = struct.Struct("<4sBHHII14fH")  # magic, version, tag, index, origin x, origin y, box + landmarks, n
_BITS_PER_PIXEL = 6  # 2 bits in each of R, G, B
BLOCK_ROWS = -(-((_HEAD.size + 2 * MAX_LATENT + 1 + 4) * 8) // (_BITS_PER_PIXEL * BLOCK_WIDTH))
MIN_FACE = int(np.ceil(1.6 * max(BLOCK_WIDTH, BLOCK_ROWS)))


def method_tag(name: str) -> int:
    """16-bit tag of a method name, so that one method never reads another's block."""
    return zlib.crc32(name.encode("utf-8")) & 0xFFFF


@dataclass
class CarriedLatent:
    """One face's carried code. ``box`` [4] and ``landmarks`` [5,2] are image pixels at embedding time
    (zeros for an aligned crop); ``origin`` is where the block starts; ``latent`` float32 ``[n]``;
    ``variant``: the privacy guard's key variant for this face (0-255, 0 = the plain key)."""

    tag: int
    index: int
    box: np.ndarray
    landmarks: np.ndarray
    latent: np.ndarray
    origin: tuple[int, int] = (0, 0)
    variant: int = 0

    def to_bytes(self) -> bytes:
        lat = np.asarray(self.latent, dtype=np.float16).reshape(-1)
        if lat.size > MAX_LATENT:
            raise ValueError(f"a carried latent holds at most {MAX_LATENT} values, got {lat.size}")
        geo = np.concatenate([np.asarray(self.box, np.float32).reshape(4), np.asarray(self.landmarks, np.float32).reshape(10)])
        head = _HEAD.pack(MAGIC, VERSION, self.tag, self.index, self.origin[0], self.origin[1], *geo.tolist(), lat.size)
        if not 0 <= int(self.variant) <= 255:
            raise ValueError(f"a guard variant is 0-255, got {self.variant}")
        body = head + lat.tobytes() + bytes([int(self.variant)])
        return body + struct.pack("<I", zlib.crc32(body))

    def shifted(self, dx: float, dy: float) -> "CarriedLatent":
        """The same face in an image cropped or padded since embedding (block found at origin + (dx, dy))."""
        off = np.array([dx, dy], dtype=np.float32)
        return replace(self, box=self.box + np.tile(off, 2), landmarks=self.landmarks + off, origin=(self.origin[0] + int(dx), self.origin[1] + int(dy)))


def _symbols(data: bytes) -> np.ndarray:
    """bytes -> 2-bit symbols, most significant first, padded to whole block pixels."""
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
    sym = bits[0::2] * 2 + bits[1::2]
    total = BLOCK_ROWS * BLOCK_WIDTH * 3
    return np.concatenate([sym, np.zeros(total - sym.size, dtype=np.uint8)])


def _bytes(symbols: np.ndarray) -> bytes:
    bits = np.stack([symbols >> 1, symbols & 1], axis=-1).reshape(-1).astype(np.uint8)
    return np.packbits(bits[: bits.size - bits.size % 8]).tobytes()


_MAGIC_SYMBOLS = _symbols(MAGIC)[:15].reshape(5, 3)  # the first five pixels of every block


def embed(rgb: np.ndarray, carried: CarriedLatent, center: tuple[float, float], face_size: float, taken: list | None = None) -> bool:
    """Write ``carried`` into uint8 ``rgb`` [H,W,3] (in place), centred at ``center`` (x, y).

    Returns False (and writes nothing) when the face is smaller than :data:`MIN_FACE`, the block would
    leave the image, or it would overlap a block listed in ``taken`` (origins of blocks already written;
    the new one is appended).
    """
    h, w = rgb.shape[:2]
    x0, y0 = int(round(center[0] - BLOCK_WIDTH / 2)), int(round(center[1] - BLOCK_ROWS / 2))
    if face_size < MIN_FACE or x0 < 0 or y0 < 0 or x0 + BLOCK_WIDTH > w or y0 + BLOCK_ROWS > h:
        return False
    for tx, ty in taken or []:
        if abs(tx - x0) < BLOCK_WIDTH and abs(ty - y0) < BLOCK_ROWS:
            return False
    carried = replace(carried, origin=(x0, y0))
    sym = _symbols(carried.to_bytes()).reshape(BLOCK_ROWS, BLOCK_WIDTH, 3)
    region = rgb[y0 : y0 + BLOCK_ROWS, x0 : x0 + BLOCK_WIDTH]
    region[...] = (region & np.uint8(0xFC)) | sym
    if taken is not None:
        taken.append((x0, y0))
    return True


def _decode_at(low: np.ndarray, x0: int, y0: int) -> CarriedLatent | None:
    block = low[y0 : y0 + BLOCK_ROWS, x0 : x0 + BLOCK_WIDTH]
    if block.shape[:2] != (BLOCK_ROWS, BLOCK_WIDTH):
        return None
    data = _bytes(block.reshape(-1))
    try:
        fields = _HEAD.unpack_from(data)
    except struct.error:
        return None
    magic, version, tag, index, ox, oy, *geo, n = fields
    if magic != MAGIC or version not in _READABLE_VERSIONS or n > MAX_LATENT:
        return None
    lat_end = _HEAD.size + 2 * n
    end = lat_end + (1 if version >= 2 else 0)
    if end + 4 > len(data) or struct.unpack_from("<I", data, end)[0] != zlib.crc32(data[:end]):
        return None
    latent = np.frombuffer(data[_HEAD.size : lat_end], dtype=np.float16).astype(np.float32)
    variant = data[lat_end] if version >= 2 else 0
    place = np.asarray(geo, dtype=np.float32)
    found = CarriedLatent(tag, index, place[:4], place[4:].reshape(5, 2), latent, (ox, oy), int(variant))
    return found.shifted(x0 - ox, y0 - oy) if (x0, y0) != (ox, oy) else found


def extract_all(rgb: np.ndarray, tag: int | None = None) -> list[CarriedLatent]:
    """Every intact block in uint8 ``rgb`` [H,W,3] (optionally only those of one method ``tag``)."""
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] < 3 or rgb.dtype != np.uint8:
        return []
    low = rgb[..., :3] & np.uint8(3)
    h, w = low.shape[:2]
    if h < BLOCK_ROWS or w < BLOCK_WIDTH:
        return []
    hit = np.ones((h, w - 4), dtype=bool)
    for k in range(5):  # candidate origins: the five magic pixels in a row
        hit &= (low[:, k : w - 4 + k] == _MAGIC_SYMBOLS[k]).all(-1)
    found = []
    for y0, x0 in zip(*np.nonzero(hit)):
        c = _decode_at(low, int(x0), int(y0))
        if c is not None and (tag is None or c.tag == tag):
            found.append(c)
    return found
