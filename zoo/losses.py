"""Every generic loss term of the zoo, once, named after what it is.

Methods import what they need and weight the terms with their config's lambdas (see
:func:`weighted_sum`). Equation numbers refer to the papers in ``shared/seeds``:
HFORD (H), DBAF (D), iFADIT (F), IDEudemon (E), Cao et al. "personal" (P).

Conventions: images are float ``[B,3,H,W]`` in [-1, 1]; embeddings are ``[B,D]`` (not necessarily
normalised); every function returns a scalar tensor (mean over the batch) unless it says otherwise.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Mapping, Sequence

import torch
import torch.nn.functional as F

__all__ = [
    "cosine_similarity",
    "identity_cosine_loss",
    "identity_similarity_hinge",
    "pairwise_similarity_hinge",
    "identity_contrastive_loss",
    "gaussian_prior_loss",
    "l1_loss",
    "mse_loss",
    "half_squared_l2_loss",
    "l2_norm_distance",
    "ssim",
    "ssim_loss",
    "visual_quality_loss",
    "LPIPSUnavailableError",
    "lpips_loss",
    "perceptual_loss",
    "gram_matrix",
    "gram_style_loss",
    "feature_matching_loss",
    "attribute_consistency_loss",
    "latent_regularization_loss",
    "nonsaturating_g_loss",
    "nonsaturating_d_loss",
    "hinge_g_loss",
    "hinge_d_loss",
    "r1_penalty",
    "lazy_r1_loss",
    "lazy_r1_due",
    "add_lazy_r1",
    "wing_loss",
    "weighted_sum",
]


# ============================================================ identity (embedding) losses
def cosine_similarity(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Row-wise cosine similarity of ``[B,D]`` embeddings -> ``[B]``."""
    return F.cosine_similarity(a.flatten(1).float(), b.flatten(1).float(), dim=1, eps=eps)


def identity_cosine_loss(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``mean(1 - cos(a, b))``: pull two identities together.

    H eq. 12 (L_rev), D eq. 30 (L_rev), F eq. 19 (theta^-, used in eq. 18), E eq. 8 (L_id),
    P eq. 8 (L_id).
    """
    return (1.0 - cosine_similarity(a, b)).mean()


def identity_similarity_hinge(a: torch.Tensor, b: torch.Tensor, margin: float = 0.0) -> torch.Tensor:
    """``mean(max(0, cos(a, b) - margin))``: push two identities apart until they are orthogonal.

    F eq. 16 (theta^+, used in eqs. 15, 17, 18), H eq. 11 (L_anony), D eq. 29 (L_dif, one term of the
    sum over S_1).
    """
    return F.relu(cosine_similarity(a, b) - margin).mean()


def pairwise_similarity_hinge(embeddings: Sequence[torch.Tensor] | torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Identity diversity: ``max(0, cos(x_i, x_j))`` over all ordered pairs ``i != j`` of a set.

    ``embeddings``: K tensors ``[B,D]`` (or ``[K,B,D]``): the identities of K outputs of the same
    input (different keys), compared row by row. ``reduction="mean"`` divides by ``K(K-1)`` as H eq. 10
    (L_dif), ``"sum"`` sums as D eq. 31 (L_div); either way the batch is averaged.
    The inter-key term of F eq. 17 is the mean form. For the inter-identity term (different people,
    same key) pass the embeddings of one key as ``[B,1,D]`` rows: see ``pairwise_similarity_hinge(e.unsqueeze(1).unbind(0))``.
    """
    e = torch.stack(list(embeddings)) if not torch.is_tensor(embeddings) else embeddings
    k = e.shape[0]
    if k < 2:
        raise ValueError("pairwise_similarity_hinge needs at least two embeddings per set")
    e = F.normalize(e.float().flatten(2), dim=-1)  # [K,B,D]
    sim = torch.einsum("ibd,jbd->bij", e, e)  # [B,K,K]
    off = ~torch.eye(k, dtype=torch.bool, device=e.device)
    total = F.relu(sim[:, off]).sum(dim=1)  # [B]
    if reduction == "mean":
        total = total / (k * (k - 1))
    elif reduction != "sum":
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    return total.mean()


def identity_contrastive_loss(
    distance: torch.Tensor,
    same_identity: torch.Tensor | bool,
    tau_pos: float,
    tau_neg: float,
) -> torch.Tensor:
    """Thresholded contrastive loss of the pre-training stage, H eq. 6 / D eq. 10.

    ``distance``: ``[B]`` identity distance ``d = 1 - cos(F(X_mix), F(X_attr))`` (H eq. 7, D eq. 11).
    ``same_identity``: ``[B]`` bool (or one bool): X_id is X_attr. Same: ``max(d - tau_pos, 0)``
    (the mix must keep X_attr's identity); different: ``max(tau_neg - d, 0)`` (it must move away).
    """
    same = torch.as_tensor(same_identity, device=distance.device, dtype=torch.bool).expand_as(distance)
    pos = F.relu(distance - tau_pos)
    neg = F.relu(tau_neg - distance)
    return torch.where(same, pos, neg).mean()


# ============================================================ pixel losses
def gaussian_prior_loss(z: torch.Tensor) -> torch.Tensor:
    """How far latents ``[N, D]`` are from a standard normal sample: squared batch mean and (variance - 1)
    per dimension, plus each row's (|z|^2 / D - 1)^2 (the norm shell a Gaussian sample lies on).

    Keeps a learned latent transform on the generator's prior (demo tier: a GAN draws faces only there).
    """
    mean = z.mean(0)
    var = z.var(0, unbiased=False) if z.shape[0] > 1 else torch.ones_like(mean)
    shell = z.pow(2).mean(1) - 1
    return mean.pow(2).mean() + (var - 1).pow(2).mean() + shell.pow(2).mean()


def l1_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean absolute error: H eq. 9 / D eqs. 13, 34 (L_rec), F eq. 13 and 20 (||.||_1 terms), E eq. 5."""
    return F.l1_loss(x.float(), y.float())


def mse_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean squared error (the form pSp/e4e implement the ||.||_2 terms with, e.g. H eq. 14 / D eq. 35)."""
    return F.mse_loss(x.float(), y.float())


def half_squared_l2_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``0.5 * mean((x - y)^2)``: P eq. 10 (L_rec = 1/2 ||X' - X||_2^2, averaged over elements)."""
    return 0.5 * F.mse_loss(x.float(), y.float())


def l2_norm_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample Euclidean norm ``||x - y||_2`` (not squared), averaged over the batch."""
    return (x.float() - y.float()).flatten(1).norm(dim=1).mean()


# ============================================================ SSIM and the iFADIT VQ loss
def _gaussian_window(size: int, sigma: float, channels: int, device, dtype) -> torch.Tensor:
    coords = torch.arange(size, device=device, dtype=dtype) - (size - 1) / 2
    g = torch.exp(-(coords**2) / (2 * sigma**2))
    g = g / g.sum()
    return (g[:, None] * g[None, :]).expand(channels, 1, size, size).contiguous()


def ssim(x: torch.Tensor, y: torch.Tensor, window_size: int = 11, sigma: float = 1.5, data_range: float = 2.0, reduction: str = "mean") -> torch.Tensor:
    """Structural similarity (Wang et al. 2004), Gaussian 11x11 window, sigma 1.5, valid convolution.

    ``x, y``: ``[B,C,H,W]``; ``data_range`` 2 for [-1,1] images (255 for uint8 values). Returns the
    mean SSIM (``reduction="mean"``) or one value per image (``"none"``, ``[B]``). Differentiable.
    """
    x, y = x.float(), y.float()
    c = x.shape[1]
    win = min(window_size, x.shape[-1], x.shape[-2])
    w = _gaussian_window(win, sigma, c, x.device, x.dtype)
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    mu_x = F.conv2d(x, w, groups=c)
    mu_y = F.conv2d(y, w, groups=c)
    sxx = F.conv2d(x * x, w, groups=c) - mu_x**2
    syy = F.conv2d(y * y, w, groups=c) - mu_y**2
    sxy = F.conv2d(x * y, w, groups=c) - mu_x * mu_y
    s = ((2 * mu_x * mu_y + c1) * (2 * sxy + c2)) / ((mu_x**2 + mu_y**2 + c1) * (sxx + syy + c2))
    per_image = s.flatten(1).mean(dim=1)
    return per_image.mean() if reduction == "mean" else per_image


def ssim_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``1 - SSIM(x, y)``."""
    return 1.0 - ssim(x, y)


def visual_quality_loss(x_hat: torch.Tensor, x: torch.Tensor, alpha: float = 0.84, beta: float = 0.16) -> torch.Tensor:
    """F eq. 12: ``alpha (1 - SSIM(x_hat, x)) + beta ||x_hat - x||_1`` with alpha 0.84, beta 0.16."""
    return alpha * ssim_loss(x_hat, x) + beta * l1_loss(x_hat, x)


# ============================================================ perceptual losses
class LPIPSUnavailableError(RuntimeError):
    """LPIPS weights (its trunk and linear layers) are not available offline."""


def lpips_loss(x: torch.Tensor, y: torch.Tensor, lpips_net: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None) -> torch.Tensor:
    """LPIPS distance ``mean(F_l(x) vs F_l(y))``: H eq. 8, D eqs. 12, 33, F eq. 20.

    ``lpips_net(x, y)`` is the LPIPS network (``zoo.nn.lpips``), returning one distance per image.
    There is no silent fallback: with ``lpips_net=None`` this raises :class:`LPIPSUnavailableError`,
    so a config must either provide LPIPS weights or set its LPIPS lambda to 0 (or choose another term
    explicitly, e.g. :func:`perceptual_loss` on a trunk that is available).
    """
    if lpips_net is None:
        raise LPIPSUnavailableError(
            "LPIPS is not available (no trunk/linear weights offline): set the lpips lambda to 0 in the config or give an LPIPS checkpoint"
        )
    return lpips_net(x, y).float().mean()


def perceptual_loss(
    features: Callable[[torch.Tensor], Sequence[torch.Tensor]],
    x: torch.Tensor,
    y: torch.Tensor,
    layer_weights: Sequence[float] | None = None,
    criterion: str = "l1",
) -> torch.Tensor:
    """Perceptual loss ``sum_l w_l ||phi_l(x) - phi_l(y)||`` on a feature trunk, E eq. 5 (VGG conv1..conv5
    pre-activation features, L1). ``features(x)`` returns the list of feature maps; ``y`` is the target
    (its features are computed without gradient)."""
    fx = list(features(x))
    with torch.no_grad():
        fy = list(features(y))
    weights = layer_weights if layer_weights is not None else [1.0] * len(fx)
    dist = l1_loss if criterion == "l1" else mse_loss
    return sum(w * dist(a, b) for w, a, b in zip(weights, fx, fy))


def gram_matrix(feat: torch.Tensor) -> torch.Tensor:
    """``[B,C,H,W]`` -> ``[B,C,C]`` Gram matrix normalised by ``C*H*W`` (Gatys et al.)."""
    b, c, h, w = feat.shape
    f = feat.float().reshape(b, c, h * w)
    return f @ f.transpose(1, 2) / (c * h * w)


def gram_style_loss(feats_x: Sequence[torch.Tensor], feats_y: Sequence[torch.Tensor]) -> torch.Tensor:
    """Feature style loss ``sum_l ||Gram(psi_l(x)) - Gram(psi_l(y))||_1``: second term of E eq. 7."""
    return sum(l1_loss(gram_matrix(a), gram_matrix(b)) for a, b in zip(feats_x, feats_y))


def feature_matching_loss(feats_fake: Sequence[Sequence[torch.Tensor]], feats_real: Sequence[Sequence[torch.Tensor]]) -> torch.Tensor:
    """Discriminator feature matching (pix2pixHD): L1 between intermediate D features of fake and real
    images, averaged over discriminators (outer list) and layers (inner list). Real features detached."""
    total, n = 0.0, 0
    for fake_scale, real_scale in zip(feats_fake, feats_real):
        for a, b in zip(fake_scale, real_scale):
            total = total + l1_loss(a, b.detach())
            n += 1
    if n == 0:
        raise ValueError("feature_matching_loss got no features")
    return total / n


def attribute_consistency_loss(attrs_x: Sequence[torch.Tensor], attrs_y: Sequence[torch.Tensor]) -> torch.Tensor:
    """P eq. 9: ``1/2 sum_k ||z_attr^k(X') - z_attr^k(X)||_2^2`` over the n attribute levels
    (each level's squared error averaged over its elements, as in FaceShifter implementations)."""
    return 0.5 * sum(F.mse_loss(a.float(), b.float()) for a, b in zip(attrs_x, attrs_y))


def latent_regularization_loss(w: torch.Tensor, reference: torch.Tensor | None = None) -> torch.Tensor:
    """Keep a W+ code near W: ``sum_{i=1}^{N-1} ||w_i - ref||_2`` averaged over the batch.

    ``w``: ``[B,N,512]``. ``reference=None``: e4e's delta regulariser, H eq. 15, offsets
    ``Delta_i = w_i - w_0`` from the first layer's code (i = 1..N-1). ``reference`` ``[512]``: D eq. 36
    with ``w_bar`` the average latent.
    """
    w = w.float()
    if reference is None:
        deltas = w[:, 1:] - w[:, :1]
    else:
        deltas = w[:, 1:] - reference.float().reshape(1, 1, -1)
    return deltas.norm(dim=-1).sum(dim=1).mean()


# ============================================================ adversarial losses
def _as_list(pred: torch.Tensor | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    return [pred] if torch.is_tensor(pred) else list(pred)


def nonsaturating_g_loss(fake_pred: torch.Tensor | Iterable[torch.Tensor]) -> torch.Tensor:
    """``-E[log D(x_fake)] = softplus(-D(x_fake))``: H eq. 17, D eq. 38 (D outputs logits).
    A list (multi-scale discriminators) is averaged."""
    preds = _as_list(fake_pred)
    return sum(F.softplus(-p.float()).mean() for p in preds) / len(preds)


def nonsaturating_d_loss(real_pred, fake_pred) -> torch.Tensor:
    """``-E[log D(x)] - E[log(1 - D(x_fake))]``: H eq. 16 / D eq. 37 without the R1 term, P eq. 11."""
    reals, fakes = _as_list(real_pred), _as_list(fake_pred)
    return sum(F.softplus(-r.float()).mean() + F.softplus(f.float()).mean() for r, f in zip(reals, fakes)) / len(reals)


def hinge_g_loss(fake_pred) -> torch.Tensor:
    """Hinge GAN generator loss ``-E[D(x_fake)]`` (multi-scale discriminators with hinge loss, P [22])."""
    preds = _as_list(fake_pred)
    return sum(-p.float().mean() for p in preds) / len(preds)


def hinge_d_loss(real_pred, fake_pred) -> torch.Tensor:
    """Hinge GAN discriminator loss ``E[relu(1 - D(x))] + E[relu(1 + D(x_fake))]``."""
    reals, fakes = _as_list(real_pred), _as_list(fake_pred)
    return sum(F.relu(1 - r.float()).mean() + F.relu(1 + f.float()).mean() for r, f in zip(reals, fakes)) / len(reals)


def r1_penalty(real_pred: torch.Tensor, real_images: torch.Tensor) -> torch.Tensor:
    """``E[||grad_x D(x)||_2^2]`` on real images (Mescheder et al. 2018). ``real_images`` must have
    ``requires_grad=True`` before D ran on them."""
    (grad,) = torch.autograd.grad(real_pred.float().sum(), real_images, create_graph=True)
    return grad.float().pow(2).flatten(1).sum(dim=1).mean()


def lazy_r1_loss(real_pred: torch.Tensor, real_images: torch.Tensor, gamma: float, every: int = 16) -> torch.Tensor:
    """The ``gamma/2 E[||grad D(x)||^2]`` term of H eq. 16 / D eq. 37, applied every ``every`` D steps
    and scaled by ``every`` (StyleGAN2 lazy regularisation). Call it only when ``step % every == 0``."""
    return gamma / 2 * r1_penalty(real_pred, real_images) * every


def _r1_settings(r1: Mapping | None) -> tuple[float, int]:
    r1 = r1 or {}
    return float(r1.get("gamma", 0.0)), int(r1.get("every", 16))


def lazy_r1_due(r1: Mapping | None, step: int) -> bool:
    """Whether D step ``step`` carries the lazy R1 term under the config ``r1 = {gamma, every}``
    (``every`` defaults to 16; no config or ``gamma <= 0``: never). Decide this before D runs on
    the reals, which then need ``requires_grad``."""
    gamma, every = _r1_settings(r1)
    return gamma > 0 and step % every == 0


def add_lazy_r1(loss: torch.Tensor, logs: dict, real_pred: torch.Tensor, real_images: torch.Tensor, r1: Mapping | None, step: int) -> torch.Tensor:
    """The one lazy-R1 block of every discriminator step: ``loss`` plus :func:`lazy_r1_loss` (with the
    config's ``gamma`` and ``every``) when :func:`lazy_r1_due`, its value logged as ``logs["r1"]``;
    else ``loss`` unchanged. ``real_images`` must have had ``requires_grad=True`` when D ran on them."""
    if not lazy_r1_due(r1, step):
        return loss
    gamma, every = _r1_settings(r1)
    term = lazy_r1_loss(real_pred, real_images, gamma, every)
    logs["r1"] = float(term.detach())
    return loss + term


# ============================================================ landmarks
def wing_loss(pred: torch.Tensor, target: torch.Tensor, w: float = 10.0, epsilon: float = 2.0) -> torch.Tensor:
    """Wing loss for landmark regression (Feng et al. 2018, the landmark extractor of F [39]).

    ``w ln(1 + |d|/epsilon)`` for ``|d| < w``, else ``|d| - C`` with ``C = w - w ln(1 + w/epsilon)``;
    coordinates in pixels. Averaged over all coordinates.
    """
    d = (pred.float() - target.float()).abs()
    c = w - w * math.log(1 + w / epsilon)
    return torch.where(d < w, w * torch.log1p(d / epsilon), d - c).mean()


# ============================================================ combining
def weighted_sum(terms: Mapping[str, torch.Tensor | Callable[[], torch.Tensor]], lambdas: Mapping[str, float]) -> tuple[torch.Tensor, dict[str, float]]:
    """``sum_k lambdas[k] * terms[k]`` and a log dict of the unweighted values.

    A term whose lambda is 0 or missing is skipped; callables are evaluated only when their weight is
    non-zero (so an unavailable LPIPS with ``lpips: 0`` is never called). Raises when every weight is 0.
    """
    total = None
    logs: dict[str, float] = {}
    for name, term in terms.items():
        lam = float(lambdas.get(name, 0.0))
        if lam == 0.0:
            continue
        value = term() if callable(term) else term
        logs[name] = float(value.detach())
        total = lam * value if total is None else total + lam * value
    if total is None:
        raise ValueError(f"all loss weights are zero for terms {sorted(terms)}")
    logs["total"] = float(total.detach())
    return total, logs
