"""A small reader of TensorFlow.js graph models (``model.json`` + binary weight shards), written with json and numpy.

A TFJS graph model is a JSON file whose ``modelTopology.node`` lists TensorFlow graph nodes (``name``, ``op``,
``input`` names, ``attr``) and whose ``weightsManifest`` says, in order, how the concatenated ``.bin`` shards
split into named tensors (``dtype``, ``shape``, and an optional ``quantization`` that stores them as float16 or
as uint8/uint16 with a scale and a minimum). This module only *reads* that: constants as float32/int32 numpy
arrays (de-quantized) and the wiring, so a converter can walk the graph. Nothing is executed.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["TFJSGraph", "TFJSNode", "read_tfjs_graph"]

_STORED_DTYPES = {
    "float32": np.dtype("<f4"),
    "int32": np.dtype("<i4"),
    "float16": np.dtype("<f2"),
    "uint8": np.dtype("u1"),
    "uint16": np.dtype("<u2"),
    "bool": np.dtype("u1"),
}


@dataclass
class TFJSNode:
    """One graph node: ``inputs`` are producer node names (the ``:N`` output index and ``^`` control inputs
    dropped); ``attrs`` decoded to plain Python values (strings, ints, floats, bools and lists of them)."""

    name: str
    op: str
    inputs: list[str]
    attrs: dict[str, Any]
    consumers: list[str] = field(default_factory=list)


def _decode_attr(value: dict[str, Any]) -> Any:
    if "s" in value:
        return base64.b64decode(value["s"]).decode()
    if "i" in value:
        return int(value["i"])
    if "f" in value:
        return float(value["f"])
    if "b" in value:
        return bool(value["b"])
    if "type" in value:
        return value["type"]
    if "list" in value:
        lst = value["list"]
        if "s" in lst:
            return [base64.b64decode(s).decode() for s in lst["s"]]
        if "i" in lst:
            return [int(i) for i in lst["i"]]
        if "f" in lst:
            return [float(f) for f in lst["f"]]
        return []
    return value


class TFJSGraph:
    """The nodes of one graph model and its de-quantized constants (``constants[name]``)."""

    def __init__(self, nodes: dict[str, TFJSNode], constants: dict[str, np.ndarray], source: Path, meta: dict[str, Any]):
        self.nodes = nodes
        self.constants = constants
        self.source = source
        self.meta = meta

    def of_op(self, op: str) -> list[TFJSNode]:
        """Nodes with this op, in file order."""
        return [n for n in self.nodes.values() if n.op == op]

    def const_input(self, node: TFJSNode, index: int) -> np.ndarray:
        """The constant feeding input ``index`` of ``node`` (a ValueError if that input is computed)."""
        name = node.inputs[index]
        if name not in self.constants:
            raise ValueError(f"input {index} of {node.name} ({node.op}) is {name!r}, not a constant")
        return self.constants[name]

    def consumer(self, node: TFJSNode, op: str | None = None) -> TFJSNode:
        """The single node reading ``node``'s output (of ``op`` if given)."""
        found = [self.nodes[c] for c in node.consumers if op is None or self.nodes[c].op == op]
        if len(found) != 1:
            raise ValueError(f"{node.name} has {len(found)} consumers{' of op ' + op if op else ''}, expected 1")
        return found[0]


def _read_weights(manifest: list[dict[str, Any]], folder: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for group in manifest:
        data = b"".join((folder / p).read_bytes() for p in group["paths"])
        offset = 0
        for spec in group["weights"]:
            shape = [int(s) for s in spec["shape"]]
            count = int(np.prod(shape)) if shape else 1
            quant = spec.get("quantization")
            stored = _STORED_DTYPES[quant["dtype"] if quant else spec["dtype"]]
            nbytes = count * stored.itemsize
            if offset + nbytes > len(data):
                raise ValueError(f"TFJS weights of {spec['name']!r} run past the end of the shards ({folder})")
            raw = np.frombuffer(data, dtype=stored, count=count, offset=offset)
            offset += nbytes
            if quant and quant["dtype"] == "float16":
                value = raw.astype(np.float32)
            elif quant:  # affine uint8/uint16: value = q * scale + min
                value = raw.astype(np.float32) * np.float32(quant["scale"]) + np.float32(quant["min"])
            else:
                value = raw.astype(np.float32 if spec["dtype"] == "float32" else np.int32)
            out[spec["name"]] = value.reshape(shape)
        if offset != len(data):
            raise ValueError(f"TFJS weight manifest covers {offset} of {len(data)} bytes in {group['paths']}")
    return out


def read_tfjs_graph(path: str | Path) -> TFJSGraph:
    """Read a TFJS graph model (``model.json``; its shards are looked up beside it)."""
    path = Path(path)
    spec = json.loads(path.read_text())
    if spec.get("format") != "graph-model":
        raise ValueError(f"{path} is not a TFJS graph model (format {spec.get('format')!r})")
    nodes: dict[str, TFJSNode] = {}
    for n in spec["modelTopology"]["node"]:
        inputs = [i.split(":")[0] for i in n.get("input", []) if not i.startswith("^")]
        attrs = {k: _decode_attr(v) for k, v in n.get("attr", {}).items()}
        nodes[n["name"]] = TFJSNode(n["name"], n["op"], inputs, attrs)
    for node in nodes.values():
        for i in node.inputs:
            if i not in nodes:
                raise ValueError(f"{path}: node {node.name} reads {i!r}, which is not in the graph")
            nodes[i].consumers.append(node.name)
    constants = _read_weights(spec["weightsManifest"], path.parent)
    missing = [n.name for n in nodes.values() if n.op == "Const" and n.name not in constants]
    if missing:
        raise ValueError(f"{path}: constants without weights: {missing[:5]}")
    meta = {k: spec.get(k) for k in ("format", "generatedBy", "convertedBy", "signature")}
    return TFJSGraph(nodes, constants, path, meta)
