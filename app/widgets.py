"""Building blocks of the tabs: method pickers and control widgets, galleries, run buttons, checks of an upload
as it arrives, and the wiring of a tab's button to its task (:class:`Tab`, :func:`wire`)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import gradio as gr

from app.common import GPU, user_error
from app.files import hand_over
from app.methods import MethodStatus
from app.photos import check_upload, photo_input


def tab_problem(catalog: dict[str, MethodStatus], tab: str) -> str | None:
    """Why a tab cannot work on this server (shown on the tab before any click, its buttons disabled), or None."""
    on = [s for s in catalog.values() if s.available]
    if not on:
        return "No method can run on this server (none has its weights installed), so there is nothing to run here."
    if tab == "recover" and not any(s.reversible for s in on):
        return (
            "No reversible method is installed on this server, so there is nothing to recover with. "
            "The methods here (" + ", ".join(s.name for s in on) + ") cannot undo what they did."
        )
    return None


def method_picker(catalog: dict[str, MethodStatus], label: str, only: Callable[[MethodStatus], bool] = lambda s: True, default: int = 2):
    """A choice of the available methods (the first ``default`` ticked), and the unavailable ones listed disabled."""
    on = [s.name for s in catalog.values() if s.available and only(s)]
    off = [s.name for s in catalog.values() if not s.available and only(s)]
    picker = gr.CheckboxGroup(choices=on, value=on[:default], label=label, info=None if on else "no method can run here")
    if off:
        gr.CheckboxGroup(choices=off, value=[], label="Not installed (disabled)", interactive=False)
    return picker


def results_gallery(label: str, columns: int, elem_id: str | None = None) -> gr.Gallery:
    """An output gallery of PNG results."""
    return gr.Gallery(label=label, columns=columns, height="auto", object_fit="contain", format="png", interactive=False, elem_id=elem_id)


def add_examples(examples: list[str], target: gr.components.Component) -> None:
    """The example photos under ``target``, if there are any."""
    if examples:
        gr.Examples(examples=[[p] for p in examples], inputs=[target], label="Examples")


def check_on_arrival(component: gr.components.Component, check: Callable[[Any], Any]) -> None:
    """Run ``check`` on every new upload of ``component``, before any click (not in the API).

    The event goes through Gradio's queue but is never limited by it (``concurrency_limit=None``), so it
    is answered at once however busy the app is. Not ``queue=False``: Gradio's page (6.x) shows no message
    for an error of an unqueued event (its toast is created with ``visible`` unset, i.e. hidden)."""
    component.upload(check, component, None, concurrency_limit=None, show_progress="hidden", api_visibility="private")


def photo_checked(**kwargs: Any) -> gr.Image:
    """A :func:`photo_input` whose uploads are checked as they arrive (:func:`check_on_arrival`)."""
    photo = photo_input(**kwargs)
    check_on_arrival(photo, check_upload)
    return photo


def run_button(label: str, problem: str | None, elem_id: str | None = None) -> gr.Button:
    """A tab's run button, disabled with the ``problem`` shown above it when the tab cannot run here."""
    if problem:
        gr.Markdown(f"**This tab cannot run here.** {problem}")
    return gr.Button(label, variant="primary", interactive=problem is None, elem_id=elem_id)


def _control_component(method: str, c) -> gr.components.Component:
    label = f"{method} {c.name}"
    info = c.help or None
    if c.kind in ("float", "int") and c.minimum is not None and c.maximum is not None:
        step = 1 if c.kind == "int" else (float(c.maximum) - float(c.minimum)) / 100.0
        return gr.Slider(minimum=c.minimum, maximum=c.maximum, value=c.default, step=step, label=label, info=info)
    if c.kind in ("float", "int"):
        return gr.Number(value=c.default, label=label, info=info, precision=0 if c.kind == "int" else None)
    return gr.Textbox(value=str(c.default), label=label, info=info)


def control_inputs(catalog: dict[str, MethodStatus], only: Callable[[MethodStatus], bool] = lambda s: True):
    """Build the control widgets of every available method; returns (components, [(method, control name)])."""
    components, keys = [], []
    for s in catalog.values():
        if not (s.available and only(s)) or not s.controls:
            continue
        for c in s.controls:
            components.append(_control_component(s.name, c))
            keys.append((s.name, c.name))
    return components, keys


@dataclass
class Tab:
    """What one tab's event needs: its inputs, outputs, the controls' (method, name) pairs."""

    inputs: list
    outputs: list
    control_keys: list
    button: gr.Button


def _handler(fn: Callable, names: list[str], control_keys: list[tuple[str, str]], cache_dir: str | None = None, progress: bool = False) -> Callable:
    """``fn`` wrapped by the GPU decorator, with a signature naming every input (controls become
    ``<method>_<control>``), so that API users (gradio_client) can pass them by name. With ``cache_dir``
    (the Blocks' Gradio cache), the files ``fn`` returns are handed over to it and the app's own copies
    deleted (:func:`hand_over`). With ``progress``, a last ``progress=gr.Progress()`` parameter makes
    Gradio pass its progress bar as ``fn``'s last argument."""
    on_gpu = GPU(fn)

    def wrapped(*args: Any) -> Any:
        out = on_gpu(*args)
        return out if cache_dir is None else hand_over(out, cache_dir)

    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    params += [inspect.Parameter(f"{m}_{c}", inspect.Parameter.POSITIONAL_OR_KEYWORD) for m, c in control_keys]
    if progress:
        params.append(inspect.Parameter("progress", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=gr.Progress()))
    wrapped.__signature__ = inspect.Signature(params)
    return wrapped


def wire(tab: Tab, task: Callable, names: list[str], api_name: str, catalog: dict[str, MethodStatus], cache: str, progress: bool = False) -> None:
    """``tab.button`` runs ``task(catalog, *named inputs, control_keys, control values)`` (with ``progress``:
    and Gradio's progress bar as a last argument).

    Not limited by Gradio's queue (``concurrency_limit=None``): the task checks its inputs at once and waits
    for one of :data:`app.common.SLOTS` only for the heavy part, so bad requests are never stuck behind good ones."""
    n = len(names)

    def run(*args):
        if progress:
            *args, bar = args
            return task(catalog, *args[:n], tab.control_keys, tuple(args[n:]), bar)
        return task(catalog, *args[:n], tab.control_keys, args[n:])

    handler = _handler(run, names, tab.control_keys, cache, progress=progress)
    tab.button.click(handler, tab.inputs, tab.outputs, api_name=api_name, concurrency_limit=None)


def gradio_checks_as_user_errors(component: gr.components.Component) -> None:
    """Gradio's own input checks (a value that is not among a CheckboxGroup's or Dropdown's choices, a
    number outside a Slider's range) raise ``gr.Error`` with a printed traceback: re-raise them as
    :func:`user_error` (same message, one log line). Replaces the instance's ``preprocess``."""
    preprocess = component.preprocess

    def checked(payload):
        try:
            return preprocess(payload)
        except gr.Error as err:
            if not getattr(err, "print_exception", True):  # already a user_error
                raise
            raise user_error(str(getattr(err, "message", err))) from None

    component.preprocess = checked
