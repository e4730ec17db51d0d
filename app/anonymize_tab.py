"""The Anonymize tab: one photo through any number of methods at once (:func:`anonymize_photo`), each with its
own controls, and the tab's widgets; the short video below it is :mod:`app.video_tab`."""

from __future__ import annotations

import shutil
import time
from typing import Any, Sequence

import gradio as gr
import numpy as np

from app import video_tab
from app.common import SLOTS, user_error
from app.files import download_tag, results_dir, run_dir, save_json, save_png, zip_results
from app.judge import JUDGES, FaceScores, fmt_score, scores_caption
from app.methods import MethodStatus, controls_for, get_method, method_failed, resolve_methods
from app.photos import read_photo
from app.widgets import Tab, add_examples, control_inputs, method_picker, photo_checked, results_gallery, run_button, tab_problem
from zoo.keys import Secret, key_text


def anonymize_photo(
    catalog: dict[str, MethodStatus],
    photo: str | None,
    methods: Sequence[str],
    key: str | None,
    judge_name: str | None,
    control_keys: list[tuple[str, str]],
    control_values: Sequence[Any],
):
    """Anonymize tab: -> (gallery items, table rows, zip path, status markdown).

    The inputs are checked first (answered at once, however busy the app is); the methods then run in one
    of :data:`SLOTS`. The results never include the original: it stays in the input component."""
    rgb = read_photo(photo)
    chosen = resolve_methods(methods, catalog)
    key = key_text(key) or None
    return SLOTS.run(_anonymize_rgb, rgb, chosen, key, judge_name, control_keys, control_values)


def _anonymize_rgb(
    rgb: np.ndarray, chosen: list[MethodStatus], key: str | None, judge_name: str | None, control_keys: list[tuple[str, str]], control_values: Sequence[Any]
):
    scores = FaceScores.of(rgb, judge_name)
    run = run_dir("anonymize")
    out_dir = results_dir(run)  # what the zip holds: results only
    gallery, rows, notes = [], [], []
    for s in chosen:
        try:
            m = get_method(s)
            controls = controls_for(control_keys, control_values, s.name)
            t0 = time.perf_counter()
            res = m.anonymize(rgb, key=key, **controls)
            seconds = time.perf_counter() - t0
        except Exception as err:  # noqa: BLE001 - one method failing must not sink the others
            method_failed(s.name, err, notes)
            continue
        out = np.asarray(res.image.convert("RGB"))
        sims = scores.against(out)
        path = save_png(res.image, out_dir, f"anonymized_{s.name}")
        caption = f"{s.name} · {seconds:.2f} s"
        if sims:
            caption += " · " + scores_caption(sims, scores.judge)
        gallery.append((path, caption))
        judge_info = None
        if scores.judge:
            judge_info = {"name": scores.judge.name, "metric": scores.judge.metric, "threshold": scores.judge.threshold, "per_face": sims}
        save_json(_report(res, {"app_seconds": round(seconds, 4), "identity_judge": judge_info}), out_dir, f"anonymized_{s.name}")
        for i, face in enumerate(res.faces or [None]):
            sim = sims[i] if i < len(sims) else None
            same = scores.judge.same(sim) if scores.judge else None
            rows.append(
                [
                    s.name,
                    i if face is not None else "-",
                    fmt_score(sim),
                    "-" if same is None else ("yes" if same else "no"),
                    face.status if face is not None else "no face found",
                    round(seconds, 3),
                ]
            )
    if not gallery:
        shutil.rmtree(run, ignore_errors=True)
        raise user_error("Every chosen method failed: " + "; ".join(n.replace("**", "") for n in notes))
    status = _status_line(scores, key, notes, keyed=any(s.uses_key for s in chosen))
    return gallery, rows, zip_results(run, f"anonymized_{download_tag(chosen)}"), status


def _report(result, extra: dict[str, Any]) -> dict[str, Any]:
    rep = result.report()
    rep.update(extra)
    return rep


def _status_line(scores: FaceScores, key: str | None, notes: list[str], keyed: bool = True) -> str:
    parts = [f"{len(scores.faces)} face(s) found."]
    if key:
        parts.append(f"Key fingerprint `{Secret(key).fingerprint}` (the key itself is never stored or shown).")
    elif keyed:
        parts.append("No key given: a random key was used and forgotten, so these results cannot be recovered.")
    if scores.judge is None:
        parts.append("No identity judge available here, so no similarity is shown.")
    else:
        parts.append(f"Similarity: {scores.judge.column}, per face, against the original.")
    return " ".join(parts) + ("\n\n" + "\n\n".join(notes) if notes else "")


def build_tab(catalog: dict[str, MethodStatus], examples: list[str], judges: list) -> tuple[Tab, Tab]:
    """Anonymize: one photo through several methods; below it, a short video through one method (its own
    input, method and key; the method controls are shared): -> (the photo's tab, the video's)."""
    with gr.Row():
        with gr.Column(scale=1):
            photo = photo_checked(label="Photo", elem_id="anon_photo")
            add_examples(examples, photo)
            methods = method_picker(catalog, "Methods")
            key = gr.Textbox(
                value="",
                label="Key",
                type="password",
                elem_id="anon_key",
                info="any text; keep it secret. Empty: a random key is used and forgotten (no recovery)",
            )
            judge = gr.Dropdown(choices=judges, value=JUDGES[0], label="Identity judge")
            with gr.Accordion("Method controls", open=False):
                ctrls, keys = control_inputs(catalog)
                if not ctrls:
                    gr.Markdown("The available methods have no controls besides the key.")
            problem = tab_problem(catalog, "anonymize")
            run = run_button("Anonymize", problem, elem_id="anon_run")
        with gr.Column(scale=2):
            gallery = results_gallery("Results", columns=3, elem_id="anon_gallery")
            status = gr.Markdown(label="Status", elem_id="anon_status")
            table = gr.Dataframe(
                elem_id="anon_table",
                label="Per face",
                interactive=False,
                headers=["method", "face", "identity score vs original", "same person?", "status", "seconds"],
            )
            zipped = gr.File(label="Download (PNGs and JSON reports)", interactive=False)
    photo_tab = Tab([photo, methods, key, judge, *ctrls], [gallery, table, zipped, status], keys, run)

    return photo_tab, video_tab.build_section(catalog, ctrls, keys, problem)
