"""The latent carrier: a reversible method's anonymized code, written into the low bits of its own anonymized
photo so that recovery from the saved lossless image starts from the exact code instead of a re-inversion.

Why: a GAN inversion is not unique. Re-inverting an anonymized face finds *another* code that draws nearly the
same picture, and the keyed inverse applied to that code gives somebody else (on the FFHQ-grade W+ backbone the
key rotates what the identity slots hold besides the identity code, and that rotation does not survive a
re-inversion: whole-photo right-key recovery of real faces gave the person back (dlib) for 0-2 of 7 tuning faces per
method from a re-inversion, and for 5-7 of 7 from the carried code, ``benchmarks/results/appearance.md``). The carried W+ rows hold nothing the anonymized face does not
already show: they are the code the anonymized face was drawn from (what a perfect inversion of the saved face
would return); without the key they draw that face and nothing else. The carried identity code is the keyed one
before it is turned to the drawing norm (``wplus.code_norm``, :meth:`~zoo.methods.latent_demo.LatentDemoMethod.drawn_identity`):
its direction is the drawn face's, its length the input's, one number the seal (below) keeps from anyone without the key.

A face's block is a rectangle of pixels, anywhere in the image that no other block uses (as close to the face
as it fits), in the two least significant bits of R, G and B (each pixel value changes by at most 3 of 255).
Its top-left :data:`BLOCK_WIDTH` x :data:`BLOCK_ROWS` pixels hold the head::

    magic b"ZoOL" | version u8 | method tag u16 | face index u16 | block origin x, y u32
    | face box (4) + 5 landmarks (10) float32, image pixels | n u16 | latent n x float16
    | guard variant u8 | block width, height u16 | code rows, cols u16 | code crc32 | key check u16
    | sealed u8 | latent crc32 | region reach u8 | crc32

and the rest of the rectangle, row by row, the code (version 3, when rows > 0): per row a float16 centre and
scale, then every value as a 4-bit step of scale (``(q - 8) * scale``, q in 1..15: +-7 steps cover
:data:`CODE_SIGMAS` standard deviations of the row). ``latent`` is the method's identity code (<= 100 values);
``code`` a larger array the method needs exactly (the W+ methods: the anonymized W+ rows the 256 px face is
drawn from, 19 x 512, about 4.9 kB: an 84 x 84 px block; its 4-bit rounding changes the recovered face by
about 42 dB PSNR). The guard variant (version 2) is which of the method's key variants the privacy guard chose
for the face (:mod:`zoo.guard`; 0 = the plain key); version-1 blocks read as variant 0. The key check (version 4)
is one byte derived from the face's key (:meth:`~zoo.keys.KeyMaterial.carrier_check`; stored as 1 + the byte, 0 =
none): recovery refuses a block whose check the given key does not reproduce, so a wrong key recovers nothing from a
lossless save (255 of 256 wrong keys are told so; one byte tells an attacker little about a key, and a stretched
secret is not guessed byte by byte).

The block is sealed with the face's key (version 5): the latent with its crc32, and the code, are XORed with keystreams
of the face key (:meth:`~zoo.keys.KeyMaterial.carrier_stream`), so only the right key reads the code back. Without it
the block tells where a face was, nothing of what it looked like: an unsealed code would let anyone draw the
anonymized face it holds without a key (where the privacy guard blurred a face because its anonymized face was still
recognizable, that face), and run the method's inverse with keys of their own, with no key check in the way. Opening
with a wrong key fails the latent's crc32 (a wrong key passes it once in 2^32). The crc32s outside the seal cover the
sealed bytes, so a damaged block is told without a key.

Version 6 has the layout of version 5; the W+ methods' codes in it rotate the deviations of W+ slots 2-18 with the
key (:data:`zoo.nn.wplus_identity.DEVIATION_SLOTS`), those of earlier blocks slots 4-18, and each block is recovered
with its own (``values()["block_version"]``). The region reach (version 7) is how far beyond the face mesh's hull the
anonymized face was composited (:func:`zoo.compositing.region_reach`; stored as 1 + whole percent of the face size,
0 = the default region): the privacy guard widens the region of a face that stays recognizable, and recovery
composites the recovered face over the same region, so no band of the anonymized face stays around it. It is not
sealed: the photo shows the region anyway. Version 8 has the layout of version 7; its W+ codes also carry the identity
change in slots 0-1 (:data:`zoo.nn.wplus_identity.COARSE_SLOTS`), and blocks of version 7 and earlier are recovered
without it. Version 9 has the same layout; its W+ codes' identity change skips the mouth directions
(:attr:`zoo.nn.wplus_identity.WPlusIdentity.mouth_directions`), and blocks of version 8 and earlier are recovered
without that. Version 10 has the same layout; the high bit of its reach byte says the face was blurred when it was
anonymized (fail closed: the privacy guard still recognized it, or it was too small to vouch for), so that right-key
recovery draws the recovered face over the whole blurred rectangle instead of matching it to the blur
(:func:`zoo.paste.restore_blurred`). It is not sealed: the photo shows the blur anyway.

The block survives a lossless save (PNG, WebP lossless, a numpy array) and a crop that keeps it whole; a lossy
save (JPEG), a resize or an edit destroys it, and recovery then leaves the face as it is (status ``no_code``,
:mod:`zoo.pipeline`: re-encoding the pixels gives the person back with no key, right or wrong). Every face gets a block, however small the face (the block need not lie
on it: its head names the face's box); a code that finds no free place in the image rides without its ``code``
(the head alone, with the key check, ``latent_carried: false``).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

__all__ = [
    "CarriedLatent",
    "embed",
    "extract_all",
    "method_tag",
    "block_size",
    "quantize_code",
    "BLOCK_WIDTH",
    "BLOCK_ROWS",
    "CODE_SIGMAS",
]

MAGIC = b"ZoOL"
VERSION = 10
_READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
BLOCK_WIDTH = 16
MAX_LATENT = 100  # identity codes: the DCGAN latent, the W+ identity code
_HEAD = struct.Struct("<4sBHHII14fH")  # magic, version, tag, index, origin x, origin y, box + landmarks, n
_CODE_HEAD = struct.Struct("<HHHHI")  # version 3: block width, height, code rows, cols, code crc32
_BITS_PER_PIXEL = 6  # 2 bits in each of R, G, B
_KEY_CHECK = struct.Struct("<H")  # version 4: 1 + the key check byte (0: no check)
_SEAL = struct.Struct("<BI")  # version 5: sealed (0/1), crc32 of the latent's bytes (sealed with them)
_REACH = struct.Struct("<B")  # version 7: 1 + the region reach in whole percent of the face size (0: the default region)
_BLURRED = 0x80  # version 10: the reach byte's high bit, set where the face was blurred (fail closed)
_TAIL_SIZE = 1 + _CODE_HEAD.size + _KEY_CHECK.size + _SEAL.size + _REACH.size  # after the latent, before the crc32
BLOCK_ROWS = -(-((_HEAD.size + 2 * MAX_LATENT + _TAIL_SIZE + 4) * 8) // (_BITS_PER_PIXEL * BLOCK_WIDTH))
#: a code row's 4-bit steps span +-CODE_SIGMAS of its standard deviations (values beyond are clipped)
CODE_SIGMAS = 4.0
_CODE_LEVELS = 7  # q - 8 in -7..7


def method_tag(name: str) -> int:
    """16-bit tag of a method name, so that one method never reads another's block."""
    return zlib.crc32(name.encode("utf-8")) & 0xFFFF


def _code_bytes(code: np.ndarray) -> bytes:
    """float ``[rows, cols]`` -> per row (centre, scale) float16, then 4-bit steps, two per byte."""
    code = np.asarray(code, dtype=np.float64)
    centre = code.mean(1, keepdims=True).astype(np.float16).astype(np.float64)
    spread = np.maximum(code.std(1, keepdims=True), 1e-6)
    scale = (CODE_SIGMAS * spread / _CODE_LEVELS).astype(np.float16).astype(np.float64)
    q = np.clip(np.round((code - centre) / scale), -_CODE_LEVELS, _CODE_LEVELS).astype(np.int64) + 8
    flat = q.reshape(-1)
    if flat.size % 2:
        flat = np.concatenate([flat, [8]])
    nibbles = (flat[0::2] << 4 | flat[1::2]).astype(np.uint8)
    return np.concatenate([centre, scale], 1).astype(np.float16).tobytes() + nibbles.tobytes()


def _code_from_bytes(data: bytes, rows: int, cols: int) -> np.ndarray:
    head = np.frombuffer(data[: 4 * rows], dtype=np.float16).astype(np.float32).reshape(rows, 2)
    packed = np.frombuffer(data[4 * rows :], dtype=np.uint8)
    q = np.stack([packed >> 4, packed & 15], 1).reshape(-1)[: rows * cols].astype(np.float32) - 8
    return head[:, :1] + q.reshape(rows, cols) * head[:, 1:]


def quantize_code(code: np.ndarray) -> np.ndarray:
    """float ``[rows, cols]`` -> the same code as a block gives it back (4-bit steps, module docstring)."""
    code = np.asarray(code, dtype=np.float32)
    return _code_from_bytes(_code_bytes(code), *code.shape)


def _code_size(rows: int, cols: int) -> int:
    return 4 * rows + (rows * cols + 1) // 2


def block_size(code_shape: tuple[int, int] | None) -> tuple[int, int]:
    """(width, height) in pixels of a block carrying a code of ``code_shape`` (None: the head alone)."""
    if code_shape is None:
        return BLOCK_WIDTH, BLOCK_ROWS
    bits = (_code_size(*code_shape) + 4) * 8
    pixels = -(-bits // _BITS_PER_PIXEL) + BLOCK_WIDTH * BLOCK_ROWS
    width = max(BLOCK_WIDTH, int(np.ceil(np.sqrt(pixels))))
    return width, max(BLOCK_ROWS, -(-pixels // width))


@dataclass
class CarriedLatent:
    """One face's carried code. ``box`` [4] and ``landmarks`` [5,2] are image pixels at embedding time
    (zeros for an aligned crop); ``origin`` is where the block starts; ``latent`` float32 ``[n]`` (n <= 100; None in a
    sealed block until it is :meth:`opened`);
    ``code`` float32 ``[rows, cols]`` or None (module docstring); ``variant``: the privacy guard's key variant
    for this face (0-255, 0 = the plain key); ``reach``: how far beyond the mesh hull the face was composited
    (fraction of the face size, whole percent; None: the default region)."""

    tag: int
    index: int
    box: np.ndarray
    landmarks: np.ndarray
    latent: np.ndarray | None
    origin: tuple[int, int] = (0, 0)
    variant: int = 0
    code: np.ndarray | None = None
    #: (rows, cols) of the code the method meant to carry, also when it could not ride or was damaged
    code_shape: tuple[int, int] | None = None
    #: the face key's check byte (:meth:`~zoo.keys.KeyMaterial.carrier_check`), None where none was written
    key_check: int | None = None
    #: a block read from an image sealed with the face's key: the sealed latent (with its crc32) and code bytes;
    #: ``latent`` and ``code`` are None until :meth:`opened` with the key
    sealed_latent: bytes | None = None
    sealed_code: bytes | None = None
    #: the face's key (:class:`~zoo.keys.KeyMaterial`) to seal the block with when it is written; never written itself
    key: Any = field(default=None, repr=False, compare=False)
    #: the format version the block was read from (:data:`VERSION` for a block being written)
    version: int = VERSION
    #: how far beyond the face mesh's hull the anonymized face was composited (None: the default region)
    reach: float | None = None
    #: the face was blurred when it was anonymized (fail closed; :func:`zoo.paste.blur_face`): right-key recovery
    #: draws the recovered face over the whole blurred rectangle (:func:`zoo.paste.restore_blurred`)
    blurred: bool = False

    def key_matches(self, key) -> bool:
        """Whether ``key`` (the face's :class:`~zoo.keys.KeyMaterial`) reproduces the block's key check and opens its
        seal (True for an unsealed block without a check, or no key for such a block)."""
        return self.opened(key) is not None

    def opened(self, key) -> "CarriedLatent | None":
        """This block with its latent and code read back with the face's ``key`` (itself where it is not sealed); None
        where ``key`` does not reproduce its check byte or open its seal (the latent's crc32 fails)."""
        if self.key_check is not None and key is not None and key.carrier_check(self.variant) != self.key_check:
            return None
        if self.sealed_latent is None:
            return self
        if key is None:
            return None
        plain = _xor(self.sealed_latent, key.carrier_stream(len(self.sealed_latent), self.variant, "latent"))
        raw, crc = plain[:-4], struct.unpack("<I", plain[-4:])[0]
        if zlib.crc32(raw) != crc:
            return None
        code = None
        if self.sealed_code is not None and self.code_shape:
            code = _code_from_bytes(_xor(self.sealed_code, key.carrier_stream(len(self.sealed_code), self.variant, "code")), *self.code_shape)
        latent = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
        return replace(self, latent=latent, code=code, sealed_latent=None, sealed_code=None)

    @property
    def complete(self) -> bool:
        """Everything the method meant to carry came back (no code was meant, or the code is intact)."""
        return self.code is not None or self.sealed_code is not None or not self.code_shape

    def values(self) -> dict[str, Any]:
        """What the method gets back (``recover_faces(carried=...)``): {"latent": [n], "code": [rows, cols],
        "block_version": int} (no "code" when none rode). A sealed block is :meth:`opened` first."""
        if self.sealed_latent is not None:
            raise ValueError("this carried code is sealed: open it with the face's key first (CarriedLatent.opened)")
        out: dict[str, Any] = {"latent": np.asarray(self.latent, np.float32), "block_version": int(self.version)}
        if self.code is not None:
            out["code"] = np.asarray(self.code, np.float32)
        return out

    def to_bytes(self, size: tuple[int, int] | None = None) -> tuple[bytes, bytes]:
        """(head bytes, code bytes + crc32 or b""); ``size``: the block's (width, height), default :func:`block_size`.
        Sealed with :attr:`key` where it is set (module docstring)."""
        lat = np.asarray(self.latent, dtype=np.float16).reshape(-1)
        if lat.size > MAX_LATENT:
            raise ValueError(f"a carried latent holds at most {MAX_LATENT} values, got {lat.size}")
        if not 0 <= int(self.variant) <= 255:
            raise ValueError(f"a guard variant is 0-255, got {self.variant}")
        rows, cols = self.code_shape or (0, 0)
        payload = b""
        if self.code is not None:
            code = np.asarray(self.code, dtype=np.float32)
            if code.ndim != 2 or not 0 < code.shape[0] < 2**16 or not 0 < code.shape[1] < 2**16 or not np.isfinite(code).all():
                raise ValueError(f"a carried code is a finite [rows, cols] array, got shape {code.shape}")
            rows, cols = code.shape
            payload = _code_bytes(code)
            if self.key is not None:
                payload = _xor(payload, self.key.carrier_stream(len(payload), int(self.variant), "code"))
            payload += struct.pack("<I", zlib.crc32(payload))
        width, height = size or block_size((rows, cols) if payload else None)
        latent = lat.tobytes() + struct.pack("<I", zlib.crc32(lat.tobytes()))
        if self.key is not None:
            latent = _xor(latent, self.key.carrier_stream(len(latent), int(self.variant), "latent"))
        geo = np.concatenate([np.asarray(self.box, np.float32).reshape(4), np.asarray(self.landmarks, np.float32).reshape(10)])
        head = _HEAD.pack(MAGIC, VERSION, self.tag, self.index, self.origin[0], self.origin[1], *geo.tolist(), lat.size)
        body = head + latent[:-4] + bytes([int(self.variant)])
        body += _CODE_HEAD.pack(width, height, rows, cols, zlib.crc32(payload[:-4]) if payload else 0)
        if self.key_check is not None and not 0 <= int(self.key_check) <= 255:
            raise ValueError(f"a key check is one byte, got {self.key_check}")
        body += _KEY_CHECK.pack(0 if self.key_check is None else 1 + int(self.key_check))
        body += _SEAL.pack(int(self.key is not None), struct.unpack("<I", latent[-4:])[0])
        if self.reach is not None and not 0.0 <= float(self.reach) <= 1.0:
            raise ValueError(f"a region reach is a fraction of the face size in [0, 1], got {self.reach}")
        body += _REACH.pack((0 if self.reach is None else 1 + int(round(100 * float(self.reach)))) | (_BLURRED if self.blurred else 0))
        return body + struct.pack("<I", zlib.crc32(body)), payload

    def shifted(self, dx: float, dy: float) -> "CarriedLatent":
        """The same face in an image cropped or padded since embedding (block found at origin + (dx, dy))."""
        off = np.array([dx, dy], dtype=np.float32)
        return replace(self, box=self.box + np.tile(off, 2), landmarks=self.landmarks + off, origin=(self.origin[0] + int(dx), self.origin[1] + int(dy)))


def _xor(data: bytes, stream: bytes) -> bytes:
    return (np.frombuffer(data, dtype=np.uint8) ^ np.frombuffer(stream[: len(data)], dtype=np.uint8)).tobytes()


def _symbols(data: bytes, pixels: int = BLOCK_ROWS * BLOCK_WIDTH) -> np.ndarray:
    """bytes -> 2-bit symbols, most significant first, padded to ``pixels`` x 3."""
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
    sym = bits[0::2] * 2 + bits[1::2]
    if sym.size > 3 * pixels:
        raise ValueError(f"{len(data)} bytes do not fit {pixels} pixels")
    return np.concatenate([sym, np.zeros(3 * pixels - sym.size, dtype=np.uint8)])


def _bytes(symbols: np.ndarray) -> bytes:
    bits = np.stack([symbols >> 1, symbols & 1], axis=-1).reshape(-1).astype(np.uint8)
    return np.packbits(bits[: bits.size - bits.size % 8]).tobytes()


_MAGIC_SYMBOLS = _symbols(MAGIC)[:15].reshape(5, 3)  # the first five pixels of every block
#: the same five pixels, each pixel's three 2-bit symbols read as one 6-bit number (what :func:`extract_all` searches)
_MAGIC_CODES = [(int(r) << 4) | (int(g) << 2) | int(b) for r, g, b in _MAGIC_SYMBOLS]


def _code_mask(width: int, height: int) -> np.ndarray:
    """The pixels of a ``width`` x ``height`` block that hold the code: all but the head's corner."""
    mask = np.ones((height, width), dtype=bool)
    mask[:BLOCK_ROWS, :BLOCK_WIDTH] = False
    return mask


def _free_origin(shape: tuple[int, ...], center: tuple[float, float], width: int, height: int, taken: list) -> tuple[int, int] | None:
    """The block origin (x0, y0) nearest to a block centred at ``center`` that stays in the image and overlaps no
    rectangle (x0, y0, x1, y1) in ``taken``; None when there is none."""
    h, w = shape[:2]
    if width > w or height > h:
        return None
    cx, cy = int(round(center[0] - width / 2)), int(round(center[1] - height / 2))
    xs = np.unique(np.clip(np.concatenate([np.arange(0, w - width + 1, 4), [cx, w - width]]), 0, w - width))
    ys = np.unique(np.clip(np.concatenate([np.arange(0, h - height + 1, 4), [cy, h - height]]), 0, h - height))
    gx, gy = np.meshgrid(xs, ys)
    ok = np.ones(gx.shape, dtype=bool)
    for tx0, ty0, tx1, ty1 in taken:
        ok &= (gx + width <= tx0) | (gx >= tx1) | (gy + height <= ty0) | (gy >= ty1)
    if not ok.any():
        return None
    dist = np.where(ok, (gx - cx) ** 2 + (gy - cy) ** 2, np.iinfo(np.int64).max)
    i = np.unravel_index(int(np.argmin(dist)), dist.shape)
    return int(gx[i]), int(gy[i])


def embed(rgb: np.ndarray, carried: CarriedLatent, center: tuple[float, float], taken: list | None = None) -> bool:
    """Write ``carried`` into uint8 ``rgb`` [H,W,3] (in place), as close to ``center`` (x, y) as it fits.

    ``taken``: rectangles (x0, y0, x1, y1) of blocks already written (the new one is appended). Returns True when
    everything ``carried`` holds was written; False when no place is free (nothing written), or when its ``code``
    found no place and the head rode alone.
    """
    taken = taken if taken is not None else []
    tries = [carried]
    if carried.code is not None:  # if the code finds no place: the head alone, saying which code it lacks
        tries.append(replace(carried, code=None, code_shape=tuple(np.asarray(carried.code).shape)))
    for block in tries:
        width, height = block_size(None if block.code is None else np.asarray(block.code).shape)
        spot = _free_origin(rgb.shape, center, width, height, taken)
        if spot is None:
            continue
        x0, y0 = spot
        head, payload = replace(block, origin=(x0, y0)).to_bytes((width, height))
        region = rgb[y0 : y0 + height, x0 : x0 + width]
        corner = region[:BLOCK_ROWS, :BLOCK_WIDTH]
        corner[...] = (corner & np.uint8(0xFC)) | _symbols(head).reshape(BLOCK_ROWS, BLOCK_WIDTH, 3)
        if payload:
            mask = _code_mask(width, height)
            region[mask] = (region[mask] & np.uint8(0xFC)) | _symbols(payload, int(mask.sum())).reshape(-1, 3)
        taken.append((x0, y0, x0 + width, y0 + height))
        return block is carried
    return False


def _decode_at(low: np.ndarray, x0: int, y0: int) -> CarriedLatent | None:
    data = _bytes(low[y0 : y0 + BLOCK_ROWS, x0 : x0 + BLOCK_WIDTH].reshape(-1))
    try:
        fields = _HEAD.unpack_from(data)
    except struct.error:
        return None
    magic, version, tag, index, ox, oy, *geo, n = fields
    if magic != MAGIC or version not in _READABLE_VERSIONS or n > MAX_LATENT:
        return None
    lat_end = _HEAD.size + 2 * n
    end = lat_end + (1 if version >= 2 else 0) + (_CODE_HEAD.size if version >= 3 else 0) + (_KEY_CHECK.size if version >= 4 else 0)
    seal_at = end
    end += _SEAL.size if version >= 5 else 0
    reach_at = end
    end += _REACH.size if version >= 7 else 0
    if end + 4 > len(data) or struct.unpack_from("<I", data, end)[0] != zlib.crc32(data[:end]):
        return None
    sealed, latent_crc = _SEAL.unpack_from(data, seal_at) if version >= 5 else (0, None)
    (stored_reach,) = _REACH.unpack_from(data, reach_at) if version >= 7 else (0,)
    blurred = version >= 10 and bool(stored_reach & _BLURRED)
    stored_reach &= ~_BLURRED if version >= 10 else 0xFF
    reach = (stored_reach - 1) / 100.0 if 0 < stored_reach <= 101 else None
    raw_latent = data[_HEAD.size : lat_end]
    if not sealed and latent_crc is not None and zlib.crc32(raw_latent) != latent_crc:
        return None
    latent = None if sealed else np.frombuffer(raw_latent, dtype=np.float16).astype(np.float32)
    sealed_latent = raw_latent + struct.pack("<I", latent_crc) if sealed else None
    sealed_code = None
    variant = data[lat_end] if version >= 2 else 0
    code, code_shape = None, None
    if version >= 3:
        width, height, rows, cols, code_crc = _CODE_HEAD.unpack_from(data, lat_end + 1)
        code_shape = (rows, cols) if rows else None
        region = low[y0 : y0 + height, x0 : x0 + width]
        if rows and region.shape[:2] == (height, width):
            size = _code_size(rows, cols)
            payload = _bytes(region[_code_mask(width, height)].reshape(-1))
            if len(payload) >= size + 4 and zlib.crc32(payload[:size]) == code_crc == struct.unpack_from("<I", payload, size)[0]:
                if sealed:
                    sealed_code = payload[:size]
                else:
                    code = _code_from_bytes(payload[:size], rows, cols)
    key_check = None
    if version >= 4:
        (stored,) = _KEY_CHECK.unpack_from(data, lat_end + 1 + _CODE_HEAD.size)
        key_check = stored - 1 if 0 < stored <= 256 else None
    place = np.asarray(geo, dtype=np.float32)
    found = CarriedLatent(
        tag,
        index,
        place[:4],
        place[4:].reshape(5, 2),
        latent,
        (ox, oy),
        int(variant),
        code,
        code_shape,
        key_check,
        sealed_latent,
        sealed_code,
        version=int(version),
        reach=reach,
        blurred=blurred,
    )
    return found.shifted(x0 - ox, y0 - oy) if (x0, y0) != (ox, oy) else found


def extract_all(rgb: np.ndarray, tag: int | None = None) -> list[CarriedLatent]:
    """Every intact block in uint8 ``rgb`` [H,W,3] (optionally only those of one method ``tag``)."""
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] < 3 or rgb.dtype != np.uint8:
        return []
    low = rgb[..., :3] & np.uint8(3)
    h, w = low.shape[:2]
    if h < 2 or w < BLOCK_WIDTH:
        return []
    # candidate origins: the five magic pixels in a row, each pixel's three 2-bit symbols read as one 6-bit number;
    # the first magic pixel is searched over the photo, the other four only where it was found
    packed = (low[..., 0] << 4) | (low[..., 1] << 2) | low[..., 2]
    ys, xs = np.nonzero(packed[:, : w - 4] == _MAGIC_CODES[0])
    for k in range(1, 5):
        keep = packed[ys, xs + k] == _MAGIC_CODES[k]
        ys, xs = ys[keep], xs[keep]
    found = []
    for y0, x0 in zip(ys, xs):
        c = _decode_at(low, int(x0), int(y0))
        if c is not None and (tag is None or c.tag == tag):
            found.append(c)
    return found
