"""Cao et al.'s identity rotation on the demo backbone: :class:`PersonalDemo`."""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F

from ...keys import KeyMaterial
from ..base import Control
from ..latent_demo import FIT_CONTROLS, LatentDemoMethod
from .method import Personal
from .passwords import PasswordReferences


class PersonalDemo(PasswordReferences, LatentDemoMethod):
    """Cao et al.'s identity rotation (eq. 13-17) and password library on the demo backbone.

    Mapping to the paper: the 100-d identity code u of :mod:`zoo.methods.latent_demo` is the identity the
    paper rotates; its direction u / |u| is the unit identity z_bar, and its norm |u| is kept. On W+ (the
    shipped default) u is the whitened identity code of the middle W+ slots (:mod:`zoo.nn.wplus_identity`):
    the rest of the W+ code keeps pose, expression, hair and lighting, as E_attr keeps the attributes, and
    the key also rotates the identity slots' deviations. On the DCGAN (the tests' small backbone) u is z
    itself and pose is not kept. The reference library holds the directions of M synthetic identities
    (``config.library``); f(p), g(d) and the closed-form inverse are the paper's, unchanged. Nothing here
    is trained beyond the backbone's encoder.
    """

    name = "personal"
    summary = Personal.summary
    paper = Personal.paper
    reversible = True
    uses_key = True
    # Default level 4 (g = 95 deg), not the paper's 5, and the reference oriented (orient_reference; not in
    # the paper). Every password's code keeps cos g(d) of the original direction, so two passwords give
    # look-alikes away from 90 deg. With the paper's rule, levels 2-6 are not exactly invertible in a 100-d
    # code (a face overlaps a 10-identity mix by |A| ~ 0.1): on the DCGAN, right-key recovery 0.72-0.74 at
    # d = 3-4 (benchmarks/personal_levels.py, 100 faces). Oriented, recovery is 0.95-0.97 at every level, and
    # at d = 4 two passwords give the same person 0.21 against 0.30 at d = 7 (same faces). On W+ (20 tuning
    # faces x 3 passwords, benchmarks/personal_wplus_levels.py; SFace / FaceRes, not dlib) d = 4..7 moves the
    # drawn face's median cosine to the person only from 0.220 / 0.459 to 0.201 / 0.436, and the yaw change
    # from 2.2 to 2.6 deg.
    controls = (Control("level", "int", 4, 0, 9, "privacy level d: rotation g(d) = 70..85, 95..120 degrees"), *FIT_CONTROLS)

    @property
    def oriented_reference(self) -> bool:
        """On unless the config says ``oriented_reference: false`` (the paper's rule; the demo's levels 2-6
        are then not exactly invertible)."""
        return bool(self.config.get("oriented_reference", True))

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "PersonalDemo":
        from ...synthetic import latent_for

        config = dict(config)
        method = cls(config, cls.backbone_components(config))
        lib = dict(config.get("library") or {})
        seed, m, k = int(lib.get("seed", 7)), int(lib.get("identities", 1000)), int(lib.get("k", 10))
        base = torch.stack([latent_for(seed, i) for i in range(m)])
        method.set_reference_library(base, k=k, seed=seed)
        typical = F.normalize(torch.stack([latent_for(seed, m + i) for i in range(256)]), dim=1)
        method.config["library"]["overlap_prior"] = method._typical_overlap(typical, seed)
        return method

    def edit_latent(self, z: torch.Tensor, keys: Sequence[KeyMaterial], level: int = 4, **controls: Any) -> torch.Tensor:
        """M(z_bar, p, d) (eq. 13-14) on the direction, norm kept."""
        return F.normalize(self.rotated(z, keys, level), dim=1) * z.norm(dim=1, keepdim=True)

    def unedit_latent(self, z: torch.Tensor, keys: Sequence[KeyMaterial], level: int = 4, **controls: Any) -> torch.Tensor:
        """M^-1 (eq. 16-17) from the re-encoded direction (:func:`unrotate_direction`), norm kept."""
        return self.unrotated(z, keys, level) * z.norm(dim=1, keepdim=True)
