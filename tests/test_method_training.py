"""Every method's tiny config through the real trainer (training/train.py): training moves every
optimizer's parameters, keeps the losses finite and lowers the generator's objective by a clear margin
over a few dozen CPU steps; and a run stopped and resumed ends with exactly the weights of a run
straight through.

The data are 8 seeded synthetic faces (the tiny configs' source, cut to 8 images so a few dozen steps
see each face several times); "loss" is the method's own ``compute_losses`` on those 8 faces with fixed
keys/noise, before training and after.

What is compared is the generator's whole non-adversarial objective (``comparable_total``), never one
term: after a couple of dozen steps a single term can go either way (personal-stage1's ``rec`` fell on
one CPU and rose 0.0698 -> 0.0726 on another: float summation order is enough to tip it). The terms
measured by a network that trains at the same time (the discriminator's adversarial terms, personal's
attribute loss, see SELF_REFERENTIAL) are switched off for this test (their lambdas set to 0; the
discriminators still train): with them on, the generator's objective is a moving target and can rise
over 20 steps on some seeds (personal, ideudemon), which says nothing about the trainer.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from accelerate.utils import set_seed
from safetensors.torch import load_file

from training.data import build_source
from training.train import load_config, load_init, resolve_method_class, train

ROOT = Path(__file__).resolve().parent.parent
ADVERSARIAL = ("adv", "local")  # generator terms that a training discriminator pushes back up
# terms measured with a network that trains in the same step, so they can rise while the model improves:
# personal's L_attr (eq. 10) compares the trainable attribute encoder's features of Y and X; an untrained
# encoder's features are all near zero (L_attr ~ 0.03), and they grow as the encoder learns
SELF_REFERENTIAL = {"personal": ("attr",)}
N_FACES = 8

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]  # ~2 minutes: CI runs them (scripts/test.sh -m slow)

# (method, stage, steps, batch size, smallest relative fall of the generator's objective)
# The falls measured on one x86 CPU with seeds 0-3 (1 and 2 torch threads for seed 0) are in the comments;
# each bound is at most half the smallest of them. A seed change perturbs training far more than a
# different float summation order does, and an optimizer that does not step gives a fall of exactly 0.
# dbaf/hford stage 2 fall little in 16 steps (Ranger at lr 1e-4, and the objective is mostly the fixed
# latent regulariser and identity terms), but just as steadily.
CASES = [
    ("ifadit", 1, 24, 4, 0.15),  # phase I, eq. 14 (+ the tiny config's identity swap): 38-45 %
    ("ifadit", 2, 24, 4, 0.05),  # phase II, eq. 22: 10-32 %
    ("dbaf", 1, 20, 4, 0.10),  # eq. 18: 24-38 %
    ("dbaf", 2, 16, 2, 0.0025),  # eq. 39: 0.6-1.9 %
    ("hford", 2, 16, 2, 0.0025),  # eq. 18, anonymization stage: 0.5-0.8 %
    ("personal", 1, 24, 4, 0.05),  # eq. 12: 12-45 %
    ("ideudemon", 1, 20, 4, 0.005),  # eq. 9: 1.9-10 %
]


def tiny_config(method: str, stage: int, batch_size: int) -> dict:
    cfg = load_config(ROOT / "training" / "configs" / f"{method}_tiny.yaml")
    cfg["data"] = {"source": "synthetic", "seed": 0, "size": N_FACES}
    cfg["sample_every"] = 0
    cfg["save_every"] = 0
    cfg["stages"][stage]["batch_size"] = batch_size
    return cfg


def without_moving_targets(cfg: dict, method: str, stage: int) -> dict:
    """The config with the lambdas of the terms measured by a concurrently trained network set to 0."""
    lam = cfg["stages"][stage]["lambdas"]
    for term in ADVERSARIAL + SELF_REFERENTIAL.get(method, ()):
        if term in lam:
            lam[term] = 0.0
    return cfg


def build(method: str, cfg: dict, checkpoint: Path | None = None):
    """The method as train() builds it (same seed -> same initialisation and loss networks)."""
    set_seed(int(cfg.get("seed", 0)))
    m = resolve_method_class(method).from_config(copy.deepcopy(cfg))
    if checkpoint is not None:
        load_init(m, checkpoint)
    return m


def held_losses(m, cfg: dict, stage: int) -> dict[str, float]:
    """Mean loss terms of the generator group on the 8 faces, with fixed keys and noise."""
    res = int(cfg["resolution"])
    faces = build_source(cfg["data"], res, 0).batch(list(range(N_FACES)))
    for module in m.components.values():
        module.eval()
    out: dict[str, float] = {}
    halves = 2
    for h in range(halves):
        m.train_generator = torch.Generator().manual_seed(1000 + h)
        part = {k: v[h * N_FACES // halves : (h + 1) * N_FACES // halves] for k, v in faces.items()}
        torch.manual_seed(2000 + h)
        with torch.no_grad():
            _, terms = m.compute_losses(stage, "g", part, 0)
        for k, v in terms.items():
            out[k] = out.get(k, 0.0) + float(v) / halves
    lam = cfg["stages"][stage]["lambdas"]
    excluded = ADVERSARIAL + SELF_REFERENTIAL.get(m.name, ())
    out["comparable_total"] = out["total"] - sum(float(lam.get(t, 0.0)) * out[t] for t in excluded if t in out)
    return out


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for f in sorted(model_dir.rglob("*.safetensors")):
        for k, v in load_file(str(f)).items():
            tensors[f"{f.parent.relative_to(model_dir)}/{k}"] = v
    return tensors


@pytest.mark.parametrize("method,stage,steps,batch_size,min_fall", CASES, ids=[f"{c[0]}-stage{c[1]}" for c in CASES])
def test_tiny_config_loss_goes_down(tmp_path, method, stage, steps, batch_size, min_fall):
    cfg = without_moving_targets(tiny_config(method, stage, batch_size), method, stage)
    init = build(method, cfg)
    init_groups = {g: [p.detach().clone() for p in ps] for g, ps in init.trainable_parameters(stage).items()}
    before = held_losses(init, cfg, stage)
    info = train(method, cfg, stage, tmp_path / "run", max_steps=steps, progress=False, log_with=None)
    assert info["finished"] and info["step"] == steps
    trained = build(method, cfg, tmp_path / "run" / "model")
    after = held_losses(trained, cfg, stage)
    report = {k: (round(before[k], 4), round(after.get(k, float("nan")), 4)) for k in before}

    assert after.keys() == before.keys() and all(math.isfinite(v) for v in after.values()), report
    for group, params in trained.trainable_parameters(stage).items():
        assert all(torch.isfinite(p).all() for p in params), f"{method}: non-finite {group} weights"
        moved = sum(not torch.equal(a, b.detach()) for a, b in zip(init_groups[group], params, strict=True))
        assert moved, f"{method}: no {group} weight changed in {steps} steps"
    assert before["comparable_total"] > 0, report
    fall = 1.0 - after["comparable_total"] / before["comparable_total"]
    assert fall >= min_fall, (f"objective fell {fall:.2%}, expected >= {min_fall:.2%}", report)


# each method's last (paper) stage: the one with keys, several optimizers, discriminators and EMA
RESUME_CASES = [("ifadit", 2), ("dbaf", 2), ("hford", 2), ("personal", 1), ("ideudemon", 1)]


@pytest.mark.parametrize("method,stage", RESUME_CASES, ids=[f"{m}-stage{s}" for m, s in RESUME_CASES])
def test_resume_equals_straight_through(tmp_path, method, stage):
    cfg = tiny_config(method, stage, 2)
    straight = train(method, cfg, stage, tmp_path / "straight", max_steps=4, progress=False, log_with=None)
    first = train(method, cfg, stage, tmp_path / "split", max_steps=2, progress=False, log_with=None)
    assert first["step"] == 2
    second = train(method, cfg, stage, tmp_path / "split", max_steps=4, resume=True, progress=False, log_with=None)
    assert straight["step"] == second["step"] == 4
    a, b = weights(tmp_path / "straight" / "model"), weights(tmp_path / "split" / "model")
    assert a.keys() == b.keys() and len(a) > 0
    for k in a:
        assert torch.equal(a[k], b[k]), f"{method}: {k} differs after resume"
    # and the runs trained something: some weight moved away from the seeded initialisation
    init = build(method, cfg)
    init_state = {f"{name}/{k}": v for name, comp in init.components.items() for k, v in comp.state_dict().items()}
    moved = [k for k in a if k in init_state and init_state[k].shape == a[k].shape and not torch.equal(init_state[k], a[k])]
    assert moved, f"{method}: no weight changed in 4 steps"
