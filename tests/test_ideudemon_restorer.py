"""IDEudemon Step II on the demo recipe: the restorer path runs at its own size (64 px) inside larger
crops, keeps every pixel outside the blend mask, and changes the face region compared with Step I alone."""

from __future__ import annotations

from pathlib import Path

import torch

from training.train import load_config
from zoo.imageio import to_tensor
from zoo.keys import Secret
from zoo.methods.ideudemon import IDEudemon

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "training/configs/ideudemon_demo.yaml"


def _keys(secret: str, n: int):
    s = Secret(secret)
    return [s.derive("ideudemon", i) for i in range(n)]


def test_restorer_path_keeps_outside_pixels_and_changes_the_face():
    from zoo.synthetic import synthetic_faces_uint8

    cfg = load_config(DEMO)
    assert cfg["step2"]["restorer"] and int(cfg["step2"]["size"]) == 64
    torch.manual_seed(0)
    from zoo.nn.gfpgan import GFPGANv1Clean

    restorer = GFPGANv1Clean(out_size=64, **cfg["model"]["restorer"])  # random weights: the path, not the training, is tested
    off = IDEudemon(cfg, {"restorer": restorer.eval()})
    assert off.use_restorer is False  # the recipe ships the restorer switched off (measured: pose, see its header)
    m = IDEudemon({**cfg, "step2": {**cfg["step2"], "enabled": True}}, {"restorer": restorer})
    assert m.use_restorer is True
    assert m.restorer_size == 64
    x = to_tensor(synthetic_faces_uint8(1, seed=1, resolution=128, offset=10**9))
    keys = _keys("restorer", 1)
    with torch.no_grad():
        s1 = m.step_one(x, keys, 0.25)
        y = m.anonymize_faces(x, keys, scale=0.25)
        step_one_only = m.blend(s1["x_l"], x, s1["head"]).clamp(-1, 1)
    assert y.shape == x.shape
    outside = (s1["head"] == 0).expand_as(x)
    assert outside.float().mean().item() > 0.05
    assert torch.equal(y[outside], x[outside])  # pixel-exact outside the blend mask
    inside = (s1["head"] == 1).expand_as(x)
    assert inside.float().mean().item() > 0.05
    assert not torch.equal(y[inside], step_one_only[inside])  # the restorer's output is what fills the face
    assert (y[inside] - step_one_only[inside]).abs().mean().item() > 0.01


def test_shipped_checkpoint_holds_a_restorer_in_fp16():
    import json

    from safetensors import safe_open

    folder = REPO / "zoo/weights/ideudemon"
    json.loads((folder / "method.json").read_text())
    files = sorted((folder / "restorer").glob("*.safetensors"))
    assert files, "zoo/weights/ideudemon has no restorer"
    with safe_open(str(files[0]), "pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys()}
    assert dtypes == {torch.float16}
    assert sum(p.stat().st_size for p in files) < 4 * 2**20
