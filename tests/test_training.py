"""The trainer (training/train.py) and its parts, on the toy method of training/toy.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from training.data import FolderSource, StepBatches, SyntheticSource, build_source
from training.ema import EMA
from training.optim import Ranger, build_optimizer
from training.toy import ToyMethod, toy_config
from training.train import load_config, main, train

ROOT = Path(__file__).resolve().parent.parent
RES = 16


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory) -> Path:
    """12 small random-texture images (the trainer does not care what they show)."""
    d = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for i in range(12):
        base = rng.integers(0, 256, (1, 1, 3))
        noise = rng.integers(-40, 40, (20, 24, 3))
        Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8)).save(d / f"img_{i:02d}.png")
    return d


def _cfg(image_dir: Path, steps: int = 6, **kw):
    return toy_config(steps=steps, resolution=RES, batch_size=2, data={"source": "folder", "path": str(image_dir), "seed": 0}, sample_every=0, **kw)


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    out = {}
    for comp in ("anonymizer", "recoverer", "discriminator"):
        for k, v in load_file(str(folder / comp / "model.safetensors")).items():
            out[f"{comp}.{k}"] = v
    return out


# ------------------------------------------------------------------ optimizers, EMA, data
def test_ranger_is_radam_plus_lookahead():
    torch.manual_seed(0)
    w0 = torch.randn(5, 4)
    target = torch.randn(5, 4)
    a = torch.nn.Parameter(w0.clone())
    b = torch.nn.Parameter(w0.clone())
    ranger = Ranger([a], lr=0.05, lookahead_k=3, lookahead_alpha=0.5, gradient_centralization=False)
    radam = torch.optim.RAdam([b], lr=0.05, betas=(0.95, 0.999), eps=1e-5)
    for _ in range(3):
        for p, opt in ((a, ranger), (b, radam)):
            opt.zero_grad()
            ((p - target) ** 2).sum().backward()
            opt.step()
    # after k=3 fast steps the weights are pulled half way back to the initial (slow) weights
    torch.testing.assert_close(a.detach(), w0 + 0.5 * (b.detach() - w0))
    assert not torch.equal(b.detach(), w0)
    # state survives a state_dict round trip (what accelerate saves)
    sd = ranger.state_dict()
    fresh = Ranger([torch.nn.Parameter(a.detach().clone())], lr=0.05, lookahead_k=3, gradient_centralization=False)
    fresh.load_state_dict(sd)
    torch.testing.assert_close(fresh.state[fresh.param_groups[0]["params"][0]]["slow_buffer"], ranger.state[a]["slow_buffer"])
    assert fresh.param_groups[0]["lookahead_step"] == 3


def test_build_optimizer_names_and_errors():
    p = [torch.nn.Parameter(torch.zeros(2))]
    opt = build_optimizer(p, {"name": "adam", "lr": 1e-3, "betas": [0.0, 0.99]})
    assert isinstance(opt, torch.optim.Adam) and opt.param_groups[0]["betas"] == (0.0, 0.99)
    assert isinstance(build_optimizer(p, {"name": "ranger", "lr": 1e-4}), Ranger)
    with pytest.raises(ValueError, match="unknown optimizer"):
        build_optimizer(p, {"name": "lion"})


def test_ema_update_and_swap():
    p = torch.nn.Parameter(torch.zeros(3))
    ema = EMA([p], decay=0.75)
    with torch.no_grad():
        p.fill_(1.0)
    ema.update()
    torch.testing.assert_close(ema.shadow[0], torch.full((3,), 0.25))
    with ema.applied():
        torch.testing.assert_close(p.detach(), torch.full((3,), 0.25))
    torch.testing.assert_close(p.detach(), torch.ones(3))
    other = EMA([torch.nn.Parameter(torch.zeros(3))], decay=0.5)
    other.load_state_dict(ema.state_dict())
    assert other.decay == 0.75 and other.num_updates == 1


def test_ema_warmup_follows_the_num_updates_rule():
    """decay_n = min(decay, (1 + n) / (10 + n)): 0.1, 2/11, ... until the configured decay takes over."""
    p = torch.nn.Parameter(torch.zeros(1))
    ema = EMA([p], decay=0.5, warmup=True)
    with torch.no_grad():
        p.fill_(1.0)
    expected, shadow = [], 0.0
    for n in range(12):
        d = min(0.5, (1 + n) / (10 + n))
        assert ema.current_decay() == pytest.approx(d)
        ema.update()
        shadow = d * shadow + (1 - d) * 1.0
        expected.append(shadow)
        assert ema.shadow[0].item() == pytest.approx(shadow, rel=1e-6)
    assert expected[0] == pytest.approx(0.9)  # the first update keeps 10% of the initial weights
    assert ema.current_decay() == 0.5  # (1 + 12) / 22 > 0.5
    resumed = EMA([torch.nn.Parameter(torch.zeros(1))], decay=0.5)
    resumed.load_state_dict(ema.state_dict())
    assert resumed.warmup and resumed.current_decay() == 0.5
    assert EMA([p], decay=0.999).current_decay() == 0.999  # no warm-up unless asked


def test_step_batches_are_a_function_of_the_step(image_dir):
    src = FolderSource(image_dir, RES, seed=3)
    straight = iter(StepBatches(src, batch_size=3, grad_accum=2))
    seq = [next(straight) for _ in range(6)]  # steps 0, 1, 2 (two micro-batches each)
    resumed = iter(StepBatches(src, batch_size=3, grad_accum=2, start_step=2))
    for want in seq[4:]:
        got = next(resumed)
        assert torch.equal(got["image"], want["image"]) and torch.equal(got["image_b"], want["image_b"])
    for b in seq:
        assert b["image"].shape == (3, 3, RES, RES) and b["image"].min() >= -1 and b["image"].max() <= 1
        # image_b rows are other images than image rows
        assert all(not torch.equal(b["image"][i], b["image_b"][i]) for i in range(3))
    # one epoch (12 images / 3 per micro-batch = 4 micro-batches) visits every image once
    firsts = torch.cat([b["image"] for b in seq[:4]])
    assert len({tuple(x.flatten()[:8].tolist()) for x in firsts}) == 12
    # two processes read disjoint samples
    r0 = StepBatches(src, 2, 1, 0, rank=0, world=2).sample_numbers(5, 0)
    r1 = StepBatches(src, 2, 1, 0, rank=1, world=2).sample_numbers(5, 0)
    assert not set(r0) & set(r1)


def test_hub_dataset_sources_offline(image_dir, tmp_path):
    """`datasets` imagefolder (works offline), random access and streaming; resume skips what was read."""
    common = {"source": "hub", "name": "imagefolder", "data_dir": str(image_dir), "cache_dir": str(tmp_path / "hf")}
    src = build_source(common, RES, seed=0)
    assert len(src) == 12
    b = src.batch([0, 1, 2])
    assert b["image"].shape == (3, 3, RES, RES)
    stream = build_source({**common, "streaming": True, "shuffle_buffer": 4}, RES, seed=0)
    straight = iter(StepBatches(stream, batch_size=2))
    next(straight)
    second = next(straight)
    resumed = next(iter(StepBatches(stream, batch_size=2, start_step=1)))
    assert torch.equal(second["image"], resumed["image"]) and torch.equal(second["image_b"], resumed["image_b"])


def test_synthetic_source_is_seeded():
    a = SyntheticSource(RES, seed=1, size=None).batch([0, 1])
    b = build_source({"source": "synthetic", "seed": 1}, RES).batch([1])
    assert torch.equal(a["image"][1], b["image"][0])
    assert not torch.equal(a["image"][0], a["image"][1])
    assert not torch.equal(a["image"][0], a["image_b"][0])


# ------------------------------------------------------------------ the trainer
def test_loss_goes_down_and_checkpoint_loads(image_dir, tmp_path):
    torch.manual_seed(0)
    cfg = _cfg(image_dir, steps=30)
    out = tmp_path / "s2"
    info = train(ToyMethod, cfg, 2, out, progress=False, log_with=None)
    assert info["finished"] and info["step"] == 30

    batch = FolderSource(image_dir, RES, seed=0).batch(list(range(8)))

    def rec_loss(method):
        method.train_generator = torch.Generator().manual_seed(123)
        with torch.no_grad():
            loss, _ = method.compute_losses(2, "g", batch, 0)
        return float(loss)

    torch.manual_seed(0)
    initial = ToyMethod.from_config(load_config(cfg))
    trained = ToyMethod.from_pretrained(out / "model")  # through zoo.hub.load_components
    trained.config = load_config(cfg)
    before, after = rec_loss(initial), rec_loss(trained)
    assert after < 0.7 * before, (before, after)

    # zoo.load(name, local_dir=...) opens the trainer's output
    from zoo import registry

    registry.register_method("toy", "training.toy:ToyMethod", default_repo="nobody/toy-weights")
    try:
        m = registry.load("toy", local_dir=str(out / "model"), device="cpu")
        crop = np.asarray(batch["image"][0].permute(1, 2, 0).add(1).mul(127.5)).astype(np.uint8)
        anon = m.anonymize(crop, key="secret", aligned=True)
        assert np.abs(np.asarray(anon).astype(int) - crop.astype(int)).mean() > 1.0
        assert m.recover(anon, key="secret", aligned=True).faces[0].status == "processed"
    finally:
        registry._REGISTRY.pop("toy", None)
    saved = json.loads((out / "train_state.json").read_text())
    assert saved["stage"] == 2 and saved["images_seen"] == 60


def test_resume_equals_straight_through(image_dir, tmp_path):
    cfg = _cfg(image_dir, steps=6)  # stage 1: D and G groups, Ranger + Adam, EMA, lazy R1 every 4 steps
    straight = train(ToyMethod, cfg, 1, tmp_path / "a", progress=False, log_with=None)
    first = train(ToyMethod, cfg, 1, tmp_path / "b", max_steps=3, progress=False, log_with=None)
    assert first["step"] == 3
    second = train(ToyMethod, cfg, 1, tmp_path / "b", resume=True, progress=False, log_with=None)
    assert straight["step"] == second["step"] == 6
    wa, wb = _weights(tmp_path / "a" / "model"), _weights(tmp_path / "b" / "model")
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    # the run really trained (weights moved from the initialisation with the same seed)
    w_init = _weights(tmp_path / "b" / "model")
    torch.manual_seed(0)
    init = ToyMethod.from_config(load_config(cfg))
    assert not torch.equal(init.components["anonymizer"].out.weight, w_init["anonymizer.out.weight"])


def test_max_minutes_stops_with_a_checkpoint(image_dir, tmp_path):
    cfg = _cfg(image_dir, steps=50)
    info = train(ToyMethod, cfg, 2, tmp_path / "t", max_minutes=0.0, progress=False, log_with=None)
    assert not info["finished"] and info["step"] == 1
    assert (tmp_path / "t" / "state").is_dir() and (tmp_path / "t" / "model" / "method.json").is_file()
    again = train(ToyMethod, cfg, 2, tmp_path / "t", resume=True, max_steps=3, progress=False, log_with=None)
    assert again["finished"] and again["step"] == 3


def test_stage_two_starts_from_stage_one(image_dir, tmp_path):
    cfg = _cfg(image_dir, steps=2)
    train(ToyMethod, cfg, 1, tmp_path / "stage1", progress=False, log_with=None)
    train(ToyMethod, cfg, 2, tmp_path / "stage2", progress=False, log_with=None)
    w1, w2 = _weights(tmp_path / "stage1" / "model"), _weights(tmp_path / "stage2" / "model")
    # stage 2 trains only the recoverer: the anonymizer is stage 1's
    assert torch.equal(w1["anonymizer.out.weight"], w2["anonymizer.out.weight"])
    assert not torch.equal(w1["recoverer.out.weight"], w2["recoverer.out.weight"])


def test_push_to_hub_offline_fails_before_training(image_dir, tmp_path, monkeypatch):
    import yaml

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg_file = tmp_path / "toy.yaml"
    cfg_file.write_text(yaml.safe_dump(_cfg(image_dir)))
    out = tmp_path / "never"
    with pytest.raises(SystemExit, match="HF_HUB_OFFLINE=1"):
        main(["--method", "training.toy:ToyMethod", "--stage", "1", "--config", str(cfg_file), "--output-dir", str(out), "--push-to-hub", "someone/toy"])
    assert not out.exists()


def test_cli_with_grad_accum_and_samples(image_dir, tmp_path):
    import yaml

    cfg = _cfg(image_dir, steps=2)
    cfg["sample_every"] = 1
    cfg_file = tmp_path / "toy.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "cli"
    state = main(
        [
            "--method",
            "training.toy:ToyMethod",
            "--stage",
            "1",
            "--config",
            str(cfg_file),
            "--output-dir",
            str(out),
            "--grad-accum",
            "2",
            "--no-progress",
            "--log-with",
            "none",
        ]
    )
    assert state["finished"] and state["images_seen"] == 2 * 2 * 2
    assert json.loads((out / "train_state.json").read_text())["grad_accum"] == 2
    grids = sorted((out / "samples").glob("step_*.png"))
    assert [g.name for g in grids] == ["step_0000001.png", "step_0000002.png"]
    grid = np.asarray(Image.open(grids[-1]))
    assert grid.shape[0] == 4 * RES  # input / anonymized / recovered / wrong_key rows


@pytest.mark.slow  # 4 s: the training script in a new process
def test_script_runs_as_a_file():
    """`python training/train.py` (what `accelerate launch` runs) finds the project's packages."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(ROOT / "training" / "train.py"), "--help"], cwd="/", env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--max-minutes" in proc.stdout and "--push-to-hub" in proc.stdout


# ------------------------------------------------------------------ distillation recipes
def test_lift_matrix_preserves_cosines():
    from training.distill import lift_matrix

    q = lift_matrix(128, 512, seed=0)
    torch.testing.assert_close(q.T @ q, torch.eye(128), atol=1e-5, rtol=0)
    a, b = torch.randn(3, 128), torch.randn(3, 128)
    torch.testing.assert_close(torch.cosine_similarity(a @ q.T, b @ q.T, dim=1), torch.cosine_similarity(a, b, dim=1), atol=1e-5, rtol=0)


def test_distill_identity_and_landmarks_smoke(tmp_path):
    """Two optimisation steps of each recipe: it saves a loadable network and a measured report."""
    from training.distill import distill_identity, distill_landmarks
    from training.landmarks import LandmarkRegressor
    from zoo.nn.arcface import IResNet

    rep = distill_identity(
        tmp_path / "id",
        steps=2,
        arch="tiny",
        embedding_dim=128,
        train_faces=8,
        val_faces=6,
        batch_size=4,
        cache_dir=tmp_path / "cache",
        device="cpu",
        real_photo_check=False,
    )
    enc = IResNet.from_pretrained(str(tmp_path / "id"))
    assert enc.fc.out_features == 128
    held = rep["held_out"]
    assert held["held_out_faces"] == 6 and held["all_pairs"]["pairs"] == 12
    assert -1.0 <= held["embedding_cosine_student_vs_teacher"]["mean"] <= 1.0
    assert json.loads((tmp_path / "id" / "distill_report.json").read_text())["steps"] == 2
    assert (tmp_path / "cache" / "identity_seed0_off0_n8.npz").is_file()  # teacher outputs cached

    rep = distill_landmarks(
        tmp_path / "lm", steps=2, input_size=32, channels=[8, 8, 16, 16], train_faces=8, val_faces=6, batch_size=4, cache_dir=tmp_path / "cache", device="cpu"
    )
    lm = LandmarkRegressor.from_pretrained(str(tmp_path / "lm"))
    out = lm(torch.zeros(2, 3, 64, 64))
    assert out.shape == (2, 68, 2)
    assert rep["held_out"]["mean_error_px_at_256"] > 0 and rep["held_out"]["faces"] == 6


def test_model_card_from_hub_cards(tmp_path):
    from training.train import _render_card

    info = {
        "stage": 1,
        "step": 10,
        "images_seen": 80,
        "seed": 0,
        "mixed_precision": "no",
        "num_processes": 1,
        "config": {"data": {"source": "hub", "name": "someone/faces"}},
    }
    card = _render_card("dbaf", tmp_path, "me/dbaf-test", info)
    assert card is not None and "me/dbaf-test" in card and "someone/faces" in card


@pytest.mark.slow
def test_two_process_ddp_on_cpu(tmp_path):
    """The distributed path (accelerate DDP, gloo): 2 CPU processes via torchrun train one stage together."""
    import yaml

    cfg = toy_config(steps=3, resolution=RES, batch_size=2, data={"source": "synthetic", "seed": 0, "size": 16}, sample_every=0)
    cfg_file = tmp_path / "toy.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "ddp"
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(ROOT / "training" / "train.py"),
        "--cpu",
        "--method",
        "training.toy:ToyMethod",
        "--stage",
        "1",
        "--config",
        str(cfg_file),
        "--output-dir",
        str(out),
        "--no-progress",
        "--log-with",
        "none",
    ]
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads((out / "train_state.json").read_text())
    assert state["finished"] and state["num_processes"] == 2
    assert state["images_seen"] == 3 * 2 * 2  # steps x per-process batch x processes
    trained = ToyMethod.from_pretrained(out / "model")
    torch.manual_seed(0)
    init = ToyMethod.from_config(load_config(cfg))
    assert not torch.equal(init.components["anonymizer"].out.weight, trained.components["anonymizer"].out.weight)


# ------------------------------------------------------------------ the training protocol (training/protocol.py)
def test_every_trainable_method_follows_the_protocol():
    """The classes the configs name implement the typed protocol; zoo methods do so without importing training."""
    import yaml

    from training.protocol import TrainableMethod, check_trainable
    from training.train import resolve_method_class

    names = set()
    for path in (ROOT / "training" / "configs").glob("*.yaml"):  # the configs train.py runs: stages with optimizers
        cfg = yaml.safe_load(path.read_text())
        if isinstance(cfg, dict) and cfg.get("method") and any("optimizer" in (v or {}) for v in (cfg.get("stages") or {}).values()):
            names.add(cfg["method"])
    assert {"dbaf", "personal", "zoo.methods.dbaf:DBAFDemo", "training.toy:ToyMethod"} <= names
    for name in sorted(names):
        cls = resolve_method_class(name)
        assert check_trainable(cls) is cls, name
    toy = ToyMethod.from_config(toy_config(resolution=RES))
    assert isinstance(toy, TrainableMethod)  # structural: ToyMethod never names the protocol


def test_trainer_refuses_a_class_outside_the_protocol_before_building_anything(image_dir, tmp_path):
    from training.protocol import ProtocolError

    class NoLosses(ToyMethod):  # looks like a method, but a member of the protocol is missing
        compute_losses = None

    with pytest.raises(ProtocolError, match=r"cannot be trained: it lacks compute_losses of the training protocol"):
        train(NoLosses, _cfg(image_dir), 1, tmp_path / "never", progress=False, log_with=None)

    class NoStages(ToyMethod):
        stages = []

    with pytest.raises(ProtocolError, match=r"lacks stages"):
        train(NoStages, _cfg(image_dir), 1, tmp_path / "never", progress=False, log_with=None)
    with pytest.raises(ValueError, match=r"trains in stages \(1, 2\), not 3"):
        train(ToyMethod, {**_cfg(image_dir), "stages": {3: _cfg(image_dir)["stages"][1]}}, 3, tmp_path / "never", progress=False, log_with=None)
    assert not (tmp_path / "never").exists()


def test_trainer_checks_what_the_method_returns(image_dir, tmp_path):
    from training.protocol import ProtocolError

    class BadLosses(ToyMethod):
        def compute_losses(self, stage, group, batch, step):
            loss, _terms = super().compute_losses(stage, group, batch, step)
            return loss  # not (loss, terms)

    with pytest.raises(ProtocolError, match=r"compute_losses\(\.\.\., group='d'\) must return \(scalar loss tensor"):
        train(BadLosses, _cfg(image_dir, steps=1), 1, tmp_path / "bad", progress=False, log_with=None)

    class NoGroups(ToyMethod):
        def trainable_parameters(self, stage):
            return {}

    with pytest.raises(ProtocolError, match=r"trainable_parameters\(1\) returned no groups"):
        train(NoGroups, _cfg(image_dir, steps=1), 1, tmp_path / "none", progress=False, log_with=None)


def test_pose_direction_fit_moves_the_angle_one_degree_per_unit():
    """training.wplus_pose.fit_direction: on an angle that is linear in w, adding delta x the direction moves the
    angle by delta degrees (the w step per degree the inversion's pose correction takes)."""
    import numpy as np

    from training.wplus_pose import fit_direction

    rng = np.random.default_rng(0)
    w = rng.normal(size=(400, 16))
    coef = rng.normal(size=16)
    angle = w @ coef + 3.0
    direction = fit_direction(w, angle, ridge=1e-6)
    for delta in (-10.0, 2.5):
        moved = (w[:5] + delta * direction) @ coef + 3.0
        assert np.allclose(moved - angle[:5], delta, atol=1e-3)
