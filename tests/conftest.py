"""Shared test fixtures: offline Hub, two torch/OpenCV threads, real photos shipped inside packages."""

from __future__ import annotations

import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before anything imports huggingface_hub
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# the reversible methods run on the 64 px DCGAN tier here (zoo.load's ZOO_LATENT_SPACE): the routine suite checks
# the photo pipeline's mechanics in seconds; the FFHQ-grade W+ tier, their default, has its own tests, which name
# it (tests/test_wplus_identity.py)
os.environ.setdefault("ZOO_LATENT_SPACE", "dcgan")

import importlib.util  # noqa: E402

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

torch.set_num_threads(2)
cv2.setNumThreads(2)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny networks run faster on one torch thread (no sync overhead on a small, shared machine).

    Use with ``pytestmark = pytest.mark.usefixtures("one_thread")`` in a test module."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _package_file(package: str, *parts: str) -> Path | None:
    """A data file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0], *parts)
    return path if path.is_file() else None


T1_PATH = _package_file("insightface", "data", "images", "t1.jpg")  # 6 faces, 1280x886
GRACE_HOPPER_PATH = _package_file("matplotlib", "mpl-data", "sample_data", "grace_hopper.jpg")


@pytest.fixture(scope="session")
def t1_path() -> Path:
    """insightface's t1.jpg: a real group photo with 6 faces (shipped in the insightface wheel)."""
    if T1_PATH is None:
        pytest.skip("insightface (its data/images/t1.jpg) is not installed")
    return T1_PATH


@pytest.fixture(scope="session")
def t1_rgb(t1_path) -> np.ndarray:
    from zoo.imageio import load_image

    rgb, _ = load_image(t1_path)
    rgb.setflags(write=False)
    return rgb


@pytest.fixture(scope="session")
def t1_faces(t1_rgb):
    from zoo.detection import detect_faces

    return detect_faces(t1_rgb, "yunet")


@pytest.fixture(scope="session")
def astronaut_rgb() -> np.ndarray:
    """skimage.data.astronaut(): a real 512x512 portrait (one face), shipped in scikit-image."""
    data = pytest.importorskip("skimage.data")
    rgb = np.ascontiguousarray(data.astronaut())
    rgb.setflags(write=False)
    return rgb


@pytest.fixture(scope="session")
def no_face_rgb() -> np.ndarray:
    """skimage.data.coffee(): a real photo with no face."""
    data = pytest.importorskip("skimage.data")
    return np.ascontiguousarray(data.coffee())


@pytest.fixture(scope="session")
def grace_hopper_path() -> Path:
    """matplotlib's sample grace_hopper.jpg (one face); skipped when matplotlib is not installed."""
    if GRACE_HOPPER_PATH is None:
        pytest.skip("matplotlib (its sample_data/grace_hopper.jpg) is not installed")
    return GRACE_HOPPER_PATH


@pytest.fixture(scope="session")
def dlib_judge():
    from zoo.judges import get_judge

    try:
        return get_judge("dlib")
    except (ImportError, FileNotFoundError) as err:
        pytest.skip(f"dlib judge unavailable: {err}")


@pytest.fixture(scope="session")
def sface_judge():
    from zoo.judges import get_judge

    return get_judge("sface")


@pytest.fixture(scope="session")
def faces8() -> np.ndarray:
    """8 FFHQ-aligned uint8 crops [8,256,256,3]: the tuning photo's 6 faces and 2 generated ones (recognizer tests)."""
    from benchmarks.real_photos import package_file, read_image
    from zoo.alignment import align_face
    from zoo.detection import detect_faces
    from zoo.nn.mobilestylegan import load_mobilestylegan

    t1 = read_image(package_file("insightface", "data", "images", "t1.jpg"))
    crops = [align_face(t1, f.landmarks, 256).crop for f in detect_faces(t1)]
    g = load_mobilestylegan()
    with torch.no_grad():
        z = torch.from_numpy(np.random.default_rng(5).standard_normal((8 - len(crops), 512)).astype(np.float32))
        img = g.synthesis(g.truncate(g.mapping(z), 0.7), size=256)
    crops += list(((img.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy())
    return np.stack(crops)


@pytest.fixture
def tfjs_reference(tmp_path):
    """``run(graph_json, x_nchw, output_node) -> float32 [N, D]``: TensorFlow.js (``.node/``, CPU backend) running a
    graph model on ``x`` (given NCHW, fed NHWC) through ``tools/tfjs_reference.mjs``; skips without node or TFJS."""
    import json
    import shutil
    import subprocess

    root = Path(__file__).resolve().parent.parent
    if shutil.which("node") is None:
        pytest.skip("node is not installed (setup installs TensorFlow.js with npm)")
    if not (root / ".node" / "node_modules" / "@tensorflow" / "tfjs-converter").is_dir():
        pytest.skip("TensorFlow.js is not in .node/ (bash scripts/fetch_recognizer.sh installs it)")

    def run(graph_file: Path, x: torch.Tensor, output: str) -> np.ndarray:
        nhwc = x.permute(0, 2, 3, 1).contiguous().numpy().astype("<f4")
        nhwc.tofile(tmp_path / "in.f32")
        cmd = [
            "node",
            str(root / "tools" / "tfjs_reference.mjs"),
            str(graph_file),
            str(tmp_path / "in.f32"),
            ",".join(map(str, nhwc.shape)),
            str(tmp_path / "out"),
            output,
        ]
        subprocess.run(cmd, check=True, cwd=root, capture_output=True, timeout=300)
        (spec,) = json.loads((tmp_path / "out.json").read_text())["outputs"]
        return np.fromfile(tmp_path / "out.0.f32", "<f4").reshape(spec["shape"])

    return run


def psnr_outside(a: np.ndarray, b: np.ndarray, boxes) -> float:
    """PSNR (dB) of ``b`` against ``a`` over the pixels outside every [x0, y0, x1, y1] box."""
    keep = np.ones(a.shape[:2], bool)
    for x0, y0, x1, y1 in boxes:
        keep[int(np.floor(y0)) : int(np.ceil(y1)), int(np.floor(x0)) : int(np.ceil(x1))] = False
    mse = ((a[keep].astype(np.float64) - b[keep].astype(np.float64)) ** 2).mean()
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


def recognizer_graph_or_skip(module) -> Path:
    """The TFJS graph file of a recognizer module (``zoo.nn.faceres`` or ``zoo.nn.mobileface``) from the cache, or a
    skip naming the setup command where the npm tarball's files are absent."""
    from zoo.nn.faceres import MissingRecognizerError

    try:
        graph, _ = module._source_files()
    except MissingRecognizerError as err:
        pytest.skip(str(err))
    return graph
