"""ArcFace identity encoders: IR-SE50 (TreB1eN / pSp ``model_ir_se50.pth``) and iResNet (arcface_torch).

Both take 112x112 RGB faces in [-1, 1] and give a 512-d embedding. :meth:`embed` is the shared entry
point used by the methods' identity losses and metrics: it takes an *FFHQ-style aligned* face crop of
any size, cuts the ArcFace region out of it (:func:`arcface_crop`, the crop pSp/e4e use in their ID
loss), pools it to 112 px and returns the L2-normalised embedding.

Layouts (key names as in the released files, so they convert 1:1):

* :class:`IRSEArcFace` -- ``input_layer.*``, ``body.{0..23}.*`` (see :mod:`zoo.nn.irse`),
  ``output_layer``: .0 BN2d(512) .1 Dropout .2 Flatten .3 Linear(512*7*7, 512) .4 BN1d(512).
* :class:`IResNet` -- ``conv1, bn1, prelu, layer1..4`` (IBasicBlock: bn1, conv1, bn2, prelu, conv2,
  bn3, downsample.{0,1}), ``bn2, fc, features`` (BN1d with frozen weight).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from zoo.convert import ConversionError, check_and_load, register_converter
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

__all__ = ["arcface_crop", "IRSEArcFace", "IResNet", "IBasicBlock", "IRESNET_LAYERS", "convert_iresnet"]

# The ArcFace region of an FFHQ-aligned 256 px face (pSp/e4e ID loss): rows 35:223, cols 32:220.
_CROP_256 = (35, 223, 32, 220)

IRESNET_LAYERS: dict[str, list[int]] = {
    "iresnet18": [2, 2, 2, 2],
    "iresnet34": [3, 4, 6, 3],
    "iresnet50": [3, 4, 14, 3],
    "iresnet100": [3, 13, 30, 3],
}


def arcface_crop(x: torch.Tensor, out_size: int = 112) -> torch.Tensor:
    """Crop the ArcFace face region from FFHQ-aligned faces and average-pool it to ``out_size``.

    x [N,C,H,W] (any value range; [-1,1] by convention) -> [N,C,out_size,out_size]. At 256 px this is
    pSp's ``x[:, :, 35:223, 32:220]`` + ``AdaptiveAvgPool2d(112)``; other sizes scale the box.
    """
    h, w = x.shape[-2:]
    top, bottom, left, right = _CROP_256
    t, b = round(top * h / 256), round(bottom * h / 256)
    l, r = round(left * w / 256), round(right * w / 256)
    return F.adaptive_avg_pool2d(x[..., t:b, l:r], out_size)


class _ArcFaceBase(HubModule):
    """Common :meth:`embed` for the identity encoders; subclasses set ``input_size`` and ``raw_embedding``."""

    input_size: int = 112

    def raw_embedding(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def embed(self, x: torch.Tensor, ffhq_aligned: bool = True) -> torch.Tensor:
        """Identity embedding, L2-normalised: x [N,3,H,W] RGB in [-1,1] -> [N, 512] with unit norm.

        ``ffhq_aligned=True``: ``x`` is an FFHQ-style aligned face of any size (cropped with
        :func:`arcface_crop`). ``False``: ``x`` already is an ArcFace-aligned crop (resized to 112 px).
        """
        if ffhq_aligned:
            x = arcface_crop(x, self.input_size)
        elif x.shape[-2:] != (self.input_size, self.input_size):
            x = F.interpolate(x, size=(self.input_size, self.input_size), mode="bilinear", align_corners=False, antialias=True)
        return F.normalize(self.raw_embedding(x), dim=1)


class IRSEArcFace(_ArcFaceBase):
    """TreB1eN's ``Backbone(num_layers=50, drop_ratio=0.6, mode='ir_se')`` as used by pSp/e4e's ID loss.

    forward: x [N,3,112,112] in [-1,1] -> [N, embedding_size], L2-normalised (as the original).
    """

    def __init__(
        self,
        num_layers: int = 50,
        mode: str = "ir_se",
        drop_ratio: float = 0.6,
        input_size: int = 112,
        embedding_size: int = 512,
        affine: bool = True,
        stage_units: list[int] | None = None,
        channels: list[int] | None = None,
    ):
        super().__init__()
        if input_size % 16:
            raise ValueError("input_size must be a multiple of 16 (112 or 224)")
        units, chans = stage_layout(num_layers, stage_units, channels)
        self.input_size = input_size
        self.input_layer = make_input_layer(3, chans[0])
        self.body, _ = make_body(units, chans, mode)
        s = input_size // 2 ** len(units)
        self.output_layer = nn.Sequential(
            nn.BatchNorm2d(chans[-1]),
            nn.Dropout(drop_ratio),
            nn.Flatten(),
            nn.Linear(chans[-1] * s * s, embedding_size),
            nn.BatchNorm1d(embedding_size, affine=affine),
        )

    def raw_embedding(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_layer(self.body(self.input_layer(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.raw_embedding(x), dim=1)


class IBasicBlock(nn.Module):
    """arcface_torch residual unit: BN-Conv3x3-BN-PReLU-Conv3x3(stride)-BN, + (downsampled) input."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(inplanes, eps=1e-5)
        self.conv1 = nn.Conv2d(inplanes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes, eps=1e-5)
        self.prelu = nn.PReLU(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes, eps=1e-5)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn3(self.conv2(self.prelu(self.bn2(self.conv1(self.bn1(x))))))
        identity = x if self.downsample is None else self.downsample(x)
        return out + identity


class IResNet(_ArcFaceBase):
    """arcface_torch iResNet (``iresnet50``: layers [3,4,14,3]; ``iresnet100``: [3,13,30,3]).

    forward: x [N,3,112,112] in [-1,1] -> [N, num_features] (not normalised, as the original).
    """

    def __init__(
        self,
        layers: list[int] | None = None,
        num_features: int = 512,
        dropout: float = 0.0,
        input_size: int = 112,
        channels: list[int] | None = None,
    ):
        super().__init__()
        layers = list(layers) if layers is not None else list(IRESNET_LAYERS["iresnet50"])
        chans = list(channels) if channels is not None else list(STAGE_CHANNELS)
        if len(layers) != 4 or len(chans) != 4:
            raise ValueError("iResNet has 4 stages: layers and channels need 4 entries")
        self.input_size = input_size
        self.conv1 = nn.Conv2d(3, chans[0], kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(chans[0], eps=1e-5)
        self.prelu = nn.PReLU(chans[0])
        inplanes = chans[0]
        for i, (n, planes) in enumerate(zip(layers, chans)):
            downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, 2, bias=False), nn.BatchNorm2d(planes, eps=1e-5))
            blocks = [IBasicBlock(inplanes, planes, 2, downsample)]
            blocks += [IBasicBlock(planes, planes) for _ in range(n - 1)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
            inplanes = planes
        s = input_size // 16
        self.bn2 = nn.BatchNorm2d(chans[-1], eps=1e-5)
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(chans[-1] * s * s, num_features)
        self.features = nn.BatchNorm1d(num_features, eps=1e-5)
        nn.init.constant_(self.features.weight, 1.0)
        self.features.weight.requires_grad = False

    @classmethod
    def iresnet50(cls, **kwargs: Any) -> "IResNet":
        return cls(layers=IRESNET_LAYERS["iresnet50"], **kwargs)

    @classmethod
    def iresnet100(cls, **kwargs: Any) -> "IResNet":
        return cls(layers=IRESNET_LAYERS["iresnet100"], **kwargs)

    def raw_embedding(self, x: torch.Tensor) -> torch.Tensor:
        x = self.prelu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.dropout(torch.flatten(self.bn2(x), 1))
        return self.features(self.fc(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.raw_embedding(x)


# ------------------------------------------------------------------------------------------------
# Converters
# ------------------------------------------------------------------------------------------------


def _flat_state(state: dict[str, Any], what: str) -> dict[str, torch.Tensor]:
    for key in ("state_dict", "model", "backbone"):
        if key in state and isinstance(state[key], dict):
            state = state[key]
            break
    state = strip_prefix({k: v for k, v in state.items() if torch.is_tensor(v)}, "module.")
    if not state:
        raise ConversionError(f"{what}: no tensors found")
    return state


@register_converter("arcface-irse50", "ArcFace IR-SE50 (TreB1eN / pSp model_ir_se50.pth)")
def convert_arcface_irse50(state: dict[str, Any]) -> IRSEArcFace:
    what = "IR-SE50 ArcFace checkpoint"
    state = _flat_state(state, what)
    try:
        units, chans, mode = infer_body_layout(state)
    except KeyError as err:
        raise ConversionError(f"{what}: {err}") from None
    if "output_layer.3.weight" not in state:
        raise ConversionError(f"{what}: no output_layer.3.weight (the 512-d embedding layer)")
    emb, flat = state["output_layer.3.weight"].shape
    cells = flat // chans[-1]
    side = int(round(cells**0.5))
    if side * side * chans[-1] != flat:
        shape = tuple(state["output_layer.3.weight"].shape)
        raise ConversionError(f"{what}: output_layer.3.weight {shape} does not match {chans[-1]} channels")
    num_layers = next((n for n, u in STAGE_UNITS.items() if u == units), None)
    model = IRSEArcFace(
        num_layers=num_layers or 50,
        mode=mode,
        input_size=side * 2 ** len(units),
        embedding_size=int(emb),
        affine="output_layer.4.weight" in state,
        stage_units=None if num_layers else units,
        channels=None if chans == STAGE_CHANNELS else chans,
    )
    return check_and_load(model, fill_bn_counters(state, model), what)


def convert_iresnet(state: dict[str, Any], expected_layers: list[int] | None = None) -> IResNet:
    """Convert an arcface_torch ``backbone.pth``; ``expected_layers`` guards against the wrong depth."""
    what = "arcface_torch iResNet checkpoint"
    state = _flat_state(state, what)
    layers, chans = [], []
    for stage in range(1, 5):
        n = 0
        while f"layer{stage}.{n}.conv1.weight" in state:
            n += 1
        if n == 0:
            raise ConversionError(f"{what}: no layer{stage}.0.conv1.weight key")
        layers.append(n)
        chans.append(int(state[f"layer{stage}.0.conv1.weight"].shape[0]))
    if expected_layers is not None and layers != list(expected_layers):
        raise ConversionError(f"{what}: blocks per stage {layers}, expected {list(expected_layers)}")
    if "fc.weight" not in state:
        raise ConversionError(f"{what}: no fc.weight")
    num_features, flat = state["fc.weight"].shape
    side = int(round((flat // chans[-1]) ** 0.5))
    if side * side * chans[-1] != flat:
        raise ConversionError(f"{what}: fc.weight {tuple(state['fc.weight'].shape)} does not match {chans[-1]} channels")
    model = IResNet(
        layers=layers,
        num_features=int(num_features),
        input_size=side * 16,
        channels=None if chans == STAGE_CHANNELS else chans,
    )
    return check_and_load(model, fill_bn_counters(state, model), what)


@register_converter("iresnet50", "arcface_torch iresnet50 backbone.pth (e.g. ms1mv3_arcface_r50)")
def convert_iresnet50(state: dict[str, Any]) -> IResNet:
    return convert_iresnet(state, IRESNET_LAYERS["iresnet50"])


@register_converter("iresnet100", "arcface_torch iresnet100 backbone.pth (e.g. glint360k_cosface_r100)")
def convert_iresnet100(state: dict[str, Any]) -> IResNet:
    return convert_iresnet(state, IRESNET_LAYERS["iresnet100"])


@register_converter("iresnet", "arcface_torch iResNet backbone.pth of any depth (18/34/50/100/200)")
def convert_iresnet_any(state: dict[str, Any]) -> IResNet:
    return convert_iresnet(state)
