"""The W+ identity modules that HFORD (Chen et al.) and DBAF (Zhu et al.) share: one implementation each.

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
:class:`ChannelSpatialAttention`). Each paper's package names them as the paper does
(:mod:`zoo.methods.dbaf.modules`, :mod:`zoo.methods.hford.modules`).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from ..hub import HubModule
from ..keys import KeyMaterial
from .ops import EqualLinear

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
