"""Video container I/O with PyAV: probe a file, decode its frames, encode frames (audio copied or re-encoded).

:class:`VideoWriter` picks the codec per container (H.264 in .mp4/.mov/.m4v/.mkv, VP9 in .webm, MPEG-4
part 2 in .avi; FFV1 RGB in .mkv when lossless) and copies the audio of another file alongside the
frames. :func:`write_video` writes a clip from frames (tests and benchmarks). Errors are :class:`VideoError`.
PyAV (``av``) is imported on first use; its wheels ship their own FFmpeg libraries.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

__all__ = ["VideoError", "ProbeInfo", "probe", "probe_info", "read_frames", "VideoWriter", "write_video"]

#: output video codec per container (the first one this FFmpeg build can encode is used)
_CODECS = {
    ".mp4": ("libx264", "mpeg4"),
    ".m4v": ("libx264", "mpeg4"),
    ".mov": ("libx264", "mpeg4"),
    ".mkv": ("libx264", "mpeg4"),
    ".webm": ("libvpx-vp9", "libvpx"),
    ".avi": ("mpeg4",),
}
#: audio codecs each container can hold as they are (others are re-encoded, see VideoWriter._open_audio)
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


def _av():
    try:
        import av  # noqa: F401
    except ImportError as err:  # pragma: no cover - av is in requirements.txt
        raise VideoError("video needs PyAV: pip install av==18.1.0") from err
    import av

    return av


@dataclass
class ProbeInfo:
    """What :func:`probe_info` reads from a file's first video stream (and its first audio stream's codec)."""

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
    p = probe_info(path)
    return {k: getattr(p, k) for k in p.__dataclass_fields__ if k != "time_base"}


def probe_info(path) -> ProbeInfo:
    """:class:`ProbeInfo` of a video file (with the stream's time base, which :func:`probe` leaves out)."""
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
            return ProbeInfo(vs.codec_context.width, vs.codec_context.height, fps, int(vs.frames) or None, dur, vs.codec_context.name, audio, vs.time_base)
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


class VideoWriter:
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
    except Exception:  # noqa: BLE001 - any failure means: this codec cannot encode here
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
        wr = VideoWriter(path, w, h, fps, None, str(tmp_audio) if tmp_audio else None, lossless)
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
