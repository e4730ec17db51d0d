"""Classical baselines as zoo methods: controls, strength mappings, the face-region mask, keys."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import zoo
from zoo.keys import Secret
from zoo.methods.baselines import AdditiveNoise, GaussianBlur, Pixelate, SolidMask, gaussian_blur
from zoo.paste import face_mask

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
    assert m.validate_controls({}) == {"strength": 1.0, "shape": "ellipse", "mask_scale": 1.3}
    assert m.validate_controls({"strength": "0.25"})["strength"] == 0.25
    with pytest.raises(ValueError, match="shape"):
        m.validate_controls({"shape": "circle"})
    with pytest.raises(ValueError, match="fill"):
        zoo.load("mask").validate_controls({"fill": "/no/such/image.png"})
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
    from zoo.alignment import align_face
    from zoo.imageio import to_tensor

    crop = align_face(t1_rgb, t1_faces[2].landmarks, 128).crop
    x = to_tensor(crop)
    for cls in (GaussianBlur, Pixelate, SolidMask):
        m = cls(resolution=128)
        errs = [(m.anonymize_faces(x, _keys(1), strength=s) - x).pow(2).mean().item() for s in (0.2, 0.5, 1.0)]
        assert errs[0] < errs[1] < errs[2], (cls.name, errs)


# ---------------------------------------------------------------------- photos: head-sized regions in photo pixels
def _changed(a, b):
    return np.any(a.astype(int) != b.astype(int), axis=-1)


@pytest.mark.parametrize("name", list(BASELINES))
def test_photo_region_is_head_sized_and_nothing_else_changes(name, t1_rgb, t1_faces):
    from zoo.methods.baselines import face_region

    m = zoo.load(name, device="cpu")
    r = m.anonymize(t1_rgb, key="k")
    out = np.asarray(r)
    changed = _changed(out, t1_rgb)
    regions = [face_region(f, t1_rgb.shape[:2], 1.3) for f in t1_faces]
    inside = np.zeros(changed.shape, bool)
    for x0, y0, x1, y1 in regions:
        inside[y0:y1, x0:x1] = True
    assert not changed[~inside].any()  # nothing outside the grown boxes
    for f, (x0, y0, x1, y1) in zip(t1_faces, regions):
        # the region reaches beyond the detection box (forehead, chin, ears): 30% of its size per side
        assert x0 < f.box[0] - 0.2 * f.width and x1 > f.box[2] + 0.2 * f.width
        fx0, fy0, fx1, fy1 = (int(v) for v in f.box)
        assert changed[fy0:fy1, fx0:fx1].mean() > 0.6
        assert not changed[y0, x0] and not changed[y1 - 1, x1 - 1]  # ellipse: the corners stay
    rep = r.report()
    assert [f["status"] for f in rep["faces"]] == ["processed"] * 6
    assert all(f["action"].startswith(("blur", "pixelate", "noise", "mask")) and "ellipse region x1.3" in f["action"] for f in rep["faces"])
    assert all(0.5 < f["score"] <= 1.0 for f in rep["faces"])
    if m.uses_key:
        assert r.key_fingerprint is not None and rep["faces"][0]["key_fingerprint"] == r.key_fingerprint
    else:  # a face of a method that ignores the key carries no fingerprint
        assert rep["faces"][0]["key_fingerprint"] is None


def _face(nose, eyes=((130.0, 140.0), (170.0, 140.0))):
    from zoo.detectors import DetectedFace

    (lx, ly), (rx, ry) = eyes
    return DetectedFace([100, 100, 200, 200], [[lx, ly], [rx, ry], list(nose), [135, 180], [165, 180]], 0.9)


def test_a_turned_face_region_reaches_behind_the_head():
    from zoo.methods.baselines import head_box, turn_offset

    frontal = head_box(_face((152, 165)), 1.3)
    assert np.allclose(frontal, [70, 70, 230, 230])  # nose within FRONTAL_TURN: the box grown by 30% per side
    assert turn_offset(_face((178, 165)).landmarks)[0] == pytest.approx(0.7)
    right = head_box(_face((178, 165)), 1.3)  # nose 0.7 eye distances to the right: the back of the head is left
    assert right[0] < 70 - 50 and np.allclose(right[1:], [70, 230, 230])
    left = head_box(_face((122, 165)), 1.3)
    assert left[2] > 230 + 50 and np.allclose(left[[0, 1, 3]], [70, 70, 230])
    # a face lying on its side (eye line vertical): the region grows along the eye line, i.e. vertically
    sideways = head_box(_face((128, 178), eyes=((140, 130), (140, 170))), 1.3)
    assert sideways[1] < 70 - 50 and np.allclose(sideways[[0, 2, 3]], [70, 230, 230])


def test_the_near_profile_face_of_t1_loses_its_ear(t1_rgb, t1_faces):
    from zoo.methods.baselines import turn_offset

    turned = max(t1_faces, key=lambda f: abs(turn_offset(f.landmarks)[0]))
    t = turn_offset(turned.landmarks)[0]
    assert abs(t) > 0.5  # t1's man at the right, looking left
    out = np.asarray(zoo.load("mask", device="cpu").anonymize(t1_rgb, shape="box"))
    changed = _changed(out, t1_rgb)
    fy = int(turned.center[1])
    behind = (
        changed[fy, int(turned.box[2]) : int(turned.box[2] + 0.7 * turned.width)]
        if t < 0
        else changed[fy, int(turned.box[0] - 0.7 * turned.width) : int(turned.box[0])]
    )
    assert behind.all()  # beyond the 30% margin: the ear and the back of the head


def test_box_shape_and_mask_scale(t1_rgb, t1_faces):
    from zoo.methods.baselines import face_region

    m = zoo.load("mask", device="cpu")
    out = np.asarray(m.anonymize(t1_rgb, shape="box", mask_scale=1.0))
    x0, y0, x1, y1 = face_region(t1_faces[0], t1_rgb.shape[:2], 1.0)
    assert (out[y0:y1, x0:x1] == 128).all()  # the whole box, flat gray
    wide = _changed(np.asarray(m.anonymize(t1_rgb, mask_scale=1.6)), t1_rgb).sum()
    narrow = _changed(np.asarray(m.anonymize(t1_rgb, mask_scale=1.1)), t1_rgb).sum()
    assert wide > 2 * narrow


def test_mask_fill_colours_and_image(t1_rgb, t1_faces, tmp_path):
    from PIL import Image

    m = zoo.load("mask", device="cpu")
    f = t1_faces[2]
    cx, cy = (int(v) for v in f.center)
    assert (np.asarray(m.anonymize(t1_rgb, fill="black"))[cy, cx] == 0).all()
    red = np.zeros((20, 20, 3), np.uint8)
    red[..., 0] = 255
    Image.fromarray(red).save(tmp_path / "red.png")
    out = np.asarray(m.anonymize(t1_rgb, fill=str(tmp_path / "red.png")))
    assert tuple(out[cy, cx]) == (255, 0, 0)


def test_noise_in_photos_is_keyed(t1_rgb):
    m = zoo.load("noise", device="cpu")
    a, b, c = (np.asarray(m.anonymize(t1_rgb, key=k)) for k in ("one", "one", "two"))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_noise_in_photos_is_luminance_noise_around_the_region_mean(t1_rgb, t1_faces):
    m = zoo.load("noise", device="cpu")
    out = np.asarray(m.anonymize(t1_rgb, key="one")).astype(float)
    f = t1_faces[2]
    cx, cy = (int(v) for v in f.center)
    r = int(0.25 * f.width)
    core = out[cy - r : cy + r, cx - r : cx + r].reshape(-1, 3)
    inside = core[((core > 0) & (core < 255)).all(1)]  # not clipped on any channel
    assert len(inside) > 0.2 * len(core)
    # one noise value per pixel on all three channels: the channel differences are the mean colour's
    assert (inside[:, 0] - inside[:, 1]).std() < 1.0 and (inside[:, 1] - inside[:, 2]).std() < 1.0
    assert core[:, 1].std() > 60  # std 128 before clipping to [0, 255]


def test_strength_grows_the_blur_in_photos(t1_rgb, t1_faces):
    m = zoo.load("blur", device="cpu")
    f = t1_faces[2]
    x0, y0, x1, y1 = (int(v) for v in f.box)
    detail = lambda a: np.abs(np.diff(a[y0:y1, x0:x1].astype(float), axis=1)).mean()  # noqa: E731
    d = [detail(np.asarray(m.anonymize(t1_rgb, strength=s))) for s in (0.05, 0.3, 1.0)]
    assert d[0] > d[1] > d[2] and d[2] < 0.15 * detail(t1_rgb)
    assert np.array_equal(np.asarray(m.anonymize(t1_rgb, strength=0.0)), t1_rgb)


def test_a_photo_effect_that_fails_blurs_every_face_and_says_so(t1_rgb, t1_faces, monkeypatch):
    m = zoo.load("pixelate", device="cpu")

    def boom(*a, **k):
        raise RuntimeError("simulated")

    monkeypatch.setattr(m, "photo_effect", boom)
    r = m.anonymize(t1_rgb)
    rep = r.report()
    assert rep["fallbacks"] == list(range(6)) and "simulated" in rep["faces"][0]["error"]
    out = np.asarray(r)
    for f in t1_faces:
        x0, y0, x1, y1 = (int(v) for v in f.box)
        assert np.abs(out[y0:y1, x0:x1].astype(int) - t1_rgb[y0:y1, x0:x1]).mean() > 10


def test_an_animated_gif_is_refused_with_a_clear_message_not_cut_to_one_frame(t1_rgb, tmp_path):
    from PIL import Image

    frames = [Image.fromarray(np.ascontiguousarray(t1_rgb[:200, :200])), Image.fromarray(np.ascontiguousarray(t1_rgb[200:400, :200]))]
    path = tmp_path / "two.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100)
    with pytest.raises(Exception, match="animated or multi-page image with 2 frames"):
        zoo.load("blur", device="cpu").anonymize(str(path))
