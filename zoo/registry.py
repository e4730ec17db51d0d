"""The method registry (timm-style): ``load(name)``, ``list_methods()``, ``info(name)``.

A method registers itself where it is defined, with the :func:`register_method` decorator on its
class; the first lookup imports every module and package under :mod:`zoo.methods`, so adding a method
is one new package there.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .targets import import_target

__all__ = [
    "MethodEntry",
    "WeightsChoice",
    "register_method",
    "load",
    "list_methods",
    "info",
    "get_method_class",
    "resolve_weights",
    "runtime_class",
    "bundled_checkpoint",
]

log = logging.getLogger("zoo")


@dataclass(frozen=True)
class MethodEntry:
    name: str
    target: str  # "module:ClassName"
    default_repo: str | None = None  # Hub repo id with the method's weights; None = needs no weights
    default_revision: str | None = None


_REGISTRY: dict[str, MethodEntry] = {}


def register_method(name: str, target: str | None = None, default_repo: str | None = None, default_revision: str | None = None) -> Any:
    """Register method ``name``. As a class decorator (no ``target``)::

        @register_method("dbaf", default_repo="face-deid-zoo/dbaf")
        class DBAF(StyleGANIdentityMethod): ...

    or with ``target="module:ClassName"`` for a class defined outside :mod:`zoo.methods` (imported
    lazily at ``load``). ``default_repo``: the Hub repo of its weights (None: it needs none)."""
    if target is not None:
        _REGISTRY[name] = MethodEntry(name, target, default_repo, default_revision)
        return None

    def decorate(cls: type) -> type:
        _REGISTRY[name] = MethodEntry(name, f"{cls.__module__}:{cls.__qualname__}", default_repo, default_revision)
        return cls

    return decorate


_DISCOVERED = False


def _discover() -> None:
    """Import every module and package under :mod:`zoo.methods` once, so their decorators run."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    from . import methods

    for info in pkgutil.iter_modules(methods.__path__):
        importlib.import_module(f"{methods.__name__}.{info.name}")


def _entry(name: str) -> MethodEntry:
    key = name.strip().lower()
    if key not in _REGISTRY:
        _discover()
    if key not in _REGISTRY:
        raise KeyError(f"unknown method {name!r}; available: {', '.join(list_methods())}")
    return _REGISTRY[key]


def get_method_class(name: str) -> Any:
    return import_target(_entry(name).target)


def list_methods() -> list[str]:
    """Names of every registered method: the classical baselines, then the papers, by module name."""
    _discover()
    return list(_REGISTRY)


def _auto_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


BUNDLED_DIR = Path(__file__).resolve().parent / "weights"
_LOGGED: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class WeightsChoice:
    """Where a method's weights come from: ``kind`` is "none" | "local" | "hub" | "bundled"."""

    kind: str
    location: str | None
    label: str
    evaluation: dict[str, Any] | None = None


def bundled_checkpoint(name: str) -> Path | None:
    """The demo checkpoint shipped inside the package (``zoo/weights/<name>``), if any."""
    folder = BUNDLED_DIR / _entry(name).name
    return folder if (folder / "method.json").is_file() else None


def _index(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "method.json").read_text())
    except (OSError, ValueError):
        return {}


def _describe(kind: str, folder: Path, fallback: str) -> WeightsChoice:
    index = _index(folder)
    label = str(index.get("weights_label") or fallback)
    return WeightsChoice(kind, str(folder), label, index.get("evaluation"))


def resolve_weights(name: str, *, revision: str | None = None, local_dir: str | None = None, allow_download: bool | None = None) -> WeightsChoice:
    """Which checkpoint ``load(name)`` takes, in order: ``local_dir``; the default Hub repo (downloaded when
    online and ``allow_download``, else the local cache only; ``HF_HUB_OFFLINE=1`` means cache only); the
    demo checkpoint bundled with the package. Raises :class:`zoo.hub.WeightsNotFoundError` when none exists."""
    from .hub import WeightsNotFoundError, hub_offline, resolve_checkpoint

    entry = _entry(name)
    if local_dir is not None:
        folder = resolve_checkpoint(local_dir)
        return _describe("local", Path(folder), f"local checkpoint {local_dir}")
    if entry.default_repo is None:
        return WeightsChoice("none", None, "needs no weights")
    rev = revision or entry.default_revision
    hub_error: Exception | None = None
    try:
        if allow_download is False or hub_offline():
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(entry.default_repo, revision=rev, local_files_only=True))
        else:
            folder = resolve_checkpoint(entry.default_repo, revision=rev)
        return _describe("hub", folder, f"Hub {entry.default_repo}@{rev or 'main'}")
    except Exception as err:  # noqa: BLE001 - any failure means: not available from the Hub
        hub_error = err
    bundled = bundled_checkpoint(name)
    if bundled is not None:
        return _describe("bundled", bundled, "demo checkpoint bundled with the package")
    raise WeightsNotFoundError(
        f"{name}: no weights: not in the local Hub cache ({entry.default_repo}) and no bundled demo checkpoint "
        f"({type(hub_error).__name__}). Download them with `hf download {entry.default_repo} --local-dir DIR` "
        f"and pass local_dir=DIR, or train one with training/train.py"
    )


def runtime_class(name: str, choice: WeightsChoice | None = None) -> Any:
    """The class that will run ``name`` with its resolved weights (a demo checkpoint runs the method's
    demo-tier variant, whose controls differ)."""
    cls = get_method_class(name)
    if choice is None:
        try:
            choice = resolve_weights(name, allow_download=False)
        except FileNotFoundError:
            return cls
    if choice.location is None or not hasattr(cls, "variant_for"):
        return cls
    return cls.variant_for(_index(Path(choice.location)).get("config", {}))


def load(
    name: str,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    revision: str | None = None,
    local_dir: str | None = None,
    latent_space: str | None = None,
    **kwargs: Any,
):
    """Build method ``name`` ready to run.

    ``latent_space`` ("wplus" | "dcgan", demo tier of the reversible methods only): the latent space the
    keyed transform runs in, overriding the checkpoint's config (:class:`~zoo.methods.latent_demo.LatentDemoMethod`);
    default: the environment variable ``ZOO_LATENT_SPACE`` where set (``dcgan``: the small, fast 64 px tier on
    every such method), else the checkpoint's choice.

    Weightless methods (the classical baselines) take their options as ``kwargs``. Neural methods load,
    in order: ``local_dir``; their default Hub repo at ``revision`` (``HF_HUB_OFFLINE=1`` means the local
    cache only); the demo checkpoint bundled with the package. Which one was taken is logged once and
    kept in ``method.weights`` (a :class:`WeightsChoice`: label and evaluation summary). No checkpoint
    at all raises :class:`zoo.hub.WeightsNotFoundError` naming the repo. ``device`` defaults to CUDA
    when available.
    """
    entry = _entry(name)
    cls = get_method_class(name)
    if entry.default_repo is None and local_dir is None:
        method = cls(**kwargs)
        method.weights = WeightsChoice("none", None, "needs no weights")
    else:
        if kwargs:
            raise TypeError(f"{name} takes no options besides device/dtype/revision/local_dir; got {sorted(kwargs)}")
        choice = resolve_weights(name, revision=revision, local_dir=local_dir)
        method = cls.from_pretrained(choice.location)
        method.weights = choice
        if latent_space is not None and not hasattr(method, "use_latent_space"):
            raise TypeError(f"{name} has no choice of latent space")
        space = latent_space or os.environ.get("ZOO_LATENT_SPACE") or None
        if space and hasattr(method, "use_latent_space"):
            method.use_latent_space(space)
        if (name, choice.location) not in _LOGGED:
            _LOGGED.add((name, str(choice.location)))
            log.info("%s: using %s (%s)", name, choice.label, choice.location)
            if choice.kind != "none" and not choice.evaluation:
                log.warning("%s: checkpoint %s has no evaluation summary in method.json: its privacy is unmeasured", name, choice.location)
    return method.to(device if device is not None else _auto_device(), dtype)


def weights_status(name: str) -> tuple[bool, str]:
    """(available, reason) for the default weights, checked without any network access."""
    try:
        choice = resolve_weights(name, allow_download=False)
    except FileNotFoundError as err:
        return False, str(err)
    return True, choice.label


def info(name: str) -> dict[str, Any]:
    """Capabilities (reversible, controls, native resolution) of the class that will run, the weights it
    will load (label, location, evaluation summary) and whether they are present; never downloads."""
    entry = _entry(name)
    choice: WeightsChoice | None = None
    try:
        found = resolve_weights(name, allow_download=False)
        choice, available, reason = found, True, found.label
    except FileNotFoundError as err:
        choice, available, reason = None, False, str(err)
    caps = runtime_class(name, choice).capabilities()
    if choice is not None and choice.location is not None:  # the checkpoint's own crop size, where it sets one
        res = _index(Path(choice.location)).get("config", {}).get("resolution")
        if res:
            caps["resolution"] = int(res)
    caps.update(
        {
            "default_repo": entry.default_repo,
            "default_revision": entry.default_revision,
            "weights_available": available,
            "weights_status": reason,
            "weights_kind": choice.kind if choice else None,
            "weights_location": choice.location if choice else None,
            "evaluation": (choice.evaluation if choice else None)
            or ("warning: this checkpoint carries no evaluation summary; its privacy is unmeasured" if choice and choice.kind != "none" else None),
        }
    )
    return caps
