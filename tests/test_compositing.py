"""zoo.compositing: each step on its own (mask, colour, grain, blend), the stage on a real photo, and the report."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from zoo import compositing, face_mesh
from zoo.alignment import align_face, alignment_matrix
from zoo.detection import detect_faces
from zoo.paste import paste_back


@pytest.fixture(scope="module")
def astronaut():
    from skimage import data

    rgb = data.astronaut()
    [face] = detect_faces(rgb)
    return rgb, face


def _patch(mean_rgb, spread, size=64, seed=0):
    rng = np.random.default_rng(seed)
    return np.clip(np.asarray(mean_rgb, np.float32) + rng.normal(0, spread, (size, size, 3)), 0, 255).astype(np.uint8)


def test_mesh_is_installed_and_finds_the_face(astronaut):
    rgb, face = astronaut
    assert face_mesh.mesh_available()
    pts = face_mesh.face_mesh(rgb, face.landmarks)
    assert pts.shape == (468, 2)
    x0, y0, x1, y1 = face.box
    pad = 0.25 * (x1 - x0)
    inside = (pts[:, 0] > x0 - pad) & (pts[:, 0] < x1 + pad) & (pts[:, 1] > y0 - pad) & (pts[:, 1] < y1 + pad)
    assert inside.mean() > 0.95
    # the mesh's eye corners (33, 263) lie near the detector's eye landmarks (within a fifth of the eye distance)
    eye_dist = np.hypot(*(face.landmarks[1] - face.landmarks[0]))
    mesh_eyes = [(pts[33] + pts[133]) / 2, (pts[263] + pts[362]) / 2]
    for got in mesh_eyes:
        assert min(np.hypot(*(got - face.landmarks[i])) for i in (0, 1)) < 0.2 * eye_dist


def test_aligned_openings_read_the_same_ratios_at_any_crop_size_and_none_without_a_face(astronaut):
    """The astronaut smiles with her teeth showing and her eyes open: a clear inner-lip gap and eye opening, each
    over the eye-corner distance, the same at 256 and 128 px; a flat grey crop has no face."""
    rgb, face = astronaut
    big = face_mesh.aligned_openings(align_face(rgb, face.landmarks, 256).crop)
    small = face_mesh.aligned_openings(align_face(rgb, face.landmarks, 128).crop)
    assert big is not None and small is not None
    assert 0.03 < big[0] < 0.3 and 0.03 < big[1] < 0.2
    assert abs(big[0] - small[0]) < 0.02 and abs(big[1] - small[1]) < 0.02
    assert face_mesh.aligned_openings(np.full((256, 256, 3), 128, np.uint8)) is None


def test_small_face_gets_no_mesh(astronaut):
    rgb, face = astronaut
    small = cv2.resize(rgb, None, fx=0.06, fy=0.06, interpolation=cv2.INTER_AREA)
    assert face_mesh.face_mesh(small, face.landmarks * 0.06) is None
    mask, kind = compositing.face_region_mask(small, face.landmarks * 0.06)
    assert mask is None and kind == "5-point"


def test_is_small_face_reads_the_eye_distance():
    lm = np.array([[10, 10], [10 + compositing.SMALL_FACE_EYE_DISTANCE - 1, 10], [20, 20], [12, 30], [28, 30]], np.float64)
    assert compositing.is_small_face(lm)
    lm[1, 0] += 2
    assert not compositing.is_small_face(lm)


@pytest.mark.parametrize("mesh", [True, False])
def test_small_face_region_reaches_over_the_outline(astronaut, monkeypatch, mesh):
    """A small face (mesh or 5-point region) has more of its surroundings replaced than the same face treated as
    large: the larger region holds the whole large one and reaches past it on every side."""
    rgb, face = astronaut
    k = 0.4  # eye distance about 19 px: small, still meshed
    small = cv2.resize(rgb, None, fx=k, fy=k, interpolation=cv2.INTER_AREA)
    lm = face.landmarks * k
    assert compositing.is_small_face(lm)
    if not mesh:
        monkeypatch.setattr(compositing, "face_mesh", lambda *a, **kw: None)
    al = align_face(small, lm, 256)
    white = np.full((256, 256, 3), 255, np.uint8)
    black = np.zeros_like(small)

    def replaced() -> np.ndarray:
        out, info = compositing.composite_face(black, small, white, al.matrix, lm)
        assert info.mask == ("mesh" if mesh else "5-point")
        assert info.as_dict()["small_face"] == compositing.is_small_face(lm)
        assert info.as_dict()["reach"] == compositing.region_reach(lm)
        return out.max(2) > 0

    as_small = replaced()
    monkeypatch.setattr(compositing, "SMALL_FACE_EYE_DISTANCE", 0.0)
    as_large = replaced()
    assert np.all(as_small[as_large])
    assert as_small.sum() > 1.3 * as_large.sum()
    ys, xs = np.nonzero(as_small)
    yl, xl = np.nonzero(as_large)
    assert xs.min() < xl.min() and xs.max() > xl.max() and ys.min() < yl.min() and ys.max() > yl.max()


def test_hull_mask_is_one_inside_the_hull_and_zero_beyond_grow():
    pts = np.array([[30, 30], [70, 30], [70, 80], [30, 80], [50, 55]], np.float64)
    m = compositing.hull_mask((120, 120), [pts], grow=3, feather=8)
    assert m.dtype == np.float32 and m.shape == (120, 120)
    assert np.all(m[36:75, 36:65] == 1.0)  # deeper than feather - grow = 5 px inside the hull
    assert np.all(m[:26] == 0) and np.all(m[:, 75:] == 0)  # beyond grow (+1 px of distance rounding)
    assert 0 < m[55, 32] < 1 and 0 < m[55, 71] < 1  # the edge: a ramp across the hull's boundary


def test_feature_mask_covers_each_feature_with_its_margin():
    mesh = np.zeros((468, 2))
    mesh[:] = [100, 100]
    for k, idx in enumerate(compositing.FEATURE_POINTS):
        centre = np.array([30 + 35 * k, 40])
        mesh[list(idx)] = centre + np.random.default_rng(k).uniform(-5, 5, (len(idx), 2))
    m = compositing.feature_mask((120, 200), mesh, margin=4)
    for k in range(len(compositing.FEATURE_POINTS)):
        cx = 30 + 35 * k
        assert m[40, cx] == 1 and m[40, cx + 6] == 1  # the feature and the margin beside it
    assert m[80, 100] == 0 and m[5, 5] == 0


def test_colour_transfer_moves_statistics_to_the_target():
    new, target = _patch((90, 140, 80), 12, seed=1), _patch((200, 150, 120), 20, seed=2)
    mask = np.ones(new.shape[:2], bool)
    moved = compositing.match_colour(new, target, mask)
    before = compositing.delta_e(compositing.mean_lab(new, mask), compositing.mean_lab(target, mask))
    after = compositing.delta_e(compositing.mean_lab(moved, mask), compositing.mean_lab(target, mask))
    assert before > 20 and after < 2.0
    lab_m, lab_t = (cv2.cvtColor(x.astype(np.float32) / 255, cv2.COLOR_RGB2LAB).reshape(-1, 3) for x in (moved, target))
    ratio = lab_m.std(0) / lab_t.std(0)
    assert np.all(np.abs(ratio[1:] - 1) < 0.25)  # a and b spreads follow the target


def test_colour_transfer_keeps_shading():
    # a strong left-to-right shading ramp must survive a transfer to a flat target
    ramp = np.tile(np.linspace(40, 220, 64, dtype=np.float32)[None, :, None], (64, 1, 3)).astype(np.uint8)
    flat = _patch((150, 120, 100), 3)
    mask = np.ones(ramp.shape[:2], bool)
    moved = compositing.match_colour(ramp, flat, mask)
    grey = moved.mean(2)
    assert grey[:, -4:].mean() - grey[:, :4].mean() > 0.6 * (ramp[0, -4:, 0].mean() - ramp[0, :4, 0].mean())


def test_sharpness_match_blurs_a_sharp_face_and_grains_a_smooth_one():
    rng = np.random.default_rng(3)
    textured = np.clip(128 + rng.normal(0, 25, (96, 96, 3)), 0, 255).astype(np.uint8)
    smooth = cv2.GaussianBlur(textured, (0, 0), 3)
    mask = np.ones((96, 96), bool)
    blurred, what = compositing.match_sharpness(textured, cv2.GaussianBlur(textured, (0, 0), 1.0), mask)
    assert what.startswith("blurred")
    target = compositing.laplacian_variance(cv2.GaussianBlur(textured, (0, 0), 1.0), mask)
    assert 0.6 * target < compositing.laplacian_variance(blurred, mask) < 1.4 * target
    grained, what = compositing.match_sharpness(smooth, textured, mask)
    assert what.startswith("grain")
    assert compositing.noise_level(grained, mask) > 3 * compositing.noise_level(smooth, mask)
    assert compositing.laplacian_variance(grained, mask) > 0.6 * compositing.laplacian_variance(textured, mask)
    again, _ = compositing.match_sharpness(smooth, textured, mask)
    assert np.array_equal(again, grained)  # seeded grain: the same inputs give the same output


def test_sharpness_match_sharpens_soft_edges_of_a_clean_face():
    # clean (noise-free) edges in both: the soft one gets an unsharp mask, not grain
    board = np.kron((np.indices((8, 8)).sum(0) % 2) * 120 + 60, np.ones((12, 12))).astype(np.uint8)
    sharp = np.repeat(cv2.GaussianBlur(board, (0, 0), 0.8)[..., None], 3, 2)
    soft = np.repeat(cv2.GaussianBlur(board, (0, 0), 1.2)[..., None], 3, 2)
    mask = np.ones(board.shape, bool)
    out, what = compositing.match_sharpness(soft, sharp, mask)
    assert "unsharp" in what
    target = compositing.laplacian_variance(sharp, mask)
    assert compositing.laplacian_variance(soft, mask) < 0.6 * target
    assert 0.6 * target < compositing.laplacian_variance(out, mask) < 1.4 * target


@pytest.mark.parametrize("new_kind", ["sharp", "smooth"])
def test_sharpness_match_reads_only_the_mask_and_its_margin(new_kind):
    # the search runs on the mask's support grown by SUPPORT_MARGIN: pixels beyond it must not change the result
    rng = np.random.default_rng(7)
    textured = np.clip(128 + rng.normal(0, 25, (160, 160, 3)), 0, 255).astype(np.uint8)
    reference = cv2.GaussianBlur(textured, (0, 0), 1.0) if new_kind == "sharp" else textured
    new = textured if new_kind == "sharp" else cv2.GaussianBlur(textured, (0, 0), 3)
    mask = np.zeros((160, 160), bool)
    mask[60:100, 50:110] = True
    out, what = compositing.match_sharpness(new, reference, mask)
    assert what.startswith("blurred" if new_kind == "sharp" else "grain")
    far = np.ones((160, 160), bool)
    m = compositing.SUPPORT_MARGIN
    far[60 - m : 100 + m, 50 - m : 110 + m] = False
    new_b, reference_b = new.copy(), reference.copy()
    new_b[far], reference_b[far] = 255 - new_b[far], rng.integers(0, 256, (int(far.sum()), 3), dtype=np.uint8)
    out_b, what_b = compositing.match_sharpness(new_b, reference_b, mask)
    assert what_b == what
    assert np.array_equal(out_b[mask], out[mask])


@pytest.mark.parametrize("mode", ["feather", "poisson"])
def test_blend_leaves_pixels_outside_the_mask_bit_identical(mode):
    canvas, new = _patch((60, 80, 100), 30, 128, seed=4), _patch((200, 180, 160), 30, 128, seed=5)
    mask = compositing.hull_mask((128, 128), [np.array([[40, 40], [90, 40], [90, 95], [40, 95]], float)], 2, 8)
    out = compositing.blend(canvas, new, mask, mode)
    assert np.array_equal(out[mask == 0], canvas[mask == 0])
    assert np.abs(out[mask == 1].astype(int) - canvas[mask == 1].astype(int)).mean() > 30


def test_alpha_blend_keeps_both_ends_bit_identical_and_mixes_between():
    from zoo.paste import alpha_blend

    canvas, new = _patch((60, 80, 100), 30, 64, seed=4), _patch((200, 180, 160), 30, 64, seed=5)
    mask = np.tile(np.linspace(0.0, 1.0, 64, dtype=np.float32)[None, :], (64, 1))
    mask[:, 20:30] = 0.0
    mask[:, 50:] = 1.0
    out = alpha_blend(canvas[:, ::-1], new, mask)  # a non-contiguous view blends as its copy does
    assert np.array_equal(out[mask == 0], canvas[:, ::-1][mask == 0]) and np.array_equal(out[mask == 1], new[mask == 1])
    exact = canvas[:, ::-1].astype(np.float64) * (1 - mask[..., None]) + new.astype(np.float64) * mask[..., None]
    assert np.abs(out - exact).max() <= 0.5 + 1e-3


def test_blend_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="blend mode"):
        compositing.blend(np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8), np.float32), "alpha")


def test_composite_replaces_the_original_features_and_keeps_the_rest(astronaut):
    rgb, face = astronaut
    al = align_face(rgb, face.landmarks, 256)
    new_face = np.full((256, 256, 3), (40, 200, 60), np.uint8)  # a flat green "face": easy to trace
    out, info = compositing.composite_face(rgb, rgb, new_face, al.matrix, face.landmarks)
    assert info.mask == "mesh" and info.blend == "feather"
    pts = face_mesh.face_mesh(rgb, face.landmarks)
    features = [33, 133, 263, 362, 70, 300, 61, 291, 13, 14]  # eye corners, brows, mouth corners, lips
    xy = np.rint(pts[features]).astype(int)
    grey_in, grey_out = rgb[xy[:, 1], xy[:, 0]].mean(1), out[xy[:, 1], xy[:, 0]].mean(1)
    # fully replaced: the original's dark eyes, brows and red lips are gone; what is there is the flat new face
    assert np.ptp(grey_in) > 60 and np.ptp(grey_out) < 0.3 * np.ptp(grey_in)
    size = compositing.face_size(pts)
    far = compositing.hull_mask(rgb.shape[:2], [pts], (compositing.MASK_GROW + compositing.MASK_FEATHER) * size + 2, 1) == 0
    assert np.array_equal(out[far], rgb[far])


def test_composite_matches_the_skin_colour(astronaut):
    rgb, face = astronaut
    al = align_face(rgb, face.landmarks, 256)
    green = np.clip(al.crop.astype(int) + [-60, 40, -60], 0, 255).astype(np.uint8)  # a colour-shifted "new face"
    out, _ = compositing.composite_face(rgb, rgb, green, al.matrix, face.landmarks)
    mask, _ = compositing.face_region_mask(rgb, face.landmarks)
    core = mask == 1
    pasted = paste_back(rgb, green, al.matrix)  # the plain paste keeps the shift
    ref = compositing.mean_lab(rgb, core)
    assert compositing.delta_e(compositing.mean_lab(pasted, core), ref) > 20
    assert compositing.delta_e(compositing.mean_lab(out, core), ref) < 6


def test_composite_at_the_image_border(astronaut):
    rgb, face = astronaut
    x0 = int(face.box[0] + 0.4 * (face.box[2] - face.box[0]))
    cut = np.ascontiguousarray(rgb[:, x0:])  # half the face outside the photo
    lm = face.landmarks - [x0, 0]
    matrix = alignment_matrix(lm, 256)
    crop = np.full((256, 256, 3), 128, np.uint8)
    out, info = compositing.composite_face(cut, cut, crop, matrix, lm)
    assert out.shape == cut.shape and out.dtype == np.uint8
    assert not np.array_equal(out, cut)


@pytest.mark.slow  # 17 s: two photos through dbaf, the small face found by the detector's extra passes
def test_report_says_which_mask_each_face_got(astronaut):
    import zoo

    rgb, face = astronaut
    m = zoo.load("dbaf")  # the 64 px tier in the routine tests (conftest): the same compositing stage
    big = m.anonymize(rgb, key="k", privacy_guard=False)
    [rec] = big.faces
    assert rec.status == "processed" and rec.composite["mask"] == "mesh" and rec.composite["blend"] == "feather"
    small = np.full((160, 160, 3), 128, np.uint8)
    x0, y0, x1, y1 = (int(v) for v in face.box)
    pad = int(0.6 * (x1 - x0))
    head = rgb[max(0, y0 - pad) : y1 + pad, max(0, x0 - pad) : x1 + pad]
    tiny = cv2.resize(head, (40, int(40 * head.shape[0] / head.shape[1])), interpolation=cv2.INTER_AREA)
    small[40 : 40 + tiny.shape[0], 60:100] = tiny[:120]
    res = m.anonymize(small, key="k", privacy_guard=False)
    assert res.faces, "the detector finds the small face"
    for r in res.faces:
        eye = np.hypot(*(np.subtract(r.landmarks[1], r.landmarks[0])))
        if r.status == "processed" and eye < face_mesh.MIN_MESH_EYE_DISTANCE:
            assert r.composite["mask"] == "5-point"
    assert any(r.composite and r.composite["mask"] == "5-point" for r in res.faces)


@pytest.mark.slow  # 8 s: a photo through dbaf with both blends
def test_a_method_blends_its_faces_the_way_it_says(astronaut):
    """The pipeline composes with the method's ``blend_mode`` and the report names it; the gradient-domain blend
    gives a different photo; a mode the compositing does not know is an error, not a silent plain paste."""
    import zoo
    from zoo.pipeline import compose

    rgb, face = astronaut
    m = zoo.load("dbaf")  # the 64 px tier in the routine tests (conftest)
    m.blend_mode = "poisson"
    assert [r.composite["blend"] for r in m.anonymize(rgb, key="k", privacy_guard=False).faces] == ["poisson"]
    al = align_face(rgb, face.landmarks, 256)
    crop = np.full((256, 256, 3), (40, 200, 60), np.uint8)
    feather, poisson = (compose(rgb, [face], [al.matrix], [crop], blend_mode=mode) for mode in ("feather", "poisson"))
    assert np.abs(poisson.astype(int) - feather).max() > 10
    with pytest.raises(ValueError, match="blend mode"):
        compose(rgb, [face], [al.matrix], [crop], blend_mode="alpha")


@pytest.mark.parametrize("mesh", [True, False])
def test_a_wider_reach_replaces_more_of_the_surroundings(astronaut, monkeypatch, mesh):
    """``reach`` (the privacy guard's strengthening) replaces a region that holds the default one and reaches past it
    on every side, with the mesh and with the 5-point fallback (a recovery whose photo the mesh fails on still covers
    the widened region); the report says how far; a small face never gets less than its own reach."""
    rgb, face = astronaut
    if not mesh:
        monkeypatch.setattr(compositing, "face_mesh", lambda *a, **kw: None)
    al = align_face(rgb, face.landmarks, 256)
    white = np.full((256, 256, 3), 255, np.uint8)
    black = np.zeros_like(rgb)
    (default, info), (wide, wide_info) = (compositing.composite_face(black, rgb, white, al.matrix, face.landmarks, reach=r) for r in (None, 0.15))
    assert info.as_dict()["reach"] == compositing.MASK_GROW and wide_info.as_dict()["reach"] == 0.15
    assert info.mask == wide_info.mask == ("mesh" if mesh else "5-point")
    default, wide = default.max(2) > 0, wide.max(2) > 0
    assert np.all(wide[default]) and wide.sum() > 1.2 * default.sum()
    ys, xs = np.nonzero(wide)
    yd, xd = np.nonzero(default)
    assert xs.min() < xd.min() and xs.max() > xd.max() and ys.min() < yd.min() and ys.max() > yd.max()
    small = face.landmarks * 0.4
    assert compositing.region_reach(small, 0.05) == compositing.SMALL_FACE_GROW
    assert compositing.region_reach(small, 0.3) == 0.3 and compositing.region_reach(face.landmarks, 0.05) == 0.05
    assert compositing.fallback_mask_scale(face.landmarks) == 1.0
    assert compositing.fallback_mask_scale(small) == pytest.approx(compositing.SMALL_FACE_MASK_SCALE)
    assert compositing.fallback_mask_scale(face.landmarks, 0.15) == pytest.approx(compositing.SMALL_FACE_MASK_SCALE)
    with pytest.raises(ValueError, match="reach"):
        compositing.region_reach(face.landmarks, -0.1)


def test_zone_colour_matching_keeps_face_and_band_each_at_home():
    """A widened region spans a face and a differently coloured band around it: matched in two zones, each zone's
    mean colour lands near the reference's there (one set of statistics leaves both off), and the two zones are
    joined along the core's feathered edge."""
    size = 96
    yy, xx = np.mgrid[:size, :size]
    core_hard = (np.abs(yy - 48) < 24) & (np.abs(xx - 48) < 24)
    inner = cv2.GaussianBlur(core_hard.astype(np.float32), (0, 0), 2.0)
    inner = np.where(core_hard & (cv2.erode(core_hard.astype(np.uint8), np.ones((9, 9), np.uint8)) > 0), 1.0, inner * (inner > 0.02))
    mask = np.ones((size, size), bool)
    new = np.where(core_hard[..., None], _patch((120, 110, 100), 6, size, 1), _patch((60, 60, 70), 6, size, 2))
    ref = np.where(core_hard[..., None], _patch((210, 160, 130), 6, size, 3), _patch((140, 120, 60), 6, size, 4))
    zones = compositing.match_colour_zones(new, ref, mask, inner)
    one = compositing.match_colour(new, ref, mask)
    core, band = inner >= 0.999, inner <= 1e-3
    for zone in (core, band):
        target = compositing.mean_lab(ref, zone)
        assert compositing.delta_e(compositing.mean_lab(zones, zone), target) < 3.0
        assert compositing.delta_e(compositing.mean_lab(one, zone), target) > 5.0
    assert zones.dtype == np.uint8 and zones.shape == new.shape
    # no band: one zone, as match_colour
    assert np.array_equal(compositing.match_colour_zones(new, ref, core, inner), compositing.match_colour(new, ref, core))


def test_a_widened_region_keeps_the_skin_colour_of_face_and_surroundings(astronaut):
    """At the privacy guard's widest reach the face and the skin ring just outside the default region keep the
    original's colour (each matched in its own zone) when the new face is colour-shifted."""
    rgb, face = astronaut
    al = align_face(rgb, face.landmarks, 256)
    green = np.clip(al.crop.astype(int) + [-60, 40, -60], 0, 255).astype(np.uint8)
    out, _ = compositing.composite_face(rgb, rgb, green, al.matrix, face.landmarks, reach=0.15)
    wide, default, _ = compositing.face_region_masks(rgb, face.landmarks, 0.15)
    assert default is not wide and np.all(wide >= default - 1e-6)
    core, band = default >= 0.999, (wide >= 0.999) & (default <= 1e-3)
    assert band.sum() > 500
    for zone in (core, band):
        assert compositing.delta_e(compositing.mean_lab(out, zone), compositing.mean_lab(rgb, zone)) < 6


def _skin_crop(size: int = 256) -> np.ndarray:
    """An FFHQ-aligned stand-in: skin-coloured everywhere, with mild shading."""
    crop = np.empty((size, size, 3), np.uint8)
    crop[:] = (205, 160, 135)
    shade = np.linspace(-12, 12, size, dtype=np.float32)[None, :, None]
    return np.clip(crop + shade, 0, 255).astype(np.uint8)


def _with_fringe(crop: np.ndarray, rows: tuple[float, float]) -> np.ndarray:
    """``crop`` with dark hair over the given rows (fractions of the side) across the whole width."""
    out = crop.copy()
    size = crop.shape[0]
    out[int(rows[0] * size) : int(rows[1] * size)] = (40, 30, 25)
    return out


@pytest.mark.parametrize("size", [64, 256])
def test_forehead_hair_finds_a_fringe_drawn_over_a_bare_forehead(size):
    (x0, x1), (y0, y1) = compositing.FOREHEAD_BAND
    bare = _skin_crop(size)
    assert compositing.forehead_hair(bare, bare) == 0.0
    fringe = _with_fringe(bare, (0.0, y1))  # hair down to the brows: the whole band
    assert compositing.forehead_hair(bare, fringe) == 1.0
    half = _with_fringe(bare, (0.0, (y0 + y1) / 2))  # a fringe ending halfway down the band
    assert 0.35 < compositing.forehead_hair(bare, half) < 0.65
    # a fringe the original already has is no fault of the drawn face; nor is a drawn bare forehead
    assert compositing.forehead_hair(fringe, fringe) == 0.0
    assert compositing.forehead_hair(fringe, bare) == 0.0
    # hair above the band (a hairline in its place) does not count
    assert compositing.forehead_hair(bare, _with_fringe(bare, (0.0, y0 * 0.9))) == 0.0


def test_forehead_hair_compares_at_the_original_size():
    bare = _skin_crop(64)
    fringe = _with_fringe(_skin_crop(256), (0.0, compositing.FOREHEAD_BAND[1][1]))
    assert compositing.forehead_hair(bare, fringe) > 0.9


@pytest.mark.parametrize("reach", [None, 0.15])
def test_a_region_plan_made_once_composites_every_face_as_a_fresh_one(astronaut, reach):
    """The privacy guard composites many faces at one place through one :func:`plan_region`: each comes out
    bit-identical to compositing it alone (colour zones at a widened reach, grain and blur paths alike), also when
    drawn in place into the caller's canvas. A plan for another crop size is refused."""
    rgb, face = astronaut
    al = align_face(rgb, face.landmarks, 256)
    faces = [
        np.clip(al.crop.astype(int) + [-60, 40, -60], 0, 255).astype(np.uint8),  # colour-shifted
        cv2.GaussianBlur(al.crop, (0, 0), 3.0),  # softer than the photo: grain and unsharp
        _patch((170, 130, 110), 40, 256, seed=7),  # noisier than the photo: blurred
    ]
    plan = compositing.plan_region(rgb, al.matrix, face.landmarks, 256, reach)
    whats = set()
    for new in faces:
        fresh, info = compositing.composite_face(rgb, rgb, new, al.matrix, face.landmarks, reach=reach)
        planned, planned_info = compositing.composite_face(rgb, rgb, new, al.matrix, face.landmarks, reach=reach, plan=plan)
        assert np.array_equal(fresh, planned) and info == planned_info
        canvas = rgb.copy()
        drawn, drawn_info = compositing.composite_face(canvas, rgb, new, al.matrix, face.landmarks, reach=reach, plan=plan, in_place=True)
        assert drawn is canvas and np.array_equal(canvas, fresh) and drawn_info == info  # in place: the same pixels
        whats.add(info.sharpness.split(" ")[0])
    assert {"blurred", "grain"} <= whats
    with pytest.raises(ValueError, match="256 px"):
        compositing.composite_face(rgb, rgb, cv2.resize(faces[0], (128, 128)), al.matrix, face.landmarks, plan=plan)


def test_a_photo_composer_gives_what_compose_gives_and_redraws_only_what_changed(astronaut, monkeypatch):
    """Two overlapping faces composed again and again with other candidates (as the privacy guard does): every
    canvas equals a fresh :func:`compose`; a face is composited again only when its crop, its reach or the pixels
    under its region (a neighbour drawn over them) changed."""
    from zoo.composer import PhotoComposer, compose
    from zoo.detectors import DetectedFace

    rgb, face = astronaut
    shift = np.array([0.35 * face.width, 0.1 * face.height])
    other = DetectedFace(face.box + np.tile(shift, 2), face.landmarks + shift, face.score)
    faces = [face, other]
    matrices = [align_face(rgb, f.landmarks, 256).matrix for f in faces]
    a, a2 = align_face(rgb, other.landmarks, 256).crop, _patch((170, 130, 110), 30, 256, seed=8)
    b, b2 = align_face(rgb, face.landmarks, 256).crop, cv2.GaussianBlur(a2, (0, 0), 2.0)
    calls = []
    real = compositing.composite_face
    monkeypatch.setattr(compositing, "composite_face", lambda *args, **kw: calls.append(1) or real(*args, **kw))
    composer, untouched = PhotoComposer(rgb, faces, matrices), rgb.copy()
    for outs, reaches, redrawn in [
        ([a, b], [None, None], 2),
        ([a, b], [None, None], 0),  # nothing changed
        ([a, b2], [None, None], 1),  # the second face only
        ([a2, b2], [None, None], 2),  # the first, and the second over pixels it now covers
        ([a2, b2], [None, 0.15], 1),  # a wider reach: another plan
        ([a, None], [None, None], 1),  # a face without output is blurred
    ]:
        calls.clear()
        infos: list = []
        got = composer(outs, reaches, infos)
        assert len(calls) == redrawn
        calls.clear()
        fresh_infos: list = []
        assert np.array_equal(got, compose(rgb, faces, matrices, outs, fresh_infos, reaches=reaches)) and infos == fresh_infos
    assert np.array_equal(rgb, untouched)  # faces are drawn into copies, never into the photo
    with pytest.raises(ValueError, match="one output per face"):
        composer([a])


def test_a_blurred_face_is_restored_over_its_whole_rectangle(astronaut):
    """Right-key recovery of a face blurred at anonymization: the recovered crop (here the original's own aligned
    crop) drawn over the blurred rectangle gives the face back close to the original and as sharp as it, where the
    blur took both; pixels outside the rectangle are untouched; the mean colour moved to the blur's is reported."""
    from zoo import paste

    rgb, face = astronaut
    al = align_face(rgb, face.landmarks, 256)
    blurred = paste.blur_face(rgb, face)
    x0, y0, x1, y1, size = paste.blur_box(rgb.shape, face)
    restored, shift = paste.restore_blurred(blurred, al.crop, al.matrix, face)
    inside = (slice(y0, y1), slice(x0, x1))

    def error(img):
        return float(np.abs(img[inside].astype(int) - rgb[inside].astype(int)).mean())

    def sharpness(img):
        return compositing.laplacian_variance(img[inside], np.ones((y1 - y0, x1 - x0), bool))

    assert error(restored) < 0.4 * error(blurred)
    assert sharpness(restored) > 0.5 * sharpness(rgb) and sharpness(restored) > 10 * sharpness(blurred)
    outside = np.ones(rgb.shape[:2], bool)
    outside[inside] = False
    assert np.array_equal(restored[outside], rgb[outside])
    assert 0.0 <= shift < 5.0  # the original's own crop: its mean colour is the blur's, nearly
    far = paste.restore_blurred(blurred, np.full((256, 256, 3), (250, 20, 20), np.uint8), al.matrix, face)[1]
    assert far > 30  # a red crop is moved a long way toward the blur's colour
    # a photo cut to the face: the rectangle reaches every edge, and the whole photo is drawn
    tight = np.ascontiguousarray(rgb[int(face.box[1]) : int(face.box[3]), int(face.box[0]) : int(face.box[2])])
    moved = type(face)(face.box - np.tile(face.box[:2], 2), face.landmarks - face.box[:2], face.score)
    cut = paste.blur_face(tight, moved)
    assert paste.blur_box(tight.shape, moved)[:4] == (0, 0, tight.shape[1], tight.shape[0])
    matrix = alignment_matrix(moved.landmarks, 256)
    again, _ = paste.restore_blurred(cut, al.crop, matrix, moved)
    assert again.shape == tight.shape and np.abs(again.astype(int) - tight.astype(int)).mean() < 0.5 * np.abs(cut.astype(int) - tight.astype(int)).mean()
