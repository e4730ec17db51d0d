"""Exponential moving average of a group of parameters (the generator EMA of StyleGAN-family training).

``ema.update()`` after each optimizer step of the group: ``shadow = decay * shadow + (1 - decay) * param``.
With ``warmup=True`` the decay of update ``n`` (0-based) is ``min(decay, (1 + n) / (10 + n))`` (the
``num_updates`` rule of TensorFlow's ``ExponentialMovingAverage``), so a short run's average is not
dominated by the random initial weights: with 0.999 alone, 37% of the average after 1000 steps is
still the initialisation.
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
    def __init__(self, params: Iterable[torch.nn.Parameter], decay: float = 0.999, warmup: bool = False):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay must be in [0, 1), got {decay}")
        self.params = list(params)
        self.decay = float(decay)
        self.warmup = bool(warmup)
        self.shadow = [p.detach().clone().float() for p in self.params]
        self.num_updates = 0

    def current_decay(self) -> float:
        """The decay the next :meth:`update` uses."""
        n = self.num_updates
        return min(self.decay, (1.0 + n) / (10.0 + n)) if self.warmup else self.decay

    @torch.no_grad()
    def update(self) -> None:
        decay = self.current_decay()
        for s, p in zip(self.shadow, self.params):
            s.lerp_(p.detach().float(), 1.0 - decay)
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
        return {"decay": self.decay, "warmup": self.warmup, "num_updates": self.num_updates, "shadow": [s.clone() for s in self.shadow]}

    def load_state_dict(self, state: dict) -> None:
        if len(state["shadow"]) != len(self.shadow):
            raise ValueError(f"EMA state has {len(state['shadow'])} tensors, expected {len(self.shadow)}")
        self.decay = float(state["decay"])
        self.warmup = bool(state.get("warmup", False))
        self.num_updates = int(state["num_updates"])
        self.shadow = [s.to(old.device, old.dtype).clone() for s, old in zip(state["shadow"], self.shadow)]
