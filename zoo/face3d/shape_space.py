"""The linear identity shape space of the ``mesh`` head model, and the command that learns it.

A face's 68 landmarks ``L`` (pixels) are explained as a similarity transform of a normalised shape::

    L = s R (mean + B_id (z_id * id_scale) + B_exp z_exp) + t          (per point, x and y)

* ``mean`` ``[68, 2]``: generalised-Procrustes mean (centroid 0, Frobenius norm 1, eye line horizontal).
* ``B_exp`` ``[136, E]`` (E = 16): an orthonormal *nuisance* basis (expression and out-of-plane
  pose) built from eight landmark measurements: mouth opening (inner lips), smile (mouth corners vs.
  lip centre), left/right eye opening, left/right brow raise, yaw proxy (nose tip vs. jaw midline),
  pitch proxy (nose tip height between eyes and mouth). It spans (a) the directions along which the
  aligned training shapes move with each measurement (least-squares regression of the shapes on the
  standardised measurements) and (b) the gradients of the measurements at the mean shape, so that an
  identity change leaves all eight unchanged to first order. ``z_exp = B_exp^T d`` is kept as
  appearance and never perturbed.
* ``B_id`` ``[136, K]``: PCA (K = 100 by default) of the aligned shapes after projecting out the
  nuisance basis and the four similarity directions (scale, in-plane rotation, x and y shift), so
  the identity subspace is orthogonal to expression, pose proxies and placement.
  ``z_id = clip(B_id^T d / id_scale, -1, 1)`` with ``id_scale = 3 sigma`` of each component: the
  100-d ID code in [-1, 1] that IDEudemon perturbs.
* A fixed triangulation: Delaunay over the mean shape's 68 points + 8 derived forehead/temple points
  (:func:`zoo.face3d.landmarks.derived_points`) + a 16-point anchor ring around the face, computed
  once here and stored.

Command (deterministic for a seed; two runs write identical files)::

    python -m zoo.face3d build-shape-space --n 2000 --seed 0 --out zoo/face3d/data/mesh_shape_space.safetensors

Training shapes: ``n`` synthetic faces of ``zoo.synthetic`` (seed ``seed``), plus the faces of
the photos shipped in packages with ``--photos``; every shape is also used mirrored (so the mean is
symmetric); failed landmark fits are dropped as Procrustes outliers (residual > median + 4 MAD).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .landmarks import MIRROR_68, N_LANDMARKS, derived_points

__all__ = [
    "ShapeSpace",
    "DEFAULT_SHAPE_SPACE",
    "NUISANCE_NAMES",
    "load_shape_space",
    "build_shape_space",
    "collect_synthetic_landmarks",
    "iter_synthetic_landmarks",
    "inlier_mask",
    "collect_photo_landmarks",
    "procrustes_align",
    "nuisance_measures",
    "measure_gradients",
    "similarity_fit",
]

VERSION = 1
DEFAULT_SHAPE_SPACE = Path(__file__).resolve().parent / "data" / "mesh_shape_space.safetensors"
NUISANCE_NAMES = ("mouth_open", "smile", "eye_open_l", "eye_open_r", "brow_raise_l", "brow_raise_r", "yaw_proxy", "pitch_proxy")
RING_POINTS = 16
RING_MARGIN = (1.45, 1.35)  # ring half-axes over the face's half-width / half-height (with forehead)


# ----------------------------------------------------------------------------------------- geometry
def similarity_fit(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Least-squares similarity (Umeyama, no reflection) mapping ``src [P,2]`` onto ``dst [P,2]``: ``[2, 3]``."""
    from ..alignment import similarity_lstsq

    return similarity_lstsq(np.asarray(src, np.float64), np.asarray(dst, np.float64))


def _apply(m: np.ndarray, pts: np.ndarray) -> np.ndarray:
    return np.asarray(pts, np.float64) @ m[:, :2].T + m[:, 2]


def _invert(m: np.ndarray) -> np.ndarray:
    a = np.linalg.inv(m[:, :2])
    return np.hstack([a, -(a @ m[:, 2])[:, None]])


def _normalise(shape: np.ndarray) -> np.ndarray:
    """Centre, scale to Frobenius norm 1 and rotate the eye line to horizontal."""
    s = shape - shape.mean(0)
    s = s / np.linalg.norm(s)
    eye_l, eye_r = s[36:42].mean(0), s[42:48].mean(0)
    ang = np.arctan2(*(eye_r - eye_l)[::-1])
    c, si = np.cos(-ang), np.sin(-ang)
    return s @ np.array([[c, -si], [si, c]]).T


def procrustes_align(shapes: np.ndarray, iterations: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Generalised Procrustes analysis of ``[N, 68, 2]`` shapes -> (aligned ``[N, 68, 2]``, mean ``[68, 2]``)."""
    shapes = np.asarray(shapes, np.float64)
    mean = _normalise(shapes[0])
    aligned = shapes
    for _ in range(iterations):
        aligned = np.stack([_apply(similarity_fit(s, mean), s) for s in shapes])
        new = _normalise(aligned.mean(0))
        done = np.abs(new - mean).max() < 1e-12
        mean = new
        if done:
            break
    aligned = np.stack([_apply(similarity_fit(s, mean), s) for s in shapes])
    return aligned, mean


def mirror_shapes(shapes: np.ndarray) -> np.ndarray:
    """Horizontally mirrored ``[N, 68, 2]`` shapes with the left/right landmark labels swapped."""
    m = np.asarray(shapes, np.float64).copy()
    m[..., 0] = -m[..., 0]
    return m[:, MIRROR_68]


def nuisance_measures(aligned: np.ndarray) -> np.ndarray:
    """``[N, 68, 2]`` aligned shapes -> ``[N, 8]`` expression/pose measurements (:data:`NUISANCE_NAMES`)."""
    a = np.asarray(aligned, np.float64)
    x, y = a[..., 0], a[..., 1]
    eye_l, eye_r = a[:, 36:42].mean(1), a[:, 42:48].mean(1)
    iod = np.linalg.norm(eye_r - eye_l, axis=1).clip(1e-9)
    eyes_y = (eye_l[:, 1] + eye_r[:, 1]) / 2
    mouth_y = y[:, 48:60].mean(1)
    cols = [
        (y[:, 66] - y[:, 62]) / iod,
        ((y[:, 48] + y[:, 54]) / 2 - (y[:, 51] + y[:, 57]) / 2) / iod,
        ((y[:, 41] - y[:, 37]) + (y[:, 40] - y[:, 38])) / (2 * iod),
        ((y[:, 47] - y[:, 43]) + (y[:, 46] - y[:, 44])) / (2 * iod),
        (eye_l[:, 1] - y[:, 17:22].mean(1)) / iod,
        (eye_r[:, 1] - y[:, 22:27].mean(1)) / iod,
        (x[:, 30] - (x[:, 0] + x[:, 16]) / 2) / (x[:, 16] - x[:, 0]).clip(1e-9),
        (y[:, 30] - eyes_y) / (mouth_y - eyes_y).clip(1e-9),
    ]
    return np.stack(cols, axis=1)


def measure_gradients(mean: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """``[136, E]`` gradients of :func:`nuisance_measures` at ``mean`` (central differences)."""
    base = mean.reshape(-1)
    grads = np.zeros((base.size, len(NUISANCE_NAMES)))
    for j in range(base.size):
        step = np.zeros_like(base)
        step[j] = eps
        hi = nuisance_measures((base + step).reshape(1, -1, 2))[0]
        lo = nuisance_measures((base - step).reshape(1, -1, 2))[0]
        grads[j] = (hi - lo) / (2 * eps)
    return grads


def _orthonormal(cols: np.ndarray, tol: float = 1e-10) -> np.ndarray:
    q, r = np.linalg.qr(cols)
    keep = np.abs(np.diag(r)) > tol
    return q[:, keep]


def _similarity_directions(mean: np.ndarray) -> np.ndarray:
    """``[136, 4]`` orthonormal tangent directions of scale, rotation and x/y shift at ``mean``."""
    rot = np.stack([-mean[:, 1], mean[:, 0]], 1)
    tx = np.tile([1.0, 0.0], (len(mean), 1))
    ty = np.tile([0.0, 1.0], (len(mean), 1))
    return _orthonormal(np.stack([mean.reshape(-1), rot.reshape(-1), tx.reshape(-1), ty.reshape(-1)], 1))


def _fix_signs(basis: np.ndarray) -> np.ndarray:
    """Make each column's largest-magnitude entry positive (removes SVD's sign ambiguity)."""
    idx = np.abs(basis).argmax(0)
    signs = np.sign(basis[idx, np.arange(basis.shape[1])])
    signs[signs == 0] = 1.0
    return basis * signs


# ----------------------------------------------------------------------------------------- the space
@dataclass
class ShapeSpace:
    """The learned shape model (see the module docstring). Arrays are float64 numpy in memory."""

    mean: np.ndarray  # [68, 2]
    id_basis: np.ndarray  # [136, K]
    id_scale: np.ndarray  # [K]
    exp_basis: np.ndarray  # [136, E]
    triangles: np.ndarray  # [T, 3] int64, over mesh vertices (68 + 8 + ring)
    ring: np.ndarray  # [RING_POINTS, 2] anchor ring in the mean's normalised frame
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def id_dim(self) -> int:
        return int(self.id_basis.shape[1])

    @property
    def exp_dim(self) -> int:
        return int(self.exp_basis.shape[1])

    # ---------------------------------------------------------------- codes
    def encode(self, lm68: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``[68, 2]`` landmarks (pixels) -> (``z_id [K]`` in [-1, 1], ``z_exp [E]``, similarity ``[2, 3]``
        normalised -> pixels, unclipped ``z_id``)."""
        lm = np.asarray(lm68, np.float64)
        m = similarity_fit(self.mean, lm)
        d = (_apply(_invert(m), lm) - self.mean).reshape(-1)
        raw = (self.id_basis.T @ d) / self.id_scale
        return np.clip(raw, -1.0, 1.0), self.exp_basis.T @ d, m, raw

    def decode(self, z_id: np.ndarray, z_exp: np.ndarray, sim: np.ndarray) -> np.ndarray:
        """Codes + similarity -> ``[68, 2]`` landmarks in pixels."""
        d = self.id_basis @ (np.asarray(z_id, np.float64) * self.id_scale) + self.exp_basis @ np.asarray(z_exp, np.float64)
        return _apply(sim, self.mean + d.reshape(N_LANDMARKS, 2))

    def ring_at(self, sim: np.ndarray) -> np.ndarray:
        """The anchor ring placed by a similarity (normalised -> pixels): ``[RING_POINTS, 2]``."""
        return _apply(sim, self.ring)

    # ---------------------------------------------------------------- I/O
    def tensors(self, prefix: str = "") -> dict[str, Any]:
        """The arrays as float32/int64 torch tensors (for safetensors / a method's extra tensors)."""
        import torch

        t = lambda a, dt: torch.from_numpy(np.ascontiguousarray(a, dtype=dt))  # noqa: E731
        return {
            f"{prefix}mean": t(self.mean, np.float32),
            f"{prefix}id_basis": t(self.id_basis, np.float32),
            f"{prefix}id_scale": t(self.id_scale, np.float32),
            f"{prefix}exp_basis": t(self.exp_basis, np.float32),
            f"{prefix}triangles": t(self.triangles, np.int64),
            f"{prefix}ring": t(self.ring, np.float32),
        }

    @classmethod
    def from_tensors(cls, tensors: dict[str, Any], prefix: str = "", meta: dict[str, Any] | None = None) -> "ShapeSpace":
        get = lambda k: tensors[f"{prefix}{k}"].detach().cpu().numpy()  # noqa: E731
        return cls(
            mean=get("mean").astype(np.float64),
            id_basis=get("id_basis").astype(np.float64),
            id_scale=get("id_scale").astype(np.float64),
            exp_basis=get("exp_basis").astype(np.float64),
            triangles=get("triangles").astype(np.int64),
            ring=get("ring").astype(np.float64),
            meta=dict(meta or {}),
        )

    def save(self, path: str | Path) -> Path:
        return save_space_file(self.tensors(), self.meta, path)


def save_space_file(tensors: dict[str, Any], meta: dict[str, Any], path: str | Path) -> Path:
    """Write a learned space (shape or texture) as safetensors with its JSON ``meta``."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"meta": json.dumps(meta, sort_keys=True)})
    return path


def load_space_file(path: Path, what: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tensors, meta) of a file written by :func:`save_space_file`; ``what``: "shape" or "texture"."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    if not path.is_file():
        raise FileNotFoundError(f"no {what} space at {path}; build one with `python -m zoo.face3d build-{what}-space --out {path}`")
    with safe_open(str(path), framework="pt") as f:
        meta = json.loads((f.metadata() or {}).get("meta", "{}"))
    return load_file(str(path)), meta


def load_shape_space(path: str | Path | None = None) -> ShapeSpace:
    """A saved :class:`ShapeSpace` (default: the one shipped in ``zoo/face3d/data``)."""
    tensors, meta = load_space_file(Path(path) if path is not None else DEFAULT_SHAPE_SPACE, "shape")
    return ShapeSpace.from_tensors(tensors, meta=meta)


# ----------------------------------------------------------------------------------------- building
def iter_synthetic_landmarks(n: int, seed: int, resolution: int = 256, chunk: int = 128, progress: bool = False):
    """Yield ``(index, image uint8 [R, R, 3], landmarks [68, 2])`` for the first ``n`` synthetic faces
    of set ``seed`` (``zoo.synthetic``) whose 68 landmarks are found (the others are skipped)."""
    from zoo.synthetic import synthetic_faces_uint8

    from .landmarks import LandmarkError, detect_landmarks68

    for start in range(0, n, chunk):
        faces = synthetic_faces_uint8(min(chunk, n - start), seed=seed, resolution=resolution, offset=start)
        for i, f in enumerate(faces):
            try:
                lm = detect_landmarks68(f)
            except LandmarkError:
                continue
            yield start + i, f, lm
        if progress:
            print(f"[face3d] landmarks of {min(start + chunk, n)}/{n} synthetic faces", flush=True)


def collect_synthetic_landmarks(n: int, seed: int, resolution: int = 256, chunk: int = 128, progress: bool = False) -> np.ndarray:
    """68 landmarks of ``n`` synthetic faces (``zoo.synthetic``, set ``seed``): ``[M, 68, 2]`` (M <= n:
    faces whose landmarks fail are skipped)."""
    out = [lm for _, _, lm in iter_synthetic_landmarks(n, seed, resolution, chunk, progress)]
    return np.stack(out) if out else np.zeros((0, N_LANDMARKS, 2))


def collect_photo_landmarks(size: int = 256) -> np.ndarray:
    """68 landmarks of every face in the photos shipped inside installed packages (insightface's
    ``t1.jpg``, scikit-image's astronaut, matplotlib's ``grace_hopper.jpg``), on FFHQ-aligned crops."""
    from ..alignment import align_face
    from ..detection import detect_faces
    from ..detectors import package_dir
    from ..imageio import load_image
    from .landmarks import LandmarkError, detect_landmarks68

    photos = []
    for pkg, parts in (("insightface", ("data", "images", "t1.jpg")), ("matplotlib", ("mpl-data", "sample_data", "grace_hopper.jpg"))):
        d = package_dir(pkg)
        if d is not None and Path(d, *parts).is_file():
            photos.append(load_image(Path(d, *parts))[0])
    try:
        from skimage import data

        photos.append(np.ascontiguousarray(data.astronaut()))
    except ImportError:
        pass
    out = []
    for rgb in photos:
        for face in detect_faces(rgb, "yunet"):
            al = align_face(rgb, face.landmarks, size)
            try:
                out.append(detect_landmarks68(al.crop, al.landmarks))
            except LandmarkError:
                continue
    return np.stack(out) if out else np.zeros((0, N_LANDMARKS, 2))


def inlier_mask(shapes: np.ndarray, k: float = 4.0) -> np.ndarray:
    """bool ``[N]``: shapes whose Procrustes residual is at most median + ``k`` MAD (failed fits are out)."""
    aligned, mean = procrustes_align(shapes, iterations=5)
    res = np.sqrt(((aligned - mean) ** 2).sum((1, 2)))
    med = np.median(res)
    mad = np.median(np.abs(res - med)) + 1e-12
    return res <= med + k * mad


def _drop_outliers(shapes: np.ndarray, k: float = 4.0) -> np.ndarray:
    return shapes[inlier_mask(shapes, k)]


def _ring(mean: np.ndarray) -> np.ndarray:
    face = np.concatenate([mean, derived_points(mean)], 0)
    lo, hi = face.min(0), face.max(0)
    c, half = (lo + hi) / 2, (hi - lo) / 2
    t = 2 * np.pi * np.arange(RING_POINTS) / RING_POINTS
    return np.stack([c[0] + RING_MARGIN[0] * half[0] * np.cos(t), c[1] + RING_MARGIN[1] * half[1] * np.sin(t)], 1)


def fit_shape_space(shapes: np.ndarray, components: int = 100, meta: dict[str, Any] | None = None) -> ShapeSpace:
    """Learn a :class:`ShapeSpace` from ``[N, 68, 2]`` landmark sets (pixels of any images)."""
    from scipy.spatial import Delaunay

    shapes = np.asarray(shapes, np.float64)
    if len(shapes) < 4:
        raise ValueError(f"need at least 4 shapes, got {len(shapes)}")
    shapes = _drop_outliers(shapes)
    aligned, mean = procrustes_align(np.concatenate([shapes, mirror_shapes(shapes)], 0))
    d = (aligned - mean).reshape(len(aligned), -1)  # [M, 136]
    d = d - d.mean(0)
    sim_dirs = _similarity_directions(mean)
    d = d - (d @ sim_dirs) @ sim_dirs.T

    # nuisance (expression / pose) directions: (a) least-squares regression of the shapes on the
    # measures (how faces move together with them), (b) the measures' gradients at the mean (so an
    # identity change leaves every measure unchanged to first order)
    meas = nuisance_measures(aligned)
    meas = (meas - meas.mean(0)) / meas.std(0).clip(1e-12)
    coef, *_ = np.linalg.lstsq(meas, d, rcond=None)  # [E, 136]
    cols = np.concatenate([coef.T, measure_gradients(mean)], 1)
    cols = cols - sim_dirs @ (sim_dirs.T @ cols)
    exp_basis = _fix_signs(_orthonormal(cols / np.linalg.norm(cols, axis=0).clip(1e-12)))

    # identity: PCA of what is left
    both = np.concatenate([sim_dirs, exp_basis], 1)
    r = d - (d @ both) @ both.T
    _, sv, vt = np.linalg.svd(r, full_matrices=False)
    rank = int((sv > sv[0] * 1e-9).sum())
    k = min(int(components), rank, len(r) - 1)
    id_basis = _fix_signs(vt[:k].T)
    sigma = sv[:k] / np.sqrt(len(r) - 1)
    tri_vertices = np.concatenate([mean, derived_points(mean), _ring(mean)], 0)
    triangles = Delaunay(tri_vertices).simplices.astype(np.int64)
    triangles = triangles[np.lexsort(triangles.T[::-1])]  # a canonical order
    info = dict(meta or {})
    info.update(
        {
            "version": VERSION,
            "shapes_used": int(len(shapes)),
            "mirrored": True,
            "components": k,
            "nuisance": list(NUISANCE_NAMES),
            "id_scale": "3 sigma",
            "ring_points": RING_POINTS,
            "explained_id_variance": float((sv[:k] ** 2).sum() / (sv**2).sum()),
        }
    )
    return ShapeSpace(mean, id_basis, 3.0 * sigma, exp_basis, triangles, _ring(mean), info)


def build_shape_space(n: int = 2000, seed: int = 0, components: int = 100, photos: bool = False, progress: bool = False) -> ShapeSpace:
    """The command's work: landmarks of ``n`` synthetic faces (seed ``seed``) [+ packaged photos] -> space."""
    parts = [collect_synthetic_landmarks(n, seed, progress=progress)]
    if photos:
        parts.append(collect_photo_landmarks())
    shapes = np.concatenate(parts, 0)
    meta = {
        "source": "zoo.synthetic" + (" + packaged photos" if photos else ""),
        "n": int(n),
        "seed": int(seed),
        "landmarks": "dlib shape_predictor_68_face_landmarks (YuNet box)",
        "shapes_found": int(len(shapes)),
    }
    return fit_shape_space(shapes, components, meta)


def main_build(argv: Sequence[str] | None = None) -> Path:
    import argparse

    p = argparse.ArgumentParser(prog="python -m zoo.face3d build-shape-space", description="learn the mesh backend's identity shape space")
    p.add_argument("--n", type=int, default=2000, help="number of synthetic faces")
    p.add_argument("--seed", type=int, default=0, help="synthetic face set")
    p.add_argument("--components", type=int, default=100, help="identity components (the ID code size)")
    p.add_argument("--photos", action="store_true", help="also use the faces of photos shipped in packages")
    p.add_argument("--out", default=str(DEFAULT_SHAPE_SPACE))
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    space = build_shape_space(a.n, a.seed, a.components, a.photos, progress=not a.quiet)
    out = space.save(a.out)
    if not a.quiet:
        print(
            f"[shape-space] {space.meta['shapes_used']} shapes (x2 mirrored), {space.id_dim} identity components "
            f"({100 * space.meta['explained_id_variance']:.1f}% of the non-nuisance variance), {space.exp_dim} nuisance "
            f"directions, {len(space.triangles)} triangles -> {out}"
        )
    return out
