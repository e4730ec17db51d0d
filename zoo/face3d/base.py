"""The parametric head model interface of IDEudemon's Step I (IDEudemon eq. 2 and 4).

A backend explains a face image by three codes and renders them back::

    id_code, app_code, cam_code = model.fit(images)       # eq. 2: z_id, z_app, z_cam
    image, mask = model.render(id_code, app_code, cam_code)  # eq. 4: X_p from (z'_id, z_app, z_cam)

* ``images``: one uint8 ``[H, W, 3]`` array, a uint8 ``[N, H, W, 3]`` batch, or a float tensor
  ``[N, 3, H, W]`` (or ``[3, H, W]``) in [-1, 1] (aligned face crops).
* ``id_code``: float tensor ``[N, id_dim]`` (``id_dim`` = 100 in both backends). The ``mesh``
  backend's code is normalised to [-1, 1]; HeadNeRF's is its fitted identity code (the paper clips
  the perturbed code to [-1, 1]).
* ``app_code`` / ``cam_code``: backend-specific objects (expression, texture/albedo, illumination /
  camera); pass them back to :meth:`render` unchanged.
* ``render`` returns ``image`` float ``[N, 3, H, W]`` in [-1, 1] and ``mask`` float ``[N, 1, H, W]`` in
  [0, 1], the rendered face region.

Backends: ``mesh`` (:class:`zoo.face3d.mesh.MeshHeadModel`, offline, from packaged landmarks) and
``headnerf`` (:class:`zoo.face3d.headnerf.HeadNeRFHeadModel`, the paper's, needs the HeadNeRF weights).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["ParametricHeadModel", "as_image_batch"]


def as_image_batch(images: Any) -> tuple[torch.Tensor, np.ndarray]:
    """Any accepted image input -> (float ``[N, 3, H, W]`` in [-1, 1], uint8 ``[N, H, W, 3]``)."""
    from ..imageio import from_tensor, to_tensor

    if torch.is_tensor(images):
        x = images if images.ndim == 4 else images.unsqueeze(0)
        if not torch.is_floating_point(x) or x.shape[1] != 3:
            raise ValueError(f"expected a float [N,3,H,W] tensor in [-1,1], got {x.dtype} {tuple(x.shape)}")
        return x, from_tensor(x.detach().float().cpu())
    arr = np.asarray(images)
    if arr.dtype != np.uint8 or arr.shape[-1] != 3 or arr.ndim not in (3, 4):
        raise ValueError(f"expected uint8 [H,W,3] or [N,H,W,3], got {arr.dtype} {arr.shape}")
    if arr.ndim == 3:
        arr = arr[None]
    return to_tensor(arr), np.ascontiguousarray(arr)


class ParametricHeadModel:
    """Base class of the Step-I backends (see the module docstring)."""

    name: str = ""
    id_dim: int = 100

    def fit(self, images: Any) -> tuple[torch.Tensor, Any, Any]:
        raise NotImplementedError

    def render(self, id_code: torch.Tensor, app_code: Any, cam_code: Any) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def face_mask(self, id_code: torch.Tensor, app_code: Any, cam_code: Any) -> torch.Tensor:
        """``[N, 1, H, W]`` face region of the rendered codes (default: :meth:`render`'s mask)."""
        return self.render(id_code, app_code, cam_code)[1]

    def landmarks(self, app_code: Any, cam_code: Any) -> np.ndarray | None:
        """``[N, 68, 2]`` landmarks of the fitted input faces when the backend has them (else None)."""
        return None
