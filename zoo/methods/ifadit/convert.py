"""Converters for the official iFADIT checkpoint (lixionga/ProFace, FacePrivacy/iFADIT).

``python -m zoo.methods.ifadit convert-official --sif ... --mapper ... --icl ... --attr ... --stylegan ...
--arcface ... --out DIR`` assembles a full method folder.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from ...convert import ConversionError, check_and_load, register_converter
from ...nn.flows import SecureIdentityFlow
from .method import IFADIT
from .modules import ICL, SIF, LatentMapper


def _flat_tensors(state: Mapping[str, Any], what: str) -> dict[str, torch.Tensor]:
    if "state_dict" in state and isinstance(state["state_dict"], Mapping):
        state = state["state_dict"]
    sd = {k[7:] if k.startswith("module.") else k: v for k, v in state.items()}
    if not sd or not all(torch.is_tensor(v) for v in sd.values()):
        raise ConversionError(f"{what}: expected a flat state dict of tensors")
    return sd


def _load_named_or_ordered(model: nn.Module, sd: dict[str, torch.Tensor], what: str) -> nn.Module:
    """Load by name; when the names differ, fall back to the official loader's rule
    (``utils.loading_pretrianed``: the i-th saved tensor goes to the i-th model tensor, shapes must match)."""
    ours = model.state_dict()
    if set(ours) == set(sd):
        return check_and_load(model, sd, what)
    if len(ours) != len(sd):
        raise ConversionError(f"{what}: {len(sd)} tensors with unknown names, the model has {len(ours)}")
    mapped = {}
    for (k, v), (k_src, v_src) in zip(ours.items(), sd.items()):
        if tuple(v.shape) != tuple(v_src.shape):
            raise ConversionError(f"{what}: tensor {k_src!r} {tuple(v_src.shape)} does not fit {k!r} {tuple(v.shape)}")
        mapped[k] = v_src
    return check_and_load(model, mapped, what)


def _linear_chain(sd: Mapping[str, torch.Tensor], prefix: str, what: str) -> list[tuple[int, int]]:
    """(in, out) of the Linear layers ``prefix{0,2,4,...}.weight`` in order."""
    dims = []
    i = 0
    while f"{prefix}{i}.weight" in sd:
        w = sd[f"{prefix}{i}.weight"]
        if w.ndim != 2:
            raise ConversionError(f"{what}: {prefix}{i}.weight is not a Linear weight")
        dims.append((int(w.shape[1]), int(w.shape[0])))
        i += 2
    if not dims:
        raise ConversionError(f"{what}: no '{prefix}0.weight' key")
    return dims


@register_converter("ifadit-sif", "iFADIT official id_transformer (FrEIA SequenceINN of AllInOneBlocks, G_net_*.pth)")
def convert_ifadit_sif(state: Mapping[str, Any]) -> SIF:
    """Official ``bulid_models()`` INN -> :class:`SecureIdentityFlow` with ``block="allinone"``.

    Keys ``module_list.{i}.{global_scale, global_offset, w_perm, w_perm_inv, subnet.{0,2,4,6,8}.*}``
    become ``blocks.{i}.*``; dim, key_dim, block count and subnet widths come from the shapes.
    FrEIA's ``affine_clamping`` (2.0, not saved in the file) is the official default.
    """
    what = "iFADIT SIF checkpoint"
    sd = _flat_tensors(state, what)
    if not any(k.startswith("module_list.") for k in sd):
        raise ConversionError(f"{what}: no 'module_list.*' keys (FrEIA SequenceINN)")
    sd = {"blocks." + k[len("module_list.") :]: v for k, v in sd.items() if k.startswith("module_list.")}
    n_blocks = 0
    while f"blocks.{n_blocks}.global_scale" in sd:
        n_blocks += 1
    if n_blocks == 0:
        raise ConversionError(f"{what}: no 'module_list.0.global_scale' key")
    dim = int(sd["blocks.0.global_scale"].shape[-1])
    chain = _linear_chain(sd, "blocks.0.subnet.", what)
    key_dim = chain[0][0] - (dim - dim // 2)
    if key_dim <= 0 or chain[-1][1] != 2 * (dim // 2):
        raise ConversionError(f"{what}: subnet {chain} does not fit a {dim}-d identity")
    flow = SecureIdentityFlow(dim=dim, key_dim=key_dim, n_blocks=n_blocks, hidden=[o for _, o in chain[:-1]], block="allinone", clamp=2.0)
    return check_and_load(flow, sd, what)


@register_converter("ifadit-mapper", "iFADIT official mapping network M (LatentMapper, mlp_best.pth), 512-d identity")
def convert_ifadit_mapper(state: Mapping[str, Any], id_dim: int = 512) -> LatentMapper:
    """Official ``LatentMapper`` (``model.0`` Linear(1024, 512), ``model.2`` Linear(512, 512)) -> ours.

    The input is [identity, attribute row]; the identity width (512 with IR-SE50) is not in the file.
    """
    what = "iFADIT mapper checkpoint"
    sd = _flat_tensors(state, what)
    ordered = list(sd.values())
    chain = _linear_chain(sd, "model.", what) if "model.0.weight" in sd else [(int(w.shape[1]), int(w.shape[0])) for w in ordered[0::2]]
    style_dim = chain[-1][1]
    model = LatentMapper(id_dim=chain[0][0] - style_dim, style_dim=style_dim, hidden=[o for _, o in chain[:-1]])
    if model.id_dim != id_dim:
        raise ConversionError(f"{what}: input width {chain[0][0]} is not {id_dim} (identity) + {style_dim} (attributes)")
    return _load_named_or_ordered(model, sd, what)


@register_converter("ifadit-icl", "iFADIT official identity compensation layer (FusionMapper10, fuse_mlp_*.pth)")
def convert_ifadit_icl(state: Mapping[str, Any]) -> ICL:
    """Official ``FusionMapper10`` (512 -> 1024 -> 2048 -> 1024 -> 512, ``model.{0,2,4,6}``) -> ours."""
    what = "iFADIT ICL checkpoint"
    sd = _flat_tensors(state, what)
    chain = _linear_chain(sd, "model.", what) if "model.0.weight" in sd else [(int(w.shape[1]), int(w.shape[0])) for w in list(sd.values())[0::2]]
    if chain[0][0] != chain[-1][1]:
        raise ConversionError(f"{what}: maps {chain[0][0]} -> {chain[-1][1]}, expected dim -> dim")
    model = ICL(dim=chain[0][0], hidden=[o for _, o in chain[:-1]])
    return _load_named_or_ordered(model, sd, what)


def official_config(resolution: int = 256) -> dict[str, Any]:
    """The method config matching the official inference code (test/test.py)."""
    return {
        "method": "ifadit",
        "resolution": resolution,
        # test.py: passwords = (torch.rand(512) + 1) / 2, i.e. uniform in [0.5, 1), then generator.style
        "key": {"low": 0.5, "high": 1.0},
        # test.py feeds the pSp attribute encoder images in [0, 1] (no latent_avg: start_from_latent_avg False)
        "attr_input": "unit",
        "refine": {"enabled": True, "sigma": 0.03, "classes": "face"},
        "source": "converted from lixionga/ProFace FacePrivacy/iFADIT (official checkpoint)",
    }


def assemble_official(paths: Mapping[str, str], out: str | Path, resolution: int = 256) -> Path:
    """Build a full ``ifadit`` method folder from the official files.

    ``paths``: ``sif`` (G_net_*.pth), ``mapper`` (mlp_best.pth), ``icl`` (fuse_mlp_*.pth), ``attr``
    (attr_best.pth, pSp ``encoder.*``), ``stylegan`` (550000.pt, rosinality ``g_ema``), ``arcface``
    (model_ir_se50.pth), optional ``parser`` (BiSeNet 79999_iter.pth). Every file is read with the
    weights-only loader.
    """
    from ...convert import get_converter, load_original
    from ...hub import save_components

    conv = lambda kind, key: get_converter(kind).fn(load_original(paths[key]))  # noqa: E731
    comps: dict[str, nn.Module] = {
        "identity_encoder": conv("arcface-irse50", "arcface"),
        "attr_encoder": conv("psp", "attr"),
        "mapper": conv("ifadit-mapper", "mapper"),
        "generator": conv("stylegan2", "stylegan"),
        "flow": conv("ifadit-sif", "sif"),
        "icl": conv("ifadit-icl", "icl"),
    }
    if paths.get("parser"):
        comps["face_parser"] = conv("bisenet", "parser")
    return save_components(out, IFADIT.name, comps, official_config(resolution))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m zoo.methods.ifadit", description="iFADIT utilities")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert-official", help="assemble a zoo checkpoint from the authors' released files")
    for name in ("sif", "mapper", "icl", "attr", "stylegan", "arcface"):
        c.add_argument(f"--{name}", required=True)
    c.add_argument("--parser")
    c.add_argument("--resolution", type=int, default=256)
    c.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if args.cmd == "convert-official":
        paths = {k: getattr(args, k) for k in ("sif", "mapper", "icl", "attr", "stylegan", "arcface", "parser")}
        print(assemble_official(paths, args.out, args.resolution))
