"""The reference library's training faces: synthetic or a folder of aligned crops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

_IMAGE_EXT = (".jpg", ".jpeg", ".png", ".webp", ".bmp")


def load_library_images(
    spec: str, limit: int | None = None, labels_from_subfolders: bool = False, resolution: int = 256
) -> tuple[torch.Tensor, list[Any] | None]:
    """Faces for the library as ``[N,3,R,R]`` in [-1,1] (R = ``resolution``) and their identity labels.

    ``spec``: ``synthetic:N[:SEED]`` (the seeded synthetic faces; each is its own identity) or a folder
    of aligned crops (``labels_from_subfolders``: the first sub-folder names the identity).
    """
    if spec.startswith("synthetic:"):
        parts = spec.split(":")
        n = int(parts[1])
        seed = int(parts[2]) if len(parts) > 2 else 0
        from zoo.synthetic import SyntheticFaces

        ds = SyntheticFaces(size=n, seed=seed, resolution=resolution)
        return torch.cat([ds.get_batch(range(s, min(n, s + 64))) for s in range(0, n, 64)]), None
    from PIL import Image

    from ...imageio import to_tensor

    root = Path(spec)
    files = sorted(p for p in root.rglob("*") if p.suffix.lower() in _IMAGE_EXT)
    if limit:
        files = files[: int(limit)]
    if not files:
        raise FileNotFoundError(f"no images under {root}")
    imgs = torch.cat([to_tensor(np.asarray(Image.open(f).convert("RGB")), resolution) for f in files])
    labels = [f.relative_to(root).parts[0] for f in files] if labels_from_subfolders else None
    return imgs, labels
