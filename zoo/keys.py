"""Keys: a user secret -> a standard KDF -> key material every method turns into its own key vectors.

* ``Secret(text)``: the user's secret (any string or bytes, any length). It is stretched once with
  PBKDF2-HMAC-SHA256 (``hashlib.pbkdf2_hmac``, 100 000 iterations, fixed salt) into a 32-byte master
  key. The secret itself is not kept on the object after that.
* ``secret.fingerprint``: a short public tag (``"k:1a2b3c4d"``) derived from the master key, so a user can
  tell keys apart. It is what reports show; it never reveals the secret.
* ``secret.derive(method, face_index)``: a :class:`KeyMaterial` for one face of one method (HMAC-SHA256
  expansion, HKDF-expand style, of the master key with a context string). Several faces in one photo
  therefore get independent keys from one secret.
* ``KeyMaterial`` turns bytes into what a paper needs: uniform vectors in [-1, 1], Gaussian vectors,
  a seeded ``torch.Generator``, decimal digits. Vectors are computed from the bytes alone (no RNG
  state, no platform dependence), so the same secret gives the same numbers on every machine.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import math
import secrets as _secrets
import struct
from dataclasses import dataclass

import torch

__all__ = ["Secret", "KeyMaterial", "new_secret", "as_secret", "key_text"]

_SALT = b"face-deid-zoo/kdf/v1"
_ITERATIONS = 100_000


def new_secret(nbytes: int = 16) -> str:
    """A fresh random secret (URL-safe text, ``nbytes`` of entropy) from the OS CSPRNG."""
    return _secrets.token_urlsafe(nbytes)


def key_text(secret: str | bytes | None) -> str | bytes:
    """The one rule for key text, in the API, the CLI (``--key``, ``--key-file``, ``ZOO_KEY``) and the app:
    text (or bytes that decode as UTF-8) loses leading and trailing whitespace, so a key typed with a
    stray space or read from a file with its final newline is the same key everywhere. Other bytes (a
    binary key file) are kept as they are. None (an empty form field) is the empty key ``""``."""
    if secret is None:
        return ""
    if isinstance(secret, (bytes, bytearray)):
        try:
            return bytes(secret).decode("utf-8").strip()
        except UnicodeDecodeError:
            return bytes(secret)
    return str(secret).strip()


def _expand(prk: bytes, info: bytes, length: int) -> bytes:
    """HKDF-Expand (RFC 5869) with HMAC-SHA256."""
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter & 0xFF]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


class Secret:
    """A user secret stretched into a 32-byte master key. ``str(secret)`` shows only the fingerprint."""

    __slots__ = ("_master", "fingerprint")

    def __init__(self, secret: str | bytes):
        if isinstance(secret, Secret):  # pragma: no cover - handled by as_secret
            raise TypeError("already a Secret")
        secret = key_text(secret)
        raw = secret.encode("utf-8") if isinstance(secret, str) else secret
        if len(raw) == 0:
            raise ValueError("the key/secret must not be empty (or only whitespace)")
        self._master = hashlib.pbkdf2_hmac("sha256", raw, _SALT, _ITERATIONS, dklen=32)
        self.fingerprint = "k:" + _expand(self._master, b"fingerprint", 4).hex()

    @classmethod
    def random(cls) -> "Secret":
        """A fresh secret of 32 random bytes from the OS CSPRNG, used as the master key directly: stretching
        slows the guessing of a human secret and adds nothing to 256 random bits, so a keyless run (a
        secret used once and forgotten) does not pay PBKDF2's ~0.05 s per photo."""
        self = object.__new__(cls)
        self._master = _secrets.token_bytes(32)
        self.fingerprint = "k:" + _expand(self._master, b"fingerprint", 4).hex()
        return self

    def derive(self, method: str, face_index: int = 0, purpose: str = "key") -> "KeyMaterial":
        """Key material for ``method``'s ``purpose`` on face number ``face_index`` (0-based)."""
        info = f"{method}|{purpose}|face{int(face_index)}".encode()
        return KeyMaterial(_expand(self._master, info, 32), label=info.decode(), fingerprint=self.fingerprint)

    def __repr__(self) -> str:
        return f"Secret({self.fingerprint})"

    __str__ = __repr__


def as_secret(key: "str | bytes | Secret | None") -> Secret | None:
    if key is None or isinstance(key, Secret):
        return key
    return Secret(key)


@dataclass(frozen=True)
class KeyMaterial:
    """32 bytes of key material for one (method, purpose, face); expands to any length on demand."""

    seed: bytes
    label: str = ""
    fingerprint: str = ""

    def bytes(self, n: int, context: str = "") -> bytes:
        return _expand(self.seed, f"bytes|{context}".encode(), n)

    def uniform(self, dim: int, low: float = -1.0, high: float = 1.0, context: str = "") -> torch.Tensor:
        """``[dim]`` float32 vector, uniform in [low, high) from 32-bit chunks of the key material."""
        raw = self.bytes(4 * dim, f"uniform|{context}")
        ints = struct.unpack(f"<{dim}I", raw)
        u = torch.tensor([i / 2**32 for i in ints], dtype=torch.float64)
        return (low + (high - low) * u).to(torch.float32)

    def normal(self, dim: int, context: str = "") -> torch.Tensor:
        """``[dim]`` float32 vector of standard normals (Box-Muller on the key material)."""
        n = dim + (dim % 2)
        u = self.uniform(n, 0.0, 1.0, f"normal|{context}").to(torch.float64)
        u1 = u[0::2].clamp_min(1e-12)
        u2 = u[1::2]
        r = torch.sqrt(-2.0 * torch.log(u1))
        z = torch.stack([r * torch.cos(2 * math.pi * u2), r * torch.sin(2 * math.pi * u2)], dim=1).reshape(-1)
        return z[:dim].to(torch.float32)

    def generator(self, context: str = "", device: str | torch.device = "cpu") -> torch.Generator:
        """A ``torch.Generator`` seeded from the key material (for large noise tensors)."""
        g = torch.Generator(device=device)
        g.manual_seed(int.from_bytes(self.bytes(8, f"generator|{context}"), "little") & ((1 << 63) - 1))
        return g

    def variant(self, number: int) -> "KeyMaterial":
        """Key material of the privacy guard's variant ``number`` of this face (:mod:`zoo.guard`; 0 = self)."""
        if int(number) == 0:
            return self
        seed = _expand(self.seed, f"guard-variant|{int(number)}".encode(), 32)
        return KeyMaterial(seed, label=f"{self.label}|variant{int(number)}", fingerprint=self.fingerprint)

    def wrong_key(self, number: int = 0) -> "KeyMaterial":
        """Other key material for the same face (HKDF of this one): the privacy guard's stand-in number
        ``number`` (0, 1, ...) for a wrong key (:func:`zoo.guard.wrong_key_probe`). What it recovers is only
        measured, never shown."""
        info = b"guard-wrong-key-probe" + (b"/%d" % number if number else b"")
        return KeyMaterial(_expand(self.seed, info, 32), label=f"{self.label}|wrong-key probe {number}", fingerprint="")

    def carrier_check(self, variant: int = 0) -> int:
        """One byte (0-255) of this face key, for key variant ``variant``: written beside the face's carried code
        (:mod:`zoo.carrier`) so that recovery can tell a wrong key and refuse it."""
        return self.bytes(1, f"carrier key check|variant {int(variant)}")[0]

    def carrier_stream(self, n: int, variant: int = 0, part: str = "code") -> builtins.bytes:
        """``n`` keystream bytes of this face key for key variant ``variant``: a carried code's ``part`` ("latent",
        "code") is XORed with them (:mod:`zoo.carrier`), so that only this key reads it back. HKDF-Expand in
        chunks of 8160 bytes (its limit per info string), one info string per chunk and part."""
        chunk = 255 * 32
        n = int(n)
        return b"".join(self.bytes(min(chunk, n - i), f"carrier stream|variant {int(variant)}|{part}|{i // chunk}") for i in range(0, n, chunk))

    def digits(self, n: int, context: str = "") -> str:
        """``n`` decimal digits (e.g. the 6-digit password of Cao et al.)."""
        value = int.from_bytes(self.bytes(16, f"digits|{context}"), "little")
        return str(value % 10**n).zfill(n)

    def __repr__(self) -> str:
        return f"KeyMaterial({self.label!r}, {self.fingerprint})"
