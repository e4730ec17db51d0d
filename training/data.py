"""Training data: synthetic faces, an image folder, or a Hub dataset; batches indexed by step.

Every batch is a pure function of ``(seed, step, micro_batch, process)``: sample number
``g = ((step * grad_accum + micro) * world + rank) * B + j`` of an endless stream is item
``perm_e[g mod N]`` of epoch ``e = g div N``, with one seeded permutation per epoch. A run resumed at
step ``s`` therefore sees exactly the batches a straight run sees, with no data-loader state to save.
Streaming Hub datasets (no random access) are read in order after a seeded shuffle buffer and skip
the samples already consumed on resume.

Batches are ``{"image": [B,3,R,R], "image_b": [B,3,R,R]}`` float32 in [-1,1]; ``image_b`` are other
images (a second seeded permutation, never the same index as ``image`` when N > 1), the X_id / X_attr
partners of the swap-based stages.

Config (``data:`` in the training YAML)::

    {source: synthetic, seed: 0, size: null}        # size null: an endless stream of new faces
    {source: folder, path: DIR}                      # any tree of .jpg/.jpeg/.png/.webp/.bmp
    {source: hub, name: owner/dataset, split: train, streaming: false, image_column: image}
    {source: hub, name: imagefolder, data_dir: DIR}  # datasets' imagefolder builder (works offline)
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import torch
from PIL import Image

__all__ = [
    "ImageSource",
    "SyntheticSource",
    "FolderSource",
    "HubSource",
    "StreamingHubSource",
    "build_source",
    "StepBatches",
    "IMAGE_EXTENSIONS",
    "pil_to_tensor",
]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
_B_OFFSET = 1 << 40  # synthetic image_b faces come from a disjoint index range


def _seed_of(*parts: Any) -> int:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def pil_to_tensor(img: Image.Image, resolution: int) -> torch.Tensor:
    """PIL image -> ``[3,R,R]`` float32 in [-1,1]: centre square crop, Lanczos resize."""
    img = img.convert("RGB")
    w, h = img.size
    s = min(w, h)
    left, top = (w - s) // 2, (h - s) // 2
    img = img.crop((left, top, left + s, top + s))
    if s != resolution:
        img = img.resize((resolution, resolution), Image.LANCZOS)
    arr = np.asarray(img, dtype=np.uint8)
    return torch.from_numpy(arr.copy()).permute(2, 0, 1).float() / 127.5 - 1.0


class ImageSource:
    """A source of images by global sample number (see the module docstring)."""

    resolution: int
    seed: int

    def __len__(self) -> int:  # number of distinct images (may be huge)
        raise NotImplementedError

    def load(self, indices: list[int]) -> torch.Tensor:
        """Images at dataset indices -> ``[B,3,R,R]`` in [-1,1]."""
        raise NotImplementedError

    @lru_cache(maxsize=4)  # noqa: B019 - a handful of long-lived datasets per run; the cache is the point
    def _perm(self, epoch: int, which: str) -> np.ndarray:
        g = torch.Generator().manual_seed(_seed_of("perm", self.seed, epoch, which))
        return torch.randperm(len(self), generator=g).numpy()

    def indices(self, sample_numbers: list[int]) -> tuple[list[int], list[int]]:
        """Dataset indices of ``image`` and ``image_b`` for global sample numbers."""
        n = len(self)
        a_idx, b_idx = [], []
        for g in sample_numbers:
            epoch, pos = divmod(int(g), n)
            a = int(self._perm(epoch, "a")[pos])
            b = int(self._perm(epoch, "b")[pos])
            if b == a and n > 1:
                b = int(self._perm(epoch, "b")[(pos + 1) % n])
            a_idx.append(a)
            b_idx.append(b)
        return a_idx, b_idx

    def batch(self, sample_numbers: list[int]) -> dict[str, torch.Tensor]:
        a, b = self.indices(sample_numbers)
        return {"image": self.load(a), "image_b": self.load(b)}


class SyntheticSource(ImageSource):
    """DCGAN synthetic faces (:mod:`zoo.synthetic`). ``size=None``: every sample is a new face."""

    def __init__(self, resolution: int, seed: int = 0, size: int | None = None, cache: bool | None = None):
        from zoo.synthetic import SyntheticFaces

        self.resolution, self.seed, self.size = int(resolution), int(seed), size
        self.faces = SyntheticFaces(size=size or (1 << 62), seed=seed, resolution=resolution)
        # a small fixed set is generated once and kept (uint8, so 10k faces at 256 px take ~2 GB)
        self.cache: dict[int, torch.Tensor] | None = {} if (cache if cache is not None else bool(size) and size <= 10_000) else None

    def __len__(self) -> int:
        return int(self.size) if self.size else (1 << 62)

    def indices(self, sample_numbers: list[int]) -> tuple[list[int], list[int]]:
        if self.size:
            return super().indices(sample_numbers)
        return [int(g) for g in sample_numbers], [int(g) + _B_OFFSET for g in sample_numbers]

    def load(self, indices: list[int]) -> torch.Tensor:
        if self.cache is None:
            return self.faces.get_batch(indices)
        todo = sorted({i for i in indices if i not in self.cache})
        if todo:
            made = self.faces.get_batch(todo).add(1).mul(127.5).round().to(torch.uint8)
            self.cache.update(zip(todo, made))
        return torch.stack([self.cache[i] for i in indices]).float() / 127.5 - 1.0


class FolderSource(ImageSource):
    """Every image file under ``path`` (recursively, sorted, so the order is the same everywhere)."""

    def __init__(self, path: str | Path, resolution: int, seed: int = 0):
        root = Path(path).expanduser()
        if not root.is_dir():
            raise FileNotFoundError(f"image folder {root} does not exist")
        self.files = sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file())
        if not self.files:
            raise FileNotFoundError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) under {root}")
        self.resolution, self.seed = int(resolution), int(seed)

    def __len__(self) -> int:
        return len(self.files)

    def load(self, indices: list[int]) -> torch.Tensor:
        out = []
        for i in indices:
            with Image.open(self.files[i]) as img:
                out.append(pil_to_tensor(img, self.resolution))
        return torch.stack(out)


class HubSource(ImageSource):
    """A ``datasets`` dataset with random access (``load_dataset(name, split=...)``, not streaming)."""

    def __init__(self, name: str, resolution: int, seed: int = 0, split: str = "train", image_column: str = "image", **load_kwargs: Any):
        import datasets

        self.ds = datasets.load_dataset(name, split=split, **load_kwargs)
        if image_column not in self.ds.column_names:
            raise KeyError(f"dataset {name!r} has no column {image_column!r}; columns: {self.ds.column_names}")
        self.column, self.resolution, self.seed = image_column, int(resolution), int(seed)

    def __len__(self) -> int:
        return len(self.ds)

    def load(self, indices: list[int]) -> torch.Tensor:
        rows = self.ds[indices][self.column]
        return torch.stack([pil_to_tensor(img, self.resolution) for img in rows])


class StreamingHubSource:
    """A streaming ``datasets`` dataset, read in order after a seeded shuffle buffer.

    Not indexable: :class:`StepBatches` reads it sequentially (``2B`` images per micro-batch: the first
    ``B`` are ``image``, the next ``B`` ``image_b``), and skips the consumed samples on resume.
    """

    def __init__(
        self, name: str, resolution: int, seed: int = 0, split: str = "train", image_column: str = "image", shuffle_buffer: int = 1000, **load_kwargs: Any
    ):
        import datasets

        self.ds = datasets.load_dataset(name, split=split, streaming=True, **load_kwargs)
        if shuffle_buffer:
            self.ds = self.ds.shuffle(seed=seed, buffer_size=shuffle_buffer)
        self.column, self.resolution, self.seed = image_column, int(resolution), int(seed)

    def stream(self, skip: int, rank: int, world: int) -> Iterator[torch.Tensor]:
        from datasets.distributed import split_dataset_by_node

        ds = split_dataset_by_node(self.ds, rank=rank, world_size=world) if world > 1 else self.ds
        if skip:
            ds = ds.skip(skip)
        epoch = 0
        while True:
            ds.set_epoch(epoch) if hasattr(ds, "set_epoch") else None
            for row in ds:
                yield pil_to_tensor(row[self.column], self.resolution)
            epoch += 1


def build_source(data: Mapping[str, Any], resolution: int, seed: int = 0):
    """An image source from the config's ``data:`` mapping."""
    data = dict(data or {"source": "synthetic"})
    kind = data.pop("source", "synthetic")
    seed = int(data.pop("seed", seed))
    if kind == "synthetic":
        return SyntheticSource(resolution, seed=seed, size=data.get("size"), cache=data.get("cache"))
    if kind == "folder":
        return FolderSource(data["path"], resolution, seed=seed)
    if kind == "hub":
        name = data.pop("name")
        streaming = bool(data.pop("streaming", False))
        cls = StreamingHubSource if streaming else HubSource
        return cls(name, resolution, seed=seed, **data)
    raise ValueError(f"unknown data source {kind!r} (synthetic | folder | hub)")


class StepBatches(torch.utils.data.IterableDataset):
    """Micro-batches from ``start_step`` on, in order: one dict per (step, micro-batch).

    Safe with ``DataLoader(num_workers=k, batch_size=None)``: worker ``w`` makes every k-th
    micro-batch and the loader interleaves them back in order.
    """

    def __init__(self, source, batch_size: int, grad_accum: int = 1, start_step: int = 0, rank: int = 0, world: int = 1):
        self.source, self.batch_size, self.grad_accum = source, int(batch_size), int(grad_accum)
        self.start_step, self.rank, self.world = int(start_step), int(rank), int(world)

    def sample_numbers(self, step: int, micro: int) -> list[int]:
        first = ((step * self.grad_accum + micro) * self.world + self.rank) * self.batch_size
        return list(range(first, first + self.batch_size))

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        if isinstance(self.source, StreamingHubSource):
            if nw > 1:
                raise ValueError("streaming Hub datasets need num_workers <= 1")
            per_step = 2 * self.batch_size * self.grad_accum
            it = self.source.stream(self.start_step * per_step, self.rank, self.world)
            while True:
                imgs = [next(it) for _ in range(2 * self.batch_size)]
                yield {"image": torch.stack(imgs[: self.batch_size]), "image_b": torch.stack(imgs[self.batch_size :])}
        k = 0
        step = self.start_step
        while True:
            for micro in range(self.grad_accum):
                if k % nw == wid:
                    yield self.source.batch(self.sample_numbers(step, micro))
                k += 1
            step += 1
