"""Sharpness and grain matching, step 3 of compositing (:mod:`zoo.compositing`): a new face brought to the
sharpness and grain of the photo it is drawn into.

:func:`sharpness_target` reads the original's Laplacian variance and robust noise level inside a region once;
:meth:`SharpnessTarget.apply` then blurs a new face that is sharper, or gives a smoother one the grain it lacks and
an unsharp mask just strong enough (:func:`match_sharpness` does both in one call).

All images are uint8 RGB [H, W, 3]; masks float32 weights or bool, [H, W].
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np

#: pixels around a mask's support that :func:`match_sharpness` reads: more than the reach of its widest filter
#: (the 3x3 Laplacian on a Gaussian blur of sigma <= 4, whose 8-bit kernel reaches 12 px)
SUPPORT_MARGIN = 16
#: sharpness ratio (Laplacian variance, new / original) accepted without change
SHARPNESS_BAND = (0.8, 1.25)
#: the strongest unsharp mask :func:`match_sharpness` applies (amount of the 1 px detail added back)
MAX_UNSHARP = 3.0


def weighted_stats(values: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mask-weighted mean and standard deviation per channel of ``values`` ``[H,W,C]`` (or ``[H,W]``) under
    ``mask`` (weights or bool, ``[H,W]``), in float64; only the pixels of non-zero weight are read (zeros if none).
    A bool mask skips the weighting (the same numbers: every weight is 1)."""
    mask = np.asarray(mask)
    values = np.asarray(values)
    if mask.dtype == bool and values.dtype in (np.uint8, np.float32, np.float64) and (values.ndim == 2 or values.shape[2] <= 4):
        if not mask.any():
            return np.zeros(values.shape[2] if values.ndim == 3 else 1), np.zeros(values.shape[2] if values.ndim == 3 else 1)
        mean, sd = cv2.meanStdDev(values, mask=mask.view(np.uint8))
        return mean.ravel(), sd.ravel()
    flat = values.reshape(mask.size, -1)
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


def laplacian_variance(rgb: np.ndarray, mask: np.ndarray) -> float:
    """Mask-weighted variance of the grey Laplacian (a sharpness measure; higher is sharper)."""
    grey = cv2.cvtColor(np.asarray(rgb, dtype=np.uint8), cv2.COLOR_RGB2GRAY).astype(np.float32)
    return float(weighted_stats(cv2.Laplacian(grey, cv2.CV_32F, ksize=3), mask)[1][0] ** 2)


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
    _unit_grain: dict = field(default_factory=dict, repr=False, compare=False)  # (shape, seed) -> N(0, 1) float32 [h, w, 1]

    def unit_grain(self, shape: tuple[int, int], seed: int) -> np.ndarray:
        """Seeded standard-normal grain, float32 [h, w, 1], made once per shape and seed."""
        key = (tuple(shape), int(seed))
        if key not in self._unit_grain:
            self._unit_grain[key] = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)[..., None]
        return self._unit_grain[key]

    def apply(self, new: np.ndarray, seed: int = 0) -> tuple[np.ndarray, str]:
        """uint8 ``new`` (the shape of the reference) brought to the target's sharpness inside the box (outside it
        ``new`` is returned as it is): blurred when its Laplacian variance is above :data:`SHARPNESS_BAND`; when
        below, given the grain it lacks (see :func:`noise_level`) and, if still below, an unsharp mask (radius 1 px)
        just strong enough (:func:`_unsharp_amount`). The grain is seeded (``seed``): the same inputs give the same
        output. Returns (image, what was done)."""
        box, part_mask, target = self.box, self.mask, self.variance
        out = np.array(new, dtype=np.uint8, copy=True)
        part = np.ascontiguousarray(out[box])
        have = laplacian_variance(part, part_mask)
        if target <= 0 or SHARPNESS_BAND[0] * target <= have <= SHARPNESS_BAND[1] * target:
            return out, "kept"
        if have > target:
            sigma = _bisect(lambda s: laplacian_variance(cv2.GaussianBlur(part, (0, 0), s), part_mask) > target, 0.0, 4.0)
            out[box] = cv2.GaussianBlur(part, (0, 0), sigma, borderType=cv2.BORDER_REPLICATE)
            return out, f"blurred (sigma={sigma:.2f})"
        # smoother than the photo: first the photo's grain (its robust noise level), then, if the edges are still
        # softer, an unsharp mask under the grain
        grain_sigma = float(np.sqrt(max(self.noise**2 - noise_level(part, part_mask) ** 2, 0.0)))
        grain = self.unit_grain(part.shape[:2], seed) * np.float32(grain_sigma)
        base = part.astype(np.float32)
        detail = base - cv2.GaussianBlur(base, (0, 0), 1.0, borderType=cv2.BORDER_REPLICATE)
        grained = base + grain

        def render(amount: float) -> np.ndarray:  # uint8 of grained + amount * detail, rounded and clipped
            mixed = cv2.scaleAdd(detail, float(amount), grained)
            return cv2.convertScaleAbs(np.maximum(mixed, 0.0, out=mixed))

        done = []
        if grain_sigma >= 0.5:
            done.append(f"grain (sigma={grain_sigma:.2f})")
        rendered = render(0.0)
        at_zero = laplacian_variance(rendered, part_mask)
        if at_zero < SHARPNESS_BAND[0] * target:
            amount, rendered = _unsharp_amount(render, grained, detail, part_mask, target, at_zero)
            done.append(f"unsharp (amount={amount:.2f})")
        out[box] = rendered
        return out, ", ".join(done) or "kept"


#: :func:`_unsharp_amount` takes the amount its model predicts when the rendered face lands this close (relative) to
#: the target Laplacian variance; otherwise it bisects
UNSHARP_MODEL_TOLERANCE = 0.05


def _unsharp_amount(
    render: Callable[[float], np.ndarray], grained: np.ndarray, detail: np.ndarray, mask: np.ndarray, target: float, at_zero: float
) -> tuple[float, np.ndarray]:
    """(amount, ``render(amount)``): the unsharp amount in [0, :data:`MAX_UNSHARP`] at which ``render(amount)``
    (uint8 of ``grained + amount * detail``, float32 [h, w, 3]) reaches the Laplacian variance ``target`` inside
    ``mask``; ``at_zero``: its variance at amount 0. The Laplacian is linear, so before rounding the variance is a
    quadratic in the amount, ``at_zero + 2 a c01 + a^2 c11`` (rounding and clipping add a near-constant offset, read
    at 0); its root is taken when the rendered face lands within :data:`UNSHARP_MODEL_TOLERANCE` of the target, else
    the amount is bisected. MAX_UNSHARP when even that stays below the target."""
    lap0 = cv2.Laplacian(cv2.cvtColor(grained, cv2.COLOR_RGB2GRAY), cv2.CV_32F, ksize=3)
    lap1 = cv2.Laplacian(cv2.cvtColor(detail, cv2.COLOR_RGB2GRAY), cv2.CV_32F, ksize=3)
    sd = weighted_stats(np.stack([lap0, lap1, lap0 + lap1], axis=-1), mask)[1]
    c11 = sd[1] ** 2
    c01 = (sd[2] ** 2 - sd[0] ** 2 - c11) / 2
    disc = c01 * c01 - c11 * (at_zero - target)
    if c11 > 1e-9 and disc >= 0:
        amount = float(np.clip((-c01 + np.sqrt(disc)) / c11, 0.0, MAX_UNSHARP))
        rendered = render(amount)
        reached = laplacian_variance(rendered, mask)
        if abs(reached - target) <= UNSHARP_MODEL_TOLERANCE * target or (amount == MAX_UNSHARP and reached < target):
            return amount, rendered
    amount = _bisect(lambda a: laplacian_variance(render(a), mask) < target, 0.0, MAX_UNSHARP)
    return amount, render(amount)


def sharpness_target(reference: np.ndarray, mask: np.ndarray) -> SharpnessTarget:
    """What :func:`match_sharpness` brings a new face to: ``reference``'s (uint8 [H, W, 3]) Laplacian variance and
    grain inside ``mask`` ([H, W]), measured on the mask's support and the :data:`SUPPORT_MARGIN` px around it."""
    box = support_box(mask, SUPPORT_MARGIN)
    part_mask = np.asarray(mask)[box]
    return SharpnessTarget(box, part_mask, laplacian_variance(reference[box], part_mask), noise_level(reference[box], part_mask))


def match_sharpness(new: np.ndarray, reference: np.ndarray, mask: np.ndarray, seed: int = 0) -> tuple[np.ndarray, str]:
    """uint8 ``new`` brought to ``reference``'s sharpness inside ``mask`` (:func:`sharpness_target`,
    :meth:`SharpnessTarget.apply`). Returns (image, what was done)."""
    return sharpness_target(reference, mask).apply(new, seed)


def support_box(mask: np.ndarray, margin: int) -> tuple[slice, slice]:
    """Row and column slices of the bounding box of ``mask > 0`` grown by ``margin`` px, clipped to the mask; the
    whole mask where it is empty."""
    rect = cv2.boundingRect((np.asarray(mask) > 0).view(np.uint8))
    if rect[2] == 0:
        return slice(None), slice(None)
    return grown_box(rect, margin, np.asarray(mask).shape[:2])


def grown_box(rect: Sequence[int], margin: int, shape: tuple[int, ...]) -> tuple[slice, slice]:
    """Row and column slices of the pixel rectangle ``rect`` (x, y, width, height, as ``cv2.boundingRect``) grown by
    ``margin`` px on every side and clipped to an image of ``shape`` (H, W, ...): at least one pixel, also for a
    rectangle outside the image."""
    x, y, bw, bh = (int(v) for v in rect)
    h, w = shape[:2]
    x0, y0 = min(max(x - margin, 0), w - 1), min(max(y - margin, 0), h - 1)
    return slice(y0, min(max(y + bh + margin, y0 + 1), h)), slice(x0, min(max(x + bw + margin, x0 + 1), w))


def _bisect(below: Callable[[float], bool], lo: float, hi: float, steps: int = 10) -> float:
    """The point in [lo, hi] where ``below`` turns False (``below`` monotone: True at lo); ``hi`` where it is
    still True there."""
    if below(hi):
        return hi
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
    grey = cv2.cvtColor(np.asarray(rgb, dtype=np.uint8), cv2.COLOR_RGB2GRAY)
    lap = cv2.Laplacian(grey, cv2.CV_16S, ksize=1)[np.asarray(mask) > 0.5].astype(np.int64)  # 4-neighbour kernel
    if lap.size == 0:
        return 0.0
    twice_median = _twice_median(lap)  # integers: medians from counts, exact
    return float(1.4826 * (_twice_median(np.abs(2 * lap - twice_median)) / 4.0) / np.sqrt(20.0))


def _twice_median(values: np.ndarray) -> int:
    """Twice the median of non-empty int64 ``values`` (the mean of the two middle ones for an even count), from
    their counts: an exact integer."""
    low = int(values.min())
    counts = np.cumsum(np.bincount(values - low))
    n = int(counts[-1])
    lower = int(np.searchsorted(counts, (n - 1) // 2 + 1))  # the ((n-1)//2)-th smallest (0-based)
    upper = int(np.searchsorted(counts, n // 2 + 1))
    return lower + upper + 2 * low
