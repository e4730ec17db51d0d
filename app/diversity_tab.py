"""The Diversity tab: one face, N keys, one gallery row per method, with the mean pairwise identity similarity
(:func:`diversity_grid`)."""

from __future__ import annotations

import itertools
import shutil
import time
from typing import Any, Sequence

import gradio as gr
import numpy as np

from app.common import SLOTS, user_error
from app.files import download_tag, results_dir, run_dir, save_json, save_png, zip_results
from app.judge import JUDGES, FaceScores, fmt_score
from app.methods import MethodStatus, controls_for, get_method, method_failed, resolve_methods
from app.photos import read_photo
from app.widgets import Tab, add_examples, control_inputs, method_picker, photo_checked, results_gallery, run_button, tab_problem
from zoo.keys import key_text, new_secret

MAX_KEYS = 8


def diversity_grid(
    catalog: dict[str, MethodStatus],
    photo: str | None,
    methods: Sequence[str],
    n_keys: int,
    base_key: str | None,
    judge_name: str | None,
    control_keys: list[tuple[str, str]],
    control_values: Sequence[Any],
):
    """Diversity tab: the photo with N keys per method (one gallery row per method) and the mean
    pairwise identity similarity of the largest face across the N results."""
    rgb = read_photo(photo)
    chosen = resolve_methods(methods, catalog)
    n = int(n_keys or 4)
    if not 2 <= n <= MAX_KEYS:
        raise user_error(f"Choose between 2 and {MAX_KEYS} keys.")
    base_key = key_text(base_key)
    keys = [f"{base_key}#{i + 1}" if base_key else new_secret() for i in range(n)]
    return SLOTS.run(_diversity_rgb, rgb, chosen, keys, judge_name, control_keys, control_values)


def _diversity_rgb(
    rgb: np.ndarray, chosen: list[MethodStatus], keys: list[str], judge_name: str | None, control_keys: list[tuple[str, str]], control_values: Sequence[Any]
):
    n = len(keys)
    scores = FaceScores.of(rgb, judge_name)
    main = None
    if scores.faces:
        main = max(range(len(scores.faces)), key=lambda i: scores.faces[i].width * scores.faces[i].height)
    judge = scores.judge
    run = run_dir("diversity")
    out_dir = results_dir(run)
    gallery, rows, notes = [], [], []
    for s in chosen:
        try:
            m = get_method(s)
            controls = controls_for(control_keys, control_values, s.name)
            t0 = time.perf_counter()
            with m.run_scope():  # one request: the N keys share each face's GAN inversion (dropped after)
                results = [m.anonymize(rgb, key=k, **controls) for k in keys]
            seconds = time.perf_counter() - t0
        except Exception as err:  # noqa: BLE001 - one method's failure is shown beside the others' results
            method_failed(s.name, err, notes)
            continue
        embs, to_orig = [], []
        for j, res in enumerate(results):
            out = np.asarray(res.image.convert("RGB"))
            if judge is not None and main is not None:
                e = judge.embed(out, [scores.faces[main]])[0]
                embs.append(e)
                to_orig.append(judge.score(scores.original[main], e))
            cap = f"{s.name} · key {res.key_fingerprint or j + 1}"
            if to_orig and to_orig[-1] is not None:
                cap += f" · {judge.name} vs original {to_orig[-1]:.3f}"
            gallery.append((save_png(res.image, out_dir, f"anonymized_{s.name}_key{j + 1}"), cap))
        pairs = [judge.score(a, b) for a, b in itertools.combinations(embs, 2)] if judge is not None else []
        pairs = [p for p in pairs if p is not None]
        mean_pair = float(np.mean(pairs)) if pairs else None
        valid = [v for v in to_orig if v is not None]
        mean_orig = float(np.mean(valid)) if valid else None
        note = "" if s.uses_key else "ignores the key: every key gives the same result"
        rows.append([s.name, n, fmt_score(mean_pair), fmt_score(mean_orig), round(seconds / n, 3), note])
        save_json(
            {
                "method": s.name,
                "results": [r.report() for r in results],
                "face_index": main,
                "identity_judge": None if judge is None else {"name": judge.name, "metric": judge.metric, "threshold": judge.threshold},
                "mean_pairwise": mean_pair,
                "mean_to_original": mean_orig,
            },
            out_dir,
            f"diversity_{s.name}",
        )
    if not gallery:
        shutil.rmtree(run, ignore_errors=True)
        raise user_error("Every chosen method failed: " + "; ".join(x.replace("**", "") for x in notes))
    status = (
        f"{n} keys per method; each row of the grid is one method. Similarities are for face #{main} (the largest)."
        if main is not None
        else f"{n} keys per method; no face was found, so no similarity is shown."
    )
    if notes:
        status += "\n\n" + "\n\n".join(notes)
    return gallery, rows, zip_results(run, f"diversity_{download_tag(chosen)}"), status


def build_tab(catalog: dict[str, MethodStatus], examples: list[str], judges: list) -> Tab:
    """Diversity: one face, N keys, one gallery row per method."""
    with gr.Row():
        with gr.Column(scale=1):
            photo = photo_checked(label="Photo (the largest face is measured)", elem_id="div_photo")
            add_examples(examples, photo)
            methods = method_picker(catalog, "Methods")
            n_keys = gr.Slider(minimum=2, maximum=MAX_KEYS, value=4, step=1, label="Number of keys")
            base_key = gr.Textbox(value="", label="Base key", type="password", info="empty = fresh random keys; else keys are '<base>#1', '<base>#2', ...")
            judge = gr.Dropdown(choices=judges, value=JUDGES[0], label="Identity judge")
            with gr.Accordion("Method controls", open=False):
                ctrls, keys = control_inputs(catalog)
            run = run_button("Make the grid", tab_problem(catalog, "diversity"))
        with gr.Column(scale=2):
            gallery = results_gallery("One row per method, one column per key", columns=4)
            status = gr.Markdown(label="Status")
            table = gr.Dataframe(
                label="Diversity",
                interactive=False,
                headers=["method", "keys", "mean pairwise identity score", "mean identity score vs original", "seconds per key", "note"],
            )
            zipped = gr.File(label="Download (PNGs and JSON reports)", interactive=False)
    # one gallery row per method: as many columns as keys
    n_keys.change(lambda n: gr.Gallery(columns=int(n)), n_keys, gallery, queue=False, api_visibility="private")
    return Tab([photo, methods, n_keys, base_key, judge, *ctrls], [gallery, table, zipped, status], keys, run)
