"""BiSeNet face parser (Yu et al., ECCV 2018) in zllrunning's face-parsing.PyTorch layout (19 classes).

The spatial path is replaced by the trunk's 1/8 feature map, as in the released ``79999_iter.pth``
(trained on CelebAMask-HQ at 512x512, ImageNet mean/std input normalisation). Key names::

    cp.resnet.*                        ResNet-18 trunk (zoo.nn.resnet.ResNetTrunk)
    cp.arm16 / cp.arm32                attention refinement: conv.{conv,bn}, conv_atten, bn_atten
    cp.conv_head32 / conv_head16 / conv_avg   ConvBNReLU: conv, bn
    ffm.convblk.{conv,bn}, ffm.conv1, ffm.conv2      feature fusion
    conv_out / conv_out16 / conv_out32 .conv.{conv,bn}, .conv_out   heads (main, two auxiliary)

:class:`FaceParser` wraps the network: ``parse(x)`` gives per-pixel labels for [-1,1] images of any
size, ``region_mask(labels, "hair")`` turns labels into float masks (class names and groups below).
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Union

import torch
import torch.nn.functional as F
from torch import nn

from zoo.convert import ConversionError, check_and_load, register_converter
from zoo.hub import HubModule
from zoo.nn.irse import fill_bn_counters, strip_prefix
from zoo.nn.resnet import ResNetTrunk

__all__ = [
    "CLASS_NAMES",
    "REGION_GROUPS",
    "BiSeNet",
    "FaceParser",
    "class_ids",
    "region_mask",
]

CLASS_NAMES: tuple[str, ...] = (
    "background", "skin", "l_brow", "r_brow", "l_eye", "r_eye", "eye_g", "l_ear", "r_ear", "ear_r",
    "nose", "mouth", "u_lip", "l_lip", "neck", "neck_l", "cloth", "hair", "hat",
)  # fmt: skip

REGION_GROUPS: dict[str, tuple[int, ...]] = {
    "background": (0,),
    "skin": (1,),
    "brows": (2, 3),
    "eyes": (4, 5),
    "glasses": (6,),
    "ears": (7, 8),
    "nose": (10,),
    "mouth": (11, 12, 13),
    "lips": (12, 13),
    "neck": (14,),
    "cloth": (16,),
    "hair": (17,),
    "hat": (18,),
    # inner face: skin, brows, eyes, glasses, nose, mouth, lips
    "face": (1, 2, 3, 4, 5, 6, 10, 11, 12, 13),
    "face_ears": (1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13),
    # what a de-identification should keep: glasses, earrings, necklace, hat
    "accessories": (6, 9, 15, 18),
    "foreground": tuple(range(1, 19)),
}

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

Classes = Union[str, int, Iterable[Union[str, int]]]


class ConvBNReLU(nn.Module):
    def __init__(self, in_chan: int, out_chan: int, ks: int = 3, stride: int = 1, padding: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(in_chan, out_chan, kernel_size=ks, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(out_chan)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class BiSeNetOutput(nn.Module):
    def __init__(self, in_chan: int, mid_chan: int, n_classes: int):
        super().__init__()
        self.conv = ConvBNReLU(in_chan, mid_chan, ks=3, stride=1, padding=1)
        self.conv_out = nn.Conv2d(mid_chan, n_classes, kernel_size=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_out(self.conv(x))


class AttentionRefinementModule(nn.Module):
    """feat = ConvBNReLU(x); feat * sigmoid(BN(conv1x1(avgpool(feat))))."""

    def __init__(self, in_chan: int, out_chan: int):
        super().__init__()
        self.conv = ConvBNReLU(in_chan, out_chan, ks=3, stride=1, padding=1)
        self.conv_atten = nn.Conv2d(out_chan, out_chan, kernel_size=1, bias=False)
        self.bn_atten = nn.BatchNorm2d(out_chan)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feat = self.conv(x)
        atten = torch.sigmoid(self.bn_atten(self.conv_atten(F.adaptive_avg_pool2d(feat, 1))))
        return feat * atten


class ContextPath(nn.Module):
    def __init__(self, trunk_layers: list[int] | None, trunk_channels: list[int], context: int):
        super().__init__()
        self.resnet = ResNetTrunk(layers=trunk_layers, channels=trunk_channels)
        self.arm16 = AttentionRefinementModule(trunk_channels[2], context)
        self.arm32 = AttentionRefinementModule(trunk_channels[3], context)
        self.conv_head32 = ConvBNReLU(context, context, ks=3, stride=1, padding=1)
        self.conv_head16 = ConvBNReLU(context, context, ks=3, stride=1, padding=1)
        self.conv_avg = ConvBNReLU(trunk_channels[3], context, ks=1, stride=1, padding=0)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> (feat8 of the trunk, context at 1/8, context at 1/16)."""
        feat8, feat16, feat32 = self.resnet(x)
        avg = self.conv_avg(F.adaptive_avg_pool2d(feat32, 1))
        feat32_sum = self.arm32(feat32) + F.interpolate(avg, feat32.shape[-2:], mode="nearest")
        feat32_up = self.conv_head32(F.interpolate(feat32_sum, feat16.shape[-2:], mode="nearest"))
        feat16_sum = self.arm16(feat16) + feat32_up
        feat16_up = self.conv_head16(F.interpolate(feat16_sum, feat8.shape[-2:], mode="nearest"))
        return feat8, feat16_up, feat32_up


class FeatureFusionModule(nn.Module):
    """feat = ConvBNReLU([fsp, fcp]); feat + feat * sigmoid(conv2(relu(conv1(avgpool(feat)))))."""

    def __init__(self, in_chan: int, out_chan: int):
        super().__init__()
        self.convblk = ConvBNReLU(in_chan, out_chan, ks=1, stride=1, padding=0)
        self.conv1 = nn.Conv2d(out_chan, out_chan // 4, kernel_size=1, bias=False)
        self.conv2 = nn.Conv2d(out_chan // 4, out_chan, kernel_size=1, bias=False)

    def forward(self, fsp: torch.Tensor, fcp: torch.Tensor) -> torch.Tensor:
        feat = self.convblk(torch.cat([fsp, fcp], dim=1))
        atten = torch.sigmoid(self.conv2(F.relu(self.conv1(F.adaptive_avg_pool2d(feat, 1)))))
        return feat + feat * atten


class BiSeNet(HubModule):
    """Face parsing network. forward: x [N,3,H,W] ImageNet-normalised -> three logit maps [N,n_classes,H,W].

    The first is the main output; the other two are the auxiliary heads used in training. For images
    in [-1,1] use :meth:`logits` or :class:`FaceParser`.
    """

    def __init__(
        self,
        n_classes: int = 19,
        trunk_layers: list[int] | None = None,
        trunk_channels: list[int] | None = None,
        context_channels: int = 128,
        fuse_channels: int = 256,
        aux_channels: int = 64,
        parse_size: int = 512,
    ):
        super().__init__()
        chans = list(trunk_channels) if trunk_channels is not None else [64, 128, 256, 512]
        self.n_classes = n_classes
        self.parse_size = parse_size
        self.cp = ContextPath(trunk_layers, chans, context_channels)
        self.ffm = FeatureFusionModule(chans[1] + context_channels, fuse_channels)
        self.conv_out = BiSeNetOutput(fuse_channels, fuse_channels, n_classes)
        self.conv_out16 = BiSeNetOutput(context_channels, aux_channels, n_classes)
        self.conv_out32 = BiSeNetOutput(context_channels, aux_channels, n_classes)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        size = x.shape[-2:]
        feat8, feat_cp8, feat_cp16 = self.cp(x)
        outs = (self.conv_out(self.ffm(feat8, feat_cp8)), self.conv_out16(feat_cp8), self.conv_out32(feat_cp16))
        return tuple(F.interpolate(o, size, mode="bilinear", align_corners=True) for o in outs)  # type: ignore[return-value]

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """x [N,3,H,W] RGB in [-1,1], any size -> main logits [N,n_classes,H,W].

        The image is resized to ``parse_size`` (the training resolution, 512) and normalised with the
        ImageNet mean/std as in the original test script; logits are resized back bilinearly.
        """
        size = x.shape[-2:]
        y = (x + 1) / 2
        if tuple(size) != (self.parse_size, self.parse_size):
            y = F.interpolate(y, size=(self.parse_size, self.parse_size), mode="bilinear", align_corners=False)
        out = self.forward((y - self.mean) / self.std)[0]
        if tuple(size) != (self.parse_size, self.parse_size):
            out = F.interpolate(out, size=size, mode="bilinear", align_corners=False)
        return out

    @torch.no_grad()
    def parse(self, x: torch.Tensor) -> torch.Tensor:
        """x [N,3,H,W] RGB in [-1,1] -> labels [N,H,W] long in [0, n_classes)."""
        return self.logits(x).argmax(dim=1)


def class_ids(classes: Classes) -> list[int]:
    """Class ids for a group name (:data:`REGION_GROUPS`), class name (:data:`CLASS_NAMES`), id, or a list of them."""
    if isinstance(classes, (str, int)):
        classes = [classes]
    ids: list[int] = []
    for c in classes:
        if isinstance(c, str):
            if c in REGION_GROUPS:
                ids.extend(REGION_GROUPS[c])
            elif c in CLASS_NAMES:
                ids.append(CLASS_NAMES.index(c))
            else:
                raise KeyError(f"unknown face region {c!r}; groups: {sorted(REGION_GROUPS)}, classes: {list(CLASS_NAMES)}")
        else:
            ids.append(int(c))
    return sorted(set(ids))


def region_mask(labels: torch.Tensor, classes: Classes) -> torch.Tensor:
    """labels [N,H,W] long -> float mask [N,1,H,W] in {0,1}: 1 where the label is one of ``classes``."""
    ids = torch.tensor(class_ids(classes), device=labels.device)
    return torch.isin(labels, ids).unsqueeze(1).float()


class FaceParser:
    """Convenience wrapper around a :class:`BiSeNet`: labels and region masks for [-1,1] images.

    >>> parser = FaceParser.from_pretrained("owner/bisenet-face-parsing")  # doctest: +SKIP
    >>> hair = parser.mask(x, "hair")   # x [N,3,H,W] in [-1,1] -> [N,1,H,W]
    """

    CLASS_NAMES = CLASS_NAMES
    REGION_GROUPS = REGION_GROUPS

    def __init__(self, net: BiSeNet):
        self.net = net.eval()

    @classmethod
    def from_pretrained(cls, repo_or_dir: str | os.PathLike, *, revision: str | None = None) -> "FaceParser":
        from zoo.hub import resolve_checkpoint

        return cls(BiSeNet.from_pretrained(str(resolve_checkpoint(repo_or_dir, revision=revision))))

    def to(self, *args: Any, **kwargs: Any) -> "FaceParser":
        self.net.to(*args, **kwargs)
        return self

    def parse(self, x: torch.Tensor) -> torch.Tensor:
        """x [N,3,H,W] RGB in [-1,1], any size -> labels [N,H,W] long."""
        return self.net.parse(x)

    @staticmethod
    def region_mask(labels: torch.Tensor, classes: Classes) -> torch.Tensor:
        """labels [N,H,W] -> float mask [N,1,H,W] (see :func:`region_mask`)."""
        return region_mask(labels, classes)

    def mask(self, x: torch.Tensor, classes: Classes) -> torch.Tensor:
        """x [N,3,H,W] in [-1,1] -> float mask [N,1,H,W] of the given classes/groups."""
        return region_mask(self.parse(x), classes)


@register_converter("bisenet", "BiSeNet face parser, zllrunning face-parsing.PyTorch 79999_iter.pth (19 classes)")
def convert_bisenet(state: dict[str, Any]) -> BiSeNet:
    what = "BiSeNet face-parsing checkpoint"
    if "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    state = strip_prefix({k: v for k, v in state.items() if torch.is_tensor(v)}, "module.")
    # Older CoinCheung BiSeNet files may carry the unused ImageNet fc of the trunk; it has no role here.
    state = {k: v for k, v in state.items() if not k.startswith("cp.resnet.fc.")}
    for key in ("conv_out.conv_out.weight", "cp.resnet.conv1.weight", "ffm.convblk.conv.weight"):
        if key not in state:
            raise ConversionError(f"{what}: missing {key}")
    layers, chans = [], []
    for stage in range(1, 5):
        n = 0
        while f"cp.resnet.layer{stage}.{n}.conv1.weight" in state:
            n += 1
        if n == 0:
            raise ConversionError(f"{what}: no cp.resnet.layer{stage}.0.conv1.weight")
        layers.append(n)
        chans.append(int(state[f"cp.resnet.layer{stage}.0.conv1.weight"].shape[0]))
    model = BiSeNet(
        n_classes=int(state["conv_out.conv_out.weight"].shape[0]),
        trunk_layers=None if layers == [2, 2, 2, 2] else layers,
        trunk_channels=None if chans == [64, 128, 256, 512] else chans,
        context_channels=int(state["cp.conv_avg.conv.weight"].shape[0]) if "cp.conv_avg.conv.weight" in state else 128,
        fuse_channels=int(state["ffm.convblk.conv.weight"].shape[0]),
        aux_channels=int(state["conv_out16.conv.conv.weight"].shape[0]) if "conv_out16.conv.conv.weight" in state else 64,
    )
    return check_and_load(model, fill_bn_counters(state, model), what)
