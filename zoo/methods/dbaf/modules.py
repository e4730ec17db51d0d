"""DBAF's three modules under the paper's names (Zhu et al., Sec. III).

The networks are shared with HFORD (same group, same designs) and implemented once in
:mod:`zoo.nn.identity_levels`; here they take DBAF's names, equations and defaults.

* :class:`CID` - Contrastive Identity Disentanglement (eq. 1-5): a multi-head attention transformer
  over the rows of each W+ level predicts the attribute code A (eq. 1-3); the identity code is
  I = C - A (eq. 4); trained with the contrastive loss of eq. 5 (:mod:`zoo.losses`).
* :class:`KRIA` - Key-authorized Reversible Identity Anonymization (eq. 19-23): per level, a
  seven-layer equal-linear MLP on [I_z, P_z] gives the new identity code; C_hat = A + KRIA([P, I]).
* :class:`MAAR` - Multi-scale Attentional Attribute Retention (eq. 6-8): channel then spatial
  attention on e4e's 16/32/64 px feature maps, injected into StyleGAN2 (eq. 9, 24-28).
"""

from __future__ import annotations

from ...nn.identity_levels import AttributeRetention, IdentityDisentangler, KeyedIdentityEditor

__all__ = ["CID", "KRIA", "MAAR"]


class CID(IdentityDisentangler):
    """Contrastive Identity Disentanglement (eq. 1-4). codes C [N, n_latent, 512] -> A, same shape;
    :meth:`split` gives (A, I = C - A). DBAF shares one attention module over the three levels
    (``shared=True``, Sec. III-C); the authors' released code keeps one per level, which the converter
    reproduces."""


class KRIA(KeyedIdentityEditor):
    """Key-authorized Reversible Identity Anonymization (eq. 19-23). identity I [N, n_latent, 512] and key
    latents P [N, n_latent, 512] -> edited identity, same shape. The same key undoes the edit (eq. 21),
    learned through the recovery loss (eq. 30)."""


class MAAR(AttributeRetention):
    """Multi-scale Attentional Attribute Retention (eq. 6-8). {16|32|64: e4e map [N, C_in, s, s]} ->
    {s: [N, C_out, s, s]}, injected into the generator at those sizes (eq. 9)."""
