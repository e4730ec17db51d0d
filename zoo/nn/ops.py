"""StyleGAN2 building blocks in plain PyTorch (CPU and GPU, no custom CUDA kernels).

Numerics follow rosinality's ``stylegan2-pytorch`` (its native ``upfirdn2d`` path and the CPU path of
``fused_leaky_relu``), and the parameter names/shapes are the same, so those checkpoints load as is:

* ``upfirdn2d``: upsample by zero insertion, pad (negative pad crops), FIR-filter with the kernel
  (a true convolution: the kernel is flipped), then keep every ``down``-th sample.
* ``fused_leaky_relu``: ``leaky_relu(x + bias, 0.2) * sqrt(2)``.
* ``EqualLinear`` / ``EqualConv2d``: equalized learning rate (Karras et al. 2018): weights are stored
  as N(0, 1) / lr_mul and scaled by ``lr_mul / sqrt(fan_in)`` at run time.

Everything is differentiable twice with ordinary autograd (R1 and path-length regularisers work).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "upfirdn2d",
    "make_kernel",
    "fused_leaky_relu",
    "FusedLeakyReLU",
    "ScaledLeakyReLU",
    "PixelNorm",
    "Blur",
    "Upsample",
    "Downsample",
    "EqualLinear",
    "EqualConv2d",
]


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(v, Sequence):
        a, b = v
        return int(a), int(b)
    return int(v), int(v)


def upfirdn2d(
    input: torch.Tensor,
    kernel: torch.Tensor,
    up: int | Sequence[int] = 1,
    down: int | Sequence[int] = 1,
    pad: Sequence[int] = (0, 0),
) -> torch.Tensor:
    """Upsample, pad, FIR-filter and downsample every channel of ``input`` [N, C, H, W].

    ``up``/``down`` are an int or ``(x, y)``; ``pad`` is ``(p0, p1)`` for both axes or
    ``(x0, x1, y0, y1)``; a negative pad crops. ``kernel`` is [kh, kw]. Output height is
    ``(H * up_y + y0 + y1 - kh + down_y) // down_y`` (width alike).
    """
    up_x, up_y = _pair(up)
    down_x, down_y = _pair(down)
    if len(pad) == 2:
        pad = (pad[0], pad[1], pad[0], pad[1])
    pad_x0, pad_x1, pad_y0, pad_y1 = (int(p) for p in pad)
    n, c, h, w = input.shape
    kh, kw = kernel.shape

    x = input
    if up_x > 1 or up_y > 1:  # zero insertion: each sample followed by (up - 1) zeros
        x = x.reshape(n, c, h, 1, w, 1)
        x = F.pad(x, [0, up_x - 1, 0, 0, 0, up_y - 1])
        x = x.reshape(n, c, h * up_y, w * up_x)

    x = F.pad(x, [max(pad_x0, 0), max(pad_x1, 0), max(pad_y0, 0), max(pad_y1, 0)])
    x = x[
        :,
        :,
        max(-pad_y0, 0) : x.shape[2] - max(-pad_y1, 0),
        max(-pad_x0, 0) : x.shape[3] - max(-pad_x1, 0),
    ]

    # Depthwise true convolution (flipped kernel); the stride keeps every down-th output sample.
    weight = torch.flip(kernel, [0, 1]).to(dtype=x.dtype, device=x.device)
    weight = weight.view(1, 1, kh, kw).repeat(c, 1, 1, 1)
    return F.conv2d(x, weight, stride=(down_y, down_x), groups=c)


def make_kernel(k: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """A separable 1-D kernel (or a 2-D one) -> 2-D kernel normalised to sum 1 (float32)."""
    k = torch.as_tensor(k, dtype=torch.float32)
    if k.ndim == 1:
        k = k[None, :] * k[:, None]
    return k / k.sum()


def fused_leaky_relu(
    input: torch.Tensor,
    bias: torch.Tensor | None = None,
    negative_slope: float = 0.2,
    scale: float = 2**0.5,
) -> torch.Tensor:
    """``leaky_relu(input + bias, negative_slope) * scale``; ``bias`` [C] is added along dim 1."""
    if bias is not None:
        rest = [1] * (input.ndim - 2)
        input = input + bias.view(1, bias.shape[0], *rest).to(input.dtype)
    return F.leaky_relu(input, negative_slope=negative_slope) * scale


class FusedLeakyReLU(nn.Module):
    """Bias + leaky ReLU(0.2) + gain sqrt(2); parameter ``bias`` [channel] (zeros at init)."""

    def __init__(self, channel: int, bias: bool = True, negative_slope: float = 0.2, scale: float = 2**0.5):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(channel)) if bias else None
        self.negative_slope = negative_slope
        self.scale = scale

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return fused_leaky_relu(input, self.bias, self.negative_slope, self.scale)


class ScaledLeakyReLU(nn.Module):
    """Leaky ReLU times sqrt(2) (no bias)."""

    def __init__(self, negative_slope: float = 0.2):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(input, negative_slope=self.negative_slope) * math.sqrt(2)


class PixelNorm(nn.Module):
    """Normalise each feature vector (dim 1) to unit root-mean-square."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return input * torch.rsqrt(torch.mean(input**2, dim=1, keepdim=True) + 1e-8)


class Blur(nn.Module):
    """FIR low-pass filter ``upfirdn2d(x, kernel, pad=pad)``; buffer ``kernel`` [k, k].

    ``upsample_factor`` scales the kernel by factor**2 to keep the gain after zero insertion.
    """

    def __init__(self, kernel: Sequence[int], pad: Sequence[int], upsample_factor: int = 1):
        super().__init__()
        k = make_kernel(kernel)
        if upsample_factor > 1:
            k = k * (upsample_factor**2)
        self.register_buffer("kernel", k)
        self.pad = tuple(pad)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return upfirdn2d(input, self.kernel, pad=self.pad)


class Upsample(nn.Module):
    """x2 (``factor``) upsampling with the FIR ``kernel``: [N, C, H, W] -> [N, C, 2H, 2W]."""

    def __init__(self, kernel: Sequence[int], factor: int = 2):
        super().__init__()
        self.factor = factor
        k = make_kernel(kernel) * (factor**2)
        self.register_buffer("kernel", k)
        p = k.shape[0] - factor
        self.pad = ((p + 1) // 2 + factor - 1, p // 2)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return upfirdn2d(input, self.kernel, up=self.factor, down=1, pad=self.pad)


class Downsample(nn.Module):
    """/2 (``factor``) downsampling with the FIR ``kernel``: [N, C, H, W] -> [N, C, H/2, W/2]."""

    def __init__(self, kernel: Sequence[int], factor: int = 2):
        super().__init__()
        self.factor = factor
        k = make_kernel(kernel)
        self.register_buffer("kernel", k)
        p = k.shape[0] - factor
        self.pad = ((p + 1) // 2, p // 2)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return upfirdn2d(input, self.kernel, up=1, down=self.factor, pad=self.pad)


class EqualConv2d(nn.Module):
    """Conv2d with equalized learning rate: weight [out, in, k, k] ~ N(0,1), scaled by 1/sqrt(in*k*k)."""

    def __init__(
        self,
        in_channel: int,
        out_channel: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        bias: bool = True,
    ):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_channel, in_channel, kernel_size, kernel_size))
        self.scale = 1 / math.sqrt(in_channel * kernel_size**2)
        self.stride = stride
        self.padding = padding
        self.bias = nn.Parameter(torch.zeros(out_channel)) if bias else None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.conv2d(input, self.weight * self.scale, bias=self.bias, stride=self.stride, padding=self.padding)

    def extra_repr(self) -> str:
        o, i, k, _ = self.weight.shape
        return f"{i}, {o}, {k}, stride={self.stride}, padding={self.padding}"


class EqualLinear(nn.Module):
    """Linear layer with equalized learning rate and a learning-rate multiplier.

    weight [out_dim, in_dim] is stored as N(0,1)/lr_mul and used times ``lr_mul / sqrt(in_dim)``;
    bias [out_dim] (filled with ``bias_init``) is used times ``lr_mul``. With ``activation`` set
    (rosinality passes ``"fused_lrelu"``), the output goes through ``fused_leaky_relu``.
    Input [..., in_dim] -> [..., out_dim].
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        bias: bool = True,
        bias_init: float = 0,
        lr_mul: float = 1,
        activation: str | None = None,
    ):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim).div_(lr_mul))
        self.bias = nn.Parameter(torch.zeros(out_dim).fill_(bias_init)) if bias else None
        self.activation = activation
        self.scale = (1 / math.sqrt(in_dim)) * lr_mul
        self.lr_mul = lr_mul

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        bias = self.bias * self.lr_mul if self.bias is not None else None
        if self.activation:
            out = F.linear(input, self.weight * self.scale)
            if bias is not None and out.ndim > 2:  # bias belongs to the last dim, like F.linear's
                out = out + bias.to(out.dtype)
                bias = None
            return fused_leaky_relu(out, bias)
        return F.linear(input, self.weight * self.scale, bias=bias)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[1]}, {self.weight.shape[0]}, lr_mul={self.lr_mul}, activation={self.activation!r}"


def gaussian_blur(mask: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur of ``[N,1,H,W]`` masks (zero padding), kernel radius 3 sigma."""
    if sigma <= 0:
        return mask
    r = max(1, int(math.ceil(3 * sigma)))
    t = torch.arange(-r, r + 1, dtype=mask.dtype, device=mask.device)
    g = torch.exp(-(t**2) / (2 * sigma**2))
    g = g / g.sum()
    mask = F.conv2d(mask, g.view(1, 1, 1, -1), padding=(0, r))
    return F.conv2d(mask, g.view(1, 1, -1, 1), padding=(r, 0))


def resize_images(x: torch.Tensor, size: int) -> torch.Tensor:
    """``[N,C,H,W]`` -> ``[N,C,size,size]``, bilinear, antialiased when shrinking; ``x`` itself when already that size."""
    if x.shape[-1] == size and x.shape[-2] == size:
        return x
    return F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=size < x.shape[-1])
