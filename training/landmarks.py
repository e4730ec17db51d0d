"""A small differentiable 68-point landmark regressor (E_LM of iFADIT eqs. 13 and 20).

It is distilled from dlib's 68-point shape predictor by ``python -m training.distill landmarks`` and
saved with ``save_pretrained`` (``config.json`` + ``model.safetensors``), so a method loads it with
``LandmarkRegressor.from_pretrained(path)`` and uses it as a frozen network in its losses.

forward: FFHQ-aligned faces ``[N,3,H,W]`` in [-1,1] (any size; resized to ``input_size``) ->
``[N,68,2]`` landmark coordinates normalised to [0,1] of the crop (x, y), in dlib's point order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.hub import HubModule

__all__ = ["LandmarkRegressor"]


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, 2, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.PReLU(cout),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.PReLU(cout),
        )
        self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, 2, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + self.skip(x)


class LandmarkRegressor(HubModule):
    """Residual CNN: ``input_size`` px -> 4 stride-2 blocks -> global pool -> 136 outputs."""

    def __init__(self, input_size: int = 128, channels: list[int] | None = None, num_points: int = 68):
        super().__init__()
        chans = list(channels) if channels is not None else [32, 64, 128, 256]
        self.input_size, self.num_points = int(input_size), int(num_points)
        self.stem = nn.Sequential(nn.Conv2d(3, chans[0], 3, 1, 1, bias=False), nn.BatchNorm2d(chans[0]), nn.PReLU(chans[0]))
        blocks, cin = [], chans[0]
        for c in chans:
            blocks.append(_Block(cin, c))
            cin = c
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, 2 * num_points)
        # start at the mean face: zero weights, bias = 0.5 (centre); training moves it from there
        nn.init.zeros_(self.head.weight)
        nn.init.constant_(self.head.bias, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2:] != (self.input_size, self.input_size):
            x = F.interpolate(x, size=(self.input_size, self.input_size), mode="bilinear", align_corners=False, antialias=True)
        h = self.blocks(self.stem(x)).mean(dim=(2, 3))
        return self.head(h).view(-1, self.num_points, 2)
