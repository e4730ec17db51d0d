"""The generator's yaw and pitch directions in W: how W+ inversion turns the encoder's estimate toward the head's pose.

    python -m training.wplus_pose [--angle yaw|pitch] [--samples 200] [--psi 0.8] [--ridge 10] [--seed 1234]
        # -> zoo/weights/wplus_encoder/{yaw,pitch}_direction.safetensors

The W+ encoder (:mod:`zoo.nn.wplus_encoder`) gives a nearly frontal code for a turned head, and 20 refinement
steps do not turn it (:func:`zoo.inversion.pose_corrected`). This fits the direction that does: ``samples``
faces of the generator (z ~ N(0, I), truncation ``psi``, drawn at 256 px), the face mesh's yaw or pitch of each
(:func:`zoo.face_mesh.mesh_head_pose`; never dlib), and a ridge regression (penalty ``ridge``) of the angle on w.
The saved ``direction [512]`` is the w step per degree (the coefficients over their squared norm): adding
``delta * direction`` to a code moves the regression's angle by ``delta`` degrees. The correlation of predicted and
measured angle on the last quarter of the samples, fitted on the rest, goes into the file's metadata.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

from zoo.inversion import POSE_ANGLES, POSE_DIRECTION_FILES, draw_fitted


def sample_angles(n: int, psi: float, seed: int, angle: str = "yaw", batch: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """(w [M,512], angle [M] degrees) of ``n`` generated faces; faces the mesh does not find are left out."""
    from zoo.imageio import from_tensor
    from zoo.inversion import mesh_poses
    from zoo.nn.mobilestylegan import NUM_SLOTS, load_mobilestylegan

    g = load_mobilestylegan()
    gen = torch.Generator().manual_seed(seed)
    column = POSE_ANGLES.index(angle)
    ws, angles = [], []
    with torch.no_grad():
        for start in range(0, n, batch):
            w = g.style(torch.randn(min(batch, n - start), 512, generator=gen), psi)
            images = from_tensor(draw_fitted(g, w[:, None].expand(-1, NUM_SLOTS, -1)))
            for wi, value in zip(w, mesh_poses(list(images))[:, column]):
                if np.isfinite(value):
                    ws.append(wi.numpy())
                    angles.append(float(value))
    return np.array(ws, np.float64), np.array(angles, np.float64)


def fit_direction(w: np.ndarray, angle: np.ndarray, ridge: float) -> np.ndarray:
    """Ridge coefficients of the centred angle on centred w, scaled to one degree: ``[512]``."""
    wc, yc = w - w.mean(0), angle - angle.mean()
    coef = np.linalg.solve(wc.T @ wc + ridge * np.eye(w.shape[1]), wc.T @ yc)
    return coef / float(coef @ coef)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--angle", choices=POSE_ANGLES, default="yaw")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--psi", type=float, default=0.8)
    ap.add_argument("--ridge", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", type=Path, default=None, help="default: zoo/weights/wplus_encoder/<angle>_direction.safetensors")
    a = ap.parse_args(argv)
    from safetensors.torch import save_file

    t0 = time.time()
    out = a.out or POSE_DIRECTION_FILES[a.angle]
    w, values = sample_angles(a.samples, a.psi, a.seed, a.angle)
    n_fit = int(len(w) * 0.75)
    held = fit_direction(w[:n_fit], values[:n_fit], a.ridge)
    corr = float(np.corrcoef((w[n_fit:] - w[:n_fit].mean(0)) @ held, values[n_fit:])[0, 1])
    direction = fit_direction(w, values, a.ridge)
    meta = {
        "angle": a.angle,
        "samples": str(len(w)),
        "psi": str(a.psi),
        "ridge": str(a.ridge),
        "seed": str(a.seed),
        f"{a.angle}_std_deg": f"{values.std():.2f}",
        "held_out_correlation": f"{corr:.3f}",
        "seconds": f"{time.time() - t0:.0f}",
        "command": "python -m training.wplus_pose " + shlex.join(sys.argv[1:] if argv is None else argv),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file({"direction": torch.tensor(direction, dtype=torch.float32)}, str(out), metadata=meta)
    print(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
