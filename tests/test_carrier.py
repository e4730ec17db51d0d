"""The latent carrier (zoo.carrier) and recovery from the saved image through the photo pipeline."""

import io
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from zoo import carrier


def _block(rng, index=3, n=100):
    return carrier.CarriedLatent(
        carrier.method_tag("personal"),
        index,
        np.array([100, 90, 210, 230], np.float32),
        (rng.normal(size=(5, 2)) * 10 + 150).astype(np.float32),
        rng.normal(size=n).astype(np.float32),
    )


def test_block_round_trip_and_bounds():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)
    before = img.copy()
    c = _block(rng)
    assert carrier.embed(img, c, (155, 160))
    changed = np.argwhere((img != before).any(-1))
    # only the block's pixels change, each channel by at most 3
    assert changed[:, 0].min() >= 160 - carrier.BLOCK_ROWS // 2 - 1 and changed[:, 0].max() <= 160 + carrier.BLOCK_ROWS // 2
    assert changed[:, 1].min() >= 155 - carrier.BLOCK_WIDTH // 2 - 1 and changed[:, 1].max() <= 155 + carrier.BLOCK_WIDTH // 2
    assert np.abs(img.astype(int) - before).max() <= 3
    (found,) = carrier.extract_all(img)
    assert found.index == 3 and found.tag == c.tag
    np.testing.assert_allclose(found.latent, c.latent, atol=2e-3)  # float16
    np.testing.assert_allclose(found.landmarks, c.landmarks)
    assert carrier.extract_all(img, tag=carrier.method_tag("ifadit")) == []
    # a crop moves the block: the stored geometry follows it
    (moved,) = carrier.extract_all(img[7:, 11:].copy())
    np.testing.assert_allclose(moved.box, c.box - np.array([11, 7, 11, 7]))
    np.testing.assert_allclose(moved.landmarks, c.landmarks - np.array([11, 7]))


def test_blocks_move_inside_the_image_and_never_overlap():
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, (200, 200, 3), dtype=np.uint8)
    before = img.copy()
    c = _block(rng)
    taken = []
    assert carrier.embed(img, c, (3, 100), taken)  # at the image's edge: moved inside
    assert taken[0][0] == 0
    assert carrier.embed(img, replace(c, index=4), (6, 105), taken)  # on top of the first: moved beside it
    (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = taken
    assert ax1 <= bx0 or bx1 <= ax0 or ay1 <= by0 or by1 <= ay0
    assert sorted(f.index for f in carrier.extract_all(img)) == [3, 4]
    assert (img != before).any(-1).sum() <= 2 * carrier.BLOCK_ROWS * carrier.BLOCK_WIDTH


def test_a_code_rides_in_4_bit_steps_beside_the_head():
    rng = np.random.default_rng(3)
    code = rng.normal(0.0, 0.3, size=(20, 512)).astype(np.float32)
    c = replace(_block(rng), code=code)
    width, height = carrier.block_size(code.shape)
    assert width * height < 90 * 90
    img = rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)
    before = img.copy()
    taken = []
    assert carrier.embed(img, c, (155, 160), taken)
    ((x0, y0, x1, y1),) = taken
    assert (x1 - x0, y1 - y0) == (width, height) and abs(x0 + width / 2 - 155) <= 1 and abs(y0 + height / 2 - 160) <= 1
    assert np.abs(img.astype(int) - before).max() <= 3
    (found,) = carrier.extract_all(img)
    step = carrier.CODE_SIGMAS * code.std(1, keepdims=True) / 7
    err = np.abs(found.code - code)
    inside = np.abs(code - code.mean(1, keepdims=True)) < carrier.CODE_SIGMAS * code.std(1, keepdims=True)
    assert (err[inside] <= 0.51 * np.broadcast_to(step, code.shape)[inside] + 1e-3).all()
    np.testing.assert_allclose(found.latent, c.latent, atol=2e-3)
    assert set(found.values()) == {"latent", "code", "block_version"} and found.values()["block_version"] == carrier.VERSION
    # one changed low bit in the code: the head still reads, the code does not
    hit = img.copy()
    hit[y0 + height - 1, x0 + 2, 1] ^= 1
    (head_only,) = carrier.extract_all(hit)
    assert head_only.code is None and head_only.index == c.index and not head_only.complete
    assert found.complete and found.code_shape == (20, 512)
    # an image too small for the code: the head rides alone, and embed says the code did not
    small = rng.integers(0, 256, (60, 60, 3), dtype=np.uint8)
    assert not carrier.embed(small, c, (30, 30))
    (alone,) = carrier.extract_all(small)
    assert alone.code is None and alone.index == c.index and alone.code_shape == (20, 512) and not alone.complete


def test_a_sealed_block_opens_only_with_its_key():
    """A block written with the face's key holds its latent and code sealed: without the key they are not in the
    pixels; the right key opens them, a wrong key does not (also where its check byte happens to match)."""
    from zoo.keys import Secret

    rng = np.random.default_rng(7)
    right, wrong = Secret("seal test").derive("personal", 0), Secret("other key").derive("personal", 0)
    code = rng.normal(0.0, 0.3, size=(20, 512)).astype(np.float32)
    c = replace(_block(rng), code=code, variant=2, key_check=right.carrier_check(2), key=right)
    latent_bytes = np.asarray(c.latent, np.float16).tobytes()

    def head_bytes(block):
        img = rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)
        taken = []
        assert carrier.embed(img, block, (155, 160), taken)
        x0, y0 = taken[0][:2]
        return img, carrier._bytes((img[y0 : y0 + carrier.BLOCK_ROWS, x0 : x0 + carrier.BLOCK_WIDTH] & 3).reshape(-1))

    assert latent_bytes in head_bytes(replace(c, key=None))[1]  # unsealed, the latent is in the low bits
    img, head = head_bytes(c)
    assert latent_bytes[:8] not in head  # sealed, it is not
    (found,) = carrier.extract_all(img)  # the block is found and intact without the key
    assert found.latent is None and found.code is None and found.complete and found.variant == 2
    with pytest.raises(ValueError, match="sealed"):
        found.values()
    opened = found.opened(right)
    assert found.key_matches(right) and opened is not None
    np.testing.assert_allclose(opened.latent, c.latent, atol=2e-3)
    assert np.abs(opened.code - code).max() < 0.3 and set(opened.values()) == {"latent", "code", "block_version"}
    assert found.opened(wrong) is None and not found.key_matches(wrong)
    same_byte = replace(found, key_check=None)  # a wrong key whose check byte matched: the seal still refuses it
    assert not same_byte.key_matches(wrong) and same_byte.key_matches(right)
    other_variant = replace(found, variant=1, key_check=None)  # the variant is part of the seal's key
    assert other_variant.opened(right) is None


def test_damaged_blocks_are_ignored():
    rng = np.random.default_rng(2)
    img = rng.integers(0, 256, (120, 120, 3), dtype=np.uint8)
    assert carrier.embed(img, _block(rng), (60, 60))
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=95)
    assert carrier.extract_all(np.asarray(Image.open(buf).convert("RGB"))) == []
    flipped = img.copy()
    flipped[60, 60, 0] ^= 1  # one low bit inside the block: the checksum rejects it
    assert carrier.extract_all(flipped) == []
    assert carrier.extract_all(rng.integers(0, 256, (300, 300, 3), dtype=np.uint8)) == []


@pytest.fixture(scope="module")
def personal():
    import zoo

    return zoo.load("personal")


@pytest.mark.slow  # 16 s: a photo anonymized, saved and recovered by personal
def test_recovery_from_the_saved_png_starts_from_the_carried_code(personal):
    """Aligned crops: anonymize -> PNG bytes -> recover gives the backbone's own reconstruction (the
    carried code inverted exactly with the right key); a wrong key recovers nothing (the block's key check
    refuses it and the anonymized crop comes back as it was); a JPEG copy falls back to re-encoding and says so."""
    from zoo.synthetic import synthetic_faces_uint8

    x = synthetic_faces_uint8(3, seed=123, resolution=64)
    anon = personal.anonymize(list(x), key="042917", aligned=True, refine_steps=0)
    assert all(r.faces[0].latent_carried for r in anon)
    saved = []
    for r in anon:
        buf = io.BytesIO()
        r.image.save(buf, format="PNG")
        saved.append(buf.getvalue())
    for data in saved:  # each block is sealed with its face's key
        (block,) = carrier.extract_all(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
        assert block.sealed_latent is not None and block.latent is None
    rec = personal.recover(saved, key="042917", aligned=True, refine_steps=0)
    wrong = personal.recover(saved, key="111111", aligned=True, refine_steps=0)
    recon = personal.reconstruction(list(x), aligned=True, refine_steps=0)
    assert all(r.faces[0].latent_carried for r in rec)
    assert [w.faces[0].status for w in wrong] == ["key_mismatch"] * 3
    for w, a in zip(wrong, anon):
        assert np.array_equal(np.asarray(w), np.asarray(a))
    for r, w, c in zip(rec, wrong, recon):
        d_right = np.abs(np.asarray(r, dtype=float) - np.asarray(c, dtype=float)).mean()
        d_wrong = np.abs(np.asarray(w, dtype=float) - np.asarray(c, dtype=float)).mean()
        assert d_right < 2.0, d_right  # uint8 levels: the same face up to float16 rounding
        assert d_wrong > 10 * max(d_right, 1.0)
    buf = io.BytesIO()
    anon[0].image.save(buf, format="JPEG", quality=95)
    jpeg_rec = personal.recover([buf.getvalue()], key="042917", aligned=True, refine_steps=0)[0]
    assert jpeg_rec.faces[0].latent_carried is False and jpeg_rec.faces[0].status == "no_code"
    assert np.array_equal(np.asarray(jpeg_rec), np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")))  # nothing redrawn


def test_the_key_check_rides_and_tells_a_wrong_key():
    from zoo.keys import Secret

    right, wrong = Secret("check test").derive("personal", 0), Secret("another key").derive("personal", 0)
    assert right.carrier_check(0) != wrong.carrier_check(0) and right.carrier_check(0) != right.carrier_check(1)
    block = carrier.CarriedLatent(
        carrier.method_tag("personal"), 0, np.zeros(4, np.float32), np.zeros((5, 2), np.float32), np.zeros(100, np.float32), key_check=right.carrier_check(0)
    )
    img = np.zeros((120, 120, 3), np.uint8)
    assert carrier.embed(img, block, (60, 60))
    (found,) = carrier.extract_all(img)
    assert found.key_check == right.carrier_check(0) and found.key_matches(right) and not found.key_matches(wrong)
    unchecked = carrier.CarriedLatent(block.tag, 0, block.box, block.landmarks, block.latent)  # no check written
    img = np.zeros((120, 120, 3), np.uint8)
    assert carrier.embed(img, unchecked, (60, 60))
    (found,) = carrier.extract_all(img)
    assert found.key_check is None and found.key_matches(wrong)


@pytest.mark.slow
def test_photo_recovery_reads_every_face_and_reports_it(personal):
    from zoo.assets import example_images
    from zoo.imageio import load_image

    rgb, _ = load_image(example_images()["astronaut"])
    anon = personal.anonymize(rgb, key="042917", refine_steps=0)
    assert anon.faces and all(f.latent_carried for f in anon.faces)
    assert "latent_carried" in anon.report()["faces"][0]
    arr = np.asarray(anon)
    rec = personal.recover(arr, key="042917", refine_steps=0)
    assert [f.latent_carried for f in rec.faces] == [True] * len(anon.faces)
    assert [f.index for f in rec.faces] == [f.index for f in anon.faces]
    # pixels far from every face are untouched by anonymization and recovery alike
    ys, xs = np.mgrid[: rgb.shape[0], : rgb.shape[1]]
    far = np.ones(rgb.shape[:2], bool)
    for f in anon.faces:
        x0, y0, x1, y1 = f.box
        pad = 1.5 * max(x1 - x0, y1 - y0)
        far &= ~((xs > x0 - pad) & (xs < x1 + pad) & (ys > y0 - pad) & (ys < y1 + pad))
    assert far.any()
    assert (arr[far] == rgb[far]).all() and (np.asarray(rec)[far] == rgb[far]).all()
    wrong = personal.recover(arr, key="111111", refine_steps=0)  # the key check refuses it: every face stays as it was
    assert [f.status for f in wrong.faces] == ["key_mismatch"] * len(anon.faces)
    assert np.array_equal(np.asarray(wrong), arr)


def test_a_small_face_carries_its_block_and_a_copy_without_it_recovers_nothing(personal):
    """A face of about 30 px still gets a block (beside it if it does not fit on it), so a wrong key is refused;
    a JPEG copy has no block, and recovery leaves every face of it as it is (status no_code)."""
    from zoo.assets import example_images
    from zoo.imageio import load_image

    rgb, _ = load_image(example_images()["astronaut"])
    small = np.asarray(Image.fromarray(rgb).resize((rgb.shape[1] // 4, rgb.shape[0] // 4), Image.Resampling.BOX))
    anon = personal.anonymize(small, key="042917", refine_steps=0)
    assert anon.faces and max(f.box[2] - f.box[0] for f in anon.faces) < 40
    arr = np.asarray(anon)
    assert len(carrier.extract_all(arr, tag=carrier.method_tag("personal"))) == len(anon.faces)
    wrong = personal.recover(arr, key="111111", refine_steps=0)
    assert [f.status for f in wrong.faces] == ["key_mismatch"] * len(anon.faces) and np.array_equal(np.asarray(wrong), arr)
    buf = io.BytesIO()
    anon.image.save(buf, format="JPEG", quality=95)
    jpeg = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
    for key in ("042917", "111111"):
        rec = personal.recover(jpeg, key=key, refine_steps=0)
        assert rec.faces and {f.status for f in rec.faces} == {"no_code"} and np.array_equal(np.asarray(rec), jpeg)


def test_the_region_reach_rides_in_the_block():
    """The compositing reach the privacy guard kept rides in the block (whole percent; None = the default region),
    and beside it whether the guard blurred the face; a reach outside [0, 1] is refused before a pixel is written."""
    rng = np.random.default_rng(4)
    for reach in (None, 0.1, 0.15, 1.0):
        for blurred in (False, True):
            img = np.zeros((200, 200, 3), np.uint8)
            assert carrier.embed(img, replace(_block(rng), reach=reach, blurred=blurred), (100, 100))
            (found,) = carrier.extract_all(img)
            assert found.reach == reach and found.blurred == blurred and found.version == carrier.VERSION
    img = np.zeros((200, 200, 3), np.uint8)
    with pytest.raises(ValueError, match="reach"):
        carrier.embed(img, replace(_block(rng), reach=1.5), (100, 100))
    assert not img.any()


@pytest.mark.slow  # 13 s: anonymize and recover a photo twice
def test_recovery_composites_over_the_region_the_anonymized_face_took(personal, monkeypatch):
    """A face the guard drew over a wider region is recovered over that region too (its block names the reach, and
    the pipeline hands it to the compositing), so no band of the anonymized face stays around the recovered one; a
    face at the default region is recovered there."""
    from zoo import compositing, pipeline
    from zoo.assets import example_images
    from zoo.guard import GuardCheck
    from zoo.imageio import load_image

    rgb, _ = load_image(example_images()["astronaut"])

    def widened(self, guard, place, flat, crops, key_indices, secret, controls, outs, latents, n_variants=None):
        return outs, latents, [0] * len(outs), [GuardCheck(0.9, 0.9, reach=0.15) for _ in outs]

    monkeypatch.setattr(pipeline.DeidPipeline, "_guard_faces", widened)
    anon = personal.anonymize(rgb, key="042917", refine_steps=0)
    monkeypatch.undo()
    (block,) = carrier.extract_all(np.asarray(anon), tag=carrier.method_tag("personal"))
    assert block.reach == 0.15
    reaches = []
    real = compositing.composite_face

    def recorded(*args, reach=None, **kwargs):
        reaches.append(reach)
        return real(*args, reach=reach, **kwargs)

    monkeypatch.setattr(compositing, "composite_face", recorded)
    (back,) = personal.recover(np.asarray(anon), key="042917", refine_steps=0).faces
    assert back.status == "processed" and reaches == [0.15]
    monkeypatch.undo()
    plain = personal.anonymize(rgb, key="042917", refine_steps=0, privacy_guard=False)
    monkeypatch.setattr(compositing, "composite_face", recorded)
    (back,) = personal.recover(np.asarray(plain), key="042917", refine_steps=0).faces
    assert back.status == "processed" and reaches == [0.15, None]


@pytest.mark.slow  # 12 s: anonymize and recover a photo, the guard made to blur its face
def test_right_key_recovery_of_a_blurred_face_replaces_the_whole_blur(personal, monkeypatch):
    """A face the guard blurred still carries its code, and its block says it was blurred: the right key draws the
    recovered face over the whole blurred rectangle, sharper than the blur (not matched to it), and
    the report says so; a wrong key is refused and changes nothing."""
    from zoo import compositing, paste, pipeline
    from zoo.assets import example_images
    from zoo.detectors import DetectedFace
    from zoo.guard import GuardCheck
    from zoo.imageio import load_image

    rgb, _ = load_image(example_images()["astronaut"])

    def blurring(self, guard, place, flat, crops, key_indices, secret, controls, outs, latents, n_variants=None):
        return outs, latents, [0] * len(outs), [GuardCheck(0.5, 0.5, blurred=True, blur_reason="face") for _ in outs]

    monkeypatch.setattr(pipeline.DeidPipeline, "_guard_faces", blurring)
    anon = personal.anonymize(rgb, key="042917", refine_steps=0)
    monkeypatch.undo()
    arr = np.asarray(anon)
    assert [f.status for f in anon.faces] == ["guard_blur"]
    (block,) = carrier.extract_all(arr, tag=carrier.method_tag("personal"))
    assert block.blurred
    back = personal.recover(arr, key="042917", refine_steps=0)
    (face,) = back.faces
    assert face.status == "processed" and face.composite["mask"] == "blur box"
    x0, y0, x1, y1, _ = paste.blur_box(rgb.shape, DetectedFace(block.box, block.landmarks, 1.0))

    def sharpness(img):
        return compositing.laplacian_variance(img[y0:y1, x0:x1], np.ones((y1 - y0, x1 - x0), bool))

    restored = np.asarray(back)
    # the band between the face and the rectangle's edge, which compositing over the face region alone left
    # blurred, is drawn too (the suite's 64 px DCGAN draws softly, so sharper than the blur, not as the photo)
    band = np.zeros(rgb.shape[:2], bool)
    band[y0 + (y1 - y0) // 10 : y1 - (y1 - y0) // 10, x0 + (x1 - x0) // 10 : x1 - (x1 - x0) // 10] = True
    band[int(block.box[1]) : int(block.box[3]), int(block.box[0]) : int(block.box[2])] = False
    assert np.abs(restored[band].astype(int) - arr[band].astype(int)).mean() > 5
    assert sharpness(restored) > 3 * sharpness(arr)
    outside = np.ones(rgb.shape[:2], bool)
    outside[y0:y1, x0:x1] = False
    assert np.abs(restored[outside].astype(int) - arr[outside].astype(int)).max() <= 3  # the block's low bits only
    wrong = personal.recover(arr, key="111111", refine_steps=0)
    assert [f.status for f in wrong.faces] == ["key_mismatch"] and np.array_equal(np.asarray(wrong), arr)
