"""StyleGAN2 discriminator (Karras et al., CVPR 2020) in the rosinality layout.

The residual discriminator with minibatch standard deviation, its building blocks (``ConvLayer``,
``ResBlock``) and the converter of rosinality's ``d`` entry: ``python -m zoo.convert
stylegan2-discriminator 550000.pt out/``. Parameter names and shapes are rosinality's
(``convs.*``, ``final_conv.*``, ``final_linear.*``). The generator is in :mod:`zoo.nn.stylegan2`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from zoo.convert import check_and_load, register_converter
from zoo.hub import HubModule
from zoo.nn.ops import Blur, EqualConv2d, EqualLinear, FusedLeakyReLU
from zoo.nn.stylegan2_common import DEFAULT_BLUR, infer_channels, key_shape, log2_size, stylegan2_channels, unwrap_state_dict

__all__ = ["Discriminator", "ConvLayer", "ResBlock", "discriminator_config_from_state_dict", "convert_stylegan2_discriminator"]


class ConvLayer(nn.Sequential):
    """[Blur] -> EqualConv2d -> [FusedLeakyReLU] (indices as in rosinality: ``0.kernel``, ``1.weight``...)."""

    def __init__(
        self,
        in_channel: int,
        out_channel: int,
        kernel_size: int,
        downsample: bool = False,
        blur_kernel: Sequence[int] = DEFAULT_BLUR,
        bias: bool = True,
        activate: bool = True,
    ):
        layers: list[nn.Module] = []
        if downsample:
            factor = 2
            p = (len(blur_kernel) - factor) + (kernel_size - 1)
            layers.append(Blur(blur_kernel, pad=((p + 1) // 2, p // 2)))
            stride, padding = 2, 0
        else:
            stride, padding = 1, kernel_size // 2
        layers.append(EqualConv2d(in_channel, out_channel, kernel_size, padding=padding, stride=stride, bias=bias and not activate))
        if activate:
            layers.append(FusedLeakyReLU(out_channel, bias=bias))
        super().__init__(*layers)


class ResBlock(nn.Module):
    """Residual downsampling block: (conv3x3 -> conv3x3/2 + skip 1x1/2) / sqrt(2)."""

    def __init__(self, in_channel: int, out_channel: int, blur_kernel: Sequence[int] = DEFAULT_BLUR):
        super().__init__()
        self.conv1 = ConvLayer(in_channel, in_channel, 3, blur_kernel=blur_kernel)
        self.conv2 = ConvLayer(in_channel, out_channel, 3, downsample=True, blur_kernel=blur_kernel)
        self.skip = ConvLayer(in_channel, out_channel, 1, downsample=True, activate=False, bias=False, blur_kernel=blur_kernel)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return (self.conv2(self.conv1(input)) + self.skip(input)) / math.sqrt(2)


class Discriminator(HubModule):
    """StyleGAN2 residual discriminator with minibatch standard deviation (rosinality layout).

    forward(img [N, 3, size, size] in [-1, 1]) -> logits [N, 1].
    """

    def __init__(
        self,
        size: int = 256,
        channel_multiplier: int = 2,
        blur_kernel: Sequence[int] = DEFAULT_BLUR,
        channel_max: int = 512,
    ):
        super().__init__()
        blur_kernel = list(blur_kernel)
        self.size = size
        log_size = log2_size(size)
        ch = {r: c for r, c in stylegan2_channels(channel_multiplier, channel_max).items() if r <= size}
        self.channels = ch

        convs: list[nn.Module] = [ConvLayer(3, ch[size], 1)]
        in_channel = ch[size]
        for i in range(log_size, 2, -1):
            out_channel = ch[2 ** (i - 1)]
            convs.append(ResBlock(in_channel, out_channel, blur_kernel))
            in_channel = out_channel
        self.convs = nn.Sequential(*convs)

        self.stddev_group = 4
        self.stddev_feat = 1
        self.final_conv = ConvLayer(in_channel + 1, ch[4], 3)
        self.final_linear = nn.Sequential(
            EqualLinear(ch[4] * 4 * 4, ch[4], activation="fused_lrelu"),
            EqualLinear(ch[4], 1),
        )

    def minibatch_stddev(self, out: torch.Tensor) -> torch.Tensor:
        """Append the mean (over channels and pixels) std over groups of samples: [N, C+1, H, W].

        Groups as rosinality: ``group = min(N, 4)`` samples strided through the batch; when N is
        not divisible by that, the largest group size <= 4 that divides N is used (rosinality
        would fail there).
        """
        n, c, h, w = out.shape
        group = min(n, self.stddev_group)
        while n % group:
            group -= 1
        f = self.stddev_feat
        stddev = out.view(group, -1, f, c // f, h, w)
        stddev = torch.sqrt(stddev.var(0, unbiased=False) + 1e-8)
        stddev = stddev.mean([2, 3, 4], keepdim=True).squeeze(2)  # [n/group, f, 1, 1]
        stddev = stddev.repeat(group, 1, h, w)
        return torch.cat([out, stddev], 1)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        out = self.minibatch_stddev(self.convs(input))
        out = self.final_conv(out)
        return self.final_linear(out.view(out.shape[0], -1))


def discriminator_config_from_state_dict(sd: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """Infer Discriminator kwargs (size, channel_multiplier, channel_max) from shapes."""
    what = "stylegan2 discriminator"
    n_res = 0
    while f"convs.{n_res + 1}.conv1.0.weight" in sd:
        n_res += 1
    size = 2 ** (n_res + 2)
    observed = {size: key_shape(sd, "convs.0.0.weight", what)[0], 4: key_shape(sd, "final_conv.0.weight", what)[0]}
    for j in range(1, n_res + 1):
        observed[size // 2**j] = key_shape(sd, f"convs.{j}.conv2.1.weight", what)[0]
    cm, cmax = infer_channels(observed, what)
    return dict(size=size, channel_multiplier=cm, channel_max=cmax)


@register_converter("stylegan2-discriminator", "rosinality StyleGAN2 discriminator .pt (the 'd' entry)")
def convert_stylegan2_discriminator(state: Mapping[str, Any]) -> Discriminator:
    """rosinality checkpoint {'d': state_dict, ...} (or a bare discriminator dict) -> Discriminator."""
    sd = unwrap_state_dict(state, "d", "final_conv.0.weight")
    disc = Discriminator(**discriminator_config_from_state_dict(sd))
    return check_and_load(disc, sd, "stylegan2 discriminator (d)")
