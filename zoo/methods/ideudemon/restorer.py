"""Step II's restorer G (Sec. 3.4): the FFHQ-prior restorer the shipped checkpoint runs, the identity-perceptual loss
network of eq. 8 for training a GFPGAN-style one, and the export of a trained restorer into a checkpoint."""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ...keys import KeyMaterial
from ...nn.ops import resize_images
from .modules import METHOD_NAME


class FFHQPriorRestorer:
    """G(X_l) on the FFHQ prior (config ``step2.prior: ffhq``): the paper's restorer is GFPGAN, a U-Net that maps the
    degraded face into a pretrained StyleGAN2-FFHQ's latent space and modulates its features (CS-SFT). Here the
    latent path alone, with networks that ship: the W+ encoder trained here (:func:`zoo.inversion.encode_wplus`,
    turned to the head's yaw) maps X_l into the W+ of the FFHQ-grade generator (:mod:`zoo.nn.mobilestylegan`,
    distilled from StyleGAN2-FFHQ), which draws the photo-real face at 256 px. No spatial features pass from X_l,
    so the face is the generator's: pose, shape, tone and lighting of the render, fine detail and teeth the prior's.
    With keys and ``step2.key_style`` the identity slots of the code move toward a key-seeded style, so two keys
    draw two people (the encoder alone maps the keyed renders of one face to nearly one person); a code whose pose
    slots were mixed is turned to the head's yaw afterwards (:func:`zoo.inversion.pose_corrected`). Nothing here is
    trained for IDEudemon.

    ``x_l`` FFHQ-aligned ``[N,3,R,R]`` in [-1,1] -> ``[N,3,R,R]`` in [-1,1] (resized to and from 256 px)."""

    size = 256

    def __init__(self, key_style: dict[str, Any] | None = None):
        ks = dict(key_style or {})
        #: ``step2.key_style.weight`` in [0,1]: how far the identity slots move toward the key's style (0: off)
        self.key_weight = float(ks.get("weight", 0.0))
        #: ``step2.key_style.slots`` [first, last+1] of the W+ slots that take the key's style
        self.key_slots = tuple(int(v) for v in ks.get("slots", (4, 13)))
        #: ``step2.key_style.psi``: truncation of the key's style toward the generator's mean
        self.key_psi = float(ks.get("psi", 0.7))
        if not 0.0 <= self.key_weight <= 1.0:
            raise ValueError(f"step2.key_style.weight must be in [0, 1], not {self.key_weight}")
        if len(self.key_slots) != 2 or not 0 <= self.key_slots[0] < self.key_slots[1]:
            raise ValueError(f"step2.key_style.slots must be [first, end] with first < end, not {list(self.key_slots)}")

    def key_styles(self, keys: Sequence[KeyMaterial], generator: Any) -> torch.Tensor:
        """One style per key, ``[N,512]``: the mapping of a key-seeded standard normal z, truncated by ``psi``."""
        z = torch.stack([k.normal(generator.w_avg.shape[0], context=f"{METHOD_NAME}/prior-style") for k in keys])
        with torch.no_grad():
            return generator.style(z.to(generator.w_avg.device), self.key_psi)

    def keyed(self, keys: Sequence[KeyMaterial] | None) -> bool:
        """Whether the keys' styles enter the code: keys given and ``key_weight`` > 0."""
        return keys is not None and self.key_weight > 0.0

    def mix_key_style(self, wplus: torch.Tensor, keys: Sequence[KeyMaterial] | None, generator: Any) -> torch.Tensor:
        """W+ ``[N,23,512]`` with slots ``key_slots`` moved by ``key_weight`` toward each key's style; unchanged
        without keys or at weight 0."""
        if not self.keyed(keys):
            return wplus
        if len(keys) != wplus.shape[0]:
            raise ValueError(f"need one key per face: {len(keys)} keys for {wplus.shape[0]} faces")
        a, b = self.key_slots
        out = wplus.clone()
        out[:, a:b] = torch.lerp(wplus[:, a:b], self.key_styles(keys, generator).to(wplus)[:, None], self.key_weight)
        return out

    def __call__(self, x_l: torch.Tensor, keys: Sequence[KeyMaterial] | None = None) -> torch.Tensor:
        from ...inversion import POSE_SLOTS, draw_fitted, encode_wplus, pose_corrected
        from ...nn.mobilestylegan import load_mobilestylegan

        generator = load_mobilestylegan(x_l.device)
        r, s = x_l.shape[-1], self.size
        target = resize_images(x_l, s).float()
        turn_after = self.keyed(keys) and self.key_slots[0] < POSE_SLOTS
        wplus = encode_wplus(target, correct_pose=not turn_after, generator=generator)
        if wplus is None:
            raise FileNotFoundError("ideudemon step2.prior 'ffhq' needs the W+ encoder (zoo/weights/wplus_encoder)")
        wplus = self.mix_key_style(wplus, keys, generator)
        if turn_after:  # the key's style replaced pose slots too: turn the mixed code to the head's yaw
            wplus = pose_corrected(target, wplus, generator)
        with torch.no_grad():
            face = draw_fitted(generator, wplus, s).to(x_l.dtype)
        return resize_images(face, r)


class SFacePerceptual(nn.Module):
    """phi of eq. 5 for the demo (no VGG-19 ImageNet weights offline): the pretrained SFace-torch trunk
    (:mod:`zoo.nn.sface`) on the SFace-aligned 112 px crop of FFHQ-aligned images; the loss is
    ``sum_l mean|phi_l(x) - phi_l(y)|`` over the outputs of trunk blocks ``layers`` (default: the last
    layer at 56, 28, 14 and 7 px)."""

    DEFAULT_LAYERS = (6, 10, 22, 26)

    def __init__(self, layers: Sequence[int] | None = None):
        super().__init__()
        from ...nn.sface import load_sface

        self.net = load_sface().eval().requires_grad_(False)
        self.layers = tuple(int(i) for i in (layers or self.DEFAULT_LAYERS))

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        from ...nn.sface import ffhq_to_sface_theta

        theta = ffhq_to_sface_theta(x.shape[-1]).to(x)
        grid = F.affine_grid(theta.expand(x.shape[0], 2, 3), [x.shape[0], 3, 112, 112], align_corners=False)
        h = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False) * (127.5 / 128.0)
        feats = []
        for i, layer in enumerate(self.net.trunk):
            h = layer(h)
            if i in self.layers:
                feats.append(h)
            if i >= max(self.layers):
                break
        return feats

    def perceptual_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        fx, fy = self.features(x), self.features(y.detach())
        return sum(F.l1_loss(a, b) for a, b in zip(fx, fy))  # type: ignore[return-value]


def export_restorer(trained: str, out: str, fp16: bool = True, config: dict[str, Any] | None = None, state: str | None = None) -> None:
    """A trained IDEudemon folder (restorer + discriminators) -> an inference checkpoint in ``out``: the
    restorer only (the discriminators are training-only), in fp16 by default, plus the spaces and the
    trained config (or ``config``, e.g. the recipe with inference settings changed). ``state``: the
    trainer's ``state/model.safetensors``, whose raw (non-EMA) restorer weights replace the model
    folder's EMA ones (an EMA of decay 0.999 without warmup still holds 0.999^N of the random
    initialisation after N steps: 55% after 600)."""
    from safetensors.torch import load_file

    from ...hub import load_components, save_components

    stored, components, extra = load_components(trained, expected_method=METHOD_NAME)
    config = dict(config) if config is not None else stored
    keep = {k: v for k, v in components.items() if k in ("restorer", "face_parser", "headnerf")}
    if state:
        prefix = "components.restorer."
        raw = {k[len(prefix) :]: v for k, v in load_file(state).items() if k.startswith(prefix)}
        keep["restorer"].load_state_dict(raw, strict=True)
    if fp16:
        keep["restorer"] = keep["restorer"].half()
    save_components(out, METHOD_NAME, keep, config, extra)


def has_restorer(config: dict[str, Any]) -> bool:
    return bool((config.get("step2", {}) or {}).get("restorer", True))
