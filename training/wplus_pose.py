"""The generator's yaw direction in W: how W+ inversion turns the encoder's estimate toward the head's pose.

    python -m training.wplus_pose [--samples 200] [--psi 0.8] [--ridge 10] [--seed 1234]
        # -> zoo/weights/wplus_encoder/yaw_direction.safetensors

The W+ encoder (:mod:`zoo.nn.wplus_encoder`) gives a nearly frontal code for a turned head, and 20 refinement
steps do not turn it (:func:`zoo.inversion.pose_corrected`). This fits the direction that does: ``samples``
faces of the generator (z ~ N(0, I), truncation ``psi``, drawn at 256 px), the face mesh's yaw of each
(:func:`zoo.face_mesh.mesh_head_pose`; never dlib), and a ridge regression (penalty ``ridge``) of yaw on w. The
saved ``direction [512]`` is the w step per degree of yaw (the coefficients over their squared norm): adding
``delta * direction`` to a code moves the regression's yaw by ``delta`` degrees. The correlation of predicted and
measured yaw on the last quarter of the samples, fitted on the rest, goes into the file's metadata.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from zoo.inversion import YAW_DIRECTION_FILE


def sample_yaws(n: int, psi: float, seed: int, batch: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """(w [M,512], yaw [M] degrees) of ``n`` generated faces; faces the mesh does not find are left out."""
    from zoo.imageio import from_tensor
    from zoo.inversion import mesh_yaws
    from zoo.nn.mobilestylegan import NUM_SLOTS, load_mobilestylegan

    g = load_mobilestylegan()
    gen = torch.Generator().manual_seed(seed)
    ws, yaws = [], []
    with torch.no_grad():
        for start in range(0, n, batch):
            w = g.style(torch.randn(min(batch, n - start), 512, generator=gen), psi)
            images = from_tensor(g.synthesis(w[:, None].expand(-1, NUM_SLOTS, -1), 256))
            for wi, yaw in zip(w, mesh_yaws(list(images))):
                if np.isfinite(yaw):
                    ws.append(wi.numpy())
                    yaws.append(float(yaw))
    return np.array(ws, np.float64), np.array(yaws, np.float64)


def fit_direction(w: np.ndarray, yaw: np.ndarray, ridge: float) -> np.ndarray:
    """Ridge coefficients of centred yaw on centred w, scaled to one degree: ``[512]``."""
    wc, yc = w - w.mean(0), yaw - yaw.mean()
    coef = np.linalg.solve(wc.T @ wc + ridge * np.eye(w.shape[1]), wc.T @ yc)
    return coef / float(coef @ coef)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--psi", type=float, default=0.8)
    ap.add_argument("--ridge", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", type=Path, default=YAW_DIRECTION_FILE)
    a = ap.parse_args(argv)
    from safetensors.torch import save_file

    t0 = time.time()
    w, yaw = sample_yaws(a.samples, a.psi, a.seed)
    n_fit = int(len(w) * 0.75)
    held = fit_direction(w[:n_fit], yaw[:n_fit], a.ridge)
    corr = float(np.corrcoef((w[n_fit:] - w[:n_fit].mean(0)) @ held, yaw[n_fit:])[0, 1])
    direction = fit_direction(w, yaw, a.ridge)
    meta = {
        "samples": str(len(w)),
        "psi": str(a.psi),
        "ridge": str(a.ridge),
        "seed": str(a.seed),
        "yaw_std_deg": f"{yaw.std():.2f}",
        "held_out_correlation": f"{corr:.3f}",
        "seconds": f"{time.time() - t0:.0f}",
        "command": " ".join(["python -m training.wplus_pose", *(argv or [])]),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    save_file({"direction": torch.tensor(direction, dtype=torch.float32)}, str(a.out), metadata=meta)
    print(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
