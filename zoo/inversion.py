"""Inversion of real faces into the W+ space of the FFHQ-grade generator (:mod:`zoo.nn.mobilestylegan`).

:func:`encode_wplus` gives the trained W+ encoder's estimate (:mod:`zoo.nn.wplus_encoder`) in one pass, with its
pose slots turned to the head's yaw as the face mesh measures it (:func:`pose_corrected`).
:func:`refine_wplus` fits W+ ``[B,23,512]`` so that the generator's 256 px draft image (``synthesis(..., draft=True)``,
a third of the cost of the full 256 px image) matches FFHQ-aligned crops, and :func:`draw_fitted` draws a fitted
code with that same network: the fit leans on the draft head's own rendering, and the full 256 px image of the same
code was further from the face (20 steps with SFace's identity term: SFace cosine median 0.895 against 0.954 on 7
tuning faces, ``benchmarks/results/fit_renderer.md``); fitting against the full image costs 2.6x the time for about
the same fidelity. Adam on W+ from a start code (the encoder's estimate, else ``w_avg`` in every slot), loss per face = L1 + L1 of 2x/4x/8x average-pooled
images + 0.5 x L1 of the grey-level gradients, optionally plus ``face_weight`` x the same L1 inside the face region
(brows to chin) at 1/2/4x, ``identity_weight`` x (1 - SFace cosine) and a pull ``prior_weight`` x mean squared distance
to the start code. :func:`reconstruct_photo` runs it on every face of a
photo (detect -> FFHQ-align at 256 px -> refine -> draw at the size the face has in the photo -> paste back), which
is what ``python -m zoo reconstruct`` writes: how well the backbone knows each face.

Images: float NCHW RGB in [-1,1]; photos uint8 ``[H,W,3]``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .face3d.landmarks import angle_difference
from .nn.mobilestylegan import DRAFT_SIZE, MobileStyleGAN, load_mobilestylegan

__all__ = [
    "ALIGN_SIZE",
    "DEFAULT_FACE_WEIGHT",
    "DEFAULT_IDENTITY_WEIGHT",
    "DEFAULT_STEPS",
    "draw_fitted",
    "POSE_SLOTS",
    "InversionResult",
    "encode_wplus",
    "invert_wplus",
    "mesh_poses",
    "pose_corrected",
    "reconstruct_photo",
    "reconstruction_loss",
    "refine_wplus",
]

ALIGN_SIZE = 256
#: the default refinement (``zoo reconstruct``, :func:`invert_wplus`): 40 steps with SFace's identity term at 1.0 and the
#: face-region term at :data:`DEFAULT_FACE_WEIGHT`. The step count was chosen on the fidelity-time curve of the tuning
#: faces (``benchmarks/results/reconstruct_real_curve.md``, without the face term: face PSNR median 22.1 / 23.4 / 24.3 /
#: 25.3 dB and face-mesh distance 7.5 / 6.4 / 5.9 / 5.0 px at 20 / 40 / 60 / 100 steps) as the most steps within 8 s per
#: face on 2 cores (about 0.16 s per step: 6.9 s per face at 40, 10.1 at 60). On the 2-core AMD EPYC of
#: ``benchmarks/results/method_speed_cpu.md`` a step costs about 0.33 s: 12.8-14.5 s for one face's default inversion.
DEFAULT_STEPS = 40
DEFAULT_IDENTITY_WEIGHT = 1.0
#: the face-region term of :func:`reconstruction_loss` in the default inversion, chosen with SFace's identity weight
#: on the 20 tuning faces at 40 steps, without dlib (``python -m benchmarks.reconstruct_real --split tuning --no-dlib
#: --start default --steps 40 --identity-weight I --face-weight W``, ``benchmarks/results/inversion_weights/``). Medians
#: for (I, W) = (1, 1) / (1, 2) / (1, 3) / (0.5, 1) / (2, 1) / (2, 3): face PSNR 25.7 / 26.6 / 26.8 / 26.3 / 24.9 / 25.9
#: dB, face-mesh distance 4.25 / 4.62 / 3.91 / 4.42 / 6.59 / 5.13 px, FaceRes cosine to the original (the guard's
#: recognizer, in no loss) 0.771 / 0.795 / 0.807 / 0.792 / 0.770 / 0.773. (1, 3) is the best on all three; the whole
#: 256 px crop loses 0.8 dB (22.8 -> 22.0), but ``zoo reconstruct`` pastes back only the face region this term weighs.
#: It and :data:`DEFAULT_STEPS` are also the W+ methods' fit defaults (``face_fit``, ``refine_steps``: ``zoo.methods.fit_controls``).
DEFAULT_FACE_WEIGHT = 3.0
#: Adam's learning rate, constant over the steps. On the 42 tuning faces at the default 40 steps, without dlib
#: (``python -m benchmarks.reconstruct_real --split tuning --no-dlib --start default --steps 40 --lr L --lr-decay D``,
#: ``benchmarks/results/inversion_lr/``), face PSNR / face-mesh px / FaceRes cosine medians: 25.3 / 3.33 / 0.799 at
#: (0.04, 0); 25.0 / 3.36 / 0.788 at 0.05 and 24.8 / 3.70 / 0.751 at 0.06; 24.7 / 4.15 / 0.779 at 0.04 decayed over
#: the last half; 0.08 lost the face on some (22.2 / 3.62 / 0.379 constant, 21.7 / 4.3 / 0.308 decayed). 40 steps stop
#: short of convergence, so a decay only slows them.
DEFAULT_LR = 0.04
#: the face mesh's angles the inversion can turn a code to, in the order :func:`mesh_poses` returns them
POSE_ANGLES = ("yaw", "pitch")
#: the generator's yaw and pitch directions in W (``training/wplus_pose.py``): the w step per degree, ``[512]`` each
POSE_DIRECTION_FILES = {angle: Path(__file__).resolve().parent / "weights" / "wplus_encoder" / f"{angle}_direction.safetensors" for angle in POSE_ANGLES}
#: the angles :func:`pose_corrected` turns by default. With pitch too (``("yaw", "pitch")``) and the methods' real-face fit
#: (20 steps with SFace's identity term), face-mesh |pitch change| median / p90, tuning 6.4 / 14.6 -> 3.9 / 8.0 degrees,
#: held-out 3.8 / 11.9 -> 2.9 / 8.3; yaw 2.7 -> 1.9 and 2.1 -> 2.6; SFace cosine 0.942 -> 0.946 and 0.935 -> 0.933
#: (``benchmarks/results/inversion_pose_identity.md``). Not the default until the whole-photo benchmarks are run with
#: it; the methods take it from config ``wplus.pose_angles``.
DEFAULT_POSE_ANGLES: tuple[str, ...] = ("yaw",)
#: W+ slots the pose correction moves: the 4 px conv, the 8 and 16 px blocks and the 32 px up-modulation (0-7).
#: Chosen on the 8 tuning faces whose encoder estimate was more than 4 degrees off in yaw, with one correction and
#: 20 refinement steps after it: yaw error (face mesh) median / max 6.5 / 36.1 degrees uncorrected, 3.4 / 7.3
#: moving slots 0-7, 5.0 / 7.3 slots 0-11, 6.4 / 8.1 every slot. The shipped setting on every real face:
#: ``benchmarks/results/inversion_pose.md``
POSE_SLOTS = 8
#: how many times :func:`pose_corrected` re-measures and moves a code: on 5 tuning faces the yaw error of the
#: start went 12.4 / 10.8 / 37.7 -> 3.9 / 8.3 / 20.4 -> 2.3 / 7.1 / 11.8 -> 1.6 / 4.7 / 2.3 degrees
POSE_ITERATIONS = 3


@dataclass
class InversionResult:
    """``wplus [B,23,512]``, ``image [B,3,256,256]`` (the generator at the fitted code), per-step mean loss."""

    wplus: torch.Tensor
    image: torch.Tensor
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    #: step -> (image [B,3,256,256], seconds so far) for each step asked for in ``snapshots``
    snapshots: dict[int, tuple[torch.Tensor, float]] = field(default_factory=dict)
    #: where the fit started: "encoder" (the W+ encoder's estimate) or "w_avg"
    start: str = "w_avg"


def _grey_gradients(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    g = x.mean(1, keepdim=True)
    return g[..., :, 1:] - g[..., :, :-1], g[..., 1:, :] - g[..., :-1, :]


@lru_cache(maxsize=4)
def _face_weights(size: int) -> tuple[torch.Tensor, ...]:
    """The face region of an FFHQ-aligned ``size`` px crop (:func:`zoo.paste.face_mask`, brows to chin) at 1x, 2x and
    4x average pooling, ``[1,1,s,s]`` each, scaled so that each sums to 1 over its pixels and 3 channels."""
    from .paste import face_mask

    mask = torch.from_numpy(face_mask(size))[None, None]
    pooled = [mask] + [F.avg_pool2d(mask, k) for k in (2, 4)]
    return tuple(m / (3.0 * m.sum()) for m in pooled)


def reconstruction_loss(image: torch.Tensor, target: torch.Tensor, face_weight: float = 0.0) -> torch.Tensor:
    """Per-face ``[B]``: L1 + L1 at 2/4/8x average pooling + 0.5 x grey-gradient L1 (all on [-1,1] pixels), plus
    ``face_weight`` x the mean L1 inside the face region at 1/2/4x pooling (:func:`_face_weights`; FFHQ-aligned
    square images)."""
    loss = (image - target).abs().flatten(1).mean(1)
    for k in (2, 4, 8):
        loss = loss + (F.avg_pool2d(image, k) - F.avg_pool2d(target, k)).abs().flatten(1).mean(1)
    for a, b in zip(_grey_gradients(image), _grey_gradients(target)):
        loss = loss + 0.5 * (a - b).abs().flatten(1).mean(1)
    if face_weight > 0:
        for k, weights in zip((1, 2, 4), _face_weights(image.shape[-1])):
            a, b = (image, target) if k == 1 else (F.avg_pool2d(image, k), F.avg_pool2d(target, k))
            loss = loss + face_weight * ((a - b).abs() * weights.to(image)).flatten(1).sum(1)
    return loss


def draw_fitted(generator: MobileStyleGAN, wplus: torch.Tensor, size: int = ALIGN_SIZE) -> torch.Tensor:
    """RGB ``[B,3,size,size]`` in about [-1,1] of W+ codes the inversion fitted (or its encoder, trained on the same
    images, estimated): the 256 px draft at 256 px, the network the fit drew with; the full network above."""
    return generator.synthesis(wplus, size, draft=size == DRAFT_SIZE)


def refine_wplus(
    target: torch.Tensor,
    steps: int = DEFAULT_STEPS,
    *,
    generator: MobileStyleGAN | None = None,
    start: torch.Tensor | None = None,
    lr: float = DEFAULT_LR,
    identity_weight: float = 0.0,
    prior_weight: float = 0.0,
    face_weight: float = 0.0,
    lr_decay: float = 0.0,
    snapshots: tuple[int, ...] = (),
) -> InversionResult:
    """Fit W+ to FFHQ-aligned ``target [B,3,256,256]`` in [-1,1] with ``steps`` Adam steps (see module doc).

    Faces are fitted together but independently (the loss is a sum of per-face terms). ``snapshots``: steps at
    which the image is also kept (a fidelity-time curve from one run). ``lr_decay``: the last fraction of the steps
    over which the learning rate falls to 0 along a half cosine (0: constant ``lr``). Works under
    ``inference_mode``/``no_grad`` callers.
    """
    if target.ndim != 4 or target.shape[1:] != (3, ALIGN_SIZE, ALIGN_SIZE):
        raise ValueError(f"target must be [B,3,{ALIGN_SIZE},{ALIGN_SIZE}], got {list(target.shape)}")
    g = generator or load_mobilestylegan(target.device)
    t0 = time.perf_counter()
    with torch.inference_mode(False), torch.enable_grad():
        target = target.detach().clone()
        w0 = (g.mean_wplus(target.shape[0]) if start is None else start).detach().clone().to(target)
        w = w0.clone().requires_grad_(True)
        identity, target_id = None, None
        if identity_weight > 0:
            from .nn.sface import load_sface

            identity = load_sface(target.device)
            with torch.no_grad():
                target_id = identity.embed_aligned(target)
        opt = torch.optim.Adam([w], lr=lr)
        losses, kept = [], {}
        for step in range(1, int(steps) + 1):
            for group in opt.param_groups:
                group["lr"] = lr * _decay_factor(step, int(steps), lr_decay)
            opt.zero_grad(set_to_none=True)
            image = draw_fitted(g, w)
            loss = reconstruction_loss(image, target, face_weight)
            if identity is not None:
                loss = loss + identity_weight * (1.0 - (identity.embed_aligned(image) * target_id).sum(1))
            if prior_weight > 0:
                loss = loss + prior_weight * (w - w0).pow(2).flatten(1).mean(1)
            loss.sum().backward()
            opt.step()
            losses.append(float(loss.detach().mean()))
            if step in snapshots:
                with torch.no_grad():
                    kept[step] = (draw_fitted(g, w), time.perf_counter() - t0)
        with torch.no_grad():
            image = draw_fitted(g, w)
    return InversionResult(w.detach(), image.detach(), losses, time.perf_counter() - t0, kept)


def _decay_factor(step: int, steps: int, decay: float) -> float:
    """The learning-rate factor at ``step`` (1-based) of ``steps``: 1, then over the last ``decay`` fraction of the
    steps a half cosine from 1 down to near 0 (the last step still moves)."""
    if decay <= 0:
        return 1.0
    t = (step - 1) / steps  # 0 at the first step, below 1 at the last
    ramp = min(1.0, (1.0 - t) / min(decay, 1.0))
    return 0.5 - 0.5 * math.cos(math.pi * ramp)


def _draw_size(matrix: np.ndarray) -> int:
    """The generator output size to draw a face at: the smallest of 256/512/1024 not below the crop's side in
    photo pixels (the 256 px crop's matrix scales photo -> crop)."""
    from .alignment import crop_scale
    from .nn.mobilestylegan import SIZES

    side = ALIGN_SIZE / crop_scale(matrix)
    return next((s for s in SIZES if s >= side), SIZES[-1])


def encode_wplus(
    target: torch.Tensor,
    *,
    correct_pose: bool = True,
    generator: MobileStyleGAN | None = None,
    pose_angles: tuple[str, ...] = DEFAULT_POSE_ANGLES,
) -> torch.Tensor | None:
    """The shipped W+ encoder's estimate ``[B,23,512]`` for FFHQ-aligned ``target [B,3,256,256]`` in [-1,1], turned
    to the head's pose (``correct_pose``: the ``pose_angles``, :func:`pose_corrected`); None when no encoder ships
    (refinement then starts from ``w_avg``)."""
    from .nn.wplus_encoder import load_wplus_encoder

    enc = load_wplus_encoder()
    if enc is None:
        return None
    with torch.no_grad():
        start = enc(target.cpu()).to(target)
    return pose_corrected(target, start, generator, pose_angles) if correct_pose else start


def invert_wplus(
    target: torch.Tensor,
    steps: int = DEFAULT_STEPS,
    *,
    generator: MobileStyleGAN | None = None,
    use_encoder: bool = True,
    correct_pose: bool = True,
    identity_weight: float = DEFAULT_IDENTITY_WEIGHT,
    prior_weight: float = 0.0,
    face_weight: float = DEFAULT_FACE_WEIGHT,
    pose_angles: tuple[str, ...] = DEFAULT_POSE_ANGLES,
) -> InversionResult:
    """The inversion every W+ method and ``zoo reconstruct`` run on FFHQ-aligned ``target [B,3,256,256]`` in [-1,1]:
    the encoder's code (``use_encoder``, when one ships; else ``w_avg``), turned to the head's pose (the
    ``pose_angles``) with ``correct_pose`` (:func:`pose_corrected`), then ``steps`` refinement steps
    (:func:`refine_wplus`; ``prior_weight`` only with an encoder start).

    The steps move the head off the corrected start (held-out face-mesh yaw error median / p90 2.0 / 7.1 degrees
    after 20 steps). Turning the fitted code again brings that to 0.7 / 2.4 (``benchmarks/results/inversion_pose.md``,
    row "turned again") but is not done: on the packaged photos the anonymized faces' head pose (dlib landmarks) did
    not follow (each method's identity edit also moves the pose slots), and the guard recognizers found the tuning
    faces closer to their originals (SFace distance median 0.752 against 0.789 for ``dbaf``). ``result.seconds``
    covers the whole inversion (encoder, turn and steps)."""
    t0 = time.perf_counter()
    g = generator or load_mobilestylegan(target.device)
    start = encode_wplus(target, correct_pose=correct_pose, generator=g, pose_angles=pose_angles) if use_encoder else None
    result = refine_wplus(
        target,
        steps,
        generator=g,
        start=start,
        identity_weight=identity_weight,
        prior_weight=prior_weight if start is not None else 0.0,
        face_weight=face_weight,
    )
    result.start = "encoder" if start is not None else "w_avg"
    result.seconds = time.perf_counter() - t0
    return result


@lru_cache(maxsize=2)
def _pose_direction(angle: str) -> torch.Tensor | None:
    """The generator's w step per degree of ``angle`` (:data:`POSE_DIRECTION_FILES`) ``[512]``; None without its file."""
    if angle not in POSE_DIRECTION_FILES:
        raise ValueError(f"pose angle must be one of {sorted(POSE_DIRECTION_FILES)}, not {angle!r}")
    if not POSE_DIRECTION_FILES[angle].is_file():
        return None
    from safetensors.torch import load_file

    return load_file(str(POSE_DIRECTION_FILES[angle]))["direction"].float()


def mesh_poses(images: list[np.ndarray]) -> np.ndarray:
    """Face-mesh (yaw, pitch) ``[N,2]`` in degrees of FFHQ-aligned uint8 crops; nan where the mesh finds no face."""
    from .alignment import ffhq_template
    from .face_mesh import mesh_head_pose

    return np.array([mesh_head_pose(im, ffhq_template(im.shape[0]))[:2] for im in images], dtype=np.float64).reshape(-1, 2)


def pose_corrected(
    target: torch.Tensor, start: torch.Tensor, generator: MobileStyleGAN | None = None, angles: tuple[str, ...] = DEFAULT_POSE_ANGLES
) -> torch.Tensor:
    """A code ``start [B,23,512]`` turned to the head's pose: slots 0..:data:`POSE_SLOTS`-1 moved along the generator's
    direction of each of ``angles`` ("yaw", "pitch") by the face-mesh angle of ``target [B,3,256,256]`` minus that of
    the face the code draws (degrees), :data:`POSE_ITERATIONS` times (the directions are linear and undershoot). Every
    readable face takes every round, so the code moves continuously with the image (no cut-off that float rounding
    could flip).

    The encoder gives a nearly frontal code for a turned head (t1's face 4: 37.7 degrees off), and the defaults' 20
    refinement steps do not turn it; :func:`invert_wplus` turns the encoder's code before the steps. A face the mesh
    does not find (in the target or a drawn code) keeps its code as it is; an angle without a direction file is not
    turned."""
    turns = [(POSE_ANGLES.index(a), d) for a in angles if (d := _pose_direction(a)) is not None]
    if not turns:
        return start
    from .imageio import from_tensor

    g = generator or load_mobilestylegan(target.device)
    wanted = mesh_poses(list(from_tensor(target)))
    out = start.clone()
    live = np.isfinite(wanted).all(1)
    if not live.any():
        return out
    idx = torch.from_numpy(np.flatnonzero(live))
    for _ in range(POSE_ITERATIONS):
        with torch.no_grad():
            drawn = draw_fitted(g, out[idx])
        delta = angle_difference(wanted[live], mesh_poses(list(from_tensor(drawn))))
        step = np.nan_to_num(delta, nan=0.0)  # a drawn face the mesh cannot read stays where it is this round
        for column, direction in turns:
            out[idx, :POSE_SLOTS] += torch.tensor(step[:, column], dtype=out.dtype, device=out.device)[:, None, None] * direction.to(out)
    return out


def reconstruct_photo(
    rgb: np.ndarray,
    steps: int = DEFAULT_STEPS,
    *,
    detector: str | None = "auto",
    identity_weight: float = DEFAULT_IDENTITY_WEIGHT,
    prior_weight: float = 0.0,
    face_weight: float = DEFAULT_FACE_WEIGHT,
    use_encoder: bool = True,
    generator: MobileStyleGAN | None = None,
    pose_angles: tuple[str, ...] = DEFAULT_POSE_ANGLES,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Every face of uint8 photo ``rgb [H,W,3]`` redrawn by the generator and pasted back.

    Each face is inverted by :func:`invert_wplus` (the W+ encoder's estimate turned to the head's pose, the
    ``pose_angles``, with ``use_encoder``, when an encoder ships, else ``w_avg``; then ``steps`` Adam steps pulled
    toward that start with ``prior_weight``). Returns the new photo and one report
    per detected face (box, start, steps, seconds, SFace cosine between the aligned original and its reconstruction,
    the size it was drawn at). A face that cannot be aligned is
    blurred and reported with ``"status": "blurred"``: it is never returned untouched.
    """
    from .alignment import align_face, alignment_matrix
    from .detection import detect_faces
    from .imageio import from_tensor, to_tensor
    from .nn.sface import load_sface
    from .paste import blur_face, paste_back

    g = generator or load_mobilestylegan()
    out = np.array(rgb, dtype=np.uint8, copy=True)
    faces = detect_faces(out, detector)
    reports: list[dict[str, Any]] = []
    aligned = []  # (face index, AlignedFace)
    for i, face in enumerate(faces):
        report: dict[str, Any] = {"face": i, "box": [round(float(v), 1) for v in face.box], "score": round(face.score, 3)}
        try:
            aligned.append((i, align_face(rgb, face.landmarks, ALIGN_SIZE)))
            report["status"] = "reconstructed"
        except ValueError as err:  # degenerate landmarks: fail closed
            out = blur_face(out, face)
            report |= {"status": "blurred", "reason": str(err)}
        reports.append(report)
    if not aligned:
        return out, reports
    device = next(g.parameters()).device  # the faces are inverted where the generator is
    sface = load_sface(device)
    for i, a in aligned:
        # one face at a time: on a CPU a batch of faces is slower per face (the 128 px activations leave the cache)
        target = to_tensor(a.crop).to(device)
        result = invert_wplus(
            target,
            steps,
            generator=g,
            use_encoder=use_encoder,
            identity_weight=identity_weight,
            prior_weight=prior_weight,
            face_weight=face_weight,
            pose_angles=pose_angles,
        )
        size = _draw_size(a.matrix)
        with torch.no_grad():
            cos = float((sface.embed_aligned(result.image) * sface.embed_aligned(target)).sum())
            drawn = result.image if size == ALIGN_SIZE else draw_fitted(g, result.wplus, size)
        out = paste_back(out, from_tensor(drawn)[0], alignment_matrix(faces[i].landmarks, size))
        reports[i] |= {
            "start": result.start,
            "steps": int(steps),
            "seconds": round(result.seconds, 2),
            "sface_cosine": round(cos, 4),
            "drawn_at_px": int(size),
            "final_loss": round(result.losses[-1], 4) if result.losses else None,
        }
    return out, reports
