"""Helpers the real-photo benchmarks share: the report entry at a judged face, and results files built over runs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks.appearance import record_at
from benchmarks.carrier_attack import earlier_rows


def test_record_at_picks_the_overlapping_face_or_none():
    faces = [SimpleNamespace(box=[0, 0, 10, 10], status="a"), SimpleNamespace(box=[50, 50, 70, 70], status="b")]
    result = SimpleNamespace(faces=faces)
    assert record_at(result, np.array([52, 49, 71, 69])).status == "b"
    assert record_at(result, np.array([8, 8, 30, 30])) is None  # touches face a, IoU below 0.2
    assert record_at(SimpleNamespace(faces=[]), np.array([0, 0, 5, 5])) is None


def test_earlier_rows_keeps_what_was_not_run_now(tmp_path):
    def row(photo: str, face: int) -> dict:
        return {"photo": photo, "face": face}

    before = {
        "command": "python -m benchmarks.carrier_attack",
        "methods": {
            "dbaf": {"seconds_anonymize": 10.0, "faces_rows": [row("p1", 0), row("p2", 0), row("p2", 1)]},
            "hford": {"seconds_anonymize": 7.0, "faces_rows": [row("p1", 0), row("p2", 0)]},
        },
    }
    (tmp_path / "r.json").write_text(json.dumps(before))
    rows: dict[str, list[dict]] = {"dbaf": []}
    seconds = {"dbaf": 0.0}
    command = earlier_rows(tmp_path / "r", rows, seconds, {"p2"})
    assert command == before["command"]
    assert rows["dbaf"] == [row("p1", 0)]  # p2 runs again for dbaf
    assert rows["hford"] == before["methods"]["hford"]["faces_rows"]  # not run now: kept whole
    assert seconds == {"dbaf": 0.0, "hford": 7.0}


def test_judge_floor_real_groups_pairs_by_face_size_and_split():
    from benchmarks.judge_floor_real import summarise

    rows = [
        {"photo": "p", "split": "held-out", "faces": [0, 1], "eye_px": [12.0, 20.0], "dlib": 0.55},
        {"photo": "p", "split": "held-out", "faces": [0, 2], "eye_px": [12.0, 30.0], "dlib": 0.50},  # mixed: neither group
        {"photo": "q", "split": "held-out", "faces": [0, 1], "eye_px": [40.0, 30.0], "dlib": 0.70},
        {"photo": "r", "split": "tuning", "faces": [0, 1], "eye_px": [10.0, 11.0], "dlib": 0.65},
    ]
    s = summarise(rows, 0.6)
    assert (s["held-out"]["both small"]["k"], s["held-out"]["both small"]["n"]) == (1, 1)
    assert (s["held-out"]["both larger"]["k"], s["held-out"]["both larger"]["n"]) == (0, 1)
    assert (s["tuning"]["both small"]["k"], s["tuning"]["both small"]["n"]) == (0, 1) and s["tuning"]["both larger"]["n"] == 0


def test_appearance_pose_summary_uses_drawn_faces_with_both_angles():
    from benchmarks.appearance import summarise

    def row(yaw, pitch=None, status="processed"):
        r = dict(status=status, detected=True, same=False, nme=0.1, yaw=yaw, mouth=0.0, eyes=0.0, face_de=1.0, ring_de=1.0, sharpness=1.0)
        return r if pitch is None else {**r, "pitch": pitch}

    rows = [row(float(i), 2.0 * i) for i in range(1, 11)] + [row(100.0, 100.0, status="guard_blur"), row(50.0)]
    med = summarise(rows)["median"]
    # the blurred face and the row without pitch (written before the column existed) are left out of the pose stats
    assert med["yaw_p50"] == 5.5 and med["pitch_p50"] == 11.0
    assert med["yaw_p90"] == 9.1 and med["pitch_p90"] == 18.2
    assert summarise([row(3.0)])["median"]["pitch_p90"] is None


def test_nearest_is_own_ranks_each_recovered_face_against_every_original():
    from benchmarks.wplus_methods import _nearest_is_own

    judge = SimpleNamespace(distance=lambda a, b: np.linalg.norm(a - b, axis=1))
    originals = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    recovered = np.array([[1.0, 0.0], [4.0, 0.0], [9.0, 9.5]])  # own, nearer face 0 than its own face 1, own (by 0.25)
    assert _nearest_is_own(judge, recovered, originals).tolist() == [True, False, True]


def test_jpeg_copy_keeps_shape_and_changes_pixels_a_little():
    from benchmarks.wplus_methods import _jpeg

    rng = np.random.default_rng(0)
    crops = rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    out = _jpeg(crops, 90)
    assert out.shape == crops.shape and out.dtype == np.uint8
    assert 0 < np.abs(out.astype(int) - crops).mean() < 64


def test_default_tier_helpers_pick_the_methods_own_run_and_drop_unmeasured_leaves():
    from training.bundle import _own_command, _pruned

    joined = "python -m benchmarks.wrong_keys --methods dbaf,hford --keys 2 ; python -m benchmarks.wrong_keys --methods personal --keys 2"
    assert _own_command(joined, "hford") == "python -m benchmarks.wrong_keys --methods dbaf,hford --keys 2"
    assert _own_command(joined, "personal") == "python -m benchmarks.wrong_keys --methods personal --keys 2"
    assert _own_command("python -m benchmarks.x", "dbaf") == "python -m benchmarks.x"
    rerun = joined + " ; python -m benchmarks.wrong_keys --methods personal,ifadit --add --photos t1"
    assert _own_command(rerun, "personal") == (
        "python -m benchmarks.wrong_keys --methods personal --keys 2 ; python -m benchmarks.wrong_keys --methods personal,ifadit --add --photos t1"
    )
    assert _own_command(rerun, "hford") == "python -m benchmarks.wrong_keys --methods dbaf,hford --keys 2"
    tree = {"a": {"value": 1.0}, "b": None, "c": {"d": None, "e": {"value": 0.0}}, "f": {"g": None}}
    assert _pruned(tree) == {"a": {"value": 1.0}, "c": {"e": {"value": 0.0}}}


def test_method_inversion_settings_and_summary():
    import pytest

    from benchmarks.method_inversion import FACERES_LINE, SFACE_LINE, box_psnr, parse_settings, summarise

    assert parse_settings("20:0,40:3") == [(20, 0.0), (40, 3.0)]
    for bad in ("20", "a:1", "20:-1"):
        with pytest.raises(SystemExit):
            parse_settings(bad)
    a = np.zeros((10, 10, 3), np.uint8)
    b = a.copy()
    b[2:4, 2:4] = 10  # 4 of the box's 16 pixels off by 10 -> MSE 25
    assert abs(box_psnr(a, b, [1, 1, 5, 5]) - 10 * np.log10(255.0**2 / 25)) < 1e-6
    assert box_psnr(a, b, [6, 6, 9, 9]) > 80  # untouched region: as good as identical
    near = {"anonymized_sface": 0.9, "anonymized_faceres": 0.6, "recovered_sface": SFACE_LINE - 0.1, "recovered_faceres": FACERES_LINE - 0.1}
    far = {**near, "recovered_faceres": FACERES_LINE + 0.1}
    rows = [
        {"blurred": False, "wider": False, "recovered_psnr_db": 20.0, "yaw_change": 1.0, "anonymized_dlib": 0.7, "recovered_dlib": 0.3, **near},
        {"blurred": True, "wider": True, "recovered_psnr_db": 30.0, "yaw_change": 50.0, "anonymized_dlib": 0.5, "recovered_dlib": 0.7, **far},
        {"blurred": False, "wider": False},  # no landmarks there: counted, not judged
    ]
    s = summarise(rows, [6.0], dlib_thr=0.6)
    assert (s["faces"], s["judged"], s["blurred"], s["wider"]) == (3, 2, 1, 1)
    assert s["recovered_within_both_lines"]["k"] == 1 and s["recovered_within_both_lines"]["n"] == 2
    assert s["yaw_change_median"] == 1.0  # over the faces not blurred
    assert s["recovered_psnr_db_median"] == 25.0 and s["seconds_per_face"] == 2.0
    assert s["anonymized_dlib_same"]["k"] == 1 and s["recovered_dlib_same"]["k"] == 1
    assert "anonymized_dlib_same" not in summarise(rows, [6.0], dlib_thr=None)


def test_rate_and_its_text_as_the_results_files_write_them():
    from benchmarks.report import rate, rate_text

    r = rate(3, 10)
    assert (r["k"], r["n"], r["rate"]) == (3, 10, 0.3)
    lo, hi = r["95ci"]
    assert 0.05 < lo < 0.3 < hi < 0.65  # a Wilson interval around 0.3, not 0.3 +- a normal half-width
    assert rate_text(r) == f"3/10 [{lo}, {hi}]"
    assert rate_text(r, 2) == f"3/10 [{lo:.2f}, {hi:.2f}]"
    assert rate(0, 0)["rate"] is None


def test_benchmarks_take_method_controls_as_the_cli_does():
    import argparse

    import pytest

    from benchmarks.report import add_control_option, method_controls

    p = argparse.ArgumentParser()
    add_control_option(p)
    assert method_controls(p.parse_args([])) == {}
    assert method_controls(p.parse_args(["-c", "refine_steps=40", "--control", "face_fit = 3"])) == {"refine_steps": "40", "face_fit": "3"}
    with pytest.raises(SystemExit, match="name=value"):
        method_controls(p.parse_args(["-c", "face_fit"]))


@pytest.mark.slow  # 6 s: dlib on four turns of a photo
def test_the_evaluators_dlib_place_of_a_face_on_its_side_reads_it_upright(t1_rgb, t1_faces):
    """benchmarks.appearance.OriginalFace: a face lying on its side gets its 5 landmarks from dlib's model run on the
    photo turned upright, so the judge reads it as it reads the face upright."""
    import pytest

    from benchmarks.appearance import DlibEye, OriginalFace
    from zoo.judges import upright_turn

    try:
        eye = DlibEye()
    except (FileNotFoundError, ImportError) as err:
        pytest.skip(str(err))
    x0, y0, x1, y1 = t1_faces[2].box.astype(int)
    crop = np.ascontiguousarray(t1_rgb[max(0, y0 - 60) : y1 + 60, max(0, x0 - 60) : x1 + 60])
    upright = OriginalFace.measure_all(eye, crop, eye.boxes(crop))
    sideways_photo = np.ascontiguousarray(np.rot90(crop, 1))
    sideways = OriginalFace.measure_all(eye, sideways_photo, eye.boxes(sideways_photo))
    assert len(upright) == 1 and len(sideways) == 1
    assert upright_turn(sideways[0].place.landmarks) == 3
    assert eye.judge.distance(upright[0].descriptor, sideways[0].descriptor)[0] < 0.1


def test_forehead_hair_times_each_run_over_the_photos_timed_for_it():
    """A photo whose off run came from an earlier file without its time adds nothing to the off time (the old
    bookkeeping added the earlier file's whole off time, of every photo, to any run that reused it)."""
    from benchmarks.forehead_hair import run_seconds

    times = run_seconds({"a": {"off": 10.0, "on": 12.0}, "b": {"on": 20.0}, "c": {"off": 30.0, "on": 31.0}})
    assert times["seconds_total"] == {"off": 40.0, "on": 63.0}
    assert times["seconds"] == {"off": 20.0, "on": 21.0} and times["photos_timed"] == {"off": 2, "on": 3}
    assert run_seconds({})["seconds"] == {"off": None, "on": None}


def test_edit_parts_rows_count_fringes_and_take_median_changes_per_split():
    from benchmarks.edit_parts import PARTS, split_rows

    faces = [["a", "tuning"], ["b", "held-out"], ["c", "held-out"]]
    hair = {p: [[0.0, 0.5, 0.0], [0.2, 0.0, 0.3]] for p in PARTS}  # 2 keys x 3 faces; limit 0.12
    mouth = {p: [[0.01, None, 0.03], [0.02, 0.05, 0.07]] for p in PARTS}
    eyes = {p: [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]] for p in PARTS}
    rows = split_rows({"hair": hair, "mouth": mouth, "eyes": eyes}, faces, "held-out")
    full = rows["full"]
    assert (full["k"], full["n"]) == (2, 4) and full["mean"] == 0.2
    assert full["mouth_median"] == 0.05 and full["eyes_median"] == 0.0  # None (no mesh) left out
    assert (split_rows({"hair": hair, "mouth": mouth, "eyes": eyes}, faces, "tuning")["full"]["k"]) == 1


def test_method_speed_reports_each_run_and_the_stages_it_profiled():
    import cProfile

    from benchmarks.method_speed import STAGES, report_lines, stage_seconds

    timed = {"method": "dbaf", "mode": "fast", "photo": "biden", "faces": 2, "statuses": {"processed": 1, "guard_blur": 1}}
    timed |= {"anonymize_s_per_face": 3.1, "recover_s_per_face": 0.6, "anonymize_range": [3.0, 3.2], "recover_range": [0.5, 0.7]}
    staged = {"method": "dbaf", "mode": "fast", "photo": "biden", "stages_s_per_face": dict.fromkeys(STAGES, 0.25)}
    result = {"command": "python -m benchmarks.method_speed", "machine": "x86_64, test", "threads": 2, "repeat": 1, "rows": [timed, staged]}
    text = "\n".join(report_lines(result))
    assert "| dbaf | fast | biden | 2 (processed 1, guard_blur 1) | 3.1 [3.0 - 3.2] | 0.6 [0.5 - 0.7] |" in text
    assert "| dbaf | fast | biden | " + " | ".join(["0.25"] * len(STAGES)) + " |" in text
    from zoo.detection import detect_faces

    profile = cProfile.Profile()
    profile.enable()
    detect_faces(np.full((96, 96, 3), 128, np.uint8))
    profile.disable()
    seconds = stage_seconds(profile)
    assert seconds["detection"] > 0 and all(v == 0.0 for k, v in seconds.items() if k != "detection")


def test_guard_variants_replays_the_guards_choice_and_lets_a_left_out_recognizer_judge():
    from benchmarks.guard_variants import TARGET_LINES, replay, replay_guard, sighted

    faceres_target, mobileface_target = (1.0 - c for c in TARGET_LINES["20%"])
    guard = SimpleNamespace(floors=(0.6, 0.4, 0.6), targets=(0.8, faceres_target, mobileface_target))
    far, short, near = faceres_target + 0.05, faceres_target - 0.01, 0.39  # FaceRes: past its target, short of it, recognized
    at_reach = {  # (reach, variant) -> SFace, FaceRes, MobileFace distances of the face; no wrong-key probe
        (None, 0): (0.70, short, 0.9),  # short of the SFace and FaceRes targets
        (None, 1): (0.78, far, 0.9),  # short of the SFace target only: the best at the default reach
        (None, 2): (0.90, near, 0.9),  # FaceRes recognizes it
        (0.1, 0): (0.79, far, 0.9),  # short of the SFace target by less
        (0.1, 1): (0.75, far, 0.9),
        (0.1, 2): (0.95, near, 0.9),
    }
    face = [{"variant": v, "reach": r, "face_distances": list(d), "wrong_key_distances": None, "forehead_hair": 0.0} for (r, v), d in at_reach.items()]
    kept = replay_guard(face, 2, sighted(guard, None, "20%"), (0.1,))
    assert (kept.reach, kept.variant) == (0.1, 0)  # short of a target at the default reach: the larger margin, wider
    kept = replay_guard(face, 2, sighted(guard, None, "20%"), (0.1,), widening="independent")
    assert (kept.reach, kept.variant) == (None, 1)  # past both independent targets: the old rule kept it as it was
    kept = replay_guard(face, 2, sighted(guard, 0, "20%"), (0.1,))
    assert (kept.reach, kept.variant) == (None, 1)  # without SFace, variant 1 is done: the FaceRes-recognized 2 is never drawn
    rows = {(r["widening"], r["targets"], r["variants"], r["left_out"]): r for r in replay([face], [2], guard, (0.1,))}
    assert rows["rank", "20%", 2, "sface"]["median_distance"] == 0.78
    assert rows["rank", "20%", 2, "sface"]["below_floor"]["k"] == 0 and rows["rank", "20%", 2, "sface"]["short_of_target"]["k"] == 1
    assert rows["rank", "20%", 2, None]["wider_region"] == 1 and rows["rank", "20%", 2, None]["blurred"] == 0
    assert rows["independent", "20%", 2, None]["wider_region"] == 0
