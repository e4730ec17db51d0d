"""The ``mesh`` head model: a 2D landmark mesh with a learned identity shape space, a learned
identity texture space and a piecewise-affine renderer. The offline stand-in for HeadNeRF in
IDEudemon's Step I.

What it is, honestly: an active-appearance-style model, not a 3D morphable model. Geometry is
dlib's 68 landmarks (+ 8 derived forehead/temple points + an anchor ring, see
:mod:`zoo.face3d.landmarks`), explained by :class:`~zoo.face3d.shape_space.ShapeSpace`; appearance
is the face's texture in the mean shape's frame, explained by
:class:`~zoo.face3d.texture_space.TextureSpace`::

    fit:    L = detect_landmarks68(X);  (z_shape, z_exp, S) = encode(L)     S: similarity (the "camera")
            T = X warped from mesh(L) to the texture frame;  (z_tex, z_texexp, I) = encode(T)
    render: L' = S(mean + B_id (z_shape * id_scale) + B_exp z_exp)
            T' = mean_t + B_tex (z_tex * tex_scale) + B_texexp z_texexp + I          (I: illumination plane)
            X_p = M' warp(T', frame -> mesh(L')) + (1 - M') warp(X, mesh(L) -> mesh(L'))

* ``id_code`` ``[N, 100 + K]`` in [-1, 1]: the 100 shape components, then the K texture components
  (3 sigma of each component maps to 1); with ``texture=None`` only the 100 shape components (the
  geometry-only model, which keeps the input's own skin, eyes and lips: recognisable);
* ``app_code`` :class:`MeshAppearance`: ``expr`` ``[N, E]`` (shape nuisance coefficients: expression
  and pose proxies), ``texture`` ``[N, 3, H, W]`` (the input image), ``uv`` ``[N, 68, 2]`` (the
  measured landmarks) and, with a texture space, ``tex_expr`` (texture nuisance coefficients),
  ``illumination`` (per-channel colour plane) and ``frame`` (the input's frame texture, used only
  for the soft rim around the replaced face);
* ``cam_code`` ``[N, 2, 3]``: the similarity from the normalised shape frame to image pixels.

Inside the rendered face polygon ``M'`` (jaw, temples, forehead; feathered by ``feather`` x the
image size) the face is the decoded texture: the input's detail beyond the K texture components is
not carried over, even at zero noise. Outside it the input is warped from the measured to the coded
geometry: unchanged outside the anchor ring, stretched smoothly between the face and the ring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import torch

from .base import ParametricHeadModel, as_image_batch
from .landmarks import FACE_OUTLINE, LandmarkError, detect_landmarks68, mesh_vertices
from .shape_space import ShapeSpace, load_shape_space
from .texture_space import TextureSpace, frame_vertices, load_texture_space, sample_texture
from .warp import piecewise_affine_maps, polygon_mask, warp_image

__all__ = ["MeshAppearance", "MeshHeadModel"]


@dataclass
class MeshAppearance:
    """Appearance code of the mesh backend (everything but identity and placement)."""

    expr: torch.Tensor  # [N, E] nuisance coefficients (expression, pose proxies)
    texture: torch.Tensor  # [N, 3, H, W] in [-1, 1]
    uv: torch.Tensor  # [N, 68, 2] landmark positions in the texture (pixels)
    tex_expr: torch.Tensor | None = None  # [N, E_t] texture nuisance coefficients
    illumination: torch.Tensor | None = None  # [N, 3, 3] per-channel colour plane (1, u, v)
    frame: np.ndarray | None = None  # [N, S, S, 3] the input's texture in the frame (rim only)

    def __len__(self) -> int:
        return int(self.expr.shape[0])


class MeshHeadModel(ParametricHeadModel):
    """Mesh backend of :class:`~zoo.face3d.base.ParametricHeadModel`.

    ``space``: a :class:`ShapeSpace` (default: the shipped one). ``texture``: a :class:`TextureSpace`,
    ``"default"`` (the shipped one) or ``None`` (geometry only: the input's own texture is kept, which
    leaves faces recognisable). ``feather``: mask softening, as a fraction of the image size.
    ``work_size``: landmark search resolution for small images.
    """

    name = "mesh"

    def __init__(self, space: ShapeSpace | None = None, feather: float = 0.01, work_size: int = 256, texture: TextureSpace | str | None = "default"):
        self.space = space if space is not None else load_shape_space()
        self.texture_space = load_texture_space() if isinstance(texture, str) and texture == "default" else texture
        if isinstance(self.texture_space, str):
            raise ValueError(f"texture must be a TextureSpace, 'default' or None, not {texture!r}")
        self.shape_dim = self.space.id_dim
        self.id_dim = self.shape_dim + (self.texture_space.id_dim if self.texture_space is not None else 0)
        self.feather = float(feather)
        self.work_size = int(work_size)
        self._frame = frame_vertices(self.space, self.texture_space.size) if self.texture_space is not None else None

    # ---------------------------------------------------------------- fit (eq. 2)
    def fit(self, images: Any) -> tuple[torch.Tensor, MeshAppearance, torch.Tensor]:
        x, u8 = as_image_batch(images)
        ids, exps, sims, uvs, tids, texps, illums, frames = [], [], [], [], [], [], [], []
        xf = x.detach().float().cpu().permute(0, 2, 3, 1).numpy() if self.texture_space is not None else None
        for i, img in enumerate(u8):
            lm = detect_landmarks68(img, work_size=self.work_size)
            z_id, z_exp, sim, _ = self.space.encode(lm)
            ids.append(z_id), exps.append(z_exp), sims.append(sim), uvs.append(lm)
            if self.texture_space is not None:
                ts = self.texture_space
                frame = sample_texture(xf[i], mesh_vertices(lm, self.space.ring_at(sim)), self._frame, self.space.triangles, ts.size)
                z_tex, e_tex, illum, _ = ts.encode(frame)
                tids.append(z_tex), texps.append(e_tex), illums.append(illum), frames.append(frame)
        dev, dt = x.device, x.dtype
        t = lambda a: torch.as_tensor(np.stack(a), dtype=dt, device=dev)  # noqa: E731
        app = MeshAppearance(t(exps), x, torch.as_tensor(np.stack(uvs), dtype=torch.float64, device=dev))
        z = t(ids)
        if self.texture_space is not None:
            z = torch.cat([z, t(tids)], 1)
            app.tex_expr, app.illumination, app.frame = t(texps), t(illums), np.stack(frames)
        return z, app, t(sims)

    # ---------------------------------------------------------------- geometry
    def _np(self, v: torch.Tensor) -> np.ndarray:
        return v.detach().cpu().double().numpy()

    def target_vertices(self, id_code: torch.Tensor, app: MeshAppearance, cam: torch.Tensor) -> np.ndarray:
        """``[N, V, 2]`` mesh vertices of the coded faces (pixels)."""
        ids, exps, sims = self._np(id_code)[:, : self.shape_dim], self._np(app.expr), self._np(cam)
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
    def decode_textures(self, id_code: torch.Tensor, app: MeshAppearance) -> np.ndarray:
        """``[N, S, S, 3]`` frame textures of the coded faces: the decoded face inside the frame's face
        mask (softened by 1 frame pixel), the input's own frame texture outside it."""
        ts = self.texture_space
        if ts is None or app.tex_expr is None:
            raise ValueError("this mesh model has no texture space (texture=None) or the codes were fitted without one")
        z = self._np(id_code)[:, self.shape_dim :]
        soft = cv2.GaussianBlur(ts.mask.astype(np.float32), (0, 0), 1.0)
        soft = (soft * ts.mask)[..., None]  # 1 deep inside, falling to 0 at the frame mask's edge
        out = []
        for zt, e, il, fr in zip(z, self._np(app.tex_expr), self._np(app.illumination), app.frame):
            out.append(soft * ts.decode(zt, e, il) + (1 - soft) * fr)
        return np.stack(out).astype(np.float32)

    def render(self, id_code: torch.Tensor, app: MeshAppearance, cam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tex = app.texture
        size = tuple(tex.shape[-2:])
        dst = self.target_vertices(id_code, app, cam)
        src = self.source_vertices(app, cam)
        tex_np = tex.detach().float().cpu().permute(0, 2, 3, 1).numpy()
        out = np.stack([warp_image(np.ascontiguousarray(t), s, d, self.space.triangles) for t, s, d in zip(tex_np, src, dst)])
        mask = self._masks(dst, size, tex)
        if self.texture_space is not None and app.tex_expr is not None:
            m = mask.detach().float().cpu().permute(0, 2, 3, 1).numpy()
            faces = []
            for frame_tex, d in zip(self.decode_textures(id_code, app), dst):
                mx, my, _ = piecewise_affine_maps(self._frame, d, self.space.triangles, size)
                faces.append(cv2.remap(frame_tex, mx, my, interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE))
            out = m * np.stack(faces) + (1 - m) * out
        image = torch.as_tensor(np.ascontiguousarray(out), dtype=tex.dtype, device=tex.device).permute(0, 3, 1, 2).contiguous()
        return image, mask

    def register_features(self, images: torch.Tensor, id_code: torch.Tensor, app: MeshAppearance, cam: torch.Tensor, region: torch.Tensor) -> torch.Tensor:
        """Move the rendered features onto the coded geometry (not in the paper).

        A keyed texture puts the eye and mouth corners, the nose tip and the chin a few pixels away from
        the mesh vertices that carry them, and a landmark detector, hence a landmark head-pose estimate,
        follows the texture, not the geometry. So the 68 landmarks are detected on ``images``
        (``[N,3,H,W]`` in [-1,1], the rendered faces in their crops) and each image is warped
        piecewise-affinely from those landmarks to the coded face's mesh vertices, inside ``region``
        (``[N,1,H,W]`` in [0,1]; outside it every pixel is kept, bit for bit). One pass: a second moved
        the pose further off (measurements in ``training/configs/ideudemon_demo.yaml``). A face whose
        landmarks are not found is returned as it is.
        """
        dst = self.target_vertices(id_code, app, cam)
        sims = self._np(cam)
        from ..imageio import from_tensor

        out = images.clone()
        for i, img in enumerate(from_tensor(images)):
            try:
                lm = detect_landmarks68(img, work_size=self.work_size)
            except LandmarkError:
                continue
            src = mesh_vertices(lm, self.space.ring_at(sims[i]))
            face = images[i].detach().float().cpu().permute(1, 2, 0).numpy()
            moved = torch.as_tensor(warp_image(np.ascontiguousarray(face), src, dst[i], self.space.triangles)).permute(2, 0, 1).to(images)
            out[i] = torch.where(region[i] > 0, region[i] * moved + (1 - region[i]) * images[i], images[i])
        return out

    def face_mask(self, id_code: torch.Tensor, app: MeshAppearance, cam: torch.Tensor) -> torch.Tensor:
        return self._masks(self.target_vertices(id_code, app, cam), tuple(app.texture.shape[-2:]), app.texture)

    def source_mask(self, app: MeshAppearance, cam: torch.Tensor) -> torch.Tensor:
        """``[N, 1, H, W]`` face region of the measured input faces."""
        return self._masks(self.source_vertices(app, cam), tuple(app.texture.shape[-2:]), app.texture)
