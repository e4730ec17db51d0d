"""The Recover tab: anonymize with a key, then recover with that key and with a wrong one, for every reversible
method (:func:`recover_roundtrip`); or recover an anonymized image saved earlier (:func:`recover_file`)."""

from __future__ import annotations

import shutil
import time
from typing import Any, Sequence

import gradio as gr
import numpy as np

from app.common import SLOTS, key_or_error, one_line, user_error
from app.files import download_tag, results_dir, run_dir, save_json, save_png, zip_results
from app.judge import JUDGES, FaceScores, fmt_score, scores_caption
from app.methods import MethodFailed, MethodStatus, controls_for, get_method, method_failed, resolve_methods
from app.photos import read_photo
from app.widgets import Tab, add_examples, control_inputs, method_picker, photo_checked, results_gallery, run_button, tab_problem
from zoo.keys import Secret, key_text, new_secret


def recover_roundtrip(
    catalog: dict[str, MethodStatus],
    photo: str | None,
    methods: Sequence[str],
    key: str | None,
    wrong_key: str | None,
    judge_name: str | None,
    control_keys: list[tuple[str, str]],
    control_values: Sequence[Any],
):
    """Recover tab: anonymize with ``key``; recover with ``key`` and with ``wrong_key``."""
    rgb = read_photo(photo)
    chosen = resolve_methods(methods, catalog, need_reversible=True)
    key = key_text(key)
    random_key = not key
    key = key or new_secret()  # no key typed: a fresh one for this run only (shown by its fingerprint)
    wrong_key = key_text(wrong_key) or key + " (wrong)"
    if wrong_key == key:
        raise user_error("The wrong key must differ from the key; leave it empty to use the key with ' (wrong)' appended.")
    return SLOTS.run(_roundtrip_rgb, rgb, chosen, key, wrong_key, random_key, judge_name, control_keys, control_values)


def _roundtrip_rgb(
    rgb: np.ndarray,
    chosen: list[MethodStatus],
    key: str,
    wrong_key: str,
    random_key: bool,
    judge_name: str | None,
    control_keys: list[tuple[str, str]],
    control_values: Sequence[Any],
):
    scores = FaceScores.of(rgb, judge_name)
    run = run_dir("recover")
    out_dir = results_dir(run)
    gallery, rows, notes = [], [], []
    for s in chosen:
        try:
            m = get_method(s)
            controls = controls_for(control_keys, control_values, s.name)
            t0 = time.perf_counter()
            anon = m.anonymize(rgb, key=key, **controls)
            anon_png = save_png(anon.image, out_dir, f"anonymized_{s.name}")
            # recover from the saved, lossless file, as a user would
            right = m.recover(anon_png, key=key, **controls)
            wrong = m.recover(anon_png, key=wrong_key, **controls)
            seconds = time.perf_counter() - t0
        except Exception as err:  # noqa: BLE001 - one method's failure is shown beside the others' results
            method_failed(s.name, err, notes)
            continue
        row_scores = []
        for label, res in (("anonymized", anon), ("recovered, right key", right), ("recovered, wrong key", wrong)):
            sims = scores.against(np.asarray(res.image.convert("RGB")))
            row_scores.append(sims)
            path = anon_png if label == "anonymized" else save_png(res.image, out_dir, f"recovered_{label.split(', ')[-1].replace(' ', '_')}_{s.name}")
            cap = f"{s.name} · {label}" + (" · " + scores_caption(sims, scores.judge) if sims else "")
            refused = sum(f.status == "key_mismatch" for f in res.faces)
            if refused:
                cap += f" · key refused for {refused} face(s): nothing recovered"
            no_code = sum(f.status == "no_code" for f in res.faces)
            if no_code:
                cap += f" · no carried code for {no_code} face(s): nothing recovered"
            gallery.append((path, cap))
        reports = {"anonymized": anon.report(), "recovered_right_key": right.report(), "recovered_wrong_key": wrong.report()}
        reports["wrong_key_fingerprint"] = Secret(wrong_key).fingerprint
        save_json(reports, out_dir, f"report_{s.name}")
        n = max((len(x) for x in row_scores), default=0)
        for i in range(max(n, 1)):
            pick = [(x[i] if i < len(x) else None) for x in row_scores]
            rows.append([s.name, i if n else "-", *map(fmt_score, pick), round(seconds, 3)])
    if not gallery:
        shutil.rmtree(run, ignore_errors=True)
        raise user_error("Every chosen method failed: " + "; ".join(n.replace("**", "") for n in notes))
    status = (
        f"Key `{Secret(key).fingerprint}`{' (a fresh random key for this run)' if random_key else ''}, "
        f"wrong key `{Secret(wrong_key).fingerprint}`. "
        "Recovery reads the anonymized PNG back from disk, as it would be after a download; each face's block is "
        "sealed with its key, so a wrong key recovers nothing from it."
    )
    if notes:
        status += "\n\n" + "\n\n".join(notes)
    return gallery, rows, zip_results(run, f"recovery_{download_tag(chosen)}"), status


def recover_file(
    catalog: dict[str, MethodStatus], photo: str | None, method: str | None, key: str | None, control_keys: list[tuple[str, str]], control_values: Sequence[Any]
):
    """Recover an anonymized image saved earlier: -> (image path, report JSON, zip path)."""
    rgb = read_photo(photo)
    if not method:
        raise user_error("Please choose the method that anonymized the image.")
    (s,) = resolve_methods([method], catalog, need_reversible=True)
    key = key_or_error(key, "key used to anonymize")

    def recover() -> Any:
        return get_method(s).recover(rgb, key=key, **controls_for(control_keys, control_values, s.name))

    try:
        res = SLOTS.run(recover)
    except MethodFailed as err:
        raise user_error(str(err)) from None
    except ValueError as err:
        raise user_error(one_line(str(err))) from None
    run = run_dir("recover_file")
    path = save_png(res.image, results_dir(run), f"recovered_{s.name}")
    report = res.report()
    save_json(report, results_dir(run), f"recovered_{s.name}")
    return path, report, zip_results(run, f"recovered_{s.name}")


def build_tab(catalog: dict[str, MethodStatus], examples: list[str], judges: list) -> tuple[Tab, Tab]:
    """Recover: anonymize-then-recover (right and wrong key), and recovery of a saved anonymized image."""
    problem = tab_problem(catalog, "recover")
    reversible = [s.name for s in catalog.values() if s.available and s.reversible]
    gr.Markdown("### Anonymize, then recover with the right key and a wrong one")
    with gr.Row():
        with gr.Column(scale=1):
            photo = photo_checked(label="Photo", elem_id="rec_photo")
            add_examples(examples, photo)
            methods = method_picker(catalog, "Reversible methods", only=lambda s: s.reversible, default=3)
            key = gr.Textbox(value="", label="Key", type="password", info="empty: a fresh random key for this run only; type your own to reuse it")
            wrong = gr.Textbox(value="", label="Wrong key", info="empty = the key with ' (wrong)' appended", type="password")
            judge = gr.Dropdown(choices=judges, value=JUDGES[0], label="Identity judge")
            with gr.Accordion("Method controls", open=False):
                ctrls, keys = control_inputs(catalog, only=lambda s: s.reversible)
            run = run_button("Anonymize and recover", problem)
        with gr.Column(scale=2):
            gallery = results_gallery("Anonymized, recovered with the right key, recovered with a wrong key", columns=3)
            status = gr.Markdown(label="Status")
            table = gr.Dataframe(
                label="Identity score per face",
                interactive=False,
                headers=["method", "face", "anonymized vs original", "right key vs original", "wrong key vs original", "seconds"],
            )
            zipped = gr.File(label="Download (PNGs and JSON reports)", interactive=False)
    roundtrip = Tab([photo, methods, key, wrong, judge, *ctrls], [gallery, table, zipped, status], keys, run)

    gr.Markdown("### Recover an anonymized image you saved (PNG; lossy formats lose what recovery needs)")
    with gr.Row():
        with gr.Column(scale=1):
            f_photo = photo_checked(label="Anonymized image", sources=["upload", "clipboard"], elem_id="file_photo")
            f_method = gr.Dropdown(choices=reversible, value=reversible[0] if reversible else None, label="Method it was anonymized with")
            f_key = gr.Textbox(value="", label="Key", type="password")
            f_run = run_button("Recover", None if problem is None else "See above.")
        with gr.Column(scale=2):
            out = gr.Image(label="Recovered", type="filepath", format="png", interactive=False)
            report = gr.JSON(label="Report")
            f_zip = gr.File(label="Download (PNG and JSON report)", interactive=False)
    from_file = Tab([f_photo, f_method, f_key, *ctrls], [out, report, f_zip], keys, f_run)
    return roundtrip, from_file
