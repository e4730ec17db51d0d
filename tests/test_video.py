"""Video: tracks keep one key, detector gaps are bridged (fail closed), audio kept, recovery, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

av = pytest.importorskip("av")

import zoo.video as zv  # noqa: E402
from zoo import load  # noqa: E402
from zoo.detectors import DetectedFace  # noqa: E402
from zoo.pipeline import DeidPipeline  # noqa: E402

H, W, N = 96, 192, 8


@pytest.fixture(scope="module")
def face_crops():
    import cv2

    from zoo.assets import example_images
    from zoo.detection import detect_faces
    from zoo.imageio import load_image

    rgb, _ = load_image(str(example_images()["group"]))
    crops = []
    for f in detect_faces(rgb)[:2]:
        cx, cy = f.center
        s = 1.5 * max(f.width, f.height)
        x0, y0 = int(cx - s / 2), int(cy - s / 2)
        crops.append(cv2.resize(rgb[max(0, y0) : y0 + int(s), max(0, x0) : x0 + int(s)], (72, 72), interpolation=cv2.INTER_AREA))
    return crops


def _frames(crops, n=N):
    """Face A drifts left on the right half; face B appears on the LEFT from frame 4 (so a left-to-right
    photo index would change A's key from 0 to 1; its track keeps 0)."""
    out = []
    for i in range(n):
        fr = np.full((H, W, 3), 90, np.uint8)
        x = 110 - 3 * i
        fr[12:84, x : x + 72] = crops[0]
        if i >= 4:
            fr[12:84, 8 + 2 * i : 80 + 2 * i] = crops[1]
        out.append(fr)
    return out


@pytest.fixture(scope="module")
def clip(tmp_path_factory, face_crops):
    path = tmp_path_factory.mktemp("clip") / "clip.mp4"
    zv.write_video(path, _frames(face_crops), fps=8, audio_tone_hz=440)
    return path


def _face_diff(a: np.ndarray, b: np.ndarray, box) -> float:
    x0, y0, x1, y1 = (int(round(v)) for v in box)
    return float(np.abs(a[y0:y1, x0:x1].astype(np.int16) - b[y0:y1, x0:x1]).mean())


def test_video_turns_the_identity_reinversion_off_unless_asked():
    from zoo import load
    from zoo.video import _video_defaults

    demo, blur = load("ifadit"), load("blur")
    assert _video_defaults(demo, {})["identity_refine"] == 0.0
    assert _video_defaults(demo, {"identity_refine": 1})["identity_refine"] == 1
    assert _video_defaults(demo, {"refine_steps": 5}) == {"refine_steps": 5, "identity_refine": 0.0}
    assert "identity_refine" not in _video_defaults(blur, {"strength": 0.5})

    # the app's video tab sends every slider; the ones left at the default do not override video's
    from app.video_tab import changed_controls

    sent = changed_controls(demo, {"identity_refine": 1.0, "identity_check": 0.4, "refine_steps": 30})
    assert sent == {"refine_steps": 30} and _video_defaults(demo, sent)["identity_refine"] == 0.0
    assert changed_controls(demo, {"identity_refine": 2.0}) == {"identity_refine": 2.0}


def test_tracker_bridges_gaps_and_keeps_ids():
    def face(x):
        return DetectedFace([x, 10, x + 40, 50], [[x + 12, 25], [x + 28, 25], [x + 20, 33], [x + 14, 42], [x + 26, 42]], 0.9)

    # track A moves right 2 px/frame, missed by the detector in frames 3 and 4; B appears at frame 5
    dets = [[face(100 + 2 * t)] if t not in (3, 4) else [] for t in range(10)]
    for t in range(5, 10):
        dets[t] = [face(10), *dets[t]]
    rows = zv.track_faces(dets, (200, 100), max_gap=2, extend=2)
    a = [[tf for tf in row if tf.track == 0] for row in rows]
    assert all(len(r) == 1 for r in a)  # track 0 in every frame, gaps included
    assert [r[0].source for r in a][2:6] == ["detected", "gap", "gap", "detected"]
    assert abs(a[3][0].face.box[0] - 106) < 1e-6 and abs(a[4][0].face.box[0] - 108) < 1e-6  # interpolated
    b = [[tf for tf in row if tf.track == 1] for row in rows]
    assert [len(r) for r in b] == [0, 0, 0, 1, 1, 1, 1, 1, 1, 1]  # B extended 2 frames back (max_gap)
    assert all(tf.source == "extended" for r in b[3:5] for tf in r)
    # a gap longer than max_gap splits the track
    dets2 = [[face(100)] if t in (0, 5) else [] for t in range(6)]
    assert {tf.track for row in zv.track_faces(dets2, max_gap=2) for tf in row} == {0, 1}


def test_anonymize_video_tracks_keep_one_key_and_audio(clip, tmp_path, monkeypatch):
    m = load("noise")
    seen: list[list[int]] = []
    orig = DeidPipeline.keys_for

    def spy(self, operation, secret, indices):
        seen.append(list(indices))
        return orig(self, operation, secret, indices)

    monkeypatch.setattr(DeidPipeline, "keys_for", spy)
    out = tmp_path / "anon.mp4"
    res = zv.anonymize_video(m, clip, out, key="video-key", progress=False, batch_frames=3)
    rep = json.loads(json.dumps(res.report()))  # JSON-able
    assert rep["frames"] == N and rep["audio"] == "copied" and rep["kind"] == "video"
    info = zv.probe(out)
    assert info["audio_codec"] == "aac" and (info["width"], info["height"]) == (W, H)
    assert len(seen) == 3  # 8 frames in batches of 3: one method call per batch
    # face A (the right one) is track 0 in every frame, B (appears on the left at frame 4) is track 1
    for i, row in enumerate(rep["frame_faces"]):
        by_x = sorted(row, key=lambda f: f["box"][0])
        assert by_x[-1]["track"] == 0
        if i >= 4:
            assert len(row) == 2 and by_x[0]["track"] == 1
    assert [t["track"] for t in rep["tracks"]] == [0, 1]
    # every face changed in every frame
    src = [f for f, _, _ in zv.read_frames(clip)]
    dst = [f for f, _, _ in zv.read_frames(out)]
    assert len(dst) == N
    for s, d, row in zip(src, dst, rep["frame_faces"]):
        for f in row:
            assert _face_diff(s, d, f["box"]) > 8


def test_detector_gap_frames_are_not_left_untouched(clip, tmp_path, monkeypatch):
    calls = {"n": 0}
    real = zv.detect_faces

    def flaky(rgb, **kw):
        calls["n"] += 1
        return [] if calls["n"] in (3, 4) else real(rgb, **kw)  # frames 2 and 3: detector misses

    monkeypatch.setattr(zv, "detect_faces", flaky)
    out = tmp_path / "gap.mkv"
    res = zv.anonymize_video(load("blur"), clip, out, progress=False, lossless=True)
    rows = res.frame_faces
    a = [[f for f in row if f["track"] == 0] for row in rows]
    assert [f["source"] for f in a[2]] == ["gap"] and [f["source"] for f in a[3]] == ["gap"]
    assert [f["source"] for f in rows[3] if f["track"] == 1] == ["extended"]  # B: picked up one frame late
    src = [f for f, _, _ in zv.read_frames(clip)]
    dst = [f for f, _, _ in zv.read_frames(out)]
    for i in (2, 3):
        assert _face_diff(src[i], dst[i], a[1][0]["box"]) > 8  # the face was blurred in the gap frames
    assert res.report()["audio"] == "copied"


def test_recover_right_key_differs_from_wrong_key(clip, tmp_path):
    m = load("personal")
    anon = tmp_path / "anon.mkv"
    res = zv.anonymize_video(m, clip, anon, key="042917", progress=False, lossless=True, refine_steps=0)
    assert any(f["latent_carried"] for row in res.frame_faces for f in row)
    right = zv.recover_video(m, anon, tmp_path / "right.mkv", "042917", progress=False, lossless=True, faces_from=res.report(), refine_steps=0)
    wrong = zv.recover_video(m, anon, tmp_path / "wrong.mkv", "111111", progress=False, lossless=True, refine_steps=0)  # re-detects
    assert right.detector == "report" and wrong.detector != "report"
    src = [f for f, _, _ in zv.read_frames(clip)]
    r = [f for f, _, _ in zv.read_frames(tmp_path / "right.mkv")]
    w = [f for f, _, _ in zv.read_frames(tmp_path / "wrong.mkv")]
    tracked = [[f for f in row if f["track"] == 0][0] for row in res.frame_faces]
    boxes = [f["box"] for f in tracked]
    between = np.mean([_face_diff(x, y, b) for x, y, b in zip(r, w, boxes)])
    assert between > 5  # the two keys give different faces
    # and the right one is nearer the person (SFace at the face's place; a blurred face's recovery is drawn over its
    # whole blurred rectangle, which pixel differences judge no better than the blur)
    from zoo.detectors import DetectedFace
    from zoo.judges import get_judge

    sface = get_judge("sface")
    faces = [[DetectedFace(f["box"], f["landmarks"], 1.0)] for f in tracked]

    def distance(frames):
        return np.mean([sface.distance(sface.embed_photo_faces(s, f), sface.embed_photo_faces(x, f))[0] for s, x, f in zip(src, frames, faces)])

    assert distance(r) < distance(w)


def test_cli_video_and_errors(clip, tmp_path, capsys):
    from zoo.cli import main

    out = tmp_path / "out"
    assert main(["anonymize", str(clip), "--method", "pixelate", "--key", "k", "--out", str(out), "-q"]) == 0
    rep = json.loads((out / "clip__pixelate.json").read_text())
    assert rep["kind"] == "video" and rep["frames"] == N and rep["key_source"] == "--key"
    assert zv.probe(out / "clip__pixelate.mp4")["audio_codec"] == "aac"
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video")
    capsys.readouterr()
    assert main(["anonymize", str(bad), "--method", "blur", "--out", str(out), "-q"]) == 1
    err = capsys.readouterr().err
    assert "cannot read video" in err and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == ["clip__pixelate.json", "clip__pixelate.mp4"]  # nothing half-written


def test_interrupt_leaves_no_temp_file(clip, tmp_path, monkeypatch):
    m = load("blur")
    calls = {"n": 0}
    real = DeidPipeline.process_frames

    def boom(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(self, *a, **kw)

    monkeypatch.setattr(DeidPipeline, "process_frames", boom)
    with pytest.raises(KeyboardInterrupt):
        zv.anonymize_video(m, clip, tmp_path / "x.mp4", progress=False, batch_frames=2)
    assert list(tmp_path.iterdir()) == []
