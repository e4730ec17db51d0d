"""The ``mesh`` head model: a 2D landmark mesh with a learned identity shape space and a
piecewise-affine renderer. The offline stand-in for HeadNeRF in IDEudemon's Step I.

What it is, honestly: an active-shape/appearance-style model, not a 3D morphable model. Geometry is
dlib's 68 landmarks (+ 8 derived forehead/temple points + an anchor ring, see
:mod:`zoo.face3d.landmarks`), explained by :class:`~zoo.face3d.shape_space.ShapeSpace`::

    fit:    L = detect_landmarks68(X);  (z_id, z_exp, S) = encode(L)       S: similarity (the "camera")
    render: L' = S(mean + B_id (z_id * id_scale) + B_exp z_exp)
            X_p = warp(X, mesh(L) -> mesh(L'))        piecewise affine over the stored triangulation

* ``id_code`` ``[N, 100]`` in [-1, 1] (3 sigma of each identity component maps to 1);
* ``app_code`` :class:`MeshAppearance`: ``expr`` ``[N, E]`` (the nuisance coefficients: expression
  and pose proxies), ``texture`` ``[N, 3, H, W]`` (the input image: this model's texture map) and
  ``uv`` ``[N, 68, 2]`` (the measured landmarks, i.e. where each vertex sits in the texture);
* ``cam_code`` ``[N, 2, 3]``: the similarity from the normalised shape frame to image pixels.

Rendering warps the texture from the measured geometry to the coded geometry, so a zero-noise
render differs from the input only by what the shape space does not model (the identity components
beyond the first 100 and codes clipped at +-1). Outside the anchor ring the image is unchanged;
between the face and the ring it is stretched smoothly. The returned mask is the rendered face
polygon (jaw, temples, forehead), feathered by ``feather`` x the image size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .base import ParametricHeadModel, as_image_batch
from .landmarks import FACE_OUTLINE, detect_landmarks68, mesh_vertices
from .shape_space import ShapeSpace, load_shape_space
from .warp import polygon_mask, warp_image

__all__ = ["MeshAppearance", "MeshHeadModel"]


@dataclass
class MeshAppearance:
    """Appearance code of the mesh backend (everything but identity and placement)."""

    expr: torch.Tensor  # [N, E] nuisance coefficients (expression, pose proxies)
    texture: torch.Tensor  # [N, 3, H, W] in [-1, 1]
    uv: torch.Tensor  # [N, 68, 2] landmark positions in the texture (pixels)

    def __len__(self) -> int:
        return int(self.expr.shape[0])


class MeshHeadModel(ParametricHeadModel):
    """Mesh backend of :class:`~zoo.face3d.base.ParametricHeadModel`.

    ``space``: a :class:`ShapeSpace` (default: the shipped one). ``feather``: mask softening, as a
    fraction of the image size. ``work_size``: landmark search resolution for small images.
    """

    name = "mesh"

    def __init__(self, space: ShapeSpace | None = None, feather: float = 0.01, work_size: int = 256):
        self.space = space if space is not None else load_shape_space()
        self.id_dim = self.space.id_dim
        self.feather = float(feather)
        self.work_size = int(work_size)

    # ---------------------------------------------------------------- fit (eq. 2)
    def fit(self, images: Any) -> tuple[torch.Tensor, MeshAppearance, torch.Tensor]:
        x, u8 = as_image_batch(images)
        ids, exps, sims, uvs = [], [], [], []
        for img in u8:
            lm = detect_landmarks68(img, work_size=self.work_size)
            z_id, z_exp, sim, _ = self.space.encode(lm)
            ids.append(z_id), exps.append(z_exp), sims.append(sim), uvs.append(lm)
        dev, dt = x.device, x.dtype
        t = lambda a: torch.as_tensor(np.stack(a), dtype=dt, device=dev)  # noqa: E731
        return t(ids), MeshAppearance(t(exps), x, torch.as_tensor(np.stack(uvs), dtype=torch.float64, device=dev)), t(sims)

    # ---------------------------------------------------------------- geometry
    def _np(self, v: torch.Tensor) -> np.ndarray:
        return v.detach().cpu().double().numpy()

    def target_vertices(self, id_code: torch.Tensor, app: MeshAppearance, cam: torch.Tensor) -> np.ndarray:
        """``[N, V, 2]`` mesh vertices of the coded faces (pixels)."""
        ids, exps, sims = self._np(id_code), self._np(app.expr), self._np(cam)
        return np.stack([mesh_vertices(self.space.decode(i, e, s), self.space.ring_at(s)) for i, e, s in zip(ids, exps, sims)])

    def source_vertices(self, app: MeshAppearance, cam: torch.Tensor) -> np.ndarray:
        """``[N, V, 2]`` mesh vertices of the measured input faces in their textures (pixels)."""
        return np.stack([mesh_vertices(uv, self.space.ring_at(s)) for uv, s in zip(self._np(app.uv), self._np(cam))])

    def landmarks(self, app: MeshAppearance, cam: torch.Tensor) -> np.ndarray:
        return self._np(app.uv)

    def _masks(self, vertices: np.ndarray, size: tuple[int, int], like: torch.Tensor) -> torch.Tensor:
        feather = self.feather * max(size)
        m = np.stack([polygon_mask(v[FACE_OUTLINE], size, feather) for v in vertices])
        return torch.as_tensor(m, dtype=like.dtype, device=like.device).unsqueeze(1)

    # ---------------------------------------------------------------- render (eq. 4)
    def render(self, id_code: torch.Tensor, app: MeshAppearance, cam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tex = app.texture
        size = tuple(tex.shape[-2:])
        dst = self.target_vertices(id_code, app, cam)
        src = self.source_vertices(app, cam)
        tex_np = tex.detach().float().cpu().permute(0, 2, 3, 1).numpy()
        out = np.stack([warp_image(np.ascontiguousarray(t), s, d, self.space.triangles) for t, s, d in zip(tex_np, src, dst)])
        image = torch.as_tensor(out, dtype=tex.dtype, device=tex.device).permute(0, 3, 1, 2).contiguous()
        return image, self._masks(dst, size, tex)

    def face_mask(self, id_code: torch.Tensor, app: MeshAppearance, cam: torch.Tensor) -> torch.Tensor:
        return self._masks(self.target_vertices(id_code, app, cam), tuple(app.texture.shape[-2:]), app.texture)

    def source_mask(self, app: MeshAppearance, cam: torch.Tensor) -> torch.Tensor:
        """``[N, 1, H, W]`` face region of the measured input faces."""
        return self._masks(self.source_vertices(app, cam), tuple(app.texture.shape[-2:]), app.texture)
