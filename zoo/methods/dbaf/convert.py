"""Converters for the DBAF authors' checkpoint layout (mrzhu-cool/DBAF) into the zoo's modules.

``python -m zoo.methods.dbaf convert-official --e4e ... --decoder ... --w-disentanglement ...
--attr-block ... --id-mlp ... --out DIR`` writes a checkpoint folder that ``zoo.load("dbaf",
local_dir=DIR)`` reads.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

import torch

from ...convert import ConversionError, check_and_load, register_converter
from ...nn.identity_levels import feature_resolutions
from .method import DBAF
from .modules import CID, KRIA, MAAR

__all__ = ["convert_dbaf_cid", "convert_dbaf_maar", "convert_dbaf_kria", "convert_official_dbaf", "add_convert_command"]

_HEADS = 14  # the authors' ViT(heads=14, dim_head=64): not recoverable from shapes alone


def _tensors(state: Mapping[str, Any], what: str) -> dict[str, torch.Tensor]:
    if "state_dict" in state and isinstance(state["state_dict"], Mapping):
        state = state["state_dict"]
    out = {}
    for k, v in state.items():
        if not isinstance(v, torch.Tensor):
            raise ConversionError(f"{what}: non-tensor entry {k!r}")
        out[k[len("module.") :] if k.startswith("module.") else k] = v
    return out


def _need(sd: Mapping[str, torch.Tensor], key: str, what: str) -> torch.Tensor:
    if key not in sd:
        raise ConversionError(f"{what}: missing key {key!r}")
    return sd[key]


@register_converter("dbaf-cid", "DBAF CID from the authors' best_model_w_disentanglement.pth (DisentanglementId: linear_w, pos_embedding, layers.{0,1,2} ViT)")
def convert_dbaf_cid(state: Mapping[str, Any], heads: int = _HEADS) -> CID:
    """Official ``DisentanglementId`` state dict -> :class:`~.modules.CID` (three per-level
    transformers, ``attention="row"``: the official code's transformer runs over the batch axis, so at
    its test batch size 1 each W+ row only attends to itself; we reproduce that computation).

    Key map: ``linear_w`` -> ``proj``; ``pos_embedding`` [n, 1, d] -> ``pos`` [n, d];
    ``layers.k.transformer.layers.i.0.norm`` -> ``blocks.k.layers.i.attn_norm``, ``.0.fn.to_qkv`` ->
    ``.attn.qkv``, ``.0.fn.to_out.0`` -> ``.attn.out``, ``.1.norm`` -> ``.ff_norm``, ``.1.fn.net.0`` /
    ``.1.fn.net.3`` -> ``.ff.0`` / ``.ff.3``.
    """
    what = "DBAF CID (w_disentanglement)"
    sd = _tensors(state, what)
    d = _need(sd, "linear_w.weight", what).shape[0]
    pos = _need(sd, "pos_embedding", what)
    if pos.ndim != 3 or pos.shape[1] != 1 or pos.shape[2] != d:
        raise ConversionError(f"{what}: pos_embedding has shape {tuple(pos.shape)}, expected (n_latent, 1, {d})")
    n_latent = pos.shape[0]
    pat = re.compile(r"^layers\.(\d+)\.transformer\.layers\.(\d+)\.")
    blocks = {int(m.group(1)) for k in sd if (m := pat.match(k))}
    depth = 1 + max((int(m.group(2)) for k in sd if (m := pat.match(k))), default=-1)
    if blocks != {0, 1, 2} or depth < 1:
        raise ConversionError(f"{what}: expected transformers layers.0-2 with >= 1 layer, found blocks {sorted(blocks)}")
    inner = _need(sd, "layers.0.transformer.layers.0.0.fn.to_qkv.weight", what).shape[0] // 3
    mlp_dim = _need(sd, "layers.0.transformer.layers.0.1.fn.net.0.weight", what).shape[0]
    if inner % heads:
        raise ConversionError(f"{what}: attention width {inner} is not a multiple of {heads} heads")
    model = CID(
        n_latent=n_latent,
        style_dim=d,
        shared=False,
        depth=depth,
        heads=heads,
        dim_head=inner // heads,
        mlp_dim=mlp_dim,
        dropout=0.1,
        attention="row",
    )
    sub = {
        "0.norm": "attn_norm", "0.fn.to_qkv": "attn.qkv", "0.fn.to_out.0": "attn.out",
        "1.norm": "ff_norm", "1.fn.net.0": "ff.0", "1.fn.net.3": "ff.3",
    }  # fmt: skip
    ours: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        if key.startswith("linear_w."):
            ours["proj." + key[len("linear_w.") :]] = value
        elif key == "pos_embedding":
            ours["pos"] = value[:, 0, :]
        elif m := pat.match(key):
            rest = key[m.end() :]
            name, _, param = rest.rpartition(".")
            if name not in sub:
                raise ConversionError(f"{what}: unexpected key {key!r}")
            ours[f"blocks.{m.group(1)}.layers.{m.group(2)}.{sub[name]}.{param}"] = value
        else:
            raise ConversionError(f"{what}: unexpected key {key!r}")
    return check_and_load(model, ours, what)


@register_converter("dbaf-maar", "DBAF MAAR from the authors' best_model_attr_block.pth (AttrBlock: conv_c{3,2,1} + CBAM)")
def convert_dbaf_maar(state: Mapping[str, Any], resolution: int = 256) -> MAAR:
    """Official ``AttrBlock`` -> :class:`~.modules.MAAR`. c3 (16 px) is our coarse level 0, c2 medium,
    c1 fine (16 / 32 / 64 px for a ``resolution`` of 256). ``conv_cK`` -> ``proj.l``; ``cbam_cK.ChannelGate.mlp.{1,3}`` -> ``attention.l.channel_mlp.{0,2}``;
    ``cbam_cK.SpatialGate.spatial.{conv,bn}`` -> ``attention.l.spatial_{conv,bn}``."""
    what = "DBAF MAAR (attr_block)"
    sd = _tensors(state, what)
    level_of = {"c3": 0, "c2": 1, "c1": 2}
    in_ch, out_ch = [], []
    for c in ("c3", "c2", "c1"):
        w = _need(sd, f"conv_{c}.weight", what)
        out_ch.append(int(w.shape[0]))
        in_ch.append(int(w.shape[1]))
    hidden = _need(sd, "cbam_c3.ChannelGate.mlp.1.weight", what).shape[0]
    if out_ch[0] % hidden:
        raise ConversionError(f"{what}: channel-gate width {hidden} does not divide {out_ch[0]}")
    res = feature_resolutions(resolution)
    model = MAAR(in_channels=in_ch, out_channels=out_ch, resolutions=list(res), reduction=out_ch[0] // hidden)
    sub = {
        "ChannelGate.mlp.1": "channel_mlp.0", "ChannelGate.mlp.3": "channel_mlp.2",
        "SpatialGate.spatial.conv": "spatial_conv", "SpatialGate.spatial.bn": "spatial_bn",
    }  # fmt: skip
    ours: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        if m := re.match(r"^conv_(c[123])\.(weight|bias)$", key):
            ours[f"proj.{level_of[m.group(1)]}.{m.group(2)}"] = value
        elif m := re.match(r"^cbam_(c[123])\.(.+)\.([a-z_]+)$", key):
            if m.group(2) not in sub:
                raise ConversionError(f"{what}: unexpected key {key!r}")
            ours[f"attention.{level_of[m.group(1)]}.{sub[m.group(2)]}.{m.group(3)}"] = value
        else:
            raise ConversionError(f"{what}: unexpected key {key!r}")
    return check_and_load(model, ours, what)


@register_converter("dbaf-kria", "DBAF KRIA from the authors' best_model_id_mlp.pth (AnonymizationNet: mapper.{0,1,2} cMLPs)")
def convert_dbaf_kria(state: Mapping[str, Any], n_latent: int = 14) -> KRIA:
    """Official ``AnonymizationNet`` -> :class:`~.modules.KRIA`: ``mapper.k.model.i`` -> ``mlps.k.layers.i``.

    The official forward sends rows 0-3 / 4-7 / 8+ to mappers 0 / 1 / 2: our 4/4/6 split at 14 rows.
    """
    what = "DBAF KRIA (id_mlp)"
    sd = _tensors(state, what)
    pat = re.compile(r"^mapper\.(\d)\.model\.(\d+)\.(weight|bias)$")
    layers = 1 + max((int(m.group(2)) for k in sd if (m := pat.match(k))), default=-1)
    if layers < 5:
        raise ConversionError(f"{what}: expected mapper.k.model.0..7 keys, found {layers} layers")
    d = _need(sd, f"mapper.0.model.{layers - 1}.weight", what).shape[0]
    lr_mul = 0.01  # the authors' lr_mlp; not stored in the state dict (it rescales the stored weights)
    model = KRIA(n_latent=n_latent, style_dim=d, n_extra=layers - 4, lr_mul=lr_mul)
    ours: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        m = pat.match(key)
        if not m:
            raise ConversionError(f"{what}: unexpected key {key!r}")
        ours[f"mlps.{m.group(1)}.layers.{m.group(2)}.{m.group(3)}"] = value
    return check_and_load(model, ours, what)


def convert_official_dbaf(
    e4e: Mapping[str, Any],
    decoder: Mapping[str, Any],
    w_disentanglement: Mapping[str, Any],
    attr_block: Mapping[str, Any],
    id_mlp: Mapping[str, Any],
) -> DBAF:
    """The authors' five files (already loaded with :func:`zoo.convert.load_original`) -> a :class:`DBAF`.

    ``e4e``: ``e4e_ffhq_encode_256.pt``; ``decoder``: ``best_model_decoder_finetune.pth`` (a rosinality
    generator state dict, fine-tuned in both stages; their code loads it with this name).
    """
    from ...nn.psp import convert_e4e
    from ...nn.stylegan2 import convert_stylegan2

    encoder = convert_e4e(dict(e4e))
    generator = convert_stylegan2(dict(decoder))
    components = {
        "encoder": encoder,
        "generator": generator,
        "cid": convert_dbaf_cid(w_disentanglement),
        "maar": convert_dbaf_maar(attr_block, resolution=generator.size),
        "kria": convert_dbaf_kria(id_mlp, n_latent=generator.n_latent),
    }
    if components["cid"].n_latent != generator.n_latent:
        raise ConversionError(f"CID has {components['cid'].n_latent} rows, the generator {generator.n_latent}")
    config = {"method": "dbaf", "resolution": generator.size, "source": "converted from mrzhu-cool/DBAF release"}
    return DBAF(config, components)


def add_convert_command(sub) -> None:
    c = sub.add_parser("convert-official", help="convert the authors' released files into a zoo checkpoint folder")
    c.add_argument("--e4e", required=True, help="e4e_ffhq_encode_256.pt")
    c.add_argument("--decoder", required=True, help="best_model_decoder_finetune.pth")
    c.add_argument("--w-disentanglement", required=True, help="best_model_w_disentanglement.pth")
    c.add_argument("--attr-block", required=True, help="best_model_attr_block.pth")
    c.add_argument("--id-mlp", required=True, help="best_model_id_mlp.pth")
    c.add_argument("--out", required=True, help="output folder (load it with zoo.load('dbaf', local_dir=OUT))")
    c.set_defaults(func=_convert)


def _convert(args) -> None:
    from ...convert import load_original

    method = convert_official_dbaf(
        load_original(args.e4e),
        load_original(args.decoder),
        load_original(args.w_disentanglement),
        load_original(args.attr_block),
        load_original(args.id_mlp),
    )
    method.save_pretrained(Path(args.out))
    print(f"wrote {args.out}")
