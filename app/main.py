"""The whole app: its page (:func:`build_app`: the header and the three tabs, each button wired to its task) and
:func:`launch` with the app's limits."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gradio as gr

from app import anonymize_tab, diversity_tab, recover_tab
from app.common import CACHE_SECONDS, CONCURRENCY, MAX_UPLOAD, QUEUE_SIZE
from app.files import gradio_temp_dir, sweep_gradio_dir
from app.judge import JUDGE_LABELS, JUDGES
from app.methods import MethodStatus, method_catalog
from app.photos import example_photos
from app.video_tab import anonymize_clip
from app.widgets import gradio_checks_as_user_errors, wire

TITLE = "Face de-identification zoo"


def _unavailable_md(catalog: dict[str, MethodStatus]) -> str:
    off = [s for s in catalog.values() if not s.available]
    if not off:
        return ""
    lines = ["**Not available on this server:**"]
    lines += [f"- ~~{s.name}~~: {s.reason}" for s in off]
    return "\n".join(lines)


def _weights_md(catalog: dict[str, MethodStatus]) -> str:
    """Which weights each available neural method runs on, with its stored evaluation."""
    on = [s for s in catalog.values() if s.available and s.evaluation]
    if not on:
        return ""
    lines = ["**Weights in use** (rates: fraction the dlib judge calls the same person):"]
    lines += [f"- **{s.name}**: {s.reason}. {s.evaluation}" for s in on]
    return "\n".join(lines)


def _header(catalog: dict[str, MethodStatus]) -> None:
    gr.Markdown(
        f"# {TITLE}\nFace de-identification methods side by side: every face in the photo is detected, aligned, "
        "changed and pasted back; everything else stays as it was. The identity similarity is measured by a face "
        "recognizer that none of the methods uses. Uploads and results are kept on this server only while you "
        f"use them (about {max(1, CACHE_SECONDS // 60)} minutes), readable by this app alone; downloads never "
        "contain your original photo."
    )
    for text in (_weights_md(catalog), _unavailable_md(catalog)):
        if text:
            gr.Markdown(text)


def build_app(catalog: dict[str, MethodStatus] | None = None) -> gr.Blocks:
    """The Gradio Blocks app. ``catalog`` defaults to :func:`method_catalog`. Gradio's uploads and cache go
    to this process's private folder (:func:`gradio_temp_dir`)."""
    catalog = method_catalog() if catalog is None else catalog
    gradio_temp_dir()
    examples = example_photos()
    judges = [(JUDGE_LABELS[j], j) for j in JUDGES]
    sweep = max(60, CACHE_SECONDS // 3)
    with gr.Blocks(title=TITLE, analytics_enabled=False, delete_cache=(sweep, CACHE_SECONDS)) as demo:
        _header(catalog)
        cache = demo.GRADIO_CACHE
        with gr.Tab("Anonymize", id="anonymize"):
            photo, video = anonymize_tab.build_tab(catalog, examples, judges)
            wire(photo, anonymize_tab.anonymize_photo, ["photo", "methods", "key", "judge"], "anonymize", catalog, cache)
            wire(video, anonymize_clip, ["video", "method", "key"], "anonymize_video", catalog, cache, progress=True)
        with gr.Tab("Recover", id="recover"):
            roundtrip, from_file = recover_tab.build_tab(catalog, examples, judges)
            wire(roundtrip, recover_tab.recover_roundtrip, ["photo", "methods", "key", "wrong_key", "judge"], "recover_roundtrip", catalog, cache)
            wire(from_file, recover_tab.recover_file, ["photo", "method", "key"], "recover_file", catalog, cache)
        with gr.Tab("Diversity", id="diversity"):
            grid = diversity_tab.build_tab(catalog, examples, judges)
            wire(grid, diversity_tab.diversity_grid, ["photo", "methods", "n_keys", "base_key", "judge"], "diversity", catalog, cache)
    for block in demo.blocks.values():
        if isinstance(block, gr.components.Component) and getattr(block, "interactive", None) is not False:
            gradio_checks_as_user_errors(block)
    sweep_gradio_dir(gradio_temp_dir(), CACHE_SECONDS)  # the examples Gradio just copied: 0600
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=QUEUE_SIZE)
    return demo


def launch(demo: gr.Blocks | None = None, *, server_port: int | None = None, server_name: str | None = None, **kwargs: Any):
    """Launch with the app's limits (upload size); port from ``server_port``, ``PORT`` or ``GRADIO_SERVER_PORT``."""
    demo = demo or build_app()
    port = server_port or int(os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT") or 7860)
    kwargs.setdefault("max_file_size", MAX_UPLOAD)
    kwargs.setdefault("show_error", False)  # gr.Error messages are shown; other exceptions are not dumped
    # threads for every request that may be waiting for a slot, plus room for quick answers
    kwargs.setdefault("max_threads", CONCURRENCY + QUEUE_SIZE + 16)
    # the example photos' folders only: request files reach users through Gradio's cache (see hand_over)
    kwargs.setdefault("allowed_paths", sorted({str(Path(p).parent) for p in example_photos()}))
    return demo.launch(server_port=port, server_name=server_name or os.environ.get("GRADIO_SERVER_NAME"), **kwargs)
