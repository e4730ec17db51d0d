"""Exponential moving average of a group of parameters (the generator EMA of StyleGAN-family training).

``ema.update()`` after each optimizer step of the group: ``shadow = decay * shadow + (1 - decay) * param``.
``with ema.applied():`` swaps the averaged weights in (for sampling and saving) and restores the live
ones afterwards. ``state_dict()`` / ``load_state_dict()`` make it part of accelerate's checkpoint
(``accelerator.register_for_checkpointing(ema)``), so a resumed run continues the same average.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator

import torch

__all__ = ["EMA"]


class EMA:
    def __init__(self, params: Iterable[torch.nn.Parameter], decay: float = 0.999):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay must be in [0, 1), got {decay}")
        self.params = list(params)
        self.decay = float(decay)
        self.shadow = [p.detach().clone().float() for p in self.params]
        self.num_updates = 0

    @torch.no_grad()
    def update(self) -> None:
        for s, p in zip(self.shadow, self.params):
            s.lerp_(p.detach().float(), 1.0 - self.decay)
        self.num_updates += 1

    @torch.no_grad()
    def copy_to(self, params: Iterable[torch.nn.Parameter] | None = None) -> None:
        for s, p in zip(self.shadow, params if params is not None else self.params):
            p.copy_(s.to(p.dtype))

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Temporarily load the averaged weights into the live parameters."""
        backup = [p.detach().clone() for p in self.params]
        self.copy_to()
        try:
            yield
        finally:
            with torch.no_grad():
                for p, b in zip(self.params, backup):
                    p.copy_(b)

    def to(self, device: torch.device | str) -> "EMA":
        self.shadow = [s.to(device) for s in self.shadow]
        return self

    def state_dict(self) -> dict:
        return {"decay": self.decay, "num_updates": self.num_updates, "shadow": [s.clone() for s in self.shadow]}

    def load_state_dict(self, state: dict) -> None:
        if len(state["shadow"]) != len(self.shadow):
            raise ValueError(f"EMA state has {len(state['shadow'])} tensors, expected {len(self.shadow)}")
        self.decay = float(state["decay"])
        self.num_updates = int(state["num_updates"])
        self.shadow = [s.to(old.device, old.dtype).clone() for s, old in zip(state["shadow"], self.shadow)]
