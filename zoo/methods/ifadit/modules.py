"""iFADIT's networks under the paper's names (Yuan et al., Sec. 3).

* :data:`SIF` - the Secure Identity Flow T (eq. 5-6): affine coupling blocks with the key in every
  subnet, exact inverse (:class:`zoo.nn.flows.SecureIdentityFlow`, also used by the other flows);
* :class:`LatentMapper` - the mapping network M_map (eq. 2): [R(z), a] -> W+;
* :class:`ICL` - the Identity Compensation Layer C (Sec. 3.4, eq. 10);
* :func:`keygen_vectors` - KeyGen (eq. 4).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from ...hub import HubModule
from ...keys import KeyMaterial
from ...nn.flows import SecureIdentityFlow

SIF = SecureIdentityFlow


KEYGEN_CONTEXT = "ifadit-keygen"
#: KDF context of the demo's keyed shift (IFADITDemo.keyed_shift)
KEYED_SHIFT_CONTEXT = "ifadit-keyed-shift"


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


class ICL(HubModule):
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


def keygen_vectors(generator: nn.Module, keys: Sequence[KeyMaterial], low: float = -1.0, high: float = 1.0) -> torch.Tensor:
    """KeyGen (eq. 4): KDF key material -> uniform vector in [low, high) -> StyleGAN mapping f.

    ``keys``: one :class:`KeyMaterial` per face -> ``[N, style_dim]`` secret vectors k.
    """
    dev = next(generator.parameters()).device
    u = torch.stack([k.uniform(generator.style_dim, low, high, context=KEYGEN_CONTEXT) for k in keys]).to(dev)
    return generator.mapping(u)


#: the class's descriptive name
IdentityCompensation = ICL
