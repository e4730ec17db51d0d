"""IR / IR-SE residual backbone shared by pSp, e4e and the ArcFace IR-SE50 identity encoder.

The layout (module and key names) follows the improved-residual ("IR") ResNet of ArcFace
(Deng et al., CVPR 2019) as laid out in TreB1eN's InsightFace_Pytorch and reused by pSp/e4e, so
their checkpoints load 1:1::

    input_layer.0 Conv2d(3, 64, 3, 1, 1, bias=False)   .1 BatchNorm2d(64)   .2 PReLU(64)
    body.i   one bottleneck unit:
        shortcut_layer   MaxPool2d(1, stride) when in == depth, else Sequential(Conv2d 1x1 stride, BN)
        res_layer        .0 BN(in) .1 Conv3x3(in, depth) .2 PReLU(depth) .3 Conv3x3(depth, depth, stride)
                         .4 BN(depth) [.5 SEModule(depth, 16): fc1, fc2 1x1 convs without bias]

Stages (blocks per stage) for depth 50/100/152 are [3, 4, 14, 3], [3, 13, 30, 3], [3, 8, 36, 3]
with widths [64, 128, 256, 512]; the first unit of every stage has stride 2, so a 256 px input gives
stage outputs at 128, 64, 32, 16 px (112 px input: 56, 28, 14, 7).

Tiny configurations (tests, ablations) override ``stage_units`` and ``channels``; keep the stage
widths distinct so converters can recover the stage boundaries from tensor shapes.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

__all__ = [
    "STAGE_UNITS",
    "STAGE_CHANNELS",
    "SEModule",
    "BottleneckIR",
    "BottleneckIRSE",
    "stage_layout",
    "make_input_layer",
    "make_body",
    "infer_body_layout",
    "fill_bn_counters",
    "strip_prefix",
]

STAGE_UNITS: dict[int, list[int]] = {50: [3, 4, 14, 3], 100: [3, 13, 30, 3], 152: [3, 8, 36, 3]}
STAGE_CHANNELS: list[int] = [64, 128, 256, 512]


class SEModule(nn.Module):
    """Squeeze-and-excitation: x * sigmoid(fc2(relu(fc1(avgpool(x))))). [N,C,H,W] -> [N,C,H,W]."""

    def __init__(self, channels: int, reduction: int = 16):
        super().__init__()
        hidden = max(1, channels // reduction)
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, hidden, kernel_size=1, padding=0, bias=False)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(hidden, channels, kernel_size=1, padding=0, bias=False)
        self.sigmoid = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.sigmoid(self.fc2(self.relu(self.fc1(self.avg_pool(x)))))
        return x * w


class BottleneckIR(nn.Module):
    """Improved residual unit: BN-Conv-PReLU-Conv(stride)-BN (+SE), plus a shortcut.

    [N, in_channel, H, W] -> [N, depth, H/stride, W/stride].
    """

    use_se = False

    def __init__(self, in_channel: int, depth: int, stride: int):
        super().__init__()
        if in_channel == depth:
            self.shortcut_layer: nn.Module = nn.MaxPool2d(1, stride)
        else:
            self.shortcut_layer = nn.Sequential(nn.Conv2d(in_channel, depth, (1, 1), stride, bias=False), nn.BatchNorm2d(depth))
        layers: list[nn.Module] = [
            nn.BatchNorm2d(in_channel),
            nn.Conv2d(in_channel, depth, (3, 3), (1, 1), 1, bias=False),
            nn.PReLU(depth),
            nn.Conv2d(depth, depth, (3, 3), stride, 1, bias=False),
            nn.BatchNorm2d(depth),
        ]
        if self.use_se:
            layers.append(SEModule(depth, 16))
        self.res_layer = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res_layer(x) + self.shortcut_layer(x)


class BottleneckIRSE(BottleneckIR):
    """IR unit with a squeeze-and-excitation module at ``res_layer.5``."""

    use_se = True


def stage_layout(num_layers: int = 50, stage_units: Sequence[int] | None = None, channels: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
    """Return ``(units per stage, width per stage)``; explicit ``stage_units``/``channels`` win."""
    if stage_units is None:
        if num_layers not in STAGE_UNITS:
            raise ValueError(f"num_layers should be one of {sorted(STAGE_UNITS)}, got {num_layers}")
        stage_units = STAGE_UNITS[num_layers]
    channels = list(channels) if channels is not None else list(STAGE_CHANNELS)
    if len(stage_units) != len(channels):
        raise ValueError(f"stage_units {list(stage_units)} and channels {channels} differ in length")
    if any(u < 1 for u in stage_units) or any(c < 1 for c in channels):
        raise ValueError("every stage needs at least one unit and one channel")
    return list(stage_units), channels


def make_input_layer(in_channels: int, width: int) -> nn.Sequential:
    """``input_layer``: Conv3x3(in, width, bias=False) - BN - PReLU, stride 1."""
    return nn.Sequential(nn.Conv2d(in_channels, width, (3, 3), 1, 1, bias=False), nn.BatchNorm2d(width), nn.PReLU(width))


def make_body(stage_units: Sequence[int], channels: Sequence[int], mode: str = "ir_se") -> tuple[nn.Sequential, list[int]]:
    """Build ``body`` (a flat Sequential of units) and the index of the last unit of each stage.

    The input width is ``channels[0]`` (the width of ``input_layer``).
    """
    if mode not in ("ir", "ir_se"):
        raise ValueError(f"mode should be 'ir' or 'ir_se', got {mode!r}")
    unit = BottleneckIRSE if mode == "ir_se" else BottleneckIR
    modules: list[nn.Module] = []
    stage_ends: list[int] = []
    in_ch = channels[0]
    for n_units, depth in zip(stage_units, channels):
        for i in range(n_units):
            modules.append(unit(in_ch, depth, 2 if i == 0 else 1))
            in_ch = depth
        stage_ends.append(len(modules) - 1)
    return nn.Sequential(*modules), stage_ends


def infer_body_layout(state: dict[str, torch.Tensor], prefix: str = "") -> tuple[list[int], list[int], str]:
    """Recover ``(stage_units, channels, mode)`` from an IR/IR-SE state dict (keys ``body.i.*``).

    Stages are runs of units with the same output width (official layouts have distinct widths).
    """
    depths: list[int] = []
    i = 0
    while f"{prefix}body.{i}.res_layer.1.weight" in state:
        depths.append(int(state[f"{prefix}body.{i}.res_layer.1.weight"].shape[0]))
        i += 1
    if not depths:
        raise KeyError(f"no '{prefix}body.0.res_layer.1.weight' key: not an IR/IR-SE backbone")
    units: list[int] = []
    channels: list[int] = []
    for d in depths:
        if channels and channels[-1] == d:
            units[-1] += 1
        else:
            channels.append(d)
            units.append(1)
    mode = "ir_se" if f"{prefix}body.0.res_layer.5.fc1.weight" in state else "ir"
    return units, channels, mode


def fill_bn_counters(state: dict[str, torch.Tensor], module: nn.Module) -> dict[str, torch.Tensor]:
    """Add BatchNorm ``num_batches_tracked`` counters that old checkpoints (PyTorch < 0.4.1) lack.

    The counter only matters when training with ``momentum=None``; it never changes a forward pass.
    """
    state = dict(state)
    for key, value in module.state_dict().items():
        if key.endswith("num_batches_tracked") and key not in state:
            state[key] = torch.zeros_like(value)
    return state


def strip_prefix(state: dict[str, torch.Tensor], prefix: str = "module.") -> dict[str, torch.Tensor]:
    """Drop a prefix carried by every key (e.g. ``module.`` from ``DataParallel``)."""
    if state and all(k.startswith(prefix) for k in state):
        return {k[len(prefix) :]: v for k, v in state.items()}
    return dict(state)
