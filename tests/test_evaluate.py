"""The evaluator (training/evaluate.py) on inputs with known answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from training.evaluate import (
    evaluate,
    half_resize,
    image_metrics,
    jpeg,
    load_eval_images,
    main,
    rate,
    to_markdown,
    wilson_interval,
)
from zoo.methods.base import DeidMethod

SIZE = 160
T1 = Path(__import__("importlib.util").util.find_spec("insightface").submodule_search_locations[0]) / "data" / "images" / "t1.jpg"


class Identity(DeidMethod):
    """Returns its input: nothing is anonymized, everything is recovered."""

    name = "identity"
    reversible = True
    resolution = SIZE

    def anonymize_faces(self, x, keys, **controls):
        return x.clone()

    def recover_faces(self, y, keys, **controls):
        return y.clone()


class Swap(DeidMethod):
    """Replaces each face by the next face of the batch: a different person, a perfect de-identifier."""

    name = "swap"
    reversible = True
    resolution = SIZE
    max_batch = 64

    def anonymize_faces(self, x, keys, **controls):
        return x.roll(1, dims=0)

    def recover_faces(self, y, keys, **controls):
        return y.roll(-1, dims=0)

    def reconstruct_faces(self, x):
        return x.clone()  # its "generator" with the identity unchanged is the identity map


@pytest.fixture(scope="module")
def faces() -> np.ndarray:
    """Six different real people (insightface's t1.jpg), detected and FFHQ-aligned."""
    imgs, info = load_eval_images(f"photos:{T1}", SIZE)
    assert info["num_images"] == 6
    return imgs


def test_wilson_interval_known_values():
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.27753, abs=1e-4)
    lo, hi = wilson_interval(5, 10)
    assert (lo, hi) == (pytest.approx(0.23659, abs=1e-4), pytest.approx(0.76341, abs=1e-4))
    r = rate([True, True, False, True])
    assert r["value"] == 0.75 and r["k"] == 3 and r["n"] == 4 and r["ci95"][0] < 0.75 < r["ci95"][1]


def test_image_metrics_known_numbers():
    a = np.full((2, 32, 32, 3), 100, np.uint8)
    b = a.copy()
    b[1] += 51  # 0.2 on the [0,1] scale
    m = image_metrics(a, b, lpips_net=None, lpips_reason="test")
    assert m["mse"]["value"] == pytest.approx((0 + 0.2**2) / 2, rel=1e-6)
    # image 0 is identical (PSNR capped at 100 dB), image 1 has PSNR = -10 log10(0.04)
    assert m["psnr"]["value"] == pytest.approx((100 + 10 * math.log10(1 / 0.04)) / 2, rel=1e-6)
    assert m["ssim"]["value"] <= 1.0 and m["lpips"]["value"] is None and "test" in m["lpips"]["status"]


def test_degradations_keep_shape_and_change_pixels(faces):
    for fn in (lambda x: jpeg(x, 75), half_resize):
        out = fn(faces[:2])
        assert out.shape == faces[:2].shape and out.dtype == np.uint8
        assert 0 < np.abs(out.astype(int) - faces[:2].astype(int)).mean() < 20
    assert np.abs(jpeg(faces[:2], 75).astype(int) - faces[:2]).mean() > np.abs(jpeg(faces[:2], 90).astype(int) - faces[:2]).mean()


def test_identical_images_deid_zero_recovery_one(faces):
    res = evaluate(Identity(), faces[:3], ("sface", "dlib"), n_keys=2, robustness=False, detection=False, landmarks=False, lpips=None)
    for judge in ("sface", "dlib"):
        assert res["metrics"]["privacy"][judge]["deid_rate"]["value"] == 0.0
        assert res["metrics"]["privacy"][judge]["id_cosine"]["value"] == pytest.approx(1.0, abs=1e-6)
        assert res["metrics"]["recovery"][judge]["recovery_rate"]["value"] == 1.0
        assert res["metrics"]["wrong_key"][judge]["deid_rate"]["value"] == 0.0
        assert res["metrics"]["diversity"][judge]["kffa"]["value"] == pytest.approx(0.0, abs=0.5)
    assert res["metrics"]["quality"]["ssim"]["value"] == pytest.approx(1.0)
    assert res["metrics"]["quality"]["fid"]["value"] is None
    assert res["metrics"]["recovery"]["quality"]["psnr"]["value"] == 100.0
    assert "reconstruction" not in res["metrics"]  # Identity has no reconstruct_faces
    md = to_markdown(res)
    assert "| de-identification rate | 0.000 [0.000, 0.561] (n=3)" in md
    json.dumps(res)  # JSON-serialisable


@pytest.mark.slow  # 6 s: the evaluator over pairs of people
def test_different_people_deid_one(faces):
    res = evaluate(Swap(), faces, ("sface", "dlib"), n_keys=1, robustness=False, detection=False, landmarks=False, lpips=None)
    for judge in ("sface", "dlib"):
        p = res["metrics"]["privacy"][judge]
        assert p["deid_rate"]["value"] == 1.0 and p["identification_rate"]["value"] == 0.0
        assert res["metrics"]["recovery"][judge]["recovery_rate"]["value"] == 1.0
    assert "diversity" not in res["metrics"]  # one key: no diversity table
    # the reconstruction reference: same person, so the judges match every face
    for judge in ("sface", "dlib"):
        r = res["metrics"]["reconstruction"][judge]
        assert r["deid_rate"]["value"] == 0.0 and r["id_cosine"]["value"] == pytest.approx(1.0, abs=1e-6)
    assert res["metrics"]["reconstruction"]["quality"]["psnr"]["value"] == 100.0
    assert "Reconstruction with the identity unchanged" in to_markdown(res)
    assert res["fallbacks"]["reconstruct"] == 0


@pytest.mark.slow
def test_noise_strength_moves_numbers_the_right_way(faces):
    from zoo import load

    noise = load("noise", resolution=SIZE, device="cpu")
    weak = evaluate(noise, faces[:4], ("sface",), controls={"strength": 0.05}, n_keys=2, robustness=False, landmarks=False, lpips=None)
    strong = evaluate(noise, faces[:4], ("sface",), controls={"strength": 0.9}, n_keys=2, robustness=False, landmarks=False, lpips=None)
    w, s = weak["metrics"], strong["metrics"]
    assert s["privacy"]["sface"]["id_cosine"]["value"] < w["privacy"]["sface"]["id_cosine"]["value"]
    assert s["privacy"]["sface"]["deid_rate"]["value"] >= w["privacy"]["sface"]["deid_rate"]["value"]
    assert s["quality"]["psnr"]["value"] < w["quality"]["psnr"]["value"]
    assert s["quality"]["ssim"]["value"] < w["quality"]["ssim"]["value"]
    assert w["utility"]["detection_rate"]["value"] >= s["utility"]["detection_rate"]["value"]
    assert w["utility"]["detection_rate_original"]["value"] == 1.0
    # keyed noise: different keys give different outputs, so the strong setting is more diverse
    assert s["diversity"]["sface"]["kffa"]["value"] > w["diversity"]["sface"]["kffa"]["value"]


@pytest.mark.slow
def test_utility_and_robustness_for_identity(faces):
    res = evaluate(Identity(), faces[:2], ("sface",), n_keys=1, lpips=None)
    for name in ("jpeg90", "jpeg75", "resize0.5"):
        assert res["metrics"]["robustness"][name]["sface"]["recovery_rate"]["value"] == 1.0
        assert res["metrics"]["robustness"][name]["recovery_psnr"]["value"] < 100.0  # the channel did change pixels
    u = res["metrics"]["utility"]
    assert u["landmark68_distance"]["value"] == 0.0 and u["pose_error"]["value"] == pytest.approx(0.0, abs=1e-6)
    assert u["expression_error"]["value"] == pytest.approx(0.0, abs=1e-6)
    assert u["box_distance"]["value"] == 0.0 and u["detection_rate"]["value"] == 1.0


def test_head_pose_angle_order_and_signs():
    """The one head-pose estimate (zoo.face3d.landmarks.head_pose, used by the evaluator's pose_error):
    (yaw, pitch, roll) in degrees, recovered from landmarks projected at a known pose."""
    import cv2

    from zoo.face3d.landmarks import _POSE_IDX, _POSE_MODEL, head_pose

    size = 256
    cam = np.array([[size, 0, size / 2], [0, size, size / 2], [0, 0, 1]], dtype=np.float64)

    def rot(axis: int, deg: float) -> np.ndarray:  # right-handed rotation about x (0), y (1) or z (2)
        c, s = math.cos(math.radians(deg)), math.sin(math.radians(deg))
        i, j = {0: (1, 2), 1: (2, 0), 2: (0, 1)}[axis]
        r = np.eye(3)
        r[i, i], r[i, j], r[j, i], r[j, j] = c, -s, s, c
        return r

    lms = []
    for yaw, pitch, roll in ((0, 0, 0), (20, 0, 0), (0, 15, 0), (0, 0, -10), (25, -12, 8)):
        r = rot(2, roll) @ rot(1, yaw) @ rot(0, pitch)
        pts, _ = cv2.projectPoints(_POSE_MODEL, cv2.Rodrigues(r)[0], np.array([0.0, 0.0, 1500.0]), cam, np.zeros(4))
        lm = np.zeros((68, 2))
        lm[list(_POSE_IDX)] = pts[:, 0]
        lms.append(lm)
        assert head_pose(lm, (size, size)) == pytest.approx([yaw, pitch, roll], abs=0.5)
    # batched: [N, 68, 2] -> [N, 3]
    assert head_pose(np.stack(lms), (size, size)).shape == (5, 3)
    # yaw > 0 turns the face towards the image's left: the nose moves left of the eyes' midpoint
    nose, eyes = lms[1][30, 0], lms[1][[36, 45], 0].mean()
    assert nose < eyes - 5


def test_cli_writes_json_and_markdown_that_hub_cards_read(tmp_path):
    out = tmp_path / "eval"
    main(
        [
            "--method",
            "blur",
            "--data",
            "synthetic:3",
            "--size",
            "128",
            "--judges",
            "sface",
            "--n-keys",
            "1",
            "--no-robustness",
            "--no-landmarks",
            "--lpips",
            "none",
            "--out",
            str(out),
        ]
    )
    result = json.loads((out / "eval.json").read_text())
    assert result["method"] == "blur" and result["num_images"] == 3 and result["image_size"] == 128
    assert result["metrics"]["privacy"]["sface"]["deid_rate"]["n"] == 3
    assert "### Privacy" in (out / "eval.md").read_text()
    from hub_cards import load_evaluations

    rows = load_evaluations(str(out / "eval.json"), "blur")[0]["rows"]
    assert any(r["key"] == "privacy/sface/deid_rate" for r in rows)


def test_angle_difference_wraps_across_180():
    """Angles compare the short way round: 179 and -179 degrees are 2 apart, and the sign says which way."""
    from zoo.face3d.landmarks import angle_difference, pose_difference

    assert angle_difference(179.0, -179.0) == pytest.approx(-2.0)
    assert angle_difference(-179.0, 179.0) == pytest.approx(2.0)
    assert np.allclose(angle_difference(np.array([10.0, 350.0]), 0.0), [10.0, -10.0])
    assert pose_difference(np.array([179.0, 0.0, 0.0]), np.array([-179.0, 3.0, 0.0])) == pytest.approx(math.hypot(2.0, 3.0))
