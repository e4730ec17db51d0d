"""Video de-identification: every face of every frame, one key per tracked face, audio kept.

    from zoo import load
    from zoo.video import anonymize_video, recover_video

    m = load("personal")
    res = anonymize_video(m, "clip.mp4", "out/clip__personal.mp4", key="042917")
    print(res.report()["tracks"])                    # JSON-able: tracks, per-frame faces, codec, audio
    back = recover_video(m, "out/clip__personal.mp4", "out/clip__personal_recovered.mp4", key="042917")

How it works (two passes over the decoded frames, so a clip of any length never sits in memory):

1. **Detect and track.** Every frame goes through :func:`zoo.detection.detect_faces`; detections are
   linked into tracks by overlap / centre distance (:func:`track_faces`). A track that the detector
   loses for up to ``max_gap`` frames is bridged: the missing frames get a face interpolated between the
   detections on either side, and a track's first and last ``max_gap`` frames beyond its detections get
   an extrapolated one (fail closed per frame: a short detector gap never leaves a frame untouched).
2. **Process.** Faces are keyed by their track id (:meth:`zoo.pipeline.DeidPipeline.process_frames` with the track id as
   the face index), so a track keeps one key, hence one fake identity, for the whole clip.
   ``batch_frames`` frames at a time go through the method in one batched call. The frames are encoded
   again (H.264 in .mp4/.mov/.mkv, VP9 in .webm, MPEG-4 part 2 in .avi; ``lossless=True``: FFV1 RGB in
   .mkv) and the audio packets are copied unchanged (re-encoded to AAC only when the output container
   cannot hold the original audio codec).

Recovery: a lossy codec destroys the latent carrier (:mod:`zoo.carrier`: the low bits of the pixels),
and recovery then leaves each face as it is (status ``no_code``); ``lossless=True`` at anonymize time
keeps the carrier intact and recovery exact. :func:`recover_video` uses the anonymize report's
per-frame faces and track ids when it is given (``faces_from=``; the CLI finds ``<video>.json`` next
to the video), else it detects and tracks the anonymized clip itself.

Needs PyAV (``av``), whose wheels ship their own FFmpeg libraries; reading and writing the containers
is :mod:`zoo.video_io`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .detection import detect_faces
from .detectors import DetectedFace
from .video_io import VideoError, VideoWriter, probe, probe_info, read_frames, write_video

__all__ = [
    "VIDEO_EXTS",
    "is_video",
    "TrackedFace",
    "track_faces",
    "VideoResult",
    "anonymize_video",
    "recover_video",
    "read_frames",
    "write_video",
    "probe",
    "VideoError",
]

VIDEO_EXTS = {".mp4", ".mov", ".m4v", ".mkv", ".webm", ".avi"}


def is_video(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() in VIDEO_EXTS


# ====================================================================== tracking
@dataclass
class TrackedFace:
    """A face in one frame: the detection (or the bridged estimate) and the track it belongs to."""

    face: DetectedFace
    track: int
    source: str = "detected"  # "detected" | "gap" (interpolated between detections) | "extended" (before/after)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def _shift(face: DetectedFace, d: np.ndarray, source: str) -> DetectedFace:
    return DetectedFace(face.box + np.tile(d, 2), face.landmarks + d, face.score, source)


def _lerp(a: DetectedFace, b: DetectedFace, t: float) -> DetectedFace:
    return DetectedFace((1 - t) * a.box + t * b.box, (1 - t) * a.landmarks + t * b.landmarks, min(a.score, b.score), "gap")


def track_faces(
    detections: Sequence[Sequence[DetectedFace]],
    frame_size: tuple[int, int] | None = None,
    max_gap: int = 5,
    min_iou: float = 0.2,
    extend: int = 2,
) -> list[list[TrackedFace]]:
    """Link per-frame detections into tracks; one list of :class:`TrackedFace` per frame (by track id).

    A detection joins the track whose predicted box (last box moved by the track's velocity) it overlaps
    most (IoU >= ``min_iou``) or, failing that, whose centre is within half a face of its own; else it
    starts a new track (ids count up from 0 in order of first appearance, left to right). Gaps of up to
    ``max_gap`` frames inside a track are filled by interpolation, and each track is extended by
    ``min(extend, max_gap)`` frames before its first and after its last detection (moving at its velocity;
    only while the face centre stays inside the frame, when ``frame_size`` = (width, height) is given): a
    face the detector picks up a frame late or drops a frame early is still covered, at the price of a
    processed patch where a face that really appeared or left would have been.
    """
    n = len(detections)
    tracks: list[dict[int, DetectedFace]] = []
    last: list[int] = []
    for t, faces in enumerate(detections):
        live = [i for i in range(len(tracks)) if t - last[i] <= max_gap + 1]
        pairs = []
        for i in live:
            pred = _predict(tracks[i], t)
            size = max(pred.width, pred.height, 1.0)
            for j, f in enumerate(faces):
                iou = _iou(pred.box, f.box)
                dist = math.dist(pred.center, f.center)
                if iou >= min_iou or dist <= 0.5 * size:
                    pairs.append((-iou, dist / size, i, j))
        pairs.sort()
        used_t, used_d = set(), set()
        for _, _, i, j in pairs:
            if i in used_t or j in used_d:
                continue
            used_t.add(i)
            used_d.add(j)
            tracks[i][t] = faces[j]
            last[i] = t
        for j, f in enumerate(faces):
            if j not in used_d:
                tracks.append({t: f})
                last.append(t)
    out: list[list[TrackedFace]] = [[] for _ in range(n)]
    for tid, det in enumerate(tracks):
        frames = sorted(det)
        for t in frames:
            out[t].append(TrackedFace(det[t], tid, "detected"))
        for a, b in zip(frames, frames[1:]):
            for t in range(a + 1, b):  # b - a - 1 <= max_gap by construction
                out[t].append(TrackedFace(_lerp(det[a], det[b], (t - a) / (b - a)), tid, "gap"))
        v_start = _velocity(det, frames[:3])
        v_end = _velocity(det, frames[-3:])
        for k in range(1, min(extend, max_gap) + 1):
            for t, base, v in ((frames[0] - k, det[frames[0]], -v_start), (frames[-1] + k, det[frames[-1]], v_end)):
                if 0 <= t < n:
                    f = _shift(base, v * k, "extended")
                    if frame_size is None or (0 <= f.center[0] < frame_size[0] and 0 <= f.center[1] < frame_size[1]):
                        out[t].append(TrackedFace(f, tid, "extended"))
    for row in out:
        row.sort(key=lambda tf: tf.track)
    return out


def _velocity(det: dict[int, DetectedFace], frames: Sequence[int]) -> np.ndarray:
    """Pixels per frame of the face centre over the given (sorted) frames of a track."""
    if len(frames) < 2 or frames[-1] == frames[0]:
        return np.zeros(2)
    a, b = det[frames[0]], det[frames[-1]]
    return (np.array(b.center) - np.array(a.center)) / (frames[-1] - frames[0])


def _predict(det: dict[int, DetectedFace], t: int) -> DetectedFace:
    frames = sorted(det)[-3:]
    v = _velocity(det, frames)
    return _shift(det[frames[-1]], v * (t - frames[-1]), "predicted")


# ====================================================================== the method over a clip
@dataclass
class VideoResult:
    """What :func:`anonymize_video` / :func:`recover_video` did; :meth:`report` is JSON-serialisable."""

    output: Path
    method: str
    operation: str
    frames: int
    fps: float
    size: tuple[int, int]
    codec: str
    lossless: bool
    audio: str
    tracks: list[dict[str, Any]]
    frame_faces: list[list[dict[str, Any]]]
    key_fingerprint: str | None
    controls: dict[str, Any]
    weights: str | None
    seconds: float
    input: str = ""
    detector: str = ""
    max_gap: int = 5
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def fallbacks(self) -> int:
        """Faces (over all frames) that the method could not process and that were hard-blurred."""
        return sum(f["status"] != "processed" for row in self.frame_faces for f in row)

    def report(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "operation": self.operation,
            "input": self.input,
            "output": str(self.output),
            "kind": "video",
            "frames": self.frames,
            "fps": round(self.fps, 4),
            "size": list(self.size),
            "codec": self.codec,
            "lossless": self.lossless,
            "audio": self.audio,
            "detector": self.detector,
            "max_gap": self.max_gap,
            "tracks": self.tracks,
            "faces_processed": sum(len(r) for r in self.frame_faces),
            "frames_with_faces": sum(bool(r) for r in self.frame_faces),
            "fallbacks": self.fallbacks,
            "key_fingerprint": self.key_fingerprint,
            "controls": self.controls,
            "weights": self.weights,
            "seconds": round(self.seconds, 3),
            "frame_faces": self.frame_faces,
            **self.extra,
        }


def _progress(progress, desc: str, total: int | None):
    """A callable(n) advancing a bar; ``progress``: True (tqdm on stderr), False/None, or a callable
    ``progress(stage, done, total)`` (e.g. the app's progress hook)."""
    if callable(progress):
        state = {"done": 0}

        def step(k: int = 1) -> None:
            state["done"] += k
            progress(desc, state["done"], total)

        return step, (lambda: None)
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc=desc, unit="frame", file=sys.stderr, leave=False)
        return bar.update, bar.close
    return (lambda k=1: None), (lambda: None)


def anonymize_video(
    method, src_path, out_path, key=None, *, lossless: bool | None = None, max_gap: int = 5, batch_frames: int = 8, progress=True, **controls
) -> VideoResult:
    """Anonymize every face of a video; write ``out_path`` (container from its suffix: .mp4, .mov,
    .m4v, .mkv, .webm, .avi). ``lossless=True`` (``.mkv`` only) writes FFV1 RGB, which keeps the latent
    carrier of the demo methods intact (exact recovery); else H.264/VP9/MPEG-4 (smaller, lossy).

    ``key``: the secret (None: a fresh random one, forgotten; the clip then cannot be recovered, but each
    track still keeps one fake identity). ``controls``: the method's controls, plus ``min_face_score``
    (detector threshold). Returns a :class:`VideoResult` whose ``report()`` lists every face of every
    frame with its track. The file is written to a temporary name in the output folder and renamed at
    the end (removed on any error or interrupt).

    Demo methods: the identity-aware re-inversion (``identity_refine``) is off in video unless asked for.
    It costs 2.9-4.0 s per real face on 2 CPU threads (benchmarks/demo_speed.py), and a clip would pay
    it for every face of every frame. Pass ``identity_refine=1`` to have it anyway.
    """
    controls = _video_defaults(method, controls)
    return _run_video(method, "anonymize", src_path, out_path, key, bool(lossless), max_gap, batch_frames, progress, controls, None)


def _video_defaults(method, controls: dict) -> dict:
    """``controls`` with ``identity_refine=0`` where the method has that control and the caller did not set it."""
    names = {c.name for c in getattr(method, "controls", ())}
    if "identity_refine" in names and controls.get("identity_refine") is None:
        return {**controls, "identity_refine": 0.0}
    return dict(controls)


def recover_video(
    method,
    src_path,
    out_path,
    key,
    *,
    lossless: bool | None = None,
    max_gap: int = 5,
    batch_frames: int = 8,
    progress=True,
    faces_from: dict | str | os.PathLike | None = None,
    **controls,
) -> VideoResult:
    """Recover the faces of a video anonymized by :func:`anonymize_video` with the same key.

    ``faces_from``: the anonymize report (dict or JSON path) whose per-frame faces and track ids are
    used as they are (no detection); without it the anonymized clip is detected and tracked again.
    Carried latents (demo methods, lossless clips) are used when intact; a face without one (a lossy clip) is left
    as it is (status ``no_code``).
    """
    if not method.reversible:
        raise NotImplementedError(f"method {method.name!r} is not reversible")
    if key is None:
        raise ValueError("recover needs the key that was used to anonymize")
    if faces_from is not None and not isinstance(faces_from, dict):
        faces_from = json.loads(Path(faces_from).read_text())
    controls = _video_defaults(method, controls)
    return _run_video(method, "recover", src_path, out_path, key, bool(lossless), max_gap, batch_frames, progress, controls, faces_from)


def _faces_from_report(report: dict, n_frames: int) -> list[list[TrackedFace]]:
    rows = report.get("frame_faces")
    if not isinstance(rows, list):
        raise VideoError("the report has no per-frame faces (frame_faces)")
    if len(rows) != n_frames:
        raise VideoError(f"the report lists {len(rows)} frames, the video has {n_frames}")
    out = []
    for row in rows:
        out.append(
            [TrackedFace(DetectedFace(f["box"], f["landmarks"], f.get("score", 1.0), "report"), int(f["track"]), f.get("source", "detected")) for f in row]
        )
    return out


def _run_video(method, operation, src_path, out_path, key, lossless, max_gap, batch_frames, progress, controls, faces_from) -> VideoResult:
    from . import carrier
    from .detectors import resolve_detector
    from .keys import Secret
    from .pipeline import DeidPipeline, attach_carried

    t0 = time.perf_counter()
    src, out = Path(src_path), Path(out_path)
    if not src.is_file():
        raise VideoError(f"no such video: {src}")
    if out.suffix.lower() not in VIDEO_EXTS:
        raise VideoError(f"unsupported output video type {out.suffix!r}; use one of {', '.join(sorted(VIDEO_EXTS))}")
    if max_gap < 0 or batch_frames < 1:
        raise ValueError("max_gap must be >= 0 and batch_frames >= 1")
    pipeline = DeidPipeline(method)
    min_score, guard, controls = pipeline.split_run_options(operation, controls)
    info = probe_info(src)

    # the secret: stretched once; without a key a fresh random one, so that each track still keeps one identity
    secret = None
    fingerprint = None
    if method.uses_key or operation == "recover":
        secret = method.run_secret(key) if key is not None else None
        if secret is None and method.uses_key:
            secret = Secret.random()
        elif secret is not None:
            fingerprint = secret.fingerprint
    carries = method.carries_latent
    tag = carrier.method_tag(method.name)

    # pass 1: detect (or read the report) and track
    step, done = _progress(progress, "detect", info.frames)
    detections: list[list[DetectedFace]] = []
    found_blocks: list[list] = []
    n = 0
    try:
        for rgb, _, _ in read_frames(src):
            if faces_from is None:
                detections.append(detect_faces(rgb, min_score=min_score))
            if carries and operation == "recover":
                found_blocks.append(carrier.extract_all(rgb, tag))
            n += 1
            step(1)
    finally:
        done()
    if n == 0:
        raise VideoError(f"{src}: no frames")
    if faces_from is not None:
        tracked = _faces_from_report(faces_from, n)
    else:
        tracked = track_faces(detections, (info.width, info.height), max_gap=max_gap)

    # pass 2: process in batches of frames, encode, copy the audio
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.tmp{out.suffix}")
    writer = None
    frame_faces: list[list[dict[str, Any]]] = []
    step, done = _progress(progress, operation, n)
    try:
        writer = VideoWriter(tmp, info.width, info.height, info.fps, info.time_base, str(src), lossless)
        buf: list[tuple[np.ndarray, int | None]] = []
        t = 0

        def flush() -> None:
            nonlocal t
            frames = [b[0] for b in buf]
            rows = tracked[t : t + len(buf)]
            faces = [[tf.face for tf in row] for row in rows]
            indices = [[tf.track for tf in row] for row in rows]
            carried = None
            if carries and operation == "recover":
                carried = []
                for k, row in enumerate(rows):
                    fs, idx, car = attach_carried(faces[k], found_blocks[t + k], indices[k])
                    # a block that no tracked face claimed is a face too (fail closed the other way round)
                    faces[k], indices[k] = fs, idx
                    carried.append(car)
                    extra = len(fs) - len(row)
                    rows[k] = list(row) + [TrackedFace(f, i, "carrier") for f, i in zip(fs[len(row) :], idx[len(row) :])] if extra > 0 else row
            # the privacy guard checks every face of every frame; no key variants (a track keeps one fake
            # identity), so a face still matched is drawn over a wider region, or blurred, in that frame
            results = pipeline.process_frames(operation, frames, faces, indices, secret, controls, carried, guard=guard, guard_variants=0)
            for k, ((canvas, records), (_, pts)) in enumerate(zip(results, buf)):
                writer.write(canvas, pts)
                row = rows[k]
                frame_faces.append(
                    [
                        {
                            "track": int(r.index),
                            "source": tf.source,
                            "box": [round(v, 2) for v in r.box],
                            "landmarks": [[round(a, 2), round(b, 2)] for a, b in r.landmarks],
                            "score": round(r.score, 4),
                            "status": r.status,
                            "error": r.error,
                            "latent_carried": r.latent_carried,
                            "guard": r.guard,
                        }
                        for tf, r in zip(row, records)
                    ]
                )
            t += len(buf)
            step(len(buf))
            buf.clear()

        for rgb, pts, _tb in read_frames(src):
            if t + len(buf) >= n:
                break
            buf.append((rgb, pts))
            if len(buf) >= batch_frames:
                flush()
        if buf:
            flush()
        codec_used, audio_used = writer.codec, writer.audio_mode
        writer.close()
        writer = None
        os.replace(tmp, out)
    except BaseException:
        if writer is not None:
            writer.abort()
        tmp.unlink(missing_ok=True)
        raise
    finally:
        done()

    tracks: dict[int, dict[str, Any]] = {}
    for i, row in enumerate(frame_faces):
        for f in row:
            tr = tracks.setdefault(f["track"], {"track": f["track"], "first_frame": i, "last_frame": i, "detected": 0, "gap": 0, "extended": 0, "other": 0})
            tr["last_frame"] = i
            tr[f["source"] if f["source"] in ("detected", "gap", "extended") else "other"] += 1
    return VideoResult(
        output=out,
        method=method.name,
        operation=operation,
        frames=n,
        fps=info.fps,
        size=(info.width, info.height),
        codec=codec_used,
        lossless=lossless,
        audio=audio_used,
        tracks=[tracks[k] for k in sorted(tracks)],
        frame_faces=frame_faces,
        key_fingerprint=fingerprint,
        controls=controls,
        weights=method.weights_text,
        seconds=time.perf_counter() - t0,
        input=str(src),
        detector="report" if faces_from is not None else resolve_detector("auto"),
        max_gap=max_gap,
    )
