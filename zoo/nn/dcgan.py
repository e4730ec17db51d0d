"""The demo backbone: the packaged 64 px DCGAN face generator, its inversion encoder, latent refinement.

Paper-scale weights (StyleGAN2-FFHQ, e4e/pSp, ArcFace) are not reachable offline. The ``gan-face-generate``
package (MIT) ships a pretrained DCGAN (the PyTorch-tutorial architecture, trained on the synthetic
DigiFace-1M faces): ``z`` in R^100 (standard normal) -> a 64x64 face. This module gives the zoo:

* :class:`DCGANGenerator`, our implementation of that network. Its weights are read from the installed
  package (``torch.load(weights_only=True)``: tensors only) every time it is built; a method checkpoint
  stores only its config, never a copy of the weights.
* :class:`InversionEncoder`, a residual CNN ``[N,3,64,64] -> [N,100]`` trained on the generator's own
  samples (``training/configs/dcgan_encoder.yaml``), the e4e of this backbone.
* :func:`refine_latent`, Adam steps on ``z`` that fit ``G(z)`` to the target image (L1, optionally plus an
  identity term): the optimisation half of a hybrid GAN inversion; ``steps=0`` is the encoder alone.

Images are float ``[N,3,64,64]`` in [-1, 1]; latents float ``[N,100]``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..hub import HubModule

__all__ = ["DCGANGenerator", "InversionEncoder", "refine_latent", "invert", "packaged_weights_path", "LATENT_DIM", "NATIVE_SIZE"]

LATENT_DIM = 100
NATIVE_SIZE = 64
PACKAGE = "gan-face-generate"


def packaged_weights_path() -> Path:
    """``weights.tar`` of the installed ``gan-face-generate`` (a torch zip archive with ``netG_state_dict``)."""
    try:
        import gan_face_generate
    except ImportError as err:
        raise ImportError("the demo backbone needs the `gan-face-generate` package: pip install --no-deps gan-face-generate==1.1.1") from err
    path = Path(gan_face_generate.__file__).parent / "weights.tar"
    if not path.is_file():
        raise FileNotFoundError(f"gan-face-generate is installed but its weights file {path} is missing")
    return path


@lru_cache(maxsize=1)
def _packaged_state() -> dict[str, torch.Tensor]:
    state = torch.load(packaged_weights_path(), map_location="cpu", weights_only=True)["netG_state_dict"]
    return {k: v.clone() for k, v in state.items()}


class DCGANGenerator(HubModule):
    """DCGAN generator ``z [N,100] -> [N,3,64,64]`` in [-1,1] (5 transposed convs, BatchNorm in eval mode).

    ``weights="gan-face-generate"`` loads the packaged pretrained weights (key ``main.<i>`` of the
    package maps to ``net.<i>`` here); ``weights=None`` leaves a random init (tests). ``save_pretrained``
    writes the config only, so checkpoints never carry a copy of the package's weights.
    """

    def __init__(self, latent_dim: int = LATENT_DIM, width: int = 64, weights: str | None = PACKAGE):
        super().__init__()
        w = width
        chans = [latent_dim, 8 * w, 4 * w, 2 * w, w]
        layers: list[nn.Module] = []
        for i, (cin, cout) in enumerate(zip(chans[:-1], chans[1:])):
            layers += [nn.ConvTranspose2d(cin, cout, 4, 1 if i == 0 else 2, 0 if i == 0 else 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(True)]
        layers += [nn.ConvTranspose2d(w, 3, 4, 2, 1, bias=False), nn.Tanh()]
        self.net = nn.Sequential(*layers)
        self.latent_dim = latent_dim
        self.weights = weights
        if weights == PACKAGE:
            state = {k.replace("main.", "net.", 1): v for k, v in _packaged_state().items()}
            self.load_state_dict(state, strict=True)
        elif weights is not None:
            raise ValueError(f"unknown DCGAN weights {weights!r}; use {PACKAGE!r} or None")
        self.eval().requires_grad_(False)

    def train(self, mode: bool = True) -> "DCGANGenerator":
        # Frozen pretrained network: BatchNorm always uses its running statistics.
        return super().train(False)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z.reshape(z.shape[0], -1, 1, 1))

    # config-only checkpoints: the weights come from the package at build time
    def _save_pretrained(self, save_directory: Path) -> None:
        if self.weights is None:
            super()._save_pretrained(save_directory)

    @classmethod
    def _from_pretrained(cls, *, model_id: str, **kwargs: Any) -> "DCGANGenerator":
        init = {k: kwargs[k] for k in ("latent_dim", "width", "weights") if k in kwargs}
        if init.get("weights", PACKAGE) is None:
            return super()._from_pretrained(model_id=model_id, **kwargs)
        return cls(**init)


class _ResDown(nn.Module):
    """Pre-activation residual block that halves the resolution (strided first conv: half the FLOPs)."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, 2, 1)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.skip = nn.Conv2d(cin, cout, 1, 2, 0, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv2(F.leaky_relu(self.conv1(F.leaky_relu(x, 0.2)), 0.2))
        return (h + self.skip(x)) / 2**0.5


class InversionEncoder(HubModule):
    """``[N,3,64,64]`` in [-1,1] -> latent ``[N,latent_dim]`` of :class:`DCGANGenerator` (no normalisation
    layers, so a face's code does not depend on the batch it comes in)."""

    def __init__(self, latent_dim: int = LATENT_DIM, channels: tuple[int, ...] = (32, 64, 128, 256, 256)):
        super().__init__()
        channels = tuple(int(c) for c in channels)
        self.stem = nn.Conv2d(3, channels[0], 3, 1, 1)
        self.blocks = nn.Sequential(*[_ResDown(a, b) for a, b in zip(channels[:-1], channels[1:])])
        side = NATIVE_SIZE // 2 ** (len(channels) - 1)
        self.head = nn.Linear(channels[-1] * side * side, latent_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.leaky_relu(self.blocks(self.stem(x)), 0.2)
        return self.head(h.flatten(1))


def refine_latent(
    generator: nn.Module,
    target: torch.Tensor,
    z0: torch.Tensor,
    steps: int,
    lr: float = 0.05,
    identity: Callable[[torch.Tensor], torch.Tensor] | None = None,
    identity_weight: float = 0.0,
) -> torch.Tensor:
    """``steps`` Adam steps on ``z`` from ``z0``; returns the refined ``[N, D]`` latents (detached).

    Per face the loss is mean |G(z) - target| (L1 on [-1,1] pixels), plus, with an ``identity`` encoder
    (images [N,3,R,R] in [-1,1] -> unit embeddings [N,E], differentiable) and ``identity_weight`` w > 0,
    w (1 - cos(identity(G(z)), identity(target))): an identity-aware inversion, which fits who the face
    is where the 64 px generator cannot fit its pixels (real photos). Faces are optimised together but
    independently (the loss is a sum of per-face terms). Works inside ``inference_mode``/``no_grad`` callers.
    """
    if steps <= 0:
        return z0.detach().clone()
    use_identity = identity is not None and float(identity_weight) > 0.0
    with torch.inference_mode(False), torch.enable_grad():
        z = z0.detach().clone().requires_grad_(True)
        target = target.detach().clone()
        if use_identity:
            with torch.no_grad():
                target_id = identity(target).detach().clone()
        opt = torch.optim.Adam([z], lr=lr)
        for _ in range(int(steps)):
            opt.zero_grad(set_to_none=True)
            y = generator(z)
            loss = (y - target).abs().flatten(1).mean(1).sum()
            if use_identity:
                loss = loss + float(identity_weight) * (1.0 - (identity(y) * target_id).sum(1)).sum()
            loss.backward()
            opt.step()
        return z.detach()


def invert(
    generator: nn.Module,
    encoder: nn.Module,
    x: torch.Tensor,
    steps: int = 0,
    lr: float = 0.05,
    identity: Callable[[torch.Tensor], torch.Tensor] | None = None,
    identity_weight: float = 0.0,
) -> torch.Tensor:
    """Hybrid inversion: ``encoder(x)`` then ``steps`` refinement steps (:func:`refine_latent`) -> ``[N, D]``."""
    with torch.no_grad():
        z0 = encoder(x)
    return refine_latent(generator, x, z0, steps, lr, identity, identity_weight)
