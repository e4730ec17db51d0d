"""AEI-Net: multi-level attribute encoder (U-Net) + AAD residual-block generator (FaceShifter).

Used by the ``personal`` method (Cao et al.): "we employ a U-Net-like structure and represent the
attributes as multi-level feature maps" z_attr = {z_attr^1, ..., z_attr^n} (their eq. 6, n = 8), and
"cascaded n AAD Residual Blocks in the generator" that mix the identity embedding z_id with z_attr.
AAD = Adaptive Attentional Denormalization from FaceShifter (Li et al., 2020, Sec. 3.2.1).

Module and parameter names follow the widely used unofficial FaceShifter port
(taotaonice/FaceShifter, ``network/AEI_Net.py`` + ``network/AADLayer.py``, trained with
``AEI_Net(c_id=512)``), so :func:`convert_faceshifter_aei` maps its ``G_latest.pth`` one-to-one.

Sizes for a 256 px input with the default ``base_channels=32`` (``c = base_channels``):

=========  ==========  ===========
level k    resolution  channels
=========  ==========  ===========
z_attr^1   2 x 2       32c (1024)
z_attr^2   4 x 4       64c (2048)
z_attr^3   8 x 8       32c (1024)
z_attr^4   16 x 16     16c (512)
z_attr^5   32 x 32     8c  (256)
z_attr^6   64 x 64     4c  (128)
z_attr^7   128 x 128   2c  (64)
z_attr^8   256 x 256   2c  (64)
=========  ==========  ===========

Tiny CPU configs may use :class:`SmallAEINet`: the same blocks at a smaller power-of-two size, with
n = log2(size) levels (a documented deviation from the paper's n = 8 at 256 px).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from zoo.convert import ConversionError, check_and_load, register_converter
from zoo.hub import HubModule

__all__ = [
    "AADLayer",
    "AAD_ResBlk",
    "MultilevelAttributesEncoder",
    "AADGenerator",
    "AEINet",
    "SmallAEINet",
    "attr_shapes",
    "convert_faceshifter_aei",
]

IMAGE_SIZE = 256
NUM_LEVELS = 8  # n in eq. 6 of Cao et al.


def num_levels(image_size: int = IMAGE_SIZE) -> int:
    """n = log2(image_size) attribute levels (8 at 256 px: 2, 4, ..., 256 px)."""
    n = int(image_size).bit_length() - 1
    if image_size < 16 or 2**n != image_size:
        raise ValueError(f"AEI-Net needs a power-of-two input size >= 16, got {image_size}")
    return n


def _enc_channels(c: int, image_size: int = IMAGE_SIZE) -> list[int]:
    """Output channels of the n - 1 stride-2 encoder convs (image_size -> 2 px); at 256 px
    ``[c, 2c, 4c, 8c, 16c, 32c, 32c]``, doubling up to 32c and repeating the last width."""
    convs = num_levels(image_size) - 1
    enc = [c * 2 ** min(i, 5) for i in range(convs - 1)]
    return enc + [enc[-1]]


def _gen_channels(c: int, image_size: int = IMAGE_SIZE) -> tuple[list[int], list[int]]:
    """Input and output channels of the n AAD residual blocks; at 256 px
    ``h_in = [32c, 32c, 32c, 32c, 16c, 8c, 4c, 2c]``, ``h_out = [32c, 32c, 32c, 16c, 8c, 4c, 2c, 3]``."""
    n = num_levels(image_size)
    h_out = [c * 2 ** min(5, n - 1 - k) for k in range(n - 1)] + [3]
    return [h_out[0]] + h_out[:-1], h_out


def attr_shapes(base_channels: int = 32, image_size: int = IMAGE_SIZE) -> list[tuple[int, int]]:
    """``(channels, resolution)`` of z_attr^1..z_attr^n (see the module docstring for 256 px)."""
    enc = _enc_channels(base_channels, image_size)
    convs = len(enc)
    shapes = [(enc[-1], 2)]
    for k in range(convs - 1):  # decoder level k: deconv to enc[-2-k] channels, concatenated with the same-size encoder skip
        shapes.append((2 * enc[convs - 2 - k], image_size // 2 ** (convs - 1 - k)))
    shapes.append((shapes[-1][0], image_size))  # z_attr^n: bilinear 2x upsample of z_attr^(n-1)
    return shapes


def _init_weights(m: nn.Module) -> None:
    """Initialisation of the reference port: Xavier-normal convs, N(0, 0.001) linear layers, zero biases."""
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0.0, 0.001)
        nn.init.zeros_(m.bias)
    elif isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.xavier_normal_(m.weight)


class _EncBlock(nn.Sequential):
    """4x4 stride-2 conv (no bias) + BatchNorm + LeakyReLU(0.1); keys ``0.weight``, ``1.*``."""

    def __init__(self, cin: int, cout: int):
        super().__init__(nn.Conv2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.1))


class _DecBlock(nn.Module):
    """4x4 stride-2 transposed conv + BN + LeakyReLU(0.1), then concatenation with the encoder skip."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return torch.cat([F.leaky_relu(self.bn(self.deconv(x)), 0.1), skip], dim=1)


class MultilevelAttributesEncoder(HubModule):
    """U-Net attribute encoder E_attr: ``x [N, 3, 256, 256] in [-1, 1] -> [z_attr^1, ..., z_attr^8]``.

    Seven 4x4 stride-2 convs down to 2x2 (z_attr^1 is the bottleneck), six transposed convs back up
    to 128 px, each concatenated with the encoder feature of the same size (z_attr^2..z_attr^7), and a
    bilinear 2x upsample to 256 px (z_attr^8). Eq. 6 of Cao et al.; shapes in :func:`attr_shapes`.
    """

    def __init__(self, base_channels: int = 32, in_channels: int = 3, image_size: int = IMAGE_SIZE):
        super().__init__()
        self.image_size = image_size
        enc = _enc_channels(base_channels, image_size)
        self.convs = len(enc)  # 7 at 256 px
        cins = [in_channels] + enc[:-1]
        for i, (cin, cout) in enumerate(zip(cins, enc), start=1):
            setattr(self, f"conv{i}", _EncBlock(cin, cout))
        cin = enc[-1]
        for i in range(1, self.convs):
            cout = enc[self.convs - 1 - i]
            setattr(self, f"deconv{i}", _DecBlock(cin, cout))
            cin = 2 * cout
        self.apply(_init_weights)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        s = self.image_size
        if x.shape[-2:] != (s, s):
            raise ValueError(f"expected [N, 3, {s}, {s}] input, got {tuple(x.shape)}")
        feats = []
        for i in range(1, self.convs):
            x = getattr(self, f"conv{i}")(x)
            feats.append(x)  # 128, 64, 32, 16, 8, 4 px (at 256)
        z = [getattr(self, f"conv{self.convs}")(x)]  # z_attr^1: 2 px
        for i in range(1, self.convs):
            z.append(getattr(self, f"deconv{i}")(z[-1], feats[self.convs - 1 - i]))
        z.append(F.interpolate(z[-1], scale_factor=2, mode="bilinear", align_corners=True))
        return z


class AADLayer(nn.Module):
    """Adaptive Attentional Denormalization (FaceShifter Sec. 3.2.1).

    h_bar = InstanceNorm(h); attribute integration A = gamma_att(z_att) * h_bar + beta_att(z_att) (convs
    ``conv1``/``conv2``); identity integration I = gamma_id(z_id) * h_bar + beta_id(z_id) (linear
    ``fc1``/``fc2``); attention mask M = sigmoid(conv_h(h_bar)); output (1 - M) * A + M * I.
    The convs are 1x1 with bias as in the released port (``kernel_size=3`` gives SPADE-style 3x3 convs).
    ``h [N, c_x, H, W], z_att [N, c_att, H, W], z_id [N, c_id] -> [N, c_x, H, W]``.
    """

    def __init__(self, c_x: int, c_att: int, c_id: int = 512, kernel_size: int = 1):
        super().__init__()
        pad = kernel_size // 2
        self.norm = nn.InstanceNorm2d(c_x, affine=False)
        self.conv1 = nn.Conv2d(c_att, c_x, kernel_size, 1, pad)  # gamma_att
        self.conv2 = nn.Conv2d(c_att, c_x, kernel_size, 1, pad)  # beta_att
        self.fc1 = nn.Linear(c_id, c_x)  # gamma_id
        self.fc2 = nn.Linear(c_id, c_x)  # beta_id
        self.conv_h = nn.Conv2d(c_x, 1, kernel_size, 1, pad)  # attention mask logits

    def forward(self, h: torch.Tensor, z_att: torch.Tensor, z_id: torch.Tensor) -> torch.Tensor:
        h_bar = self.norm(h)
        a = self.conv1(z_att) * h_bar + self.conv2(z_att)
        i = self.fc1(z_id)[:, :, None, None] * h_bar + self.fc2(z_id)[:, :, None, None]
        m = torch.sigmoid(self.conv_h(h_bar))
        return (1 - m) * a + m * i


class AAD_ResBlk(nn.Module):  # noqa: N801  (name of the reference implementation, kept for the keys)
    """AAD residual block: 2 x (AAD, ReLU, 3x3 conv); the shortcut is identity when cin == cout,
    else (AAD, ReLU, 3x3 conv) (FaceShifter Fig. 3c)."""

    def __init__(self, cin: int, cout: int, c_att: int, c_id: int = 512, aad_kernel_size: int = 1):
        super().__init__()
        self.AAD1 = AADLayer(cin, c_att, c_id, aad_kernel_size)
        self.conv1 = nn.Conv2d(cin, cin, 3, 1, 1, bias=False)
        self.AAD2 = AADLayer(cin, c_att, c_id, aad_kernel_size)
        self.conv2 = nn.Conv2d(cin, cout, 3, 1, 1, bias=False)
        self.learned_shortcut = cin != cout
        if self.learned_shortcut:
            self.AAD3 = AADLayer(cin, c_att, c_id, aad_kernel_size)
            self.conv3 = nn.Conv2d(cin, cout, 3, 1, 1, bias=False)

    def forward(self, h: torch.Tensor, z_att: torch.Tensor, z_id: torch.Tensor) -> torch.Tensor:
        x = self.conv1(F.relu(self.AAD1(h, z_att, z_id)))
        x = self.conv2(F.relu(self.AAD2(x, z_att, z_id)))
        if self.learned_shortcut:
            h = self.conv3(F.relu(self.AAD3(h, z_att, z_id)))
        return x + h


class AADGenerator(HubModule):
    """AAD generator G: ``(z_attr list of 8 maps, z_id [N, c_id]) -> y [N, 3, 256, 256]``.

    z_id is lifted to 2x2 by a 2x2 transposed conv (``up1``), then 8 AAD residual blocks, the first
    seven followed by bilinear 2x upsampling (2 -> 256 px), and tanh: y is in [-1, 1].
    """

    def __init__(self, c_id: int = 512, base_channels: int = 32, aad_kernel_size: int = 1, image_size: int = IMAGE_SIZE):
        super().__init__()
        c = base_channels
        self.levels = num_levels(image_size)  # n = 8 at 256 px
        att = [ch for ch, _ in attr_shapes(c, image_size)]
        h_in, h_out = _gen_channels(c, image_size)
        self.up1 = nn.ConvTranspose2d(c_id, h_in[0], kernel_size=2, stride=1, padding=0)
        for k in range(self.levels):
            setattr(self, f"AADBlk{k + 1}", AAD_ResBlk(h_in[k], h_out[k], att[k], c_id, aad_kernel_size))
        self.apply(_init_weights)

    def forward(self, z_attr: list[torch.Tensor], z_id: torch.Tensor) -> torch.Tensor:
        if len(z_attr) != self.levels:
            raise ValueError(f"expected {self.levels} attribute maps, got {len(z_attr)}")
        h = self.up1(z_id[:, :, None, None])
        for k in range(self.levels):
            h = getattr(self, f"AADBlk{k + 1}")(h, z_attr[k], z_id)
            if k < self.levels - 1:
                h = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=True)
        return torch.tanh(h)


class AEINet(HubModule):
    """Adaptive Embedding Integration network = E_attr (``encoder``) + G (``generator``).

    ``forward(x_attr [N, 3, 256, 256] in [-1, 1], z_id [N, c_id]) -> (y [N, 3, 256, 256], z_attr)``:
    y is the face with the identity z_id (e.g. an L2-normalised ArcFace embedding) and the attributes
    (pose, expression, lighting, background) of x_attr; z_attr is the list of 8 attribute maps, returned
    for the attribute-consistency loss.
    """

    def __init__(self, c_id: int = 512, base_channels: int = 32, aad_kernel_size: int = 1):
        super().__init__()
        self.encoder = MultilevelAttributesEncoder(base_channels=base_channels)
        self.generator = AADGenerator(c_id=c_id, base_channels=base_channels, aad_kernel_size=aad_kernel_size)

    def get_attr(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.encoder(x)

    def forward(self, x_attr: torch.Tensor, z_id: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        z_attr = self.encoder(x_attr)
        return self.generator(z_attr, z_id), z_attr


class SmallAEINet(AEINet):
    """AEI-Net for a smaller power-of-two input (``image_size`` 16..128; tiny CPU configs only).

    Same blocks and parameter names as :class:`AEINet`; the U-Net has log2(image_size) - 1 stride-2
    convs and the generator n = log2(image_size) AAD residual blocks (6 at 64 px instead of the
    paper's 8 at 256 px). Sizes at 64 px (``c = base_channels``): z_attr = 8c @ 2, 16c @ 4, 8c @ 8,
    4c @ 16, 2c @ 32, 2c @ 64.
    """

    def __init__(self, c_id: int = 512, base_channels: int = 32, aad_kernel_size: int = 1, image_size: int = 64):
        HubModule.__init__(self)
        self.encoder = MultilevelAttributesEncoder(base_channels=base_channels, image_size=image_size)
        self.generator = AADGenerator(c_id=c_id, base_channels=base_channels, aad_kernel_size=aad_kernel_size, image_size=image_size)


@register_converter("faceshifter-aei", "taotaonice/FaceShifter AEI_Net G_latest.pth (AEI_Net(c_id=512) state dict)")
def convert_faceshifter_aei(state: dict[str, Any]) -> AEINet:
    """Build :class:`AEINet` from the unofficial FaceShifter port's generator state dict.

    Keys map one-to-one (a DataParallel ``module.`` prefix is dropped); ``c_id``, ``base_channels`` and
    the AAD conv size are read from ``generator.up1.weight``, ``encoder.conv1.0.weight`` and
    ``generator.AADBlk1.AAD1.conv1.weight``. The port's later layout (commit 7ecf04a, Jan 2020, the one
    its released weights were trained with) is the default; its earlier 3x3 bias-free AAD convs are
    not supported.
    """
    if "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    sd = {k[7:] if k.startswith("module.") else k: v for k, v in state.items()}
    if not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ConversionError("faceshifter-aei: expected a flat state dict of tensors")
    for key in ("generator.up1.weight", "encoder.conv1.0.weight"):
        if key not in sd:
            raise ConversionError(f"faceshifter-aei: key {key!r} is missing; not an AEI_Net checkpoint")
    k = sd.get("generator.AADBlk1.AAD1.conv1.weight")
    model = AEINet(
        c_id=int(sd["generator.up1.weight"].shape[0]),
        base_channels=int(sd["encoder.conv1.0.weight"].shape[0]),
        aad_kernel_size=int(k.shape[-1]) if k is not None else 1,
    )
    return check_and_load(model, sd, "faceshifter-aei")
