"""The third recognizer (zoo.nn.mobileface): converter, parity with TensorFlow.js, ArcFace crop, judge."""

import numpy as np
import pytest
import torch
from conftest import recognizer_graph_or_skip

from zoo.nn import faceres as FR
from zoo.nn import mobileface as MF


def _arcface_faces(crops: np.ndarray) -> np.ndarray:
    import cv2

    from zoo.alignment import ffhq_template, similarity_lstsq
    from zoo.judges import ARCFACE_TEMPLATE_112

    m = similarity_lstsq(ffhq_template(crops.shape[1]), ARCFACE_TEMPLATE_112)
    return np.stack([cv2.warpAffine(c, m, (112, 112), flags=cv2.INTER_LINEAR) for c in crops])


def test_missing_files_name_setup(monkeypatch, tmp_path):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    with pytest.raises(FR.MissingRecognizerError, match="scripts/setup.sh"):
        MF._source_files()


@pytest.mark.parametrize("change", ["stride", "normalisation", "activation"])
def test_converter_rejects_a_changed_graph(change):
    from zoo.convert import ConversionError
    from zoo.convert.tfjs_graph import read_tfjs_graph

    graph = read_tfjs_graph(recognizer_graph_or_skip(MF))
    if change == "stride":
        graph.nodes["depthwise_3"].attrs["strides"] = [1, 1, 1, 1]
    elif change == "normalisation":
        graph.constants["minusscalar0_second"] = np.array([127.0], np.float32)
    else:
        graph.constants["Minimum_4/x"] = np.float32(1.0)
    with pytest.raises(ConversionError):
        MF.convert_mobileface(graph)


def test_network_gives_one_256_d_descriptor_per_face():
    """256-d descriptors, finite, one per face, and a face's descriptor does not depend on its batch."""
    recognizer_graph_or_skip(MF)
    net = MF.load_mobileface()
    x = MF.mobileface_input(np.random.default_rng(0).integers(0, 256, (4, 112, 112, 3), dtype=np.uint8))
    with torch.no_grad():
        e = net(x)
        one = net(x[2:3])
    assert e.shape == (4, 256) and torch.isfinite(e).all()
    assert torch.nn.functional.cosine_similarity(e[2:3], one).item() > 0.9999


@pytest.mark.slow  # node + TensorFlow.js
def test_parity_with_tensorflow_js(faces8, tfjs_reference):
    """Our network against TensorFlow.js running the package's own graph: descriptor cosine >= 0.9999 on 8 faces."""
    graph_file = recognizer_graph_or_skip(MF)
    x = MF.mobileface_input(_arcface_faces(faces8))
    ref = tfjs_reference(graph_file, x, "batchnorm0/add_1")
    assert ref.shape == (8, 256)
    with torch.no_grad():
        ours = MF.load_mobileface()(x).numpy()
    cos = (ours * ref).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() >= 0.9999, cos
    assert np.abs(ours - ref).max() < 1e-3 * np.abs(ref).max()


def test_judge_separates_people_and_keeps_a_person(faces8):
    """Same face mirrored: above the calibrated threshold; the tuning photo's 6 people: below it."""
    from zoo.judges import get_judge

    recognizer_graph_or_skip(MF)
    j = get_judge("mobileface")
    e = j.embed_aligned(faces8[:6])
    em = j.embed_aligned(np.ascontiguousarray(faces8[:6, :, ::-1]))
    assert e.shape == (6, 256)
    assert j.same_person(e, em).all()
    iu = np.triu_indices(6, 1)
    n = e / np.linalg.norm(e, axis=1, keepdims=True)
    assert ((n @ n.T)[iu] < j.threshold).all()


def test_photo_and_crop_embeddings_agree():
    """A face embedded from the photo (ArcFace warp of its detected landmarks) and from its FFHQ crop (warp of the FFHQ
    template points, a slightly different crop): the same person, well past the threshold."""
    from zoo.alignment import align_face
    from zoo.assets import example_images
    from zoo.detection import detect_faces
    from zoo.imageio import load_image
    from zoo.judges import get_judge

    recognizer_graph_or_skip(MF)
    rgb = load_image(example_images()["astronaut"])[0]
    faces = detect_faces(rgb)
    j = get_judge("mobileface")
    a = j.embed_photo_faces(rgb, faces)
    b = j.embed_aligned(align_face(rgb, faces[0].landmarks, 256).crop)
    assert j.score(a, b)[0] > max(0.7, j.threshold + 0.2)
