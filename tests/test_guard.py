"""The privacy guard (zoo.guard): every anonymized face is checked by SFace and FaceRes before it leaves the tool."""

import io

import numpy as np
import pytest
import torch
from PIL import Image

from zoo import carrier
from zoo.methods.base import DeidMethod


class _Unchanged(DeidMethod):
    """A 'method' that returns every face as it was: the worst case the guard exists for."""

    name = "unchanged-test"
    uses_key = False
    guard_by_default = True

    def anonymize_faces(self, x, keys, **controls):
        return x.clone()


@pytest.fixture(scope="module")
def astronaut():
    from zoo.assets import example_images
    from zoo.imageio import load_image

    return load_image(example_images()["astronaut"])[0]


def test_a_face_left_recognizable_is_blurred_and_reported(astronaut):
    from zoo.detection import detect_faces
    from zoo.guard import guard_for
    from zoo.judges import embed_at_original_places, get_judge

    m = _Unchanged()
    out = m.anonymize(astronaut)
    (face,) = out.faces
    assert face.status == "guard_blur" and face.guard["blurred"] is True
    assert face.guard["distance"] < guard_for().floor  # SFace: the unchanged face is the same person
    arr = np.asarray(out)
    assert np.abs(arr.astype(int) - astronaut).mean() > 1.0  # the face region changed
    sface = get_judge("sface")
    faces = detect_faces(astronaut)
    d = sface.distance(sface.embed_photo_faces(astronaut, faces), embed_at_original_places(sface, astronaut, arr, faces))
    assert d[0] > face.guard["distance"]  # farther from the original than before the blur
    # switched off, the same call returns the face as the method made it (resampled only) and says nothing
    off = m.anonymize(astronaut, privacy_guard=False)
    assert off.faces[0].status == "processed" and off.faces[0].guard is None
    assert np.abs(np.asarray(off).astype(int) - astronaut).mean() < 0.5 < np.abs(arr.astype(int) - astronaut).mean()
    assert out.report()["faces"][0]["guard"]["judges"] == ["sface", "faceres", "mobileface"]
    assert face.guard["faceres_distance"] < 1 - get_judge("faceres").threshold  # FaceRes: the same person too


def test_aligned_crops_are_guarded_too(astronaut):
    from zoo.alignment import align_face
    from zoo.detection import detect_faces

    (face,) = detect_faces(astronaut)
    crop = align_face(astronaut, face.landmarks, 128).crop
    out = _Unchanged().anonymize(crop, aligned=True)
    assert out.faces[0].status == "guard_blur"
    assert np.abs(np.asarray(out).astype(int) - crop).mean() > 1.0


def test_guard_option_is_validated(astronaut):
    with pytest.raises(ValueError, match="target"):
        _Unchanged().anonymize(astronaut, privacy_guard=0.1)


def test_carrier_keeps_the_variant_and_reads_version_1_blocks():
    rng = np.random.default_rng(5)
    img = rng.integers(0, 256, (120, 120, 3), dtype=np.uint8)
    c = carrier.CarriedLatent(
        carrier.method_tag("dbaf"), 2, np.zeros(4, np.float32), np.zeros((5, 2), np.float32), rng.normal(size=100).astype(np.float32), variant=3
    )
    assert carrier.embed(img, c, (60, 60))
    (found,) = carrier.extract_all(img)
    assert found.variant == 3 and found.index == 2
    # a block written by the first format (no variant byte) still reads, as variant 0
    import struct
    import zlib

    lat = np.asarray(c.latent, np.float16)
    head = carrier._HEAD.pack(carrier.MAGIC, 1, c.tag, 4, 52, 48, *([0.0] * 14), lat.size)
    body = head + lat.tobytes()
    data = body + struct.pack("<I", zlib.crc32(body))
    old = rng.integers(0, 256, (120, 120, 3), dtype=np.uint8)
    sym = carrier._symbols(data).reshape(carrier.BLOCK_ROWS, carrier.BLOCK_WIDTH, 3)
    region = old[48 : 48 + carrier.BLOCK_ROWS, 52 : 52 + carrier.BLOCK_WIDTH]
    region[...] = (region & np.uint8(0xFC)) | sym
    (v1,) = carrier.extract_all(old)
    assert v1.variant == 0 and v1.index == 4
    np.testing.assert_allclose(v1.latent, c.latent, atol=2e-3)


def test_key_variants_differ_and_recovery_follows_the_carried_variant():
    """A guard that no face can satisfy (target 1.9) makes every face try all key variants and keep the
    farthest; the carried block names the kept variant, and recovery from the saved PNG with the right
    key still returns the backbone's reconstruction (the variant is undone), a wrong key does not."""
    import zoo
    from zoo.keys import Secret
    from zoo.synthetic import synthetic_faces_uint8

    m = zoo.load("dbaf")
    k = Secret("variant test").derive("dbaf", 0)
    assert not torch.equal(k.variant(1).normal(8), k.normal(8)) and torch.equal(k.variant(0).normal(8), k.normal(8))
    x = synthetic_faces_uint8(4, seed=321, resolution=64)
    anon = m.anonymize(list(x), key="variant test", aligned=True, refine_steps=0, privacy_guard=1.9)
    variants = [r.faces[0].guard["variant"] for r in anon]
    assert all(r.faces[0].guard["tried"] == 1 + m.guard_variants for r in anon)
    assert any(v > 0 for v in variants), variants
    saved = []
    for r in anon:
        buf = io.BytesIO()
        r.image.save(buf, format="PNG")
        saved.append(buf.getvalue())
    carried = [r.faces[0].latent_carried for r in anon]
    assert all(carried)  # blurred or not, every face's code rides (the carrier's key check refuses a wrong key)
    blocks = [carrier.extract_all(np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))) for b in saved]
    assert [bl[0].variant for bl, c in zip(blocks, carried) if c] == [v for v, c in zip(variants, carried) if c]
    rec = m.recover(saved, key="variant test", aligned=True, refine_steps=0)
    wrong = m.recover(saved, key="another key", aligned=True, refine_steps=0)
    recon = m.reconstruction(list(x), aligned=True, refine_steps=0)
    for r, w, c, a in zip(rec, wrong, recon, anon):
        if a.faces[0].status == "guard_blur":
            continue
        d_right = np.abs(np.asarray(r, dtype=float) - np.asarray(c, dtype=float)).mean()
        d_wrong = np.abs(np.asarray(w, dtype=float) - np.asarray(c, dtype=float)).mean()
        assert d_right < 2.0, d_right
        assert d_wrong > 10 * max(d_right, 1.0)


class _LeakyRecovery(DeidMethod):
    """A reversible keyed 'method' whose recovery ignores the key: any wrong key gives the face back."""

    name = "leaky-recovery-test"
    uses_key = True
    reversible = True
    guard_by_default = True
    guard_variants = 2
    guard_wrong_key_check = True

    def anonymize_faces(self, x, keys, **controls):
        return -x.flip(-1)

    def recover_faces(self, y, keys, **controls):
        return -y.flip(-1)


def test_guard_ranks_variants_by_the_nearer_of_face_and_wrong_key_recovery():
    from zoo.guard import GuardCheck, guard_for

    g = guard_for()
    far_face_leaky_key = GuardCheck(0.95, wrong_key_distance=0.30)
    both_far = GuardCheck(0.88, wrong_key_distance=0.90)
    assert far_face_leaky_key.score == 0.30 and not far_face_leaky_key.passes(g) and both_far.passes(g)
    assert both_far.rank(g) > far_face_leaky_key.rank(g)
    # a variant whose anonymized face would be blurred never wins over one that is not
    blurred_face = GuardCheck(g.floor - 0.01, wrong_key_distance=1.5)
    assert far_face_leaky_key.rank(g) > blurred_face.rank(g)
    assert GuardCheck(0.9).score == 0.9 and "wrong_key_distance" not in GuardCheck(0.9).as_dict()


def test_guard_needs_every_recognizer_far():
    from zoo.guard import GuardCheck, guard_for

    g = guard_for()
    far = GuardCheck(0.95, faceres_distance=0.6, mobileface_distance=g.mobileface_target + 0.05)
    faceres_knows_it = GuardCheck(0.95, faceres_distance=g.faceres_floor - 0.01)
    mobileface_knows_it = GuardCheck(0.95, faceres_distance=0.6, mobileface_distance=g.mobileface_floor - 0.01)
    faceres_leaky_key = GuardCheck(0.95, faceres_distance=0.6, wrong_key_distance=0.95, wrong_key_faceres_distance=g.faceres_floor - 0.01)
    mobileface_leaky_key = GuardCheck(
        0.95, 0.6, 1.0, wrong_key_distance=0.95, wrong_key_faceres_distance=0.6, wrong_key_mobileface_distance=g.mobileface_floor - 0.01
    )
    assert far.passes(g) and not far.recognized(g)
    assert not faceres_knows_it.passes(g) and faceres_knows_it.recognized(g)  # SFace fooled, FaceRes not: blurred
    assert not mobileface_knows_it.passes(g) and mobileface_knows_it.recognized(g)  # SFace and FaceRes fooled
    # the face is far, but a wrong key gives the person back to FaceRes or MobileFace: blurred
    assert not faceres_leaky_key.passes(g) and faceres_leaky_key.recognized(g)
    assert not mobileface_leaky_key.passes(g) and mobileface_leaky_key.wrong_key_recognized(g) and not mobileface_leaky_key.face_recognized(g)
    assert far.rank(g) > faceres_leaky_key.rank(g) > faceres_knows_it.rank(g)
    assert far.rank(g) > mobileface_leaky_key.rank(g) > mobileface_knows_it.rank(g)
    assert mobileface_leaky_key.as_dict()["wrong_key_mobileface_distance"] == round(g.mobileface_floor - 0.01, 4)


def test_guard_floors_follow_the_faceres_calibration():
    """Blur at the FaceRes cosine 5% of different-person pairs reach (stricter than the judge's 1% threshold);
    re-key toward the 20% point; a face between the two is re-keyed but kept."""
    from zoo.guard import FACERES_FLOOR, FACERES_TARGET, GuardCheck, guard_for
    from zoo.judges import FACERES_THRESHOLD

    g = guard_for()
    assert FACERES_TARGET < FACERES_FLOOR < FACERES_THRESHOLD
    assert abs(g.faceres_floor - (1 - FACERES_FLOOR)) < 1e-9 and abs(g.faceres_target - (1 - FACERES_TARGET)) < 1e-9
    between = GuardCheck(0.95, faceres_distance=1 - (FACERES_TARGET + FACERES_FLOOR) / 2)
    assert not between.passes(g) and not between.recognized(g)
    above_floor = GuardCheck(0.95, faceres_distance=1 - (FACERES_FLOOR + FACERES_THRESHOLD) / 2)
    assert above_floor.recognized(g)  # the judge would not call it the same person; the guard blurs it anyway


def test_guard_floors_follow_the_mobileface_calibration():
    """MobileFace's lines come from its own calibration the same way: blur at 5%, re-key toward 20%."""
    from zoo.guard import MOBILEFACE_FLOOR, MOBILEFACE_TARGET, GuardCheck, guard_for
    from zoo.judges import MOBILEFACE_THRESHOLD

    g = guard_for()
    assert 0 < MOBILEFACE_TARGET < MOBILEFACE_FLOOR < MOBILEFACE_THRESHOLD < 1
    assert abs(g.mobileface_floor - (1 - MOBILEFACE_FLOOR)) < 1e-9 and abs(g.mobileface_target - (1 - MOBILEFACE_TARGET)) < 1e-9
    between = GuardCheck(0.95, 1.0, 1 - (MOBILEFACE_TARGET + MOBILEFACE_FLOOR) / 2)
    assert not between.passes(g) and not between.recognized(g)
    assert GuardCheck(0.95, 1.0, 1 - (MOBILEFACE_FLOOR + MOBILEFACE_THRESHOLD) / 2).recognized(g)


class _Fooled:
    """A recognizer stand-in that every output fools (each face gets a fresh random embedding)."""

    def __init__(self, real):
        self.real, self.rng = real, np.random.default_rng(0)
        self.dim, self.distance = real.dim, real.distance

    def embed_photo_faces(self, rgb, faces):
        return self.rng.standard_normal((len(faces), self.dim))

    def embed_aligned(self, crops):
        return self.rng.standard_normal((len(crops), self.dim))


def test_a_face_only_the_second_recognizer_knows_is_blurred(astronaut, monkeypatch):
    """Identical face, SFace fooled: FaceRes alone still rejects it, and the face is blurred."""
    from zoo.guard import guard_for

    g = guard_for()
    monkeypatch.setattr(g, "judge", _Fooled(g.judge))
    (face,) = _Unchanged().anonymize(astronaut).faces
    assert face.guard["faceres_distance"] < g.faceres_floor
    assert face.status == "guard_blur" and face.guard["blurred"] is True


def test_a_face_only_the_third_recognizer_knows_is_blurred(astronaut, monkeypatch):
    """Identical face, SFace and FaceRes fooled: MobileFace alone still rejects it, and the face is blurred."""
    from zoo.guard import guard_for

    g = guard_for()
    monkeypatch.setattr(g, "judge", _Fooled(g.judge))
    monkeypatch.setattr(g, "second", _Fooled(g.second))
    (face,) = _Unchanged().anonymize(astronaut).faces
    assert face.guard["distance"] >= g.floor and face.guard["faceres_distance"] >= g.faceres_floor
    assert face.guard["mobileface_distance"] < g.mobileface_floor
    assert face.status == "guard_blur" and face.guard["blurred"] is True and face.guard["blur_reason"] == "face"


class _OtherPerson(DeidMethod):
    """Replaces every face with the same unrelated generated face (FFHQ-aligned)."""

    name = "other-person-test"
    uses_key = False
    guard_by_default = True

    def anonymize_faces(self, x, keys, **controls):
        from zoo.nn.mobilestylegan import load_mobilestylegan

        g = load_mobilestylegan()
        with torch.no_grad():
            z = torch.from_numpy(np.random.default_rng(3).standard_normal((1, 512)).astype(np.float32))
            face = g.synthesis(g.truncate(g.mapping(z), 0.7), size=256).clamp(-1, 1)
        return torch.nn.functional.interpolate(face, size=x.shape[-2:], mode="area" if x.shape[-1] < 256 else "bilinear").expand(len(x), -1, -1, -1).to(x)


def test_an_unrelated_face_is_accepted(astronaut):
    """A face every recognizer puts past its blur line is kept as drawn. (Not every unrelated face is: at the
    astronaut's place, with her outline around it, 5 of 12 generated faces are nearer than a blur line, FaceRes's
    for 3 and MobileFace's for 2; a generative method then tries key variants and wider regions.)"""
    from zoo.guard import guard_for

    g = guard_for()
    (face,) = _OtherPerson().anonymize(astronaut).faces
    assert face.status == "processed" and face.guard["blurred"] is False
    assert face.guard["distance"] >= g.floor and face.guard["faceres_distance"] >= g.faceres_floor
    assert face.guard["mobileface_distance"] >= g.mobileface_floor


def test_a_face_too_small_to_verify_is_blurred_even_when_unrelated(astronaut):
    """The unrelated face the guard accepts at full size is blurred once the photo is shrunk so that the face is
    narrower than MIN_VERIFIED_FACE_PX (reason "small_face"); at the line's width it is accepted again."""
    import cv2

    from zoo.detection import detect_faces
    from zoo.guard import MIN_VERIFIED_FACE_PX

    (full,) = detect_faces(astronaut)
    for width, blurred in ((MIN_VERIFIED_FACE_PX - 4, True), (MIN_VERIFIED_FACE_PX + 6, False)):
        scale = width / full.width
        small = cv2.resize(astronaut, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        (found,) = detect_faces(small)
        assert (found.width < MIN_VERIFIED_FACE_PX) == blurred, found.width
        (face,) = _OtherPerson().anonymize(small).faces
        assert face.guard["blurred"] is blurred and (face.status == "guard_blur") == blurred
        assert face.guard.get("blur_reason") == ("small_face" if blurred else None)


def test_protect_blurs_narrow_faces_without_trying_variants():
    """Faces narrower than the line are measured once and blurred; the wider face beside them is checked as usual."""
    from zoo.guard import MIN_VERIFIED_FACE_PX, guard_for, protect

    g = guard_for()
    far = (g.floor + 0.3, g.faceres_floor + 0.3, g.mobileface_floor + 0.3)
    calls = []

    def distances(candidate, which, reach=None):
        calls.append(list(which))
        return {i: far for i in which}

    crops = np.zeros((2, 8, 8, 3), np.uint8)
    widths = [MIN_VERIFIED_FACE_PX - 0.5, MIN_VERIFIED_FACE_PX]
    _, _, _, checks = protect(_FakePipeline(), g, crops, [0, 1], None, {}, [crops[0], crops[1]], [None] * 2, distances, 0, (0.1,), widths)
    assert checks[0].blurred and checks[0].blur_reason == "small_face" and checks[0].as_dict()["blur_reason"] == "small_face"
    assert not checks[1].blurred and checks[1].blur_reason is None
    assert calls == [[0, 1]]


def test_guard_catches_a_wrong_key_that_gives_the_face_back(astronaut):
    from zoo.guard import guard_for

    m = _LeakyRecovery()
    out = m.anonymize(astronaut, key="leak test")
    (face,) = out.faces
    assert face.guard["wrong_key_distance"] < guard_for().floor  # the stand-in wrong key recovered the person
    assert face.guard["tried"] == 1 + m.guard_variants  # so every variant was tried
    assert m.anonymize(astronaut, key="leak test", privacy_guard=False).faces[0].guard is None


def test_wrong_key_distance_is_the_nearest_recovery_with_the_stand_in_keys(monkeypatch):
    """The reported wrong-key distance is SFace's distance between the input and the kept variant's code
    recovered with KeyMaterial.wrong_key(0..guard_wrong_keys-1) (and that variant), the nearest of them, recomputed
    here outside the guard."""
    import zoo
    from zoo.imageio import from_tensor, to_tensor
    from zoo.judges import get_judge
    from zoo.synthetic import synthetic_faces_uint8

    m = zoo.load("personal")
    monkeypatch.setattr(type(m), "guard_wrong_keys", 3)
    x = synthetic_faces_uint8(3, seed=322, resolution=64)
    anon = m.anonymize(list(x), key="probe test", aligned=True, refine_steps=0, identity_refine=0.0)
    keys = m.face_keys(m.run_secret("probe test"), 3)
    sface = get_judge("sface")
    controls = m.validate_controls({"refine_steps": 0, "identity_refine": 0.0})
    for i, r in enumerate(anon):
        g = r.faces[0].guard
        (block,) = carrier.extract_all(np.asarray(r.image.convert("RGB")))
        assert block.variant == g["variant"] and g["wrong_keys_probed"] == 3
        d = []
        for number in range(3):
            wrong = [keys[i].wrong_key(number)]
            k, ctl = (wrong, controls) if g["variant"] == 0 else m.guard_variant(wrong, controls, g["variant"])
            with torch.inference_mode():
                y = m.recover_faces(to_tensor(x[i : i + 1], 64), k, carried=[block.opened(keys[i]).latent], **ctl)
            d.append(float(sface.distance(sface.embed_aligned(x[i : i + 1]), sface.embed_aligned(from_tensor(y)))[0]))
        assert len({round(v, 3) for v in d}) == 3, d  # three different keys, three different recoveries
        assert abs(min(d) - g["wrong_key_distance"]) < 0.02, (d, g)


@pytest.mark.slow  # 9 s: the CLI end to end, guard on and off
def test_cli_guard_option(tmp_path):
    import json

    from zoo.cli import main

    assert main(["anonymize", "example:astronaut", "-m", "personal", "--key", "042917", "--out", str(tmp_path / "on"), "-q", "-c", "refine_steps=0"]) == 0
    assert (
        main(
            [
                "anonymize",
                "example:astronaut",
                "-m",
                "personal",
                "--key",
                "042917",
                "--out",
                str(tmp_path / "off"),
                "-q",
                "-c",
                "refine_steps=0",
                "--privacy-guard",
                "off",
            ]
        )
        == 0
    )
    (on,) = (tmp_path / "on").glob("*.json")
    (off,) = (tmp_path / "off").glob("*.json")
    assert json.loads(on.read_text())["faces"][0]["guard"]["judges"] == ["sface", "faceres", "mobileface"]
    assert json.loads(off.read_text())["faces"][0]["guard"] is None
    assert main(["anonymize", "example:astronaut", "-m", "personal", "--out", str(tmp_path / "bad"), "-q", "--privacy-guard", "maybe"]) == 2


def test_keyless_methods_report_no_key_fingerprint(astronaut):
    import zoo

    out = zoo.load("blur").anonymize(astronaut, key="some key")
    assert out.key_fingerprint is None and out.report()["key_fingerprint"] is None
    assert all(f.key_fingerprint is None for f in out.faces)


def test_no_face_code_outlives_the_call():
    """The guard's inversion cache lives for one call: no code of an input face stays in the method."""
    import zoo
    from zoo.synthetic import synthetic_faces_uint8

    m = zoo.load("hford")
    m.anonymize(list(synthetic_faces_uint8(2, seed=9, resolution=64)), key="k", aligned=True, refine_steps=0, privacy_guard=1.9)
    assert "_code_cache" not in m.__dict__ and m.__dict__.get("_scope_depth", 0) == 0


def test_an_outer_scope_shares_the_inversion_across_keys_and_drops_it_after():
    """The app's diversity tab runs N keys on one photo inside one run_scope: each face is inverted once,
    and no code is left in the method when the scope ends."""
    import zoo
    from zoo.synthetic import synthetic_faces_uint8

    m = zoo.load("hford")
    x = list(synthetic_faces_uint8(2, seed=10, resolution=64))
    calls = []
    encode = m.encode
    m.encode = lambda faces, *a, **k: calls.append(faces.shape[0]) or encode(faces, *a, **k)
    try:
        with m.run_scope():
            a = m.anonymize(x, key="key one", aligned=True, refine_steps=0, privacy_guard=False)
            b = m.anonymize(x, key="key two", aligned=True, refine_steps=0, privacy_guard=False)
            assert "_code_cache" in m.__dict__
        assert calls == [2]  # the second key reused both faces' codes
        assert not np.array_equal(np.asarray(a[0].image), np.asarray(b[0].image))
        assert "_code_cache" not in m.__dict__ and m.__dict__.get("_scope_depth", 0) == 0
        m.anonymize(x, key="key one", aligned=True, refine_steps=0, privacy_guard=False)
        assert calls == [2, 2]  # a later call inverts again
    finally:
        del m.encode


def test_aligned_guard_embeds_each_input_crop_once(monkeypatch):
    """On aligned crops the wrong-key probe reuses the guard's SFace embeddings of the inputs (no second pass)."""
    import zoo
    from zoo.guard import PrivacyGuard
    from zoo.synthetic import synthetic_faces_uint8

    seen: list[np.ndarray] = []
    embed = PrivacyGuard.crop_embeddings

    def recording(self, crops):
        seen.extend(np.asarray(c).copy() for c in crops)
        return embed(self, crops)

    monkeypatch.setattr(PrivacyGuard, "crop_embeddings", recording)
    m = zoo.load("personal")
    x = synthetic_faces_uint8(2, seed=323, resolution=64)
    out = m.anonymize(list(x), key="embed once", aligned=True, refine_steps=0, identity_refine=0.0)
    assert all(r.faces[0].guard["wrong_key_distance"] is not None for r in out)  # the probe ran
    for face in x:
        assert sum(c.shape == face.shape and np.array_equal(c, face) for c in seen) == 1


@pytest.mark.slow
def test_sface_judge_without_opencvs_dnn_gives_opencvs_embeddings(astronaut, t1_rgb, monkeypatch):
    """Where OpenCV cannot run SFace's ONNX (OpenCV 5), the judge falls back to the zoo's torch port of the same
    file: the guard's distances must not change."""
    import zoo.judges as judges
    from zoo.detection import detect_faces

    cv2_judge = judges.SFaceJudge()
    assert cv2_judge._torch_net is None  # the pinned OpenCV runs it
    monkeypatch.setattr(judges, "_cv2_runs_sface", lambda net: False)
    torch_judge = judges.SFaceJudge()
    assert torch_judge._torch_net is not None
    for rgb in (astronaut, t1_rgb):
        faces = detect_faces(rgb)
        a, b = cv2_judge.embed_photo_faces(rgb, faces), torch_judge.embed_photo_faces(rgb, faces)
        assert len(faces) >= 1 and a.shape == b.shape
        assert (cv2_judge.score(a, b) > 0.9999).all()


class _FakePipeline:
    """What :func:`zoo.guard.protect` needs of a pipeline, for a keyless method without key variants."""

    class method:
        guard_variants = 0
        guard_wrong_keys = 1
        guard_wrong_key_check = False
        reversible = False
        uses_key = False


def _protect_three_faces(g, close, far, reaches):
    """:func:`zoo.guard.protect` on three faces of a keyless method, measured at (SFace, FaceRes, MobileFace) distances: face 0 at
    ``close`` until the second of ``STRONGER_REACHES``, face 1 at ``close`` at every reach, face 2 at ``far`` at once.
    Returns (outs, checks, the reaches each ``distances`` call was asked for)."""
    from zoo.guard import STRONGER_REACHES, protect

    calls = []

    def distances(candidate, which, reach=None):
        calls.append(dict(reach or {}))
        r = reach or {}
        return {i: (far if i == 2 or (i == 0 and r.get(i, 0) >= STRONGER_REACHES[1]) else close) for i in which}

    crops = np.zeros((3, 8, 8, 3), np.uint8)
    outs, _, _, checks = protect(_FakePipeline(), g, crops, [0, 1, 2], None, {}, [crops[i] for i in range(3)], [None] * 3, distances, 0, reaches)
    return outs, checks, calls


def test_guard_strengthens_the_compositing_before_it_blurs():
    """A face still recognized at the default compositing is measured again at each wider reach; the first reach
    at which no recognizer matches it is kept (not blurred); a face recognized at every reach is blurred."""
    from zoo.guard import STRONGER_REACHES, guard_for

    g = guard_for()
    near, far = (g.floor - 0.1, g.faceres_floor - 0.1, g.mobileface_floor - 0.1), (g.target + 0.05, g.faceres_target + 0.05, g.mobileface_target + 0.05)
    outs, checks, calls = _protect_three_faces(g, near, far, STRONGER_REACHES)
    assert len(outs) == 3
    assert checks[0].reach == STRONGER_REACHES[1] and not checks[0].blurred and checks[0].as_dict()["reach"] == STRONGER_REACHES[1]
    assert checks[1].reach is None and checks[1].blurred and checks[1].blur_reason == "face" and "reach" not in checks[1].as_dict()
    assert checks[2].reach is None and not checks[2].blurred
    assert calls[0] == {} and calls[1] == {0: STRONGER_REACHES[0], 1: STRONGER_REACHES[0]} and calls[2] == {0: STRONGER_REACHES[1], 1: STRONGER_REACHES[1]}
    # without reaches (aligned crops: nothing around the face) the guard blurs as before
    _, plain, _ = _protect_three_faces(g, near, far, ())
    assert plain[0].blurred and plain[1].blurred and not plain[2].blurred


@pytest.mark.parametrize("short", ["sface", "faceres", "mobileface"])
def test_guard_draws_a_face_still_short_of_a_target_over_a_wider_region(short):
    """A face past every blur line but nearer to the original by one recognizer (SFace included) than its target is
    measured again at the wider reaches and keeps the first reach at which it is past the target; one that never gets
    there keeps the default region and is not blurred; a face past the targets is never redrawn wider."""
    from zoo.guard import STRONGER_REACHES, guard_for

    g = guard_for()
    far = (g.target + 0.05, g.faceres_target + 0.05, g.mobileface_target + 0.05)
    k = ("sface", "faceres", "mobileface").index(short)
    gap = list(far)
    gap[k] = (g.floors[k] + g.targets[k]) / 2  # past every floor, short of this recognizer's target
    _, checks, calls = _protect_three_faces(g, tuple(gap), far, STRONGER_REACHES)
    assert checks[0].reach == STRONGER_REACHES[1] and not checks[0].blurred and checks[0].passes(g)
    assert checks[1].reach is None and not checks[1].blurred and not checks[1].passes(g)
    assert checks[2].reach is None and not checks[2].blurred
    assert calls[1] == {0: STRONGER_REACHES[0], 1: STRONGER_REACHES[0]} and calls[2] == {0: STRONGER_REACHES[1], 1: STRONGER_REACHES[1]}
    assert len(calls) == 3


def test_a_wider_region_short_of_a_target_is_kept_where_its_margin_is_largest():
    """A face short of a target at every reach keeps the reach at which it is past its targets by the largest
    margin (GuardCheck.rank, as between key variants), and is not blurred: it is not recognized anywhere."""
    from zoo.guard import STRONGER_REACHES, guard_for, protect

    g = guard_for()
    span = g.target - g.floor
    sface = {None: g.target - 0.5 * span, STRONGER_REACHES[0]: g.target - 0.2 * span, STRONGER_REACHES[1]: g.target - 0.3 * span}

    def distances(candidate, which, reach=None):
        r = (reach or {}).get(0)
        return {i: (sface[r], g.faceres_target + 0.1, g.mobileface_target + 0.1) for i in which}

    crops = np.zeros((1, 8, 8, 3), np.uint8)
    _, _, _, checks = protect(_FakePipeline(), g, crops, [0], None, {}, [crops[0]], [None], distances, 0, STRONGER_REACHES)
    assert checks[0].reach == STRONGER_REACHES[0] and abs(checks[0].distance - sface[STRONGER_REACHES[0]]) < 1e-9
    assert not checks[0].passes(g) and not checks[0].blurred


class _FakeVariantPipeline(_FakePipeline):
    """As :class:`_FakePipeline`, with one key variant whose output is filled with 1 (the plain key's with 0)."""

    class method(_FakePipeline.method):
        guard_variants = 1

        @staticmethod
        def guard_variant(keys, controls, number):
            return keys, controls

    def keys_for(self, operation, secret, indices):
        return [None] * len(indices)

    def process_isolated(self, operation, crops, keys, controls):
        return [np.ones_like(c) for c in crops], [None] * len(crops), [None] * len(crops)


def test_guard_strengthens_every_variant_it_drew():
    """At a wider reach the guard also tries the key variants it drew but did not keep: a variant recognized at the
    default region but not at the first wider reach is kept there, with its own output."""
    from zoo.guard import STRONGER_REACHES, guard_for, protect

    g = guard_for()
    near, far = (g.floor - 0.1, g.faceres_floor - 0.1, g.mobileface_floor - 0.1), (g.floor + 0.1, g.faceres_floor + 0.1, g.mobileface_floor + 0.1)

    def distances(candidate, which, reach=None):
        # the plain key's face (0s) is recognized everywhere; variant 1's (1s) is nearer at the default region (so
        # the variant loop keeps the plain key) and far once the region is wider
        return {i: (far if reach and candidate[i].max() == 1 else tuple(v - 0.05 for v in near) if candidate[i].max() == 1 else near) for i in which}

    crops = np.zeros((2, 8, 8, 3), np.uint8)
    _, _, kept, _ = protect(_FakeVariantPipeline(), g, crops, [0, 1], None, {}, list(crops), [None] * 2, distances, None)
    assert kept == [0, 0]  # without reaches: the plain key is the better of the two (both blurred)
    outs, _, variants, checks = protect(_FakeVariantPipeline(), g, crops, [0, 1], None, {}, list(crops), [None] * 2, distances, None, STRONGER_REACHES)
    assert variants == [1, 1] and all(c.reach == STRONGER_REACHES[0] and not c.blurred and c.tried == 2 for c in checks)
    assert all(o.max() == 1 for o in outs)


def test_the_photo_is_composited_with_the_reach_the_guard_chose(astronaut, monkeypatch):
    """The face record's compositing reach is the one the guard kept (zoo.pipeline passes it to the compositing)."""
    from zoo import pipeline
    from zoo.guard import GuardCheck

    def kept_at(reach):
        def guard_faces(self, guard, place, flat, crops, key_indices, secret, controls, outs, latents, n_variants=None):
            return outs, latents, [0] * len(outs), [GuardCheck(0.9, 0.9, reach=reach) for _ in outs]

        return guard_faces

    class Drawn(_OtherPerson):
        draws_new_face = True  # composited like the generative methods

    monkeypatch.setattr(pipeline.DeidPipeline, "_guard_faces", kept_at(0.15))
    (face,) = Drawn().anonymize(astronaut).faces
    assert face.status == "processed" and face.guard["reach"] == 0.15 and face.composite["reach"] == 0.15
    monkeypatch.setattr(pipeline.DeidPipeline, "_guard_faces", kept_at(None))
    (face,) = Drawn().anonymize(astronaut).faces
    assert face.composite["reach"] == 0.02 and "reach" not in face.guard


def test_the_fail_closed_blur_leaves_no_face_the_guard_recognizes(t1_rgb, t1_faces):
    """Each t1 face hard-blurred alone is past every guard recognizer's blur line, and the default strength
    (:data:`zoo.paste.BLUR_CELLS`) keeps less of the face than a milder one (6 cells) does."""
    from zoo.guard import guard_for
    from zoo.paste import blur_face

    g = guard_for()
    faces = list(t1_faces)
    ref = g.photo_embeddings(t1_rgb, faces)
    default = np.concatenate([g.photo_embeddings(blur_face(t1_rgb, f), [f]) for f in faces])
    mild = np.concatenate([g.photo_embeddings(blur_face(t1_rgb, f, cells=6), [f]) for f in faces])
    d_default, d_mild = g.distances(ref, default), g.distances(ref, mild)
    assert len(faces) >= 5
    assert (d_default > np.asarray(g.floors)[None] + 0.05).all(), d_default
    assert np.median(d_default, axis=0).min() > np.median(d_mild, axis=0).min() + 0.01


class _VariantPipeline:
    """What :func:`zoo.guard.protect` needs of a pipeline, for a keyless method whose key variant ``n`` draws
    ``drawn[n]`` (one face)."""

    def __init__(self, drawn):
        self.drawn = drawn

        class method:
            guard_variants = len(drawn) - 1
            guard_wrong_keys = 1
            guard_wrong_key_check = False
            reversible = False
            uses_key = False

            @staticmethod
            def guard_variant(keys, controls, number):
                return keys, {"variant": number}

        self.method = method

    def keys_for(self, operation, secret, indices):
        return list(indices)

    def process_isolated(self, operation, crops, keys, controls, latents=None):
        return [self.drawn[controls["variant"]] for _ in crops], None, [None for _ in crops]


def _protect_variants(drawn, distances_of):
    """:func:`zoo.guard.protect` on one bare-forehead face whose variant ``n`` draws ``drawn[n]`` at distances
    ``distances_of[n]``; returns (kept variant, its check, variants tried)."""
    from zoo.guard import guard_for, protect

    g = guard_for()
    crop = np.full((64, 64, 3), (205, 160, 135), np.uint8)
    by_face = {id(d): n for n, d in enumerate(drawn)}

    def distances(candidate, which, reach=None):
        return {i: distances_of[by_face[id(candidate[i])]] for i in which}

    _, _, variants, checks = protect(_VariantPipeline(drawn), g, crop[None], [0], None, {}, [drawn[0]], [None], distances)
    return variants[0], checks[0], checks[0].tried


def _bare_and_fringed():
    bare = np.full((64, 64, 3), (200, 158, 130), np.uint8)
    fringed = bare.copy()
    fringed[:24] = (40, 30, 25)  # hair down to the brows
    return bare, fringed


def test_guard_draws_a_fringed_face_again_and_keeps_one_without():
    """A face that passes every recognizer but lays a fringe across the bare forehead is drawn again with the next
    key variant; the variant without the fringe is kept and the report carries the measure."""
    from zoo.compositing import FOREHEAD_HAIR_LIMIT
    from zoo.guard import guard_for

    g = guard_for()
    far = (g.target + 0.1, g.faceres_target + 0.1, g.mobileface_target + 0.1)
    bare, fringed = _bare_and_fringed()
    variant, check, tried = _protect_variants([fringed, bare, bare], [far, far, far])
    assert variant == 1 and tried == 2 and check.looks_right() and not check.blurred
    assert check.as_dict()["forehead_hair"] <= FOREHEAD_HAIR_LIMIT
    # without a fringe nothing more is drawn
    variant, check, tried = _protect_variants([bare, fringed], [far, far])
    assert variant == 0 and tried == 1


def test_looks_never_outrank_privacy():
    """Between a fringed face past every target and a bare one short of a target, the guard keeps the fringed one."""
    from zoo.guard import guard_for

    g = guard_for()
    far = (g.target + 0.1, g.faceres_target + 0.1, g.mobileface_target + 0.1)
    short = (g.floor + 0.01, g.faceres_target + 0.1, g.mobileface_target + 0.1)  # not recognized, but short of SFace's target
    bare, fringed = _bare_and_fringed()
    variant, check, tried = _protect_variants([fringed, bare], [far, short])
    assert variant == 0 and tried == 2 and check.passes(g) and not check.looks_right()
    # between two faces short of a target, the larger margin is kept whatever they look like
    shorter = (g.floor + 0.005, g.faceres_target + 0.1, g.mobileface_target + 0.1)
    variant, check, tried = _protect_variants([fringed, bare], [short, shorter])
    assert variant == 0 and tried == 2 and not check.passes(g) and not check.looks_right()


def test_a_wider_region_keeps_the_variant_without_a_fringe_but_looks_never_widen_it():
    """Drawn wider, two key variants both past every target at the same reach: the one without a fringe is kept,
    whichever came first. When only the fringed one is past them at the first wider reach, it is kept there: the
    region is not widened further for looks."""
    from zoo.guard import STRONGER_REACHES, guard_for, protect

    g = guard_for()
    far = (g.target + 0.1, g.faceres_target + 0.1, g.mobileface_target + 0.1)
    short = (g.floor + 0.01, g.faceres_target - 0.05, g.mobileface_target + 0.1)  # short of FaceRes's target
    bare, fringed = _bare_and_fringed()
    drawn = [fringed, bare]
    crop = np.full((64, 64, 3), (205, 160, 135), np.uint8)

    def run(strong_from: dict[int, float]):
        """Variant n is past every target from reach ``strong_from[n]`` on, short of FaceRes's target before."""

        def distances(candidate, which, reach=None):
            n = 0 if candidate[0] is fringed else 1
            r = (reach or {}).get(0, 0.0)
            return {i: far if r >= strong_from[n] else short for i in which}

        _, _, variants, checks = protect(_VariantPipeline(drawn), g, crop[None], [0], None, {}, [drawn[0]], [None], distances, None, STRONGER_REACHES)
        return variants[0], checks[0]

    variant, check = run({0: STRONGER_REACHES[0], 1: STRONGER_REACHES[0]})
    assert variant == 1 and check.reach == STRONGER_REACHES[0] and check.looks_right() and check.passes(g)
    variant, check = run({0: STRONGER_REACHES[0], 1: STRONGER_REACHES[1]})
    assert variant == 0 and check.reach == STRONGER_REACHES[0] and not check.looks_right() and check.passes(g)


def test_the_fringe_is_measured_once_per_drawn_face_not_at_every_reach(monkeypatch):
    """The drawn crop does not change with the compositing reach: ``forehead_hair`` runs once per (face, variant),
    however many wider reaches the guard tries; every check still carries it."""
    from zoo import compositing
    from zoo.guard import STRONGER_REACHES, guard_for, protect

    g = guard_for()
    short = (g.floor + 0.01, g.faceres_target - 0.05, g.mobileface_target + 0.1)  # short of FaceRes's target everywhere
    calls = []
    real = compositing.forehead_hair
    monkeypatch.setattr(compositing, "forehead_hair", lambda a, b: calls.append(1) or real(a, b))
    bare, fringed = _bare_and_fringed()
    drawn = [fringed, bare]
    crop = np.full((64, 64, 3), (205, 160, 135), np.uint8)
    seen = []

    def distances(candidate, which, reach=None):
        seen.append(reach)
        return {i: short for i in which}

    _, _, _, checks = protect(_VariantPipeline(drawn), g, crop[None], [0], None, {}, [drawn[0]], [None], distances, None, STRONGER_REACHES)
    assert sum(r is not None for r in seen) == len(STRONGER_REACHES) * len(drawn)  # every variant measured at every reach
    assert len(calls) == len(drawn)
    # equal margins, none passing: the first drawn (fringed) face stays, and its check carries the measure
    assert checks[0].forehead_hair > compositing.FOREHEAD_HAIR_LIMIT
