"""Evaluate any zoo method with the papers' metrics; write the tables as JSON and Markdown.

    python -m training.evaluate --method blur --data synthetic:64 --out outputs/eval/blur
    python -m training.evaluate --method dbaf --local-dir outputs/dbaf/stage2/model --data DIR --judges sface,dlib --out OUT
    python -m training.evaluate --method noise --data photos:group.jpg --control strength=0.3 --out OUT

``--data``: a folder of aligned face crops (FFHQ-style), ``synthetic:N[:SEED]`` (the DCGAN faces of
``zoo.synthetic``) or ``photos:PATH`` (a photo or a folder of photos: faces are detected and
FFHQ-aligned first). Everything is resized to ``--size`` (default 256).

Python: ``evaluate(method, images, judges=("dlib", "sface", "faceres", "mobileface"), ...) -> dict``. dlib never trains anything here; SFace is the frozen identity encoder of the training configs ("used in training"); FaceRes and MobileFace (the privacy guard's independent recognizers) are used by no training.

What is measured (per judge where identity is involved; every rate with its N and a 95% Wilson interval):

* **Privacy** (anonymized vs original): *de-identification rate* = fraction of faces the judge no
  longer matches at its published threshold (SFace cosine 0.363, dlib distance 0.6, ArcFace cosine
  0.28); this is Cao et al.'s successful-protection rate SR (eq. 20). The *identification rate*
  (1 - de-id) is the "De-id" column of HFORD/DBAF, where lower is better. Mean identity cosine
  similarity, mean distance in the judge's native metric (Id-dis, Cao eq. 19 / IDEudemon DIS) and
  L2 distance between unit-normalised embeddings.
* **Recovery** with the right key: recovery rate (judge matches the original), cosine, and
  MSE / PSNR / SSIM / LPIPS of the recovered image. **Wrong key**: de-identification rate and cosine
  of a recovery with a wrong key.
* **Quality** of the anonymized image vs the original: MSE (on [0,1] pixel values), PSNR (peak 1),
  SSIM (Gaussian 11x11), LPIPS and FID when their trunks are available (otherwise marked unavailable
  with the reason, never guessed).
* **Utility**: face detection rate on the anonymized image (Cao eq. 21), box and 5-landmark distance
  to the detection on the original (pixels); dlib 68-point landmark distance (all, eyes, nose,
  mouth; Cao's "pixel-dis"); head-pose error (degrees, L2 of the (yaw, pitch, roll) difference from
  :func:`zoo.face3d.landmarks.head_pose`, ``cv2.solvePnP`` on six landmarks) and expression error (68-landmark distance after similarity
  alignment, per inter-ocular distance). Pose and expression are landmark proxies for IDEudemon's
  3D-model POSE / EXP, which need networks not available offline.
* **Diversity** over K keys: mean pairwise identity cosine between the K anonymized versions of one
  face, and KFFA (our reading of the Known Factor Feature Angle of Li et al. 2022, used by iFADIT):
  the mean pairwise angle in degrees between those embeddings.
* **Robustness**: privacy and recovery again after JPEG quality 90 and 75 and after a 0.5x
  down-and-up resize of the anonymized image.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import io
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import cv2
import numpy as np
import torch

__all__ = [
    "wilson_interval",
    "rate",
    "image_metrics",
    "jpeg",
    "half_resize",
    "ROBUSTNESS",
    "load_eval_images",
    "evaluate",
    "to_markdown",
    "main",
]

Z95 = 1.959963984540054


# ============================================================ statistics
def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95% Wilson score interval of a binomial proportion ``k / n``."""
    if n <= 0:
        return (float("nan"), float("nan"))
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, center - half)
    hi = 1.0 if k == n else min(1.0, center + half)
    return (lo, hi)


def rate(flags: Sequence[bool] | np.ndarray, description: str = "") -> dict[str, Any]:
    """A rate entry: value, k, n and the 95% Wilson interval."""
    flags = np.asarray(flags, dtype=bool).reshape(-1)
    k, n = int(flags.sum()), int(flags.size)
    ci = list(wilson_interval(k, n)) if n else None
    return {"value": k / n if n else None, "k": k, "n": n, "ci95": ci, "description": description}


def mean_entry(values: Sequence[float] | np.ndarray, description: str = "", unit: str = "") -> dict[str, Any]:
    """A mean entry: value, std, n."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"value": None, "n": 0, "status": "no valid samples", "description": description}
    out = {"value": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0, "n": int(v.size), "description": description}
    if unit:
        out["unit"] = unit
    return out


def unavailable(reason: str, description: str = "") -> dict[str, Any]:
    return {"value": None, "status": f"unavailable: {reason}", "description": description}


# ============================================================ image metrics and degradations
def image_metrics(a: np.ndarray, b: np.ndarray, lpips_net: Callable | None = None, lpips_reason: str = "") -> dict[str, Any]:
    """MSE (on [0,1] values), PSNR (peak 1, dB), SSIM, LPIPS between uint8 ``[N,H,W,3]`` batches."""
    from zoo.losses import ssim

    x = torch.from_numpy(np.ascontiguousarray(a)).permute(0, 3, 1, 2).double() / 255.0
    y = torch.from_numpy(np.ascontiguousarray(b)).permute(0, 3, 1, 2).double() / 255.0
    mse = ((x - y) ** 2).flatten(1).mean(1).numpy()
    psnr = np.where(mse > 0, 10 * np.log10(1.0 / np.maximum(mse, 1e-20)), np.inf)
    psnr_capped = np.minimum(psnr, 100.0)  # identical images: PSNR is infinite; reported capped at 100 dB
    s = ssim(x.float(), y.float(), data_range=1.0, reduction="none").numpy()
    out = {
        "mse": mean_entry(mse, "mean squared error on [0,1] pixel values"),
        "psnr": mean_entry(psnr_capped, "peak signal-to-noise ratio, peak 1 (capped at 100 dB)", "dB"),
        "ssim": mean_entry(s, "structural similarity, Gaussian 11x11 window, sigma 1.5"),
    }
    if lpips_net is not None:
        with torch.no_grad():
            d = [float(lpips_net(x[i : i + 1].float() * 2 - 1, y[i : i + 1].float() * 2 - 1).mean()) for i in range(len(x))]
        out["lpips"] = mean_entry(d, "LPIPS distance")
    else:
        out["lpips"] = unavailable(lpips_reason or "no LPIPS weights", "LPIPS distance")
    return out


def jpeg(images: np.ndarray, quality: int) -> np.ndarray:
    """Re-encode uint8 RGB ``[N,H,W,3]`` as JPEG at ``quality`` (PIL, 4:2:0) and decode."""
    from PIL import Image

    out = []
    for im in images:
        buf = io.BytesIO()
        Image.fromarray(im).save(buf, format="JPEG", quality=int(quality))
        out.append(np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")))
    return np.stack(out)


def half_resize(images: np.ndarray) -> np.ndarray:
    """0.5x resize (area filter) and back up to the original size (bicubic), as a sharing channel does."""
    out = []
    for im in images:
        h, w = im.shape[:2]
        small = cv2.resize(im, (max(1, w // 2), max(1, h // 2)), interpolation=cv2.INTER_AREA)
        out.append(cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC))
    return np.stack(out)


ROBUSTNESS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "jpeg90": lambda x: jpeg(x, 90),
    "jpeg75": lambda x: jpeg(x, 75),
    "resize0.5": half_resize,
}


# ============================================================ landmarks, pose, expression
_REGIONS = {"eyes": list(range(36, 48)), "nose": list(range(27, 36)), "mouth": list(range(48, 68))}


class Landmarks68:
    """dlib's 68-point shape predictor (:func:`zoo.face3d.landmarks.shape_predictor68`) on aligned crops,
    in the face box of the FFHQ alignment template."""

    def __init__(self) -> None:
        from zoo.face3d.landmarks import shape_predictor68

        shape_predictor68()  # fail here (ImportError / FileNotFoundError), not on the first crop

    @staticmethod
    def box(size: int) -> tuple[int, int, int, int]:
        """The face box (x0, y0, x1, y1) of an FFHQ-aligned crop, from the alignment template (same for every crop)."""
        from zoo.alignment import ffhq_template

        lm = ffhq_template(size)
        eye = lm[1, 0] - lm[0, 0]
        cx = (lm[0, 0] + lm[1, 0]) / 2
        x0, y0, x1, y1 = cx - 1.1 * eye, lm[0, 1] - 0.9 * eye, cx + 1.1 * eye, lm[3, 1] + 1.0 * eye
        return int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))

    def __call__(self, crops: np.ndarray) -> np.ndarray:
        """uint8 ``[N,S,S,3]`` aligned crops -> ``[N,68,2]`` pixel coordinates."""
        from zoo.face3d.landmarks import predict_landmarks68

        out = [predict_landmarks68(c, self.box(c.shape[0])) for c in crops]
        return np.asarray(out, dtype=np.float64).reshape(len(out), 68, 2)


def expression_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mean distance of brow/eye/nose/mouth landmarks (17..67) after similarity-aligning ``b`` to ``a``,
    per inter-ocular distance of ``a``. ``[N,68,2]`` x2 -> ``[N]``."""
    out = []
    for p, q in zip(a, b):
        p, q = p[17:], q[17:]
        m, _ = cv2.estimateAffinePartial2D(q.astype(np.float32), p.astype(np.float32), method=cv2.LMEDS)
        if m is None:
            out.append(np.nan)
            continue
        q2 = q @ m[:, :2].T + m[:, 2]
        iod = np.linalg.norm(p[36 - 17] - p[45 - 17])
        out.append(float(np.linalg.norm(p - q2, axis=1).mean() / max(iod, 1e-6)))
    return np.asarray(out)


# ============================================================ data
def load_eval_images(spec: str, size: int = 256, limit: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """Aligned crops ``uint8 [N,size,size,3]`` and a dataset description from a ``--data`` spec."""
    from zoo import imageio

    if spec.startswith("synthetic:"):
        parts = spec.split(":")
        n = int(parts[1])
        seed = int(parts[2]) if len(parts) > 2 else 1
        from zoo.synthetic import synthetic_faces_uint8

        # held out from training sets: indices from 10^9 on
        imgs = synthetic_faces_uint8(n, seed=seed, resolution=size, offset=10**9)
        return imgs, {"name": f"synthetic DCGAN faces (gan-face-generate), seed {seed}", "hub_id": None, "num_images": n, "source": spec}
    if spec.startswith("photos:"):
        from zoo import alignment, detection

        path = Path(spec.split(":", 1)[1]).expanduser()
        files = sorted(p for p in path.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".webp")) if path.is_dir() else [path]
        crops = []
        for f in files:
            rgb, _ = imageio.load_image(str(f))
            for face in detection.detect_faces(rgb):
                crops.append(alignment.align_face(rgb, face.landmarks, size).crop)
        if not crops:
            raise ValueError(f"no faces found in {path}")
        crops = crops[:limit] if limit else crops
        return np.stack(crops), {"name": f"faces detected and FFHQ-aligned from {path.name}", "hub_id": None, "num_images": len(crops), "source": spec}
    folder = Path(spec).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"--data {spec!r}: not a folder, synthetic:N or photos:PATH")
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".webp", ".bmp"))
    files = files[:limit] if limit else files
    if not files:
        raise FileNotFoundError(f"no images in {folder}")
    imgs = np.stack([imageio.resize_square(imageio.load_image(str(f))[0], size) for f in files])
    return imgs, {"name": folder.name, "hub_id": None, "num_images": len(files), "source": str(folder)}


# ============================================================ running a method
def _run(method, op: str, images: np.ndarray, key: str | None, controls: Mapping[str, Any]) -> tuple[np.ndarray, int]:
    """``method.anonymize/recover/reconstruction`` on aligned crops -> (uint8 [N,H,W,3], number of
    fail-closed fallbacks); ``reconstruct`` takes no key."""
    if op == "reconstruct":
        results = method.reconstruction(list(images), aligned=True, **dict(controls))
    else:
        fn = method.anonymize if op == "anonymize" else method.recover
        results = fn(list(images), key=key, aligned=True, **dict(controls))
    arr = np.stack([np.asarray(r.image.convert("RGB")) for r in results])
    fallbacks = sum(len(r.fallbacks) for r in results)
    return arr, fallbacks


def _unit(e: np.ndarray) -> np.ndarray:
    return e / np.linalg.norm(e, axis=1, keepdims=True).clip(1e-12)


def _identity_block(judge, e_ref: np.ndarray, e_out: np.ndarray, what: str) -> dict[str, Any]:
    same = judge.same_person(e_ref, e_out)
    cos = (_unit(e_ref) * _unit(e_out)).sum(1)
    return {
        "deid_rate": rate(~same, f"fraction of {what} the judge does not match to the original (higher = more private)"),
        "identification_rate": rate(same, f"fraction of {what} still matched to the original (HFORD/DBAF 'De-id', lower = more private)"),
        "id_cosine": mean_entry(cos, f"identity cosine similarity, {what} vs original"),
        "id_distance": mean_entry(
            judge.distance(e_ref, e_out), f"identity distance in the judge's metric ({judge.metric}; threshold {judge.distance_threshold:.3g})"
        ),
        "id_l2": mean_entry(np.linalg.norm(_unit(e_ref) - _unit(e_out), axis=1), "L2 distance of unit-normalised embeddings"),
    }


def _detection_block(orig: np.ndarray, out: np.ndarray) -> dict[str, Any]:
    from zoo import detection

    def best(img):
        faces = detection.detect_faces(img)
        if not faces:
            return None
        c = np.array(img.shape[1::-1]) / 2
        return min(faces, key=lambda f: np.linalg.norm(np.array(f.center) - c))

    found_o, found_a, box_d, lm_d = [], [], [], []
    for a, b in zip(orig, out):
        fo, fa = best(a), best(b)
        found_o.append(fo is not None)
        found_a.append(fa is not None)
        if fo is not None and fa is not None:
            box_d.append(float(np.linalg.norm(fo.box.reshape(2, 2) - fa.box.reshape(2, 2), axis=1).mean()))
            lm_d.append(float(np.linalg.norm(fo.landmarks - fa.landmarks, axis=1).mean()))
    return {
        "detection_rate_original": rate(found_o, "faces detected in the original crops"),
        "detection_rate": rate(found_a, "faces detected in the anonymized crops (Cao et al. DR, eq. 21)"),
        "box_distance": mean_entry(box_d, "mean corner distance between the boxes found in original and anonymized", "px"),
        "landmark5_distance": mean_entry(lm_d, "mean distance between the detector's 5 landmarks in original and anonymized", "px"),
    }


def _landmark_block(orig: np.ndarray, out: np.ndarray) -> dict[str, Any]:
    try:
        lm68 = Landmarks68()
    except (FileNotFoundError, ImportError) as err:
        return {"landmarks68": unavailable(str(err))}
    a, b = lm68(orig), lm68(out)
    d = np.linalg.norm(a - b, axis=2)  # [N,68]
    block = {"landmark68_distance": mean_entry(d.mean(1), "dlib 68-landmark distance, all points (Cao et al. pixel-dis)", "px")}
    for region, idx in _REGIONS.items():
        block[f"landmark68_distance_{region}"] = mean_entry(d[:, idx].mean(1), f"dlib 68-landmark distance, {region}", "px")
    from zoo.face3d.landmarks import head_pose, pose_difference

    pa, pb = head_pose(a, orig.shape[1:3]), head_pose(b, out.shape[1:3])
    block["pose_error"] = mean_entry(
        pose_difference(pa, pb), "head pose error: L2 of (yaw, pitch, roll) difference, solvePnP on dlib landmarks (proxy for IDEudemon POSE)", "deg"
    )
    block["expression_error"] = mean_entry(
        expression_distance(a, b), "68-landmark distance after similarity alignment, per inter-ocular distance (proxy for IDEudemon EXP)"
    )
    return block


def _load_lpips(lpips: Any) -> tuple[Callable | None, str]:
    if lpips is False or lpips is None:
        return None, "LPIPS disabled"
    if callable(lpips):
        return lpips, ""
    try:
        from zoo.nn.lpips import load_lpips

        net = load_lpips("alex") if lpips in (True, "auto") else load_lpips("alex", repo_id=str(lpips))
        return net.eval(), ""
    except Exception as err:  # noqa: BLE001 - LPIPSUnavailable, import errors: report the reason
        return None, f"{type(err).__name__}: {str(err)[:200]}"


def evaluate(
    method,
    images: np.ndarray,
    judges: Sequence[str] | Sequence[Any] = ("dlib", "sface", "faceres", "mobileface"),
    *,
    key: str = "evaluation key",
    wrong_key: str = "a wrong key",
    n_keys: int = 4,
    controls: Mapping[str, Any] | None = None,
    robustness: bool = True,
    detection: bool = True,
    landmarks: bool = True,
    lpips: Any = "auto",
    dataset: Mapping[str, Any] | str | None = None,
    command: str | None = None,
) -> dict[str, Any]:
    """Evaluate ``method`` (a zoo method object) on aligned crops ``images`` (uint8 ``[N,S,S,3]``).

    ``judges``: judge names (``zoo.judges.get_judge``) or judge objects. Returns the JSON-ready result
    (``{"method", "dataset", "judges", "metrics": {...}, ...}``, the layout ``hub_cards`` reads).
    """
    from zoo.judges import get_judge

    t0 = time.perf_counter()
    images = np.asarray(images, dtype=np.uint8)
    if images.ndim != 4 or images.shape[-1] != 3 or len(images) == 0:
        raise ValueError(f"images must be uint8 [N,S,S,3] with N > 0, got {images.shape}")
    controls = dict(controls or {})
    judge_objs = [get_judge(j) if isinstance(j, str) else j for j in judges]
    uses_key = bool(getattr(method, "uses_key", True))
    reversible = bool(getattr(method, "reversible", False))
    lpips_net, lpips_reason = _load_lpips(lpips)

    anon, fb_anon = _run(method, "anonymize", images, key, controls)
    outputs: dict[str, np.ndarray] = {"anonymized": anon}
    fallbacks = {"anonymize": fb_anon}
    if reversible:
        outputs["recovered"], fallbacks["recover"] = _run(method, "recover", anon, key, controls)
        outputs["wrong_key"], fallbacks["recover_wrong_key"] = _run(method, "recover", anon, wrong_key, controls)
    reconstructs = bool(getattr(method, "can_reconstruct", False))
    if reconstructs:  # the generator with the identity unchanged: how far synthesis alone moves the face
        outputs["reconstructed"], fallbacks["reconstruct"] = _run(method, "reconstruct", images, None, controls)
    diversity_keys = [key] + [f"{key} / diversity {i}" for i in range(1, n_keys)] if (uses_key and n_keys >= 2) else []
    div_outputs = [anon] + [_run(method, "anonymize", images, k, controls)[0] for k in diversity_keys[1:]]
    # the wrong key on every key's anonymization too: one key's rate over N faces swings with the key
    # (docs/ifadit_personal.md, "What a wrong password leaves")
    wrong_all = [outputs["wrong_key"]] + [_run(method, "recover", o, wrong_key, controls)[0] for o in div_outputs[1:]] if reversible else []
    degraded = {name: fn(anon) for name, fn in ROBUSTNESS.items()} if robustness else {}
    recovered_degraded = {name: _run(method, "recover", img, key, controls)[0] for name, img in degraded.items()} if reversible else {}

    metrics: dict[str, Any] = {"privacy": {}, "quality": image_metrics(images, anon, lpips_net, lpips_reason)}
    metrics["quality"]["fid"] = unavailable("FID needs Inception-v3 ImageNet weights, which are not available offline", "Frechet Inception Distance")
    if reconstructs:
        metrics["reconstruction"] = {"quality": image_metrics(images, outputs["reconstructed"], lpips_net, lpips_reason)}
    if reversible:
        metrics["recovery"] = {"quality": image_metrics(images, outputs["recovered"], lpips_net, lpips_reason)}
        metrics["wrong_key"] = {}
    if div_outputs and len(div_outputs) >= 2:
        metrics["diversity"] = {}
    if robustness:
        metrics["robustness"] = {name: {} for name in degraded}

    for judge in judge_objs:
        jn = judge.name
        e_orig = judge.embed_aligned(images)
        e_anon = judge.embed_aligned(anon)
        metrics["privacy"][jn] = _identity_block(judge, e_orig, e_anon, "anonymized faces")
        if reconstructs:
            metrics["reconstruction"][jn] = _identity_block(
                judge, e_orig, judge.embed_aligned(outputs["reconstructed"]), "reconstructions (identity unchanged)"
            )
        if reversible:
            e_rec = judge.embed_aligned(outputs["recovered"])
            block = _identity_block(judge, e_orig, e_rec, "recovered faces")
            metrics["recovery"][jn] = {
                "recovery_rate": rate(judge.same_person(e_orig, e_rec), "fraction of right-key recoveries the judge matches to the original"),
                "closer_than_anonymized": rate(
                    judge.distance(e_orig, e_rec) < judge.distance(e_orig, e_anon),
                    "fraction of faces whose right-key recovery is closer to the original than the anonymized face",
                ),
                "id_cosine": block["id_cosine"],
                "id_distance": block["id_distance"],
            }
            metrics["wrong_key"][jn] = _identity_block(judge, e_orig, judge.embed_aligned(outputs["wrong_key"]), "wrong-key recoveries")
            if len(wrong_all) >= 2:
                metrics["wrong_key"][jn]["identification_rate_all_keys"] = rate(
                    np.concatenate([judge.same_person(e_orig, judge.embed_aligned(w)) for w in wrong_all]),
                    f"fraction of wrong-key recoveries of the {len(wrong_all)} keys' anonymized faces still matched to the original",
                )
        if "diversity" in metrics:
            embs = np.stack([e_anon] + [judge.embed_aligned(o) for o in div_outputs[1:]])  # [K,N,D]
            u = embs / np.linalg.norm(embs, axis=2, keepdims=True).clip(1e-12)
            k = len(u)
            iu = np.triu_indices(k, 1)
            sims = np.einsum("knd,lnd->nkl", u, u)[:, iu[0], iu[1]]  # [N, K(K-1)/2]
            angles = np.degrees(np.arccos(np.clip(sims, -1.0, 1.0)))
            all_deid = ~np.concatenate([judge.same_person(e_orig, e) for e in embs])
            metrics["diversity"][jn] = {
                "num_keys": k,
                "pairwise_cosine": mean_entry(sims.mean(1), f"mean identity cosine between the {k} anonymized versions of a face (lower = more diverse)"),
                "kffa": mean_entry(angles.mean(1), "Known Factor Feature Angle: mean pairwise angle between those identities (higher = more diverse)", "deg"),
                "deid_rate_all_keys": rate(all_deid, f"de-identification rate over all {k} keys"),
                "pairwise_same_rate": rate(
                    np.concatenate([judge.same_person(embs[a], embs[b]) for a, b in zip(*iu)]),
                    f"fraction of pairs among the {k} anonymized versions of a face that the judge calls the same person (lower = more diverse)",
                ),
            }
        for name, img in degraded.items():
            row = {"privacy": _identity_block(judge, e_orig, judge.embed_aligned(img), f"anonymized faces after {name}")["deid_rate"]}
            if reversible:
                row["recovery_rate"] = rate(
                    judge.same_person(e_orig, judge.embed_aligned(recovered_degraded[name])), f"right-key recovery from the anonymized image after {name}"
                )
            metrics["robustness"][name][jn] = row

    for name in degraded:
        if reversible:
            rq = image_metrics(images, recovered_degraded[name])
            metrics["robustness"][name]["recovery_psnr"] = rq["psnr"]
    if detection:
        metrics["utility"] = _detection_block(images, anon)
    if landmarks:
        metrics.setdefault("utility", {}).update(_landmark_block(images, anon))

    return {
        "method": getattr(method, "name", type(method).__name__),
        "dataset": dataset if dataset is not None else {"name": "unspecified", "num_images": int(len(images))},
        "num_images": int(len(images)),
        "image_size": int(images.shape[1]),
        "judges": [
            f"{j.name} ({j.metric}, threshold {j.threshold}{'; used in training' if getattr(j, 'used_in_training', False) else ''})" for j in judge_objs
        ],
        "judge_names": [j.name for j in judge_objs],
        "controls": controls,
        "reversible": reversible,
        "uses_key": uses_key,
        "fallbacks": fallbacks,
        "metrics": metrics,
        "command": command,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": f"{platform.machine()} {'cuda' if torch.cuda.is_available() else 'cpu'} torch {torch.__version__}",
        "seconds": round(time.perf_counter() - t0, 2),
    }


# ============================================================ Markdown
def format_entry(entry: Any) -> str:
    """A result entry as the tables print it: a rate as `value [lo, hi] (n=N)`, a mean as `value ± std unit`."""
    if not isinstance(entry, Mapping):
        return str(entry)
    v = entry.get("value")
    if v is None:
        status = str(entry.get("status", "n/a"))
        return status if len(status) <= 90 else status[:87] + "..."
    if "ci95" in entry:
        lo, hi = entry["ci95"]
        return f"{v:.3f} [{lo:.3f}, {hi:.3f}] (n={entry['n']})"
    text = f"{v:.4g}"
    if entry.get("std") is not None and entry.get("n", 0) > 1:
        text += f" ± {entry['std']:.2g}"
    if entry.get("unit"):
        text += f" {entry['unit']}"
    return text


def _table(title: str, rows: list[tuple[str, Any]], cols: list[str]) -> list[str]:
    lines = [f"### {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for label, cells in rows:
        lines.append("| " + " | ".join([label] + [format_entry(c) for c in cells]) + " |")
    return lines + [""]


def to_markdown(result: Mapping[str, Any]) -> str:
    """The evaluation as Markdown tables (rates: value [95% Wilson interval] (n))."""
    m = result["metrics"]
    judges = result["judge_names"]
    ds = result["dataset"]
    ds_text = ds if isinstance(ds, str) else ds.get("name", "")
    lines = [
        f"## {result['method']}: evaluation on {ds_text} ({result['num_images']} faces, {result['image_size']} px)",
        "",
        f"Judges: {', '.join(result['judges'])}. Controls: {result['controls'] or 'defaults'}. "
        f"Fail-closed fallbacks: {result['fallbacks']}. Command: `{result.get('command') or 'python API'}`.",
        "",
        "De-identification rate = fraction of anonymized faces the judge no longer matches (higher = more private); "
        "identification rate = 1 - de-id (the papers' 'De-id', lower = more private).",
        "",
    ]
    metric_rows = [
        ("de-identification rate", "deid_rate"),
        ("identification rate", "identification_rate"),
        ("identity cosine", "id_cosine"),
        ("identity distance (native)", "id_distance"),
        ("L2 of unit embeddings", "id_l2"),
    ]
    lines += _table("Privacy (anonymized vs original)", [(label, [m["privacy"][j][k] for j in judges]) for label, k in metric_rows], ["metric"] + judges)
    q = m["quality"]
    lines += _table("Image quality (anonymized vs original)", [(k, [q[k]]) for k in ("mse", "psnr", "ssim", "lpips", "fid")], ["metric", "value"])
    if "reconstruction" in m:
        r = m["reconstruction"]
        lines += _table(
            "Reconstruction with the identity unchanged (the reference for the privacy rows)",
            [(label, [r[j][k] for j in judges]) for label, k in metric_rows[:3]],
            ["metric"] + judges,
        )
        lines += _table("Reconstruction image quality", [(k, [r["quality"][k]]) for k in ("mse", "psnr", "ssim", "lpips")], ["metric", "value"])
    if "recovery" in m:
        rec = m["recovery"]
        lines += _table(
            "Recovery with the right key",
            [(k.replace("_", " "), [rec[j][k] for j in judges]) for k in ("recovery_rate", "closer_than_anonymized", "id_cosine", "id_distance")],
            ["metric"] + judges,
        )
        lines += _table("Recovered image quality", [(k, [rec["quality"][k]]) for k in ("mse", "psnr", "ssim", "lpips")], ["metric", "value"])
        wrong_rows = [(label, k) for label, k in metric_rows[:3]]
        if "identification_rate_all_keys" in m["wrong_key"][judges[0]]:
            wrong_rows.append(("identification rate, every key's anonymized face", "identification_rate_all_keys"))
        lines += _table("Recovery with a wrong key", [(label, [m["wrong_key"][j][k] for j in judges]) for label, k in wrong_rows], ["metric"] + judges)
    if "diversity" in m:
        d = m["diversity"]
        lines += _table(
            f"Diversity over {d[judges[0]]['num_keys']} keys",
            [(k.replace("_", " "), [d[j][k] for j in judges]) for k in ("pairwise_cosine", "pairwise_same_rate", "kffa", "deid_rate_all_keys")],
            ["metric"] + judges,
        )
    if "utility" in m:
        lines += _table("Utility (anonymized vs original)", [(k.replace("_", " "), [v]) for k, v in m["utility"].items()], ["metric", "value"])
    if "robustness" in m:
        rows = []
        for name, block in m["robustness"].items():
            rows.append((f"{name}: de-id rate", [block[j]["privacy"] for j in judges]))
            if "recovery_rate" in block[judges[0]]:
                rows.append((f"{name}: recovery rate", [block[j]["recovery_rate"] for j in judges]))
        lines += _table("Robustness (after re-encoding the anonymized image)", rows, ["condition"] + judges)
    return "\n".join(lines)


# ============================================================ CLI
def parse_controls(items: Sequence[str]) -> dict[str, Any]:
    """``["level=9", "shape=box"]`` -> ``{"level": 9, "shape": "box"}`` (values parsed as JSON where they can
    be); empty items are skipped."""
    out: dict[str, Any] = {}
    for item in items or []:
        if not item.strip():
            continue
        k, _, v = item.strip().partition("=")
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="Evaluate a zoo method with the papers' metrics (JSON + Markdown).")
    p.add_argument("--method", required=True, help="zoo method name (or module:Class)")
    p.add_argument("--data", required=True, help="DIR of aligned crops | synthetic:N[:SEED] | photos:PATH")
    p.add_argument("--local-dir", help="checkpoint folder of a neural method (default: its Hub repo / cache)")
    p.add_argument(
        "--judges",
        default="dlib,sface,faceres,mobileface",
        help="comma-separated: dlib (independent), sface (used in training), faceres, mobileface (independent), arcface",
    )
    p.add_argument("--key", default="evaluation key", help="the secret used to anonymize (and recover)")
    p.add_argument("--wrong-key", default="a wrong key")
    p.add_argument("--n-keys", type=int, default=4, help="keys per face for the diversity table")
    p.add_argument("--control", action="append", default=[], metavar="NAME=VALUE", help="method control, repeatable")
    p.add_argument("--size", type=int, default=256, help="aligned crop size")
    p.add_argument("--limit", type=int, help="use at most this many images")
    p.add_argument("--lpips", default="auto", help="LPIPS checkpoint repo/folder; 'none' to skip")
    p.add_argument("--no-robustness", action="store_true")
    p.add_argument("--no-landmarks", action="store_true")
    p.add_argument("--device", help="cpu | cuda (default: cuda when available)")
    p.add_argument("--out", required=True, help="output folder: eval.json + eval.md")
    args = p.parse_args(argv)

    from zoo import registry

    images, dataset = load_eval_images(args.data, args.size, args.limit)
    if ":" in args.method:
        from training.train import resolve_method_class

        cls = resolve_method_class(args.method)
        method = (cls.from_pretrained(args.local_dir) if args.local_dir else cls()).to(args.device or "cpu")
    else:
        method = registry.load(args.method, local_dir=args.local_dir, device=args.device)
    command = "python -m training.evaluate " + " ".join(sys.argv[1:] if argv is None else argv)
    result = evaluate(
        method,
        images,
        [j.strip() for j in args.judges.split(",") if j.strip()],
        key=args.key,
        wrong_key=args.wrong_key,
        n_keys=args.n_keys,
        controls=parse_controls(args.control),
        robustness=not args.no_robustness,
        landmarks=not args.no_landmarks,
        lpips=None if args.lpips == "none" else args.lpips,
        dataset=dataset,
        command=command,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(result, indent=2, default=float))
    (out / "eval.md").write_text(to_markdown(result) + "\n")
    print(to_markdown(result))
    print(f"\nwrote {out / 'eval.json'} and {out / 'eval.md'} in {result['seconds']} s")
    return result


if __name__ == "__main__":
    main()
