"""Secure Identity Flow (SIF) of iFADIT (Yuan et al., "iFADIT: Invertible Face Anonymization via
Disentangled Identity Transform", Sec. 3.3): a key-conditioned invertible map of the identity vector.

    z_anon = T(z, k),   z = T^-1(z_anon, k)          (eq. 3)

``z`` is the (unit-norm) identity embedding [N, dim], ``k`` the secret vector [N, key_dim] from KeyGen
(eq. 4, see :mod:`zoo.methods.ifadit`). Two block types, chosen by ``block``:

* ``"sacb"`` -- the paper's *secure affine coupling block* (RealNVP coupling, eq. 5-8). The identity is
  split into halves (z1, z2); four subnets omega, phi, rho, eta (MLPs) each read a half concatenated
  with the key (256 + 512 = 768 -> 256 at 512-d identity)::

      z2' = z2 * exp(a(omega([z1, k]))) + phi([z1, k])        (eq. 5)
      z1' = z1 * exp(a(rho([z2', k])))  + eta([z2', k])       (eq. 6)

  with a(s) = clamp * sigmoid(s) ("Sigmoid multiplied by a constant factor"). The inverse is eq. 7-8.
* ``"allinone"`` -- the layout of the authors' released code (lixionga/ProFace ``FacePrivacy/iFADIT``,
  ``models/id_transformer/inn.py``), a FrEIA ``SequenceINN`` of four ``AllInOneBlock``s conditioned on
  the key: one subnet per block predicts (s, t) for the second half from [x1, k]; the coupling is
  ``x2 * exp(clamp * tanh(0.1 s)) + 0.1 t``, followed by a global affine (softplus-activated scale,
  offset) and a fixed channel permutation. Parameter names follow FrEIA (``global_scale``,
  ``global_offset``, ``w_perm``, ``w_perm_inv``, ``subnet.{0,2,4,6,8}``) so the released weights load
  through :func:`zoo.methods.ifadit.convert_ifadit_sif`.

Both are exactly invertible: ``flow.inverse(flow(z, k), k) == z`` up to float rounding, for any k.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from zoo.hub import HubModule

__all__ = ["subnet_mlp", "SecureAffineCouplingBlock", "AllInOneCouplingBlock", "SecureIdentityFlow", "BLOCK_TYPES"]

BLOCK_TYPES = ("sacb", "allinone")


def subnet_mlp(d_in: int, d_out: int, hidden: Sequence[int], negative_slope: float = 0.01) -> nn.Sequential:
    """Linear-LeakyReLU stack ``d_in -> hidden... -> d_out`` (indices 0, 2, 4, ... are the Linear layers)."""
    layers: list[nn.Module] = []
    prev = d_in
    for h in hidden:
        layers += [nn.Linear(prev, h), nn.LeakyReLU(negative_slope)]
        prev = h
    layers.append(nn.Linear(prev, d_out))
    return nn.Sequential(*layers)


def _with_key(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """[x, k] along the feature axis; ``k`` [1, key_dim] is broadcast to the batch."""
    if k.shape[0] != x.shape[0]:
        k = k.expand(x.shape[0], -1)
    return torch.cat([x, k], dim=1)


class SecureAffineCouplingBlock(nn.Module):
    """One SACB (eq. 5-6 forward, eq. 7-8 inverse). ``z [N, dim], k [N, key_dim] -> [N, dim]``."""

    def __init__(self, dim: int, key_dim: int, hidden: Sequence[int], clamp: float = 1.0, negative_slope: float = 0.01):
        super().__init__()
        self.d1 = dim - dim // 2
        self.d2 = dim // 2
        self.clamp = float(clamp)
        self.omega = subnet_mlp(self.d1 + key_dim, self.d2, hidden, negative_slope)  # log-scale of z2
        self.phi = subnet_mlp(self.d1 + key_dim, self.d2, hidden, negative_slope)  # shift of z2
        self.rho = subnet_mlp(self.d2 + key_dim, self.d1, hidden, negative_slope)  # log-scale of z1
        self.eta = subnet_mlp(self.d2 + key_dim, self.d1, hidden, negative_slope)  # shift of z1

    def a(self, s: torch.Tensor) -> torch.Tensor:
        """The paper's activation a(.) = constant * sigmoid(.)."""
        return self.clamp * torch.sigmoid(s)

    def forward(self, z: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        z1, z2 = z.split([self.d1, self.d2], dim=1)
        c1 = _with_key(z1, k)
        z2 = z2 * torch.exp(self.a(self.omega(c1))) + self.phi(c1)  # eq. 5
        c2 = _with_key(z2, k)
        z1 = z1 * torch.exp(self.a(self.rho(c2))) + self.eta(c2)  # eq. 6
        return torch.cat([z1, z2], dim=1)

    def inverse(self, z: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        z1, z2 = z.split([self.d1, self.d2], dim=1)
        c2 = _with_key(z2, k)
        z1 = (z1 - self.eta(c2)) * torch.exp(-self.a(self.rho(c2)))  # eq. 7
        c1 = _with_key(z1, k)
        z2 = (z2 - self.phi(c1)) * torch.exp(-self.a(self.omega(c1)))  # eq. 8
        return torch.cat([z1, z2], dim=1)


def _permutation_matrix(dim: int, seed: int) -> torch.Tensor:
    """Hard permutation P [dim, dim] with ``F.linear(x, P)[:, i] == x[:, perm[i]]`` (FrEIA's convention)."""
    g = torch.Generator().manual_seed(int(seed))
    perm = torch.randperm(dim, generator=g)
    w = torch.zeros(dim, dim)
    w[torch.arange(dim), perm] = 1.0
    return w


class AllInOneCouplingBlock(nn.Module):
    """FrEIA ``AllInOneBlock`` (conditional, hard permutation, SOFTPLUS global affine), as in the
    official iFADIT code. ``z [N, dim], k [N, key_dim] -> [N, dim]``.

    forward: x1, x2 = split(x); (s, t) = 0.1 * subnet([x1, k]); x2 = x2 * exp(clamp * tanh(s)) + t;
    y = P (scale * [x1, x2] + offset) with scale = 0.1 * softplus_{beta=0.5}(global_scale).
    """

    def __init__(self, dim: int, key_dim: int, hidden: Sequence[int], clamp: float = 2.0, permute_seed: int = 0, negative_slope: float = 0.01):
        super().__init__()
        self.d1 = dim - dim // 2
        self.d2 = dim // 2
        self.clamp = float(clamp)
        # FrEIA's init: global_affine_init = 1 -> softplus pre-activation 2 * log(exp(5) - 1).
        self.global_scale = nn.Parameter(torch.full((1, dim), 2.0 * math.log(math.exp(5.0) - 1.0)))
        self.global_offset = nn.Parameter(torch.zeros(1, dim))
        w = _permutation_matrix(dim, permute_seed)
        # FrEIA stores these as frozen Parameters; buffers keep the same state-dict names and stay frozen.
        self.register_buffer("w_perm", w)
        self.register_buffer("w_perm_inv", w.t().contiguous())
        self.subnet = subnet_mlp(self.d1 + key_dim, 2 * self.d2, hidden, negative_slope)

    def _global_scale(self) -> torch.Tensor:
        return 0.1 * F.softplus(self.global_scale, beta=0.5)

    def _coeffs(self, x1: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.subnet(_with_key(x1, k)) * 0.1
        return self.clamp * torch.tanh(a[:, : self.d2]), a[:, self.d2 :]

    def forward(self, z: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        x1, x2 = z.split([self.d1, self.d2], dim=1)
        s, t = self._coeffs(x1, k)
        x = torch.cat([x1, x2 * torch.exp(s) + t], dim=1)
        return F.linear(x * self._global_scale() + self.global_offset, self.w_perm)

    def inverse(self, y: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        x = (F.linear(y, self.w_perm_inv) - self.global_offset) / self._global_scale()
        x1, x2 = x.split([self.d1, self.d2], dim=1)
        s, t = self._coeffs(x1, k)
        return torch.cat([x1, (x2 - t) * torch.exp(-s)], dim=1)


class SecureIdentityFlow(HubModule):
    """T(z, k): ``n_blocks`` key-conditioned coupling blocks over the identity vector (Sec. 3.3.2).

    Args:
        dim: identity dimension (512 with ArcFace).
        key_dim: secret-vector dimension (512: a StyleGAN w).
        n_blocks: number of coupling blocks N (4 in the official code).
        hidden: hidden widths of every subnet MLP (official: 256, 128, 128, 256).
        block: ``"sacb"`` (paper, eq. 5-8) or ``"allinone"`` (official FrEIA layout).
        clamp: the constant of a(.) (sacb) / FrEIA's ``affine_clamping`` (allinone, 2.0 official).
        permute_seed: seed of the fixed permutations of ``"allinone"`` blocks (block i uses seed + i).

    ``forward(z [N, dim], k [N or 1, key_dim]) -> z_anon [N, dim]``; :meth:`inverse` undoes it.
    """

    def __init__(
        self,
        dim: int = 512,
        key_dim: int = 512,
        n_blocks: int = 4,
        hidden: Sequence[int] = (256, 128, 128, 256),
        block: str = "sacb",
        clamp: float = 1.0,
        permute_seed: int = 0,
        negative_slope: float = 0.01,
    ):
        super().__init__()
        if block not in BLOCK_TYPES:
            raise ValueError(f"block must be one of {BLOCK_TYPES}, got {block!r}")
        self.dim, self.key_dim, self.block = int(dim), int(key_dim), block
        hidden = [int(h) for h in hidden]
        if block == "sacb":
            self.blocks = nn.ModuleList(SecureAffineCouplingBlock(dim, key_dim, hidden, clamp, negative_slope) for _ in range(n_blocks))
        else:
            self.blocks = nn.ModuleList(AllInOneCouplingBlock(dim, key_dim, hidden, clamp, permute_seed + i, negative_slope) for i in range(n_blocks))

    def _check(self, z: torch.Tensor, k: torch.Tensor) -> None:
        if z.ndim != 2 or z.shape[1] != self.dim:
            raise ValueError(f"identity must be [N, {self.dim}], got {tuple(z.shape)}")
        if k.ndim != 2 or k.shape[1] != self.key_dim or k.shape[0] not in (1, z.shape[0]):
            raise ValueError(f"key must be [N or 1, {self.key_dim}], got {tuple(k.shape)} for N={z.shape[0]}")

    def forward(self, z: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Anonymize: z [N, dim] -> z_anon [N, dim] under key vectors k (eq. 5-6 per block)."""
        self._check(z, k)
        for blk in self.blocks:
            z = blk(z, k)
        return z

    def inverse(self, z: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """De-anonymize: z_anon [N, dim] -> z [N, dim] with the same key vectors (eq. 7-8 per block)."""
        self._check(z, k)
        for blk in reversed(self.blocks):
            z = blk.inverse(z, k)
        return z
