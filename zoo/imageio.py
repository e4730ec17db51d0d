"""Image conversions at the zoo's edges.

Public APIs take PIL images or uint8 HxWx3 arrays; tensors inside are float NCHW in [-1, 1].
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["to_tensor", "from_tensor"]


def to_tensor(images: np.ndarray, size: int | None = None) -> torch.Tensor:
    """uint8 [N,H,W,3] (or [H,W,3]) -> float32 [N,3,H,W] in [-1,1], optionally resized to ``size``."""
    arr = np.asarray(images)
    if arr.ndim == 3:
        arr = arr[None]
    if arr.dtype != np.uint8 or arr.ndim != 4 or arr.shape[-1] != 3:
        raise ValueError(f"expected uint8 [N,H,W,3], got {arr.dtype} {arr.shape}")
    x = torch.from_numpy(np.ascontiguousarray(arr)).permute(0, 3, 1, 2).float() / 127.5 - 1.0
    if size is not None and x.shape[-2:] != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return x


def from_tensor(x: torch.Tensor) -> np.ndarray:
    """float [N,3,H,W] in [-1,1] -> uint8 [N,H,W,3] (clamped, rounded)."""
    x = x.detach().float().clamp(-1, 1).add(1).mul(127.5).round().to(torch.uint8)
    return x.permute(0, 2, 3, 1).cpu().numpy()
