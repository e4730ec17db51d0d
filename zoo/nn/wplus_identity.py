"""The identity code of a W+ latent of the FFHQ-grade generator (:mod:`zoo.nn.mobilestylegan`).

A face's W+ ``[N,23,512]`` is split into what the keyed identity transforms of the reversible methods edit
and what they keep::

    m = mean over the identity slots S of (W+[s] - w_mean)      [N,512]
    x = U^T m / sigma                                           [N,K]  whitened principal coordinates
    u = Q^T x                                                   [N,k]  the identity code (~N(0, I), k = 100)
    r = m - U U^T m                                             [N,512] the rest of the identity slots' mean

U ``[512,K]`` holds the K leading principal directions of the generator's style w = mapping(z), sigma ``[K]``
their standard deviations, w_mean the sample mean. The head's pose moves with a few of those coordinates
(:func:`pose_sensitivity`: the change of yaw, pitch and roll per sigma of each direction, added in the slots
S): Q ``[K,k]`` spans what is orthogonal to those pose gradients (k = K - 3), so an edit of u leaves the
pose unchanged to first order. Slots outside D below (the head's pose in slots 0-1; the 512 and 1024 px slots)
are never touched. Stored as ``code_matrix`` = U diag(1/sigma) Q ``[512,k]`` and
``edit_matrix`` = U diag(sigma) Q ``[512,k]`` (code_matrix^T edit_matrix = I) and U (``span``).

:meth:`WPlusIdentity.with_code` gives a face the identity code ``u_new``, and scrambles what else of the identity
the slots hold with two keyed rotations (orthogonal matrices from the face's key)::

    m'  = m + edit_matrix (u_new - u) - r + C R_c C^T r       C ``[512,512-K]``: the complement of U
    W+[s] = w_mean + m' + R d_s                                for s in D (the deviation slots, D >= S)

    W+[c] = W+[c] + coarse_edit (u_new - u)                   for c in COARSE_SLOTS (0-1)

where d_s = W+[s] - w_mean - m is each slot's own deviation. The generator's own faces have one style in
every slot (d_s = 0); an inverted real face keeps much of its identity in the deviations and the residual
(with u alone edited, SFace still matched 6 of 6 tuning faces). A key-free change of them (negation) would be
undone by anyone who knows the method, so they are rotated with the key: the same call with R^T, R_c^T
(``inverse=True``) and the original u returns the original W+ exactly; a wrong key scrambles them again.

Slots 0-1 draw the head's pose and the face's outline at 4 and 8 px, and they hold the identity too. ``coarse_edit``
``[512,k]`` = U diag(sigma) (I - P P^T) Q adds the code's change there along the same directions with the head's pose
gradients *in those slots* removed (P ``[K,3]``, orthonormal, :func:`pose_sensitivity` over slots 0-1). On 48 of the
generator's own faces x 4 keys (`dbaf`; SFace and FaceRes, never dlib; ``python -m benchmarks.coarse_slots``) SFace
still called the anonymized face the original person for 73 of 192 face-keys with those slots kept and 30 with them
edited, and two keys' faces the same person for 114 and 61 of 288 pairs; the face mesh's median yaw change rose from
2.3 to 3.1 degrees (on the tuning photos' real faces 3.0 and 2.9). A linear map of u_new - u, so the inverse call
removes it exactly. A basis without it (``coarse_edit`` absent from its file) leaves slots 0-1 alone.

The identity code's change skips the directions of u that open or close the mouth: ``mouth_directions`` ``[k,r]``
(orthonormal, H) are the r leading right singular vectors of the gradients of the inner-lip gap
(:func:`zoo.face_mesh.aligned_openings`) per unit of each code coordinate on the generator's own faces
(:func:`mouth_sensitivity`), and the edit uses du' = (I - H H^T) du, so the drawn face keeps the original's code
along H. On real faces the mouth moved with the identity code's change more than with the rotations (face mesh,
``python -m benchmarks.edit_parts``); one direction dominates the gradients (singular values 0.21, then 0.06 and
less, 8 faces), and r = 1 was chosen on the 9 tuning faces x 4 keys (r = 2 and 3 let fewer face-keys past all three
guard targets). On the held-out faces the median inner-lip gap change fell from 0.029 to 0.017 (``dbaf``) and 0.048 to
0.027 (``ifadit``), in outer-eye-corner distances (docs/results.md). The projection is fixed and idempotent, so the inverse call (which reads u from
the anonymized code and projects again) still returns W+ exactly, and the carrier holds the keyed code itself.
Codes of :mod:`zoo.carrier` blocks of version 8 and earlier were drawn without it (:func:`carried_mouth_kept`).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from .mobilestylegan import NUM_SLOTS, STYLE_DIM

__all__ = [
    "DEVIATION_SLOTS",
    "DEVIATION_SLOTS_V5",
    "COARSE_SLOTS",
    "carried_coarse_edit",
    "carried_deviation_slots",
    "carried_edit",
    "carried_mouth_kept",
    "IDENTITY_SLOTS",
    "WPlusIdentity",
    "build_identity_basis",
    "identity_basis_dir",
    "leading_directions",
    "load_wplus_identity",
    "mouth_sensitivity",
    "pose_sensitivity",
    "principal_directions",
]

#: W+ slots 4-12: the 16, 32 and 64 px blocks (slot s draws at :data:`~zoo.nn.mobilestylegan.SLOT_RESOLUTIONS`)
IDENTITY_SLOTS = tuple(range(4, 13))
#: W+ slots whose deviations from the identity slots' mean are rotated with the key: 2-18 (the 8 px block's convs
#: to 256 px); slots 0-1 (the 4 px conv and the 8 px up-modulation) hold the head's pose, and the 512 px / 1024 px
#: slots do not reach a 256 px face. On the 20 tuning real faces x 3 keys the 8 px deviations still carried identity:
#: rotated from slot 4, SFace (the guard's recognizer; dlib is not used) stayed at its blur line for 7-15 of 60
#: face-keys per method; from slot 2, for 1-2, with the face mesh's median yaw change 2.7-2.8 degrees against 1.9-2.8
#: (python -m benchmarks.deviation_slots, docs/generator.md)
DEVIATION_SLOTS = tuple(range(2, 19))
#: the deviation slots of codes carried by blocks of :mod:`zoo.carrier` version 5 and earlier (recovered with them)
DEVIATION_SLOTS_V5 = tuple(range(4, 19))


#: how many mouth directions the shipped basis keeps out of the identity code's change (module docstring)
MOUTH_DIRECTIONS = 1

#: W+ slots that take the identity code's change along its pose-free directions (``coarse_edit``, module docstring)
COARSE_SLOTS = (0, 1)


def _written_by_block_version(carried, last: int) -> bool:
    """Whether a face's carried code (``values()`` of a :mod:`zoo.carrier` block) came from a block of version
    ``last`` or earlier (False for a code that did not come from a block, or none)."""
    version = carried.get("block_version") if isinstance(carried, dict) else None
    return version is not None and int(version) <= last


def carried_coarse_edit(carried) -> bool:
    """Whether a face's carried code was drawn with slots 0-1 edited: False for a block of version 7 or earlier, True
    for a newer block, a code that did not come from a block, or none."""
    return not _written_by_block_version(carried, 7)


def carried_mouth_kept(carried) -> bool:
    """Whether a face's carried code was drawn with the mouth directions kept out of the code's change
    (:attr:`WPlusIdentity.mouth_directions`): False for a block of version 8 or earlier, True otherwise."""
    return not _written_by_block_version(carried, 8)


def carried_edit(carried) -> dict:
    """How a face's carried code was drawn, as the keyword arguments of :meth:`WPlusIdentity.with_code` that undo it
    (``deviation_slots``, ``coarse``, ``mouth``)."""
    return {"deviation_slots": carried_deviation_slots(carried), "coarse": carried_coarse_edit(carried), "mouth": carried_mouth_kept(carried)}


def carried_deviation_slots(carried) -> tuple[int, ...] | None:
    """The deviation slots a face's carried code was drawn with: :data:`DEVIATION_SLOTS_V5` for a block of version 5
    or earlier; None (the current ones) for a newer block, a code that did not come from a block, or none."""
    return DEVIATION_SLOTS_V5 if _written_by_block_version(carried, 5) else None


def identity_basis_dir() -> Path:
    """``zoo/weights/wplus_identity``: the shipped basis (safetensors + config.json)."""
    return Path(__file__).resolve().parent.parent / "weights" / "wplus_identity"


class WPlusIdentity(torch.nn.Module):
    """Identity code of W+ latents (module docstring). Buffers: ``code_matrix [512,k]``, ``edit_matrix [512,k]``,
    ``span [512,K]``, ``w_mean [512]`` and, where given, ``coarse_edit [512,k]`` and ``mouth_directions [k,r]``
    (orthonormal columns)."""

    def __init__(
        self,
        code_matrix: torch.Tensor,
        edit_matrix: torch.Tensor,
        span: torch.Tensor,
        w_mean: torch.Tensor,
        slots: Sequence[int] = IDENTITY_SLOTS,
        deviation_slots: Sequence[int] = DEVIATION_SLOTS,
        coarse_edit: torch.Tensor | None = None,
        mouth_directions: torch.Tensor | None = None,
    ):
        super().__init__()
        k = code_matrix.shape[-1]
        if (
            code_matrix.shape != (STYLE_DIM, k)
            or edit_matrix.shape != (STYLE_DIM, k)
            or span.ndim != 2
            or span.shape[0] != STYLE_DIM
            or w_mean.shape != (STYLE_DIM,)
        ):
            raise ValueError(
                f"code/edit matrices must be [{STYLE_DIM},k], span [{STYLE_DIM},K], w_mean [{STYLE_DIM}]; got "
                f"{list(code_matrix.shape)}, {list(edit_matrix.shape)}, {list(span.shape)}, {list(w_mean.shape)}"
            )
        if not slots or min(slots) < 0 or max(slots) >= NUM_SLOTS:
            raise ValueError(f"identity slots must be in 0..{NUM_SLOTS - 1}, got {list(slots)}")
        self.register_buffer("code_matrix", code_matrix.float())
        self.register_buffer("edit_matrix", edit_matrix.float())
        self.register_buffer("span", span.float())
        self.register_buffer("w_mean", w_mean.float())
        if coarse_edit is not None and coarse_edit.shape != (STYLE_DIM, k):
            raise ValueError(f"coarse_edit must be [{STYLE_DIM},{k}], got {list(coarse_edit.shape)}")
        self.register_buffer("coarse_edit", None if coarse_edit is None else coarse_edit.float())
        if mouth_directions is not None:
            h = mouth_directions.double()
            if h.ndim != 2 or h.shape[0] != k or not torch.allclose(h.T @ h, torch.eye(h.shape[1], dtype=h.dtype), atol=1e-4):
                raise ValueError(f"mouth_directions must be [{k},r] with orthonormal columns, got {list(mouth_directions.shape)}")
        self.register_buffer("mouth_directions", None if mouth_directions is None else mouth_directions.float())
        # an orthonormal basis of what U leaves out (QR of [U, I]: the same wherever it is computed from the same U)
        full = torch.linalg.qr(torch.cat([span.double(), torch.eye(STYLE_DIM, dtype=torch.float64)], 1))[0]
        self.register_buffer("complement", full[:, span.shape[1] : STYLE_DIM].float())
        self.slots = tuple(int(s) for s in slots)
        self.deviation_slots = self._deviation_set(deviation_slots)

    def _deviation_set(self, deviation_slots: Sequence[int]) -> tuple[int, ...]:
        """``deviation_slots`` with the identity slots added, sorted; each must be a W+ slot."""
        slots = tuple(sorted(set(int(s) for s in deviation_slots) | set(self.slots)))
        if max(slots) >= NUM_SLOTS:
            raise ValueError(f"deviation slots must be in 0..{NUM_SLOTS - 1}, got {list(deviation_slots)}")
        return slots

    @property
    def dim(self) -> int:
        return int(self.code_matrix.shape[1])

    def _mean(self, wplus: torch.Tensor) -> torch.Tensor:
        if wplus.ndim != 3 or wplus.shape[1:] != (NUM_SLOTS, STYLE_DIM):
            raise ValueError(f"W+ must be [N,{NUM_SLOTS},{STYLE_DIM}], got {list(wplus.shape)}")
        return wplus[:, list(self.slots)].mean(1) - self.w_mean.to(wplus)

    def code(self, wplus: torch.Tensor) -> torch.Tensor:
        """W+ ``[N,23,512]`` -> identity code u ``[N,k]`` (about N(0, I) for the generator's own faces)."""
        return self._mean(wplus) @ self.code_matrix.to(wplus)

    @property
    def complement_dim(self) -> int:
        return int(self.complement.shape[1])

    def rotations(self, normals: torch.Tensor, residual_normals: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keyed rotations (R ``[N,512,512]``, R_c ``[N,c,c]``) from standard-normal draws ``[N,512*512]`` and
        ``[N,c*c]`` (c = :attr:`complement_dim`): Q of their QR, with R's diagonal made positive."""

        def orthogonal(a: torch.Tensor, n: int) -> torch.Tensor:
            q, r = torch.linalg.qr(a.double().view(-1, n, n))
            return (q * torch.sign(torch.diagonal(r, dim1=1, dim2=2))[:, None, :]).float()

        return orthogonal(normals, STYLE_DIM), orthogonal(residual_normals, self.complement_dim)

    def with_code(
        self,
        wplus: torch.Tensor,
        u_new: torch.Tensor,
        rotation: torch.Tensor | None = None,
        residual_rotation: torch.Tensor | None = None,
        inverse: bool = False,
        deviation_slots: Sequence[int] | None = None,
        coarse: bool = True,
        mouth: bool = True,
    ) -> torch.Tensor:
        """W+ with identity code ``u_new [N,k]``, its deviations and residual rotated (module docstring; no
        rotation given: left as they are). ``inverse``: rotate with the transposes (the recovery).
        ``deviation_slots``: the slots whose deviations rotate (default :attr:`deviation_slots`; the recovery of a
        code written with another set passes that set). ``coarse``: slots 0-1 take the code's change too (where the
        basis has ``coarse_edit``; False: the recovery of a code written without it). ``mouth``: the change skips
        :attr:`mouth_directions` (where the basis has them; False: the recovery of a code written without them), so
        the result's code is ``u_new`` only along the rest."""
        m = self._mean(wplus)
        u = m @ self.code_matrix.to(wplus)
        if u_new.shape != u.shape:
            raise ValueError(f"identity code must be {list(u.shape)}, got {list(u_new.shape)}")
        du = u_new.to(u) - u
        if mouth and self.mouth_directions is not None:
            h = self.mouth_directions.to(wplus)
            du = du - (du @ h) @ h.T
        m_new = m + du @ self.edit_matrix.to(wplus).T
        if residual_rotation is not None:
            comp = self.complement.to(wplus)
            rc = m @ comp
            rot = residual_rotation.to(wplus).transpose(1, 2) if inverse else residual_rotation.to(wplus)
            m_new = m_new + (torch.einsum("nc,ncd->nd", rc, rot) - rc) @ comp.T
        out = wplus.clone()
        slots = list(self.deviation_slots if deviation_slots is None else self._deviation_set(deviation_slots))
        dev = wplus[:, slots] - self.w_mean.to(wplus) - m[:, None]
        if rotation is not None:
            rot = rotation.to(wplus).transpose(1, 2) if inverse else rotation.to(wplus)
            dev = torch.einsum("nsd,nde->nse", dev, rot)
        out[:, slots] = self.w_mean.to(wplus) + m_new[:, None] + dev
        if coarse and self.coarse_edit is not None:
            out[:, list(COARSE_SLOTS)] = wplus[:, list(COARSE_SLOTS)] + (du @ self.coarse_edit.to(wplus).T)[:, None]
        return out


def _signed_columns(v: torch.Tensor) -> torch.Tensor:
    """``v`` with each column's sign flipped so that its largest-magnitude entry is positive: directions that are the
    same wherever they are computed."""
    return v * torch.sign(v.gather(0, v.abs().argmax(0, keepdim=True)))


def _generated_wplus(generator, faces: int, seed: int) -> torch.Tensor:
    """W+ ``[faces,23,512]`` of ``faces`` of the generator's own faces (truncation 0.7, one style in every slot)."""
    from .mobilestylegan import as_wplus

    gen = torch.Generator().manual_seed(seed)
    return as_wplus(generator.style(torch.randn(faces, STYLE_DIM, generator=gen), 0.7)).contiguous()


@torch.no_grad()
def principal_directions(mapping: torch.nn.Module, n: int = 20000, seed: int = 0) -> dict[str, torch.Tensor]:
    """All 512 principal directions of w = mapping(z), z ~ N(0, I) (``n`` samples, float64), by decreasing
    variance: ``directions [512,512]`` (columns; each column's largest-magnitude entry positive, so they are
    the same wherever they are computed), ``sigma [512]``, ``w_mean [512]``."""
    gen = torch.Generator().manual_seed(seed)
    ws = torch.cat([mapping(torch.randn(min(4096, n - i), STYLE_DIM, generator=gen)) for i in range(0, n, 4096)]).double()
    mean = ws.mean(0)
    cov = (ws - mean).T @ (ws - mean) / (len(ws) - 1)
    evals, evecs = torch.linalg.eigh(cov)
    order = torch.argsort(evals, descending=True)
    return {"directions": _signed_columns(evecs[:, order]), "sigma": evals[order].clamp_min(1e-12).sqrt(), "w_mean": mean}


@torch.no_grad()
def pose_sensitivity(
    generator, directions: torch.Tensor, sigma: torch.Tensor, slots: Sequence[int] = IDENTITY_SLOTS, faces: int = 4, amplitude: float = 2.5, seed: int = 21
) -> torch.Tensor:
    """Head-pose gradient ``[D,3]``: (yaw, pitch, roll) change in degrees per sigma of each direction (columns of
    ``directions [512,D]``), from the faces drawn with it added at +amplitude sigma and at -amplitude sigma in
    ``slots``, averaged over ``faces`` generated faces (truncation 0.7); 256 px, the 468-point face mesh's six pose
    points + solvePnP (:func:`zoo.face_mesh.mesh_head_pose`; never dlib, the evaluation judge)."""
    from ..alignment import ffhq_template
    from ..face3d.landmarks import angle_difference
    from ..face_mesh import mesh_head_pose
    from ..imageio import from_tensor
    from ..inversion import draw_fitted

    template = ffhq_template(256)
    w = _generated_wplus(generator, faces, seed)
    out = []
    for k in range(directions.shape[1]):
        step = (directions[:, k] * sigma[k] * amplitude).float()
        wp = torch.cat([w, w])
        wp[:faces, list(slots)] += step
        wp[faces:, list(slots)] -= step
        images = from_tensor(draw_fitted(generator, wp))
        poses = np.array([mesh_head_pose(im, template) for im in images])
        out.append(torch.as_tensor(angle_difference(poses[:faces], poses[faces:])).mean(0) / (2 * amplitude))
    return torch.stack(out)


def pose_free_edit(
    generator, span: torch.Tensor, sigma: torch.Tensor, q: torch.Tensor, slots: Sequence[int] = COARSE_SLOTS
) -> tuple[torch.Tensor, torch.Tensor]:
    """(coarse_edit ``[512,k]`` = U diag(sigma) (I - P P^T) Q, the pose gradients ``[K,3]`` in ``slots``): the
    identity code's edit directions with the head's pose gradients in ``slots`` removed (module docstring).
    ``span`` = U ``[512,K]``, ``sigma [K]``, ``q`` = Q ``[K,k]``."""
    grad = pose_sensitivity(generator, span, sigma, slots).double()
    pose = torch.linalg.qr(grad)[0]
    keep = torch.eye(span.shape[1], dtype=torch.float64) - pose @ pose.T
    return ((span.double() * sigma.double()) @ keep @ q.double()).float(), grad


@torch.no_grad()
def mouth_sensitivity(generator, identity: WPlusIdentity, faces: int = 8, amplitude: float = 1.0, seed: int = 5) -> torch.Tensor:
    """Mouth-opening gradient ``[faces,k]``: the change of the inner-lip gap (:func:`zoo.face_mesh.aligned_openings`,
    over the eye-corner distance) per unit of each identity-code coordinate, one row per generated face (truncation
    0.7; 0 where the mesh misses a face), from the faces drawn with the code moved by +amplitude and -amplitude through
    :meth:`WPlusIdentity.with_code` (no rotations, no mouth directions), at 256 px. About 11 s per coordinate for 8
    faces on one core."""
    from ..face_mesh import aligned_openings
    from ..imageio import from_tensor
    from ..inversion import draw_fitted

    w = _generated_wplus(generator, faces, seed)
    u = identity.code(w)
    rows = []
    for j in range(identity.dim):
        step = torch.zeros(identity.dim)
        step[j] = amplitude
        wp = torch.cat([identity.with_code(w, u + step, mouth=False), identity.with_code(w, u - step, mouth=False)])
        images = from_tensor(draw_fitted(generator, wp, 256))
        gap = torch.tensor([(o[0] if (o := aligned_openings(im)) is not None else float("nan")) for im in images], dtype=torch.float64)
        rows.append(torch.nan_to_num((gap[:faces] - gap[faces:]) / (2 * amplitude)))
    return torch.stack(rows, 1)


def leading_directions(gradients: torch.Tensor, r: int) -> torch.Tensor:
    """The ``r`` leading right singular vectors ``[k,r]`` (orthonormal) of per-face gradients ``[faces,k]``, each
    signed so that its largest-magnitude entry is positive."""
    return _signed_columns(torch.linalg.svd(gradients.double(), full_matrices=False)[2][:r].T).float()


def _gradient_table(grad: torch.Tensor) -> dict[str, list[float]]:
    """Pose gradients ``[K,3]`` as the basis config writes them: {direction: [yaw, pitch, roll] degrees per sigma}."""
    return {str(i): [round(float(v), 2) for v in grad[i]] for i in range(grad.shape[0])}


def build_identity_basis(generator, k: int = 100, n: int = 20000, seed: int = 0, slots: Sequence[int] = IDENTITY_SLOTS) -> tuple[dict[str, torch.Tensor], dict]:
    """The identity basis (module docstring) from K = k + 3 principal directions, all probed for their pose
    gradient. Returns (tensors for the basis file, a summary for its config)."""
    pcs = principal_directions(generator.mapping, n, seed)
    big_k = k + 3
    U, sigma = pcs["directions"][:, :big_k], pcs["sigma"][:big_k]
    grad = pose_sensitivity(generator, U, sigma, slots).double()  # [K,3] degrees per sigma
    pose = torch.linalg.qr(grad)[0]  # [K,3] orthonormal pose gradients in whitened coordinates
    full = torch.linalg.qr(torch.cat([pose, torch.eye(big_k, dtype=pose.dtype)], 1))[0]  # pose first, then the rest
    Q = _signed_columns(full[:, 3:big_k])
    coarse, coarse_grad = pose_free_edit(generator, U, sigma, Q)
    tensors = {
        "code_matrix": (U / sigma) @ Q,
        "edit_matrix": (U * sigma) @ Q,
        "span": U,
        "w_mean": pcs["w_mean"],
        "coarse_edit": coarse,
    }
    summary = {
        "coarse_slots": list(COARSE_SLOTS),
        "pose_gradient_deg_per_sigma": _gradient_table(grad),
        "coarse_pose_gradient_deg_per_sigma": _gradient_table(coarse_grad),
        "explained_variance": round(float((sigma**2).sum() / (pcs["sigma"] ** 2).sum()), 4),
    }
    return {name: v.float() for name, v in tensors.items()}, summary


@lru_cache(maxsize=4)
def load_wplus_identity(folder: str | None = None) -> WPlusIdentity:
    """The basis in ``folder`` (default: the shipped ``zoo/weights/wplus_identity``) as a :class:`WPlusIdentity`
    on the CPU, with the identity slots its config.json names."""
    from safetensors.torch import load_file

    path = Path(folder) if folder else identity_basis_dir()
    f = path / "basis.safetensors"
    if not f.is_file():
        raise FileNotFoundError(f"no identity basis at {path}: run `python -m zoo.nn.wplus_identity`")
    slots = tuple(json.loads((path / "config.json").read_text()).get("identity_slots", IDENTITY_SLOTS))
    t = load_file(str(f))
    return WPlusIdentity(
        t["code_matrix"], t["edit_matrix"], t["span"], t["w_mean"], slots, coarse_edit=t.get("coarse_edit"), mouth_directions=t.get("mouth_directions")
    ).eval()


def _add_coarse_edit(folder: Path) -> None:
    """Adds ``coarse_edit`` (and its pose gradients in the config) to the basis in ``folder``, from the principal
    directions it was built from (recomputed with its config's ``n`` and ``seed``; they must match its ``span``)."""
    from safetensors.torch import load_file, save_file

    from .mobilestylegan import load_mobilestylegan

    config = json.loads((folder / "config.json").read_text())
    t = load_file(str(folder / "basis.safetensors"))
    g = load_mobilestylegan("cpu")
    with torch.no_grad():
        pcs = principal_directions(g.mapping, int(config["n"]), int(config["seed"]))
        big_k = t["span"].shape[1]
        span, sigma = pcs["directions"][:, :big_k].float(), pcs["sigma"][:big_k].float()
        if (span - t["span"]).abs().amax() > 1e-3:
            raise SystemExit(f"the principal directions of n={config['n']}, seed={config['seed']} do not match {folder}'s span")
        q = (t["span"].T @ t["edit_matrix"]) / sigma[:, None]
        coarse, grad = pose_free_edit(g, t["span"], sigma, q)
    save_file({**{k: v.contiguous() for k, v in t.items()}, "coarse_edit": coarse.contiguous()}, str(folder / "basis.safetensors"))
    config["coarse_slots"] = list(COARSE_SLOTS)
    config["coarse_pose_gradient_deg_per_sigma"] = _gradient_table(grad)
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")


def _add_mouth_directions(folder: Path, r: int, faces: int = 8, amplitude: float = 1.0, seed: int = 5) -> None:
    """Adds ``mouth_directions`` (the ``r`` leading directions of :func:`mouth_sensitivity`) to the basis in
    ``folder``, and the gradients to its config."""
    from safetensors.torch import load_file, save_file

    from .mobilestylegan import load_mobilestylegan

    with torch.no_grad():
        grad = mouth_sensitivity(load_mobilestylegan("cpu"), load_wplus_identity(str(folder)), faces, amplitude, seed).double()
    t = load_file(str(folder / "basis.safetensors"))
    t["mouth_directions"] = leading_directions(grad, r)
    save_file({k: v.contiguous() for k, v in t.items()}, str(folder / "basis.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    config["mouth_directions"] = {
        "r": r,
        "faces": faces,
        "amplitude": amplitude,
        "seed": seed,
        "singular_values_per_unit": [round(float(v), 4) for v in torch.linalg.svdvals(grad)],
        "gradients_per_unit": [[round(float(v), 5) for v in row] for row in grad],
        "built_by": f"python -m zoo.nn.wplus_identity --add-mouth {r}",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    load_wplus_identity.cache_clear()


def main(argv: list[str] | None = None) -> None:
    """Build the shipped basis from the converted generator (about 30 minutes on 2 cores, most of it the mouth
    directions)."""
    import argparse

    from safetensors.torch import save_file

    from .mobilestylegan import load_mobilestylegan

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--slots", default=f"{IDENTITY_SLOTS[0]}-{IDENTITY_SLOTS[-1]}", help="first-last identity slot")
    p.add_argument("--out", type=Path, default=identity_basis_dir())
    p.add_argument("--add-coarse", action="store_true", help="add only coarse_edit to the basis in --out (about 3 minutes)")
    p.add_argument("--add-mouth", type=int, metavar="R", help="add only mouth_directions (R of them) to the basis in --out (about 18 minutes on one core)")
    args = p.parse_args(argv)
    if args.add_coarse:
        _add_coarse_edit(args.out)
        return
    if args.add_mouth:
        _add_mouth_directions(args.out, args.add_mouth)
        return
    first, last = (int(v) for v in args.slots.split("-"))
    slots = tuple(range(first, last + 1))
    g = load_mobilestylegan("cpu")
    settings = {"k": 100, "n": 20000, "seed": 0}
    with torch.no_grad():
        tensors, summary = build_identity_basis(g, **settings, slots=slots)
    folder = args.out
    folder.mkdir(parents=True, exist_ok=True)
    save_file({name: v.contiguous() for name, v in tensors.items()}, str(folder / "basis.safetensors"))
    config = {
        "what": "identity basis of W+ for the keyed identity transforms (zoo.nn.wplus_identity)",
        "generator": "MobileStyleGAN (random-face wheel, converted)",
        "identity_slots": list(slots),
        **settings,
        **summary,
        "built_by": "python -m zoo.nn.wplus_identity",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    load_wplus_identity.cache_clear()
    _add_mouth_directions(folder, MOUTH_DIRECTIONS)
    print(json.dumps({k: v for k, v in config.items() if k != "pose_gradient_deg_per_sigma"}))


if __name__ == "__main__":
    main()
