"""Converters from the original public checkpoint layouts into the zoo's safetensors layout.

Each backbone module registers a converter::

    @register_converter("stylegan2", "rosinality StyleGAN2 .pt (uses the 'g_ema' entry)")
    def convert_stylegan2(state: dict[str, Any]) -> HubModule:
        ...  # build our module, map every key, check every shape, load_state_dict(strict=True)

A converter receives the loaded original file (a dict; top-level containers such as ``{"g_ema": ...}``
are left as they are) and returns the built zoo module. It must be strict: an unmapped or missing key,
or a shape mismatch, raises ``ConversionError``.

Command line::

    python -m zoo.convert list
    python -m zoo.convert <kind> <original file> <out folder>

ONNX files give their initializers (read with the ``onnx`` package); OpenVINO IR (an ``.xml`` or a folder of them) gives
``{graph name: IRGraph}`` from our own reader (:mod:`zoo.convert.openvino_ir`); a TensorFlow.js graph model (``.json``
beside its ``.bin`` shards) gives ``{graph name: TFJSGraph}`` (:mod:`zoo.convert.tfjs_graph`). Original ``.pt/.pth`` files are read with ``torch.load(weights_only=True)``: the restricted
unpickler that only rebuilds tensors and plain containers, never arbitrary objects. ``.safetensors``
inputs are read with safetensors.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

__all__ = ["ConversionError", "register_converter", "get_converter", "list_converters", "load_original", "convert_file"]

# Modules whose import registers converters. Each backbone/method module with a converter is listed here.
CONVERTER_MODULES = [
    "zoo.nn.stylegan2",
    "zoo.nn.stylegan2_discriminator",
    "zoo.nn.psp",
    "zoo.nn.arcface",
    "zoo.nn.bisenet",
    "zoo.nn.aad",
    "zoo.nn.discriminators",
    "zoo.nn.gfpgan",
    "zoo.nn.lpips",
    "zoo.methods.dbaf",
    "zoo.methods.hford",
    "zoo.methods.ifadit",
    "zoo.methods.personal",
    "zoo.methods.ideudemon",
    "zoo.nn.headnerf",
    "zoo.nn.sface",
    "zoo.nn.dcgan",
    "zoo.nn.mobilestylegan",
    "zoo.nn.faceres",
]


class ConversionError(ValueError):
    """An original checkpoint does not match the expected layout."""


@dataclass(frozen=True)
class Converter:
    kind: str
    description: str
    fn: Callable[[dict[str, Any]], torch.nn.Module]


_CONVERTERS: dict[str, Converter] = {}


def register_converter(kind: str, description: str) -> Callable:
    def deco(fn: Callable[[dict[str, Any]], torch.nn.Module]) -> Callable:
        _CONVERTERS[kind] = Converter(kind, description, fn)
        return fn

    return deco


def _import_all() -> None:
    for name in CONVERTER_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:  # a real missing dependency inside an existing module
                raise


def list_converters() -> dict[str, str]:
    _import_all()
    return {k: c.description for k, c in sorted(_CONVERTERS.items())}


def get_converter(kind: str) -> Converter:
    _import_all()
    if kind not in _CONVERTERS:
        raise KeyError(f"unknown converter {kind!r}; known: {', '.join(sorted(_CONVERTERS))}")
    return _CONVERTERS[kind]


def load_original(path: str | Path) -> dict[str, Any]:
    """Load an original checkpoint without executing code (weights_only unpickler or safetensors)."""
    path = Path(path)
    if path.suffix == ".xml" or (path.is_dir() and any(path.glob("*.xml"))):
        # OpenVINO IR: {graph name: IRGraph} for one .xml or every .xml in a folder (zoo.convert.openvino_ir)
        from .openvino_ir import read_ir

        files = [path] if path.suffix == ".xml" else sorted(path.glob("*.xml"))
        return {f.stem: read_ir(f) for f in files}
    if path.suffix == ".json":
        # TensorFlow.js graph model: {graph name: TFJSGraph} from our own reader (zoo.convert.tfjs_graph)
        from .tfjs_graph import read_tfjs_graph

        return {path.stem: read_tfjs_graph(path)}
    if path.suffix == ".onnx":
        # ONNX graphs: their initializers (weights, scales, shapes), read by the ``onnx`` package's protobuf
        # parser; the graph itself is never run here.
        import onnx
        from onnx import numpy_helper

        graph = onnx.load(str(path)).graph
        return {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in graph.initializer}
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    # rosinality/pSp training checkpoints carry an argparse.Namespace of their options: a plain data
    # object, allow-listed for the restricted unpickler (nothing else is).
    import argparse

    with torch.serialization.safe_globals([argparse.Namespace]):
        return torch.load(str(path), map_location="cpu", weights_only=True)


def check_and_load(module: torch.nn.Module, state: dict[str, torch.Tensor], what: str) -> torch.nn.Module:
    """Strictly load ``state`` into ``module``, with a readable ``ConversionError`` on any mismatch."""
    ours = module.state_dict()
    missing = sorted(set(ours) - set(state))
    unexpected = sorted(set(state) - set(ours))
    bad_shape = sorted(k for k in set(ours) & set(state) if tuple(ours[k].shape) != tuple(state[k].shape))
    if missing or unexpected or bad_shape:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} keys (e.g. {missing[:3]})")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} keys (e.g. {unexpected[:3]})")
        if bad_shape:
            k = bad_shape[0]
            parts.append(f"{len(bad_shape)} shape mismatches (e.g. {k}: ours {tuple(ours[k].shape)} vs {tuple(state[k].shape)})")
        raise ConversionError(f"{what}: " + "; ".join(parts))
    module.load_state_dict(state, strict=True)
    return module


def convert_file(kind: str, src: str | Path, out: str | Path) -> Path:
    """Convert ``src`` (original layout) with converter ``kind`` and ``save_pretrained`` it to ``out``."""
    module = get_converter(kind).fn(load_original(src))
    out = Path(out)
    module.save_pretrained(out)
    return out
