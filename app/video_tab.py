"""A short video through one method, the lower part of the Anonymize tab: the check of an upload
(:func:`read_video_info`), the run (:func:`anonymize_clip`: faces tracked, one key per track, audio kept)
and its widgets."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import gradio as gr

from app.common import SLOTS, user_error
from app.files import results_dir, run_dir, save_json, zip_results
from app.methods import MethodStatus, controls_for, get_method, method_failed, resolve_methods
from app.widgets import Tab, check_on_arrival, run_button
from zoo.keys import Secret, key_text

MAX_VIDEO_SECONDS = float(os.environ.get("ZOO_MAX_VIDEO_SECONDS", 10))
MAX_VIDEO_FRAMES = int(os.environ.get("ZOO_MAX_VIDEO_FRAMES", 300))
MAX_VIDEO_PIXELS = int(os.environ.get("ZOO_MAX_VIDEO_PIXELS", 1920 * 1080))  # per frame
_VIDEO_CONTAINERS = {"mov", "mp4", "matroska", "webm", "avi"}  # what PyAV names the containers of zoo.video.VIDEO_EXTS
_VIDEO_TYPES = "an MP4, MOV, MKV, WebM or AVI file"
VIDEO_TRACK_HEADERS = [
    "track",
    "first frame",
    "last frame",
    "frames detected",
    "frames bridged (detector gap)",
    "frames extended (before/after)",
    "frames anonymized",
    "frames blurred instead",
]


@dataclass
class VideoInfo:
    """What the check of an uploaded video found (see :func:`read_video_info`)."""

    name: str
    width: int
    height: int
    frames: int
    seconds: float


def _limits_text() -> str:
    return f"up to {MAX_VIDEO_SECONDS:g} s, {MAX_VIDEO_FRAMES} frames and {MAX_VIDEO_PIXELS / 1e6:.1f} MP per frame"


def read_video_info(path: str | None) -> VideoInfo:
    """Check an uploaded video before any work: a video container (probed from its content, whatever its
    name), a video stream, frames within :data:`MAX_VIDEO_PIXELS`, at most :data:`MAX_VIDEO_SECONDS` long
    and :data:`MAX_VIDEO_FRAMES` frames (packets counted without decoding, so this takes milliseconds).
    Raises a one-line :func:`user_error` saying what to do instead."""
    if not path:
        raise user_error("Please upload a short video first.")
    import av

    name = Path(path).name
    unreadable = f"Not a readable video: {name}; upload {_VIDEO_TYPES} ({_limits_text()})."
    try:
        container = av.open(str(path))
    except FileNotFoundError:
        raise user_error("The uploaded file is gone; please upload it again.") from None
    except Exception:  # noqa: BLE001 - PyAV's errors (InvalidDataError, ...) for anything that is not a media file
        raise user_error(unreadable) from None
    with container:
        kinds = set(container.format.name.split(","))
        if not kinds & _VIDEO_CONTAINERS or not container.streams.video:
            what = container.format.long_name or container.format.name
            raise user_error(f"Not a video: {name} holds {'no video stream' if kinds & _VIDEO_CONTAINERS else what}; upload {_VIDEO_TYPES}.")
        stream = container.streams.video[0]
        width, height = int(stream.codec_context.width or 0), int(stream.codec_context.height or 0)
        if width <= 0 or height <= 0:
            raise user_error(unreadable)
        if width * height > MAX_VIDEO_PIXELS:
            raise user_error(
                f"Video frames too large: {name} is {width}x{height}; frames up to {MAX_VIDEO_PIXELS / 1e6:.1f} MP are accepted here, so scale it down first."
            )
        too_long = f"Video too long: {name} {{}}; this app takes videos {_limits_text()}, so trim it first."
        seconds = container.duration / 1e6 if container.duration else 0.0
        if seconds > MAX_VIDEO_SECONDS + 0.05:  # a container's duration may round up a few milliseconds
            raise user_error(too_long.format(f"is {seconds:.1f} s long"))
        frames, end = 0, 0.0
        try:
            for packet in container.demux(stream):
                if not packet.size:  # the demuxer's final empty packet
                    continue
                frames += 1
                if frames > MAX_VIDEO_FRAMES:
                    raise user_error(too_long.format(f"has more than {MAX_VIDEO_FRAMES} frames"))
                if packet.pts is not None and packet.time_base is not None:
                    end = max(end, float((packet.pts + (packet.duration or 0)) * packet.time_base))
        except av.FFmpegError:
            raise user_error(unreadable) from None
        if frames == 0:
            raise user_error(f"Not a readable video: {name} has no frames; upload {_VIDEO_TYPES}.")
        start = float(stream.start_time * stream.time_base) if stream.start_time is not None and stream.time_base else 0.0
        seconds = seconds or max(0.0, end - start)
        if seconds > MAX_VIDEO_SECONDS + 0.05:
            raise user_error(too_long.format(f"is {seconds:.1f} s long"))
    return VideoInfo(name, width, height, frames, seconds)


def _check_video_upload(path: str | None) -> None:
    """Answer a bad video upload as soon as it is made, before any click."""
    if path:
        read_video_info(path)


def anonymize_clip(
    catalog: dict[str, MethodStatus],
    video: str | None,
    method: str | None,
    key: str | None,
    control_keys: list[tuple[str, str]],
    control_values: Sequence[Any],
    progress: Callable | None = None,
):
    """Anonymize tab, short video: -> (video path, track rows, report JSON, zip path, status markdown).

    One method per run. The upload is checked first (:func:`read_video_info`, answered at once however busy
    the app is); the method then runs in one of :data:`SLOTS` through :func:`zoo.video.anonymize_video`,
    faces tracked across frames (one key per track). ``progress``: Gradio's progress bar (or any
    ``progress((done, total), desc=...)`` callable). The results never include the original video."""
    info = read_video_info(video)
    if not method:
        raise user_error("Please choose the method for the video.")
    (s,) = resolve_methods([method], catalog)
    key = key_text(key) or None
    return SLOTS.run(_anonymize_clip, str(video), info, s, key, control_keys, control_values, progress)


_VIDEO_STAGES = {"detect": "1/2 finding and tracking faces", "anonymize": "2/2 anonymizing and encoding"}


def _anonymize_clip(
    video: str, info: VideoInfo, s: MethodStatus, key: str | None, control_keys: list[tuple[str, str]], control_values: Sequence[Any], progress: Callable | None
):
    from zoo.video import anonymize_video

    def step(stage: str, done: int, total: int | None) -> None:  # zoo.video's progress(stage, done, total)
        if progress is not None:
            progress((done, total or info.frames), desc=_VIDEO_STAGES.get(stage, stage), unit="frames")

    run = run_dir("video")
    out_dir = results_dir(run)
    out = out_dir / f"anonymized_{s.name}.mp4"
    t0 = time.perf_counter()
    try:
        m = get_method(s)
        res = anonymize_video(m, video, out, key=key, progress=step, **changed_controls(m, controls_for(control_keys, control_values, s.name)))
    except Exception as err:  # noqa: BLE001 - shown as one line; an internal failure is logged with its traceback
        shutil.rmtree(run, ignore_errors=True)
        notes: list[str] = []
        method_failed(s.name, err, notes)
        message = notes[0].replace("**", "").replace(str(video), info.name).replace(str(run), "")
        raise gr.Error(message + " (nothing was written)", print_exception=False) from None
    seconds = time.perf_counter() - t0
    os.chmod(out, 0o600)  # written by FFmpeg with the umask's mode (inside the 0700 request folder)
    report = res.report()
    report.update({"input": info.name, "output": out.name, "app_seconds": round(seconds, 3)})  # no server paths
    save_json(report, out_dir, f"anonymized_{s.name}")
    status_of: dict[int, list[int]] = {}
    for row in res.frame_faces:
        for f in row:
            counts = status_of.setdefault(f["track"], [0, 0])
            counts[f["status"] != "processed"] += 1
    rows = [[t["track"], t["first_frame"], t["last_frame"], t["detected"], t["gap"], t["extended"], *status_of.get(t["track"], [0, 0])] for t in res.tracks]
    shown = {k: v for k, v in report.items() if k != "frame_faces"}  # the per-frame faces are in the download
    parts = [
        f"**{s.name}**: {res.frames} frames ({info.width}x{info.height}, {res.fps:g} fps), {len(res.tracks)} face track(s), "
        f"{report['faces_processed']} face(s) over all frames, {res.fallbacks} blurred instead; {seconds:.1f} s."
    ]
    if key and s.uses_key:
        parts.append(f"Key fingerprint `{Secret(key).fingerprint}` (the key itself is never stored or shown); each track keeps one key.")
    elif s.uses_key:
        parts.append("No key given: a random key was used and forgotten, so this video cannot be recovered.")
    parts.append(f"Audio: {res.audio}.")
    return str(out), rows, shown, zip_results(run, f"anonymized_video_{s.name}"), " ".join(parts)


def changed_controls(method, controls: dict[str, Any]) -> dict[str, Any]:
    """The controls whose slider the user moved off the method's default: a slider always sends a value,
    and video keeps its own defaults for the ones left alone (zoo.video: no identity re-inversion)."""
    defaults = {c.name: c.default for c in getattr(method, "controls", ())}
    return {k: v for k, v in controls.items() if k not in defaults or v != defaults[k]}


def build_section(catalog: dict[str, MethodStatus], ctrls: list, keys: list[tuple[str, str]], problem: str | None) -> Tab:
    """The video part of the Anonymize tab, below its photo part: its own input, method and key; the photo
    part's method controls ``ctrls`` (their (method, name) pairs ``keys``) apply; ``problem``: why the
    photo part cannot run here, or None."""
    on = [s.name for s in catalog.values() if s.available]
    gr.Markdown(
        f"### A short video\nA{_VIDEO_TYPES[1:]}, {_limits_text()}. One method per video run; every "
        "face is tracked across the frames and keeps one key (one fake identity) for the whole clip. "
        "The method controls above apply. Audio is kept."
    )
    with gr.Row():
        with gr.Column(scale=1):
            video = gr.Video(label="Video", sources=["upload"], format=None, elem_id="anon_video")
            check_on_arrival(video, _check_video_upload)
            v_method = gr.Dropdown(
                choices=on, value=on[0] if on else None, label="Method for the video", info="one method per video run", elem_id="anon_video_method"
            )
            v_key = gr.Textbox(
                value="", label="Key for the video", type="password", elem_id="anon_video_key", info="empty: a random key is used and forgotten (no recovery)"
            )
            v_run = run_button("Anonymize the video", None if problem is None else "See above.", elem_id="anon_video_run")
        with gr.Column(scale=2):
            v_out = gr.Video(label="Anonymized video", interactive=False, elem_id="anon_video_out")
            v_status = gr.Markdown(label="Video status", elem_id="anon_video_status")
            v_table = gr.Dataframe(label="Per face track", headers=VIDEO_TRACK_HEADERS, interactive=False, elem_id="anon_video_tracks")
            v_report = gr.JSON(label="Video report (per-frame faces in the download)")
            v_zip = gr.File(label="Download (video and JSON report)", interactive=False)
    return Tab([video, v_method, v_key, *ctrls], [v_out, v_table, v_report, v_zip, v_status], keys, v_run)
