"""Video de-identification: every face of every frame, one key per tracked face, audio kept.

    from zoo import load
    from zoo.video import anonymize_video, recover_video

    m = load("personal")
    res = anonymize_video(m, "clip.mp4", "out/clip__personal.mp4", key="042917")
    print(res.report()["tracks"])                    # JSON-able: tracks, per-frame faces, codec, audio
    back = recover_video(m, "out/clip__personal.mp4", "out/clip__personal_recovered.mp4", key="042917")

How it works (two passes over the decoded frames, so a clip of any length never sits in memory):

1. **Detect and track.** Every frame goes through :func:`zoo.pipeline.detect_faces`; detections are
   linked into tracks by overlap / centre distance (:func:`track_faces`). A track that the detector
   loses for up to ``max_gap`` frames is bridged: the missing frames get a face interpolated between the
   detections on either side, and a track's first and last ``max_gap`` frames beyond its detections get
   an extrapolated one (fail closed per frame: a short detector gap never leaves a frame untouched).
2. **Process.** Faces are keyed by their track id (``DeidMethod.process_frames`` with the track id as
   the face index), so a track keeps one key, hence one fake identity, for the whole clip.
   ``batch_frames`` frames at a time go through the method in one batched call. The frames are encoded
   again (H.264 in .mp4/.mov/.mkv, VP9 in .webm, MPEG-4 part 2 in .avi; ``lossless=True``: FFV1 RGB in
   .mkv) and the audio packets are copied unchanged (re-encoded to AAC only when the output container
   cannot hold the original audio codec).

Recovery: a lossy codec destroys the latent carrier (:mod:`zoo.carrier`: the low bits of the pixels),
so the demo methods then re-encode each face from its pixels; ``lossless=True`` at anonymize time
keeps the carrier intact and recovery exact. :func:`recover_video` uses the anonymize report's
per-frame faces and track ids when it is given (``faces_from=``; the CLI finds ``<video>.json`` next
to the video), else it detects and tracks the anonymized clip itself.

Needs PyAV (``av``), whose wheels ship their own FFmpeg libraries.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from .pipeline import DetectedFace, detect_faces

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

#: output video codec per container (the first one this FFmpeg build can encode is used)
_CODECS = {
    ".mp4": ("libx264", "mpeg4"),
    ".m4v": ("libx264", "mpeg4"),
    ".mov": ("libx264", "mpeg4"),
    ".mkv": ("libx264", "mpeg4"),
    ".webm": ("libvpx-vp9", "libvpx"),
    ".avi": ("mpeg4",),
}
#: audio codecs each container can hold as they are (others are re-encoded, see _audio_plan)
_AUDIO_COPY = {
    ".mp4": {"aac", "mp3", "ac3", "eac3", "alac", "opus", "flac"},
    ".m4v": {"aac", "mp3", "ac3", "eac3", "alac"},
    ".mov": {"aac", "mp3", "ac3", "eac3", "alac", "pcm_s16le", "pcm_s16be", "pcm_s24le"},
    ".mkv": None,  # anything
    ".webm": {"opus", "vorbis"},
    ".avi": {"mp3", "ac3", "pcm_s16le", "aac"},
}
_AUDIO_FALLBACK = {".webm": "libopus", ".avi": "mp3"}  # else aac


class VideoError(ValueError):
    """A video the tool cannot read or write (one-line message, no traceback in the CLI)."""


def is_video(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() in VIDEO_EXTS


def _av():
    try:
        import av  # noqa: F401
    except ImportError as err:  # pragma: no cover - av is in requirements.txt
        raise VideoError("video needs PyAV: pip install av==18.1.0") from err
    import av

    return av


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


# ====================================================================== reading and writing
@dataclass
class _Probe:
    width: int
    height: int
    fps: float
    frames: int | None
    duration: float | None
    video_codec: str
    audio_codec: str | None
    time_base: Any = None


def probe(path: str | os.PathLike) -> dict[str, Any]:
    """Width, height, fps, frame count (when the container knows it), duration, codecs."""
    p = _probe(path)
    return {k: getattr(p, k) for k in p.__dataclass_fields__ if k != "time_base"}


def _probe(path) -> _Probe:
    av = _av()
    try:
        with av.open(str(path)) as c:
            if not c.streams.video:
                raise VideoError(f"{path}: no video stream")
            vs = c.streams.video[0]
            rate = vs.average_rate or vs.guessed_rate or vs.base_rate
            fps = float(rate) if rate else 25.0
            dur = float(c.duration / 1e6) if c.duration else None
            audio = c.streams.audio[0].codec_context.name if c.streams.audio else None
            return _Probe(vs.codec_context.width, vs.codec_context.height, fps, int(vs.frames) or None, dur, vs.codec_context.name, audio, vs.time_base)
    except VideoError:
        raise
    except (av.FFmpegError, OSError) as err:
        raise VideoError(f"cannot read video {path}: {err}") from None


def read_frames(path: str | os.PathLike) -> Iterator[tuple[np.ndarray, int | None, Any]]:
    """Decode the first video stream: yields (uint8 RGB [H, W, 3], pts, time_base)."""
    av = _av()
    try:
        c = av.open(str(path))
    except (av.FFmpegError, OSError) as err:
        raise VideoError(f"cannot read video {path}: {err}") from None
    try:
        vs = c.streams.video[0]
        vs.thread_type = "AUTO"
        for frame in c.decode(vs):
            yield frame.to_ndarray(format="rgb24"), frame.pts, frame.time_base
    except av.FFmpegError as err:
        raise VideoError(f"cannot decode video {path}: {err}") from None
    finally:
        c.close()


class _Writer:
    """Encode RGB frames into ``path`` (container from its suffix) and copy ``audio_from``'s audio."""

    def __init__(self, path: Path, width: int, height: int, fps: float, time_base, audio_from: str | None, lossless: bool):
        av = _av()
        self.av = av
        self.path = path
        ext = path.suffix.lower()
        if lossless and ext != ".mkv":
            raise VideoError(f"lossless video is written as .mkv (FFV1), not {ext}")
        self.c = av.open(str(path), "w")
        from fractions import Fraction

        rate = Fraction(fps).limit_denominator(100000)
        if lossless:
            codec, pix_fmt, options = "ffv1", "bgr0", {"level": "3", "g": "1"}
        else:
            names = _CODECS.get(ext, ("libx264", "mpeg4"))
            codec = next((n for n in names if _can_encode(av, n)), None)
            if codec is None:
                raise VideoError(f"this FFmpeg build cannot encode video for {ext}")
            pix_fmt = "yuv420p" if (width % 2 == 0 and height % 2 == 0) or codec != "libx264" else "yuv444p"
            if pix_fmt == "yuv420p" and (width % 2 or height % 2):
                raise VideoError(f"{codec} needs an even frame size, got {width}x{height}")
            options = {"libx264": {"crf": "18", "preset": "veryfast"}, "libvpx-vp9": {"crf": "30", "b": "0", "deadline": "realtime", "cpu-used": "8"}}.get(
                codec, {"q": "3"} if codec == "mpeg4" else {}
            )
        self.codec = codec
        self.vs = self.c.add_stream(codec, rate=rate, options=options)
        self.vs.width, self.vs.height, self.vs.pix_fmt = width, height, pix_fmt
        self.time_base = time_base if time_base is not None else Fraction(1, 1) / rate
        self.vs.time_base = self.time_base
        self.vs.codec_context.time_base = self.time_base
        self.frame_step = 1 / (rate * self.time_base)  # ticks per frame
        self.audio_mode = "none"
        self._ain = self._apkts = self.astream = None
        self._resampled = None
        self._last_pts = None
        if audio_from is not None:
            self._open_audio(audio_from, ext)

    def _open_audio(self, src: str, ext: str) -> None:
        av = self.av
        ain = av.open(src)
        if not ain.streams.audio:
            ain.close()
            return
        ast = ain.streams.audio[0]
        allowed = _AUDIO_COPY.get(ext, set())
        self._ain = ain
        if allowed is None or ast.codec_context.name in allowed:
            self.astream = self.c.add_stream_from_template(ast)
            self.audio_mode = "copied"
            self._apkts = (p for p in ain.demux(ast) if p.dts is not None)
        else:
            name = _AUDIO_FALLBACK.get(ext, "aac")
            self.astream = self.c.add_stream(name, rate=ast.codec_context.sample_rate or 48000)
            self.audio_mode = f"re-encoded ({ast.codec_context.name} -> {name})"
            self._apkts = self._transcode(ain, ast)
        self._pending = next(self._apkts, None)

    def _transcode(self, ain, ast):
        for frame in ain.decode(ast):
            frame.pts = None
            yield from self.astream.encode(frame)
        yield from self.astream.encode(None)

    def _mux_audio_until(self, seconds: float | None) -> None:
        while self._pending is not None:
            p = self._pending
            t = float(p.pts * p.time_base) if (p.pts is not None and p.time_base is not None) else None
            if seconds is not None and t is not None and t > seconds:
                return
            if self.audio_mode == "copied":
                p.stream = self.astream
            self.c.mux(p)
            self._pending = next(self._apkts, None)

    def write(self, rgb: np.ndarray, pts: int | None) -> None:
        frame = self.av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        if pts is None or (self._last_pts is not None and pts <= self._last_pts):
            pts = 0 if self._last_pts is None else int(round(self._last_pts + self.frame_step))
        self._last_pts = pts
        frame.pts = pts
        frame.time_base = self.time_base
        for packet in self.vs.encode(frame):
            self.c.mux(packet)
        if self.astream is not None:
            self._mux_audio_until(float(pts * self.time_base))

    def close(self) -> None:
        for packet in self.vs.encode(None):
            self.c.mux(packet)
        if self.astream is not None:
            self._mux_audio_until(None)
        self.c.close()
        if self._ain is not None:
            self._ain.close()

    def abort(self) -> None:
        for c in (self.c, self._ain):
            try:
                if c is not None:
                    c.close()
            except Exception:  # noqa: BLE001 - closing a half-written file on the way out
                pass


def _can_encode(av, name: str) -> bool:
    try:
        av.codec.Codec(name, "w")
        return True
    except Exception:  # noqa: BLE001
        return False


def write_video(
    path: str | os.PathLike, frames: Sequence[np.ndarray], fps: float = 10.0, *, audio_tone_hz: float | None = None, lossless: bool = False
) -> Path:
    """Write RGB frames to a video file (a small helper for tests and benchmarks); ``audio_tone_hz``
    adds a mono AAC sine tone (Opus in .webm) as long as the clip."""
    av = _av()
    path = Path(path)
    h, w = frames[0].shape[:2]
    tmp_audio = None
    if audio_tone_hz:
        tmp_audio = path.with_name(f".{path.stem}.tone.mkv")
        _write_tone(av, tmp_audio, len(frames) / fps, audio_tone_hz)
    try:
        wr = _Writer(path, w, h, fps, None, str(tmp_audio) if tmp_audio else None, lossless)
        for f in frames:
            wr.write(f, None)
        wr.close()
    finally:
        if tmp_audio is not None:
            tmp_audio.unlink(missing_ok=True)
    return path


def _write_tone(av, path: Path, seconds: float, hz: float, rate: int = 48000) -> None:
    from fractions import Fraction

    c = av.open(str(path), "w")
    s = c.add_stream("aac", rate=rate, layout="mono")
    n = int(seconds * rate)
    t = np.arange(n) / rate
    pcm = (0.2 * np.sin(2 * np.pi * hz * t)).astype(np.float32)
    for i in range(0, n, 1024):
        frame = av.AudioFrame.from_ndarray(pcm[None, i : i + 1024], format="fltp", layout="mono")
        frame.sample_rate = rate
        frame.pts = i
        frame.time_base = Fraction(1, rate)
        for p in s.encode(frame):
            c.mux(p)
    for p in s.encode(None):
        c.mux(p)
    c.close()


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
    Carried latents (demo methods, lossless clips) are used when intact.
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
    from .keys import Secret
    from .methods.base import attach_carried
    from .pipeline import resolve_detector

    t0 = time.perf_counter()
    src, out = Path(src_path), Path(out_path)
    if not src.is_file():
        raise VideoError(f"no such video: {src}")
    if out.suffix.lower() not in VIDEO_EXTS:
        raise VideoError(f"unsupported output video type {out.suffix!r}; use one of {', '.join(sorted(VIDEO_EXTS))}")
    if max_gap < 0 or batch_frames < 1:
        raise ValueError("max_gap must be >= 0 and batch_frames >= 1")
    min_score, guard, controls = method.split_run_options(operation, controls)
    info = _probe(src)

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
        writer = _Writer(tmp, info.width, info.height, info.fps, info.time_base, str(src), lossless)
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
            # identity), so a face SFace still matches is blurred in that frame
            results = method.process_frames(operation, frames, faces, indices, secret, controls, carried, guard=guard, guard_variants=0)
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
