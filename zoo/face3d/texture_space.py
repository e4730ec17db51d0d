"""The linear identity *texture* space of the ``mesh`` head model, and the command that learns it.

The shape space (:mod:`zoo.face3d.shape_space`) changes only where the face's landmarks sit; a face
recogniser still sees the person's own skin, eyes, brows and lips. This space makes appearance part
of the identity code, learned the same way as the shape space, in the mesh's own frame:

* **Texture frame.** The mean shape's mesh (68 landmarks + 8 forehead/temple points + anchor ring,
  the stored triangulation) placed in a ``size`` x ``size`` image by a fixed similarity. A face's
  texture is its image warped piecewise-affinely from its measured mesh onto that frame
  (antialiased), read inside the face polygon (:data:`zoo.face3d.landmarks.FACE_OUTLINE`): ``P``
  pixels x 3 channels in [-1, 1].
* **Illumination, kept as appearance** (never perturbed): per channel, the least-squares plane
  ``a + b u + c v`` over the face (overall colour and a linear shading gradient; ``u, v`` in [-1, 1]).
  It is subtracted before everything below and added back when rendering, so a new face keeps the
  input's skin tone and lighting and fits its neck, ears and hair.
* **Expression and pose, kept as appearance** (never perturbed): an orthonormal basis ``B_exp``
  (``[3P, 8]``) of the directions along which the training textures move with the eight landmark
  measurements of the shape space (:func:`zoo.face3d.shape_space.nuisance_measures`: mouth opening,
  smile, eye openings, brow raises, yaw and pitch proxies), by least-squares regression. An open
  mouth, closed eyes or the shading of a turned head therefore stay with the input.
* **Identity** ``B_id`` (``[3P, K]``): PCA of the textures after projecting out the nuisance basis;
  ``z_tex = clip(B_id^T d / tex_scale, -1, 1)`` with ``tex_scale`` = 3 sigma of each component, like
  the shape code. The texture that renders is ``mean + B_id (z_tex * tex_scale) + B_exp z_texexp``
  plus the illumination: the input's own detail outside the K components (the residual) is dropped,
  as the paper's parametric re-render drops it; the keyed noise of eq. 3 then moves ``z_tex``.

Command (deterministic for a seed; two runs write identical files)::

    python -m zoo.face3d build-texture-space --n 2000 --seed 0 --out zoo/face3d/data/mesh_texture_space.safetensors

Training textures: the same synthetic faces (``zoo.synthetic``, 256 px) as the shipped shape space,
each also mirrored (the frame is symmetric), landmark failures dropped as Procrustes outliers
(:func:`zoo.face3d.shape_space.inlier_mask`). Stored in float16 (about 1.6 MB).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import cv2
import numpy as np

from .landmarks import FACE_OUTLINE, N_LANDMARKS, derived_points, mesh_vertices
from .shape_space import ShapeSpace, load_shape_space, load_space_file, nuisance_measures, procrustes_align, save_space_file
from .warp import piecewise_affine_maps, polygon_mask

__all__ = ["TextureSpace", "DEFAULT_TEXTURE_SPACE", "load_texture_space", "build_texture_space", "fit_texture_space", "main_build"]

VERSION = 1
DEFAULT_TEXTURE_SPACE = Path(__file__).resolve().parent / "data" / "mesh_texture_space.safetensors"
FRAME_FILL = 0.94  # the face (68 + derived points) spans this fraction of the texture frame


def frame_similarity(space: ShapeSpace, size: int) -> np.ndarray:
    """``[2, 3]`` similarity placing the shape space's normalised frame in a ``size`` px texture."""
    face = np.concatenate([space.mean, derived_points(space.mean)], 0)
    lo, hi = face.min(0), face.max(0)
    s = FRAME_FILL * size / float((hi - lo).max())
    c = (lo + hi) / 2
    return np.array([[s, 0.0, size / 2 - s * c[0]], [0.0, s, size / 2 - s * c[1]]])


def frame_vertices(space: ShapeSpace, size: int) -> np.ndarray:
    """``[V, 2]`` mesh vertices of the mean shape in texture pixels."""
    m = frame_similarity(space, size)
    v = mesh_vertices(space.mean, space.ring)
    return v @ m[:, :2].T + m[:, 2]


def _plane_design(mask: np.ndarray) -> np.ndarray:
    """``[P, 3]`` rows (1, u, v) of the mask pixels, u/v in [-1, 1] over the frame."""
    t = mask.shape[0]
    ys, xs = np.nonzero(mask)
    u, v = (xs + 0.5) / t * 2 - 1, (ys + 0.5) / t * 2 - 1
    return np.stack([np.ones_like(u), u, v], 1)


def sample_texture(image: np.ndarray, src_vertices: np.ndarray, frame: np.ndarray, triangles: np.ndarray, size: int) -> np.ndarray:
    """float32 ``[size, size, 3]``: ``image`` (float ``[H, W, 3]``) warped from its mesh ``src_vertices``
    onto the texture frame ``frame``, low-passed first so a large face is not aliased."""
    mx, my, _ = piecewise_affine_maps(src_vertices, frame, triangles, (size, size))
    span_src = float(np.ptp(src_vertices[:N_LANDMARKS], axis=0).max())
    span_dst = float(np.ptp(frame[:N_LANDMARKS], axis=0).max())
    sigma = 0.5 * span_src / max(span_dst, 1e-6)
    img = np.ascontiguousarray(image, np.float32)
    if sigma > 0.6:
        img = cv2.GaussianBlur(img, (0, 0), sigma)
    return cv2.remap(img, mx, my, interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)


@dataclass
class TextureSpace:
    """The learned texture model (module docstring). Arrays are float32 numpy in memory."""

    size: int
    mask: np.ndarray  # [size, size] bool: face pixels of the frame
    mean: np.ndarray  # [3P]  (pixel-major, channel-minor: P rows of RGB)
    id_basis: np.ndarray  # [3P, K]
    id_scale: np.ndarray  # [K]
    exp_basis: np.ndarray  # [3P, E]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._design = _plane_design(self.mask)
        self._pinv = np.linalg.pinv(self._design)

    @property
    def id_dim(self) -> int:
        return int(self.id_basis.shape[1])

    @property
    def exp_dim(self) -> int:
        return int(self.exp_basis.shape[1])

    # ---------------------------------------------------------------- codes
    def split_illumination(self, texture: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``[size, size, 3]`` texture -> (illumination-free face vector ``[3P]``, plane coefficients ``[3, 3]``)."""
        pix = np.asarray(texture, np.float64)[self.mask]  # [P, 3]
        coef = self._pinv @ pix  # [3 (1,u,v), 3 channels]
        return (pix - self._design @ coef).reshape(-1), coef

    def encode(self, texture: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Texture in the frame -> (``z_tex [K]`` in [-1, 1], ``z_texexp [E]``, illumination ``[3, 3]``, unclipped z)."""
        d, coef = self.split_illumination(texture)
        d = d - self.mean
        raw = (self.id_basis.T @ d) / self.id_scale
        return np.clip(raw, -1.0, 1.0), self.exp_basis.T @ d, coef, raw

    def decode(self, z_tex: np.ndarray, z_texexp: np.ndarray, illumination: np.ndarray) -> np.ndarray:
        """Codes -> float32 ``[size, size, 3]`` texture (zero outside the mask)."""
        d = self.mean + self.id_basis @ (np.asarray(z_tex, np.float64) * self.id_scale) + self.exp_basis @ np.asarray(z_texexp, np.float64)
        pix = d.reshape(-1, 3) + self._design @ np.asarray(illumination, np.float64)
        out = np.zeros((self.size, self.size, 3), np.float32)
        out[self.mask] = pix
        return out

    # ---------------------------------------------------------------- I/O
    def tensors(self, prefix: str = "") -> dict[str, Any]:
        """The arrays as torch tensors (bases in float16) for safetensors / a method's extra tensors."""
        import torch

        t = lambda a, dt: torch.from_numpy(np.ascontiguousarray(a, dtype=dt))  # noqa: E731
        return {
            f"{prefix}mask": t(self.mask, np.uint8),
            f"{prefix}mean": t(self.mean, np.float16),
            f"{prefix}id_basis": t(self.id_basis, np.float16),
            f"{prefix}id_scale": t(self.id_scale, np.float32),
            f"{prefix}exp_basis": t(self.exp_basis, np.float16),
        }

    @classmethod
    def from_tensors(cls, tensors: dict[str, Any], prefix: str = "", meta: dict[str, Any] | None = None) -> "TextureSpace":
        get = lambda k: tensors[f"{prefix}{k}"].detach().cpu().numpy()  # noqa: E731
        mask = get("mask").astype(bool)
        return cls(
            size=int(mask.shape[0]),
            mask=mask,
            mean=get("mean").astype(np.float32),
            id_basis=get("id_basis").astype(np.float32),
            id_scale=get("id_scale").astype(np.float32),
            exp_basis=get("exp_basis").astype(np.float32),
            meta=dict(meta or {}),
        )

    @staticmethod
    def has_tensors(tensors: dict[str, Any], prefix: str = "") -> bool:
        return f"{prefix}id_basis" in tensors

    def save(self, path: str | Path) -> Path:
        return save_space_file(self.tensors(), self.meta, path)


def load_texture_space(path: str | Path | None = None) -> TextureSpace:
    """A saved :class:`TextureSpace` (default: the one shipped in ``zoo/face3d/data``)."""
    tensors, meta = load_space_file(Path(path) if path is not None else DEFAULT_TEXTURE_SPACE, "texture")
    return TextureSpace.from_tensors(tensors, meta=meta)


# ----------------------------------------------------------------------------------------- building
def frame_mask(space: ShapeSpace, size: int) -> np.ndarray:
    """bool ``[size, size]``: the face polygon of the mean shape in the texture frame (hard edge, 1 px in)."""
    v = frame_vertices(space, size)
    m = polygon_mask(v[FACE_OUTLINE], (size, size)) > 0.5
    return cv2.erode(m.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)


def fit_texture_space(textures: np.ndarray, shapes: np.ndarray, mask: np.ndarray, components: int = 100, meta: dict[str, Any] | None = None) -> TextureSpace:
    """Learn a :class:`TextureSpace` from float ``[N, S, S, 3]`` frame textures (in [-1, 1]) and their
    ``[N, 68, 2]`` landmark shapes (for the expression/pose measurements). Mirrors are added here."""
    textures = np.asarray(textures, np.float32)
    n, size = len(textures), textures.shape[1]
    if n < 4:
        raise ValueError(f"need at least 4 textures, got {n}")
    from .shape_space import mirror_shapes

    textures = np.concatenate([textures, textures[:, :, ::-1]], 0)
    shapes = np.concatenate([shapes, mirror_shapes(shapes)], 0)
    probe = TextureSpace(
        size,
        mask,
        np.zeros(3 * int(mask.sum()), np.float32),
        np.zeros((3 * int(mask.sum()), 1), np.float32),
        np.ones(1, np.float32),
        np.zeros((3 * int(mask.sum()), 0), np.float32),
    )
    d = np.stack([probe.split_illumination(t)[0] for t in textures]).astype(np.float64)  # [2N, 3P]
    mean = d.mean(0)
    d = d - mean
    aligned, _ = procrustes_align(shapes)
    meas = nuisance_measures(aligned)
    meas = (meas - meas.mean(0)) / meas.std(0).clip(1e-12)
    coef, *_ = np.linalg.lstsq(meas, d, rcond=None)  # [8, 3P]: texture change per measurement
    q, r = np.linalg.qr(coef.T)
    exp_basis = q[:, np.abs(np.diag(r)) > 1e-9]
    exp_basis = exp_basis * np.sign(exp_basis[np.abs(exp_basis).argmax(0), np.arange(exp_basis.shape[1])])
    rest = d - (d @ exp_basis) @ exp_basis.T
    _, sv, vt = np.linalg.svd(rest, full_matrices=False)
    k = min(int(components), len(rest) - 1)
    id_basis = vt[:k].T
    id_basis = id_basis * np.sign(id_basis[np.abs(id_basis).argmax(0), np.arange(k)])
    sigma = sv[:k] / np.sqrt(len(rest) - 1)
    info = dict(meta or {})
    info.update(
        {
            "version": VERSION,
            "textures_used": int(n),
            "mirrored": True,
            "components": k,
            "size": int(size),
            "pixels": int(mask.sum()),
            "nuisance": "shape_space.NUISANCE_NAMES regression",
            "illumination": "per-channel plane a + b u + c v",
            "id_scale": "3 sigma",
            "explained_id_variance": float((sv[:k] ** 2).sum() / (sv**2).sum()),
        }
    )
    return TextureSpace(
        int(size), mask, mean.astype(np.float32), id_basis.astype(np.float32), (3.0 * sigma).astype(np.float32), exp_basis.astype(np.float32), info
    )


def build_texture_space(
    n: int = 2000, seed: int = 0, components: int = 100, size: int = 64, shape_space: ShapeSpace | None = None, progress: bool = False
) -> TextureSpace:
    """The command's work: frame textures of ``n`` synthetic faces (seed ``seed``, 256 px) -> space."""
    from .shape_space import inlier_mask, iter_synthetic_landmarks

    space = shape_space if shape_space is not None else load_shape_space()
    frame = frame_vertices(space, size)
    textures, shapes = [], []
    for _, img, lm in iter_synthetic_landmarks(n, seed, progress=progress):
        _, _, sim, _ = space.encode(lm)
        src = mesh_vertices(lm, space.ring_at(sim))
        textures.append(sample_texture(img.astype(np.float32) / 127.5 - 1.0, src, frame, space.triangles, size))
        shapes.append(lm)
    shapes_a, textures_a = np.stack(shapes), np.stack(textures)
    keep = inlier_mask(shapes_a)
    meta = {
        "source": "zoo.synthetic",
        "n": int(n),
        "seed": int(seed),
        "landmarks": "dlib shape_predictor_68_face_landmarks (YuNet box)",
        "textures_found": int(len(shapes_a)),
        "shape_space": dict(space.meta),
    }
    return fit_texture_space(textures_a[keep], shapes_a[keep], frame_mask(space, size), components, meta)


def main_build(argv: Sequence[str] | None = None) -> Path:
    import argparse

    p = argparse.ArgumentParser(prog="python -m zoo.face3d build-texture-space", description="learn the mesh backend's identity texture space")
    p.add_argument("--n", type=int, default=2000, help="number of synthetic faces")
    p.add_argument("--seed", type=int, default=0, help="synthetic face set")
    p.add_argument("--components", type=int, default=100, help="identity texture components")
    p.add_argument("--size", type=int, default=64, help="texture frame size in pixels")
    p.add_argument("--shape-space", default=None, help="shape space file (default: the shipped one)")
    p.add_argument("--out", default=str(DEFAULT_TEXTURE_SPACE))
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    shape = load_shape_space(a.shape_space) if a.shape_space else None
    space = build_texture_space(a.n, a.seed, a.components, a.size, shape, progress=not a.quiet)
    out = space.save(a.out)
    if not a.quiet:
        print(
            f"[texture-space] {space.meta['textures_used']} textures (x2 mirrored), {space.id_dim} identity components "
            f"({100 * space.meta['explained_id_variance']:.1f}% of the non-nuisance variance), {space.exp_dim} nuisance directions, "
            f"{space.meta['pixels']} px of a {space.size} px frame -> {out}"
        )
    return out
