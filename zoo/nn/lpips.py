"""LPIPS (Zhang et al., "The Unreasonable Effectiveness of Deep Features as a Perceptual Metric", CVPR 2018).

A torchvision-free re-implementation of the ``lpips`` package (v0.1)::

    d(x0, x1) = sum_l  mean_{h,w}  || w_l * (f_l(x0) / |f_l(x0)| - f_l(x1) / |f_l(x1)|) ||^2      (paper Eq. 1)

with f_l the ReLU outputs of an ImageNet trunk (AlexNet relu1..relu5, or VGG16 relu1_2, relu2_2,
relu3_3, relu4_3, relu5_3), unit-normalised over channels, and w_l the learned non-negative 1x1
"lin" layers. Inputs in [-1,1] pass the package's ScalingLayer first.

Key names: ``net.features.{N}.{weight,bias}`` (torchvision layout, see :mod:`zoo.nn.vgg`) and
``lin{0..4}.model.1.weight`` [1, C_l, 1, 1] (as the lpips package publishes ``weights/v0.1/*.pth``).

Weights: no ImageNet trunk is available offline, so there is no silent fallback. :func:`load_lpips`
reads a converted checkpoint from a Hub repo (or local folder) and raises :class:`LPIPSUnavailable`
when it cannot; randomly initialised LPIPS modules are for tests only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from zoo.convert import ConversionError, check_and_load, register_converter
from zoo.hub import HubModule, WeightsNotFoundError, resolve_checkpoint
from zoo.nn.vgg import AlexNetTrunk, VGGTrunk, torchvision_features

__all__ = ["LPIPS", "LPIPSUnavailable", "load_lpips", "LPIPS_REPO", "normalize_tensor", "convert_lpips"]

# Hub repo holding our converted LPIPS checkpoints, one subfolder per trunk ("alex/", "vgg/"), each
# made with ``python -m zoo.convert lpips <merged .pth> <out>`` from torchvision's ImageNet trunk and
# the lpips package's v0.1 lin weights.
LPIPS_REPO = "face-deid-zoo/lpips"

# Trunk taps and their channel counts (lpips ``chns``).
_TAPS = {
    "alex": (["relu1", "relu2", "relu3", "relu4", "relu5"], [64, 192, 384, 256, 256]),
    "vgg": (["relu1_2", "relu2_2", "relu3_3", "relu4_3", "relu5_3"], [64, 128, 256, 512, 512]),
}


class LPIPSUnavailable(WeightsNotFoundError):
    """LPIPS weights cannot be found locally and cannot be downloaded (e.g. offline)."""


def normalize_tensor(x: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
    """Unit-normalise over channels: x / (||x||_2 over dim 1 + eps). [N,C,H,W] -> [N,C,H,W]."""
    return x / (torch.sqrt(torch.sum(x**2, dim=1, keepdim=True)) + eps)


class ScalingLayer(nn.Module):
    """(x - shift) / scale with the lpips package's constants (maps [-1,1] to ImageNet statistics)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("shift", torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("scale", torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.shift) / self.scale


class NetLinLayer(nn.Module):
    """``model``: Dropout, Conv1x1(C -> 1, bias=False) -- keys ``model.1.weight`` [1, C, 1, 1]."""

    def __init__(self, chn_in: int, chn_out: int = 1, use_dropout: bool = True):
        super().__init__()
        layers: list[nn.Module] = [nn.Dropout()] if use_dropout else [nn.Identity()]
        layers.append(nn.Conv2d(chn_in, chn_out, 1, stride=1, padding=0, bias=False))
        self.model = nn.Sequential(*layers)
        with torch.no_grad():  # published lin weights are >= 0 (clamped in training); keep that before loading
            self.model[1].weight.abs_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class LPIPS(HubModule):
    """LPIPS distance. forward(x0, x1): [N,3,H,W] RGB in [-1,1] -> [N,1,1,1] (>= 0; 0 for x0 == x1).

    ``net``: ``"alex"`` (the default of the lpips package and of DBAF) or ``"vgg"``. ``width`` scales
    the trunk channels (tiny test configs only; published weights need 1.0). ``spatial=True`` returns
    the per-pixel map [N,1,H,W] instead of its mean. All parameters are frozen.
    """

    def __init__(self, net: str = "alex", width: float = 1.0, spatial: bool = False, use_dropout: bool = True):
        super().__init__()
        net = "vgg" if net in ("vgg", "vgg16") else net
        if net not in _TAPS:
            raise ValueError(f"net should be 'alex' or 'vgg', got {net!r}")
        self.net_type = net
        self.spatial = spatial
        self.taps, chns = _TAPS[net]
        self.chns = [max(1, int(round(c * width))) for c in chns]
        self.scaling_layer = ScalingLayer()
        self.net: nn.Module = AlexNetTrunk(width=width) if net == "alex" else VGGTrunk(depth=16, width=width)
        for i, c in enumerate(self.chns):
            setattr(self, f"lin{i}", NetLinLayer(c, use_dropout=use_dropout))
        self.requires_grad_(False)
        self.eval()

    @property
    def lins(self) -> list[NetLinLayer]:
        return [getattr(self, f"lin{i}") for i in range(len(self.chns))]

    def forward(
        self, in0: torch.Tensor, in1: torch.Tensor, normalize: bool = False, per_layer: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """LPIPS(in0, in1). ``normalize=True`` takes [0,1] inputs instead of [-1,1]."""
        if normalize:
            in0, in1 = 2 * in0 - 1, 2 * in1 - 1
        f0 = self.net.extract(self.scaling_layer(in0), self.taps)
        f1 = self.net.extract(self.scaling_layer(in1), self.taps)
        res = []
        for name, lin in zip(self.taps, self.lins):
            diff = (normalize_tensor(f0[name]) - normalize_tensor(f1[name])) ** 2
            d = lin.model(diff)
            if self.spatial:
                d = nn.functional.interpolate(d, size=in0.shape[-2:], mode="bilinear", align_corners=False)
            else:
                d = d.mean(dim=(2, 3), keepdim=True)
            res.append(d)
        val = torch.stack(res, dim=0).sum(dim=0)
        return (val, res) if per_layer else val


def load_lpips(net: str = "alex", repo_id: str = LPIPS_REPO, revision: str | None = None) -> LPIPS:
    """Load converted LPIPS weights from a Hub repo (subfolder ``net``) or a local folder.

    Raises :class:`LPIPSUnavailable` (a :class:`zoo.hub.WeightsNotFoundError`) when the weights are not
    available -- e.g. ``HF_HUB_OFFLINE=1`` and not cached -- instead of returning meaningless numbers.
    """
    net = "vgg" if net in ("vgg", "vgg16") else net
    how = (
        f"LPIPS-{net} needs ImageNet trunk + lin weights: convert them with `python -m zoo.convert lpips "
        f"<merged.pth> <dir>` (see zoo.nn.lpips.convert_lpips) and pass repo_id=<dir>"
    )
    try:
        folder = resolve_checkpoint(repo_id, revision=revision)
    except WeightsNotFoundError as err:
        raise LPIPSUnavailable(f"{err} {how}") from None
    sub = folder / net if (folder / net / "config.json").is_file() else folder
    if not (sub / "config.json").is_file():
        raise LPIPSUnavailable(f"{folder} has no LPIPS-{net} checkpoint ({net}/config.json). {how}")
    model = LPIPS.from_pretrained(str(sub))
    if model.net_type != net:
        raise LPIPSUnavailable(f"{sub} holds LPIPS-{model.net_type}, not LPIPS-{net}")
    return model


@register_converter(
    "lpips",
    "LPIPS: {'trunk': torchvision alexnet/vgg16 state dict, 'lin': lpips v0.1 lin weights[, 'net']} or one merged dict",
)
def convert_lpips(state: dict[str, Any]) -> LPIPS:
    """Build :class:`LPIPS` from published weights.

    Accepted inputs (all read with ``torch.load(weights_only=True)`` / safetensors):

    * ``{"trunk": <torchvision alexnet or vgg16 state dict>, "lin": <lpips weights/v0.1/{alex,vgg}.pth>,
      "net": "alex" | "vgg" (optional)}``;
    * one flat dict merging both (``features.*`` [+ ``classifier.*``, ignored] and ``lin{k}.model.1.weight``);
    * a full ``lpips.LPIPS`` state dict (``net.slice{k}.{N}.*`` + ``lin{k}.model.1.weight``).

    The trunk is recognised from ``features.0.weight`` (11x11 kernel: AlexNet, 3x3: VGG16).
    """
    what = "LPIPS weights"
    net = state.get("net") if isinstance(state.get("net"), str) else None
    if "trunk" in state or "lin" in state:
        if not isinstance(state.get("trunk"), dict) or not isinstance(state.get("lin"), dict):
            raise ConversionError(f"{what}: need both 'trunk' and 'lin' dicts")
        trunk_src: dict[str, Any] = state["trunk"]
        lin_src: dict[str, Any] = state["lin"]
    else:
        trunk_src = lin_src = state
    trunk: dict[str, torch.Tensor] = {}
    for k, v in trunk_src.items():
        if not torch.is_tensor(v):
            continue
        if k.startswith("net.slice"):  # lpips package layout: net.slice{s}.{N}.weight -> features.{N}.weight
            parts = k.split(".")
            trunk["features." + ".".join(parts[2:])] = v
        elif k.startswith("features."):
            trunk[k] = v
    if not trunk:
        raise ConversionError(f"{what}: no trunk weights (features.* or net.slice*.*)")
    trunk = torchvision_features(trunk, what)
    lin: dict[str, torch.Tensor] = {}
    for k, v in lin_src.items():
        if torch.is_tensor(v) and k.startswith("lin"):
            lin[k.replace(".model.0.", ".model.1.")] = v
    if not lin:
        raise ConversionError(f"{what}: no lin{{k}}.model.1.weight keys")
    first = trunk.get("features.0.weight")
    if first is None:
        raise ConversionError(f"{what}: no features.0.weight")
    guessed = "alex" if first.shape[-1] == 11 else "vgg"
    if net is not None and ("vgg" if net == "vgg16" else net) != guessed:
        raise ConversionError(f"{what}: 'net' says {net!r} but the trunk is {guessed!r}")
    model = LPIPS(net=guessed, width=first.shape[0] / 64)
    merged = {f"net.{k}": v for k, v in trunk.items()}
    merged.update(lin)
    return check_and_load(model, merged, what)
