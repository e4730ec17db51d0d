"""Six-digit passwords p and the reference library f(p) of Cao et al. (Sec. 4.1): each reference mixes k training identities."""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from ...keys import KeyMaterial, Secret
from .rotation import orient_reference, rotate_identity, unrotate_direction

PASSWORD_SPACE = 10**6

_SIX_DIGITS = re.compile(r"[0-9]{6}")


@dataclass(frozen=True, repr=False)
class PasswordKeyMaterial(KeyMaterial):
    """Key material that carries the user's six-digit password as the paper's p."""

    password: str = ""

    def digits(self, n: int, context: str = "") -> str:
        if n == 6 and self.password:
            return self.password
        return super().digits(n, context)


class SixDigitPassword(Secret):
    """A secret that *is* the paper's six-digit password: every face uses p itself (the fingerprint
    still comes from the zoo KDF, so reports never show p)."""

    __slots__ = ("_password",)

    def __init__(self, password: str):
        if not _SIX_DIGITS.fullmatch(password):
            raise ValueError("a six-digit password has exactly six decimal digits")
        super().__init__(password)
        self._password = password

    def derive(self, method: str, face_index: int = 0, purpose: str = "key") -> KeyMaterial:
        km = super().derive(method, face_index, purpose)
        return PasswordKeyMaterial(km.seed, km.label, km.fingerprint, password=self._password)


def as_personal_secret(key: Any) -> Any:
    """A six-digit string becomes :class:`SixDigitPassword`; anything else is passed on unchanged."""
    if isinstance(key, str) and _SIX_DIGITS.fullmatch(key):
        return SixDigitPassword(key)
    return key


def unrank_combination(rank: int, n: int, k: int) -> list[int]:
    """The ``rank``-th k-subset of range(n) in lexicographic order (combinatorial number system)."""
    total = math.comb(n, k)
    if not 0 <= rank < total:
        raise ValueError(f"rank {rank} outside [0, C({n}, {k}) = {total})")
    out, start = [], 0
    for i in range(k, 0, -1):
        for c in range(start, n):
            count = math.comb(n - c - 1, i - 1)  # subsets whose next element is c
            if rank < count:
                out.append(c)
                start = c + 1
                break
            rank -= count
    return out


def build_reference_base(embeddings: torch.Tensor, labels: Sequence[Any] | None = None, center: bool = False) -> torch.Tensor:
    """Base identities of the library: one unit-norm mean embedding per identity.

    ``embeddings [N, D]`` of training images; ``labels`` (length N) groups images of one identity
    (None: every image is its own identity). Returns ``[M, D]`` in label order of first appearance.
    ``center`` (not in the paper, off by default) subtracts the identities' mean before normalising:
    for an encoder whose space has a large common component (the tiny distilled one: references of
    two passwords at cosine 0.81), so that different passwords point in different directions.
    """
    e = F.normalize(embeddings.float(), dim=1)
    if labels is not None:
        if len(labels) != e.shape[0]:
            raise ValueError("need one label per embedding")
        groups: dict[Any, list[int]] = {}
        for i, lab in enumerate(labels):
            groups.setdefault(lab, []).append(i)
        e = F.normalize(torch.stack([e[idx].mean(0) for idx in groups.values()]), dim=1)
    return F.normalize(e - e.mean(0, keepdim=True), dim=1) if center else e


def mix_identities(base: torch.Tensor, picks: Sequence[Sequence[int]]) -> torch.Tensor:
    """Reference identities f(p): the normalised sum of the picked base identities, one row per pick
    (``base [M, D]`` unit rows, each pick k indices) -> ``[len(picks), D]``."""
    return torch.stack([F.normalize(base[list(idx)].sum(0), dim=0) for idx in picks])


def _library_params(m: int, k: int, seed: int) -> dict[str, Any]:
    total = math.comb(m, k)
    if total < PASSWORD_SPACE:
        raise ValueError(f"a one-to-one password map needs C(M, {k}) >= 10^6 base identities; M = {m} gives {total}")
    rng = random.Random(f"personal-library|{seed}|{m}|{k}")
    while True:
        a = rng.randrange(total // 3, total)
        if math.gcd(a, total) == 1:
            break
    return {"k": k, "identities": m, "multiplier": str(a), "offset": str(rng.randrange(total)), "seed": seed}


# ------------------------------------------------------------------------------------------------
# The method
# ------------------------------------------------------------------------------------------------


class PasswordReferences:
    """The paper's password API and reference library (Sec. 3.3, 4.1), shared by :class:`Personal` and
    its demo variant :class:`PersonalDemo`: six-digit passwords, f(p) as the mix of k base identities,
    and the typical overlap that recovery expects. Needs ``self.config``, ``self.extra``, ``self.device``."""

    # With a wrong password eq. 16-17 return about the negated anonymized direction whatever the password
    # (z_bar' ~ -0.996 u + 0.087 f' at g = 95 degrees): the privacy guard's wrong-key check (on for every
    # reversible method) matters most here: demo, 200 held-out faces, wrong-key recovery over the 4 keys
    # 0.230 -> 0.145 (n = 800; docs/ifadit_personal.md, "The difference, explained").

    # -- public API: six-digit passwords ------------------------------------------------------------
    def anonymize(self, image, key=None, *, aligned: bool = False, **controls: Any):
        """As :meth:`DeidMethod.anonymize`; a key of exactly six digits is used as the paper's password."""
        return super().anonymize(image, as_personal_secret(key), aligned=aligned, **controls)

    def recover(self, image, key, *, aligned: bool = False, **controls: Any):
        return super().recover(image, as_personal_secret(key), aligned=aligned, **controls)

    def run_secret(self, key, stretched=None):
        """A six-digit key stays the paper's password (no KDF); any other key is stretched once."""
        personal = as_personal_secret(key)
        return personal if isinstance(personal, SixDigitPassword) else super().run_secret(key, stretched)

    # -- reference library --------------------------------------------------------------------------
    @property
    def has_library(self) -> bool:
        return "reference_base" in self.extra and "library" in self.config

    def set_reference_library(self, base: torch.Tensor, k: int = 10, seed: int = 0) -> None:
        """Install base identities ``[M, D]`` (unit rows) and the one-to-one password map."""
        base = F.normalize(base.detach().float().cpu(), dim=1).contiguous()
        self.config["library"] = {**dict(self.config.get("library") or {}), **_library_params(base.shape[0], int(k), int(seed))}
        self.extra["reference_base"] = base

    def password_identities(self, password: str) -> list[int]:
        """Indices of the k base identities the password selects (one-to-one over all 10^6 passwords)."""
        if not _SIX_DIGITS.fullmatch(password):
            raise ValueError("passwords are six decimal digits")
        lib = self.config["library"]
        m, k = int(lib["identities"]), int(lib["k"])
        rank = (int(lib["multiplier"]) * int(password) + int(lib["offset"])) % math.comb(m, k)
        return unrank_combination(rank, m, k)

    def reference(self, keys: Sequence[KeyMaterial]) -> torch.Tensor:
        """f(p) for each face's password: the normalised mix of its k base identities -> [N, D]."""
        if not self.has_library:
            raise RuntimeError(
                "this personal checkpoint has no reference library: build one with `python -m zoo.methods.personal build-library --checkpoint DIR --data ...`"
            )
        return self.password_references([k.digits(6) for k in keys]).to(self.device, self.dtype)

    def password_references(self, passwords: Sequence[str]) -> torch.Tensor:
        """f(p) for six-digit passwords -> [N, D] on the library's device (CPU), float32."""
        return mix_identities(self.extra["reference_base"], [self.password_identities(p) for p in passwords])

    def _typical_overlap(self, embeddings: torch.Tensor, seed: int, passwords: int = 64) -> float:
        """Mean z . f(p) of training faces with the references of ``passwords`` seeded random passwords:
        the overlap A that recovery expects (:func:`unrotate_direction`); ~0 in a well-spread space."""
        rng = random.Random(f"personal-overlap|{seed}")
        refs = self.password_references([f"{rng.randrange(PASSWORD_SPACE):06d}" for _ in range(passwords)])
        return round(float((embeddings @ refs.T).mean()), 6)

    @property
    def overlap_prior(self) -> float | None:
        lib = self.config.get("library") or {}
        return None if lib.get("overlap_prior") is None else float(lib["overlap_prior"])

    @property
    def oriented_reference(self) -> bool:
        """``config["oriented_reference"]`` (default off, the paper's rule): :func:`orient_reference`."""
        return bool(self.config.get("oriented_reference", False))

    def rotated(self, z_id: torch.Tensor, keys: Sequence[KeyMaterial], level: int) -> torch.Tensor:
        """M(z_id, p, d) (eq. 13-14) with each face's password, the reference oriented if configured."""
        ref = self.reference(keys)
        if self.oriented_reference:
            ref = orient_reference(z_id, ref, level)
        return rotate_identity(z_id, ref, level)

    def unrotated(self, u: torch.Tensor, keys: Sequence[KeyMaterial], level: int) -> torch.Tensor:
        """M^-1 (eq. 16-17) from the direction ``u`` of z_new: unit z_bar ``[N, D]``."""
        return unrotate_direction(u, self.reference(keys), level, self.overlap_prior, oriented=self.oriented_reference)
