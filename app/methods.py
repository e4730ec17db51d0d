"""The methods the app offers: what it knows about each (:class:`MethodStatus`, :func:`method_catalog`), loading
each once (:func:`get_method`), checking a request's choice of methods, its control values, and reporting a
method's failure."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import zoo
from app.common import log, one_line, user_error


@dataclass
class MethodStatus:
    """What the app knows about one method: whether it can run here and why not."""

    name: str
    available: bool
    reason: str
    summary: str = ""
    reversible: bool = False
    uses_key: bool = True
    controls: tuple = ()
    local_dir: str | None = None
    evaluation: str = ""  # measured privacy/recovery of the weights in use, one line


def _requested_methods() -> list[str]:
    env = os.environ.get("ZOO_METHODS", "").strip()
    if not env:
        return zoo.list_methods()
    return [m.strip().lower() for m in env.split(",") if m.strip()]


def method_catalog(names: Sequence[str] | None = None, checkpoints: str | None = None) -> dict[str, MethodStatus]:
    """Status of every method to offer, in order; never raises (a broken method is just unavailable)."""
    names = list(names) if names is not None else _requested_methods()
    checkpoints = checkpoints if checkpoints is not None else os.environ.get("ZOO_CHECKPOINTS")
    out: dict[str, MethodStatus] = {}
    for name in names:
        local = Path(checkpoints) / name if checkpoints else None
        try:
            info = zoo.info(name)
            choice = zoo.registry.resolve_weights(name, local_dir=str(local)) if local is not None and local.is_dir() else None
            cls = zoo.registry.runtime_class(name, choice)  # a demo checkpoint runs the demo variant (its controls)
        except Exception as err:  # noqa: BLE001 - unknown name or a module that does not import
            log.warning("method %s cannot be offered: %s", name, one_line(str(err), 300))
            out[name] = MethodStatus(name, False, one_line(f"cannot be loaded: {str(err).strip(chr(39) + chr(34))}"))
            continue
        evaluation = info.get("evaluation")
        if choice is not None:
            available, reason, local_dir, evaluation = True, f"local checkpoint {local.name}/: {choice.label}", str(local), choice.evaluation
        else:
            available, reason, local_dir = bool(info.get("weights_available")), str(info.get("weights_status", "")), None
            if not available:  # the library's advice (local_dir=..., hf download) is for the operator, not a visitor
                log.warning("method %s is unavailable: %s (put its checkpoint in ZOO_CHECKPOINTS/%s/ or the Hub cache)", name, one_line(reason, 400), name)
                repo = info.get("default_repo")
                reason = "its weights are not installed on this server" + (f" (Hub repo {repo})" if repo else "")
        out[name] = MethodStatus(
            name=name,
            available=available,
            reason=one_line(reason),
            summary=str(info.get("summary") or ""),
            reversible=bool(info.get("reversible")),
            uses_key=bool(info.get("uses_key", True)),
            controls=tuple(getattr(cls, "controls", ())),
            local_dir=local_dir,
            evaluation=_evaluation_line(evaluation) if available and info.get("weights_kind") != "none" else "",
        )
    return out


def _evaluation_line(evaluation) -> str:
    """One line from a checkpoint's stored evaluation (dlib judge), or the warning that it has none."""
    if not isinstance(evaluation, dict):
        return str(evaluation or "warning: this checkpoint carries no evaluation summary; its privacy is unmeasured")
    parts = []
    for data, block in evaluation.items():
        if isinstance(block, dict):
            vals = [f"{k.replace('_', ' ')} {v['value']:.2f}" for k, v in block.items() if isinstance(v, dict) and "value" in v]
            parts.append(
                f"{data} ({block.get('judge', 'dlib')}, n={next((v['n'] for v in block.values() if isinstance(v, dict) and 'n' in v), '?')}): "
                + ", ".join(vals)
            )
    return "; ".join(parts)


_LOAD_LOCK = threading.Lock()
LOADED_METHODS: dict[str, Any] = {}


def get_method(status: MethodStatus):
    """The loaded method (cached); raises :class:`MethodFailed` with a one-line reason when it cannot be loaded."""
    with _LOAD_LOCK:
        if status.name not in LOADED_METHODS:
            try:
                LOADED_METHODS[status.name] = zoo.load(status.name, local_dir=status.local_dir) if status.local_dir else zoo.load(status.name)
            except Exception as err:  # noqa: BLE001 - a method that cannot load is reported, the others still run
                raise MethodFailed(f"{status.name}: could not load ({one_line(f'{type(err).__name__}: {err}')})") from err
        return LOADED_METHODS[status.name]


class MethodFailed(RuntimeError):
    """One method failed; the others still run and the failure is shown in its place."""


def method_failed(name: str, err: Exception, notes: list[str]) -> None:
    """Note one method's failure for the status line and log it: a user-side failure (bad control
    value, wrong input, weights that do not load) in one line, anything else with its traceback."""
    if isinstance(err, (MethodFailed, ValueError)):
        msg = one_line(str(err))
        log.warning("%s failed: %s", name, msg)
    else:
        msg = one_line(f"{type(err).__name__}: {err}")
        log.error("%s failed", name, exc_info=err)
    notes.append(f"**{name}** failed: {msg}")


def resolve_methods(names: Sequence[str] | None, catalog: dict[str, MethodStatus], need_reversible: bool = False) -> list[MethodStatus]:
    """The chosen methods' statuses, or a :func:`user_error` for none chosen, an unknown or unavailable one
    (or, with ``need_reversible``, one that cannot recover)."""
    if not names:
        raise user_error("Please choose at least one method.")
    chosen = []
    for n in names:
        s = catalog.get(n)
        if s is None:
            raise user_error(f"Unknown method {n!r}.")
        if not s.available:
            raise user_error(f"{n} is not available here: {s.reason}")
        if need_reversible and not s.reversible:
            raise user_error(f"{n} is not reversible.")
        chosen.append(s)
    return chosen


def controls_for(keys: list[tuple[str, str]], values: Sequence[Any], method: str) -> dict[str, Any]:
    """``method``'s control values from a request's (method, control name) ``keys`` and their ``values``."""
    return {cname: v for (m, cname), v in zip(keys, values) if m == method and v is not None}
