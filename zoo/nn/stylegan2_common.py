"""What the StyleGAN2 generator and discriminator share (rosinality layout).

The default blur kernel, the channel count per resolution, the output size check, and the helpers
their converters use to read a rosinality checkpoint and infer its configuration from tensor shapes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from zoo.convert import ConversionError

__all__ = ["DEFAULT_BLUR", "stylegan2_channels", "log2_size", "unwrap_state_dict", "key_shape", "infer_channels"]

DEFAULT_BLUR = (1, 3, 3, 1)


def stylegan2_channels(channel_multiplier: int = 2, channel_max: int = 512) -> dict[int, int]:
    """Channel count per resolution: 512 up to 32 px, then ``(16384 / res) * channel_multiplier``,
    every value clamped to ``channel_max`` (512 with multiplier <= 2 is the official config-f)."""
    base = {4: 512, 8: 512, 16: 512, 32: 512}
    for res in (64, 128, 256, 512, 1024):
        base[res] = (16384 // res) * channel_multiplier
    return {res: min(c, channel_max) for res, c in base.items()}


def log2_size(size: int) -> int:
    """log2 of a StyleGAN2 output size; ValueError unless ``size`` is a power of two in [4, 1024]."""
    log_size = int(math.log2(size)) if size > 0 else 0
    if size < 4 or 2**log_size != size or size > 1024:
        raise ValueError(f"StyleGAN2 size must be a power of two in [4, 1024], got {size}")
    return log_size


def unwrap_state_dict(state: Mapping[str, Any], entry: str, marker: str) -> dict[str, torch.Tensor]:
    """The state dict under ``entry`` of a rosinality checkpoint (e.g. ``g_ema``, ``d``), or ``state``
    itself when it is a bare state dict (holds ``marker``); ConversionError otherwise or on non-tensors."""
    if entry in state and isinstance(state[entry], Mapping):
        sd = state[entry]
    elif marker in state:
        sd = state
    else:
        raise ConversionError(f"expected a rosinality checkpoint with a {entry!r} entry (or a bare state dict); got keys {sorted(state)[:6]}")
    bad = [k for k, v in sd.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise ConversionError(f"{entry}: non-tensor entries {bad[:3]}")
    return dict(sd)


def key_shape(sd: Mapping[str, torch.Tensor], key: str, what: str) -> tuple[int, ...]:
    """Shape of ``sd[key]``; ConversionError naming ``what`` when the key is missing."""
    if key not in sd:
        raise ConversionError(f"{what}: missing key {key!r}")
    return tuple(sd[key].shape)


def infer_channels(observed: dict[int, int], what: str) -> tuple[int, int]:
    """Find (channel_multiplier, channel_max) reproducing the observed {res: channels}."""
    cmax = max(observed.values())
    for cm in [2, 1] + list(range(3, 65)):
        chans = stylegan2_channels(cm, cmax)
        if all(chans[r] == c for r, c in observed.items()):
            return cm, cmax
    raise ConversionError(f"{what}: channel counts {observed} match no StyleGAN2 configuration")
