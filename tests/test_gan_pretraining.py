"""training/gan.py (StyleGAN2 trained as a GAN) and the StyleGAN-family options that use its generator:
a stage-0 ``train_generator: false`` and the encoder's ``latent`` regression on generated faces."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from test_dbaf_hford import tiny_config as stylegan_tiny_config

from training.gan import StyleGAN2Pretraining
from training.train import load_config, train
from zoo.keys import Secret
from zoo.methods.dbaf import DBAF
from zoo.nn.stylegan2 import Generator

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("one_thread")


def gan_config(steps: int = 3) -> dict:
    cfg = load_config(ROOT / "training" / "configs" / "stylegan2_synthetic.yaml")
    cfg["resolution"] = 64
    cfg["model"] = {"generator": {"style_dim": 32, "n_mlp": 2, "channel_max": 16}, "discriminator": {"channel_max": 16}}
    cfg["stages"][1].update({"steps": steps, "batch_size": 4, "r1": {"gamma": 0.05, "every": 2}})
    cfg.update({"data": {"source": "synthetic", "seed": 0, "size": 8}, "sample_every": 0, "save_every": 0, "ema": {"group": "g", "decay": 0.9}})
    return cfg


def test_gan_losses_groups_and_seeded_sampling():
    torch.manual_seed(0)
    m = StyleGAN2Pretraining.from_config(gan_config())
    groups = m.trainable_parameters(1)
    assert list(groups) == ["d", "g"]
    assert sum(p.numel() for p in groups["d"]) == sum(p.numel() for p in m.components["discriminator"].parameters())
    assert sum(p.numel() for p in groups["g"]) == sum(p.numel() for p in m.generator.parameters())
    batch = {"image": torch.rand(4, 3, 64, 64) * 2 - 1}

    m.train_generator = torch.Generator().manual_seed(5)
    a = m.sample_images(4)
    m.train_generator = torch.Generator().manual_seed(5)
    b = m.sample_images(4)
    m.train_generator = torch.Generator().manual_seed(6)
    c = m.sample_images(4)
    torch.testing.assert_close(a, b, atol=0, rtol=0)  # every draw comes from the trainer's generator
    assert (a - c).abs().mean() > 1e-3

    m.train_generator = torch.Generator().manual_seed(1)
    loss_d, logs_d = m.compute_losses(1, "d", batch, step=2)  # an R1 step (every 2)
    assert torch.isfinite(loss_d) and "r1" in logs_d and logs_d["r1"] >= 0
    _, logs_d = m.compute_losses(1, "d", batch, step=3)
    assert "r1" not in logs_d
    loss_g, logs_g = m.compute_losses(1, "g", batch, step=3)
    assert torch.isfinite(loss_g) and logs_g["g_adv"] > 0
    with pytest.raises(NotImplementedError, match="not a de-identification method"):
        m.anonymize_faces(batch["image"], [])


def test_trained_gan_generator_loads_into_dbaf(tmp_path):
    out = train(StyleGAN2Pretraining, gan_config(steps=3), 1, tmp_path / "gan", log_with=None, progress=False)
    assert out["step"] == 3
    folder = tmp_path / "gan" / "model" / "generator"
    gen = Generator.from_pretrained(str(folder))
    cfg = stylegan_tiny_config("dbaf")  # 64 px
    cfg["model"]["generator"] = {"style_dim": 32, "n_mlp": 2, "channel_max": 16}
    cfg["pretrained"] = {"generator": str(folder)}
    m = DBAF.from_config(cfg)
    for (name, p), q in zip(m.generator.state_dict().items(), gen.state_dict().values()):
        torch.testing.assert_close(p, q, atol=0, rtol=0, msg=name)
    with torch.no_grad():
        y = m.anonymize_faces(torch.rand(1, 3, 64, 64) * 2 - 1, [Secret("s").derive("dbaf", 0)])
    assert y.shape == (1, 3, 64, 64)


def test_stage0_frozen_generator_and_latent_regression():
    cfg = stylegan_tiny_config("dbaf")
    cfg["stages"] = copy.deepcopy(cfg["stages"])
    cfg["stages"][0] = {"lambdas": {"rec": 1.0, "reg": 0.01, "latent": 1.0}, "train_generator": False}
    torch.manual_seed(0)
    m = DBAF.from_config(cfg)
    g_params = {id(p) for p in m.generator.parameters()}
    trained = {id(p) for p in m.trainable_parameters(0)["g"]}
    assert not (g_params & trained)  # stage 0 leaves the generator as the GAN trained it
    assert {id(p) for p in m.encoder.parameters()} <= trained
    assert g_params & {id(p) for p in m.trainable_parameters(1)["g"]}  # later stages still fine-tune it

    x = torch.rand(2, 3, m.resolution, m.resolution) * 2 - 1
    m.train_generator = torch.Generator().manual_seed(3)
    loss, logs = m.compute_losses(0, "g", {"image": x}, step=1)
    assert logs["latent"] > 0
    # the latent term alone: its gradient reaches the encoder; a generated face's code is compared with
    # the w it was drawn from (same draws with the same seed)
    m.train_generator = torch.Generator().manual_seed(3)
    out = m._backbone_pass({"image": x})
    codes, w = out["latent"]
    assert codes.shape == w.shape == (2, m.generator.n_latent, m.generator.style_dim)
    torch.testing.assert_close(w[:, 0], w[:, -1])  # one w per face, repeated over the layers
    codes.abs().mean().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in m.encoder.parameters())


@pytest.mark.slow  # 4 s: the generator check on real and random faces
def test_check_generator_detects_faces_in_real_faces_and_not_in_a_random_generator():
    from training.gan import check_generator

    torch.manual_seed(0)
    gen = Generator(size=64, style_dim=32, n_mlp=2, channel_max=16)
    result = check_generator(gen, n=8)
    assert result["real_detection_rate"] == 1.0  # the held-out synthetic faces are faces
    assert result["generated_detection_rate"] == 0.0  # an untrained generator draws none


def test_live_generator_is_the_run_weights_and_not_the_average(tmp_path):
    from training.gan import live_generator, main

    no_ema = gan_config(steps=2)
    no_ema["ema"] = None
    train(StyleGAN2Pretraining, no_ema, 1, tmp_path / "plain", log_with=None, progress=False)
    saved = Generator.from_pretrained(str(tmp_path / "plain" / "model" / "generator")).state_dict()
    for name, t in live_generator(str(tmp_path / "plain")).state_dict().items():
        torch.testing.assert_close(t, saved[name], atol=0, rtol=0, msg=name)  # no EMA: the saved model is live

    train(StyleGAN2Pretraining, gan_config(steps=2), 1, tmp_path / "ema", log_with=None, progress=False)
    averaged = Generator.from_pretrained(str(tmp_path / "ema" / "model" / "generator")).state_dict()
    main(["export-live", "--run-dir", str(tmp_path / "ema"), "--out", str(tmp_path / "live")])
    live = Generator.from_pretrained(str(tmp_path / "live")).state_dict()
    assert any(not torch.equal(live[k], averaged[k]) for k in live)  # EMA 0.9: the average lags the run
