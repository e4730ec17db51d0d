"""HFORD: "High-Fidelity and Occlusion-Robust De-identification for Face Privacy Protection"
(Chen, Zhu, Wang, Gao).

Modules (names from the paper, in :mod:`.modules`; implementations shared with DBAF in
:mod:`zoo.nn.identity_levels`):

* **IDM** (Identity Disentanglement Module, eq. 1-2): a ViT-style multi-head attention transformer per
  W+ level (coarse 1-4, medium 5-8, fine 9-14 at 256 px) gives the attribute code A; I = C - A.
* **cMLPs** (three conditional MLPs): I_hat_z = cMLP_z(I_z, P_z) per level; C_hat = I_hat + A.
* **ARM** (Attribute Retention Module, eq. 3-5): ARM(M) = SA(CA(Conv(M))) * Conv(M) * CA(Conv(M)) on
  e4e's 16/32/64 px feature maps, fused into StyleGAN2.

Training (Sec. III-E, III-F, IV-A): a pre-training stage without the cMLPs (X_attr / X_id swaps,
contrastive loss eq. 6-7, lambda_c 1, lambda_lpips 1, lambda_rec 3.5, lambda_parse 0.1, lambda_reg 0.1),
then the anonymization stage (eq. 8-18: lambda_id 2, lambda_lpips 1, lambda_rec 0.05, lambda_parse 0.1,
lambda_reg 0.1) with 2 anonymization passwords (the correct one and a random one) and 3 recovery
passwords (the correct one and two wrong ones): n = 4, m = 1 in eq. 10-12.

The paper does not give the cMLP / IDM sizes, nor how a password becomes a vector; we use the
authors' follow-up code (DBAF, mrzhu-cool/DBAF): cMLP 2d -> 4d -> 2d -> d -> 4 x (d -> d) -> d,
IDM transformers of depth 6, 14 heads of 64, and a password = three mapped z (one w per level).

Recovery (Sec. III-B: "the new identity latent code I_hat and password P are used as input"): the
cMLP applied again with the same password to the anonymized identity code. At inference I_hat is
re-derived from the anonymized image (the only thing a user has); reversal is *learned* by the
recovery loss L_rev (eq. 12), not analytic.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ... import losses as L
from ...registry import register_method
from ..latent_demo import KeyedInvolutionDemo
from ..stylegan_identity import ReconstructionBaseline, StyleGANIdentityMethod
from .modules import ARM, IDM, CMLPs

__all__ = ["HFORD", "HFORDDemo", "HFORDReconstruction"]


@register_method("hford", default_repo="face-deid-zoo/hford")
class HFORD(StyleGANIdentityMethod):
    """HFORD on aligned faces (256 px FFHQ alignment for the published recipe). Reversible with the password."""

    name = "hford"
    summary = "StyleGAN/e4e identity editing: IDM splits W+ into identity and attributes, cMLPs edit identity with a password, ARM keeps details"
    paper = "Chen et al., HFORD: High-Fidelity and Occlusion-Robust De-identification for Face Privacy Protection"
    component_names: ClassVar[tuple[str, ...]] = ("encoder", "generator", "idm", "arm", "cmlp")
    disentangler_name = "idm"
    retention_name = "arm"
    editor_name = "cmlp"
    disentangler_class = IDM
    retention_class = ARM
    editor_class = CMLPs
    demo_variant: ClassVar[str] = "zoo.methods.hford:HFORDDemo"
    sum_over_outputs = False  # eq. 8-9, 14 apply to each generated image X*: averaged

    def latent_reference(self) -> None:
        """L_reg of eq. 15: offsets Delta_i = w_i - w_0 (e4e's delta regulariser)."""
        return None

    @staticmethod
    def identity_terms(e_ori, e_ano, e_rec, e_err) -> dict[str, torch.Tensor]:
        """L_id = L_dif + L_anony + L_rev (eq. 13) over X = {X_anony (2), X_wr (2)} (n = 4), X_re (m = 1)."""
        x_set = list(e_ano) + list(e_err)
        return {
            "dif": L.pairwise_similarity_hinge(x_set, reduction="mean"),  # eq. (10): 1/(n(n-1)) sum
            "anony": sum(L.identity_similarity_hinge(e_ori, e) for e in x_set) / len(x_set),  # eq. (11)
            "rev": L.identity_cosine_loss(e_ori, e_rec),  # eq. (12)
        }


class HFORDDemo(KeyedInvolutionDemo):
    """HFORD's cMLP (Sec. III-B) and its anonymization-stage identity losses (eq. 10-12) on the demo
    backbone (:class:`~zoo.methods.latent_demo.KeyedInvolutionDemo`: an involution by construction; IDM and ARM have nothing
    to act on there, A = 0).
    Recipe and deviations: ``training/configs/hford_demo.yaml``."""

    name = "hford"
    summary = HFORD.summary
    paper = HFORD.paper
    component_names: ClassVar[tuple[str, ...]] = ("generator", "encoder", "cmlp")
    editor_name = "cmlp"
    identity_terms = staticmethod(HFORD.identity_terms)


class HFORDReconstruction(ReconstructionBaseline):
    """HFORD without the cMLP edit (G(A + I)): the evaluator's reconstruction reference."""

    name = "hford-reconstruction"
    target = HFORD
