"""pSp ``GradualStyleEncoder`` and e4e ``Encoder4Editing`` on the IR-SE50 backbone.

pSp: Richardson et al., "Encoding in Style" (CVPR 2021); e4e: Tov et al., "Designing an Encoder for
StyleGAN Image Manipulation" (SIGGRAPH 2021). Key names match the official checkpoints (the
``encoder.*`` part of ``psp_ffhq_encode.pt`` / ``e4e_ffhq_encode.pt``)::

    input_layer.{0,1,2}  body.{0..23}.*  styles.{0..n_styles-1}.{convs.{0,2,..}, linear}
    latlayer1 (1x1, 256 -> 512)  latlayer2 (1x1, 128 -> 512)

plus one buffer of ours, ``latent_avg`` [n_styles, style_dim] (the checkpoint's top-level
``latent_avg``; zeros until set).

Feature pyramid (for a 256 px input): c1 = end of stage 2 [N,128,64,64], c2 = end of stage 3
[N,256,32,32], c3 = end of stage 4 [N,512,16,16]. Styles 0-2 read c3, styles 3-6 read
p2 = up(c3) + latlayer1(c2), styles 7.. read p1 = up(p2) + latlayer2(c1).

pSp predicts every style independently; e4e predicts one base code w0 = styles[0](c3) and adds
per-style offsets, w_i = w0 + styles[i](features) (its progressive training enables the offsets one
by one: ``progressive_stage``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from zoo.convert import ConversionError, check_and_load, get_converter, register_converter
from zoo.hub import HubModule
from zoo.nn.irse import (
    STAGE_CHANNELS,
    STAGE_UNITS,
    fill_bn_counters,
    infer_body_layout,
    make_body,
    make_input_layer,
    stage_layout,
    strip_prefix,
)
from zoo.nn.ops import EqualLinear

__all__ = [
    "GradualStyleBlock",
    "GradualStyleEncoder",
    "Encoder4Editing",
    "n_styles_for_size",
    "split_psp_checkpoint",
    "psp_decoder_checkpoint",
    "convert_psp_decoder",
]

COARSE_END = 3  # styles [0, 3) read the 16 px map (for 256 px inputs)
MIDDLE_END = 7  # styles [3, 7) read the 32 px map, the rest the 64 px map


def n_styles_for_size(size: int) -> int:
    """Number of W+ codes of a StyleGAN2 generator of output ``size``: 2*log2(size) - 2 (256 -> 14)."""
    return 2 * int(math.log2(size)) - 2


class GradualStyleBlock(nn.Module):
    """Strided 3x3 convs (log2(spatial) of them, LeakyReLU 0.01) to 1x1, then an EqualLinear.

    [N, in_c, spatial, spatial] -> [N, out_c]. Inputs larger than ``spatial`` (non-256 images) are
    averaged over what is left after the convs; the official code assumes exactly 1x1.
    """

    def __init__(self, in_c: int, out_c: int, spatial: int):
        super().__init__()
        self.out_c = out_c
        self.spatial = spatial
        num_pools = int(math.log2(spatial))
        layers: list[nn.Module] = [nn.Conv2d(in_c, out_c, kernel_size=3, stride=2, padding=1), nn.LeakyReLU()]
        for _ in range(num_pools - 1):
            layers += [nn.Conv2d(out_c, out_c, kernel_size=3, stride=2, padding=1), nn.LeakyReLU()]
        self.convs = nn.Sequential(*layers)
        self.linear = EqualLinear(out_c, out_c, lr_mul=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.convs(x)
        x = x.mean(dim=(2, 3)) if x.shape[-2:] != (1, 1) else x.flatten(1)
        return self.linear(x)


def _upsample_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """FPN merge: bilinear (align_corners=True) upsampling of ``x`` to ``y``'s size, plus ``y``."""
    return F.interpolate(x, size=y.shape[-2:], mode="bilinear", align_corners=True) + y


class _IRSEStyleEncoder(HubModule):
    """Shared body of pSp and e4e: IR-SE backbone, FPN lateral layers, one GradualStyleBlock per style."""

    def __init__(
        self,
        num_layers: int = 50,
        mode: str = "ir_se",
        n_styles: int = 14,
        input_nc: int = 3,
        style_dim: int = 512,
        stage_units: list[int] | None = None,
        channels: list[int] | None = None,
    ):
        super().__init__()
        units, chans = stage_layout(num_layers, stage_units, channels)
        if len(units) != 4:
            raise ValueError("the style encoder needs exactly 4 backbone stages")
        self.n_styles = n_styles
        self.style_dim = style_dim
        self.input_layer = make_input_layer(input_nc, chans[0])
        self.body, ends = make_body(units, chans, mode)
        self._taps = (ends[1], ends[2], ends[3])  # c1, c2, c3 (6, 20, 23 for IR-SE50)
        fpn = chans[3]
        self.styles = nn.ModuleList(GradualStyleBlock(fpn, style_dim, 16 if i < COARSE_END else 32 if i < MIDDLE_END else 64) for i in range(n_styles))
        self.latlayer1 = nn.Conv2d(chans[2], fpn, kernel_size=1, stride=1, padding=0)
        self.latlayer2 = nn.Conv2d(chans[1], fpn, kernel_size=1, stride=1, padding=0)
        self.register_buffer("latent_avg", torch.zeros(n_styles, style_dim))

    # -- backbone -------------------------------------------------------------------------------
    def backbone(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [N,3,H,W] in [-1,1] -> (c1 [N,128,H/4,W/4], c2 [N,256,H/8,W/8], c3 [N,512,H/16,W/16])."""
        x = self.input_layer(x)
        taps = []
        for i, unit in enumerate(self.body):
            x = unit(x)
            if i in self._taps:
                taps.append(x)
        return taps[0], taps[1], taps[2]

    @staticmethod
    def _feature_dict(c1: torch.Tensor, c2: torch.Tensor, c3: torch.Tensor) -> dict[int, torch.Tensor]:
        return {int(c.shape[-1]): c for c in (c1, c2, c3)}

    def _codes(self, c1: torch.Tensor, c2: torch.Tensor, c3: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # -- public API -----------------------------------------------------------------------------
    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """x [N,3,H,W] in [-1,1] -> (codes [N,n_styles,style_dim], {spatial size: feature map}).

        ``codes`` are the raw encoder output (add ``latent_avg`` for W+, see :meth:`w_plus`). For a
        256 px input the features are {64: c1 [N,128,64,64], 32: c2 [N,256,32,32], 16: c3 [N,512,16,16]}.
        """
        c1, c2, c3 = self.backbone(x)
        return self._codes(c1, c2, c3), self._feature_dict(c1, c2, c3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [N,3,H,W] in [-1,1] -> raw codes [N, n_styles, style_dim] (as the official forward)."""
        return self._codes(*self.backbone(x))

    def w_plus(self, x: torch.Tensor) -> torch.Tensor:
        """W+ latents, codes + latent_avg: [N, n_styles, style_dim] (pSp/e4e ``start_from_latent_avg``)."""
        return self.forward(x) + self.latent_avg

    @torch.no_grad()
    def set_latent_avg(self, latent_avg: torch.Tensor) -> None:
        """Set ``latent_avg`` from [style_dim] (broadcast to every style) or [n_styles, style_dim]."""
        self.latent_avg.copy_(_expand_latent_avg(latent_avg, self.n_styles, self.style_dim))


class GradualStyleEncoder(_IRSEStyleEncoder):
    """pSp encoder: every style predicted independently from its pyramid level."""

    def _codes(self, c1: torch.Tensor, c2: torch.Tensor, c3: torch.Tensor) -> torch.Tensor:
        latents = [self.styles[j](c3) for j in range(min(COARSE_END, self.n_styles))]
        p2 = _upsample_add(c3, self.latlayer1(c2))
        latents += [self.styles[j](p2) for j in range(COARSE_END, min(MIDDLE_END, self.n_styles))]
        p1 = _upsample_add(p2, self.latlayer2(c1))
        latents += [self.styles[j](p1) for j in range(MIDDLE_END, self.n_styles)]
        return torch.stack(latents, dim=1)


class Encoder4Editing(_IRSEStyleEncoder):
    """e4e encoder: w_i = w0 + delta_i, with w0 = styles[0](c3) and delta_i = styles[i](level(i)).

    ``progressive_stage`` (training state, not config): offsets 1..stage are used; ``None`` (the
    default, e4e's ``Inference`` stage) uses all of them.
    """

    progressive_stage: int | None = None

    def set_progressive_stage(self, stage: int | None) -> None:
        self.progressive_stage = stage

    def _codes(self, c1: torch.Tensor, c2: torch.Tensor, c3: torch.Tensor) -> torch.Tensor:
        w0 = self.styles[0](c3)
        w = w0.unsqueeze(1).repeat(1, self.n_styles, 1)
        last = self.n_styles if self.progressive_stage is None else min(self.progressive_stage + 1, self.n_styles)
        features = c3
        p2 = None
        for i in range(1, last):
            if i == COARSE_END:
                p2 = _upsample_add(c3, self.latlayer1(c2))
                features = p2
            elif i == MIDDLE_END:
                features = _upsample_add(p2, self.latlayer2(c1))
            w[:, i] += self.styles[i](features)
        return w


# ------------------------------------------------------------------------------------------------
# Converters
# ------------------------------------------------------------------------------------------------


def _expand_latent_avg(latent_avg: torch.Tensor, n_styles: int, style_dim: int) -> torch.Tensor:
    la = torch.as_tensor(latent_avg).float()
    if la.dim() == 2 and la.shape[0] == 1:
        la = la[0]
    if la.dim() == 1 and la.shape[0] == style_dim:
        return la.unsqueeze(0).expand(n_styles, style_dim).clone()
    if la.dim() == 2 and tuple(la.shape) == (n_styles, style_dim):
        return la.clone()
    raise ConversionError(f"latent_avg has shape {tuple(la.shape)}; expected ({style_dim},) or ({n_styles}, {style_dim})")


def split_psp_checkpoint(
    ckpt: dict[str, Any],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor | None, dict[str, Any]]:
    """Split an official pSp/e4e checkpoint into (encoder state, decoder state, latent_avg, opts).

    Accepts ``{'state_dict': {'encoder.*', 'decoder.*'}, 'latent_avg', 'opts'}`` as the official
    training scripts save it, or a bare encoder state dict (keys ``input_layer.*``, ``body.*``, ...).
    """
    if not isinstance(ckpt, dict):
        raise ConversionError(f"expected a dict checkpoint, got {type(ckpt).__name__}")
    sd = ckpt.get("state_dict", ckpt)
    sd = strip_prefix(sd, "module.")
    opts = ckpt.get("opts") or {}
    if not isinstance(opts, dict):
        opts = {}
    latent_avg = ckpt.get("latent_avg")
    if any(k.startswith("encoder.") for k in sd):
        enc = {k[len("encoder.") :]: v for k, v in sd.items() if k.startswith("encoder.")}
        dec = {k[len("decoder.") :]: v for k, v in sd.items() if k.startswith("decoder.")}
    else:
        enc = {k: v for k, v in sd.items() if torch.is_tensor(v) and k != "latent_avg"}
        dec = {}
        if latent_avg is None and "latent_avg" in sd:
            latent_avg = sd["latent_avg"]
    return enc, dec, latent_avg, opts


def _convert_style_encoder(ckpt: dict[str, Any], cls: type[_IRSEStyleEncoder], expected_type: str) -> _IRSEStyleEncoder:
    what = f"{cls.__name__} checkpoint"
    enc, _, latent_avg, opts = split_psp_checkpoint(ckpt)
    enc_type = opts.get("encoder_type")
    if enc_type is not None and enc_type != expected_type:
        raise ConversionError(f"{what}: opts.encoder_type is {enc_type!r}, expected {expected_type!r}")
    try:
        units, chans, mode = infer_body_layout(enc)
    except KeyError as err:
        raise ConversionError(f"{what}: {err}") from None
    n_styles = 0
    while f"styles.{n_styles}.linear.weight" in enc:
        n_styles += 1
    if n_styles == 0 or "input_layer.0.weight" not in enc:
        raise ConversionError(f"{what}: no styles.0.linear.weight / input_layer.0.weight keys")
    size = opts.get("output_size", opts.get("stylegan_size"))
    if size is not None and n_styles != n_styles_for_size(int(size)):
        raise ConversionError(f"{what}: {n_styles} style blocks but opts says a {size} px generator")
    if len(units) != 4:
        raise ConversionError(f"{what}: backbone has {len(units)} stages, expected 4")
    num_layers = next((n for n, u in STAGE_UNITS.items() if u == units), None)
    kwargs = dict(
        num_layers=num_layers or 50,
        mode=mode,
        n_styles=n_styles,
        input_nc=int(enc["input_layer.0.weight"].shape[1]),
        style_dim=int(enc["styles.0.linear.weight"].shape[0]),
        stage_units=None if num_layers else units,
        channels=None if chans == STAGE_CHANNELS else chans,
    )
    model = cls(**kwargs)
    state = fill_bn_counters(enc, model)
    if latent_avg is None:
        state["latent_avg"] = torch.zeros_like(model.latent_avg)
    else:
        state["latent_avg"] = _expand_latent_avg(latent_avg, n_styles, kwargs["style_dim"])
    return check_and_load(model, state, what)


@register_converter("psp", "pSp GradualStyleEncoder (IR-SE50) from psp_*.pt: encoder.* + latent_avg")
def convert_psp(ckpt: dict[str, Any]) -> GradualStyleEncoder:
    return _convert_style_encoder(ckpt, GradualStyleEncoder, "GradualStyleEncoder")


@register_converter("e4e", "e4e Encoder4Editing (IR-SE50) from e4e_*.pt: encoder.* + latent_avg")
def convert_e4e(ckpt: dict[str, Any]) -> Encoder4Editing:
    return _convert_style_encoder(ckpt, Encoder4Editing, "Encoder4Editing")


def psp_decoder_checkpoint(ckpt: dict[str, Any]) -> dict[str, Any]:
    """The StyleGAN2 part of a pSp/e4e checkpoint in rosinality's layout: ``{'g_ema': decoder.*, 'latent_avg'}``."""
    _, dec, latent_avg, _ = split_psp_checkpoint(ckpt)
    if not dec:
        raise ConversionError("pSp/e4e checkpoint has no decoder.* keys")
    out: dict[str, Any] = {"g_ema": dec}
    if latent_avg is not None:
        out["latent_avg"] = latent_avg
    return out


@register_converter("psp-decoder", "StyleGAN2 generator from a pSp/e4e .pt (decoder.*), via the 'stylegan2' converter")
def convert_psp_decoder(ckpt: dict[str, Any]) -> nn.Module:
    return get_converter("stylegan2").fn(psp_decoder_checkpoint(ckpt))
