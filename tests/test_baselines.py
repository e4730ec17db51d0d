"""Classical baselines as zoo methods: controls, strength mappings, the face-region mask, keys."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import zoo
from zoo.keys import Secret
from zoo.methods.baselines import AdditiveNoise, GaussianBlur, Pixelate, SolidMask, gaussian_blur
from zoo.pipeline import face_mask

BASELINES = {"blur": GaussianBlur, "pixelate": Pixelate, "noise": AdditiveNoise, "mask": SolidMask}


def _keys(n, secret="k", method="x"):
    s = Secret(secret)
    return [s.derive(method, i) for i in range(n)]


def _crops(n=2, size=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, size, size, generator=g) * 1.6 - 0.8


def test_registry_lists_and_loads_them():
    names = zoo.list_methods()
    for name, cls in BASELINES.items():
        assert name in names
        m = zoo.load(name, device="cpu")
        assert isinstance(m, cls) and m.name == name
        caps = zoo.info(name)
        assert caps["reversible"] is False and caps["weights_available"] is True
        assert caps["paper"] == "classical baseline"
        c = caps["controls"]["strength"]
        assert c["minimum"] == 0.0 and c["maximum"] == 1.0 and 0 < c["default"] <= 1
    assert zoo.info("noise")["uses_key"] is True and zoo.info("blur")["uses_key"] is False
    assert zoo.load("blur", resolution=128).resolution == 128
    with pytest.raises(KeyError, match="unknown method"):
        zoo.load("no-such-method")


def test_controls_are_validated():
    m = zoo.load("pixelate", device="cpu")
    assert m.validate_controls({}) == {"strength": 0.5}
    assert m.validate_controls({"strength": "0.25"}) == {"strength": 0.25}
    with pytest.raises(ValueError, match="above its maximum"):
        m.validate_controls({"strength": 1.5})
    with pytest.raises(ValueError, match="no control"):
        m.validate_controls({"sigma": 3})
    with pytest.raises(NotImplementedError):
        m.recover(np.zeros((32, 32, 3), np.uint8), key="k")


@pytest.mark.parametrize("name", list(BASELINES))
def test_strength_zero_is_identity_and_outside_mask_is_untouched(name):
    torch.manual_seed(0)
    m = BASELINES[name](resolution=64)
    x = _crops()
    keys = _keys(2)
    assert torch.equal(m.anonymize_faces(x, keys, strength=0.0), x)
    y = m.anonymize_faces(x, keys, strength=1.0)
    assert y.shape == x.shape and y.min() >= -1 and y.max() <= 1
    outside = torch.from_numpy(face_mask(64)) == 0
    assert torch.equal(y[..., outside], x[..., outside])
    inside = torch.from_numpy(face_mask(64)) == 1
    assert (y[..., inside] - x[..., inside]).abs().mean() > 0.05


def test_blur_sigma_follows_the_documented_mapping():
    # an impulse blurred with sigma = s * R / 10 has spatial variance sigma^2 along each axis
    x = torch.zeros(1, 1, 129, 129)
    x[0, 0, 64, 64] = 1.0
    sigma = 0.5 * 128 / 10
    y = gaussian_blur(x, sigma)[0, 0]
    assert y.sum().item() == pytest.approx(1.0, abs=1e-4)
    coords = torch.arange(129, dtype=torch.float32) - 64
    var_x = (y.sum(0) * coords**2).sum().item()
    assert var_x == pytest.approx(sigma**2, rel=0.03)


def test_pixelate_makes_constant_blocks_inside_the_face():
    m = Pixelate(resolution=96)
    x = _crops(1, 96)
    y = m.anonymize_faces(x, _keys(1), strength=1.0)  # block = 96 / 6 = 16
    core = torch.from_numpy(face_mask(96)) == 1
    block_ids = (torch.arange(96) // 16)[:, None] * 6 + (torch.arange(96) // 16)[None, :]
    for b in block_ids[core].unique().tolist():
        sel = core & (block_ids == b)
        vals = y[0][:, sel]
        assert (vals.max(1).values - vals.min(1).values).max() < 1e-5
        np.testing.assert_allclose(vals[:, 0], x[0][:, block_ids == b].mean(1), atol=1e-5)


def test_noise_is_keyed_and_has_the_documented_std():
    m = AdditiveNoise(resolution=64)
    x = torch.zeros(2, 3, 64, 64)
    a = m.anonymize_faces(x, _keys(2, "one"), strength=0.1)
    b = m.anonymize_faces(x, _keys(2, "one"), strength=0.1)
    c = m.anonymize_faces(x, _keys(2, "two"), strength=0.1)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.equal(a[0], a[1])  # each face its own key, its own noise
    core = torch.from_numpy(face_mask(64)) == 1
    assert a[..., core].std().item() == pytest.approx(2.0 * 0.1, rel=0.1)


def test_solid_mask_fills_mid_gray():
    m = SolidMask(resolution=64)
    x = _crops(1, 64)
    core = torch.from_numpy(face_mask(64)) == 1
    full = m.anonymize_faces(x, _keys(1), strength=1.0)
    assert full[..., core].abs().max() == 0  # 0 in [-1, 1] = mid-gray
    half = m.anonymize_faces(x, _keys(1), strength=0.5)
    assert torch.allclose(half[..., core], 0.5 * x[..., core], atol=1e-6)


def test_more_strength_changes_a_real_face_more(t1_rgb, t1_faces):
    from zoo.imageio import to_tensor
    from zoo.pipeline import align_face

    crop = align_face(t1_rgb, t1_faces[2].landmarks, 128).crop
    x = to_tensor(crop)
    for cls in (GaussianBlur, Pixelate, SolidMask):
        m = cls(resolution=128)
        errs = [(m.anonymize_faces(x, _keys(1), strength=s) - x).pow(2).mean().item() for s in (0.2, 0.5, 1.0)]
        assert errs[0] < errs[1] < errs[2], (cls.name, errs)
