"""The IDEudemon privacy dial on synthetic faces (a table like the paper's Fig. 4), from a command.

    python -m benchmarks.ideudemon_dial --n 64 --out benchmarks/results/ideudemon_dial.md
    python -m benchmarks.ideudemon_dial --n 64 --restorer outputs/ideudemon/stage1/model --out ...   # Step I + II
    python -m benchmarks.ideudemon_dial --n 64 --restorer zoo/weights/ideudemon --out benchmarks/results/ideudemon_dial.md  # the shipped demo

For ``n`` held-out synthetic faces (``zoo.synthetic``, ``--seed``, default 1: not the set the
shape space was learned from) at ``--resolution`` px, ``--keys`` keys per face and every noise scale
in ``--scales`` (default 0.05, 0.10, ..., 0.40), it measures:

* identity distance between input and output with two judges the method never trains with: SFace
  (cosine distance, same person below 0.637) and dlib's ResNet (L2, same person below 0.6; the
  paper's "FR" column), plus the fraction of outputs each judge still matches to the input;
* pose error: L2 norm of the (yaw, pitch, roll) difference in degrees, each from 68 dlib landmarks
  through ``solvePnP`` of a generic 6-point face (:func:`zoo.face3d.landmarks.head_pose`);
* non-face PSNR: between input and output over the pixels outside the input's face region
  (landmark face polygon dilated by 4% of the crop);
* at scale 0: the fit-then-render reconstruction error of the mesh backend (PSNR over the face
  region and over the crop, landmark error of the shape model in % of the inter-ocular distance).

Without ``--restorer`` the output is **Step I alone** with the shipped mesh model (shape + texture
identity, noise gain 1; fit, perturb, render, visual similarity assistance; no restorer); with it, the
method loaded from that checkpoint folder (its own gains; for the Step-I demo checkpoint
``zoo/weights/ideudemon``, which has no restorer, Step I + blend-back).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from benchmarks.ideudemon_demo import set_step_two, step_two_label

__all__ = ["measure", "main"]


def _psnr(a: np.ndarray, b: np.ndarray, keep: np.ndarray) -> float:
    if keep.sum() == 0:
        return float("nan")
    mse = ((a[keep].astype(np.float64) - b[keep].astype(np.float64)) ** 2).mean()
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


class _Judges:
    """YuNet once per image, then SFace, dlib and 68 landmarks from the same detection."""

    def __init__(self) -> None:
        from zoo.judges import get_judge

        self.sface, self.dlib = get_judge("sface"), get_judge("dlib")

    def describe(self, img: np.ndarray) -> dict:
        from zoo.alignment import ffhq_template
        from zoo.detection import detect_faces
        from zoo.detectors import DetectedFace
        from zoo.face3d.landmarks import detect_landmarks68, head_pose

        faces = detect_faces(img, "yunet")
        h, w = img.shape[:2]
        if faces:
            c = np.array([w / 2, h / 2])
            face = max(faces, key=lambda f: f.width * f.height / (1.0 + np.hypot(*(np.array(f.center) - c)) / w))
        else:
            face = DetectedFace([0, 0, w, h], ffhq_template(w), 0.0, "template")
        lm68 = detect_landmarks68(img, face.landmarks)
        return {
            "sface": self.sface.embed_photo_faces(img, [face])[0],
            "dlib": self.dlib.embed_photo_faces(img, [face])[0],
            "pose": head_pose(lm68, (h, w)),
            "detected": bool(faces),
        }


def _step_one_outputs(model: dict, x: torch.Tensor, keys, scale: float) -> np.ndarray:
    """Step I + visual similarity assistance with the mesh backend alone (no restorer): uint8 outputs."""
    from zoo.imageio import from_tensor
    from zoo.methods.ideudemon import hybrid_image, id_noise

    z, app, cam = model["fit"]
    z_p = (z + scale * id_noise(keys, z.shape[1])).clamp(-1, 1)  # eq. 3 + clip
    x_p, face_p = model["head"].render(z_p, app, cam)  # eq. 4
    return from_tensor(hybrid_image(x, x_p, model["face_x"], face_p))


@torch.no_grad()
def measure(
    n: int = 64,
    seed: int = 1,
    keys: int = 3,
    scales: Sequence[float] = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4),
    resolution: int = 256,
    restorer: str | None = None,
    progress: bool = True,
    with_restorer: bool = False,
    prior: bool = True,
    register: bool = False,
) -> dict:
    """Run the benchmark; returns a JSON-serialisable dict of per-scale means and the scale-0 numbers.
    ``with_restorer``: run the checkpoint's restorer even where its config ships it switched off; ``prior``: False
    turns Step II's FFHQ prior off; ``register``: step1.register_features on."""
    from zoo.face3d import MeshHeadModel
    from zoo.face3d.landmarks import FACE_OUTLINE, pose_difference
    from zoo.face3d.warp import polygon_mask
    from zoo.imageio import from_tensor, to_tensor
    from zoo.keys import Secret
    from zoo.synthetic import synthetic_faces_uint8

    t0 = time.time()
    faces = synthetic_faces_uint8(n, seed=seed, resolution=resolution)
    method = None
    if restorer:
        from zoo.methods.ideudemon import IDEudemon

        method = IDEudemon.from_pretrained(restorer).to("cpu")
        set_step_two(method, with_restorer=with_restorer, prior=prior, register=register)
        if method.resolution != resolution:
            faces = from_tensor(to_tensor(faces, method.resolution))
            resolution = method.resolution
        head = method.head_model
    else:
        head = MeshHeadModel()
    x = to_tensor(faces)
    z, app, cam = head.fit(x)
    face_x = head.source_mask(app, cam)
    judges = _Judges()
    ref = [judges.describe(f) for f in faces]

    # non-face region of each input: outside its landmark face polygon dilated by 4% of the crop
    import cv2

    src_v = head.source_vertices(app, cam)
    rad = max(1, int(round(0.04 * resolution)))
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * rad + 1, 2 * rad + 1))
    outside = [cv2.dilate((polygon_mask(v[FACE_OUTLINE], (resolution, resolution)) > 0).astype(np.uint8), kernel) == 0 for v in src_v]

    # scale 0: fit-then-render reconstruction of the mesh backend
    rec, _ = head.render(z, app, cam)
    rec_u8 = from_tensor(rec)
    inside = [~o for o in outside]
    lm_err = []
    for lm in head.landmarks(app, cam):
        zz, ee, sim, _ = head.space.encode(lm)
        iod = np.linalg.norm(lm[42:48].mean(0) - lm[36:42].mean(0))
        lm_err.append(np.linalg.norm(head.space.decode(zz, ee, sim) - lm, axis=1).mean() / iod)
    recon = {
        "psnr_face": float(np.mean([_psnr(f, r, m) for f, r, m in zip(faces, rec_u8, inside)])),
        "psnr_crop": float(np.mean([_psnr(f, r, np.ones(f.shape[:2], bool)) for f, r in zip(faces, rec_u8)])),
        "landmark_error_iod_pct": float(100 * np.mean(lm_err)),
        "clipped_code_fraction": float((z.abs() >= 1).float().mean()),
    }
    model = {"fit": (z, app, cam), "head": head, "face_x": face_x}

    rows = []
    for s in [0.0, *scales]:
        ds, dd, pe, ps = [], [], [], []
        for k in range(keys):
            ks = [Secret(f"dial-{k}").derive("ideudemon", i) for i in range(n)]
            if method is None:
                out = _step_one_outputs(model, x, ks, float(s))
            else:
                out = from_tensor(method.anonymize_faces(x, ks, scale=float(s)))
            for i, img in enumerate(out):
                d = judges.describe(img)
                ds.append(float(judges.sface.distance(ref[i]["sface"], d["sface"])[0]))
                dd.append(float(judges.dlib.distance(ref[i]["dlib"], d["dlib"])[0]))
                pe.append(float(pose_difference(d["pose"], ref[i]["pose"])))
                ps.append(_psnr(faces[i], img, outside[i]))
        ds, dd = np.array(ds), np.array(dd)
        finite = [p for p in ps if np.isfinite(p)]
        rows.append(
            {
                "scale": float(s),
                "sface_dist": float(ds.mean()),
                "sface_dist_std": float(ds.std()),
                "sface_same_rate": float((ds < judges.sface.distance_threshold).mean()),
                "dlib_dist": float(dd.mean()),
                "dlib_dist_std": float(dd.std()),
                "dlib_same_rate": float((dd < judges.dlib.distance_threshold).mean()),
                "pose_err_deg": float(np.nanmedian(pe)),
                "pose_err_deg_mean": float(np.nanmean(pe)),
                "nonface_psnr": float(np.mean(finite)) if finite else float("inf"),
                "nonface_identical_fraction": float(np.mean([not np.isfinite(p) for p in ps])),
            }
        )
        if progress:
            r = rows[-1]
            print(
                f"[dial] scale {s:.2f}: sface {r['sface_dist']:.3f} dlib {r['dlib_dist']:.3f} pose {r['pose_err_deg']:.2f} deg "
                f"non-face PSNR {r['nonface_psnr']:.1f} dB ({time.time() - t0:.0f} s)",
                flush=True,
            )
    return {
        "n": n,
        "seed": seed,
        "keys": keys,
        "resolution": resolution,
        "mode": f"step I + II: {step_two_label(method)}; step1 {json.dumps(method.config.get('step1', {}))}"
        if method
        else "step I alone (mesh backend with texture identity, gain 1, no restorer)",
        "restorer": restorer,
        "shape_space": dict(head.space.meta),
        "reconstruction": recon,
        "rows": rows,
        "detected_inputs": int(sum(r["detected"] for r in ref)),
        "seconds": round(time.time() - t0, 1),
        "sface_threshold_dist": judges.sface.distance_threshold,
        "dlib_threshold": judges.dlib.distance_threshold,
    }


def to_markdown(res: dict, command: str) -> str:
    rec = res["reconstruction"]
    lines = [
        f"# IDEudemon privacy dial ({res['mode']})",
        "",
        f"Command: `{command}`",
        "",
        f"{res['n']} synthetic faces (zoo.synthetic seed {res['seed']}, {res['resolution']} px), {res['keys']} keys per face and scale, "
        f"{res['seconds']} s. Shape space: {res['shape_space'].get('shapes_used', '?')} shapes from {res['shape_space'].get('source', '?')} "
        f"(n={res['shape_space'].get('n', '?')}, seed {res['shape_space'].get('seed', '?')}), {res['shape_space'].get('components', '?')} identity components.",
        "",
        f"Identity distance to the input: SFace cosine distance (same person below {res['sface_threshold_dist']:.3f}) and dlib L2 "
        f"(same person below {res['dlib_threshold']}); 'matched' = fraction of outputs the judge still calls the same person. Pose error: "
        "median L2 of the (yaw, pitch, roll) change in degrees from 68 dlib landmarks (solvePnP, generic 6-point face). Non-face PSNR: "
        "outside the input's landmark face polygon dilated by 4% of the crop (finite values; 'identical' = share of outputs equal there).",
        "",
        "| scale | SFace dist | SFace matched | dlib dist | dlib matched | pose err (deg) | non-face PSNR (dB) | identical |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        lines.append(
            f"| {r['scale']:.2f} | {r['sface_dist']:.3f} ± {r['sface_dist_std']:.3f} | {100 * r['sface_same_rate']:.0f}% | "
            f"{r['dlib_dist']:.3f} ± {r['dlib_dist_std']:.3f} | {100 * r['dlib_same_rate']:.0f}% | {r['pose_err_deg']:.2f} | "
            f"{r['nonface_psnr']:.1f} | {100 * r['nonface_identical_fraction']:.0f}% |"
        )
    lines += [
        "",
        "Scale 0.00 is fit-then-render with no noise. Mesh backend reconstruction at scale 0: "
        f"PSNR {rec['psnr_face']:.1f} dB over the face region, {rec['psnr_crop']:.1f} dB over the crop; shape-model landmark error "
        f"{rec['landmark_error_iod_pct']:.2f}% of the inter-ocular distance; {100 * rec['clipped_code_fraction']:.1f}% of ID-code entries clipped at ±1.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    import shlex
    import sys

    p = argparse.ArgumentParser(prog="python -m benchmarks.ideudemon_dial", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keys", type=int, default=3)
    p.add_argument("--resolution", type=int, default=256)
    p.add_argument("--scales", type=str, default="0.05,0.1,0.15,0.2,0.25,0.3,0.35,0.4")
    p.add_argument("--restorer", help="an ideudemon checkpoint folder: measure Step I + II")
    p.add_argument("--with-restorer", action="store_true", help="run the checkpoint's restorer even where its config ships it switched off")
    p.add_argument("--no-prior", action="store_true", help="Step II's FFHQ prior off (with --restorer)")
    p.add_argument("--register", action="store_true", help="step1.register_features on (with --restorer)")
    p.add_argument("--out", default="benchmarks/results/ideudemon_dial.md")
    a = p.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    if a.with_restorer and not a.restorer:
        p.error("--with-restorer needs --restorer CHECKPOINT")
    res = measure(
        a.n,
        a.seed,
        a.keys,
        [float(s) for s in a.scales.split(",")],
        a.resolution,
        a.restorer,
        with_restorer=a.with_restorer,
        prior=not a.no_prior,
        register=a.register,
    )
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = "python -m benchmarks.ideudemon_dial " + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:]))
    out.write_text(to_markdown(res, cmd))
    out.with_suffix(".json").write_text(json.dumps(res, indent=2, default=float))
    print(f"[dial] wrote {out}")
    return res


if __name__ == "__main__":
    main()
