"""ResNet-18 trunk (He et al., 2016) returning the 1/8, 1/16, 1/32 feature maps, for BiSeNet.

Key names follow torchvision's ``resnet18`` minus ``fc`` (``conv1, bn1, layer{1..4}.{i}.{conv1, bn1,
conv2, bn2, downsample.{0,1}}``), which is also the ``cp.resnet.*`` part of zllrunning's
face-parsing ``79999_iter.pth``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.hub import HubModule

__all__ = ["BasicBlock", "ResNetTrunk"]


class BasicBlock(nn.Module):
    """Conv3x3(stride)-BN-ReLU-Conv3x3-BN, + shortcut (1x1 conv + BN when the shape changes), ReLU."""

    def __init__(self, in_chan: int, out_chan: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_chan, out_chan, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_chan)
        self.conv2 = nn.Conv2d(out_chan, out_chan, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_chan)
        self.downsample: nn.Module | None = None
        if in_chan != out_chan or stride != 1:
            self.downsample = nn.Sequential(nn.Conv2d(in_chan, out_chan, 1, stride, bias=False), nn.BatchNorm2d(out_chan))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(shortcut + residual)


class ResNetTrunk(HubModule):
    """ResNet-18-style trunk: x [N,3,H,W] (ImageNet-normalised) -> (feat8, feat16, feat32).

    feat8 [N, channels[1], H/8, W/8], feat16 [N, channels[2], H/16, W/16], feat32 [N, channels[3], H/32, W/32].
    ``layers``/``channels`` default to ResNet-18 ([2,2,2,2], [64,128,256,512]).
    """

    def __init__(self, layers: list[int] | None = None, channels: list[int] | None = None):
        super().__init__()
        layers = list(layers) if layers is not None else [2, 2, 2, 2]
        chans = list(channels) if channels is not None else [64, 128, 256, 512]
        self.conv1 = nn.Conv2d(3, chans[0], kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(chans[0])
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        in_chan = chans[0]
        for i, (n, c) in enumerate(zip(layers, chans)):
            stride = 1 if i == 0 else 2
            blocks = [BasicBlock(in_chan, c, stride)] + [BasicBlock(c, c, 1) for _ in range(n - 1)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
            in_chan = c

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        feat8 = self.layer2(self.layer1(x))
        feat16 = self.layer3(feat8)
        feat32 = self.layer4(feat16)
        return feat8, feat16, feat32
