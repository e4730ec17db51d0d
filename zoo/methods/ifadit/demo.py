"""iFADIT on the demo backbone: :class:`IFADITDemo`."""

from __future__ import annotations

import math
from typing import Any, ClassVar, Sequence

import torch
from torch import nn

from ... import losses
from ...keys import KeyMaterial
from ...nn.dcgan import LATENT_DIM
from ...nn.flows import SecureIdentityFlow
from ..latent_demo import FIT_CONTROLS, LatentDemoMethod
from .method import IFADIT
from .modules import KEYED_SHIFT_CONTEXT, KEYGEN_CONTEXT


class IFADITDemo(LatentDemoMethod):
    """iFADIT's Secure Identity Flow (eq. 5-8) and KeyGen (eq. 4) on the demo backbone.

    Mapping to the paper: the 100-d identity code u of :mod:`zoo.methods.latent_demo` is the identity code
    that E_ID gives in the paper. On W+ (the shipped default) u is the whitened identity code of the middle
    W+ slots (:mod:`zoo.nn.wplus_identity`) and the rest of the W+ code plays E_Attr's attributes (pose,
    expression, hair and lighting stay); on the DCGAN (the tests' small backbone) u is z itself, with no
    separate attribute code (pose is not kept). T is the same :class:`~zoo.nn.flows.SecureIdentityFlow`
    (official ``allinone`` blocks); KeyGen is KDF -> uniform [-1,1]^key_dim (eq. 4 without f: the codes
    are not drawn through a mapping network);
    the ICL's role (estimating z_anon from the anonymized image, eq. 10) is played by the inversion
    encoder plus latent refinement. Phase II losses (eq. 15-19) are computed on latent identity codes:

        anon   = max(0, cos(T(z, k1), z) - m)                                   eq. 15-16
        div    = max(0, cos(T(z, k1), T(z, k2)) - m)                            eq. 17
        deanon = 1 - cos(T^-1(T(z, k1) + e, k1), z) + max(0, cos(T^-1(T(z, k1) + e, k2), z) - m)   eq. 18-19
        prior  = gaussian_prior_loss(T(z, k1))                                  not in the paper

    e is Gaussian noise of the size of the re-encoding error (config ``reencode_noise``), so recovery
    holds from a re-encoded image, not only from the exact z_anon. ``prior`` keeps z_anon where the
    backbone draws faces (u ~ N(0, I); the paper's StyleGAN2 has a mapping network that does this for any w).
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
        z = self.encode(x)
        k1, k2 = self._random_keys(n), self._random_keys(n)
        flow = self.components["flow"]
        y = self.decode(flow(z, k1))
        z_y = self.encode(y)
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
