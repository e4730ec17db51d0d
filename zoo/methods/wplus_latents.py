"""The FFHQ-grade latent space the reversible demo methods run their keyed transforms in (config ``latent_space:
wplus``, :mod:`zoo.methods.latent_demo`)."""

from __future__ import annotations

from typing import Sequence

import torch

from ..keys import KeyMaterial

__all__ = ["WPlusLatents", "at_norm"]


def at_norm(u: torch.Tensor, norm: float | None) -> torch.Tensor:
    """Each row of the identity codes ``u`` ``[N,100]`` scaled to length ``norm`` (``u`` itself where ``norm`` is None)."""
    return u if norm is None else norm * u / u.norm(dim=-1, keepdim=True).clamp_min(1e-6)


class WPlusLatents:
    """The FFHQ-grade latent space of the demo tier (config ``latent_space: wplus``).

    codes: W+ ``[N,23,512]`` of :mod:`zoo.nn.mobilestylegan`; faces: FFHQ-aligned ``[N,3,256,256]`` in [-1,1];
    identity codes: u ``[N,100]`` (:class:`~zoo.nn.wplus_identity.WPlusIdentity`, about N(0, I) like the DCGAN
    latent the keyed transforms were trained on). :meth:`encode` = the W+ encoder's estimate, then
    ``steps`` Adam steps (with SFace's identity term at ``identity_weight``) from it turned to the head's pose
    (:func:`~zoo.inversion.invert_wplus`; ``pose_angles``: which angles, method config ``wplus.pose_angles``;
    ``face_weight``: the face-region term of :func:`~zoo.inversion.reconstruction_loss`, the methods' control
    ``face_fit``, 3 by default).
    """

    resolution = 256

    def __init__(self, pose_angles: Sequence[str] | None = None):
        from ..inversion import DEFAULT_POSE_ANGLES, POSE_ANGLES
        from ..nn.wplus_identity import load_wplus_identity

        self.pose_angles = tuple(DEFAULT_POSE_ANGLES if pose_angles is None else pose_angles)
        if not set(self.pose_angles) <= set(POSE_ANGLES):
            raise ValueError(f"wplus.pose_angles must be among {list(POSE_ANGLES)}, got {list(self.pose_angles)}")
        self.identity = load_wplus_identity()
        self.generator_on(torch.device("cpu"))  # loads (and on first use converts) it now: a missing wheel fails here

    @property
    def generator(self):
        """The frozen generator on the CPU (:func:`~zoo.nn.mobilestylegan.load_mobilestylegan`)."""
        return self.generator_on(torch.device("cpu"))

    @staticmethod
    def generator_on(device: torch.device):
        """The frozen generator on ``device``: one shared copy per device, so faces on an accelerator are drawn there."""
        from ..nn.mobilestylegan import load_mobilestylegan

        return load_mobilestylegan(device)

    def rotations(self, keys: Sequence[KeyMaterial], context: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The keyed rotations of :meth:`~zoo.nn.wplus_identity.WPlusIdentity.with_code`, one pair per face."""
        c = self.identity.complement_dim
        # torch's CPU generator seeded from the key material (KeyMaterial.generator): the same draws on every
        # machine, ~100x faster than KeyMaterial.normal for these 430k numbers per face
        normals = torch.stack([torch.randn(512 * 512, generator=k.generator(f"{context}/wplus/deviations")) for k in keys])
        residual = torch.stack([torch.randn(c * c, generator=k.generator(f"{context}/wplus/residual")) for k in keys])
        return self.identity.rotations(normals, residual)

    def encode(self, x: torch.Tensor, steps: int = 0, identity_weight: float = 0.0, face_weight: float = 0.0) -> torch.Tensor:
        from ..inversion import encode_wplus, invert_wplus

        generator = self.generator_on(x.device)
        if int(steps) > 0:
            return invert_wplus(
                x, int(steps), generator=generator, identity_weight=float(identity_weight), face_weight=float(face_weight), pose_angles=self.pose_angles
            ).wplus
        start = encode_wplus(x, generator=generator, pose_angles=self.pose_angles)
        return generator.mean_wplus(x.shape[0]).to(x) if start is None else start

    def decode(self, wplus: torch.Tensor) -> torch.Tensor:
        from ..inversion import draw_fitted

        return draw_fitted(self.generator_on(wplus.device), wplus, self.resolution)

    def posed(self, target: torch.Tensor, wplus: torch.Tensor) -> torch.Tensor:
        """W+ ``[N,23,512]`` turned to the face-mesh pose (:attr:`pose_angles`) of the FFHQ-aligned faces
        ``target [N,3,256,256]`` in [-1,1] (:func:`~zoo.inversion.pose_corrected`; a face the mesh cannot read keeps
        its code): the identity edit moves the pose slots too."""
        from ..inversion import pose_corrected

        return pose_corrected(target, wplus, self.generator_on(target.device), self.pose_angles)

    @property
    def drawn_slots(self) -> tuple[int, ...]:
        """The W+ slots a :attr:`resolution` px face is drawn from: the blocks up to that size and the image head's."""
        from ..nn.mobilestylegan import SLOT_RESOLUTIONS, TO_IMG_SLOT

        return tuple(s for s, r in enumerate(SLOT_RESOLUTIONS) if r <= self.resolution) + (TO_IMG_SLOT,)

    def carried_rows(self, wplus: torch.Tensor) -> torch.Tensor:
        """W+ ``[N,23,512]`` -> what the carrier writes (:mod:`zoo.carrier`): the :attr:`drawn_slots` minus the
        generator's mean style, ``[N, len(drawn_slots), 512]``."""
        return wplus[:, list(self.drawn_slots)] - self.identity.w_mean.to(wplus)

    def from_carried_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`carried_rows`; the slots no :attr:`resolution` px face reads get the mean style."""
        from ..nn.mobilestylegan import NUM_SLOTS

        wplus = self.identity.w_mean.to(rows).expand(rows.shape[0], NUM_SLOTS, -1).clone()
        wplus[:, list(self.drawn_slots)] = rows + self.identity.w_mean.to(rows)
        return wplus
