"""Discriminators: pix2pixHD multi-scale PatchGAN and GFPGAN's facial-component (ROI) discriminator.

* :class:`MultiscaleDiscriminator` / :class:`NLayerDiscriminator`: Wang et al., "High-Resolution Image
  Synthesis and Semantic Manipulation with Conditional GANs" (pix2pixHD, CVPR 2018), in the layout of
  NVIDIA/pix2pixHD ``models/networks.py`` (also used by the FaceShifter port): ``num_D`` identical
  PatchGANs on the image downsampled 1x, 2x, 4x, ... by a 3x3 average pool. The ``personal`` method
  uses it as the "m multi-scale discriminators with hinge loss" of Cao et al.; the loss is the
  caller's. Converter ``pix2pixhd-msd``.
* :class:`FacialComponentDiscriminator`: the left-eye / right-eye / mouth discriminators of GFPGAN
  (Wang et al., CVPR 2021; ``gfpganv1_arch.py``), used by ``ideudemon``'s facial component loss
  (IDEudemon eq. 7): logits plus intermediate features for the Gram-matrix style term
  (:func:`gram_matrix`). :func:`crop_rois` cuts the component patches without torchvision.
  Converter ``gfpgan-component-d``.

Images are float NCHW in [-1, 1].
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from zoo.convert import ConversionError, check_and_load, register_converter
from zoo.hub import HubModule
from zoo.nn.stylegan2_discriminator import ConvLayer

__all__ = [
    "NLayerDiscriminator",
    "MultiscaleDiscriminator",
    "patch_output_size",
    "FacialComponentDiscriminator",
    "gram_matrix",
    "crop_rois",
    "convert_pix2pixhd_msd",
    "convert_gfpgan_component_d",
]

NORMS = ("instance", "batch", "none")


def _norm_layer(norm: str, channels: int) -> nn.Module:
    if norm == "instance":
        return nn.InstanceNorm2d(channels, affine=False)  # pix2pixHD get_norm_layer('instance')
    if norm == "batch":
        return nn.BatchNorm2d(channels, affine=True)
    if norm == "none":
        return nn.Identity()  # same module indices (and state-dict keys) as 'instance'
    raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")


def _patchgan_stages(input_nc: int, ndf: int, n_layers: int, norm: str, use_sigmoid: bool) -> list[list[nn.Module]]:
    """The n_layers + 2 stages of a pix2pixHD PatchGAN (4x4 convs, padding 2, LeakyReLU 0.2).

    Stage 0: conv/2 (no norm); stages 1..n_layers-1: conv/2 + norm; stage n_layers: conv/1 + norm;
    last stage: conv/1 to 1 channel (+ sigmoid). Channels double from ``ndf`` up to 512.
    """
    kw, pad = 4, 2
    stages = [[nn.Conv2d(input_nc, ndf, kw, 2, pad), nn.LeakyReLU(0.2)]]
    nf = ndf
    for _ in range(1, n_layers):
        nf_prev, nf = nf, min(nf * 2, 512)
        stages.append([nn.Conv2d(nf_prev, nf, kw, 2, pad), _norm_layer(norm, nf), nn.LeakyReLU(0.2)])
    nf_prev, nf = nf, min(nf * 2, 512)
    stages.append([nn.Conv2d(nf_prev, nf, kw, 1, pad), _norm_layer(norm, nf), nn.LeakyReLU(0.2)])
    last: list[nn.Module] = [nn.Conv2d(nf, 1, kw, 1, pad)]
    if use_sigmoid:
        last.append(nn.Sigmoid())
    stages.append(last)
    return stages


def patch_output_size(size: int, n_layers: int = 3) -> int:
    """Side of a PatchGAN's logit map for a ``size`` px input: n_layers convs k4/s2/p2, then two k4/s1/p2."""
    for _ in range(n_layers):
        size = size // 2 + 1
    return size + 2


class NLayerDiscriminator(HubModule):
    """pix2pixHD PatchGAN: ``x [N, input_nc, H, W] -> logits [N, 1, h, w]`` (:func:`patch_output_size`).

    With ``getIntermFeat`` the output is the list of the n_layers + 2 stage outputs (last = logits),
    the stages stored as ``model0`` .. ``model{n_layers+1}``; otherwise one ``model`` Sequential.
    """

    def __init__(self, input_nc: int = 3, ndf: int = 64, n_layers: int = 3, norm: str = "instance", use_sigmoid: bool = False, getIntermFeat: bool = False):  # noqa: N803  (pix2pixHD name)
        super().__init__()
        self.getIntermFeat = getIntermFeat
        stages = _patchgan_stages(input_nc, ndf, n_layers, norm, use_sigmoid)
        if getIntermFeat:
            self.stages = len(stages)
            for n, stage in enumerate(stages):
                setattr(self, f"model{n}", nn.Sequential(*stage))
        else:
            self.model = nn.Sequential(*[m for stage in stages for m in stage])

    def forward(self, x: torch.Tensor) -> torch.Tensor | list[torch.Tensor]:
        if not self.getIntermFeat:
            return self.model(x)
        feats = []
        for n in range(self.stages):
            x = getattr(self, f"model{n}")(x)
            feats.append(x)
        return feats


class MultiscaleDiscriminator(HubModule):
    """pix2pixHD multi-scale discriminator: ``num_D`` PatchGANs at 1x, 1/2x, 1/4x ... resolution.

    ``forward(x [N, input_nc, H, W]) -> list`` of ``num_D`` per-scale outputs, full resolution first:
    a logit map ``[N, 1, h_i, w_i]`` each, or (``getIntermFeat``) the list of stage features whose last
    entry is the logit map. (pix2pixHD wraps a single logit map in a one-element list; here it is
    returned bare.) As in pix2pixHD, scale i (0 = full resolution) is run by ``layer{num_D-1-i}`` /
    ``scale{num_D-1-i}_layer*``, and the image is downsampled by ``AvgPool2d(3, 2, padding=1,
    count_include_pad=False)`` between scales.
    """

    def __init__(
        self,
        input_nc: int = 3,
        ndf: int = 64,
        n_layers: int = 3,
        norm: str = "instance",
        use_sigmoid: bool = False,
        num_D: int = 3,
        getIntermFeat: bool = False,
    ):  # noqa: N803
        super().__init__()
        self.num_D, self.n_layers, self.getIntermFeat = num_D, n_layers, getIntermFeat
        for i in range(num_D):
            stages = _patchgan_stages(input_nc, ndf, n_layers, norm, use_sigmoid)
            if getIntermFeat:
                for j, stage in enumerate(stages):
                    setattr(self, f"scale{i}_layer{j}", nn.Sequential(*stage))
            else:
                setattr(self, f"layer{i}", nn.Sequential(*[m for stage in stages for m in stage]))
        self.downsample = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)

    def _single(self, idx: int, x: torch.Tensor) -> torch.Tensor | list[torch.Tensor]:
        if not self.getIntermFeat:
            return getattr(self, f"layer{idx}")(x)
        feats = []
        for j in range(self.n_layers + 2):
            x = getattr(self, f"scale{idx}_layer{j}")(x)
            feats.append(x)
        return feats

    def forward(self, x: torch.Tensor) -> list[torch.Tensor | list[torch.Tensor]]:
        out = []
        for i in range(self.num_D):
            out.append(self._single(self.num_D - 1 - i, x))
            if i != self.num_D - 1:
                x = self.downsample(x)
        return out


class FacialComponentDiscriminator(HubModule):
    """GFPGAN ROI discriminator (one each for left eye, right eye, mouth).

    VGG-style StyleGAN2 conv layers (equalized lr, FIR-blur before the two stride-2 convs):
    ``conv1`` c, ``conv2`` 2c /2, ``conv3`` 2c, ``conv4`` 4c /2, ``conv5`` 4c, ``final_conv`` 1
    (c = ``base_channels``, 64 in GFPGAN). ``forward(x [N, 3, h, w], return_feats=False) -> (logits
    [N, 1, h/4, w/4], feats)``; ``feats`` (the conv3 and conv5 outputs, for the Gram style loss) is
    ``None`` unless ``return_feats``. GFPGAN crops eyes at 80 px and the mouth at 120 px for 512 px faces.
    """

    def __init__(self, base_channels: int = 64):
        super().__init__()
        c = base_channels
        self.conv1 = ConvLayer(3, c, 3)
        self.conv2 = ConvLayer(c, 2 * c, 3, downsample=True)
        self.conv3 = ConvLayer(2 * c, 2 * c, 3)
        self.conv4 = ConvLayer(2 * c, 4 * c, 3, downsample=True)
        self.conv5 = ConvLayer(4 * c, 4 * c, 3)
        self.final_conv = ConvLayer(4 * c, 1, 3, bias=True, activate=False)

    def forward(self, x: torch.Tensor, return_feats: bool = False, **kwargs: Any) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        f1 = self.conv3(self.conv2(self.conv1(x)))
        f2 = self.conv5(self.conv4(f1))
        return self.final_conv(f2), ([f1, f2] if return_feats else None)


def gram_matrix(x: torch.Tensor) -> torch.Tensor:
    """Gram matrix of features ``[N, C, H, W] -> [N, C, C]``, divided by C*H*W (IDEudemon eq. 7, GFPGAN)."""
    n, c, h, w = x.shape
    f = x.reshape(n, c, h * w)
    return f.bmm(f.transpose(1, 2)) / (c * h * w)


def crop_rois(images: torch.Tensor, boxes: torch.Tensor, out_size: int | tuple[int, int]) -> torch.Tensor:
    """Bilinear crops of boxes, resized to ``out_size`` (a torchvision-free ROI align).

    ``images [N, C, H, W]``; ``boxes [K, 5]`` rows ``(batch_index, x1, y1, x2, y2)`` in pixels
    (pixel i's centre at coordinate i, as ``torchvision.ops.roi_align(aligned=False)``); returns
    ``[K, C, oh, ow]``. One bilinear sample at the centre of each output bin, i.e. roi_align with
    ``sampling_ratio=1``; differentiable w.r.t. ``images``.
    """
    oh, ow = (out_size, out_size) if isinstance(out_size, int) else out_size
    _, _, h, w = images.shape
    boxes = boxes.to(images.dtype)
    idx = boxes[:, 0].long()
    x1, y1, x2, y2 = boxes[:, 1:2], boxes[:, 2:3], boxes[:, 3:4], boxes[:, 4:5]
    tx = (torch.arange(ow, dtype=images.dtype, device=images.device) + 0.5) / ow
    ty = (torch.arange(oh, dtype=images.dtype, device=images.device) + 0.5) / oh
    px = x1 + (x2 - x1) * tx  # [K, ow] pixel coordinates of the bin centres
    py = y1 + (y2 - y1) * ty  # [K, oh]
    gx = (2 * px + 1) / w - 1  # grid_sample(align_corners=False): pixel centre i -> (2i + 1) / W - 1
    gy = (2 * py + 1) / h - 1
    grid = torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), dim=-1)  # [K, oh, ow, 2]
    return F.grid_sample(images[idx], grid, mode="bilinear", padding_mode="zeros", align_corners=False)


# ----------------------------------------------------------------------------------------------------
# converters


def _flat(state: dict[str, Any], what: str, entries: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    for key in entries:
        if key in state and isinstance(state[key], dict):
            state = state[key]
            break
    if not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConversionError(f"{what}: expected a flat state dict of tensors")
    return {k[7:] if k.startswith("module.") else k: v for k, v in state.items()}


@register_converter("pix2pixhd-msd", "NVIDIA/pix2pixHD MultiscaleDiscriminator state dict (latest_net_D.pth; also FaceShifter ports' D)")
def convert_pix2pixhd_msd(state: dict[str, Any]) -> MultiscaleDiscriminator:
    """Build :class:`MultiscaleDiscriminator` from a pix2pixHD discriminator state dict.

    ``num_D``, ``n_layers``, ``getIntermFeat``, ``ndf``, ``input_nc`` and ``norm`` ('batch' when
    BatchNorm weights are present, else 'instance') are read from the keys; ``use_sigmoid`` has no
    weights and is left False.
    """
    sd = _flat(state, "pix2pixhd-msd", ("state_dict",))
    inter = any(k.startswith("scale") for k in sd)
    if inter:
        scales = {int(k[5:].split("_")[0]) for k in sd if k.startswith("scale")}
        stages = {int(k.split("_layer")[1].split(".")[0]) for k in sd if k.startswith("scale0_layer")}
        first = sd.get("scale0_layer0.0.weight")
        n_layers = len(stages) - 2
        batch = any(k.startswith("scale0_layer1.1.") for k in sd)
    else:
        scales = {int(k[5:].split(".")[0]) for k in sd if k.startswith("layer")}
        first = sd.get("layer0.0.weight")
        convs = [k for k in sd if k.startswith("layer0.") and k.endswith(".weight") and sd[k].ndim == 4]
        n_layers = len(convs) - 2
        batch = any(k.endswith(".running_mean") for k in sd)
    if first is None or not scales or n_layers < 1:
        raise ConversionError("pix2pixhd-msd: no layer0.* / scale0_layer0.* conv; not a pix2pixHD MSD")
    model = MultiscaleDiscriminator(
        input_nc=int(first.shape[1]),
        ndf=int(first.shape[0]),
        n_layers=n_layers,
        norm="batch" if batch else "instance",
        num_D=max(scales) + 1,
        getIntermFeat=inter,
    )
    return check_and_load(model, sd, "pix2pixhd-msd")


@register_converter(
    "gfpgan-component-d",
    "TencentARC GFPGAN FacialComponentDiscriminator .pth (net_d_left_eye/right_eye/mouth; 'params')",
)
def convert_gfpgan_component_d(state: dict[str, Any]) -> FacialComponentDiscriminator:
    """Build :class:`FacialComponentDiscriminator` from a GFPGAN ROI-discriminator checkpoint.

    BasicSR's blur before the stride-2 convs keeps its FIR kernel outside the state dict; ours stores it
    as a buffer (``conv2.0.kernel``, ``conv4.0.kernel``), so those two constants come from our module.
    """
    sd = _flat(state, "gfpgan-component-d", ("params_ema", "params"))
    if "conv1.0.weight" not in sd:
        raise ConversionError("gfpgan-component-d: key 'conv1.0.weight' is missing; not a FacialComponentDiscriminator")
    model = FacialComponentDiscriminator(base_channels=int(sd["conv1.0.weight"].shape[0]))
    own = model.state_dict()
    for key in ("conv2.0.kernel", "conv4.0.kernel"):
        sd.setdefault(key, own[key])
    return check_and_load(model, sd, "gfpgan-component-d")
