"""A tiny method that implements the training protocol (``training/PROTOCOL.md``), registered nowhere.

It exists to test and demonstrate the trainer: a keyed residual "anonymizer" ``G``, its keyed inverse
``R`` and a small discriminator ``D``, trained in two stages like the papers' methods:

* stage 1, groups ``d`` then ``g``: ``G`` learns to move the image away from the input (by a pixel
  margin) with a random key, to be the identity with the zero key, and to look real to ``D``
  (non-saturating GAN loss, lazy R1 on ``D``);
* stage 2, group ``g``: ``R`` learns to invert ``G`` with the right key (L1) and not with a wrong one.

Everything is small enough to train a few dozen steps on a CPU in seconds.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import torch
from torch import nn

from zoo import losses
from zoo.hub import HubModule
from zoo.keys import KeyMaterial
from zoo.methods.base import NeuralMethod

__all__ = ["ToyKeyedNet", "ToyDiscriminator", "ToyMethod", "toy_config"]


class ToyKeyedNet(HubModule):
    """``y = x + scale * tanh(conv(x, key))``: ``[B,3,R,R]`` in [-1,1] and a ``[B,key_dim]`` key."""

    def __init__(self, channels: int = 8, key_dim: int = 8, scale: float = 0.5):
        super().__init__()
        self.key_dim, self.scale = key_dim, scale
        self.inp = nn.Conv2d(3, channels, 3, padding=1)
        self.key = nn.Linear(key_dim, channels)
        self.out = nn.Conv2d(channels, 3, 3, padding=1)

    def forward(self, x: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x) + self.key(key)[:, :, None, None])
        return (x + self.scale * torch.tanh(self.out(h))).clamp(-1, 1)


class ToyDiscriminator(HubModule):
    """``[B,3,R,R]`` -> ``[B]`` logits."""

    def __init__(self, channels: int = 8):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, channels, 4, 2, 1),
            nn.LeakyReLU(0.2),
            nn.Conv2d(channels, channels, 4, 2, 1),
            nn.LeakyReLU(0.2),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(channels, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(1)


def toy_config(steps: int = 20, resolution: int = 16, batch_size: int = 4, **overrides: Any) -> dict[str, Any]:
    """A complete training config for :class:`ToyMethod` (what a ``<m>_tiny.yaml`` looks like)."""
    cfg: dict[str, Any] = {
        "method": "toy",
        "resolution": resolution,
        "seed": 0,
        "model": {"channels": 8, "key_dim": 8},
        "identity_encoder": None,
        "stages": {
            1: {
                "steps": steps,
                "batch_size": batch_size,
                "optimizer": {
                    "d": {"name": "adam", "lr": 2e-3, "betas": [0.0, 0.99]},
                    "g": {"name": "ranger", "lr": 5e-3},
                },
                "lambdas": {"adv": 0.1, "away": 1.0, "rec": 1.0},
                "r1": {"gamma": 1.0, "every": 4},
                "margin": 0.3,
            },
            2: {
                "steps": steps,
                "batch_size": batch_size,
                "optimizer": {"g": {"name": "adam", "lr": 5e-3, "betas": [0.0, 0.999]}},
                "lambdas": {"rec": 1.0, "wrong": 0.1},
            },
        },
        "ema": {"group": "g", "decay": 0.9},
        "data": {"source": "synthetic", "seed": 0, "size": 64},
        "sample_every": 10,
        "save_every": 1000,
    }
    cfg.update(overrides)
    return cfg


class ToyMethod(NeuralMethod):
    name = "toy"
    summary = "Toy keyed residual anonymizer used to test the trainer (not a real method)."
    reversible = True
    component_names = ("anonymizer", "recoverer", "discriminator")
    stages: ClassVar[tuple[int, ...]] = (1, 2)
    resolution = 16

    train_generator: torch.Generator | None = None

    # ------------------------------------------------------------------ protocol
    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "ToyMethod":
        m = config.get("model", {})
        comps = {
            "anonymizer": ToyKeyedNet(m.get("channels", 8), m.get("key_dim", 8)),
            "recoverer": ToyKeyedNet(m.get("channels", 8), m.get("key_dim", 8)),
            "discriminator": ToyDiscriminator(m.get("channels", 8)),
        }
        return cls(config, comps)

    def trainable_parameters(self, stage: int) -> dict[str, list[nn.Parameter]]:
        c = self.components
        if stage == 1:
            return {"d": list(c["discriminator"].parameters()), "g": list(c["anonymizer"].parameters())}
        if stage == 2:
            return {"g": list(c["recoverer"].parameters())}
        raise ValueError(f"toy has stages (1, 2), not {stage}")

    def _random_keys(self, n: int) -> torch.Tensor:
        kd = self.components["anonymizer"].key_dim
        return (torch.rand(n, kd, generator=self.train_generator) * 2 - 1).to(self.device)

    def compute_losses(self, stage: int, group: str, batch: dict[str, torch.Tensor], step: int):
        cfg = self.config["stages"][stage]
        lam = cfg["lambdas"]
        x = batch["image"]
        c = self.components
        if stage == 1 and group == "d":
            with torch.no_grad():
                fake = c["anonymizer"](x, self._random_keys(len(x)))
            real = batch["image_b"].detach().requires_grad_(True)
            real_pred = c["discriminator"](real)
            loss = losses.nonsaturating_d_loss(real_pred, c["discriminator"](fake))
            logs = {"d_adv": float(loss.detach())}
            loss = losses.add_lazy_r1(loss, logs, real_pred, real, cfg.get("r1"), step)
            return loss, logs
        if stage == 1 and group == "g":
            y = c["anonymizer"](x, self._random_keys(len(x)))
            y0 = c["anonymizer"](x, torch.zeros(len(x), c["anonymizer"].key_dim, device=self.device))
            margin = float(cfg.get("margin", 0.3))
            terms = {
                "adv": lambda: losses.nonsaturating_g_loss(c["discriminator"](y)),
                "away": lambda: torch.relu(margin - (y - x).abs().flatten(1).mean(1)).mean(),
                "rec": lambda: losses.l1_loss(y0, x),  # the zero key is the identity map
            }
            return losses.weighted_sum(terms, lam)
        if stage == 2 and group == "g":
            k = self._random_keys(len(x))
            wrong = self._random_keys(len(x))
            with torch.no_grad():
                y = c["anonymizer"](x, k)
            terms = {
                "rec": lambda: losses.l1_loss(c["recoverer"](y, k), x),
                "wrong": lambda: torch.relu(0.1 - (c["recoverer"](y, wrong) - x).abs().mean()),
            }
            return losses.weighted_sum(terms, lam)
        raise ValueError(f"no group {group!r} in stage {stage}")

    def sample_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = batch["image"]
        k, wrong = self._random_keys(len(x)), self._random_keys(len(x))
        y = self.components["anonymizer"](x, k)
        return {
            "input": x,
            "anonymized": y,
            "recovered": self.components["recoverer"](y, k),
            "wrong_key": self.components["recoverer"](y, wrong),
        }

    # ------------------------------------------------------------------ inference
    def _key_tensor(self, keys: Sequence[KeyMaterial]) -> torch.Tensor:
        kd = self.components["anonymizer"].key_dim
        return torch.stack([k.uniform(kd, context="toy") for k in keys]).to(self.device, self.dtype)

    def anonymize_faces(self, x: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        return self.components["anonymizer"](x, self._key_tensor(keys))

    def recover_faces(self, y: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        return self.components["recoverer"](y, self._key_tensor(keys))
