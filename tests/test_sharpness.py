"""zoo.sharpness: the statistics and the searches of compositing's sharpness step, against their plain definitions."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from zoo import sharpness


def _textured(shape=(120, 140), sigma=1.5, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    noise = rng.normal(128, 40, (*shape, 3)).astype(np.float32)
    return np.clip(cv2.GaussianBlur(noise, (0, 0), sigma), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("n", [1, 2, 7, 10, 1001])
def test_twice_median_is_twice_numpys_median(n):
    values = np.random.default_rng(n).integers(-300, 300, n)
    assert sharpness._twice_median(values) == 2 * np.median(values)


def test_noise_level_is_the_scaled_median_absolute_deviation_of_the_laplacian():
    rgb = _textured(seed=4)
    mask = np.random.default_rng(5).random(rgb.shape[:2]) > 0.4
    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).astype(np.float64)
    lap = cv2.Laplacian(grey, cv2.CV_64F, ksize=1)[mask]
    expected = 1.4826 * np.median(np.abs(lap - np.median(lap))) / np.sqrt(20.0)
    assert sharpness.noise_level(rgb, mask) == pytest.approx(expected, rel=1e-9)
    grey_noise = np.random.default_rng(6).normal(0, 8, (200, 200, 1))
    white = np.clip(128 + np.repeat(grey_noise, 3, axis=2), 0, 255).astype(np.uint8)
    assert 7.0 < sharpness.noise_level(white, np.ones((200, 200), bool)) < 9.0  # white noise of std 8 reads about 8


def test_weighted_stats_under_a_bool_mask_equals_all_weights_one():
    values = np.random.default_rng(2).normal(50, 20, (80, 90, 3)).astype(np.float32)
    mask = np.random.default_rng(3).random((80, 90)) > 0.5
    mean_b, sd_b = sharpness.weighted_stats(values, mask)
    mean_w, sd_w = sharpness.weighted_stats(values, mask.astype(np.float32))
    np.testing.assert_allclose(mean_b, values[mask].mean(0), rtol=1e-6)
    np.testing.assert_allclose(mean_b, mean_w, rtol=1e-6)
    np.testing.assert_allclose(sd_b, sd_w, rtol=1e-5)
    empty_mean, empty_sd = sharpness.weighted_stats(values, np.zeros((80, 90), bool))
    assert not empty_mean.any() and not empty_sd.any()


def test_support_box_is_the_bounding_box_of_the_mask_grown_and_clipped():
    mask = np.zeros((50, 60), np.float32)
    mask[10:20, 5:7] = 0.3
    assert sharpness.support_box(mask, 3) == (slice(7, 23), slice(2, 10))
    assert sharpness.support_box(mask, 8) == (slice(2, 28), slice(0, 15))
    assert sharpness.support_box(np.zeros((5, 5)), 2) == (slice(None), slice(None))


def test_grown_box_clips_to_the_image_and_keeps_one_pixel():
    """A rectangle grown by a margin stays inside the image, and one wholly outside it still gives one edge pixel."""
    assert sharpness.grown_box((4, 6, 3, 2), 2, (20, 30)) == (slice(4, 10), slice(2, 9))
    assert sharpness.grown_box((0, 0, 30, 20), 5, (20, 30, 3)) == (slice(0, 20), slice(0, 30))
    assert sharpness.grown_box((-50, 40, 10, 5), 1, (20, 30)) == (slice(19, 20), slice(0, 1))


def test_bisect_finds_the_turning_point_and_saturates():
    assert sharpness._bisect(lambda x: x < 1.3, 0.0, 3.0) == pytest.approx(1.3, abs=3.0 / 1024)
    assert sharpness._bisect(lambda x: True, 0.0, 3.0) == 3.0  # never turns: the upper end


@pytest.mark.parametrize("tolerance", [sharpness.UNSHARP_MODEL_TOLERANCE, 0.0])
def test_unsharp_amount_reaches_the_target_by_its_model_or_by_bisection(monkeypatch, tolerance):
    """The quadratic model's amount lands near the target Laplacian variance; with no tolerance the bisection
    takes over and lands there too. A target out of reach gives the strongest amount."""
    monkeypatch.setattr(sharpness, "UNSHARP_MODEL_TOLERANCE", tolerance)
    if tolerance > 0:  # the model alone lands: no bisection

        def no_bisect(*args, **kwargs):
            raise AssertionError("bisected")

        monkeypatch.setattr(sharpness, "_bisect", no_bisect)
    base = _textured(sigma=2.5, seed=8).astype(np.float32)
    grained = base + np.random.default_rng(9).normal(0, 1.0, base.shape[:2]).astype(np.float32)[..., None]
    detail = base - cv2.GaussianBlur(base, (0, 0), 1.0)
    mask = np.zeros(base.shape[:2], bool)
    mask[20:100, 20:120] = True

    def render(amount: float) -> np.ndarray:
        return np.clip(np.rint(grained + amount * detail), 0, 255).astype(np.uint8)

    at_zero = sharpness.laplacian_variance(render(0.0), mask)
    target = 1.3 * at_zero
    amount, rendered = sharpness._unsharp_amount(render, grained, detail, mask, target, at_zero)
    assert 0.0 < amount < sharpness.MAX_UNSHARP
    assert np.array_equal(rendered, render(amount))  # the face it returns is the one at that amount
    assert sharpness.laplacian_variance(rendered, mask) == pytest.approx(target, rel=0.06)
    far = 1000.0 * at_zero
    amount, rendered = sharpness._unsharp_amount(render, grained, detail, mask, far, at_zero)
    assert amount == sharpness.MAX_UNSHARP and np.array_equal(rendered, render(sharpness.MAX_UNSHARP))
