"""The controls of the demo methods that shape the GAN inversion of the original face, and :class:`InversionFit`,
the one value they make that :meth:`zoo.methods.latent_demo.LatentDemoMethod.encode` takes."""

from __future__ import annotations

from dataclasses import dataclass

from ..inversion import DEFAULT_FACE_WEIGHT, DEFAULT_STEPS
from .base import Control

__all__ = ["REFINE_CONTROL", "IDENTITY_REFINE_CONTROL", "IDENTITY_CHECK_CONTROL", "FACE_FIT_CONTROL", "FIT_CONTROLS", "InversionFit", "ENCODER_ONLY"]

REFINE_CONTROL = Control(
    "refine_steps", "int", DEFAULT_STEPS, 0, 1000, "latent refinement steps when re-encoding a face (0 = inversion encoder alone; more = closer fit, slower)"
)
#: The identity-aware pass (zoo.nn.dcgan.refine_latent with SFace's identity term). After the
#: ``refine_steps`` pixel steps, a face whose reconstruction SFace puts below ``identity_check`` cosine to
#: the input is inverted again, from the encoder's code, with ``identity_steps`` (config, default 40) steps
#: that add the identity term at weight ``identity_refine``. On the packaged photos' 7 faces the pixel fit leaves SFace cosine -0.003..0.384;
#: on 60 held-out generated faces 0.42..0.92, so at 0.4 the pass runs on real faces, and generated faces
#: keep the pixel fit and its speed. Real photos' recovery then moves back toward the person
#: (benchmarks/photo_recovery.py, docs/dbaf_hford.md), at the cost benchmarks/demo_speed.py measures.
IDENTITY_REFINE_CONTROL = Control(
    "identity_refine",
    "float",
    1.0,
    0.0,
    10.0,
    "weight of the identity (SFace) term in the extra refinement of faces the pixel fit leaves far in identity (0 = pixels only)",
)
IDENTITY_CHECK_CONTROL = Control(
    "identity_check",
    "float",
    0.4,
    0.0,
    1.0,
    "SFace cosine between face and pixel fit below which the identity-aware refinement runs (0 = never, 1 = every face)",
)
#: The face-region term of the W+ refinement (:func:`zoo.inversion.reconstruction_loss`: the pixel loss again inside
#: the face, brows to chin, at this weight). Its default and ``refine_steps``'s are ``zoo reconstruct``'s fit (40:3). Without it
#: (``face_fit=0``, 20 steps) the identity term can pull the fit to a face SFace matches that is not a face (a melted
#: nose, doubled eyes), and the right key gives that back. On the 42 tuning faces (``benchmarks/method_inversion.py``,
#: ``benchmarks/results/method_inversion_tuning_all_faces.md``) 40:3 against 20:0 gives back 2-4 more faces within the
#: guard's lines and 2.2-3.1 dB more face-box PSNR for about 1.7x the time per face; on the held-out photos x 7
#: transforms dlib matches 6 of 304 face runs at both and the guard blurs 44 against 41
#: (``benchmarks/results/fail_closed_fit_40_3.md``). W+ tier only.
FACE_FIT_CONTROL = Control(
    "face_fit",
    "float",
    DEFAULT_FACE_WEIGHT,
    0.0,
    10.0,
    "weight of the face-region term in the refinement (W+ only; 0 = whole crop only, faster with fewer refine_steps but can draw a non-face)",
)
#: the demo methods' controls that shape the GAN inversion of a face (every one is passed to :meth:`encode`)
FIT_CONTROLS = (REFINE_CONTROL, IDENTITY_REFINE_CONTROL, IDENTITY_CHECK_CONTROL, FACE_FIT_CONTROL)


@dataclass(frozen=True)
class InversionFit:
    """How a face is inverted into a code: the four fit controls' values (defaults: the encoder alone, no term on).

    ``refine_steps``: refinement steps after the encoder; ``identity_refine``: weight of SFace's identity term;
    ``identity_check``: SFace cosine below which that term applies (0 = never, 1 = every face); ``face_fit``:
    weight of the face-region pixel term (W+ only)."""

    refine_steps: int = 0
    identity_refine: float = 0.0
    identity_check: float = 0.0
    face_fit: float = 0.0

    def __post_init__(self) -> None:
        for name, cast in (("refine_steps", int), ("identity_refine", float), ("identity_check", float), ("face_fit", float)):
            object.__setattr__(self, name, cast(getattr(self, name)))

    @property
    def identity_weight(self) -> float:
        """The identity term's weight where the check is on, else 0."""
        return self.identity_refine if self.identity_check > 0 else 0.0

    def cache_tag(self) -> bytes:
        """These settings as bytes, for keys of a cache of codes (two fits share codes only when every value agrees)."""
        return f"{self.refine_steps}|{self.identity_refine!r}|{self.identity_check!r}|{self.face_fit!r}".encode("ascii")


#: the inversion encoder's estimate alone (no refinement)
ENCODER_ONLY = InversionFit()
