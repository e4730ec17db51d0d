"""DBAF: "Disentangle Before Anonymize: A Two-stage Framework for Attribute-preserved and
Occlusion-robust De-identification" (Zhu, Chen, Wei, Wang, Gao).

Modules (names from the paper, in :mod:`.modules`; implementations shared with HFORD in
:mod:`zoo.nn.identity_levels`):

* **CID** (Contrastive Identity Disentanglement, eq. 1-5): one multi-head attention transformer
  shared by the coarse / medium / fine W+ levels (4/4/6 rows at 256 px) predicts the attribute code
  A; the identity code is I = C - A (eq. 4).
* **KRIA** (Key-authorized Reversible Identity Anonymization, eq. 19-23): per level, a seven-layer
  equal-linear MLP on [I_z, P_z] gives the new identity code; C_hat = A + KRIA([P, I]).
* **MAAR** (Multi-scale Attentional Attribute Retention, eq. 6-8): channel + spatial attention on
  e4e's 16/32/64 px feature maps, injected into StyleGAN2 (eq. 9, 24-28).

Stage 1 (disentanglement, eq. 10-18) trains CID + MAAR (+ decoder) on X_attr / X_id swaps with the
contrastive loss; stage 2 (anonymization, eq. 19-39) adds KRIA and trains on five outputs from two
correct and two wrong keys. Lambdas as published (Sec. III-C, III-D): see training/configs/dbaf.yaml.

Keys: the secret's key material gives three z ~ N(0, I) (one per level); StyleGAN's mapping network
turns them into w, repeated 4/4/6 over the W+ rows (the authors' ``sample_w``). Recovery runs the same
mapping on the anonymized image: X_rec = G(X_ano, P) (Sec. III-A). It is *learned*, not analytic: the
recovery loss (eq. 30) teaches KRIA that the same key undoes its own edit; a wrong key gives another
identity (eq. 22-23, 29).

The authors' released files (mrzhu-cool/DBAF: ``best_model_w_disentanglement.pth``,
``best_model_attr_block.pth``, ``best_model_id_mlp.pth``, ``best_model_decoder_finetune.pth``, plus
``e4e_ffhq_encode_256.pt``) convert with the converters registered below, or all at once with
``python -m zoo.methods.dbaf convert-official --e4e ... --out DIR`` (:mod:`.convert`).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ... import losses as L
from ...registry import register_method
from ..latent_demo import KeyedInvolutionDemo
from ..stylegan_identity import ReconstructionBaseline, StyleGANIdentityMethod
from .modules import CID, KRIA, MAAR

__all__ = ["DBAF", "DBAFDemo", "DBAFReconstruction"]


@register_method("dbaf", default_repo="face-deid-zoo/dbaf")
class DBAF(StyleGANIdentityMethod):
    """DBAF on aligned faces (256 px FFHQ alignment for the published model). Reversible with the key."""

    name = "dbaf"
    summary = "Two-stage StyleGAN/e4e identity editing: CID disentangles, KRIA edits the identity code with a key, MAAR keeps details"
    paper = "Zhu et al., Disentangle Before Anonymize: A Two-stage Framework for Attribute-preserved and Occlusion-robust De-identification"
    component_names: ClassVar[tuple[str, ...]] = ("encoder", "generator", "cid", "maar", "kria")
    disentangler_name = "cid"
    retention_name = "maar"
    editor_name = "kria"
    disentangler_class = CID
    retention_class = MAAR
    editor_class = KRIA
    demo_variant: ClassVar[str] = "zoo.methods.dbaf:DBAFDemo"
    sum_over_outputs = True  # eq. 33-35 and 37-38 sum over S_2

    def latent_reference(self) -> torch.Tensor:
        """w_bar of eq. 15 / 36: the average latent (e4e's ``latent_avg``)."""
        return self.encoder.latent_avg[0]

    @staticmethod
    def identity_terms(e_ori, e_ano, e_rec, e_err) -> dict[str, torch.Tensor]:
        """L_id = L_dif + L_rev + L_div (eq. 32; its "L_rec" is the recovery loss L_rev of eq. 30)."""
        s1 = list(e_ano) + list(e_err)  # S_1 = {X_ano1, X_ano2, X_err1, X_err2}
        return {
            "dif": sum(L.identity_similarity_hinge(e_ori, e) for e in s1),  # eq. (29), summed over S_1
            "rev": L.identity_cosine_loss(e_ori, e_rec),  # eq. (30)
            "div": L.pairwise_similarity_hinge(s1, reduction="sum"),  # eq. (31)
        }


class DBAFDemo(KeyedInvolutionDemo):
    """DBAF's KRIA (eq. 19-23) and its anonymization-stage identity losses (eq. 29-31) on the demo
    backbone (:class:`~zoo.methods.latent_demo.KeyedInvolutionDemo`: an involution by construction; CID and MAAR have nothing
    to act on there, A = 0).
    Recipe and deviations: ``training/configs/dbaf_demo.yaml``."""

    name = "dbaf"
    summary = DBAF.summary
    paper = DBAF.paper
    component_names: ClassVar[tuple[str, ...]] = ("generator", "encoder", "kria")
    editor_name = "kria"
    identity_terms = staticmethod(DBAF.identity_terms)


class DBAFReconstruction(ReconstructionBaseline):
    """DBAF without the KRIA edit (G(A + I)): the evaluator's reconstruction reference."""

    name = "dbaf-reconstruction"
    target = DBAF
