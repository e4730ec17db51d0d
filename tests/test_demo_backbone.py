"""The demo tier's pretrained parts: SFace in torch, the packaged DCGAN, latent refinement, the demo
methods' keyed latent transforms, and how ``zoo.load`` picks its weights."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo import registry
from zoo.alignment import align_face, ffhq_template
from zoo.detection import detect_faces
from zoo.keys import Secret

pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------------------------------ SFace
@pytest.fixture(scope="module")
def sface():
    from zoo.nn.sface import load_sface

    return load_sface()


def _crops(t1_rgb) -> np.ndarray:
    """Real faces (insightface's group photo) and generated faces, as 64 px FFHQ-aligned crops."""
    from zoo.synthetic import synthetic_faces_uint8

    real = [align_face(t1_rgb, f.landmarks, 64).crop for f in detect_faces(t1_rgb)[:4]]
    return np.concatenate([np.stack(real), synthetic_faces_uint8(4, seed=11)])


def _cv2_features(crops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OpenCV's own SFace on its own 112 px alignment: (aligned crops uint8 RGB, features)."""
    from zoo.judges import _yunet_row
    from zoo.nn.sface import sface_onnx_path

    rec = cv2.FaceRecognizerSF.create(str(sface_onnx_path()), "")
    aligned, feats = [], []
    for c in crops:
        al = rec.alignCrop(np.ascontiguousarray(c[:, :, ::-1]), _yunet_row([0, 0, c.shape[0], c.shape[0]], ffhq_template(c.shape[0])))
        aligned.append(al[:, :, ::-1].copy())
        feats.append(np.asarray(rec.feature(al)).reshape(-1))
    return np.stack(aligned), np.stack(feats)


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.slow
def test_sface_torch_matches_opencv(sface, t1_rgb):
    crops = _crops(t1_rgb)
    aligned, ref = _cv2_features(crops)
    x = torch.from_numpy(aligned).permute(0, 3, 1, 2).float() / 127.5 - 1
    with torch.no_grad():
        ours = sface(x).numpy()
        warped = sface.embed_aligned(torch.from_numpy(crops).permute(0, 3, 1, 2).float() / 127.5 - 1).numpy()
    assert _cos(ours, ref).min() >= 0.999  # the network on the same 112 px input
    assert _cos(warped, ref).min() >= 0.995  # our differentiable warp vs OpenCV's alignCrop
    # and it is a recognizer: different people are far apart
    assert np.abs(_cos(ours[:1].repeat(3, 0), ours[1:4])).max() < 0.363


def test_sface_is_differentiable_and_frozen(sface):
    x = torch.zeros(2, 3, 64, 64, requires_grad=True)
    sface.embed_aligned(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert not any(p.requires_grad for p in sface.parameters())


def test_sface_is_an_identity_encoder_option(sface):
    from zoo.nn.identity_encoder import embedding_dim, load_identity_encoder

    enc = load_identity_encoder("sface")
    assert embedding_dim(enc, 64) == 128
    # the method's own copy: moving it (method.to(device)) must not move the process's shared SFace
    assert enc is not sface and all(torch.equal(a, b) for a, b in zip(enc.state_dict().values(), sface.state_dict().values()))
    enc.to(torch.float64)
    assert next(sface.parameters()).dtype == torch.float32


def test_sface_converter_is_strict():
    from zoo.convert import ConversionError
    from zoo.nn.sface import convert_sface

    with pytest.raises(ConversionError):
        convert_sface({"conv_1_conv2d_weight_shape": torch.tensor([32, 3, 3, 3])})


def test_blockwise_dequantize_known_answer():
    from zoo.nn.sface import _dequantize

    q = torch.tensor([[1, 2, 3, 4, 5]], dtype=torch.int8)
    scales = torch.tensor([[0.5, 2.0]])  # blocks of 3 then 2
    zp = torch.tensor([[1, 0]], dtype=torch.int8)
    assert torch.equal(_dequantize(q, scales, zp), torch.tensor([[0.0, 0.5, 1.0, 8.0, 10.0]]))


# ------------------------------------------------------------------------------------------ DCGAN
def test_dcgan_generator_is_the_packaged_network(tmp_path):
    from gan_face_generate.models import Generator

    from zoo.nn.dcgan import DCGANGenerator, packaged_weights_path

    ref = Generator(0, 3, 100, 64)
    ref.load_state_dict(torch.load(packaged_weights_path(), map_location="cpu", weights_only=True)["netG_state_dict"])
    ref.eval()
    ours = DCGANGenerator()
    z = torch.randn(3, 100, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(ours(z), ref(z[:, :, None, None]))
    ours.save_pretrained(tmp_path)
    assert not list(tmp_path.glob("*.safetensors"))  # config only: the package's weights are never copied
    again = DCGANGenerator.from_pretrained(str(tmp_path))
    with torch.no_grad():
        assert torch.equal(again(z), ours(z))
    ours.train()
    assert not ours.training  # frozen BatchNorm statistics


def test_refine_latent_fits_the_image_inside_inference_mode():
    from zoo.nn.dcgan import DCGANGenerator, refine_latent

    g = DCGANGenerator()
    gen = torch.Generator().manual_seed(3)
    z_true, z0 = torch.randn(2, 100, generator=gen), torch.randn(2, 100, generator=gen)
    target = g(z_true)
    before = (g(z0) - target).abs().mean()
    with torch.inference_mode():
        z = refine_latent(g, target, z0, steps=30)
    after = (g(z) - target).abs().mean()
    assert after < 0.8 * before
    assert torch.equal(refine_latent(g, target, z0, steps=0), z0)


def test_refine_latent_identity_term_pulls_the_identity_embedding_towards_the_target():
    from zoo.nn.dcgan import refine_latent

    # a linear "generator" whose range cannot hold the target, and an "identity" that looks at 4 of the
    # 48 pixels: the pixel loss alone leaves that part off; the identity term must bring it closer
    gen = torch.Generator().manual_seed(0)
    basis = torch.randn(48, 6, generator=gen) * 0.3
    generator = lambda z: (z @ basis.T).view(-1, 3, 4, 4)  # noqa: E731
    proj = torch.zeros(48, 4)
    proj[[0, 5, 17, 40], [0, 1, 2, 3]] = 1.0
    identity = lambda x: F.normalize(x.flatten(1) @ proj, dim=1)  # noqa: E731
    target = torch.rand(8, 3, 4, 4, generator=gen) * 2 - 1
    z0 = torch.zeros(8, 6)
    with torch.inference_mode():
        plain = refine_latent(generator, target, z0, steps=300)
        with_id = refine_latent(generator, target, z0, steps=300, identity=identity, identity_weight=1.0)
        unused = refine_latent(generator, target, z0, steps=300, identity=identity, identity_weight=0.0)
    cos = lambda z: (identity(generator(z)) * identity(target)).sum(1)  # noqa: E731
    assert torch.equal(unused, plain)  # weight 0 is the pixel-only refinement, bit for bit
    assert (cos(with_id) - cos(plain)).mean() > 0.05  # 0.15 on this toy


@pytest.mark.slow  # 15 s: three real-face inversions (CI runs it with -m slow)
def test_identity_refinement_runs_only_on_faces_the_pixel_fit_leaves_far_and_is_validated():
    from zoo.methods.fit_controls import InversionFit
    from zoo.methods.ifadit import IFADITDemo

    m = IFADITDemo.from_config({"backbone": "dcgan", "resolution": 64, "model": {"flow": {"key_dim": 8, "n_blocks": 1, "hidden": [16]}}})
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():  # the untrained encoder returns codes near 0, where the DCGAN's ReLUs pass no gradient
        m.components["encoder"].head.bias.copy_(torch.randn(100, generator=gen))
    faces = m.decode(torch.randn(2, 100, generator=gen)).detach().clamp(-1, 1)
    with torch.inference_mode():
        plain = m.encode(faces, InversionFit(5))
        # row 0: the face G(z) itself (its fit is the face), row 1: an unrelated face
        x = torch.cat([m.decode(plain[:1]).clamp(-1, 1), faces[1:]])
        plain = m.encode(x, InversionFit(5))
        fit = m.identity_fit(x, plain)
        assert fit[0] - fit[1] > 0.1  # SFace: G(z) is nearer the face it was fitted to than an unrelated face
        check = float(fit[0] + fit[1]) / 2
        assert torch.equal(m.encode(x, InversionFit(5, 0.0, check)), plain)  # weight 0: pixels only
        assert torch.equal(m.encode(x, InversionFit(5, 2.0, 0.0)), plain)  # check 0: never
        some = m.encode(x, InversionFit(5, 2.0, check))
        every = m.encode(x, InversionFit(5, 2.0, 1.0))
    assert torch.equal(some[0], plain[0])  # a close fit is kept
    assert (some[1] - plain[1]).abs().max() > 1e-4  # a far one is refined for identity
    assert (every[0] - plain[0]).abs().max() > 1e-4
    assert m.validate_controls({"identity_refine": 1})["identity_refine"] == 1.0
    assert m.validate_controls({})["identity_check"] == 0.4
    with pytest.raises(ValueError, match="identity_refine"):
        m.validate_controls({"identity_refine": -1})
    with pytest.raises(ValueError, match="identity_check"):
        m.validate_controls({"identity_check": 1.5})


def test_identity_reinversion_defaults_per_method_reach_the_tensor_api():
    from zoo import load
    from zoo.methods.fit_controls import InversionFit

    hford, dbaf = load("hford"), load("dbaf")
    # one inversion setting for every demo method: the identity-aware re-inversion on below SFace cosine 0.4
    for m in (hford, dbaf):
        assert m.validate_controls({})["identity_refine"] == 1.0 and m.inversion_fit(20, None, None, 0.0) == InversionFit(20, 1.0, 0.4)
    assert hford.inversion_fit(20, 0.0, None, 0.0) == InversionFit(20, 0.0, 0.4)
    assert dbaf.inversion_fit(5, 0.5, 1.0, 3.0) == InversionFit(5, 0.5, 1.0, 3.0)
    assert InversionFit(5, 0.5, 0.0).identity_weight == 0.0  # the identity term needs the check on
    assert InversionFit(5, 0.5, 0.4).cache_tag() != InversionFit(5, 0.5, 0.4, 3.0).cache_tag()


# ------------------------------------------------------------------------------------------ demo methods
@pytest.fixture(scope="module")
def personal_demo():
    from zoo.methods.personal import PersonalDemo

    return PersonalDemo.from_config({"backbone": "dcgan", "resolution": 64, "library": {"identities": 100, "k": 10, "seed": 7}})


@pytest.fixture(scope="module")
def ifadit_demo():
    from zoo.methods.ifadit import IFADITDemo

    flow = {"key_dim": 16, "n_blocks": 2, "hidden": [32], "block": "allinone", "clamp": 2.0}
    torch.manual_seed(0)
    return IFADITDemo.from_config({"backbone": "dcgan", "resolution": 64, "model": {"flow": flow}})


def test_personal_demo_rotation_inverts_and_needs_the_password(personal_demo):
    z = torch.randn(6, 100, generator=torch.Generator().manual_seed(1))
    right = personal_demo.face_keys(Secret("042917"), 6)
    wrong = personal_demo.face_keys(Secret("042918"), 6)
    angles = []
    for level in range(10):
        z_anon = personal_demo.edit_latent(z, right, level=level)
        assert torch.allclose(z_anon.norm(dim=1), z.norm(dim=1), rtol=1e-5)  # the norm is kept
        if level in (0, 7, 8, 9):  # eq. 16-17 are exact there (ambiguous near 90 deg: see PersonalDemo.controls)
            assert torch.allclose(personal_demo.unedit_latent(z_anon, right, level=level), z, atol=1e-3)
        assert F.cosine_similarity(personal_demo.unedit_latent(z_anon, wrong, level=level), z).max() < 0.9
        angles.append(float(torch.rad2deg(torch.acos(F.cosine_similarity(z_anon, z).clamp(-1, 1))).mean()))
    assert all(b > a for a, b in zip(angles, angles[1:]))  # privacy level d moves the identity further


def test_personal_demo_with_oriented_reference_inverts_at_every_level(personal_demo):
    from zoo.methods.personal import PersonalDemo

    oriented = PersonalDemo(dict(personal_demo.config, oriented_reference=True), personal_demo.components, dict(personal_demo.extra))
    z = torch.randn(64, 100, generator=torch.Generator().manual_seed(5))
    right = oriented.face_keys(Secret("042917"), 64)
    wrong = oriented.face_keys(Secret("042918"), 64)
    for level in range(10):
        z_anon = oriented.anonymized_code(z, right, level=level).half().float()  # as the carrier stores it
        assert F.cosine_similarity(oriented.recovered_code(z_anon, right, level=level), z).min() > 0.9999
        assert F.cosine_similarity(oriented.recovered_code(z_anon, wrong, level=level), z).max() < 0.9


def test_ifadit_demo_flow_inverts_exactly_only_with_the_key(ifadit_demo):
    z = torch.randn(5, 100, generator=torch.Generator().manual_seed(2))
    right = ifadit_demo.face_keys(Secret("s1"), 5)
    wrong = ifadit_demo.face_keys(Secret("s2"), 5)
    with torch.no_grad():
        z_anon = ifadit_demo.edit_latent(z, right)
        assert (ifadit_demo.unedit_latent(z_anon, right) - z).abs().max() <= 1e-5
        assert (ifadit_demo.unedit_latent(z_anon, wrong) - z).abs().mean() > 1e-3  # untrained: weakly keyed; trained: see the card
        assert not torch.allclose(ifadit_demo.edit_latent(z, wrong), z_anon)


def test_ifadit_demo_keyed_shift_inverts_with_the_key_and_decorrelates_keys(ifadit_demo):
    from zoo.methods.ifadit import IFADITDemo

    shifted = IFADITDemo(dict(ifadit_demo.config, keyed_shift=0.8), ifadit_demo.components, dict(ifadit_demo.extra))
    z = torch.randn(256, 100, generator=torch.Generator().manual_seed(3))
    right, other = shifted.face_keys(Secret("s1"), 256), shifted.face_keys(Secret("s2"), 256)
    with torch.no_grad():
        z_anon, z_other = shifted.edit_latent(z, right), shifted.edit_latent(z, other)
        assert (shifted.unedit_latent(z_anon, right) - z).abs().max() <= 1e-5
        assert F.cosine_similarity(shifted.unedit_latent(z_anon, other), z).max() < 0.9
        plain, plain_other = ifadit_demo.edit_latent(z, right), ifadit_demo.edit_latent(z, other)
        # two keys' codes: 0.6 of the flow's cross-key cosine plus independent keyed noise
        cos_plain = F.cosine_similarity(plain, plain_other).mean()
        cos_shifted = F.cosine_similarity(z_anon, z_other).mean()
        assert cos_shifted < 0.8 * cos_plain
        # variance-preserving: the shifted codes' mean squared norm is within 20% of the flow's
        # (0.36 |T|^2 + 0.64 * 100 on average, and |T|^2 is near 100 on this untrained flow's inputs)
        ratio = z_anon.pow(2).sum(1).mean() / (0.36 * plain.pow(2).sum(1).mean() + 0.64 * 100)
        assert 0.8 < ratio < 1.2
    with pytest.raises(ValueError, match="keyed_shift"):
        IFADITDemo(dict(ifadit_demo.config, keyed_shift=1.0), ifadit_demo.components).edit_latent(z, right)


def test_anonymized_code_scale_moves_codes_to_the_prior_and_recovery_undoes_it():
    from zoo.methods.fit_controls import InversionFit
    from zoo.methods.personal import PersonalDemo

    config = {"backbone": "dcgan", "resolution": 64, "library": {"identities": 100, "k": 10, "seed": 7}}
    plain = PersonalDemo.from_config(config)
    scaled = PersonalDemo.from_config({**config, "anonymized_code_scale": 1.7})
    z = torch.randn(4, 100, generator=torch.Generator().manual_seed(5)) * 0.58  # at the inversion's radius
    keys = scaled.face_keys(Secret("042917"), 4)
    with torch.no_grad():
        z_anon = scaled.anonymized_code(z, keys)
        assert torch.allclose(z_anon, 1.7 * plain.anonymized_code(z, keys), atol=1e-5)
        assert torch.allclose(z_anon.norm(dim=1), 1.7 * z.norm(dim=1), rtol=1e-4)  # personal keeps the norm
        assert torch.allclose(scaled.recovered_code(z_anon, keys), z, atol=1e-3)  # a carried code: exact
        # a face without a carried code is re-inverted: the inversion returns codes at its own radius,
        # so the estimate of z_anon is the inverted code times the scale
        y = scaled.decode(z_anon)
        estimate = scaled.anonymized_codes(y, None, InversionFit())[1]
        assert torch.allclose(estimate, 1.7 * scaled.encode(y), atol=1e-5)
        assert torch.equal(scaled.anonymized_codes(y, [z_anon[i].numpy() for i in range(4)], InversionFit())[1], z_anon)
    with pytest.raises(ValueError, match="anonymized_code_scale"):
        PersonalDemo.from_config({**config, "anonymized_code_scale": 0}).anonymized_code(z, keys)


def test_demo_method_runs_end_to_end_and_fails_closed_never(personal_demo):
    from zoo.synthetic import synthetic_faces_uint8

    faces = list(synthetic_faces_uint8(2, seed=4))
    out = personal_demo.anonymize(faces, key="042917", aligned=True, refine_steps=2)
    assert [r.fallbacks for r in out] == [[], []]
    for face, r in zip(faces, out):
        assert np.abs(np.asarray(r).astype(int) - face).mean() > 10  # a different face, not the input
    rec = personal_demo.recover([np.asarray(r) for r in out], key="042917", aligned=True, refine_steps=2)
    assert [r.fallbacks for r in rec] == [[], []]


def test_demo_checkpoint_round_trip_and_variant_dispatch(personal_demo, tmp_path):
    from zoo.methods.personal import PersonalDemo

    personal_demo.save_pretrained(tmp_path)
    files = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert "generator/config.json" in files and "generator/model.safetensors" not in files
    from safetensors import safe_open

    with safe_open(str(tmp_path / "encoder" / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}  # shipped small
    loaded = zoo.load("personal", local_dir=str(tmp_path), device="cpu")
    assert isinstance(loaded, PersonalDemo) and loaded.weights.kind == "local"
    assert next(loaded.components["encoder"].parameters()).dtype == torch.float32
    z = torch.randn(2, 100)
    keys = loaded.face_keys(Secret("042917"), 2)
    assert torch.allclose(loaded.edit_latent(z, keys), personal_demo.edit_latent(z, keys))


# ------------------------------------------------------------------------------------------ weights resolution
def _fake_bundle(personal_demo, folder, evaluation=None):
    personal_demo.save_pretrained(folder)
    index = json.loads((folder / "method.json").read_text())
    index["weights_label"] = "demo: test label"
    if evaluation is not None:
        index["evaluation"] = evaluation
    (folder / "method.json").write_text(json.dumps(index))


def test_load_order_local_then_hub_then_bundled(personal_demo, tmp_path, monkeypatch):
    bundled = tmp_path / "weights"
    _fake_bundle(personal_demo, bundled / "personal", evaluation={"generated": {"anonymized_same_person": {"value": 0.1}}})
    monkeypatch.setattr(registry, "BUNDLED_DIR", bundled)
    # offline, nothing in the Hub cache: the bundled demo checkpoint, with its label and evaluation
    choice = registry.resolve_weights("personal")
    assert choice.kind == "bundled" and choice.label == "demo: test label" and choice.evaluation
    inf = zoo.info("personal")
    assert inf["weights_available"] and inf["weights_status"] == "demo: test label"
    assert "refine_steps" in inf["controls"] and "level" in inf["controls"]  # the demo variant's controls
    m = zoo.load("personal", device="cpu")
    assert m.weights.kind == "bundled"
    # a local folder wins over everything
    local = tmp_path / "mine"
    _fake_bundle(personal_demo, local)
    assert registry.resolve_weights("personal", local_dir=str(local)).kind == "local"
    # a checkpoint without an evaluation summary is shown with a warning, never silently
    _fake_bundle(personal_demo, bundled / "personal")
    assert "warning" in zoo.info("personal")["evaluation"]


def test_no_weights_anywhere_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "BUNDLED_DIR", tmp_path / "empty")
    with pytest.raises(zoo.hub.WeightsNotFoundError, match="hf download"):
        zoo.load("dbaf")
    assert zoo.info("dbaf")["weights_available"] is False
