"""GFPGAN "clean" restorer: U-Net encoder + StyleGAN2 prior decoder with channel-split SFT (CS-SFT).

Used by ``ideudemon`` Step II (the restorer that makes the re-rendered hybrid face photo-real).
Architecture after Wang et al., "Towards Real-World Blind Face Restoration with Generative Facial
Prior" (CVPR 2021) and TencentARC's ``gfpganv1_clean_arch.py`` / ``stylegan2_clean_arch.py``: plain
``nn.Conv2d``/``nn.Linear`` layers and bilinear resampling, no equalized learning rate, no custom CUDA
ops. Parameter and buffer names and shapes are exactly those of the released v1.2/v1.3/v1.4 clean
checkpoints, so :func:`convert_gfpgan` loads ``GFPGANv1.3.pth`` / ``GFPGANv1.4.pth`` strictly.

Shapes (``S = out_size``, ``L = log2(S)``): input ``[N, 3, S, S]`` in [-1, 1]; output image
``[N, 3, S, S]`` (approximately [-1, 1], not clamped) plus ``L - 2`` intermediate RGB images at
8, 16, ..., S px (used by the pyramid restoration loss).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from zoo.convert import ConversionError, check_and_load, register_converter
from zoo.hub import HubModule

__all__ = [
    "ModulatedConv2d",
    "StyleConv",
    "ToRGB",
    "StyleGAN2GeneratorClean",
    "ResBlock",
    "GFPGANv1Clean",
    "convert_gfpgan",
    "convert_stylegan2_clean",
]


def _channels(narrow: float, channel_multiplier: int) -> dict[str, int]:
    """Channels per resolution of the clean StyleGAN2 decoder (the U-Net uses ``narrow / 2``)."""
    wide = {
        4: 512,
        8: 512,
        16: 512,
        32: 512,
        64: 256 * channel_multiplier,
        128: 128 * channel_multiplier,
        256: 64 * channel_multiplier,
        512: 32 * channel_multiplier,
        1024: 16 * channel_multiplier,
    }
    return {str(k): int(v * narrow) for k, v in wide.items()}


class NormStyleCode(nn.Module):
    """Pixel norm of a style code: ``x / sqrt(mean(x^2) + 1e-8)``; ``[N, C] -> [N, C]``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-8)


class ModulatedConv2d(nn.Module):
    """StyleGAN2 modulated convolution (clean layout: ``modulation`` Linear, ``weight`` [1, out, in, k, k]).

    The style scales the input channels of the kernel, the kernel is demodulated per output channel
    (StyleGAN2, Karras et al. 2020, eq. 1-3), and ``sample_mode`` resamples bilinearly *before* the conv.
    No bias. ``x [N, in, H, W], style [N, num_style_feat] -> [N, out, H', W']``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        num_style_feat: int,
        demodulate: bool = True,
        sample_mode: str | None = None,
        eps: float = 1e-8,
    ):
        super().__init__()
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
        self.demodulate, self.sample_mode, self.eps = demodulate, sample_mode, eps
        self.modulation = nn.Linear(num_style_feat, in_channels, bias=True)
        nn.init.kaiming_normal_(self.modulation.weight, a=0, mode="fan_in", nonlinearity="linear")
        nn.init.constant_(self.modulation.bias, 1.0)  # styles start at 1: an unmodulated kernel
        shape = (1, out_channels, in_channels, kernel_size, kernel_size)
        self.weight = nn.Parameter(torch.randn(shape) / math.sqrt(in_channels * kernel_size**2))
        self.padding = kernel_size // 2

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[:2]
        style = self.modulation(style).view(n, 1, c, 1, 1)
        weight = self.weight * style  # [N, out, in, k, k]  (modulation)
        if self.demodulate:
            demod = torch.rsqrt(weight.pow(2).sum(dim=[2, 3, 4]) + self.eps)
            weight = weight * demod.view(n, self.out_channels, 1, 1, 1)
        weight = weight.view(n * self.out_channels, c, self.kernel_size, self.kernel_size)
        if self.sample_mode == "upsample":
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        elif self.sample_mode == "downsample":
            x = F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=False)
        h, w = x.shape[2:]
        out = F.conv2d(x.reshape(1, n * c, h, w), weight, padding=self.padding, groups=n)
        return out.view(n, self.out_channels, *out.shape[2:])


class StyleConv(nn.Module):
    """Modulated 3x3 conv, noise injection (scalar ``weight``), ``bias``, LeakyReLU(0.2)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, num_style_feat: int, demodulate: bool = True, sample_mode: str | None = None):
        super().__init__()
        self.modulated_conv = ModulatedConv2d(in_channels, out_channels, kernel_size, num_style_feat, demodulate=demodulate, sample_mode=sample_mode)
        self.weight = nn.Parameter(torch.zeros(1))  # noise strength
        self.bias = nn.Parameter(torch.zeros(1, out_channels, 1, 1))

    def forward(self, x: torch.Tensor, style: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        out = self.modulated_conv(x, style) * 2**0.5  # sqrt(2) gain, kept for weight compatibility
        if noise is None:
            n, _, h, w = out.shape
            noise = out.new_empty(n, 1, h, w).normal_()
        out = out + self.weight * noise + self.bias
        return F.leaky_relu(out, 0.2)


class ToRGB(nn.Module):
    """Modulated 1x1 conv to RGB (no demodulation) + ``bias``, added to the bilinearly upsampled skip."""

    def __init__(self, in_channels: int, num_style_feat: int, upsample: bool = True):
        super().__init__()
        self.upsample = upsample
        self.modulated_conv = ModulatedConv2d(in_channels, 3, 1, num_style_feat, demodulate=False)
        self.bias = nn.Parameter(torch.zeros(1, 3, 1, 1))

    def forward(self, x: torch.Tensor, style: torch.Tensor, skip: torch.Tensor | None = None) -> torch.Tensor:
        out = self.modulated_conv(x, style) + self.bias
        if skip is not None:
            if self.upsample:
                skip = F.interpolate(skip, scale_factor=2, mode="bilinear", align_corners=False)
            out = out + skip
        return out


class ConstantInput(nn.Module):
    """Learned 4x4 constant ``weight [1, C, 4, 4]``, repeated over the batch."""

    def __init__(self, num_channel: int, size: int = 4):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1, num_channel, size, size))

    def forward(self, batch: int) -> torch.Tensor:
        return self.weight.repeat(batch, 1, 1, 1)


class StyleGAN2GeneratorClean(HubModule):
    """Clean StyleGAN2 generator (the GFPGAN decoder), with optional CS-SFT conditions.

    ``forward(styles, conditions=None, ...)``: ``styles`` is a list of one (or two, for style mixing)
    tensors, each ``[N, num_style_feat]`` (z, or w when ``input_is_latent``) or ``[N, num_latent,
    num_style_feat]`` (W+). ``conditions`` are the SFT scale/shift maps from the GFPGAN U-Net,
    ``[scale_8, shift_8, scale_16, shift_16, ...]``; after the first (upsampling) conv of each
    resolution: ``out = out * scale + shift`` on all channels, or on the second half of the channels
    when ``sft_half`` (the channel-split SFT of GFPGAN Sec. 3.3). Returns ``(image [N, 3, S, S],
    latent or None)``.
    """

    def __init__(
        self, out_size: int = 512, num_style_feat: int = 512, num_mlp: int = 8, channel_multiplier: int = 2, narrow: float = 1.0, sft_half: bool = False
    ):
        super().__init__()
        self.num_style_feat = num_style_feat
        self.sft_half = sft_half
        layers: list[nn.Module] = [NormStyleCode()]
        for _ in range(num_mlp):
            layers += [nn.Linear(num_style_feat, num_style_feat), nn.LeakyReLU(0.2)]
        self.style_mlp = nn.Sequential(*layers)
        for m in self.style_mlp:
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, a=0.2, mode="fan_in", nonlinearity="leaky_relu")
                nn.init.zeros_(m.bias)

        ch = _channels(narrow, channel_multiplier)
        self.channels = ch
        self.log_size = int(math.log2(out_size))
        if 2**self.log_size != out_size or out_size < 8:
            raise ValueError(f"out_size must be a power of two >= 8, got {out_size}")
        self.num_layers = (self.log_size - 2) * 2 + 1  # style convs (= noise maps)
        self.num_latent = self.log_size * 2 - 2  # W+ entries

        self.constant_input = ConstantInput(ch["4"], size=4)
        self.style_conv1 = StyleConv(ch["4"], ch["4"], 3, num_style_feat)
        self.to_rgb1 = ToRGB(ch["4"], num_style_feat, upsample=False)
        self.style_convs = nn.ModuleList()
        self.to_rgbs = nn.ModuleList()
        self.noises = nn.Module()
        for idx in range(self.num_layers):
            res = 2 ** ((idx + 5) // 2)
            self.noises.register_buffer(f"noise{idx}", torch.randn(1, 1, res, res))
        in_ch = ch["4"]
        for i in range(3, self.log_size + 1):
            out_ch = ch[str(2**i)]
            self.style_convs.append(StyleConv(in_ch, out_ch, 3, num_style_feat, sample_mode="upsample"))
            self.style_convs.append(StyleConv(out_ch, out_ch, 3, num_style_feat))
            self.to_rgbs.append(ToRGB(out_ch, num_style_feat, upsample=True))
            in_ch = out_ch

    def get_latent(self, z: torch.Tensor) -> torch.Tensor:
        """Mapping network: ``z [N, F] -> w [N, F]``."""
        return self.style_mlp(z)

    def mean_latent(self, n: int = 4096, generator: torch.Generator | None = None) -> torch.Tensor:
        z = torch.randn(n, self.num_style_feat, generator=generator).to(self.constant_input.weight)
        return self.style_mlp(z).mean(0, keepdim=True)

    def forward(
        self,
        styles: list[torch.Tensor],
        conditions: list[torch.Tensor] | None = None,
        input_is_latent: bool = False,
        noise: list[torch.Tensor | None] | None = None,
        randomize_noise: bool = True,
        truncation: float = 1.0,
        truncation_latent: torch.Tensor | None = None,
        inject_index: int | None = None,
        return_latents: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        conditions = conditions or []
        if not input_is_latent:
            styles = [self.style_mlp(s) for s in styles]
        if noise is None:
            if randomize_noise:
                noise = [None] * self.num_layers
            else:
                noise = [getattr(self.noises, f"noise{i}") for i in range(self.num_layers)]
        if truncation < 1:
            styles = [truncation_latent + truncation * (s - truncation_latent) for s in styles]
        if len(styles) == 1:
            s = styles[0]
            latent = s if s.ndim == 3 else s.unsqueeze(1).repeat(1, self.num_latent, 1)
        elif len(styles) == 2:  # style mixing
            if inject_index is None:
                inject_index = int(torch.randint(1, self.num_latent, ()).item())
            latent = torch.cat([styles[0].unsqueeze(1).repeat(1, inject_index, 1), styles[1].unsqueeze(1).repeat(1, self.num_latent - inject_index, 1)], 1)
        else:
            raise ValueError("styles must hold one or two tensors")

        out = self.constant_input(latent.shape[0])
        out = self.style_conv1(out, latent[:, 0], noise=noise[0])
        skip = self.to_rgb1(out, latent[:, 1])
        i = 1
        for conv1, conv2, noise1, noise2, to_rgb in zip(self.style_convs[::2], self.style_convs[1::2], noise[1::2], noise[2::2], self.to_rgbs):
            out = conv1(out, latent[:, i], noise=noise1)
            if i < len(conditions):  # CS-SFT: spatial scale and shift from the U-Net
                scale, shift = conditions[i - 1], conditions[i]
                if self.sft_half:
                    same, sft = torch.split(out, out.size(1) // 2, dim=1)
                    out = torch.cat([same, sft * scale + shift], dim=1)
                else:
                    out = out * scale + shift
            out = conv2(out, latent[:, i + 1], noise=noise2)
            skip = to_rgb(out, latent[:, i + 2], skip)
            i += 2
        return skip, (latent if return_latents else None)


class ResBlock(nn.Module):
    """U-Net residual block with bilinear down/up-sampling: conv1, resample, conv2 (+ 1x1 ``skip``)."""

    def __init__(self, in_channels: int, out_channels: int, mode: str = "down"):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, in_channels, 3, 1, 1)
        self.conv2 = nn.Conv2d(in_channels, out_channels, 3, 1, 1)
        self.skip = nn.Conv2d(in_channels, out_channels, 1, bias=False)
        self.scale_factor = {"down": 0.5, "up": 2.0}[mode]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.leaky_relu(self.conv1(x), 0.2)
        out = F.interpolate(out, scale_factor=self.scale_factor, mode="bilinear", align_corners=False)
        out = F.leaky_relu(self.conv2(out), 0.2)
        x = F.interpolate(x, scale_factor=self.scale_factor, mode="bilinear", align_corners=False)
        return out + self.skip(x)


class GFPGANv1Clean(HubModule):
    """GFPGAN v1 clean: degradation-removal U-Net -> style code + SFT conditions -> StyleGAN2 prior.

    Defaults are the constructor defaults of the original class except ``channel_multiplier=2``; the
    released v1.3/v1.4 weights use ``GFPGANv1Clean(512, 512, channel_multiplier=2, fix_decoder=False,
    input_is_latent=True, different_w=True, narrow=1, sft_half=True)`` (what :func:`convert_gfpgan`
    builds). The original ``decoder_load_path`` argument is dropped: load the decoder from a converted
    checkpoint instead. ``fix_decoder`` freezes ``stylegan_decoder`` (requires_grad False).

    ``forward(x [N, 3, S, S] in [-1, 1]) -> (image [N, 3, S, S], out_rgbs)``, ``out_rgbs`` a list of
    ``[N, 3, r, r]`` for r = 8 .. S (empty when ``return_rgb=False``).
    """

    def __init__(
        self,
        out_size: int = 512,
        num_style_feat: int = 512,
        channel_multiplier: int = 2,
        fix_decoder: bool = True,
        num_mlp: int = 8,
        input_is_latent: bool = False,
        different_w: bool = False,
        narrow: float = 1.0,
        sft_half: bool = False,
    ):
        super().__init__()
        self.input_is_latent = input_is_latent
        self.different_w = different_w
        self.num_style_feat = num_style_feat
        self.log_size = int(math.log2(out_size))
        if 2**self.log_size != out_size or out_size < 8:
            raise ValueError(f"out_size must be a power of two >= 8, got {out_size}")
        ch = _channels(narrow * 0.5, channel_multiplier)  # the U-Net is half as wide as the decoder

        self.conv_body_first = nn.Conv2d(3, ch[str(out_size)], 1)
        self.conv_body_down = nn.ModuleList()
        in_ch = ch[str(out_size)]
        for i in range(self.log_size, 2, -1):
            self.conv_body_down.append(ResBlock(in_ch, ch[str(2 ** (i - 1))], mode="down"))
            in_ch = ch[str(2 ** (i - 1))]
        self.final_conv = nn.Conv2d(in_ch, ch["4"], 3, 1, 1)

        self.conv_body_up = nn.ModuleList()
        in_ch = ch["4"]
        for i in range(3, self.log_size + 1):
            self.conv_body_up.append(ResBlock(in_ch, ch[str(2**i)], mode="up"))
            in_ch = ch[str(2**i)]
        self.toRGB = nn.ModuleList(nn.Conv2d(ch[str(2**i)], 3, 1) for i in range(3, self.log_size + 1))

        num_latent = self.log_size * 2 - 2
        self.final_linear = nn.Linear(ch["4"] * 4 * 4, num_latent * num_style_feat if different_w else num_style_feat)

        self.stylegan_decoder = StyleGAN2GeneratorClean(out_size, num_style_feat, num_mlp, channel_multiplier, narrow, sft_half)
        if fix_decoder:
            self.stylegan_decoder.requires_grad_(False)

        self.condition_scale = nn.ModuleList()
        self.condition_shift = nn.ModuleList()
        for i in range(3, self.log_size + 1):
            c = ch[str(2**i)]
            sft_c = c if sft_half else 2 * c
            for heads in (self.condition_scale, self.condition_shift):
                heads.append(nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), nn.LeakyReLU(0.2), nn.Conv2d(c, sft_c, 3, 1, 1)))

    def forward(
        self, x: torch.Tensor, return_latents: bool = False, return_rgb: bool = True, randomize_noise: bool = True, **kwargs: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        conditions: list[torch.Tensor] = []
        unet_skips: list[torch.Tensor] = []
        out_rgbs: list[torch.Tensor] = []
        feat = F.leaky_relu(self.conv_body_first(x), 0.2)
        for down in self.conv_body_down:
            feat = down(feat)
            unet_skips.insert(0, feat)
        feat = F.leaky_relu(self.final_conv(feat), 0.2)

        style_code = self.final_linear(feat.flatten(1))
        if self.different_w:
            style_code = style_code.view(style_code.size(0), -1, self.num_style_feat)

        for i, up in enumerate(self.conv_body_up):
            feat = up(feat + unet_skips[i])
            conditions.append(self.condition_scale[i](feat))
            conditions.append(self.condition_shift[i](feat))
            if return_rgb:
                out_rgbs.append(self.toRGB[i](feat))

        image, _ = self.stylegan_decoder(
            [style_code],
            conditions,
            return_latents=return_latents,
            input_is_latent=self.input_is_latent,
            randomize_noise=randomize_noise,
            noise=kwargs.get("noise"),
        )  # optional explicit noise maps (seeded training)
        return image, out_rgbs


# ----------------------------------------------------------------------------------------------------
# converters


def _unwrap(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Pick the weights out of a BasicSR checkpoint: ``params_ema`` if present, else ``params``."""
    for key in ("params_ema", "params"):
        if key in state and isinstance(state[key], dict):
            state = state[key]
            break
    if not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConversionError("expected a BasicSR GFPGAN checkpoint (a 'params_ema'/'params' dict of tensors)")
    return {k[7:] if k.startswith("module.") else k: v for k, v in state.items()}


def _need(state: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    if key not in state:
        raise ConversionError(f"key {key!r} is missing; not a GFPGAN clean checkpoint")
    return state[key]


def _decoder_config(sd: dict[str, torch.Tensor], prefix: str) -> dict[str, Any]:
    """out_size, num_style_feat, num_mlp, narrow, channel_multiplier of a clean decoder, from its weights."""
    head = f"{prefix}to_rgbs."
    num_rgbs = len({k[len(head) :].split(".")[0] for k in sd if k.startswith(head)})
    if num_rgbs == 0:
        raise ConversionError(f"no {prefix}to_rgbs.* keys; not a clean StyleGAN2 decoder")
    narrow = _need(sd, f"{prefix}constant_input.weight").shape[1] / 512
    channel_multiplier = 2
    if num_rgbs >= 4:  # the 64 px channels are 256 * channel_multiplier * narrow
        c64 = _need(sd, f"{prefix}style_convs.6.modulated_conv.weight").shape[1]
        channel_multiplier = max(1, round(c64 / (256 * narrow)))
    return {
        "out_size": 2 ** (num_rgbs + 2),
        "num_style_feat": int(_need(sd, f"{prefix}style_mlp.1.weight").shape[0]),
        "num_mlp": sum(1 for k in sd if k.startswith(f"{prefix}style_mlp.") and k.endswith(".weight")),
        "narrow": narrow,
        "channel_multiplier": channel_multiplier,
    }


@register_converter(
    "stylegan2-clean",
    "BasicSR/GFPGAN StyleGAN2GeneratorClean .pth (e.g. StyleGAN2_512_Cmul1_FFHQ_B12G4_scratch_800k.pth)",
)
def convert_stylegan2_clean(state: dict[str, Any]) -> StyleGAN2GeneratorClean:
    """Build :class:`StyleGAN2GeneratorClean` (the GFPGAN decoder prior) from a BasicSR checkpoint."""
    sd = _unwrap(state)
    return check_and_load(StyleGAN2GeneratorClean(**_decoder_config(sd, "")), sd, "stylegan2-clean")


@register_converter("gfpgan", "TencentARC GFPGANv1Clean .pth (v1.2/v1.3/v1.4; 'params_ema' entry, else 'params')")
def convert_gfpgan(state: dict[str, Any]) -> GFPGANv1Clean:
    """Build :class:`GFPGANv1Clean` from an official clean checkpoint; all sizes are read from the weights.

    ``input_is_latent=True`` and ``fix_decoder=False`` are taken from the official inference code
    (``gfpgan/utils.py``); they cannot be read from the weights.
    """
    sd = _unwrap(state)
    num_up = sum(1 for k in sd if k.startswith("conv_body_up.") and k.endswith(".conv1.weight"))
    if num_up == 0:
        raise ConversionError("gfpgan: no conv_body_up.* keys; not a GFPGANv1Clean checkpoint")
    dec = _decoder_config(sd, "stylegan_decoder.")
    if dec["out_size"] != 2 ** (num_up + 2):
        raise ConversionError(f"gfpgan: U-Net ends at {2 ** (num_up + 2)} px but the decoder at {dec['out_size']} px")
    num_style_feat = dec["num_style_feat"]
    different_w = _need(sd, "final_linear.weight").shape[0] != num_style_feat
    sft_half = _need(sd, "condition_scale.0.2.weight").shape[0] == _need(sd, "condition_scale.0.0.weight").shape[0]
    model = GFPGANv1Clean(
        out_size=dec["out_size"],
        num_style_feat=num_style_feat,
        channel_multiplier=dec["channel_multiplier"],
        fix_decoder=False,
        num_mlp=dec["num_mlp"],
        input_is_latent=True,
        different_w=different_w,
        narrow=dec["narrow"],
        sft_half=sft_half,
    )
    return check_and_load(model, sd, "gfpgan")
