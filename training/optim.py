"""Optimizers named in the papers: Ranger (RAdam + Lookahead), Adam, AdamW, RAdam, SGD.

``Ranger`` is what pSp / e4e / HFORD / DBAF train with: RAdam (Liu et al. 2020, ``torch.optim.RAdam``)
wrapped in Lookahead (Zhang et al. 2019; k=6 fast steps, then slow weights move alpha=0.5 of the way
towards the fast ones and the fast weights restart from them), optionally with gradient
centralisation (Yong et al. 2020; subtract each multi-dimensional gradient's mean over all but its
first axis) as in the Ranger implementation pSp ships. The slow weights live in the optimizer state,
so ``state_dict()`` / accelerate ``save_state`` capture everything needed for an exact resume.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch

__all__ = ["Ranger", "build_optimizer", "OPTIMIZERS"]


class Ranger(torch.optim.RAdam):
    """RAdam + Lookahead (+ gradient centralisation). Defaults follow pSp's Ranger: lr 1e-3,
    betas (0.95, 0.999), eps 1e-5, k 6, alpha 0.5, gradient centralisation on."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.95, 0.999),
        eps: float = 1e-5,
        weight_decay: float = 0.0,
        lookahead_k: int = 6,
        lookahead_alpha: float = 0.5,
        gradient_centralization: bool = True,
    ):
        if lookahead_k < 1:
            raise ValueError("lookahead_k must be >= 1")
        if not 0.0 < lookahead_alpha <= 1.0:
            raise ValueError("lookahead_alpha must be in (0, 1]")
        super().__init__(params, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, foreach=False)
        for group in self.param_groups:
            group.setdefault("lookahead_k", int(lookahead_k))
            group.setdefault("lookahead_alpha", float(lookahead_alpha))
            group.setdefault("gradient_centralization", bool(gradient_centralization))
            group.setdefault("lookahead_step", 0)

    @torch.no_grad()
    def step(self, closure=None):
        fresh: dict[torch.nn.Parameter, torch.Tensor] = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if "slow_buffer" not in self.state[p]:
                    fresh[p] = p.detach().clone()  # Lookahead's slow weights start at the weights before step 1
                if group["gradient_centralization"] and p.grad.dim() > 1:
                    p.grad.sub_(p.grad.mean(dim=tuple(range(1, p.grad.dim())), keepdim=True))
        loss = super().step(closure)
        for p, initial in fresh.items():
            self.state[p]["slow_buffer"] = initial
        for group in self.param_groups:
            group["lookahead_step"] += 1
            if group["lookahead_step"] % group["lookahead_k"] != 0:
                continue
            alpha = group["lookahead_alpha"]
            for p in group["params"]:
                slow = self.state[p].get("slow_buffer")
                if slow is None:
                    continue
                slow.add_(p.detach() - slow, alpha=alpha)  # slow += alpha (fast - slow)
                p.copy_(slow)  # fast weights restart from the slow ones
        return loss


OPTIMIZERS = {
    "ranger": Ranger,
    "radam": torch.optim.RAdam,
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "sgd": torch.optim.SGD,
}


def build_optimizer(params: Iterable[torch.nn.Parameter], spec: Mapping[str, Any]) -> torch.optim.Optimizer:
    """An optimizer from a config entry ``{name: ranger|adam|adamw|radam|sgd, lr: ..., betas: [...], ...}``.

    Every key besides ``name`` is passed to the optimizer's constructor (``betas`` lists become tuples).
    """
    spec = dict(spec)
    name = str(spec.pop("name", "adam")).lower()
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {sorted(OPTIMIZERS)}")
    if "betas" in spec:
        spec["betas"] = tuple(float(b) for b in spec["betas"])
    for key in ("lr", "eps", "weight_decay", "momentum", "lookahead_alpha"):
        if key in spec:
            spec[key] = float(spec[key])
    params = list(params)
    if not params:
        raise ValueError("optimizer group has no parameters")
    return OPTIMIZERS[name](params, **spec)
