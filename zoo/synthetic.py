"""Synthetic faces for offline work, from the DCGAN face generator of ``gan-face-generate``.

The package (MIT, installed with ``--no-deps``) ships ``models.py`` (the PyTorch-tutorial DCGAN) and
``weights.tar`` (a torch zip archive holding ``netG_state_dict``), trained on the synthetic
DigiFace-1M faces. The network is the zoo's own :class:`zoo.nn.dcgan.DCGANGenerator`, which reads those weights with
``torch.load(weights_only=True)`` (tensors only, never arbitrary pickles).

Face ``i`` of a :class:`SyntheticFaces` set is fully determined by ``(seed, i)``: its latent is drawn
from a ``torch.Generator`` seeded with a hash of both, so the same index gives the same face on every
machine and in every process, whatever the batch it is drawn in. Different indices are different
(random) identities.
"""

from __future__ import annotations

import copy
import hashlib
from functools import lru_cache
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["SyntheticFaces", "load_face_generator", "latent_for", "synthetic_faces_uint8", "NATIVE_SIZE", "LATENT_DIM"]

NATIVE_SIZE = 64
LATENT_DIM = 100


def load_face_generator(device: str | torch.device = "cpu") -> torch.nn.Module:
    """The packaged DCGAN generator (:class:`zoo.nn.dcgan.DCGANGenerator`, eval mode, frozen):
    ``[N,100]`` (or ``[N,100,1,1]``) -> ``[N,3,64,64]`` in [-1,1]."""
    net = _generator_cpu()
    return net if torch.device(device).type == "cpu" else copy.deepcopy(net).to(device)


@lru_cache(maxsize=1)
def _generator_cpu() -> torch.nn.Module:
    from .nn.dcgan import DCGANGenerator

    return DCGANGenerator()


def _index_seed(seed: int, index: int) -> int:
    digest = hashlib.sha256(f"synthetic-faces|{int(seed)}|{int(index)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def latent_for(seed: int, index: int) -> torch.Tensor:
    """The ``[100]`` latent of face ``index`` of set ``seed`` (standard normal, platform independent)."""
    g = torch.Generator().manual_seed(_index_seed(seed, index))
    return torch.randn(LATENT_DIM, generator=g)


class SyntheticFaces(torch.utils.data.Dataset):
    """``size`` seeded synthetic faces, ``[3,R,R]`` float in [-1,1] each.

    ``resolution``: output size (64 native; other sizes are bicubic-resampled with antialiasing and
    clamped). ``offset`` shifts the indices, so ``SyntheticFaces(seed=s, offset=10**6)`` is a held-out
    set disjoint from the first million faces of the same seed.
    """

    def __init__(self, size: int = 10_000, seed: int = 0, resolution: int = NATIVE_SIZE, offset: int = 0, device: str | torch.device = "cpu"):
        if size <= 0:
            raise ValueError("size must be positive")
        self.size = int(size)
        self.seed = int(seed)
        self.resolution = int(resolution)
        self.offset = int(offset)
        self.device = torch.device(device)

    def __len__(self) -> int:
        return self.size

    def latents(self, indices: Sequence[int]) -> torch.Tensor:
        return torch.stack([latent_for(self.seed, self.offset + int(i)) for i in indices])

    @torch.no_grad()
    def get_batch(self, indices: Sequence[int]) -> torch.Tensor:
        """Faces ``indices`` as ``[B,3,R,R]`` float32 in [-1,1] (on ``self.device``)."""
        for i in indices:
            if not 0 <= int(i) < self.size:
                raise IndexError(f"face index {i} outside [0, {self.size})")
        z = self.latents(indices).to(self.device)[:, :, None, None]
        x = load_face_generator(self.device)(z).float()
        if self.resolution != NATIVE_SIZE:
            x = F.interpolate(x, size=(self.resolution, self.resolution), mode="bicubic", align_corners=False, antialias=True)
        return x.clamp(-1, 1)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.get_batch([index])[0]

    def uint8(self, indices: Sequence[int]) -> np.ndarray:
        """Faces ``indices`` as uint8 ``[B,R,R,3]`` (the format judges and the public API take)."""
        from .imageio import from_tensor

        return from_tensor(self.get_batch(indices).cpu())


def synthetic_faces_uint8(n: int, seed: int = 0, resolution: int = NATIVE_SIZE, offset: int = 0, chunk: int = 256) -> np.ndarray:
    """``n`` synthetic faces as uint8 ``[n,R,R,3]``."""
    ds = SyntheticFaces(size=offset + n if offset else n, seed=seed, resolution=resolution)
    out = [ds.uint8(range(offset + s, offset + min(n, s + chunk))) for s in range(0, n, chunk)]
    return np.concatenate(out, axis=0)
