"""The identity modification M of Cao et al. and its closed-form inverse (eq. 7, 13-17), on unit identity vectors."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

LEVELS = tuple(range(10))


def privacy_angle(d: int) -> float:
    """g(d) in degrees (Sec. 4.1): 70 + 5d for d in [0, 4), 70 + 5(d + 1) for d in [4, 9]."""
    if int(d) != d or not 0 <= d <= 9:
        raise ValueError(f"privacy level d must be an integer in [0, 9], got {d!r}")
    d = int(d)
    return 70.0 + 5.0 * d if d < 4 else 70.0 + 5.0 * (d + 1)


def rotate_identity(z_id: torch.Tensor, ref: torch.Tensor, d: int) -> torch.Tensor:
    """M(z_id, p, d) = z_bar cos g(d) + z_90 sin g(d), z_90 = f(p) - (z_bar . f(p)) z_bar (eq. 13-14).

    ``z_id [N, D]`` (normalised inside), ``ref`` = f(p) ``[N, D]`` -> z_new ``[N, D]`` (norm <= 1).
    """
    g = math.radians(privacy_angle(d))
    z_bar = F.normalize(z_id, dim=1)
    z90 = ref - (z_bar * ref).sum(1, keepdim=True) * z_bar  # eq. 14
    return z_bar * math.cos(g) + z90 * math.sin(g)  # eq. 13


def orient_reference(z_id: torch.Tensor, ref: torch.Tensor, d: int) -> torch.Tensor:
    """f(p) or -f(p) per row, whichever overlaps z_bar with the sign opposite to cos g(d) (A cos g <= 0).

    Not in the paper. Up to scale, eq. 13-14 map two identities to one direction when g(d) is near 90
    degrees: one with overlap A and a mirror one (:func:`unrotate_direction`). With the reference
    oriented so that A cos g <= 0, only one of the two is allowed, and recovery reads the orientation
    back from the image: z_new . f = sin g (1 - A^2) + A cos g keeps the sign of the oriented reference
    while |A| <= 0.5. ``z_id``, ``ref`` ``[N, D]`` -> ``[N, D]``.
    """
    cos_g = math.cos(math.radians(privacy_angle(d)))
    overlap = (F.normalize(z_id, dim=1) * ref).sum(1, keepdim=True)
    return torch.where(overlap * cos_g > 0, -ref, ref)


def unrotate_identity(z_new: torch.Tensor, ref: torch.Tensor, d: int) -> torch.Tensor:
    """M^-1 (eq. 16-17): z_bar = (z_new - f(p) sin g) / (cos g - A sin g), with
    A = (cos^2 g - (z_new - f(p) sin g) . z_new) / (sin g cos g). Exact inverse of :func:`rotate_identity`."""
    g = math.radians(privacy_angle(d))
    c, s = math.cos(g), math.sin(g)
    num = z_new - ref * s
    a = (c * c - (num * z_new).sum(1, keepdim=True)) / (s * c)  # eq. 17 (A = z_bar . f(p))
    return num / (c - a * s)  # eq. 16


def unrotate_direction(
    u: torch.Tensor,
    ref: torch.Tensor,
    d: int,
    overlap_prior: float | None = None,
    grid: int = 1024,
    iters: int = 60,
    oriented: bool = False,
) -> torch.Tensor:
    """Recover z_bar from the *direction* u of z_new (what E_id re-extracts from the image).

    z_new = n u with the unknown norm n = |z_new|. Eq. 16-17 applied to n u give z_bar(n) and
    A(n) = z_bar . f(p) = (n t - sin g) cos g / (n^2 - n t sin g), t = u . f(p); the true n solves
    n^2 = 1 - sin^2 g A(n)^2 (the norm of eq. 13). That equation can have several roots in
    [|cos g|, 1] (eq. 13-14 are not injective up to scale). ``overlap_prior=None`` takes the largest n,
    i.e. the preimage with the smallest overlap |A| with the reference (right for identities nearly
    orthogonal to the reference mix); a number takes the root whose A is closest to it -- the typical
    overlap of a face with a reference in the encoder's space, which the library stores
    (:meth:`Personal.build_library`). Roots are bracketed on a ``grid`` and refined by bisection
    (float64). ``oriented=True``: the forward pass used :func:`orient_reference`, and the preimage is
    unique (:func:`_unrotate_oriented`). Returns unit ``[N, D]`` in ``u``'s dtype.
    """
    g = math.radians(privacy_angle(d))
    c, s = math.cos(g), math.sin(g)
    u64 = F.normalize(u.double(), dim=1)
    r64 = ref.double()
    if oriented:
        return _unrotate_oriented(u64, r64, c, s, grid, iters).to(u.dtype)
    t = (u64 * r64).sum(1, keepdim=True)

    def overlap(n: torch.Tensor) -> torch.Tensor:
        return (n * t - s) * c / (n * n - n * t * s)  # A(n), eq. 16-17

    def residual(n: torch.Tensor) -> torch.Tensor:
        return n * n - 1 + (s * overlap(n)) ** 2

    ns = torch.linspace(1.0, abs(c), grid, dtype=torch.float64, device=u.device).expand(u.shape[0], -1)
    r = residual(ns)
    # brackets [ns[j], ns[j+1]] (n decreasing) where the residual goes from > 0 to <= 0 or back
    change = (r[:, :-1] > 0) != (r[:, 1:] > 0)  # [N, grid-1]
    change[:, 0] |= ~change.any(1)  # no sign change on the grid (|A| > 1): fall back to the interval at n = 1
    hi, lo = ns[:, :-1].clone(), ns[:, 1:].clone()  # every interval, refined together; only brackets used
    sign_hi = r[:, :-1] > 0
    for _ in range(iters):
        mid = (hi + lo) / 2
        same_as_hi = (residual(mid) > 0) == sign_hi
        hi, lo = torch.where(same_as_hi, mid, hi), torch.where(same_as_hi, lo, mid)
    roots = (hi + lo) / 2  # [N, grid-1]; meaningful where ``change``
    if overlap_prior is None:
        j = torch.argmax(change.to(torch.int8), dim=1, keepdim=True)  # first bracket from n = 1: the largest root
    else:
        cost = (overlap(roots) - float(overlap_prior)).abs().masked_fill(~change, float("inf"))
        j = torch.argmin(cost, dim=1, keepdim=True)
    n = roots.gather(1, j)
    return F.normalize(unrotate_identity(u64 * n, r64, d), dim=1).to(u.dtype)


def _unrotate_oriented(u: torch.Tensor, ref: torch.Tensor, c: float, s: float, grid: int, iters: int) -> torch.Tensor:
    """z_bar from the direction u of z_new when the reference was oriented (A cos g <= 0, float64 in/out).

    z_bar lies in the plane of u and f (the oriented reference, whose sign is that of u . f). There,
    with e the unit part of u orthogonal to f and tan(alpha) = (u . e) / (u . f), write z_bar = A f +
    sigma sqrt(1 - A^2) e. Eq. 13 gives z_new = ((c - A s) A + s) f + sigma (c - A s) sqrt(1 - A^2) e, so
    sigma = sign(c) and B = |A| = -sign(c) A solves
        (|c| + B s) sqrt(1 - B^2) = tan(alpha) (s (1 - B^2) - |c| B),
    whose left side rises and right side falls in B over the overlaps a face has with a reference mix
    (B < 0.9 here): one root, bracketed on a grid and refined by bisection.
    """
    ref = torch.where((u * ref).sum(1, keepdim=True) < 0, -ref, ref)
    cos_a = (u * ref).sum(1, keepdim=True)
    e = u - cos_a * ref
    sin_a = e.norm(dim=1, keepdim=True)
    e = e / sin_a.clamp_min(1e-300)
    tan_a = sin_a / cos_a.clamp_min(1e-300)
    ac, sign = abs(c), math.copysign(1.0, c)

    def gap(b: torch.Tensor) -> torch.Tensor:
        return (ac + b * s) * torch.sqrt(1 - b * b) - tan_a * (s * (1 - b * b) - ac * b)

    bs = torch.linspace(0.0, 0.9, grid, dtype=u.dtype, device=u.device).expand(u.shape[0], -1)
    above = gap(bs) > 0
    j = torch.argmax(above.to(torch.int8), dim=1, keepdim=True).clamp_min(1)  # first grid point past the root
    lo, hi = bs.gather(1, j - 1), bs.gather(1, j)
    for _ in range(iters):
        mid = (lo + hi) / 2
        up = gap(mid) > 0
        lo, hi = torch.where(up, lo, mid), torch.where(up, mid, hi)
    b = (lo + hi) / 2
    return F.normalize(-sign * b * ref + sign * torch.sqrt(1 - b * b) * e, dim=1)
