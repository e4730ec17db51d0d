"""The report of a run: one :class:`FaceRecord` per face found, in a :class:`DeidResult` with the output image.

Every face the detector found is in the report with what was done to it; the key itself never is (only its
fingerprint).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from PIL import Image

__all__ = ["FaceRecord", "DeidResult"]


@dataclass
class FaceRecord:
    """What happened to one face. Coordinates are input-image pixels."""

    index: int
    box: list[float]  # [x0, y0, x1, y1]
    score: float
    landmarks: list[list[float]]  # 5 x [x, y]: left eye, right eye, nose, left mouth, right mouth
    #: "processed" | "fallback_blur" (the method failed) | "guard_blur" (zoo.guard) | "key_mismatch" (recover: the key
    #: does not reproduce the face's carried key check) | "no_code" (recover: the face carries no code, e.g. a JPEG
    #: copy); after "key_mismatch" or "no_code" nothing was recovered and the face is left as it was
    status: str = "processed"
    error: str | None = None
    key_fingerprint: str | None = None
    latent_carried: bool | None = None  # reversible methods: the whole anonymized code rode in the image (zoo.carrier)
    guard: dict | None = None  # privacy guard (zoo.guard): SFace, FaceRes and MobileFace distances, key variant kept, blurred or not
    action: str | None = None  # what was done to the face in photo pixels (methods with anonymize_in_photo)
    composite: dict | None = None  # how the new face was put into the photo (zoo.compositing): mask, colour, sharpness, blend


@dataclass
class DeidResult:
    """An anonymized (or recovered) image with its report. ``np.asarray(result)`` gives uint8 HxWx3."""

    image: Image.Image
    method: str
    operation: str  # "anonymize" | "recover"
    faces: list[FaceRecord] = field(default_factory=list)
    key_fingerprint: str | None = None
    controls: dict[str, Any] = field(default_factory=dict)
    aligned_input: bool = False
    seconds: float = 0.0
    weights: str | None = None  # which weights produced it (e.g. the demo-checkpoint label)

    @property
    def fallbacks(self) -> list[int]:
        return [f.index for f in self.faces if f.status != "processed"]

    def report(self) -> dict[str, Any]:
        """JSON-serialisable report: faces, boxes, method, key fingerprint, fallbacks (never the key)."""
        return {
            "method": self.method,
            "operation": self.operation,
            "image_size": list(self.image.size),
            "faces_found": len(self.faces),
            "faces": [asdict(f) for f in self.faces],
            "fallbacks": self.fallbacks,
            "key_fingerprint": self.key_fingerprint,
            "controls": self.controls,
            "aligned_input": self.aligned_input,
            "weights": self.weights,
            "seconds": round(self.seconds, 4),
        }

    def __array__(self, dtype=None, copy=None):
        arr = np.asarray(self.image.convert("RGB"))
        return arr.astype(dtype) if dtype is not None else arr
