"""personal (Cao et al.): g(d), the rotation and its closed-form inverse for every privacy level,
passwords (six digits or KDF) and the one-to-one reference map, batch/process determinism,
checkpoint round trip with the reference library, the build-library command, training losses."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fresh_process import anonymize_in_fresh_process

from zoo.keys import Secret
from zoo.methods.personal import (
    PasswordKeyMaterial,
    Personal,
    SixDigitPassword,
    as_personal_secret,
    build_reference_base,
    orient_reference,
    privacy_angle,
    rotate_identity,
    unrank_combination,
    unrotate_direction,
    unrotate_identity,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny networks: one torch thread is faster


def tiny_config() -> dict:
    return {
        "method": "personal",
        "resolution": 256,
        "seed": 0,
        "identity_encoder": None,
        "model": {
            "identity": {"stage_units": [1, 1, 1, 1], "channels": [8, 8, 16, 16], "embedding_size": 32, "input_size": 32},
            "aei": {"base_channels": 2},
            "discriminator": {"ndf": 8, "n_layers": 2, "num_D": 2},
        },
        "stages": {1: {"lambdas": {"adv": 0.1, "id": 5.0, "attr": 10.0, "rec": 10.0}, "same_prob": 0.5}},
    }


@pytest.fixture(scope="module")
def method() -> Personal:
    torch.manual_seed(0)
    m = Personal.from_config(tiny_config()).to("cpu")
    g = torch.Generator().manual_seed(1)
    m.set_reference_library(F.normalize(torch.randn(30, 32, generator=g), dim=1), k=10, seed=0)
    return m


def _faces(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 32, 32, generator=g) * 2 - 1
    return F.interpolate(x, size=(256, 256), mode="bilinear", align_corners=False)


def _identities_with_overlap(ref: torch.Tensor, low: float, high: float, seed: int = 0) -> torch.Tensor:
    """Unit vectors z with z . ref uniform in [low, high] (the overlap A of eq. 17)."""
    g = torch.Generator().manual_seed(seed)
    a = low + (high - low) * torch.rand(ref.shape[0], 1, generator=g, dtype=ref.dtype)
    e = torch.randn(ref.shape, generator=g, dtype=ref.dtype)
    e = F.normalize(e - (e * ref).sum(1, keepdim=True) * ref, dim=1)
    return a * ref + torch.sqrt(1 - a * a) * e


def _references(n: int, dim: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    base = F.normalize(torch.randn(n, 10, dim, generator=g), dim=2)
    return F.normalize(base.sum(1), dim=1)  # mixes of k = 10 identities


# ------------------------------------------------------------------ g(d) and the rotation
def test_privacy_angle_is_the_papers_g():
    assert [privacy_angle(d) for d in range(10)] == [70, 75, 80, 85, 95, 100, 105, 110, 115, 120]
    for bad in (-1, 10, 2.5):
        with pytest.raises(ValueError):
            privacy_angle(bad)


@pytest.mark.parametrize("d", range(10))
def test_rotation_and_closed_form_inverse_for_every_level(d):
    ref = _references(64, 512)
    z = _identities_with_overlap(ref, -0.05, 0.05, seed=d)
    z_new = rotate_identity(z, ref, d)
    g = math.radians(privacy_angle(d))
    # eq. 13: the angle between z and z_new; z_new stays in span(z, f(p))
    cos = F.cosine_similarity(z_new, z)
    a = (z * ref).sum(1)
    expected = math.cos(g) / torch.sqrt(math.cos(g) ** 2 + math.sin(g) ** 2 * (1 - a * a))
    torch.testing.assert_close(cos, expected, atol=1e-5, rtol=0)
    # eq. 16-17 invert eq. 13-14 exactly
    assert (unrotate_identity(z_new, ref, d) - z).abs().max().item() < 1e-5
    # from the direction only (what the image carries): norm-corrected inverse
    assert (unrotate_direction(F.normalize(z_new, dim=1), ref, d) - z).abs().max().item() < 1e-4
    # a wrong reference (wrong password) does not invert
    wrong = unrotate_direction(F.normalize(z_new, dim=1), _references(64, 512, seed=9), d)
    assert F.cosine_similarity(wrong, z).max().item() < 0.9


@pytest.mark.parametrize("d", [0, 2, 3, 5])
def test_overlap_prior_picks_the_right_preimage_in_a_lopsided_space(d):
    """Faces that overlap their reference by ~0.5 (as in a space where all identities share a common
    component): from the direction alone, the largest-norm root returns another preimage at low d;
    the stored typical overlap selects the true one."""
    ref = _references(64, 512, seed=5)
    z = _identities_with_overlap(ref, 0.45, 0.55, seed=10 + d)
    u = F.normalize(rotate_identity(z, ref, d), dim=1)
    with_prior = unrotate_direction(u, ref, d, overlap_prior=0.5)
    assert (with_prior - z).abs().max().item() < 1e-4
    if d <= 3:
        largest = unrotate_direction(u, ref, d)
        assert F.cosine_similarity(largest, z).mean().item() < 0.9  # the ambiguity is real there
    # and a prior does not break the orthogonal case
    z0 = _identities_with_overlap(ref, -0.05, 0.05, seed=20 + d)
    u0 = F.normalize(rotate_identity(z0, ref, d), dim=1)
    assert (unrotate_direction(u0, ref, d, overlap_prior=0.0) - z0).abs().max().item() < 1e-4


@pytest.mark.parametrize("d", range(10))
def test_oriented_reference_makes_the_inverse_from_the_direction_unique_at_every_level(d):
    """Overlaps spread like a 10-identity mix in a 100-d latent (|A| up to 0.3): with the paper's rule the
    direction alone has a mirror preimage near 90 degrees, and the largest-norm root misses some faces;
    with the reference oriented (A cos g <= 0) the inverse is exact for every face and level, from a
    float16 direction as the carrier stores it, and a wrong reference still recovers nobody."""
    ref = _references(256, 100, seed=3)
    z = _identities_with_overlap(ref, -0.3, 0.3, seed=40 + d)
    oriented = orient_reference(z, ref, d)
    a = (z * oriented).sum(1)
    assert bool((a * math.cos(math.radians(privacy_angle(d))) <= 0).all())
    assert bool(((oriented == ref).all(1) | (oriented == -ref).all(1)).all())  # f(p) or -f(p), nothing else
    u = F.normalize(rotate_identity(z, oriented, d), dim=1).half().float()
    back = unrotate_direction(u, ref, d, oriented=True)
    assert F.cosine_similarity(back, z).min().item() > 0.9999
    wrong = unrotate_direction(u, _references(256, 100, seed=11), d, oriented=True)
    assert F.cosine_similarity(wrong, z).max().item() < 0.9
    if d in (3, 4):  # the paper's rule on the same faces: the mirror preimage is real there
        paper = unrotate_direction(F.normalize(rotate_identity(z, ref, d), dim=1), ref, d)
        assert (F.cosine_similarity(paper, z) < 0.99).sum().item() >= 10


def test_centered_library_spreads_references_of_a_lopsided_space():
    g = torch.Generator().manual_seed(7)
    common = torch.randn(1, 32, generator=g)
    emb = 3 * F.normalize(common, dim=1) + F.normalize(torch.randn(40, 32, generator=g), dim=1)  # shared component
    plain, centered = build_reference_base(emb), build_reference_base(emb, center=True)
    off_diagonal = ~torch.eye(40, dtype=torch.bool)
    assert (plain @ plain.T)[off_diagonal].mean() > 0.8
    assert (centered @ centered.T)[off_diagonal].mean().abs() < 0.1
    torch.testing.assert_close(centered.norm(dim=1), torch.ones(40))


def test_library_stores_the_typical_overlap(method):
    fresh = Personal(dict(tiny_config()), dict(method.components))
    assert fresh.overlap_prior is None  # no library yet: recovery keeps the largest-norm root
    faces = _faces(24, seed=3)
    fresh.build_library(faces, k=10, seed=0)
    prior = fresh.overlap_prior
    with torch.no_grad():
        emb = fresh.identity(faces)
    refs = fresh.reference(fresh.face_keys(as_personal_secret("123456"), 1))
    assert prior is not None and -1.0 < prior < 1.0
    # the same order of magnitude as a direct measurement with another password
    assert abs(float((emb @ refs.T).mean()) - prior) < 0.2


def test_identity_distance_grows_monotonically_with_level():
    ref = _references(32, 512, seed=3)
    z = _identities_with_overlap(ref, -0.05, 0.3, seed=4)
    cos = torch.stack([F.cosine_similarity(rotate_identity(z, ref, d), z) for d in range(10)], dim=1)  # [N, 10]
    assert (cos[:, 1:] < cos[:, :-1]).all()  # strictly farther at every step of d
    assert (cos[:, 3] > 0).all() and (cos[:, 4] < 0).all()  # g crosses 90 degrees between d = 3 and d = 4


# ------------------------------------------------------------------ passwords and library
def test_unrank_combination_enumerates_lexicographic_order():
    for n, k in ((7, 3), (6, 6), (9, 1)):
        combos = [tuple(unrank_combination(r, n, k)) for r in range(math.comb(n, k))]
        assert combos == list(itertools.combinations(range(n), k))
    with pytest.raises(ValueError):
        unrank_combination(math.comb(7, 3), 7, 3)


def test_password_map_is_one_to_one_and_mixes_k_identities(method):
    lib = method.config["library"]
    total = math.comb(int(lib["identities"]), int(lib["k"]))
    assert total >= 10**6 and math.gcd(int(lib["multiplier"]), total) == 1  # (a p + b) mod C is injective
    seen = set()
    for p in list(range(0, 10**6, 997)) + [999_999, 1, 2]:
        idx = method.password_identities(f"{p:06d}")
        assert len(idx) == 10 and len(set(idx)) == 10 and idx == sorted(idx)
        seen.add(tuple(idx))
    assert len(seen) == len(range(0, 10**6, 997)) + 3
    with pytest.raises(ValueError):
        method.set_reference_library(torch.randn(20, 32))  # C(20, 10) < 10^6: not one-to-one


def test_six_digit_passwords_and_kdf_keys(method):
    s = as_personal_secret("042917")
    assert isinstance(s, SixDigitPassword)
    keys = method.face_keys(s, 3)
    assert all(isinstance(k, PasswordKeyMaterial) and k.digits(6) == "042917" for k in keys)
    assert "042917" not in repr(keys[0]) and "042917" not in s.fingerprint
    other = method.face_keys(Secret("my long secret"), 3)  # KDF: six digits per face
    digits = [k.digits(6) for k in other]
    assert all(len(d) == 6 and d.isdigit() for d in digits) and len(set(digits)) == 3
    assert not isinstance(as_personal_secret("04291"), SixDigitPassword)
    ref = method.reference(keys)
    torch.testing.assert_close(ref[0], ref[2])
    torch.testing.assert_close(ref.norm(dim=1), torch.ones(3))


def test_reference_base_groups_identities():
    e = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    base = build_reference_base(e, ["a", "b", "a"])
    torch.testing.assert_close(base, F.normalize(torch.tensor([[1 + 0.5**0.5, 0.5**0.5], [0.0, 1.0]]), dim=1))


# ------------------------------------------------------------------ the method
def test_anonymize_recover_batch_of_one_equals_row_of_eight(method):
    x = _faces(8, seed=2)
    keys = method.face_keys(Secret("batch secret"), 8)
    with torch.no_grad():
        y8 = method.anonymize_faces(x, keys, level=6)
        y1 = method.anonymize_faces(x[3:4], keys[3:4], level=6)
        r8 = method.recover_faces(y8[:2], keys[:2], level=6)
        r1 = method.recover_faces(y8[1:2], keys[1:2], level=6)
        y_level0 = method.anonymize_faces(x[:1], keys[:1], level=0)
    assert y8.shape == x.shape and y8.min() >= -1 and y8.max() <= 1
    # equal up to float noise of batched convolutions, far below one 8-bit level (2/255)
    torch.testing.assert_close(y1, y8[3:4], atol=1e-3, rtol=0)
    torch.testing.assert_close(r1, r8[1:2], atol=1e-3, rtol=0)
    assert (y_level0 - y8[:1]).abs().max() > 1e-3  # the level changes the output


@pytest.mark.slow  # 8 s: a new process loads the checkpoint
def test_checkpoint_roundtrip_with_library_and_new_process(method, tmp_path):
    from zoo import load

    method.save_pretrained(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "extra.safetensors").is_file()
    loaded = load("personal", local_dir=str(tmp_path / "ckpt"), device="cpu")
    torch.testing.assert_close(loaded.extra["reference_base"], method.extra["reference_base"], atol=0, rtol=0)
    assert loaded.password_identities("123456") == method.password_identities("123456")
    crop = ((_faces(1, seed=5)[0].permute(1, 2, 0) + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).numpy()
    a = np.asarray(method.anonymize(crop, key="123456", aligned=True, level=7))
    b = np.asarray(loaded.anonymize(crop, key="123456", aligned=True, level=7))
    assert np.array_equal(a, b)
    rec_a = np.asarray(method.recover(a, key="123456", aligned=True, level=7))
    assert np.array_equal(rec_a, np.asarray(loaded.recover(a, key="123456", aligned=True, level=7)))
    out = anonymize_in_fresh_process("personal", tmp_path / "ckpt", crop, "123456", tmp_path, level=7).astype(int)
    assert np.array_equal(out, a), (np.abs(out - a).max(), (out != a).sum())


def test_checkpoint_without_library_explains_how_to_build_it(method, tmp_path):
    m = Personal(dict(tiny_config()), dict(method.components))
    with pytest.raises(RuntimeError, match="build-library"):
        m.anonymize_faces(_faces(1), m.face_keys(Secret("x"), 1))


def test_build_library_command(method, tmp_path):
    pytest.importorskip("gan_face_generate")
    from zoo.methods.personal import main

    bare = Personal(dict(tiny_config()), dict(method.components))
    bare.save_pretrained(tmp_path / "bare")
    main(["build-library", "--checkpoint", str(tmp_path / "bare"), "--data", "synthetic:24:3", "--out", str(tmp_path / "lib")])
    built = Personal.from_pretrained(str(tmp_path / "lib"))
    assert built.extra["reference_base"].shape == (24, 32)
    assert built.config["library"]["identities"] == 24 and built.config["library"]["k"] == 10
    with torch.no_grad():
        y = built.anonymize_faces(_faces(1), built.face_keys(as_personal_secret("000001"), 1), level=9)
    assert torch.isfinite(y).all()


def test_training_losses_reach_generator_and_discriminator(method):
    batch = {"image": _faces(2, seed=7), "image_b": _faces(2, seed=8)}
    method.train_generator = torch.Generator().manual_seed(0)
    groups = method.trainable_parameters(1)
    assert list(groups) == ["d", "g"]
    for group, trained, frozen in (("d", "discriminator", "aei"), ("g", "aei", "discriminator")):
        ids = {id(p) for p in groups[group]}
        for c in method.components.values():
            for p in c.parameters():
                p.requires_grad_(id(p) in ids)
                p.grad = None
        loss, logs = method.compute_losses(1, group, batch, 0)
        assert torch.isfinite(loss)
        loss.backward()
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in method.components[trained].parameters())
        assert all(p.grad is None for p in method.components[frozen].parameters())
        assert all(p.grad is None for p in method.components["identity_encoder"].parameters())
    assert set(logs) >= {"adv", "id", "attr", "rec", "total"}
    for c in method.components.values():
        c.requires_grad_(True).eval()
