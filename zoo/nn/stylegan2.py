"""StyleGAN2 generator (Karras et al., CVPR 2020) in the rosinality layout.

The parameter/buffer names and shapes are those of rosinality's ``stylegan2-pytorch`` (``style.*``,
``input.input``, ``conv1.*``, ``to_rgb1.*``, ``convs.N.*``, ``to_rgbs.N.*``, ``noises.noise_N``),
the de-facto standard for the 256 px FFHQ checkpoints that e4e, pSp, HFORD and DBAF use.
``python -m zoo.convert stylegan2 550000.pt out/`` turns such a file into ``config.json`` +
``model.safetensors``. The discriminator (``Discriminator``, ``ConvLayer``, ``ResBlock`` and its
converter) lives in :mod:`zoo.nn.stylegan2_discriminator` and is importable from here too.

Images are float NCHW in about [-1, 1]. Latents: ``z`` and ``w`` are [N, style_dim]; ``w_plus`` is
[N, n_latent, style_dim] with ``n_latent = 2 * log2(size) - 2`` (14 at 256 px, 18 at 1024 px).

Feature injection (HFORD's ARM output / DBAF's MAAR output): see :meth:`Generator.synthesize`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from zoo.convert import check_and_load, register_converter
from zoo.hub import HubModule
from zoo.nn.ops import Blur, EqualLinear, FusedLeakyReLU, PixelNorm, Upsample
from zoo.nn.stylegan2_common import DEFAULT_BLUR, infer_channels, key_shape, log2_size, stylegan2_channels, unwrap_state_dict
from zoo.nn.stylegan2_discriminator import ConvLayer, Discriminator, ResBlock
from zoo.nn.stylegan2_discriminator import convert_stylegan2_discriminator as convert_stylegan2_discriminator
from zoo.nn.stylegan2_discriminator import discriminator_config_from_state_dict as discriminator_config_from_state_dict

__all__ = [
    "Generator",
    "Discriminator",
    "ModulatedConv2d",
    "StyledConv",
    "ToRGB",
    "ConvLayer",
    "ResBlock",
    "stylegan2_channels",
    "n_latent_for_size",
]


def n_latent_for_size(size: int) -> int:
    """Number of W+ entries of a generator of output ``size``: 2 * log2(size) - 2."""
    return 2 * log2_size(size) - 2


# --------------------------------------------------------------------------------------------
# Synthesis blocks
# --------------------------------------------------------------------------------------------


class ModulatedConv2d(nn.Module):
    """Modulated (and demodulated) convolution, StyleGAN2 Sec. 2.2, Eq. (1)-(3).

    w'_ijk = s_i * w_ijk (Eq. 1) with style s = modulation(w) [N, in]; demodulation
    w''_ijk = w'_ijk / sqrt(sum_ik w'_ijk^2 + eps) (Eq. 3). ``upsample`` uses a stride-2 transposed
    convolution followed by a blur; ``downsample`` a blur followed by a stride-2 convolution.
    Parameters: ``weight`` [1, out, in, k, k], ``modulation`` EqualLinear(style_dim, in, bias_init=1),
    buffer ``blur.kernel`` when resampling. ``fused=True`` runs one grouped convolution over the batch
    (rosinality's default); ``fused=False`` modulates activations instead (same result).
    """

    def __init__(
        self,
        in_channel: int,
        out_channel: int,
        kernel_size: int,
        style_dim: int,
        demodulate: bool = True,
        upsample: bool = False,
        downsample: bool = False,
        blur_kernel: Sequence[int] = DEFAULT_BLUR,
        fused: bool = True,
    ):
        super().__init__()
        self.eps = 1e-8
        self.kernel_size = kernel_size
        self.in_channel = in_channel
        self.out_channel = out_channel
        self.upsample = upsample
        self.downsample = downsample
        factor = 2
        if upsample:
            p = (len(blur_kernel) - factor) - (kernel_size - 1)
            self.blur = Blur(blur_kernel, pad=((p + 1) // 2 + factor - 1, p // 2 + 1), upsample_factor=factor)
        if downsample:
            p = (len(blur_kernel) - factor) + (kernel_size - 1)
            self.blur = Blur(blur_kernel, pad=((p + 1) // 2, p // 2))
        self.scale = 1 / math.sqrt(in_channel * kernel_size**2)
        self.padding = kernel_size // 2
        self.weight = nn.Parameter(torch.randn(1, out_channel, in_channel, kernel_size, kernel_size))
        self.modulation = EqualLinear(style_dim, in_channel, bias_init=1)
        self.demodulate = demodulate
        self.fused = fused

    def extra_repr(self) -> str:
        return (
            f"{self.in_channel}, {self.out_channel}, {self.kernel_size}, upsample={self.upsample}, downsample={self.downsample}, demodulate={self.demodulate}"
        )

    def forward(self, input: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        """input [N, in, H, W], style w [N, style_dim] -> [N, out, H', W'] (H' = 2H / H / H/2)."""
        if self.fused:
            return self._forward_grouped(input, style)
        return self._forward_activations(input, style)

    def _forward_grouped(self, input: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        n, c_in, h, w = input.shape
        k, c_out = self.kernel_size, self.out_channel
        s = self.modulation(style).view(n, 1, c_in, 1, 1)
        weight = self.scale * self.weight * s  # Eq. (1): [N, out, in, k, k]
        if self.demodulate:  # Eq. (3)
            demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + self.eps)
            weight = weight * demod.view(n, c_out, 1, 1, 1)

        if self.upsample:
            x = input.reshape(1, n * c_in, h, w)
            weight = weight.transpose(1, 2).reshape(n * c_in, c_out, k, k)
            out = F.conv_transpose2d(x, weight, padding=0, stride=2, groups=n)
            out = out.view(n, c_out, out.shape[-2], out.shape[-1])
            return self.blur(out)
        if self.downsample:
            x = self.blur(input)
            x = x.reshape(1, n * c_in, x.shape[-2], x.shape[-1])
            out = F.conv2d(x, weight.reshape(n * c_out, c_in, k, k), padding=0, stride=2, groups=n)
            return out.view(n, c_out, out.shape[-2], out.shape[-1])
        x = input.reshape(1, n * c_in, h, w)
        out = F.conv2d(x, weight.reshape(n * c_out, c_in, k, k), padding=self.padding, groups=n)
        return out.view(n, c_out, out.shape[-2], out.shape[-1])

    def _forward_activations(self, input: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        n, c_in = input.shape[:2]
        weight = self.scale * self.weight.squeeze(0)  # [out, in, k, k]
        s = self.modulation(style)  # [N, in]
        if self.demodulate:
            w = weight.unsqueeze(0) * s.view(n, 1, c_in, 1, 1)
            dcoefs = (w.square().sum((2, 3, 4)) + self.eps).rsqrt()  # [N, out]
        x = input * s.view(n, c_in, 1, 1).to(input.dtype)
        if self.upsample:
            out = self.blur(F.conv_transpose2d(x, weight.transpose(0, 1), padding=0, stride=2))
        elif self.downsample:
            out = F.conv2d(self.blur(x), weight, padding=0, stride=2)
        else:
            out = F.conv2d(x, weight, padding=self.padding)
        if self.demodulate:
            out = out * dcoefs.view(n, -1, 1, 1).to(out.dtype)
        return out


class NoiseInjection(nn.Module):
    """``image + weight * noise`` with a learned scalar strength ``weight`` (zero at init).

    ``noise`` [N or 1, 1 or C, H, W]; ``None`` draws fresh N(0, 1) noise [N, 1, H, W].
    """

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))

    def forward(self, image: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        if noise is None:
            n, _, h, w = image.shape
            noise = image.new_empty(n, 1, h, w).normal_()
        return image + self.weight * noise


class ConstantInput(nn.Module):
    """Learned constant 4x4 input ``input`` [1, C, 4, 4], repeated over the batch."""

    def __init__(self, channel: int, size: int = 4):
        super().__init__()
        self.input = nn.Parameter(torch.randn(1, channel, size, size))

    def forward(self, batch_like: torch.Tensor) -> torch.Tensor:
        return self.input.repeat(batch_like.shape[0], 1, 1, 1)


class StyledConv(nn.Module):
    """ModulatedConv2d -> NoiseInjection -> bias + leaky ReLU (``conv``, ``noise``, ``activate``)."""

    def __init__(
        self,
        in_channel: int,
        out_channel: int,
        kernel_size: int,
        style_dim: int,
        upsample: bool = False,
        blur_kernel: Sequence[int] = DEFAULT_BLUR,
        demodulate: bool = True,
    ):
        super().__init__()
        self.conv = ModulatedConv2d(in_channel, out_channel, kernel_size, style_dim, upsample=upsample, blur_kernel=blur_kernel, demodulate=demodulate)
        self.noise = NoiseInjection()
        self.activate = FusedLeakyReLU(out_channel)

    def forward(self, input: torch.Tensor, style: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        return self.activate(self.noise(self.conv(input, style), noise=noise))


class ToRGB(nn.Module):
    """1x1 modulated conv (no demodulation) to RGB + ``bias`` [1, 3, 1, 1], plus the upsampled skip."""

    def __init__(self, in_channel: int, style_dim: int, upsample: bool = True, blur_kernel: Sequence[int] = DEFAULT_BLUR):
        super().__init__()
        if upsample:
            self.upsample = Upsample(blur_kernel)
        self.conv = ModulatedConv2d(in_channel, 3, 1, style_dim, demodulate=False)
        self.bias = nn.Parameter(torch.zeros(1, 3, 1, 1))

    def forward(self, input: torch.Tensor, style: torch.Tensor, skip: torch.Tensor | None = None) -> torch.Tensor:
        out = self.conv(input, style) + self.bias
        if skip is not None:
            out = out + self.upsample(skip)
        return out


# --------------------------------------------------------------------------------------------
# Generator
# --------------------------------------------------------------------------------------------

NOISE_MODES = ("const", "random", "none")
INJECTION_MODES = ("noise", "add")


class Generator(HubModule):
    """StyleGAN2 generator (config-f by default) in the rosinality layout.

    Args:
        size: output resolution, a power of two in [4, 1024] (64..1024 in practice).
        style_dim: dimension of z and w (512 official).
        n_mlp: layers of the mapping MLP (8 official).
        channel_multiplier: 2 for config-f.
        blur_kernel: separable FIR kernel for up/downsampling.
        lr_mlp: learning-rate multiplier of the mapping MLP.
        channel_max: every channel count is clamped to this (512 reproduces rosinality for
            ``channel_multiplier <= 2``; tiny test models use e.g. 32).

    Attributes: ``size``, ``style_dim``, ``log_size``, ``num_layers`` (styled convs),
    ``n_latent`` (= 2 * log2(size) - 2), ``channels`` {res: C} for res in 4..size,
    ``resolutions`` (4, 8, ..., size).
    """

    def __init__(
        self,
        size: int = 256,
        style_dim: int = 512,
        n_mlp: int = 8,
        channel_multiplier: int = 2,
        blur_kernel: Sequence[int] = DEFAULT_BLUR,
        lr_mlp: float = 0.01,
        channel_max: int = 512,
    ):
        super().__init__()
        blur_kernel = list(blur_kernel)
        self.size = size
        self.style_dim = style_dim
        self.log_size = log2_size(size)
        self.num_layers = (self.log_size - 2) * 2 + 1
        self.n_latent = self.log_size * 2 - 2
        self.resolutions = tuple(2**i for i in range(2, self.log_size + 1))
        self.channels = {r: c for r, c in stylegan2_channels(channel_multiplier, channel_max).items() if r <= size}

        # Mapping network f: Z -> W (``style.0`` is PixelNorm, ``style.1..n_mlp`` the MLP).
        layers: list[nn.Module] = [PixelNorm()]
        for _ in range(n_mlp):
            layers.append(EqualLinear(style_dim, style_dim, lr_mul=lr_mlp, activation="fused_lrelu"))
        self.style = nn.Sequential(*layers)

        ch = self.channels
        self.input = ConstantInput(ch[4])
        self.conv1 = StyledConv(ch[4], ch[4], 3, style_dim, blur_kernel=blur_kernel)
        self.to_rgb1 = ToRGB(ch[4], style_dim, upsample=False)

        self.convs = nn.ModuleList()
        self.to_rgbs = nn.ModuleList()
        self.noises = nn.Module()
        for layer_idx in range(self.num_layers):
            res = 2 ** ((layer_idx + 5) // 2)
            self.noises.register_buffer(f"noise_{layer_idx}", torch.randn(1, 1, res, res))
        in_channel = ch[4]
        for res in self.resolutions[1:]:
            out_channel = ch[res]
            self.convs.append(StyledConv(in_channel, out_channel, 3, style_dim, upsample=True, blur_kernel=blur_kernel))
            self.convs.append(StyledConv(out_channel, out_channel, 3, style_dim, blur_kernel=blur_kernel))
            self.to_rgbs.append(ToRGB(out_channel, style_dim, blur_kernel=blur_kernel))
            in_channel = out_channel

    # ---- latents ---------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return self.input.input.device

    def mapping(self, z: torch.Tensor) -> torch.Tensor:
        """Mapping network: z [N, style_dim] -> w [N, style_dim] (PixelNorm + MLP; deterministic)."""
        return self.style(z)

    get_latent = mapping  # rosinality's name

    @torch.no_grad()
    def mean_latent(self, n: int = 4096, generator: torch.Generator | None = None) -> torch.Tensor:
        """Mean of ``n`` mapped random z: [1, style_dim] (the truncation centre)."""
        dev = generator.device if generator is not None else self.device
        z = torch.randn(n, self.style_dim, generator=generator, device=dev).to(self.device)
        return self.mapping(z).mean(0, keepdim=True)

    def make_noise(self) -> list[torch.Tensor]:
        """Fresh noise maps, one per styled conv: [1, 1, res, res] (rosinality's ``make_noise``)."""
        return [torch.randn_like(getattr(self.noises, f"noise_{i}")) for i in range(self.num_layers)]

    def noise_layers(self, res: int) -> list[int]:
        """Indices (into the noise list) of the styled convs that run at resolution ``res``."""
        if res not in self.resolutions:
            raise ValueError(f"resolution {res} not in {self.resolutions}")
        if res == 4:
            return [0]
        k = int(math.log2(res)) - 3
        return [2 * k + 1, 2 * k + 2]

    # ---- synthesis -------------------------------------------------------------------------

    def _noise_list(self, noise_mode: str) -> list[torch.Tensor | None]:
        if noise_mode == "const":
            return [getattr(self.noises, f"noise_{i}") for i in range(self.num_layers)]
        if noise_mode == "random":
            return [None] * self.num_layers
        if noise_mode == "none":
            return [torch.zeros_like(getattr(self.noises, f"noise_{i}")) for i in range(self.num_layers)]
        raise ValueError(f"noise_mode must be one of {NOISE_MODES}, got {noise_mode!r}")

    def synthesize(
        self,
        w_plus: torch.Tensor,
        injections: Mapping[int, torch.Tensor] | None = None,
        noise_mode: str = "const",
        injection_mode: str = "noise",
        return_features: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """Synthesis network: W+ -> image.

        Args:
            w_plus: [N, n_latent, style_dim] (a [N, style_dim] w is broadcast to every layer).
            injections: {res: feature map [N, C, res, res]} with res in ``resolutions`` (HFORD's
                ARM / DBAF's MAAR output at 16, 32, 64). C is ``channels[res]`` (or 1 in
                ``"noise"`` mode). Where it enters depends on ``injection_mode``:

                * ``"noise"`` (default; the location of the official DBAF code, mrzhu-cool/DBAF
                  ``models/stylegan2/model_revise_c3.py``: ``noise[3] = noise[4] = attr_noise[0]``,
                  ...): the map takes the place of the noise input of *both* styled convs of that
                  resolution (the upsampling conv and the one after it), i.e. after each modulated
                  conv ``x = conv(x) + s_l * M`` with ``s_l`` that layer's learned noise strength
                  (``convs.j.noise.weight``), before its bias + leaky ReLU. Injected layers get no
                  other noise. A freshly built generator has ``s_l = 0``, so the maps only act once
                  the noise strengths are trained (pretrained FFHQ models have non-zero ones).
                  The HFORD paper only says the maps are "fused" into StyleGAN at 16/32/64 px;
                  DBAF (same authors' follow-up) is the code we match.
                * ``"add"``: the map is added to the output of the second styled conv of that
                  resolution (after its activation), before that resolution's ToRGB and before the
                  next upsampling; a zero map is exactly no injection.
            noise_mode: ``"const"`` uses the stored ``noises`` buffers, ``"random"`` draws fresh
                noise, ``"none"`` uses zeros.
            return_features: also return {res: feature map after the second conv of res (after
                an ``"add"`` injection)}.

        Returns:
            image [N, 3, size, size] float, roughly in [-1, 1] (not clamped); with
            ``return_features``, ``(image, features)``.
        """
        if w_plus.ndim == 2:
            w_plus = w_plus.unsqueeze(1).expand(-1, self.n_latent, -1)
        if w_plus.ndim != 3 or w_plus.shape[1] != self.n_latent or w_plus.shape[2] != self.style_dim:
            raise ValueError(f"w_plus must be [N, {self.n_latent}, {self.style_dim}], got {tuple(w_plus.shape)}")
        if injection_mode not in INJECTION_MODES:
            raise ValueError(f"injection_mode must be one of {INJECTION_MODES}, got {injection_mode!r}")
        noise = self._noise_list(noise_mode)
        add: dict[int, torch.Tensor] = {}
        for res, feat in (injections or {}).items():
            res = int(res)
            if res not in self.resolutions:
                raise ValueError(f"cannot inject at resolution {res}; generator has {self.resolutions}")
            allowed_c = (self.channels[res], 1) if injection_mode == "noise" else (self.channels[res],)
            if feat.ndim != 4 or feat.shape[-2:] != (res, res) or feat.shape[1] not in allowed_c:
                raise ValueError(f"injection at {res} px must be [N, {self.channels[res]}, {res}, {res}], got {tuple(feat.shape)}")
            if injection_mode == "noise":
                for j in self.noise_layers(res):
                    noise[j] = feat
            else:
                add[res] = feat
        return self._synthesis(w_plus, noise, add, return_features)

    def _synthesis(
        self,
        latent: torch.Tensor,
        noise: Sequence[torch.Tensor | None],
        add: Mapping[int, torch.Tensor],
        return_features: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, dict[int, torch.Tensor]]:
        features: dict[int, torch.Tensor] = {}
        out = self.input(latent)
        out = self.conv1(out, latent[:, 0], noise=noise[0])
        if 4 in add:
            out = out + add[4]
        if return_features:
            features[4] = out
        skip = self.to_rgb1(out, latent[:, 1])

        i = 1
        for res, conv_up, conv, to_rgb in zip(self.resolutions[1:], self.convs[::2], self.convs[1::2], self.to_rgbs):
            out = conv_up(out, latent[:, i], noise=noise[i])
            out = conv(out, latent[:, i + 1], noise=noise[i + 1])
            if res in add:
                out = out + add[res]
            if return_features:
                features[res] = out
            skip = to_rgb(out, latent[:, i + 2], skip)
            i += 2
        return (skip, features) if return_features else skip

    def forward(
        self,
        styles: Sequence[torch.Tensor],
        return_latents: bool = False,
        inject_index: int | None = None,
        truncation: float = 1,
        truncation_latent: torch.Tensor | None = None,
        input_is_latent: bool = False,
        noise: Sequence[torch.Tensor | None] | None = None,
        randomize_noise: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """rosinality-compatible call: ``image, latent = G([z])`` or ``G([w_plus], input_is_latent=True)``.

        ``styles``: a list of z (or w with ``input_is_latent``) tensors [N, style_dim]; one entry may
        also be a W+ [N, n_latent, style_dim]; two entries mix styles at ``inject_index`` (random
        when None); ``n_latent`` entries give one latent per layer. ``noise``: one tensor (or None
        for random) per styled conv; when None, random if ``randomize_noise`` else the buffers.
        Returns ``(image [N, 3, size, size], W+ latent or None)``.
        """
        if isinstance(styles, torch.Tensor):
            styles = [styles]
        if not input_is_latent:
            styles = [self.mapping(s) for s in styles]
        if noise is None:
            noise = self._noise_list("random" if randomize_noise else "const")
        elif len(noise) != self.num_layers:
            raise ValueError(f"noise must have {self.num_layers} entries, got {len(noise)}")
        if truncation < 1:
            styles = [truncation_latent + truncation * (s - truncation_latent) for s in styles]

        if len(styles) == 1:
            s = styles[0]
            latent = s if s.ndim == 3 else s.unsqueeze(1).repeat(1, self.n_latent, 1)
        elif len(styles) == 2:
            if inject_index is None:
                inject_index = int(torch.randint(1, self.n_latent, ()).item())
            latent = torch.cat(
                [
                    styles[0].unsqueeze(1).repeat(1, inject_index, 1),
                    styles[1].unsqueeze(1).repeat(1, self.n_latent - inject_index, 1),
                ],
                1,
            )
        elif len(styles) == self.n_latent:
            latent = torch.stack(list(styles), dim=1)
        else:
            raise ValueError(f"styles must have 1, 2 or {self.n_latent} entries, got {len(styles)}")

        image = self._synthesis(latent, noise, {})
        return image, (latent if return_latents else None)


# --------------------------------------------------------------------------------------------
# Converter (rosinality .pt -> zoo)
# --------------------------------------------------------------------------------------------


def generator_config_from_state_dict(sd: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """Infer Generator kwargs (size, style_dim, n_mlp, channel_multiplier, channel_max) from shapes."""
    what = "stylegan2 generator"
    style_dim = key_shape(sd, "conv1.conv.modulation.weight", what)[1]
    n_mlp = 0
    while f"style.{n_mlp + 1}.weight" in sd:
        n_mlp += 1
    n_rgb = 0
    while f"to_rgbs.{n_rgb}.conv.weight" in sd:
        n_rgb += 1
    size = 2 ** (n_rgb + 2)
    observed = {4: key_shape(sd, "conv1.conv.weight", what)[1]}
    for k in range(n_rgb):
        observed[2 ** (k + 3)] = key_shape(sd, f"to_rgbs.{k}.conv.weight", what)[2]
    cm, cmax = infer_channels(observed, what)
    return dict(size=size, style_dim=style_dim, n_mlp=n_mlp, channel_multiplier=cm, channel_max=cmax)


@register_converter("stylegan2", "rosinality StyleGAN2 generator .pt (the 'g_ema' entry; size/style_dim/n_mlp/channels from shapes)")
def convert_stylegan2(state: Mapping[str, Any]) -> Generator:
    """rosinality checkpoint {'g_ema': state_dict, 'latent_avg': ...} (or a bare g_ema dict) -> Generator.

    ``latent_avg`` and the other entries are ignored (``Generator.mean_latent`` recomputes it).
    """
    sd = unwrap_state_dict(state, "g_ema", "input.input")
    generator = Generator(**generator_config_from_state_dict(sd))
    return check_and_load(generator, sd, "stylegan2 generator (g_ema)")
