"""The W+ encoder of the FFHQ-grade generator (:mod:`zoo.nn.mobilestylegan`): an FFHQ-aligned face -> W+ ``[B,23,512]``.

In the spirit of e4e (Tov et al. 2021): the code is ``w_avg`` plus a base offset shared by every slot plus per-slot
offsets, read from a small feature pyramid (coarse slots from the 8 px level, medium from 16 px, fine from 32 px), so
the prediction starts at the generator's average face and training can keep the per-slot offsets small. The
backbone is a small residual network trained here from scratch on the generator's own samples
(``training/wplus_encoder.py``); no pretrained trunk ships offline.

    WPlusEncoder()(x)   # x [B,3,256,256] in [-1,1], FFHQ-aligned -> W+ [B,23,512]
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from ..hub import HubModule
from .mobilestylegan import NUM_SLOTS, STYLE_DIM

__all__ = ["SLOT_LEVELS", "WPlusEncoder", "encoder_dir", "load_wplus_encoder"]

#: which pyramid level predicts each W+ slot: 0 = 8 px (conv1 and blocks 0-1: pose, face shape), 1 = 16 px
#: (blocks 2-3: features, expression), 2 = 32 px (blocks 4-6 and to_img: colour, texture)
SLOT_LEVELS = (0,) * 7 + (1,) * 6 + (2,) * 10


class ResidualBlock(nn.Module):
    """Two 3x3 convs (BatchNorm, LeakyReLU 0.2) with a projected shortcut; ``stride`` 2 halves the size."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.LeakyReLU(0.2),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) if (stride != 1 or cin != cout) else nn.Identity()
        self.act = nn.LeakyReLU(0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.body(x) + self.skip(x))


class WPlusEncoder(HubModule):
    """FFHQ-aligned ``[B,3,S,S]`` in [-1,1] (S = ``input_size``, others are resized) -> W+ ``[B,23,512]``."""

    def __init__(self, input_size: int = 128, widths: tuple[int, ...] = (32, 64, 128, 256, 256)):
        super().__init__()
        self.input_size = input_size
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 2, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.LeakyReLU(0.2))
        stages, cin = [], widths[0]
        for w in widths[1:]:
            stages.append(ResidualBlock(cin, w, 2))
            cin = w
        self.stages = nn.ModuleList(stages)  # 128 input: 64 -> 32, 16, 8, 4 px
        level_ch = (widths[-1], widths[-2], widths[-3])  # 4 px (coarse), 8 px (medium), 16 px (fine)
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.heads = nn.ModuleList(
            nn.Sequential(nn.Flatten(), nn.Linear(c * 4, 256), nn.LeakyReLU(0.2), nn.Linear(256, SLOT_LEVELS.count(i) * STYLE_DIM))
            for i, c in enumerate(level_ch)
        )
        self.base = nn.Sequential(nn.Flatten(), nn.Linear(level_ch[0] * 4, STYLE_DIM))
        self.register_buffer("w_avg", torch.zeros(STYLE_DIM))
        for head in list(self.heads) + [self.base]:  # start at w_avg: the last layers output zero
            nn.init.zeros_(head[-1].weight)
            nn.init.zeros_(head[-1].bias)

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """(coarse, medium, fine) pyramid levels."""
        if x.shape[-1] != self.input_size:
            x = nn.functional.interpolate(x, size=(self.input_size, self.input_size), mode="area" if x.shape[-1] > self.input_size else "bilinear")
        h = self.stem(x)
        outs = []
        for stage in self.stages:
            h = stage(h)
            outs.append(h)
        return [outs[-1], outs[-2], outs[-3]]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        levels = self.features(x)
        base = self.w_avg + self.base(self.pool(levels[0]))
        per_level = [head(self.pool(f)).view(x.shape[0], -1, STYLE_DIM) for head, f in zip(self.heads, levels)]
        offsets = torch.cat(per_level, dim=1)  # slots ordered by level, which is slot order (SLOT_LEVELS ascends)
        assert offsets.shape[1] == NUM_SLOTS
        return base[:, None] + offsets


def encoder_dir() -> Path:
    """The encoder trained here, shipped with the package (``zoo/weights/wplus_encoder``: fp16 safetensors + config)."""
    return Path(__file__).resolve().parent.parent / "weights" / "wplus_encoder"


@lru_cache(maxsize=1)
def load_wplus_encoder() -> WPlusEncoder | None:
    """The shipped encoder (eval, frozen, fp32 on the CPU), or None when no weights ship."""
    from safetensors.torch import load_file

    from ..convert import check_and_load

    f = encoder_dir() / "model.safetensors"
    if not f.is_file():
        return None
    config = json.loads((encoder_dir() / "config.json").read_text())
    with torch.inference_mode(False):
        enc = WPlusEncoder(input_size=int(config.get("input_size", 128)))
        check_and_load(enc, {k: v.float() for k, v in load_file(str(f)).items()}, "W+ encoder")
    return enc.eval().requires_grad_(False)
