"""Putting an aligned output crop back into the photo (feathered 5-point mask), and the fail-closed blur of a
face that cannot be processed."""

from __future__ import annotations

import logging

import cv2
import numpy as np

from .alignment import crop_scale, ffhq_template
from .detectors import DetectedFace

log = logging.getLogger(__name__)


#: face-region shape in an aligned crop, in eye distances: centre = eye_avg + MASK_DOWN * eye_to_mouth,
#: half-width MASK_AXES[0], half-height MASK_AXES[1], superellipse exponent MASK_POWER (2 = ellipse)
MASK_AXES = (1.0, 1.35)
MASK_DOWN = 0.3
MASK_POWER = 3.0


def face_mask(size: int, landmarks_in_crop: np.ndarray | None = None, feather: float = 0.02, scale: float = 1.0) -> np.ndarray:
    """float32 [size, size] in [0, 1]: the face region (brows to chin, cheek to cheek) of an aligned crop.

    A superellipse ``|u/a|^p + |v/b|^p <= 1`` (rounded rectangle, p = :data:`MASK_POWER`) placed from the
    eye and mouth landmarks (default: :func:`ffhq_template`) so that it roughly fills a face
    detector's box: centre ``eye_avg + MASK_DOWN * eye_to_mouth``, half-axes ``MASK_AXES`` eye distances,
    aligned with the eye line; ``scale`` multiplies both half-axes (the outline and hairline of a small face,
    :data:`zoo.compositing.SMALL_FACE_MASK_SCALE`). The feathering is inside the shape: the mask ramps smoothly
    from 1 to 0 over ``2.5 * feather * size`` pixels and is exactly 0 outside it.
    """
    lm = ffhq_template(size) if landmarks_in_crop is None else np.asarray(landmarks_in_crop, dtype=np.float64).reshape(5, 2)
    eye_avg = (lm[0] + lm[1]) / 2
    mouth_avg = (lm[3] + lm[4]) / 2
    eye_vec = lm[1] - lm[0]
    eye_dist = max(float(np.hypot(*eye_vec)), 1e-6)
    centre = eye_avg + MASK_DOWN * (mouth_avg - eye_avg)
    ux = eye_vec / eye_dist
    uy = np.array([-ux[1], ux[0]])
    a, b = scale * MASK_AXES[0] * eye_dist, scale * MASK_AXES[1] * eye_dist
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    dx, dy = xx - centre[0], yy - centre[1]
    u, v = dx * ux[0] + dy * ux[1], dx * uy[0] + dy * uy[1]
    r = (np.abs(u / a) ** MASK_POWER + np.abs(v / b) ** MASK_POWER) ** (1.0 / MASK_POWER)
    ramp = max(2.5 * feather * size / min(a, b), 1e-6)
    t = np.clip((1.0 - r) / ramp, 0.0, 1.0)
    mask = (t * t * (3 - 2 * t)).astype(np.float32)  # smoothstep
    border = max(1, int(round(0.01 * size)))
    mask[:border], mask[-border:], mask[:, :border], mask[:, -border:] = 0, 0, 0, 0
    return mask


def alpha_blend(canvas: np.ndarray, new: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """uint8 ``round(canvas * (1 - mask) + new * mask)`` ([H, W, 3] each) for ``mask`` float32 [H, W] in [0, 1]:
    ``canvas`` where the mask is 0 and ``new`` where it is 1, bit for bit."""
    mask = np.ascontiguousarray(mask, dtype=np.float32)
    return cv2.blendLinear(np.ascontiguousarray(canvas, dtype=np.uint8), np.ascontiguousarray(new, dtype=np.uint8), 1.0 - mask, mask)


def paste_back(
    canvas: np.ndarray,
    crop: np.ndarray,
    matrix: np.ndarray,
    feather: float = 0.02,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """Put a processed aligned ``crop`` back into a copy of ``canvas`` (uint8 [H, W, 3]).

    The crop is warped back with the inverse of ``matrix`` (image -> crop) and blended through the
    warped face mask (``mask`` [S, S] float, default :func:`face_mask` with ``feather``). Pixels where
    the warped mask is 0 are returned exactly as they were.
    """
    out = np.array(canvas, dtype=np.uint8, copy=True)
    size = crop.shape[0]
    if crop.shape[:2] != (size, size):
        raise ValueError(f"crop must be square, got {crop.shape}")
    mask = face_mask(size, feather=feather) if mask is None else np.asarray(mask, dtype=np.float32)
    inv = cv2.invertAffineTransform(np.asarray(matrix, dtype=np.float64))
    h, w = out.shape[:2]
    ys, xs = np.nonzero(mask > 0)
    if len(xs) == 0:
        return out
    pts = np.array([[xs.min(), ys.min(), 1], [xs.max(), ys.min(), 1], [xs.min(), ys.max(), 1], [xs.max(), ys.max(), 1]], np.float64) @ inv.T
    x0, y0 = np.maximum(np.floor(pts.min(0)).astype(int) - 2, 0)
    x1, y1 = np.minimum(np.ceil(pts.max(0)).astype(int) + 3, [w, h])
    if x1 <= x0 or y1 <= y0:
        return out
    src, m_src = crop, np.asarray(matrix, dtype=np.float64)
    k = crop_scale(m_src)
    if k > 2.0:  # the face is much smaller than the crop: shrink the crop first (area filter)
        f = int(np.floor(k))
        small = max(1, size // f)
        src = cv2.resize(crop, (small, small), interpolation=cv2.INTER_AREA)
        mask = cv2.resize(mask, (small, small), interpolation=cv2.INTER_AREA)
        s = size / small
        from_crop = np.array([[1 / s, 0, 0.5 / s - 0.5], [0, 1 / s, 0.5 / s - 0.5], [0, 0, 1]])
        m_src = (from_crop @ np.vstack([m_src, [0, 0, 1]]))[:2]
    inv_src = cv2.invertAffineTransform(m_src)
    inv_src[:, 2] -= [x0, y0]  # into ROI coordinates
    roi_size = (int(x1 - x0), int(y1 - y0))
    warped = cv2.warpAffine(src, inv_src, roi_size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    wmask = cv2.warpAffine(mask, inv_src, roi_size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    out[y0:y1, x0:x1] = alpha_blend(out[y0:y1, x0:x1], warped, np.clip(wmask, 0, 1))
    return out


# ====================================================================== fail-closed blurring
#: fail-closed blur strength: cells across the face the region is pixelated to before the Gaussian (sigma = face /
#: (cells + 4)); :func:`blur_hard` (a whole aligned crop) takes the face as 0.6 of the crop. Chosen on the tuning
#: photos (``benchmarks/results/blur_strength.md``, 42 faces) by the fewest blurred faces the guard's recognizers
#: still recognize (1 at 3 or 4 cells, 2 at 6), ties to the larger smallest per-recognizer median distance
BLUR_CELLS = 3.0


def _hard_blur(region: np.ndarray, face_size: float, cells: float | None = None) -> np.ndarray:
    """Pixelate to ``cells`` (default :data:`BLUR_CELLS`) cells across the face, then Gaussian blur with sigma =
    face_size / (cells + 4). uint8 [H, W, 3] -> the same."""
    cells = BLUR_CELLS if cells is None else float(cells)
    if not cells > 0:
        raise ValueError(f"blur cells must be > 0, got {cells!r}")
    h, w = region.shape[:2]
    cell = max(1.0, face_size / cells)
    sw, sh = max(1, int(round(w / cell))), max(1, int(round(h / cell)))
    small = cv2.resize(region, (sw, sh), interpolation=cv2.INTER_AREA)
    coarse = cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR)
    return cv2.GaussianBlur(coarse, (0, 0), max(1.0, face_size / (cells + 4.0)), borderType=cv2.BORDER_REPLICATE)


#: the fail-closed blur covers the face's box grown by this fraction of its size on every side
BLUR_EXPAND = 0.35
#: :func:`restore_blurred` feathers the recovered face into the photo over this fraction of the face size inside the
#: blurred rectangle's edge (at least 2 px)
RESTORE_FEATHER = 0.04


def blur_box(shape: tuple[int, ...], face: DetectedFace, expand: float = BLUR_EXPAND) -> tuple[int, int, int, int, float] | None:
    """The rectangle :func:`blur_face` blurs in an image of ``shape`` ``[H, W, ...]``: (x0, y0, x1, y1, face size
    in px), the face's box grown by ``expand`` of its size on every side and covering all landmarks, clipped to
    the image; None where nothing of it is inside."""
    h, w = shape[:2]
    lm = np.asarray(face.landmarks, dtype=np.float64).reshape(-1, 2)
    bx0, by0 = min(face.box[0], lm[:, 0].min()), min(face.box[1], lm[:, 1].min())
    bx1, by1 = max(face.box[2], lm[:, 0].max()), max(face.box[3], lm[:, 1].max())
    size = max(bx1 - bx0, by1 - by0, 8.0)
    x0, y0 = int(max(0, np.floor(bx0 - expand * size))), int(max(0, np.floor(by0 - expand * size)))
    x1, y1 = int(min(w, np.ceil(bx1 + expand * size))), int(min(h, np.ceil(by1 + expand * size)))
    return (x0, y0, x1, y1, float(size)) if x1 > x0 and y1 > y0 else None


def blur_face(canvas: np.ndarray, face: DetectedFace, expand: float = BLUR_EXPAND, cells: float | None = None) -> np.ndarray:
    """Fail-closed path: a copy of ``canvas`` with the face's :func:`blur_box` hard-blurred (``cells`` across the
    face, default :data:`BLUR_CELLS`) so that no identity survives."""
    out = np.array(canvas, dtype=np.uint8, copy=True)
    rect = blur_box(out.shape, face, expand)
    if rect is not None:
        x0, y0, x1, y1, size = rect
        out[y0:y1, x0:x1] = _hard_blur(out[y0:y1, x0:x1], size, cells)
    return out


def restore_blurred(canvas: np.ndarray, crop: np.ndarray, matrix: np.ndarray, face: DetectedFace) -> tuple[np.ndarray, float]:
    """Right-key recovery of a face that was blurred when it was anonymized (:func:`blur_face`; its carried code
    still rode): a copy of uint8 ``canvas`` with the recovered aligned ``crop`` (uint8 [S, S, 3], the whole drawn
    crop: face, hair and surroundings) drawn over the blurred rectangle, where it reaches, feathered over
    :data:`RESTORE_FEATHER` of the face size inside the rectangle's edge. Its mean Lab colour there is moved to the
    blurred rectangle's (a blur keeps the mean colour of what it covers); no sharpness is matched to the blur.
    Pixels outside the rectangle stay bit-identical. Returns (image, the colour shift's CIE76 dE)."""
    out = np.array(canvas, dtype=np.uint8, copy=True)
    rect = blur_box(out.shape, face)
    if rect is None:
        return out, 0.0
    x0, y0, x1, y1, size = rect
    drawn = paste_back(out, crop, matrix, mask=np.ones(crop.shape[:2], np.float32))[y0:y1, x0:x1]
    blurred = out[y0:y1, x0:x1]
    lab_drawn = cv2.cvtColor(drawn.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)
    shift = cv2.cvtColor(blurred.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB).reshape(-1, 3).mean(0) - lab_drawn.reshape(-1, 3).mean(0)
    lab_drawn += shift.astype(np.float32)
    lab_drawn[..., 0] = np.clip(lab_drawn[..., 0], 0, 100)
    moved = np.clip(cv2.cvtColor(lab_drawn, cv2.COLOR_LAB2RGB) * 255.0, 0, 255)
    ramp = max(2.0, RESTORE_FEATHER * size)
    h, w = out.shape[:2]

    def edge_distance(n: int, at_start: bool, at_end: bool) -> np.ndarray:  # px to the nearest edge inside the photo
        i, far = np.arange(n, dtype=np.float32) + 0.5, np.full(n, np.inf, np.float32)
        return np.minimum(far if at_start else i, far if at_end else i[::-1])

    edge_y, edge_x = edge_distance(y1 - y0, y0 == 0, y1 == h), edge_distance(x1 - x0, x0 == 0, x1 == w)
    t = np.clip(np.minimum(edge_y[:, None], edge_x[None, :]) / ramp, 0.0, 1.0)
    alpha = (t * t * (3 - 2 * t))[..., None]
    out[y0:y1, x0:x1] = np.rint(blurred.astype(np.float32) * (1 - alpha) + moved * alpha).astype(np.uint8)
    return out, float(np.linalg.norm(shift))


def blur_hard(rgb: np.ndarray) -> np.ndarray:
    """Fail-closed path for an aligned crop: the whole image hard-blurred (uint8 [H, W, 3])."""
    rgb = np.asarray(rgb, dtype=np.uint8)
    return _hard_blur(rgb, float(max(rgb.shape[:2])) * 0.6)
