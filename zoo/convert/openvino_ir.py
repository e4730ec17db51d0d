"""A small reader of OpenVINO IR (``.xml`` graph + ``.bin`` weights), written with xml.etree and numpy.

OpenVINO's IR v10/v11 is an XML list of ``<layer id type name>`` nodes joined by ``<edge from-layer to-layer>``
elements. Weights live in ``Const`` layers whose ``<data element_type shape offset size>`` point into the
``.bin`` file. This module only *reads* that: constants as numpy arrays and the graph's wiring (who feeds whom),
so a converter can find a constant by its name or by its place in the graph. Nothing is executed, and openvino
itself is not needed (it is a test extra, used only for the parity test).
"""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["IRLayer", "IRGraph", "read_ir", "ELEMENT_TYPES", "file_sha256"]

#: IR element types -> numpy dtypes (little-endian, as OpenVINO writes them)
ELEMENT_TYPES: dict[str, np.dtype] = {
    "f32": np.dtype("<f4"),
    "f16": np.dtype("<f2"),
    "f64": np.dtype("<f8"),
    "i64": np.dtype("<i8"),
    "i32": np.dtype("<i4"),
    "i8": np.dtype("i1"),
    "u8": np.dtype("u1"),
}


@dataclass
class IRLayer:
    """One node: ``inputs`` are the producing layer ids in port order; ``attrs`` the ``<data>`` attributes."""

    id: str
    name: str
    type: str
    attrs: dict[str, str]
    inputs: list[str] = field(default_factory=list)
    consumers: list[str] = field(default_factory=list)


class IRGraph:
    """The layers of one IR file plus lazy access to its constants."""

    def __init__(self, layers: dict[str, IRLayer], weights: bytes, source: Path):
        self.layers = layers
        self._weights = weights
        self.source = source
        self._by_name: dict[str, list[str]] = {}
        for lid, layer in layers.items():
            self._by_name.setdefault(layer.name, []).append(lid)

    def constant(self, layer_id: str) -> np.ndarray:
        """The value of a ``Const`` layer (a fresh array, shaped as the IR says)."""
        layer = self.layers[layer_id]
        if layer.type != "Const":
            raise ValueError(f"IR layer {layer_id} ({layer.name}) is a {layer.type}, not a Const")
        etype = layer.attrs.get("element_type", "")
        if etype not in ELEMENT_TYPES:
            raise ValueError(f"IR constant {layer.name}: unsupported element type {etype!r}")
        dtype = ELEMENT_TYPES[etype]
        offset, size = int(layer.attrs["offset"]), int(layer.attrs["size"])
        shape_text = layer.attrs.get("shape", "").strip()
        shape = tuple(int(s) for s in shape_text.split(",")) if shape_text else ()
        if offset + size > len(self._weights) or size != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"IR constant {layer.name}: offset {offset} + size {size} does not fit shape {shape} {etype} in {len(self._weights)} bytes")
        return np.frombuffer(self._weights, dtype=dtype, count=size // dtype.itemsize, offset=offset).reshape(shape).copy()

    def named_constant(self, name: str) -> np.ndarray:
        """The ``Const`` layer called ``name`` (it must be unique)."""
        return self.constant(self.by_name(name))

    def by_name(self, name: str) -> str:
        ids = self._by_name.get(name, [])
        if len(ids) != 1:
            raise KeyError(f"IR {self.source.name}: {len(ids)} layers named {name!r}")
        return ids[0]

    def of_type(self, layer_type: str) -> list[str]:
        """Layer ids of one type, in the file's (topological) order."""
        return [lid for lid, layer in self.layers.items() if layer.type == layer_type]

    def consumer(self, layer_id: str, layer_type: str) -> str:
        """The one consumer of ``layer_id`` that has type ``layer_type``."""
        found = [c for c in self.layers[layer_id].consumers if self.layers[c].type == layer_type]
        if len(found) != 1:
            raise KeyError(f"IR {self.source.name}: {self.layers[layer_id].name} has {len(found)} {layer_type} consumers")
        return found[0]

    def const_input(self, layer_id: str) -> str | None:
        """The ``Const`` input of a layer that has exactly one (None when it has none)."""
        consts = [i for i in self.layers[layer_id].inputs if self.layers[i].type == "Const"]
        if len(consts) > 1:
            raise KeyError(f"IR {self.source.name}: {self.layers[layer_id].name} has {len(consts)} constant inputs")
        return consts[0] if consts else None


def read_ir(xml_path: str | Path, bin_path: str | Path | None = None) -> IRGraph:
    """Parse ``xml_path`` and its weights (``bin_path``, default: the same name with ``.bin``)."""
    xml_path = Path(xml_path)
    bin_path = Path(bin_path) if bin_path is not None else xml_path.with_suffix(".bin")
    root = ET.parse(xml_path).getroot()
    if root.tag != "net":
        raise ValueError(f"{xml_path} is not an OpenVINO IR file (root <{root.tag}>)")
    layers: dict[str, IRLayer] = {}
    for node in root.iter("layer"):
        data = node.find("data")
        layers[node.get("id", "")] = IRLayer(
            id=node.get("id", ""), name=node.get("name", ""), type=node.get("type", ""), attrs=dict(data.attrib) if data is not None else {}
        )
    ports: dict[str, list[tuple[int, str]]] = {}
    edges = root.find("edges")
    for edge in edges if edges is not None else []:
        src, dst = edge.get("from-layer", ""), edge.get("to-layer", "")
        ports.setdefault(dst, []).append((int(edge.get("to-port", "0")), src))
        layers[src].consumers.append(dst)
    for dst, items in ports.items():
        layers[dst].inputs = [src for _, src in sorted(items)]
    return IRGraph(layers, bin_path.read_bytes(), xml_path)


def file_sha256(*paths: str | Path) -> str:
    """One hex digest over the bytes of ``paths`` in order (identifies converted weights' source)."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()
