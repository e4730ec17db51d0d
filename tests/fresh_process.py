"""Run a zoo method in a new Python interpreter: the check that keys come from the secret alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import json, sys, numpy as np, torch
torch.set_num_threads(int(sys.argv[1]))
from zoo import load
job = json.loads(sys.argv[2])
m = load(job["method"], local_dir=job["checkpoint"], device="cpu")
out = m.anonymize(np.load(job["crop"]), key=job["key"], aligned=True, **job["controls"])
np.save(job["out"], np.asarray(out))
"""


def anonymize_in_fresh_process(method: str, checkpoint: Path, crop: np.ndarray, key: str, workdir: Path, **controls: Any) -> np.ndarray:
    """``zoo.load(method, local_dir=checkpoint).anonymize(crop, key, aligned=True, **controls)`` in a new
    interpreter (same torch thread count as this one) -> the uint8 image it wrote."""
    workdir = Path(workdir)
    np.save(workdir / "fresh_crop.npy", crop)
    job = {
        "method": method,
        "checkpoint": str(checkpoint),
        "crop": str(workdir / "fresh_crop.npy"),
        "key": key,
        "controls": controls,
        "out": str(workdir / "fresh_out.npy"),
    }
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", _CHILD, str(torch.get_num_threads()), json.dumps(job)], check=True, env=env, cwd=ROOT, timeout=120)
    return np.load(workdir / "fresh_out.npy")
