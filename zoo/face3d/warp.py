"""Piecewise-affine warping over a triangle mesh (OpenCV rasterisation + one ``cv2.remap``).

For every pixel of the output, the destination triangle that covers it (rasterised with
``cv2.fillConvexPoly`` at 1/16 px precision) gives the affine map back into the source image, so the
whole warp is one bilinear resampling: no seams between triangles (neighbouring affine maps agree on
their shared edge) and pixels outside the mesh are left where they are.
"""

from __future__ import annotations

import cv2
import numpy as np

__all__ = ["triangle_index_map", "piecewise_affine_maps", "warp_image", "polygon_mask"]

_SHIFT = 4  # sub-pixel bits for cv2 rasterisation


def _fixed(points: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(points, np.float64) * (1 << _SHIFT)).astype(np.int32)


def triangle_index_map(vertices: np.ndarray, triangles: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """int32 ``[H, W]``: index of the triangle covering each pixel centre, -1 where none does."""
    h, w = size
    idx = np.full((h, w), -1, np.int32)
    pts = _fixed(vertices)
    for t, tri in enumerate(np.asarray(triangles)):
        cv2.fillConvexPoly(idx, pts[tri], int(t), lineType=cv2.LINE_8, shift=_SHIFT)
    return idx


def _affines(src: np.ndarray, dst: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """``[T, 2, 3]`` affine maps taking each destination triangle onto its source triangle."""
    tri = np.asarray(triangles)
    d = np.concatenate([dst[tri], np.ones((len(tri), 3, 1))], axis=2)  # [T, 3, 3] rows (x, y, 1)
    s = src[tri]  # [T, 3, 2]
    det = np.linalg.det(d)
    ok = np.abs(det) > 1e-9
    out = np.zeros((len(tri), 2, 3))
    out[:, 0, 0] = out[:, 1, 1] = 1.0  # degenerate triangles cover no pixel; identity is a safe filler
    if ok.any():
        sol = np.linalg.solve(d[ok], s[ok])  # [k, 3, 2]: d @ sol = s
        out[ok] = sol.transpose(0, 2, 1)
    return out


def piecewise_affine_maps(src: np.ndarray, dst: np.ndarray, triangles: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Backward maps for :func:`cv2.remap`: ``(map_x, map_y)`` float32 ``[H, W]`` and ``covered`` bool ``[H, W]``.

    ``src``/``dst`` are ``[V, 2]`` vertex positions (x, y) in source / output pixels; pixels outside
    every destination triangle map to themselves.
    """
    h, w = size
    src = np.asarray(src, np.float64)
    dst = np.asarray(dst, np.float64)
    idx = triangle_index_map(dst, triangles, size)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    map_x, map_y = xs.copy(), ys.copy()
    covered = idx >= 0
    if covered.any():
        a = _affines(src, dst, triangles)[idx[covered]]  # [P, 2, 3]
        x, y = xs[covered], ys[covered]
        map_x[covered] = a[:, 0, 0] * x + a[:, 0, 1] * y + a[:, 0, 2]
        map_y[covered] = a[:, 1, 0] * x + a[:, 1, 1] * y + a[:, 1, 2]
    return map_x.astype(np.float32), map_y.astype(np.float32), covered


def warp_image(image: np.ndarray, src: np.ndarray, dst: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """Warp ``image`` (``[H, W, C]``, any dtype cv2 accepts) so that mesh vertices ``src`` land on ``dst``.

    Bilinear resampling, reflected borders; same size and dtype out.
    """
    h, w = image.shape[:2]
    mx, my, _ = piecewise_affine_maps(src, dst, triangles, (h, w))
    return cv2.remap(image, mx, my, interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)


def polygon_mask(points: np.ndarray, size: tuple[int, int], feather: float = 0.0) -> np.ndarray:
    """float32 ``[H, W]`` in [0, 1]: the filled polygon ``points`` ``[P, 2]``, optionally softened by a
    Gaussian of sigma ``feather`` pixels (kept at 1 deep inside and 0 far outside)."""
    h, w = size
    m = np.zeros((h, w), np.float32)
    cv2.fillPoly(m, [_fixed(points)], 1.0, lineType=cv2.LINE_AA, shift=_SHIFT)
    if feather > 0:
        m = cv2.GaussianBlur(m, (0, 0), float(feather), borderType=cv2.BORDER_CONSTANT)
    return np.clip(m, 0.0, 1.0)
