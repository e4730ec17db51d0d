"""FFHQ alignment: from 5 landmarks to an aligned square crop and back, one implementation for every method.

:func:`align_face` reproduces the FFHQ crop rule (Karras et al., ``ffhq-dataset``
``recreate_aligned_images``; the same rule e4e/pSp use for their 256/1024 px inputs) from the eye
centres and mouth corners: the crop is the square of side ``2*|x|`` centred at
``c = eye_avg + 0.1 * eye_to_mouth``, oriented along ``x = eye_to_eye - rot90(eye_to_mouth)`` with
``|x| = max(2 * |eye_to_eye|, 1.8 * |eye_to_mouth|)``.
:data:`FFHQ_TEMPLATE_512` gives the mean positions of the 5 landmarks in FFHQ 512 px crops (the
``face_template`` of facexlib's ``FaceRestoreHelper``, used by GFPGAN and CodeFormer); scaled by
``size / 512`` it is the template at any size (:func:`ffhq_template`). Landmark order: :mod:`zoo.detectors`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np

#: mean 5-point landmarks of FFHQ-aligned 512 px crops (left eye, right eye, nose, left mouth, right mouth)
FFHQ_TEMPLATE_512 = np.array(
    [
        [192.98138, 239.94708],
        [318.90277, 240.19360],
        [256.63416, 314.01935],
        [201.26117, 371.41043],
        [313.08905, 371.15118],
    ],
    dtype=np.float64,
)


def ffhq_template(size: int) -> np.ndarray:
    """[5, 2] float64: :data:`FFHQ_TEMPLATE_512` for an FFHQ-aligned crop of ``size`` pixels."""
    return FFHQ_TEMPLATE_512 * (size / 512.0)


@dataclass
class AlignedFace:
    """An aligned square crop ``[size, size, 3]`` and the 2x3 affine ``matrix`` mapping image -> crop pixels."""

    crop: np.ndarray
    matrix: np.ndarray
    landmarks: np.ndarray = field(default_factory=lambda: np.zeros((5, 2)))  # landmarks in crop pixels


def ffhq_quad(landmarks5: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FFHQ crop rule from 5 landmarks: returns (centre c, half-side vector x, half-side vector y)."""
    lm = np.asarray(landmarks5, dtype=np.float64).reshape(5, 2)
    eye_left, eye_right, _, mouth_left, mouth_right = lm
    eye_avg = (eye_left + eye_right) / 2
    eye_to_eye = eye_right - eye_left
    mouth_avg = (mouth_left + mouth_right) / 2
    eye_to_mouth = mouth_avg - eye_avg
    x = eye_to_eye - np.flipud(eye_to_mouth) * [-1, 1]
    norm = np.hypot(*x)
    if not np.isfinite(norm) or norm < 1e-6:
        raise ValueError("degenerate landmarks: cannot align this face")
    x = x / norm * max(np.hypot(*eye_to_eye) * 2.0, np.hypot(*eye_to_mouth) * 1.8)
    y = np.flipud(x) * [-1, 1]
    c = eye_avg + eye_to_mouth * 0.1
    return c, x, y


def similarity_lstsq(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Least-squares similarity (Umeyama 1991, no reflection) mapping src [N,2] -> dst [N,2]; 2x3."""
    mu_s, mu_d = src.mean(0), dst.mean(0)
    s, d = src - mu_s, dst - mu_d
    cov = d.T @ s / len(src)
    u, sig, vt = np.linalg.svd(cov)
    fix = np.diag([1.0, np.sign(np.linalg.det(u) * np.linalg.det(vt))])
    rot = u @ fix @ vt
    scale = np.trace(np.diag(sig) @ fix) / (s**2).sum(1).mean()
    t = mu_d - scale * rot @ mu_s
    return np.hstack([scale * rot, t[:, None]])


def alignment_matrix(landmarks5: np.ndarray, size: int, mode: str = "ffhq") -> np.ndarray:
    """2x3 image -> crop affine for a ``size`` px crop.

    ``mode="ffhq"``: the FFHQ rule (:func:`ffhq_quad`), as e4e/pSp crops are made. ``mode="template"``:
    least-squares similarity of all 5 points onto :func:`ffhq_template` (GFPGAN-style).
    """
    lm = np.asarray(landmarks5, dtype=np.float64).reshape(5, 2)
    if not np.isfinite(lm).all():
        raise ValueError("landmarks contain non-finite values")
    if mode == "template":
        return similarity_lstsq(lm, ffhq_template(size))
    if mode != "ffhq":
        raise ValueError(f"unknown alignment mode {mode!r} (ffhq | template)")
    c, x, y = ffhq_quad(lm)
    k = size / (2.0 * np.hypot(*x))  # crop pixels per image pixel
    u, v = x / np.hypot(*x), y / np.hypot(*y)
    rot = k * np.stack([u, v])  # rows: crop x axis, crop y axis
    t = np.array([size / 2.0 - 0.5, size / 2.0 - 0.5]) - rot @ c
    return np.hstack([rot, t[:, None]])


def crop_scale(matrix: np.ndarray) -> float:
    """Crop pixels per photo pixel of a 2x3 image -> crop affine (its similarity scale)."""
    return float(np.sqrt(abs(np.linalg.det(np.asarray(matrix)[:, :2]))))


def warp_region(rgb: np.ndarray, m: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 ``[h, w, 3]`` crop (``size`` = (w, h)) of ``rgb`` through the 2x3 image -> crop affine ``m``, bilinear,
    borders reflected. When ``m`` shrinks by more than 2x, the region the crop sees is first reduced by an integer
    factor with an area filter (no aliasing)."""
    out_w, out_h = size
    inv = cv2.invertAffineTransform(m)
    h, w = rgb.shape[:2]
    corners = np.array([[0, 0, 1], [out_w, 0, 1], [0, out_h, 1], [out_w, out_h, 1]], dtype=np.float64) @ inv.T
    x0, y0 = np.floor(corners.min(0)).astype(int) - 2
    x1, y1 = np.ceil(corners.max(0)).astype(int) + 2
    src, m_src = rgb, m
    k = crop_scale(m)
    if k < 0.5 and x1 > 0 and y1 > 0 and x0 < w and y0 < h:
        # pre-shrink the region the crop sees by an integer factor with an area filter
        x0c, y0c, x1c, y1c = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
        f = int(np.floor(1.0 / k))
        roi = rgb[y0c:y1c, x0c:x1c]
        rw, rh = max(1, (x1c - x0c) // f), max(1, (y1c - y0c) // f)
        src = cv2.resize(roi, (rw, rh), interpolation=cv2.INTER_AREA)
        sx, sy = (x1c - x0c) / rw, (y1c - y0c) / rh
        # small pixel p' <- image pixel p: p = (p' + 0.5) * s - 0.5 + offset
        to_img = np.array([[sx, 0, 0.5 * sx - 0.5 + x0c], [0, sy, 0.5 * sy - 0.5 + y0c], [0, 0, 1]])
        m_src = (np.vstack([m, [0, 0, 1]]) @ to_img)[:2]
    return cv2.warpAffine(src, m_src, (out_w, out_h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)


def align_face(rgb: np.ndarray, landmarks5: np.ndarray, size: int, mode: str = "ffhq") -> AlignedFace:
    """Warp the face with ``landmarks5`` to an FFHQ-style ``size`` x ``size`` uint8 crop.

    Areas outside the photo are filled by reflection (as the FFHQ script pads). When the face is
    shrunk by more than 2x the photo region is first reduced with an area filter (no aliasing).
    """
    m = alignment_matrix(landmarks5, size, mode)
    crop = warp_region(rgb, m, (size, size))
    lm = np.asarray(landmarks5, dtype=np.float64).reshape(5, 2)
    return AlignedFace(crop, m, lm @ m[:, :2].T + m[:, 2])
