"""VGG16/VGG19 (Simonyan & Zisserman, 2015) and AlexNet (Krizhevsky et al., 2012) convolutional trunks.

Written here because torchvision cannot be used. The ``features`` Sequential has torchvision's exact
layout (``features.{N}.weight`` / ``.bias``, N counting ReLU and pooling layers too), so published
ImageNet weights (``vgg19-dcbb9e9d.pth``, ``alexnet-owt-7be5be79.pth``, ...) convert by dropping
``classifier.*``. Layers are addressed by name: ``conv{b}_{i}`` (pre-activation), ``relu{b}_{i}``,
``pool{b}`` (VGG) and ``conv1..conv5`` / ``relu1..relu5`` / ``pool1, pool2, pool5`` (AlexNet).

:class:`VGG19Features` is the perceptual-loss network (IDEudemon Eq. 6: VGG-19 conv1..conv5 feature
maps *before* activation; the default layers are GFPGAN's ``conv1_2, conv2_2, conv3_4, conv4_4, conv5_4``).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from zoo.convert import ConversionError, check_and_load, register_converter
from zoo.hub import HubModule, WeightsNotFoundError, resolve_checkpoint

__all__ = [
    "VGG_CFGS",
    "make_vgg_features",
    "make_alexnet_features",
    "layer_names",
    "VGGTrunk",
    "AlexNetTrunk",
    "VGG19Features",
    "GFPGAN_PERCEPTUAL_LAYERS",
    "VGG19_REPO",
    "load_vgg19",
    "torchvision_features",
]

VGG_CFGS: dict[int, list[int | str]] = {
    11: [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    13: [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    19: [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}

# AlexNet features (torchvision): (out channels, kernel, stride, padding) per conv; "M" = MaxPool(3, 2).
ALEXNET_CFG: list[tuple[int, int, int, int] | str] = [
    (64, 11, 4, 2), "M", (192, 5, 1, 2), "M", (384, 3, 1, 1), (256, 3, 1, 1), (256, 3, 1, 1), "M",
]  # fmt: skip

GFPGAN_PERCEPTUAL_LAYERS: dict[str, float] = {"conv1_2": 0.1, "conv2_2": 0.1, "conv3_4": 1.0, "conv4_4": 1.0, "conv5_4": 1.0}

# Hub repo holding VGG19Features converted from torchvision's ImageNet vgg19 (python -m zoo.convert vgg19).
VGG19_REPO = "face-deid-zoo/vgg19-imagenet"

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _w(c: int, width: float) -> int:
    return max(1, int(round(c * width)))


def make_vgg_features(depth: int = 19, width: float = 1.0) -> tuple[nn.Sequential, list[str]]:
    """torchvision ``vgg{depth}().features`` (no batch norm) and the name of every layer in it."""
    if depth not in VGG_CFGS:
        raise ValueError(f"VGG depth should be one of {sorted(VGG_CFGS)}, got {depth}")
    layers: list[nn.Module] = []
    names: list[str] = []
    in_ch, block, idx = 3, 1, 1
    for v in VGG_CFGS[depth]:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            names.append(f"pool{block}")
            block, idx = block + 1, 1
        else:
            out = _w(int(v), width)
            layers += [nn.Conv2d(in_ch, out, kernel_size=3, padding=1), nn.ReLU(inplace=False)]
            names += [f"conv{block}_{idx}", f"relu{block}_{idx}"]
            in_ch, idx = out, idx + 1
    return nn.Sequential(*layers), names


def make_alexnet_features(width: float = 1.0) -> tuple[nn.Sequential, list[str]]:
    """torchvision ``alexnet().features`` and the layer names (conv1, relu1, pool1, ..., pool5)."""
    layers: list[nn.Module] = []
    names: list[str] = []
    in_ch, conv = 3, 1
    for v in ALEXNET_CFG:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=3, stride=2))
            names.append(f"pool{conv - 1}")
        else:
            out, k, s, p = v
            out = _w(out, width)
            layers += [nn.Conv2d(in_ch, out, kernel_size=k, stride=s, padding=p), nn.ReLU(inplace=False)]
            names += [f"conv{conv}", f"relu{conv}"]
            in_ch, conv = out, conv + 1
    return nn.Sequential(*layers), names


def layer_names(arch: str) -> list[str]:
    """Layer names of ``"alexnet"`` or ``"vgg16"``/``"vgg19"`` (index i names ``features.i``)."""
    with torch.device("meta"):
        return (make_alexnet_features() if arch == "alexnet" else make_vgg_features(int(arch[3:])))[1]


class _Trunk(HubModule):
    features: nn.Sequential
    names: list[str]

    def extract(self, x: torch.Tensor, names: Sequence[str]) -> dict[str, torch.Tensor]:
        """Run ``features`` up to the deepest requested layer; return {name: [N,C,h,w]} for ``names``.

        ``x`` is the trunk's raw input (already normalised as the caller's weights expect).
        """
        wanted = set(names)
        unknown = wanted - set(self.names)
        if unknown:
            raise KeyError(f"unknown layers {sorted(unknown)}; available: {self.names}")
        last = max(self.names.index(n) for n in wanted)
        out: dict[str, torch.Tensor] = {}
        for i in range(last + 1):
            x = self.features[i](x)
            if self.names[i] in wanted:
                out[self.names[i]] = x
        return out


class VGGTrunk(_Trunk):
    """Plain VGG ``features`` (torchvision layout); ``extract(x, names)`` gives named activations."""

    def __init__(self, depth: int = 16, width: float = 1.0):
        super().__init__()
        self.features, self.names = make_vgg_features(depth, width)


class AlexNetTrunk(_Trunk):
    """AlexNet ``features`` (torchvision layout); ``extract(x, names)`` gives named activations."""

    def __init__(self, width: float = 1.0):
        super().__init__()
        self.features, self.names = make_alexnet_features(width)


class VGG19Features(VGGTrunk):
    """VGG-19 perceptual features: x [N,3,H,W] RGB in [-1,1] -> {layer name: feature map}.

    ``layers`` default to GFPGAN's pre-activation ``conv1_2, conv2_2, conv3_4, conv4_4, conv5_4``
    (IDEudemon: "conv1, ..., conv5 feature maps before activation"). Inputs are mapped to [0,1] and
    ImageNet-normalised when ``use_input_norm``. Parameters are frozen (a fixed loss network).
    """

    def __init__(self, layers: list[str] | None = None, width: float = 1.0, use_input_norm: bool = True):
        super().__init__(depth=19, width=width)
        self.layers = list(layers) if layers is not None else list(GFPGAN_PERCEPTUAL_LAYERS)
        unknown = set(self.layers) - set(self.names)
        if unknown:
            raise ValueError(f"unknown VGG19 layers {sorted(unknown)}")
        self.use_input_norm = use_input_norm
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)
        self.requires_grad_(False)
        self.eval()

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        x = (x + 1) / 2
        if self.use_input_norm:
            x = (x - self.mean) / self.std
        return self.extract(x, self.layers)

    def perceptual_loss(self, x: torch.Tensor, y: torch.Tensor, layer_weights: dict[str, float] | None = None) -> torch.Tensor:
        """sum_l w_l * mean|phi_l(x) - phi_l(y)| over the chosen layers (L1, as GFPGAN); scalar.

        ``layer_weights`` default: GFPGAN's weights for the default layers, 1.0 otherwise.
        """
        weights = layer_weights or {n: GFPGAN_PERCEPTUAL_LAYERS.get(n, 1.0) for n in self.layers}
        fx, fy = self.forward(x), self.forward(y.detach())
        return sum(w * F.l1_loss(fx[n], fy[n]) for n, w in weights.items())  # type: ignore[return-value]


def load_vgg19(repo_id: str = VGG19_REPO, revision: str | None = None, **kwargs: Any) -> VGG19Features:
    """VGG19Features with ImageNet weights from a Hub repo or local folder (converted with ``zoo.convert vgg19``).

    Raises :class:`zoo.hub.WeightsNotFoundError` when offline and not cached; ``kwargs`` (``layers``,
    ``use_input_norm``) override the stored config.
    """
    folder = resolve_checkpoint(repo_id, revision=revision)
    if not (folder / "config.json").is_file():
        raise WeightsNotFoundError(f"{folder} holds no VGG19Features checkpoint (config.json + model.safetensors)")
    return VGG19Features.from_pretrained(str(folder), **kwargs)


def torchvision_features(state: dict[str, Any], what: str) -> dict[str, torch.Tensor]:
    """The ``features.*`` entries of a torchvision VGG/AlexNet state dict (``classifier.*`` dropped)."""
    if "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    feats = {k: v for k, v in state.items() if k.startswith("features.") and torch.is_tensor(v)}
    if not feats:
        raise ConversionError(f"{what}: no features.* keys (expected a torchvision state dict)")
    return feats


@register_converter("vgg19", "VGG19Features from torchvision's ImageNet vgg19 state dict (features.*; classifier dropped)")
def convert_vgg19(state: dict[str, Any]) -> VGG19Features:
    feats = torchvision_features(state, "torchvision vgg19")
    width = feats["features.0.weight"].shape[0] / 64 if "features.0.weight" in feats else 1.0
    model = VGG19Features(width=width)
    return check_and_load(model, feats, "torchvision vgg19")
