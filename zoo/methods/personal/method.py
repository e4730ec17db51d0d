"""Personalized and invertible face de-identification (Cao et al., ICCV 2021), zoo name ``personal``.

Pipeline on aligned 256 px crops (tensors [N,3,256,256] in [-1,1]); equation numbers from the paper::

    z_id = E_id(X)                  frozen ArcFace-type identity encoder (unit-norm embedding)
    z_attr = E_attr(X)              U-Net multi-level attribute encoder, n = 8 levels (eq. 6)
    z_new = M(z_id, p, d)           rotation towards the reference f(p) by g(d) degrees (eq. 7, 13-14)
    F(X, p, d) = G(z_new, z_attr)   AAD residual-block generator (eq. 15)
    X_hat = G(M^-1(E_id(F), p, d), E_attr(F))                              recovery (eq. 16-18)

Tiny CPU configs may set ``resolution`` to 16..128 px (:class:`zoo.nn.aad.SmallAEINet`, n = log2(R)
levels; E_id still sees the face upsampled to 256 px); checkpoints record it in their config.

E_attr + G are FaceShifter's AEI-Net (:class:`zoo.nn.aad.AEINet`), trained with multi-scale hinge
discriminators and eq. 8-12 (lambda_adv 0.1, lambda_id 5, lambda_attr = lambda_rec = 10), Adam(0, 0.999),
lr 4e-4. Training follows FaceShifter's recipe that eq. 10 ("if X' is generated with the same z_id and
z_attr") implies: the identity comes from ``image_b`` (a different face) except for a fraction of the
rows, on which the reconstruction loss applies.

**Passwords.** The paper uses a six-digit password p. A key that is exactly six digits (``"042917"``) is
that password; any other secret goes through the zoo KDF and gives six digits per face
(``KeyMaterial.digits(6)``). Either way there are only 10^6 passwords (x 10 levels): brute force is
cheap, a limitation of the paper's design that the model card states.

**Reference library.** Each reference z_r = f(p) is the normalised mix of k = 10 different training
identities (Sec. 4.1). The checkpoint stores the base identities (``extra.safetensors``,
``reference_base`` [M, D], one unit-norm mean embedding per training identity), and p selects its k
identities through a one-to-one map: the combination with rank ``(a p + b) mod C(M, k)`` in the
lexicographic order (gcd(a, C(M, k)) = 1, M >= 23 so that C(M, 10) >= 10^6). Built by
``python -m zoo.methods.personal build-library`` or from ``config["library"]["data"]`` in
:meth:`Personal.from_config`.

**Privacy level.** g(d) = 70 + 5d degrees for d in [0, 4), 70 + 5(d + 1) for d in [4, 9]: 70, 75, 80,
85, 95, ..., 120 (90 is skipped: eq. 16 divides by cos g(d)).

**Inverse.** Eq. 16-17 invert eq. 13-14 exactly given z_new (:func:`unrotate_identity`). The image only
carries the direction of z_new (E_id is unit-norm, and G receives the unit vector z_new / |z_new|, the
distribution it was trained on), so recovery (:func:`unrotate_direction`) first solves for the norm
|z_new|^2 = 1 - sin^2 g A^2 (A = z_bar . f(p)) with eq. 16-17, then applies them. Up to scale eq. 13-14
are not injective: when the identity overlaps the reference strongly (roughly A > 0.1 at the middle
levels d = 2..5) another preimage with a different A maps to the same direction. Recovery picks the
root whose A is closest to the typical overlap of a face with a reference, which
:meth:`Personal.build_library` measures on the training faces and stores (``library.overlap_prior``;
without it, the largest-norm root, exact for identities nearly orthogonal to the reference mix).
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ... import losses
from ...keys import KeyMaterial, Secret
from ...nn.identity_encoder import embedding_dim, load_identity_encoder
from ...registry import register_method
from ..base import Control, NeuralMethod
from .library import load_library_images
from .passwords import PasswordReferences, build_reference_base, mix_identities
from .rotation import LEVELS, rotate_identity, unrotate_direction


@register_method("personal", default_repo="face-deid-zoo/personal")
class Personal(PasswordReferences, NeuralMethod):
    """Cao et al.'s password + privacy-level identity rotation on an AEI-Net; see the module docstring."""

    name = "personal"
    summary = "Identity rotation on the hypersphere towards a password-chosen reference (level d), AEI-Net (AAD) generator; closed-form inverse."
    paper = "Cao et al., Personalized and Invertible Face De-identification by Disentangled Identity Information Manipulation (ICCV 2021)"
    reversible = True
    uses_key = True
    controls = (Control("level", "int", 5, 0, 9, "privacy level d: rotation g(d) = 70..85, 95..120 degrees"),)
    component_names = ("identity_encoder", "aei")
    demo_variant: ClassVar[str] = "zoo.methods.personal:PersonalDemo"
    stages: ClassVar[tuple[int, ...]] = (1,)
    resolution = 256

    train_generator: torch.Generator | None = None

    # -- components ---------------------------------------------------------------------------------
    @property
    def aei(self) -> nn.Module:
        return self.components["aei"]

    def modules(self):
        return list(self.components.values())

    def identity(self, x: torch.Tensor) -> torch.Tensor:
        """E_id: x [N,3,R,R] in [-1,1] -> unit-norm z_id [N, D]. Below 256 px (tiny configs) the face is
        first upsampled to 256 px (bicubic), the input the encoder was trained/distilled on."""
        if x.shape[-1] < 256:
            x = F.interpolate(x, size=(256, 256), mode="bicubic", align_corners=False)
        return self.components["identity_encoder"].embed(x)

    # -- DeidMethod ---------------------------------------------------------------------------------
    def generate(self, z_id: torch.Tensor, x_attr: torch.Tensor) -> torch.Tensor:
        """G(z_id, E_attr(x_attr)) with a unit-norm identity -> [N,3,R,R] in [-1,1] (R = self.resolution)."""
        return self.aei(x_attr, F.normalize(z_id, dim=1))[0]

    def _prepare(self, x: torch.Tensor, keys: Sequence[KeyMaterial]) -> None:
        if len(keys) != x.shape[0]:
            raise ValueError(f"need one key per face: {len(keys)} keys for {x.shape[0]} faces")
        if x.shape[-1] != self.resolution:
            raise ValueError(f"this personal model works on {self.resolution} px crops, got {tuple(x.shape)}")

    def anonymize_faces(self, x: torch.Tensor, keys: Sequence[KeyMaterial], level: int = 5, **controls: Any) -> torch.Tensor:
        """F(X, p, d) = G(M(E_id(X), p, d), E_attr(X)) (eq. 13-15), one password per row."""
        self._prepare(x, keys)
        return self.generate(self.rotated(self.identity(x), keys, level), x)

    def recover_faces(self, y: torch.Tensor, keys: Sequence[KeyMaterial], level: int = 5, **controls: Any) -> torch.Tensor:
        """X_hat = G(M^-1(E_id(Y), p, d), E_attr(Y)) (eq. 16-18) with the same passwords and level."""
        self._prepare(y, keys)
        return self.generate(self.unrotated(self.identity(y), keys, level), y)

    def reconstruct_faces(self, x: torch.Tensor) -> torch.Tensor:
        """G(E_id(X), E_attr(X)): the generator with the identity left unrotated (the evaluator's reference)."""
        return self.generate(self.identity(x), x)

    # -- training protocol --------------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "Personal":
        from ...nn.aad import AEINet, SmallAEINet, num_levels
        from ...nn.discriminators import MultiscaleDiscriminator

        config = dict(config)
        res = int(config.get("resolution", 256))
        if res != 256 and (res > 256 or num_levels(res) < 4):
            raise ValueError("personal (AEI-Net) works at 256 px (paper); tiny configs may use 16..128 px")
        m = config.get("model", {})
        ident = load_identity_encoder(config.get("identity_encoder"), m.get("identity"))
        c_id = embedding_dim(ident, 256)
        aei_path = m.get("aei_path")
        if aei_path:
            from ...hub import resolve_checkpoint

            aei = AEINet.from_pretrained(str(resolve_checkpoint(aei_path)))
        elif res == 256:
            aei = AEINet(c_id=c_id, **m.get("aei", {}))
        else:  # tiny CPU configs: n = log2(res) AAD levels instead of 8 (see SmallAEINet)
            aei = SmallAEINet(c_id=c_id, image_size=res, **m.get("aei", {}))
        comps = {"identity_encoder": ident, "aei": aei, "discriminator": MultiscaleDiscriminator(**m.get("discriminator", {}))}
        method = cls(config, comps)
        lib = config.get("library") or {}
        if lib.get("data"):
            images, labels = load_library_images(lib["data"], lib.get("limit"), bool(lib.get("labels_from_subfolders", False)), res)
            method.build_library(images, labels, k=int(lib.get("k", 10)), seed=int(lib.get("seed", 0)), center=bool(lib.get("center", False)))
        return method

    @torch.no_grad()
    def build_library(
        self, images: torch.Tensor, labels: Sequence[Any] | None = None, k: int = 10, seed: int = 0, batch: int = 32, center: bool = False
    ) -> torch.Tensor:
        """Embed training faces ``[N,3,R,R]`` in [-1,1] with E_id and install the reference library
        (``center``: see :func:`build_reference_base`)."""
        enc = self.components["identity_encoder"]
        was = enc.training
        enc.eval()
        dev = next(enc.parameters()).device
        emb = torch.cat([self.identity(images[i : i + batch].to(dev)).cpu() for i in range(0, images.shape[0], batch)])
        enc.train(was)
        base = build_reference_base(emb, labels, center)
        self.set_reference_library(base, k=k, seed=seed)
        self.config["library"]["center"] = bool(center)
        self.config["library"]["overlap_prior"] = self._typical_overlap(F.normalize(emb.float(), dim=1), seed)
        return base

    def trainable_parameters(self, stage: int) -> dict[str, list[nn.Parameter]]:
        if stage != 1:
            raise ValueError(f"personal has stages {self.stages}, not {stage}")
        return {"d": list(self.components["discriminator"].parameters()), "g": list(self.aei.parameters())}

    def compute_losses(self, stage: int, group: str, batch: dict[str, torch.Tensor], step: int):
        self.components["identity_encoder"].eval()  # frozen E_id: BatchNorm statistics must not move
        scfg = self.config["stages"][stage]
        lam = scfg.get("lambdas", {})
        x_t = batch["image"]  # attributes (and the target of the reconstruction loss)
        n = x_t.shape[0]
        same = torch.rand(n, generator=self.train_generator) < float(scfg.get("same_prob", 0.2))
        same = same.to(x_t.device)
        x_s = torch.where(same[:, None, None, None], x_t, batch["image_b"])  # identity source
        with torch.no_grad():
            z_s = self.identity(x_s)
            rotate_prob = float(scfg.get("rotate_prob", 0.0))
            if rotate_prob > 0:
                z_s = self._rotated_sources(z_s, ~same & (torch.rand(n, generator=self.train_generator) < rotate_prob).to(same.device))
        disc = self.components["discriminator"]
        if group == "d":
            with torch.no_grad():
                fake = self.aei(x_t, z_s)[0]
            loss = losses.hinge_d_loss(disc(x_t), disc(fake.detach()))  # eq. 11, hinge form
            return loss, {"d_adv": float(loss.detach())}
        if group != "g":
            raise ValueError(f"unknown group {group!r}")
        y, attr_t = self.aei(x_t, z_s)
        attr_y = self.aei.get_attr(y)
        rec = (0.5 * (y - x_t).pow(2).flatten(1).mean(1) * same).sum() / same.sum().clamp_min(1)  # eq. 10 on same pairs
        terms = {
            "adv": lambda: losses.hinge_g_loss(disc(y)),  # eq. 11
            "id": lambda: losses.identity_cosine_loss(self.identity(y), z_s),  # eq. 8
            "attr": lambda: losses.attribute_consistency_loss(attr_y, attr_t),  # eq. 9
            "rec": lambda: rec,
        }
        return losses.weighted_sum(terms, lam)  # eq. 12

    def _rotated_sources(self, z_s: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Not in the paper (tiny configs' ``rotate_prob``): on ``rows`` the identity source becomes
        M(z_s, p, d)/|M| (eq. 13-14) for a random reference mix of k library identities and a random
        level, so that G also learns the rotated identities anonymization feeds it and recovery
        (eq. 16-18) must read back from F(X, p, d). ``z_s [N, D]`` unit rows -> ``[N, D]``."""
        if not self.has_library or not bool(rows.any()):
            return z_s
        base = self.extra["reference_base"].to(z_s.device, z_s.dtype)
        k = int(self.config["library"]["k"])
        out = z_s.clone()
        for i in torch.nonzero(rows).flatten().tolist():
            pick = torch.randperm(base.shape[0], generator=self.train_generator)[:k].tolist()
            ref = mix_identities(base, [pick])
            level = int(torch.randint(0, len(LEVELS), (1,), generator=self.train_generator))
            out[i] = F.normalize(rotate_identity(z_s[i : i + 1], ref, level), dim=1)[0]
        return out

    @torch.no_grad()
    def sample_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = batch["image"]
        n = x.shape[0]
        level = int(self.config.get("sample_level", 5))
        if self.has_library:
            keys = [Secret(f"sample key {i}").derive(self.name, 0) for i in range(n)]
            wrong = [Secret(f"wrong key {i}").derive(self.name, 0) for i in range(n)]
            ref, ref_w = self.reference(keys), self.reference(wrong)
        else:
            d = self.identity(x).shape[1]
            ref = F.normalize(torch.randn(n, d, generator=self.train_generator), dim=1).to(x.device)
            ref_w = F.normalize(torch.randn(n, d, generator=self.train_generator), dim=1).to(x.device)
        z = self.identity(x)
        y = self.generate(rotate_identity(z, ref, level), x)
        u = self.identity(y)
        return {
            "input": x,
            "reconstruction": self.generate(z, x),
            "anonymized": y,
            "recovered": self.generate(unrotate_direction(u, ref, level, self.overlap_prior), y),
            "wrong_key": self.generate(unrotate_direction(u, ref_w, level, self.overlap_prior), y),
        }
