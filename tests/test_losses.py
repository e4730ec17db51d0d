"""zoo/losses.py: known values, the papers' forms, gradients where a method needs them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from zoo import losses as L


def test_identity_cosine_loss_and_hinge():
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    b = torch.tensor([[2.0, 0.0], [0.0, 3.0], [-1.0, 0.0]])  # cos = 1, 0, -1
    assert L.identity_cosine_loss(a, b).item() == pytest.approx((0 + 1 + 2) / 3)
    # theta^+ = max(0, cos): only the first pair counts
    assert L.identity_similarity_hinge(a, b).item() == pytest.approx(1 / 3)
    assert L.identity_similarity_hinge(a, b, margin=0.5).item() == pytest.approx(0.5 / 3)


def test_pairwise_similarity_hinge_mean_and_sum():
    e1 = torch.tensor([[1.0, 0.0]])
    e2 = torch.tensor([[1.0, 1.0]])  # cos(e1, e2) = 1/sqrt(2)
    e3 = torch.tensor([[-1.0, 0.0]])  # negative with e1, -1/sqrt(2) with e2: clipped to 0
    c = 1 / math.sqrt(2)
    # ordered pairs i != j: (1,2), (2,1) contribute c each; the rest 0
    assert L.pairwise_similarity_hinge([e1, e2, e3], "sum").item() == pytest.approx(2 * c)
    assert L.pairwise_similarity_hinge([e1, e2, e3], "mean").item() == pytest.approx(2 * c / 6)  # H eq. 10: 1/(n(n-1))
    with pytest.raises(ValueError):
        L.pairwise_similarity_hinge([e1])


def test_identity_contrastive_loss_cases():
    d = torch.tensor([0.1, 0.5, 0.1, 0.9])
    same = torch.tensor([True, True, False, False])
    # same: max(d - 0.2, 0) -> 0, 0.3; different: max(0.8 - d, 0) -> 0.7, 0
    assert L.identity_contrastive_loss(d, same, tau_pos=0.2, tau_neg=0.8).item() == pytest.approx((0 + 0.3 + 0.7 + 0) / 4)
    assert L.identity_contrastive_loss(d, True, 0.2, 0.8).item() == pytest.approx((0 + 0.3 + 0 + 0.7) / 4)


def test_ssim_and_vq_loss():
    torch.manual_seed(0)
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    assert L.ssim(x, x).item() == pytest.approx(1.0, abs=1e-5)
    noisy = (x + 0.3 * torch.randn_like(x)).clamp(-1, 1)
    s = L.ssim(x, noisy).item()
    assert 0 < s < 0.9
    assert L.ssim(x, noisy, reduction="none").shape == (2,)
    # a brightness change alone lowers SSIM (luminance term)
    assert L.ssim(torch.zeros(1, 1, 16, 16), torch.full((1, 1, 16, 16), 0.5)).item() < 1.0
    vq = L.visual_quality_loss(noisy, x)
    assert vq.item() == pytest.approx(0.84 * (1 - s) + 0.16 * F.l1_loss(noisy, x).item(), rel=1e-5)
    y = noisy.clone().requires_grad_(True)
    L.visual_quality_loss(y, x).backward()
    assert y.grad is not None and torch.isfinite(y.grad).all()


def test_pixel_losses():
    x, y = torch.zeros(2, 3, 4, 4), torch.ones(2, 3, 4, 4)
    assert L.l1_loss(x, y).item() == 1.0
    assert L.mse_loss(x, 2 * y).item() == 4.0
    assert L.half_squared_l2_loss(x, 2 * y).item() == 2.0
    assert L.l2_norm_distance(x, y).item() == pytest.approx(math.sqrt(48))


def test_adversarial_losses_known_values():
    zero = torch.zeros(4)
    assert L.nonsaturating_g_loss(zero).item() == pytest.approx(math.log(2))
    assert L.nonsaturating_d_loss(zero, zero).item() == pytest.approx(2 * math.log(2))
    assert L.hinge_d_loss(torch.full((3,), 2.0), torch.full((3,), -2.0)).item() == 0.0
    assert L.hinge_d_loss(torch.zeros(3), torch.zeros(3)).item() == 2.0
    assert L.hinge_g_loss([torch.ones(2), 3 * torch.ones(2)]).item() == -2.0  # multi-scale: averaged
    # a confident, correct D has a small loss
    assert L.nonsaturating_d_loss(torch.full((4,), 10.0), torch.full((4,), -10.0)).item() < 1e-3


def test_r1_penalty_on_a_linear_discriminator():
    w = torch.tensor([3.0, 4.0])
    x = torch.randn(5, 2, requires_grad=True)
    pred = x @ w  # grad_x D = w, |w|^2 = 25
    assert L.r1_penalty(pred, x).item() == pytest.approx(25.0)
    assert L.lazy_r1_loss(x @ w, x, gamma=10.0, every=16).item() == pytest.approx(10 / 2 * 25 * 16)


def test_lazy_r1_block_every_n_steps():
    """add_lazy_r1, the one lazy-R1 block of the D steps (gan, toy, DBAF/HFORD, IDEudemon)."""
    w = torch.tensor([3.0, 4.0])
    x = torch.randn(5, 2, requires_grad=True)
    loss0 = torch.tensor(1.0)
    cfg = {"gamma": 10.0, "every": 4}
    for step in range(9):
        logs = {}
        loss = L.add_lazy_r1(loss0, logs, x @ w, x, cfg, step)
        if step % 4 == 0:
            assert L.lazy_r1_due(cfg, step) and logs["r1"] == pytest.approx(10 / 2 * 25 * 4)
            assert loss.item() == pytest.approx(1.0 + 10 / 2 * 25 * 4)
        else:
            assert not L.lazy_r1_due(cfg, step) and logs == {} and loss is loss0
    # every defaults to 16; no config, gamma 0 or no gamma: never
    assert L.lazy_r1_due({"gamma": 1.0}, 32) and not L.lazy_r1_due({"gamma": 1.0}, 8)
    for off in (None, {}, {"gamma": 0, "every": 1}, {"every": 1}):
        logs = {}
        assert not L.lazy_r1_due(off, 0) and L.add_lazy_r1(loss0, logs, x @ w, x, off, 0) is loss0 and logs == {}


def test_gram_style_feature_matching_attribute_and_latent():
    f = torch.ones(1, 2, 2, 2)
    assert torch.allclose(L.gram_matrix(f), torch.full((1, 2, 2), 4 / 8))
    assert L.gram_style_loss([f], [f]).item() == 0.0
    assert L.gram_style_loss([f], [2 * f]).item() == pytest.approx(abs(4 / 8 * 4 - 4 / 8))
    fm = L.feature_matching_loss([[f, f]], [[f + 1, f]])
    assert fm.item() == pytest.approx(0.5)
    assert L.attribute_consistency_loss([f, f], [f + 1, f + 2]).item() == pytest.approx(0.5 * (1 + 4))
    w = torch.zeros(2, 4, 3)
    w[:, 1:, 0] = 2.0  # layers 1..3 are 2 away from layer 0
    assert L.latent_regularization_loss(w).item() == pytest.approx(3 * 2.0)  # e4e deltas, H eq. 15
    assert L.latent_regularization_loss(w, torch.tensor([2.0, 0.0, 0.0])).item() == 0.0  # D eq. 36


def test_perceptual_and_lpips_wrappers():
    feats = lambda x: [x, x.mean(dim=1, keepdim=True)]  # noqa: E731
    x, y = torch.zeros(1, 3, 4, 4), torch.ones(1, 3, 4, 4)
    assert L.perceptual_loss(feats, x, y).item() == pytest.approx(2.0)
    assert L.perceptual_loss(feats, x, y, layer_weights=[1.0, 0.0]).item() == pytest.approx(1.0)
    with pytest.raises(L.LPIPSUnavailableError, match="lambda to 0"):
        L.lpips_loss(x, y, None)
    assert L.lpips_loss(x, y, lambda a, b: (a - b).abs().mean(dim=(1, 2, 3))).item() == 1.0


def test_wing_loss_regions():
    w, eps = 10.0, 2.0
    small = L.wing_loss(torch.tensor([1.0]), torch.tensor([0.0]), w, eps).item()
    assert small == pytest.approx(w * math.log(1 + 1 / eps))
    big = L.wing_loss(torch.tensor([20.0]), torch.tensor([0.0]), w, eps).item()
    assert big == pytest.approx(20 - (w - w * math.log(1 + w / eps)))
    # continuous at |d| = w
    at = L.wing_loss(torch.tensor([w]), torch.tensor([0.0]), w, eps).item()
    assert at == pytest.approx(w * math.log(1 + w / eps))


def test_weighted_sum_skips_zero_weights_without_calling_them():
    def boom():
        raise AssertionError("a zero-weight term must not be evaluated")

    total, logs = L.weighted_sum({"a": torch.tensor(2.0), "b": lambda: torch.tensor(3.0), "lpips": boom}, {"a": 0.5, "b": 2.0, "lpips": 0})
    assert total.item() == pytest.approx(1.0 + 6.0)
    assert logs == {"a": 2.0, "b": 3.0, "total": 7.0}
    with pytest.raises(ValueError):
        L.weighted_sum({"a": torch.tensor(1.0)}, {})
