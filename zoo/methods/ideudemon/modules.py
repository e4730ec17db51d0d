"""IDEudemon's building blocks (Wen et al.): the keyed identity noise of Step I (eq. 3) and the visual
similarity assistance (VSA, Sec. 3.3) that builds Step II's input X_l from X and the render X_p."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from ...keys import KeyMaterial

#: the zoo name of the method
METHOD_NAME = "ideudemon"
NOISE_CONTEXT = "ideudemon/id-noise"
#: the noise std of eq. 3: default (the paper recommends 0.2-0.3) and the largest the paper studies
SCALE_DEFAULT, SCALE_MAX = 0.25, 0.40
#: how much each privacy-guard variant raises the noise std (variants 1, 2, 3 of the default: 0.30, 0.35, 0.40)
GUARD_SCALE_STEP = 0.05
#: parser classes of the styling mask (kept from X) and of the face region (taken from X_p)
STYLING_CLASSES = ("hair", "hat", "eye_g", "ear_r", "neck_l")
FACE_CLASSES = ("skin", "l_brow", "r_brow", "l_eye", "r_eye", "l_ear", "r_ear", "nose", "mouth", "u_lip", "l_lip")
ROI_NAMES = ("left_eye", "right_eye", "mouth")


def id_noise(keys: Sequence[KeyMaterial], dim: int) -> torch.Tensor:
    """``[N, dim]`` standard normal noise, one row per key (deterministic in the key material)."""
    return torch.stack([k.normal(dim, context=NOISE_CONTEXT) for k in keys])


def hybrid_image(x: torch.Tensor, x_p: torch.Tensor, face_x: torch.Tensor, face_p: torch.Tensor, styling: torch.Tensor | None = None) -> torch.Tensor:
    """Visual similarity assistance (Sec. 3.3): ``S X + (1 - S) [F_p X_p + (1 - F_p) (K X + (1 - K) X_p)]``.

    ``x``, ``x_p`` ``[N,3,R,R]``; masks ``[N,1,R,R]`` in [0,1]: ``face_x``/``face_p`` face regions of X and
    X_p, ``styling`` hair/accessories of X (default none); K = 1 - face_x.
    """
    keep_x = 1.0 - face_x
    x_l = face_p * x_p + (1 - face_p) * (keep_x * x + (1 - keep_x) * x_p)
    return x_l if styling is None else styling * x + (1 - styling) * x_l


def dilate_mask(mask: torch.Tensor, radius: int) -> torch.Tensor:
    """Max-pool dilation of ``[N,1,H,W]`` masks by ``radius`` pixels."""
    if radius <= 0:
        return mask
    return F.max_pool2d(mask, 2 * radius + 1, stride=1, padding=radius)


STEP_ONE_LABEL = (
    "demo: Step I only (offline mesh backend: shape + texture spaces learned here from synthetic faces), "
    "no trained restorer; not the paper's HeadNeRF / GFPGAN weights"
)


RESTORER_LABEL = (
    "demo: Step I on the offline mesh backend (shape + texture spaces learned here from synthetic faces) + "
    "a small GFPGAN-style restorer trained here on CPU at 64 px on synthetic faces (losses of eq. 5-9, "
    "SFace-torch for the identity and perceptual terms); not the paper's HeadNeRF / GFPGAN weights"
)


RESTORER_OFF_LABEL = (
    "demo: Step I only by default (offline mesh backend: shape + texture spaces learned here from synthetic "
    "faces); a small GFPGAN-style restorer trained here on CPU (64 px, synthetic faces) ships switched off "
    "(it raised the head-pose error; method.use_restorer = True runs it); not the paper's HeadNeRF / GFPGAN weights"
)


FFHQ_PRIOR_LABEL = (
    "demo: Step I on the offline mesh backend (shape + texture spaces learned here from synthetic faces); Step II on "
    "the FFHQ prior: the W+ encoder trained here and the FFHQ-grade generator (MobileStyleGAN, distilled from "
    "StyleGAN2-FFHQ) draw the face; not the paper's HeadNeRF / GFPGAN weights"
)
