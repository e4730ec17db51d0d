"""Pieces shared by HFORD (Chen et al.) and DBAF (Zhu et al.): one implementation each.

Both papers (same group) build on a frozen e4e encoder and a StyleGAN2 decoder:

* the W+ code C [N, n_latent, d] is split into coarse / medium / fine levels, rows 1-4 / 5-8 / 9-14
  at 256 px (RiDDLE's rule, HFORD Sec. III-C, DBAF Sec. III-C); :func:`level_sizes` scales that
  split proportionally for other generator sizes;
* a transformer over the latent rows of each level (HFORD's IDM, eq. 1-2; DBAF's CID, eq. 1-3)
  predicts the attribute code A; the identity code is the residual I = C - A (HFORD III-C, DBAF
  eq. 4) -> :class:`IdentityDisentangler`;
* a key/password P (one w per level, from StyleGAN's mapping network, as DBAF's official code samples
  it; HFORD uses the same cMLP design) edits I with one conditional MLP per level (HFORD's cMLPs,
  DBAF's KRIA, eq. 19-23) -> :class:`KeyedIdentityEditor`;
* channel + spatial attention over the e4e feature maps at 16/32/64 px (HFORD's ARM, eq. 3-5; DBAF's
  MAAR, eq. 6-8) gives maps injected into the generator -> :class:`AttributeRetention`.

The two papers describe the attention block identically (out = SA * CA * Conv(M), SA computed after
CA); we implement it once, as the authors' code does it (CBAM, Woo et al. 2018, see
:class:`ChannelSpatialAttention`).

:class:`StyleGANIdentityMethod` is the common :class:`~zoo.methods.base.NeuralMethod` base: it
wires the components, derives key latents from the zoo's :class:`~zoo.keys.KeyMaterial`, and runs
the anonymize / recover passes on aligned faces in [-1, 1]. The method subclasses add the paper's
losses (training protocol, ``training/PROTOCOL.md``).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Sequence

import torch
from torch import nn

from ..hub import HubModule
from ..keys import KeyMaterial
from ..nn.ops import EqualLinear
from .base import DeidMethod, NeuralMethod

__all__ = [
    "LEVELS",
    "level_sizes",
    "level_index",
    "feature_resolutions",
    "LatentTransformerLayer",
    "LatentTransformer",
    "IdentityDisentangler",
    "ChannelSpatialAttention",
    "AttributeRetention",
    "KeyedIdentityMLP",
    "KeyedIdentityEditor",
    "key_latents",
    "random_key_latents",
    "StyleGANIdentityMethod",
    "ReconstructionBaseline",
]

LEVELS = ("coarse", "medium", "fine")


# ------------------------------------------------------------------------------------------------
# W+ levels
# ------------------------------------------------------------------------------------------------


def level_sizes(n_latent: int) -> tuple[int, int, int]:
    """Rows per level (coarse, medium, fine): (4, 4, 6) for the 14 W+ rows of a 256 px StyleGAN2.

    RiDDLE's split 1-4 / 5-8 / 9-14 (HFORD III-C, DBAF III-C), scaled proportionally for other
    sizes: coarse = round(4/14 n), coarse + medium = round(8/14 n). 10 rows (64 px) -> (3, 3, 4),
    18 rows (1024 px) -> (5, 5, 8).
    """
    if n_latent < 3:
        raise ValueError(f"need at least 3 W+ rows to split into levels, got {n_latent}")
    coarse = max(1, round(n_latent * 4 / 14))
    medium = max(1, round(n_latent * 8 / 14) - coarse)
    fine = n_latent - coarse - medium
    if fine < 1:
        raise ValueError(f"cannot split {n_latent} rows into three levels")
    return coarse, medium, fine


def level_index(n_latent: int) -> list[int]:
    """Level (0 coarse, 1 medium, 2 fine) of every W+ row."""
    out: list[int] = []
    for lvl, n in enumerate(level_sizes(n_latent)):
        out += [lvl] * n
    return out


def feature_resolutions(resolution: int) -> tuple[int, int, int]:
    """Spatial sizes of the coarse / medium / fine feature maps: 16, 32, 64 at 256 px (R/16, R/8, R/4).

    These are e4e's c3 / c2 / c1 maps, and the generator resolutions the retention maps are
    injected at (HFORD III-B: "the feature map sizes of c, m, and f correspond to 16, 32, and 64").
    """
    return resolution // 16, resolution // 8, resolution // 4


# ------------------------------------------------------------------------------------------------
# IDM / CID: multi-head attention over the latent rows of one level
# ------------------------------------------------------------------------------------------------


class LatentMultiHeadAttention(nn.Module):
    """Multi-head self-attention (HFORD eq. 1-2, DBAF eq. 1-3). x [B, T, d] -> [B, T, d].

    ``qkv`` packs W^Q, W^K, W^V (h heads of ``dim_head`` each, no bias); ``out`` is W^O.
    head_i = softmax(Q_i K_i^T / sqrt(d_k)) V_i (eq. 2); MHA = Concat(head_1..h) W^O (eq. 3).
    """

    def __init__(self, dim: int, heads: int, dim_head: int, dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        self.dim_head = dim_head
        self.qkv = nn.Linear(dim, 3 * heads * dim_head, bias=False)
        self.out = nn.Linear(heads * dim_head, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.dim_head).permute(2, 0, 3, 1, 4)  # each [B, h, T, dk]
        attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dim_head), dim=-1)  # eq. (2)
        y = (self.dropout(attn) @ v).transpose(1, 2).reshape(b, t, self.heads * self.dim_head)
        return self.dropout(self.out(y))  # eq. (3): Concat(heads) W^O


class LatentTransformerLayer(nn.Module):
    """Pre-norm ViT layer (Dosovitskiy et al., HFORD's IDM backbone): x + MHA(LN x); x + FF(LN x)."""

    def __init__(self, dim: int, heads: int, dim_head: int, mlp_dim: int, dropout: float = 0.0):
        super().__init__()
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = LatentMultiHeadAttention(dim, heads, dim_head, dropout)
        self.ff_norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp_dim, dim), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.ff(self.ff_norm(x))


class LatentTransformer(nn.Module):
    """``depth`` :class:`LatentTransformerLayer` s after an embedding dropout. [B, T, d] -> [B, T, d]."""

    def __init__(self, dim: int, depth: int, heads: int, dim_head: int, mlp_dim: int, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(LatentTransformerLayer(dim, heads, dim_head, mlp_dim, dropout) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dropout(x)
        for layer in self.layers:
            x = layer(x)
        return x


class IdentityDisentangler(HubModule):
    """HFORD's IDM / DBAF's CID: W+ code C -> attribute code A (and identity I = C - A).

    C [N, n_latent, d] goes through a linear projection, gets a learned position embedding per row,
    and each level's rows (:func:`level_sizes`) go through a transformer (eq. 1-3) whose output is A.
    ``shared=True`` uses one transformer for all three levels (DBAF III-C: "a shared Multi-head
    Attention module"); ``False`` one per level (HFORD III-C: "the IDM of the corresponding scale";
    also the layout of DBAF's released code). ``attention``: ``"level"`` attends over the rows of a
    level (eq. 1: Q = C_c W^Q with C_c in R^{4 x d}); ``"row"`` lets every row attend only to itself,
    which is what the official DBAF code computes at its test batch size of 1 (its transformer runs
    over the batch axis), used for its converted checkpoint so that its outputs are reproduced.
    """

    def __init__(
        self,
        n_latent: int = 14,
        style_dim: int = 512,
        shared: bool = False,
        depth: int = 6,
        heads: int = 14,
        dim_head: int = 64,
        mlp_dim: int = 2048,
        dropout: float = 0.1,
        attention: str = "level",
    ):
        super().__init__()
        if attention not in ("level", "row"):
            raise ValueError(f"attention must be 'level' or 'row', got {attention!r}")
        self.n_latent = n_latent
        self.sizes = level_sizes(n_latent)
        self.shared = shared
        self.attention = attention
        self.proj = nn.Linear(style_dim, style_dim)
        self.pos = nn.Parameter(torch.randn(n_latent, style_dim))
        self.blocks = nn.ModuleList(LatentTransformer(style_dim, depth, heads, dim_head, mlp_dim, dropout) for _ in range(1 if shared else 3))

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes C [N, n_latent, d] -> attribute code A [N, n_latent, d]."""
        n, _, d = codes.shape
        h = self.proj(codes) + self.pos
        outs = []
        for lvl, part in enumerate(torch.split(h, list(self.sizes), dim=1)):
            block = self.blocks[0 if self.shared else lvl]
            if self.attention == "row":
                outs.append(block(part.reshape(-1, 1, d)).view(n, -1, d))
            else:
                outs.append(block(part))
        return torch.cat(outs, dim=1)

    def split(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(A, I) with I = C - A (HFORD III-C; DBAF eq. 4)."""
        attr = self(codes)
        return attr, codes - attr


# ------------------------------------------------------------------------------------------------
# ARM / MAAR: channel + spatial attention on the encoder's feature maps
# ------------------------------------------------------------------------------------------------


class ChannelSpatialAttention(nn.Module):
    """CA then SA on x = Conv(M): out = SA * CA * x (HFORD eq. 3-5; DBAF eq. 6-8). [N,C,H,W] -> same.

    CA (HFORD eq. 4, DBAF eq. 6): sigma(MLP(AvgPool(x)) + MLP(MaxPool(x))), pooling over space, one
    shared two-layer MLP with hidden C / ``reduction``. SA (HFORD eq. 3, DBAF eq. 7):
    sigma(BN(Conv7x7([max over channels, mean over channels]))). As in the authors' code (CBAM), SA
    looks at the CA-weighted features x * CA; the channel weights alone are constant over space, so
    SA on them (a literal reading of eq. 5/7) would carry no spatial information.
    """

    def __init__(self, channels: int, reduction: int = 16, kernel_size: int = 7):
        super().__init__()
        hidden = max(1, channels // reduction)
        self.channel_mlp = nn.Sequential(nn.Linear(channels, hidden), nn.ReLU(), nn.Linear(hidden, channels))
        self.spatial_conv = nn.Conv2d(2, 1, kernel_size, padding=kernel_size // 2, bias=False)
        self.spatial_bn = nn.BatchNorm2d(1, eps=1e-5, momentum=0.01)

    def channel_weights(self, x: torch.Tensor) -> torch.Tensor:
        """CA(x): [N, C, 1, 1] in (0, 1) (eq. 4 / eq. 6)."""
        avg = self.channel_mlp(x.mean(dim=(2, 3)))
        mx = self.channel_mlp(x.amax(dim=(2, 3)))
        return torch.sigmoid(avg + mx)[:, :, None, None]

    def spatial_weights(self, x: torch.Tensor) -> torch.Tensor:
        """SA(x): [N, 1, H, W] in (0, 1) (eq. 3 / eq. 7); pools over channels, concatenates [max, mean]."""
        pooled = torch.cat([x.amax(dim=1, keepdim=True), x.mean(dim=1, keepdim=True)], dim=1)
        return torch.sigmoid(self.spatial_bn(self.spatial_conv(pooled)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gated = x * self.channel_weights(x)
        return gated * self.spatial_weights(gated)  # eq. (5) / eq. (8)


class AttributeRetention(HubModule):
    """HFORD's ARM / DBAF's MAAR: e4e feature maps -> maps injected into StyleGAN2.

    For each level (coarse 16 px, medium 32 px, fine 64 px at 256) a 1x1 convolution (DBAF's W_k,
    HFORD's Conv) takes the encoder map from ``in_channels[l]`` to ``out_channels[l]`` channels (the
    generator's width at that resolution), then :class:`ChannelSpatialAttention`.

    forward({spatial size: [N, C_in, s, s]}) -> {s: [N, C_out, s, s]} for the three sizes in
    ``resolutions``.
    """

    def __init__(
        self,
        in_channels: Sequence[int] = (512, 256, 128),
        out_channels: Sequence[int] = (512, 512, 512),
        resolutions: Sequence[int] = (16, 32, 64),
        reduction: int = 16,
    ):
        super().__init__()
        self.resolutions = [int(r) for r in resolutions]
        self.proj = nn.ModuleList(nn.Conv2d(int(i), int(o), kernel_size=1) for i, o in zip(in_channels, out_channels))
        self.attention = nn.ModuleList(ChannelSpatialAttention(int(o), reduction) for o in out_channels)

    def forward(self, features: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        out = {}
        for lvl, res in enumerate(self.resolutions):
            if res not in features:
                raise KeyError(f"no {res} px encoder feature map (have {sorted(features)})")
            out[res] = self.attention[lvl](self.proj[lvl](features[res]))
        return out


# ------------------------------------------------------------------------------------------------
# cMLPs / KRIA: the keyed identity edit
# ------------------------------------------------------------------------------------------------


class KeyedIdentityMLP(nn.Module):
    """One level's conditional MLP on [I_z, P_z] (2d) -> edited identity code (d).

    Widths as the authors' code (DBAF ``cMLP``): 2d -> 4d -> 2d -> d, then ``n_extra`` d -> d, all
    equal-linear with leaky ReLU and ``lr_mul`` (StyleGAN mapping style, seven layers: DBAF's
    "seven-layer equal-linear block"), then a plain linear output layer d -> d.
    """

    def __init__(self, style_dim: int = 512, n_extra: int = 4, lr_mul: float = 0.01, zero_init_output: bool = False):
        super().__init__()
        d = style_dim
        widths = [2 * d, 4 * d, 2 * d, d] + [d] * n_extra
        layers: list[nn.Module] = [EqualLinear(a, b, lr_mul=lr_mul, activation="fused_lrelu") for a, b in zip(widths[:-1], widths[1:])]
        out = nn.Linear(d, d)
        if zero_init_output:  # start from I_hat = 0 (C_hat = A) instead of a random code of arbitrary scale
            nn.init.zeros_(out.weight)
            nn.init.zeros_(out.bias)
        layers.append(out)
        self.layers = nn.Sequential(*layers)

    def forward(self, identity: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        # DBAF eq. (19) writes [P, I]; the authors' code concatenates [I, P] (order immaterial for a
        # learned layer; we keep the code's so its weights load).
        return self.layers(torch.cat([identity, key], dim=-1))


class KeyedIdentityEditor(HubModule):
    """HFORD's three cMLPs / DBAF's KRIA: I_hat_z = cMLP_z([I_z, P_z]) for z in coarse/medium/fine.

    forward(identity [N, n_latent, d], key [N, n_latent, d]) -> edited identity [N, n_latent, d];
    row r uses the MLP of its level (:func:`level_index`). Reversal is *learned*, not analytic: the
    same network with the same key maps the anonymized identity code back (DBAF eq. 21, HFORD III-B,
    trained by the recovery loss), so a wrong key gives yet another identity.
    """

    def __init__(self, n_latent: int = 14, style_dim: int = 512, n_extra: int = 4, lr_mul: float = 0.01, zero_init_output: bool = False):
        super().__init__()
        self.n_latent = n_latent
        self.sizes = level_sizes(n_latent)
        self.mlps = nn.ModuleList(KeyedIdentityMLP(style_dim, n_extra, lr_mul, zero_init_output) for _ in range(3))

    def forward(self, identity: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        parts = zip(torch.split(identity, list(self.sizes), 1), torch.split(key, list(self.sizes), 1), self.mlps)
        return torch.cat([mlp(i, p) for i, p, mlp in parts], dim=1)


# ------------------------------------------------------------------------------------------------
# Keys
# ------------------------------------------------------------------------------------------------


def _expand_levels(w_levels: torch.Tensor, n_latent: int) -> torch.Tensor:
    """[N, 3, d] (one w per level) -> [N, n_latent, d], each repeated over its level's rows."""
    return torch.cat([w_levels[:, i : i + 1].expand(-1, n, -1) for i, n in enumerate(level_sizes(n_latent))], dim=1)


def key_latents(generator: nn.Module, keys: Sequence[KeyMaterial], context: str = "w") -> torch.Tensor:
    """Key latents P [N, n_latent, d] from the zoo's key material.

    As in DBAF's official code (``sample_w``): three z ~ N(0, I) (one per level) go through the
    generator's mapping network and each w is repeated over its level's rows (4/4/6 at 256 px). The
    z come from the key material (:meth:`KeyMaterial.normal`), so a secret always gives the same P on
    every machine.
    """
    d = generator.style_dim
    dev = next(generator.parameters()).device
    dtype = next(generator.parameters()).dtype
    z = torch.stack([torch.stack([k.normal(d, context=f"{context}|level{l}") for l in range(3)]) for k in keys])
    with torch.no_grad():
        w = generator.mapping(z.view(-1, d).to(dev, dtype)).view(len(keys), 3, d)
    return _expand_levels(w, generator.n_latent)


def random_key_latents(generator: nn.Module, n: int, rng: torch.Generator) -> torch.Tensor:
    """Random key latents [n, n_latent, d] for training (z from ``rng``, a CPU generator)."""
    d = generator.style_dim
    dev = next(generator.parameters()).device
    dtype = next(generator.parameters()).dtype
    z = torch.randn(n * 3, d, generator=rng).to(dev, dtype)
    with torch.no_grad():
        w = generator.mapping(z).view(n, 3, d)
    return _expand_levels(w, generator.n_latent)


# ------------------------------------------------------------------------------------------------
# Building and training (training/PROTOCOL.md)
# ------------------------------------------------------------------------------------------------


def _load_or_build(cls: type, spec: Any, kwargs: dict[str, Any]) -> nn.Module:
    """``cls.from_pretrained(spec)`` (a converted folder / Hub repo) when ``spec`` is given, else ``cls(**kwargs)``."""
    if spec:
        from ..hub import resolve_checkpoint

        return cls.from_pretrained(str(resolve_checkpoint(spec)))
    return cls(**kwargs)


class _TrainingMixin:
    """The training stages shared by HFORD and DBAF (pre-training / disentanglement stage 1,
    anonymization stage 2, and the optional backbone stage 0). Method classes choose the per-paper
    details through class attributes and :meth:`identity_terms` / :meth:`latent_reference`."""

    #: 1 and 2 are the papers' stages. 0 is not in the papers: it pre-trains the e4e encoder, the
    #: retention module and the StyleGAN2 decoder as an autoencoder, standing in for the pretrained
    #: FFHQ e4e / StyleGAN2 weights the papers start from, for configs that have none (offline, tiny).
    stages: ClassVar[tuple[int, ...]] = (0, 1, 2)
    #: DBAF sums the image terms over its outputs (eq. 33-35, 37-38); HFORD applies them to each
    #: generated image (eq. 8-9, 14): we average there.
    sum_over_outputs: ClassVar[bool] = True

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def build_components(cls, config: dict[str, Any]) -> dict[str, nn.Module]:
        """Every component from ``config["model"]`` (random init) or ``config["pretrained"]`` (folders/repos)."""
        from ..nn.psp import Encoder4Editing
        from ..nn.stylegan2 import Discriminator, Generator

        model = config.get("model", {})
        pre = config.get("pretrained", {}) or {}
        res = int(config.get("resolution", 256))
        gen_kw = dict(model.get("generator", {}))
        gen_kw.setdefault("size", res)
        generator = _load_or_build(Generator, pre.get("generator"), gen_kw)
        if not pre.get("generator") and model.get("injection_init") is not None:
            # A pretrained FFHQ generator has non-zero noise strengths, through which the retention maps
            # enter (``injection_mode="noise"``); a random one starts at 0, leaving the maps no path.
            with torch.no_grad():
                for name, p in generator.named_parameters():
                    if name.endswith("noise.weight"):
                        p.fill_(float(model["injection_init"]))
        if generator.size != res:
            raise ValueError(f"generator size {generator.size} != resolution {res}")
        enc_kw = dict(model.get("encoder", {}))
        enc_kw.setdefault("n_styles", generator.n_latent)
        enc_kw.setdefault("style_dim", generator.style_dim)
        encoder = _load_or_build(Encoder4Editing, pre.get("encoder"), enc_kw)
        if encoder.n_styles != generator.n_latent or encoder.style_dim != generator.style_dim:
            raise ValueError("encoder and generator disagree on the W+ shape")
        feat_ch = _encoder_feature_channels(encoder)
        fres = feature_resolutions(res)
        n, d = generator.n_latent, generator.style_dim
        comps: dict[str, nn.Module] = {
            "encoder": encoder,
            "generator": generator,
            cls.disentangler_name: _load_or_build(
                IdentityDisentangler, pre.get(cls.disentangler_name), dict(n_latent=n, style_dim=d, **model.get("disentangler", {}))
            ),
            cls.retention_name: _load_or_build(
                AttributeRetention,
                pre.get(cls.retention_name),
                dict(in_channels=feat_ch, out_channels=[generator.channels[r] for r in fres], resolutions=list(fres), **model.get("retention", {})),
            ),
            cls.editor_name: _load_or_build(KeyedIdentityEditor, pre.get(cls.editor_name), dict(n_latent=n, style_dim=d, **model.get("editor", {}))),
        }
        if model.get("discriminator") is not None or pre.get("discriminator"):
            disc_kw = dict(model.get("discriminator") or {})
            disc_kw.setdefault("size", res)
            comps["discriminator"] = _load_or_build(Discriminator, pre.get("discriminator"), disc_kw)
        return comps

    @classmethod
    def build(cls, config: dict[str, Any]) -> dict[str, nn.Module]:
        return cls.build_components(config)

    @classmethod
    def from_config(cls, config: dict[str, Any]):
        """Components from the config, plus the frozen loss networks (identity encoder, LPIPS, parser)."""
        method = cls(dict(config), cls.build_components(config))
        method.loss_nets = _build_loss_nets(config)
        return method

    # -- protocol: parameters ---------------------------------------------------------------------
    def trainable_parameters(self, stage: int) -> dict[str, list[nn.Parameter]]:
        """{"d": discriminator (when lambda adv > 0), "g": ...}.

        Stage 1: disentangler + retention + generator synthesis; stage 2: also the editor (both papers
        train the decoder too: the authors' code fine-tunes it). The mapping network (``style.*``) only
        makes keys and stays frozen; e4e is frozen (the papers). Stage 0 (backbone) trains e4e +
        retention + generator synthesis. ``train_generator`` (config, or per stage) false keeps the
        synthesis network frozen too, e.g. in stage 0 on a generator trained as a GAN (training/gan.py).
        """
        if stage not in self.stages:
            raise ValueError(f"{self.name} has stages {self.stages}, not {stage}")
        g: list[nn.Parameter] = []
        if stage == 0:
            names = ["encoder", self.retention_name]
        else:
            names = [self.disentangler_name, self.retention_name] + ([self.editor_name] if stage == 2 else [])
        for name in names:
            g += list(self.components[name].parameters())
        if self.stage_config(stage).get("train_generator", self.config.get("train_generator", True)):
            g += [p for n, p in self.generator.named_parameters() if not n.startswith("style.")]
        groups: dict[str, list[nn.Parameter]] = {}
        if "discriminator" in self.components and self._lambda(stage, "adv") > 0:
            groups["d"] = list(self.components["discriminator"].parameters())
        groups["g"] = g
        return groups

    # -- helpers ----------------------------------------------------------------------------------
    def _lambda(self, stage: int, name: str) -> float:
        return float(self.stage_config(stage).get("lambdas", {}).get(name, 0.0))

    def _rng(self) -> torch.Generator:
        rng = getattr(self, "train_generator", None)
        if rng is None:
            rng = torch.Generator().manual_seed(0)
        return rng

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        return _aux(self, "identity", x).embed(x)

    def _image_terms(self, target: torch.Tensor, outputs: Sequence[torch.Tensor], stage: int) -> dict[str, Any]:
        """L_lpips, L_rec, L_parse of the generated images against ``target`` (summed or averaged)."""
        k = 1.0 if self.sum_over_outputs else 1.0 / len(outputs)
        from .. import losses as L

        def lp():
            net = _aux(self, "lpips", target)
            return k * sum(L.lpips_loss(o, target, net) for o in outputs)

        def parse():
            parser = _aux(self, "parser", target)
            if parser is None:
                raise RuntimeError("the parse loss needs a face parser: set `parser:` in the config or its lambda to 0")
            ref = _parse_probs(parser, target).detach()
            return k * sum(L.mse_loss(_parse_probs(parser, o), ref) for o in outputs)

        return {
            "lpips": lp,  # HFORD eq. 8, DBAF eq. 12 / 33
            "rec": k * sum(L.l1_loss(o, target) for o in outputs),  # HFORD eq. 9, DBAF eq. 13 / 34
            "parse": parse,  # HFORD eq. 14, DBAF eq. 14 / 35
        }

    def latent_reference(self) -> torch.Tensor | None:
        """w_bar for L_reg; ``None`` = e4e's delta regulariser (HFORD eq. 15)."""
        return None

    def identity_terms(self, e_ori, e_ano, e_rec, e_err) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    # -- stage forward passes ---------------------------------------------------------------------
    def _mix_pass(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Stage 1 (DBAF eq. 5, 9; HFORD Fig. 5): identity of X_id, attributes + maps of X_attr.

        X_id is ``batch["image"]``; X_attr is X_id itself for about one row in three (the authors'
        code alternates same / shuffled pairs with ``cycle_num=3``) and ``batch["image_b"]`` otherwise.
        """
        x_id = batch["image"]
        b = x_id.shape[0]
        p_same = float(self.stage_config(1).get("same_pair_fraction", 1.0 / 3.0))
        same = torch.rand(b, generator=self._rng()) < p_same
        same_dev = same.to(x_id.device)
        x_attr = torch.where(same_dev[:, None, None, None], x_id, batch["image_b"])
        p_id = self.decompose(x_id)
        p_attr = self.decompose(x_attr)
        w_mix = p_id["identity"] + p_attr["attr"]  # eq. (5)
        x_mix = self.synthesize(w_mix, p_attr["maps"])  # eq. (9)
        return {"x_attr": x_attr, "x_mix": x_mix, "same": same_dev, "w": [w_mix]}

    def _backbone_pass(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Stage 0 (not in the papers): X -> e4e -> W+ C and maps -> StyleGAN2 -> X_rec, no CID / KRIA.

        With lambda ``rec_w`` > 0 the decoder also reconstructs from C alone (no maps), so that the
        codes carry the face as a pretrained e4e's do instead of leaving it all to the maps."""
        codes, feats = self.encode(batch["image"])
        out = {"x_rec": self.synthesize(codes, self.retention(feats)), "w": [codes]}
        if self._lambda(0, "rec_w") > 0:
            out["x_rec_w"] = self.generator.synthesize(codes, noise_mode="const")
        if self._lambda(0, "latent") > 0:
            # the encoder on the generator's own faces, whose codes are known: w = f(z) for random z,
            # repeated over the layers as e4e's codes nearly are; E(G(w)) must give w back
            n = batch["image"].shape[0]
            with torch.no_grad():
                z = torch.randn(n, self.generator.style_dim, generator=self._rng()).to(codes.device)
                w = self.generator.mapping(z).unsqueeze(1).expand(-1, self.generator.n_latent, -1)
                x_w = self.generator.synthesize(w, noise_mode="const")
            out["latent"] = (self.encode(x_w)[0], w)
        return out

    def _anonymization_pass(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Stage 2 (DBAF eq. 19-28; HFORD IV-A: 2 anonymization passwords, 3 recovery passwords).

        Keys P1, P2 anonymize X_ori; the recovery passes start from X_ano1 re-encoded (``recovery_input:
        image``, DBAF eq. 21-23: what a user holds) or from its latent code (``latent``: the authors' code
        and HFORD's text, I_hat with X_ori's A and maps) with P1 (-> X_rec) and two wrong keys (-> X_err).
        """
        x = batch["image"]
        b = x.shape[0]
        keys = random_key_latents(self.generator, 4 * b, self._rng()).view(4, b, *self._w_shape())
        p = self.decompose(x)
        w_ano1 = self.edit(p, keys[0])  # eq. (19)
        w_ano2 = self.edit(p, keys[1])  # eq. (20)
        x_ano1 = self.synthesize(w_ano1, p["maps"])  # eq. (24)
        x_ano2 = self.synthesize(w_ano2, p["maps"])  # eq. (25)
        if self.config.get("recovery_input", "image") == "image":
            q = self.decompose(x_ano1)
        else:
            q = {"attr": p["attr"], "identity": w_ano1 - p["attr"], "maps": p["maps"]}
        w_rec = self.edit(q, keys[0])  # eq. (21)
        w_err1 = self.edit(q, keys[2])  # eq. (22)
        w_err2 = self.edit(q, keys[3])  # eq. (23)
        x_rec = self.synthesize(w_rec, q["maps"])  # eq. (26)
        x_err1 = self.synthesize(w_err1, q["maps"])  # eq. (27)
        x_err2 = self.synthesize(w_err2, q["maps"])  # eq. (28)
        return {
            "ano": [x_ano1, x_ano2],
            "rec": x_rec,
            "err": [x_err1, x_err2],
            "w": [w_ano1, w_ano2, w_rec, w_err1, w_err2],
        }

    def _w_shape(self) -> tuple[int, int]:
        return self.generator.n_latent, self.generator.style_dim

    # -- protocol: losses -------------------------------------------------------------------------
    def compute_losses(self, stage: int, group: str, batch: dict[str, torch.Tensor], step: int):
        from .. import losses as L

        lambdas = dict(self.stage_config(stage).get("lambdas", {}))
        if stage > 0:
            self.encoder.eval()  # frozen e4e: its BatchNorm statistics must not follow the batch (authors: e4e.eval())
        if stage == 0:
            out = self._backbone_pass(batch)
            real, fakes = batch["image"], [out["x_rec"]]
        elif stage == 1:
            out = self._mix_pass(batch)
            real, fakes = out["x_attr"], [out["x_mix"]]
        else:
            out = self._anonymization_pass(batch)
            real, fakes = batch["image"], out["ano"] + [out["rec"]] + out["err"]

        if group == "d":  # HFORD eq. 16, DBAF eq. 16 / 37
            disc = self.components["discriminator"]
            real = real.detach().requires_grad_(True)
            real_pred = disc(real)
            k = 1.0 if (self.sum_over_outputs and stage == 2) else 1.0 / len(fakes)
            loss = k * sum(L.nonsaturating_d_loss(real_pred, disc(f.detach())) for f in fakes)
            logs = {"d_loss": float(loss.detach())}
            loss = L.add_lazy_r1(loss, logs, real_pred, real, self.stage_config(stage).get("r1"), step)
            logs["total"] = float(loss.detach())
            return loss, logs

        terms: dict[str, Any] = {}
        ref = self.latent_reference() if stage > 0 else None
        terms["reg"] = sum(L.latent_regularization_loss(w, ref) for w in out["w"]) / len(out["w"])  # eq. 15 / 36
        if stage == 0:  # e4e's objective (Tov et al.): reconstruction + delta regulariser (+ LPIPS, adversarial)
            terms.update(self._image_terms(batch["image"], fakes, stage))
            if "x_rec_w" in out:
                terms["rec_w"] = L.l1_loss(out["x_rec_w"], batch["image"])
            if "latent" in out:  # not in e4e: codes regressed on generated faces (re-encoding G's outputs)
                terms["latent"] = L.l1_loss(*out["latent"])
        elif stage == 1:
            target = out["x_attr"]
            e_mix, e_attr = self._embed(out["x_mix"]), self._embed(target).detach()
            dist = 1.0 - L.cosine_similarity(e_mix, e_attr)  # HFORD eq. 7, DBAF eq. 11
            st = self.stage_config(1)
            terms["c"] = L.identity_contrastive_loss(dist, out["same"], float(st.get("tau_pos", 0.0)), float(st.get("tau_neg", 0.5)))  # eq. 6 / 10
            terms.update(self._image_terms(target, fakes, stage))
        else:
            target = batch["image"]
            e_ori = self._embed(target).detach()
            e_ano = [self._embed(a) for a in out["ano"]]
            e_err = [self._embed(e) for e in out["err"]]
            e_rec = self._embed(out["rec"])
            id_terms = self.identity_terms(e_ori, e_ano, e_rec, e_err)
            terms["id"] = sum(id_terms.values())
            terms.update(self._image_terms(target, fakes, stage))
        if "discriminator" in self.components and float(lambdas.get("adv", 0)) > 0:
            disc = self.components["discriminator"]
            k = 1.0 if (self.sum_over_outputs and stage == 2) else 1.0 / len(fakes)
            terms["adv"] = k * sum(L.nonsaturating_g_loss(disc(f)) for f in fakes)  # eq. 17 / 38
        total, logs = L.weighted_sum(terms, lambdas)
        if stage == 2:
            logs.update({k2: float(v.detach()) for k2, v in id_terms.items()})
            with torch.no_grad():
                logs["cos_ano"] = float(L.cosine_similarity(e_ori, e_ano[0]).mean())
                logs["cos_rec"] = float(L.cosine_similarity(e_ori, e_rec).mean())
        return total, logs

    # -- protocol: samples ------------------------------------------------------------------------
    def sample_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Rows: input, reconstruction, anonymized (key 1), anonymized (key 2), recovered, wrong key."""
        x = batch["image"]
        b = x.shape[0]
        rng = torch.Generator().manual_seed(1234)
        keys = random_key_latents(self.generator, 3 * b, rng).view(3, b, *self._w_shape())
        ano = self.transform(x, keys[0]).clamp(-1, 1)
        return {
            "input": x,
            "reconstruction": self.reconstruct(x).clamp(-1, 1),
            "anonymized": ano,
            "anonymized_key2": self.transform(x, keys[1]).clamp(-1, 1),
            "recovered": self.transform(ano, keys[0]).clamp(-1, 1),
            "wrong_key": self.transform(ano, keys[2]).clamp(-1, 1),
        }


def _encoder_feature_channels(encoder: nn.Module) -> list[int]:
    """Channels of e4e's (c3, c2, c1) maps (coarse 16 px, medium 32 px, fine 64 px at 256): 512, 256, 128."""
    with torch.no_grad():
        x = torch.zeros(1, 3, 64, 64)
        was = encoder.training
        encoder.eval()
        c1, c2, c3 = encoder.backbone(x)
        encoder.train(was)
    return [c3.shape[1], c2.shape[1], c1.shape[1]]


# parse loss: identity-related parts only (HFORD eq. 14: "We only choose identity-related parts")
_IDENTITY_PARTS = ("brows", "eyes", "nose", "mouth", "lips")


def _parse_probs(parser: nn.Module, x: torch.Tensor) -> torch.Tensor:
    from ..nn.bisenet import class_ids

    ids = class_ids(_IDENTITY_PARTS)
    return torch.softmax(parser.logits(x), dim=1)[:, ids]


def _aux(method: Any, name: str, like: torch.Tensor):
    nets = getattr(method, "loss_nets", None)
    if nets is None:
        raise RuntimeError(f"{method.name}: training needs the loss networks; build the method with from_config")
    net = nets.get(name)
    if net is not None and next(net.parameters()).device != like.device:
        net.to(like.device)
    return net


def _build_loss_nets(config: dict[str, Any]) -> dict[str, nn.Module | None]:
    """Frozen networks the losses use: identity encoder (ArcFace / distilled), LPIPS, BiSeNet parser."""
    nets: dict[str, nn.Module | None] = {"identity": _load_identity_encoder(config), "lpips": None, "parser": None}
    lambdas = [st.get("lambdas", {}) for st in (config.get("stages") or {}).values()]
    if config.get("lpips") and any(float(l.get("lpips", 0)) > 0 for l in lambdas):
        from ..nn.lpips import load_lpips

        nets["lpips"] = load_lpips(config.get("lpips_net", "alex"), repo_id=config["lpips"])
    if config.get("parser") and any(float(l.get("parse", 0)) > 0 for l in lambdas):
        from ..hub import resolve_checkpoint
        from ..nn.bisenet import BiSeNet

        nets["parser"] = BiSeNet.from_pretrained(str(resolve_checkpoint(config["parser"])))
    for net in nets.values():
        if net is not None:
            net.eval().requires_grad_(False)
    return nets


def _load_identity_encoder(config: dict[str, Any]) -> nn.Module:
    """F_arc of the identity losses: ``config["identity_encoder"]`` (a converted ArcFace or the SFace-distilled
    encoder of ``python -m training.distill identity``) or, when null, a random tiny IR-SE (tests only)."""
    from .ifadit import load_identity_encoder

    return load_identity_encoder(config.get("identity_encoder"), config.get("model", {}).get("identity_random"))


# ------------------------------------------------------------------------------------------------
# The common method
# ------------------------------------------------------------------------------------------------


class StyleGANIdentityMethod(_TrainingMixin, NeuralMethod):
    """e4e -> (A, I) -> keyed edit of I -> StyleGAN2 with retained attribute maps.

    Components: ``encoder`` (e4e :class:`~zoo.nn.psp.Encoder4Editing`), ``generator``
    (:class:`~zoo.nn.stylegan2.Generator`), and the three method modules named by the class
    attributes ``disentangler_name`` (IDM / CID), ``retention_name`` (ARM / MAAR) and ``editor_name``
    (cMLPs / KRIA). Training adds ``discriminator``.

    anonymize_faces(x, keys) = recover_faces(x, keys): both papers use one mapping G(X, P) for
    anonymization and recovery (DBAF: X_rec = G(X_ano, P)); the keyed edit learned to undo itself
    with the same key.
    """

    reversible = True
    uses_key = True
    disentangler_name: ClassVar[str] = "disentangler"
    retention_name: ClassVar[str] = "retention"
    editor_name: ClassVar[str] = "editor"
    injection_mode: ClassVar[str] = "noise"

    # -- component access -----------------------------------------------------------------------
    @property
    def encoder(self) -> nn.Module:
        return self.components["encoder"]

    @property
    def generator(self) -> nn.Module:
        return self.components["generator"]

    @property
    def disentangler(self) -> IdentityDisentangler:
        return self.components[self.disentangler_name]

    @property
    def retention(self) -> AttributeRetention:
        return self.components[self.retention_name]

    @property
    def editor(self) -> KeyedIdentityEditor:
        return self.components[self.editor_name]

    def modules(self):
        """Every component plus, when built for training, the frozen loss networks."""
        nets = [m for m in (getattr(self, "loss_nets", None) or {}).values() if m is not None]
        return list(self.components.values()) + nets

    # -- building blocks of every pass ------------------------------------------------------------
    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """x [N,3,R,R] in [-1,1] -> (W+ code C = e4e codes + latent_avg [N, n_latent, d], feature maps)."""
        codes, feats = self.encoder.encode(x)
        return codes + self.encoder.latent_avg, feats

    def decompose(self, x: torch.Tensor) -> dict[str, Any]:
        """Encode and disentangle: {"codes": C, "attr": A, "identity": I, "maps": retention maps}."""
        codes, feats = self.encode(x)
        attr, ident = self.disentangler.split(codes)
        return {"codes": codes, "attr": attr, "identity": ident, "maps": self.retention(feats)}

    def synthesize(self, w_plus: torch.Tensor, maps: dict[int, torch.Tensor]) -> torch.Tensor:
        """StyleGAN2 with the retention maps injected (DBAF eq. 9/24, HFORD III-B) -> [N,3,R,R]."""
        return self.generator.synthesize(w_plus, injections=maps, noise_mode="const", injection_mode=self.injection_mode)

    def edit(self, parts: dict[str, Any], key: torch.Tensor) -> torch.Tensor:
        """Edited W+ code: C_hat = A + edit([I, P]) (DBAF eq. 19-23; HFORD: I_hat summed with A)."""
        return parts["attr"] + self.editor(parts["identity"], key)

    def transform(self, x: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        """G(X, P): one keyed pass (anonymization, or recovery when X is anonymized). [-1,1] in/out."""
        parts = self.decompose(x)
        return self.synthesize(self.edit(parts, key), parts["maps"])

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        """No edit: G(A + I) = G(C) with the retention maps (the "reconstruction" baseline)."""
        parts = self.decompose(x)
        return self.synthesize(parts["codes"], parts["maps"])

    def key_latents(self, keys: Sequence[KeyMaterial]) -> torch.Tensor:
        return key_latents(self.generator, keys)

    # -- DeidMethod -------------------------------------------------------------------------------
    def anonymize_faces(self, x: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        """Aligned faces [N,3,R,R] in [-1,1] -> anonymized faces, one key per row."""
        if len(keys) != x.shape[0]:
            raise ValueError(f"need one key per face: {len(keys)} keys for {x.shape[0]} faces")
        return self.transform(x, self.key_latents(keys)).clamp(-1, 1)

    def recover_faces(self, y: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        """Anonymized faces -> recovered faces: re-encode y and apply the same key's edit (DBAF eq. 21)."""
        return self.anonymize_faces(y, keys)

    def reconstruct_faces(self, x: torch.Tensor) -> torch.Tensor:
        """G(A + I) with the retention maps, no key edit: the evaluator's reconstruction reference."""
        return self.reconstruct(x).clamp(-1, 1)


class ReconstructionBaseline(DeidMethod):
    """A method's reconstruction G(C) = G(A + I) with its retention maps and *no* identity edit, run as if
    it were an anonymizer (``python -m training.evaluate --method zoo.methods.dbaf:DBAFReconstruction
    --local-dir DIR ...``). The evaluator now reports the same reconstruction for every method with
    ``reconstruct_faces`` in its own table; this wrapper keeps the earlier commands working."""

    reversible = False
    uses_key = False
    target: ClassVar[type] = StyleGANIdentityMethod

    def __init__(self, method: StyleGANIdentityMethod):
        super().__init__()
        self.method = method
        self.resolution = method.resolution

    @classmethod
    def from_pretrained(cls, repo_or_dir, *, revision: str | None = None) -> "ReconstructionBaseline":
        return cls(cls.target.from_pretrained(repo_or_dir, revision=revision))

    def modules(self):
        return self.method.modules()

    def to(self, device=None, dtype=None) -> "ReconstructionBaseline":
        super().to(device, dtype)
        self.method.to(device, dtype)
        return self

    def anonymize_faces(self, x: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        return self.method.reconstruct_faces(x)


# ------------------------------------------------------------------------------------------------
# Command line: the training losses of a stage, measured on held-out batches
# ------------------------------------------------------------------------------------------------


@torch.no_grad()
def cli(cls: type, argv: list[str] | None = None, extra: Any = None) -> None:
    """``python -m zoo.methods.<dbaf|hford> <command>``: the method's own commands (e.g. DBAF's
    ``convert-official``). Stage-loss analysis lives in ``python -m training.stage_losses``."""
    import argparse

    ap = argparse.ArgumentParser(prog=f"python -m zoo.methods.{cls.name}", epilog="stage losses: python -m training.stage_losses --method NAME ...")
    if extra is None:
        ap.parse_args(argv)
        ap.print_help()
        return
    sub = ap.add_subparsers(dest="cmd", required=True)
    extra(sub)
    args = ap.parse_args(argv)
    args.func(args)
