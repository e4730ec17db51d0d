"""HFORD's modules under the paper's names (Chen et al., Sec. III).

The networks are shared with DBAF (same group, same designs) and implemented once in
:mod:`zoo.nn.identity_levels`; here they take HFORD's names and equations.

* :class:`IDM` - Identity Disentanglement Module (eq. 1-2): a ViT-style multi-head attention
  transformer per W+ level (coarse 1-4, medium 5-8, fine 9-14 at 256 px) gives the attribute code A;
  I = C - A.
* :class:`CMLPs` - the three conditional MLPs: I_hat_z = cMLP_z(I_z, P_z) per level; C_hat = I_hat + A.
* :class:`ARM` - Attribute Retention Module (eq. 3-5): ARM(M) = SA(CA(Conv(M))) * CA(Conv(M)) * Conv(M)
  on e4e's 16/32/64 px feature maps, fused into StyleGAN2.
"""

from __future__ import annotations

from ...nn.identity_levels import AttributeRetention, IdentityDisentangler, KeyedIdentityEditor

__all__ = ["IDM", "CMLPs", "ARM"]


class IDM(IdentityDisentangler):
    """Identity Disentanglement Module (eq. 1-2): one transformer per level ("the IDM of the
    corresponding scale", Sec. III-C). codes C [N, n_latent, 512] -> A, same shape; :meth:`split`
    gives (A, I = C - A)."""


class CMLPs(KeyedIdentityEditor):
    """The three password-conditioned MLPs (Sec. III-B): identity I and password latents P, both
    [N, n_latent, 512] -> edited identity, same shape. Recovery runs them again with the same password
    (learned through L_rev, eq. 12)."""


class ARM(AttributeRetention):
    """Attribute Retention Module (eq. 3-5): {16|32|64: e4e map [N, C_in, s, s]} -> {s: [N, C_out, s, s]}."""
