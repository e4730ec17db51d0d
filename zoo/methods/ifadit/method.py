"""iFADIT (Yuan et al., "iFADIT: Invertible Face Anonymization via Disentangled Identity Transform"): the method.

Pipeline on aligned face crops (tensors [N,3,R,R] in [-1,1]), equation numbers from the paper::

    z = E_ID(X), a = E_Attr(X)                          frozen ArcFace-type encoder, pSp encoder to W+ (eq. 1)
    k = KeyGen(s) = f(Norm(KDF(s)))                      zoo KDF -> uniform [-1,1] -> StyleGAN mapping f (eq. 4)
    z_anon = T(z, k)                                    Secure Identity Flow, zoo.nn.flows (eq. 5-6)
    X_anon = M * G(M_map([R(z_anon), a])) + (1-M) * X   mapper (eq. 2), frozen StyleGAN2 G, refinement (eq. 9, 11)
    X_rec = G(M_map([R(T^-1(C(E_ID(X_anon)), k)), E_Attr(X_anon)]))   recovery from the image (eq. 7-8, 10)

C is the Identity Compensation Layer (4-layer MLP) and M the Gaussian-blurred face mask (BiSeNet
parser when the checkpoint has one, else the landmark-template ellipse of :func:`zoo.paste.face_mask`).

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
converters of :mod:`.convert` (``ifadit-sif``, ``ifadit-mapper``, ``ifadit-icl``) and
``python -m zoo.methods.ifadit convert-official ...``, which assembles a full method folder.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ... import losses
from ...keys import KeyMaterial
from ...nn.flows import SecureIdentityFlow
from ...nn.identity_encoder import embedding_dim, load_identity_encoder
from ...nn.ops import gaussian_blur
from ...registry import register_method
from ..base import NeuralMethod
from .modules import ICL, LatentMapper, keygen_vectors


def _as_path(value: Any) -> str | None:
    return str(value) if value else None


# ------------------------------------------------------------------------------------------------
# The method
# ------------------------------------------------------------------------------------------------


@register_method("ifadit", default_repo="face-deid-zoo/ifadit")
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
            from ...nn.bisenet import region_mask

            labels = parser.parse(x)
            return gaussian_blur(region_mask(labels, self.refine_classes).to(x.dtype), sigma).clamp(0, 1)
        from ...paste import face_mask

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
        from ...hub import resolve_checkpoint
        from ...nn.psp import GradualStyleEncoder
        from ...nn.stylegan2 import Generator

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
            "icl": ICL(id_dim, **m.get("icl", {})),
        }
        parser_path = _as_path(config.get("face_parser"))
        if parser_path:
            from ...nn.bisenet import BiSeNet

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
            from ...nn.lpips import load_lpips

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
