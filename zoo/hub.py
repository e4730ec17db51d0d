"""Hub I/O shared by every network and every method.

Every network in the zoo subclasses :class:`HubModule`, which is ``torch.nn.Module`` plus
huggingface_hub's ``PyTorchModelHubMixin``: ``save_pretrained(dir)`` writes ``config.json`` (the
``__init__`` keyword arguments) and ``model.safetensors``; ``from_pretrained(repo_id_or_dir,
revision=...)`` reads them back. Nothing is ever unpickled.

A *method* checkpoint is a folder (local or a Hub repo) in the diffusers style, one subfolder per
component::

    method.json                 {"method": "dbaf", "config": {...}, "components": {"generator": "zoo.nn.stylegan2.Generator", ...}}
    generator/config.json
    generator/model.safetensors
    ...

:func:`resolve_checkpoint` turns a repo id (+ revision) or a local folder into a local folder,
honouring ``HF_HUB_OFFLINE`` and failing with :class:`WeightsNotFoundError`, whose message names the
repo and how to get the weights.

A network that several bundled checkpoints share (the demo tier's DCGAN encoder) is stored once, in
``zoo/weights/shared/<network>/``; each checkpoint's component folder then holds only
``config.json = {"shared": "<network>"}`` (:func:`link_shared` writes it, :func:`load_components` follows it).
:func:`checkpoint_files` lists a checkpoint's files with shared networks filled in, so a pushed Hub repo is
self-contained.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

import torch
from huggingface_hub import PyTorchModelHubMixin

__all__ = [
    "HubModule",
    "WeightsNotFoundError",
    "resolve_checkpoint",
    "save_components",
    "load_components",
    "component_dir",
    "link_shared",
    "checkpoint_files",
    "hub_offline",
    "zoo_cache_dir",
]

METHOD_INDEX = "method.json"
#: networks stored once and referenced by the bundled checkpoints that use them
SHARED_DIR = Path(__file__).resolve().parent / "weights" / "shared"


class WeightsNotFoundError(FileNotFoundError):
    """Raised when a checkpoint cannot be found locally and cannot be downloaded."""


class HubModule(torch.nn.Module, PyTorchModelHubMixin):
    """``nn.Module`` that saves/loads as ``config.json`` + ``model.safetensors``.

    Subclasses take only JSON-serialisable keyword arguments in ``__init__``; those become the config.
    """

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)


def hub_offline() -> bool:
    """True when the Hugging Face Hub is switched off: ``HF_HUB_OFFLINE`` is truthy (1/true/yes/on) now,
    or was when ``huggingface_hub`` was imported (it reads the variable once, at import, and refuses to
    download from then on either way). The zoo's one offline rule: loading, training's
    ``--push-to-hub`` check and ``hub_cards`` push all ask it."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in {"1", "true", "yes", "on"}
    return env or bool(constants.HF_HUB_OFFLINE)


def zoo_cache_dir() -> Path:
    """Where weights converted from installed packages are kept: ``$ZOO_CACHE``, else
    ``$XDG_CACHE_HOME/face-deid-zoo``, else ``~/.cache/face-deid-zoo``."""
    if os.environ.get("ZOO_CACHE"):
        return Path(os.environ["ZOO_CACHE"]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return base / "face-deid-zoo"


def _qualname(obj: Any) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _import_qualname(name: str) -> Any:
    module_name, _, cls_name = name.rpartition(".")
    if not module_name.startswith(("zoo.", "training.")):
        # Only our own classes (zoo.*, and training.* for toy/distilled helpers) may be instantiated from a (possibly downloaded) index file.
        raise ValueError(f"refusing to import component class {name!r}: not a zoo class")
    return getattr(importlib.import_module(module_name), cls_name)


def resolve_checkpoint(
    repo_or_dir: str | os.PathLike,
    *,
    revision: str | None = None,
    allow_patterns: list[str] | None = None,
) -> Path:
    """Return a local folder holding the checkpoint.

    ``repo_or_dir`` is an existing local folder (used as is) or a Hub repo id ``owner/name``
    (downloaded with ``snapshot_download`` at ``revision``; from the local cache only when
    ``HF_HUB_OFFLINE=1``). Only ``*.json``, ``*.safetensors`` and ``*.md`` files are fetched.
    """
    path = Path(repo_or_dir).expanduser()
    if path.is_dir():
        return path
    repo_id = str(repo_or_dir)
    if repo_id.count("/") != 1 or repo_id.startswith((".", "/")):
        raise WeightsNotFoundError(f"checkpoint folder {repo_id!r} does not exist")
    from huggingface_hub import snapshot_download

    how = (
        f"Download it on a machine with network access (`hf download {repo_id}"
        f"{' --revision ' + revision if revision else ''} --local-dir DIR`) and pass "
        f"`local_dir=DIR` to zoo.load, or train one with `training/train.py` (see README)."
    )
    try:
        local = snapshot_download(
            repo_id,
            revision=revision,
            allow_patterns=allow_patterns or ["*.json", "*.safetensors", "*.md"],
            local_files_only=hub_offline(),
        )
    except Exception as err:  # noqa: BLE001 - huggingface_hub raises several types; all mean "not available"
        mode = "offline (HF_HUB_OFFLINE=1) and not in the local cache" if hub_offline() else "could not be downloaded"
        raise WeightsNotFoundError(f"weights for Hub repo {repo_id!r} (revision {revision or 'main'}) are {mode}: {type(err).__name__}. {how}") from None
    return Path(local)


def save_components(
    folder: str | os.PathLike,
    method: str,
    components: Mapping[str, HubModule],
    config: Mapping[str, Any] | None = None,
    extra_tensors: Mapping[str, torch.Tensor] | None = None,
) -> Path:
    """Write a method checkpoint: ``method.json`` plus one subfolder per component.

    ``extra_tensors`` (e.g. a reference-identity library) go to ``extra.safetensors``.
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    index = {
        "method": method,
        "config": dict(config or {}),
        "components": {name: _qualname(module) for name, module in components.items()},
    }
    for name, module in components.items():
        module.save_pretrained(folder / name)
    if extra_tensors:
        save_file({k: v.detach().contiguous().cpu() for k, v in extra_tensors.items()}, str(folder / "extra.safetensors"))
    (folder / METHOD_INDEX).write_text(json.dumps(index, indent=2, sort_keys=True))
    return folder


def load_components(
    repo_or_dir: str | os.PathLike,
    *,
    revision: str | None = None,
    expected_method: str | None = None,
    skip: Callable[[dict[str, Any]], Collection[str]] | None = None,
) -> tuple[dict[str, Any], dict[str, HubModule], dict[str, torch.Tensor]]:
    """Load a checkpoint written by :func:`save_components`.

    Returns ``(config, components, extra_tensors)``; raises :class:`WeightsNotFoundError` when the
    checkpoint is missing and ``ValueError`` when it belongs to another method. ``skip(config)``: names of
    components not to load (the method builds them itself if it ever needs them).
    """
    from safetensors.torch import load_file

    folder = resolve_checkpoint(repo_or_dir, revision=revision)
    index_file = folder / METHOD_INDEX
    if not index_file.is_file():
        raise WeightsNotFoundError(f"{folder} has no {METHOD_INDEX}: not a zoo method checkpoint")
    index = json.loads(index_file.read_text())
    if expected_method is not None and index.get("method") != expected_method:
        raise ValueError(f"{repo_or_dir} holds a {index.get('method')!r} checkpoint, not {expected_method!r}")
    components: dict[str, HubModule] = {}
    skipped = set(skip(index.get("config", {}))) if skip is not None else set()
    for name in index["components"]:
        if name not in skipped:
            components[name] = _load_component(folder, index, name)
    extra_file = folder / "extra.safetensors"
    extra = load_file(str(extra_file)) if extra_file.is_file() else {}
    return index.get("config", {}), components, extra


def load_component(folder: str | os.PathLike, name: str) -> HubModule:
    """Component ``name`` of the checkpoint in the local ``folder`` (one that :func:`load_components` skipped)."""
    index = json.loads((Path(folder) / METHOD_INDEX).read_text())
    if name not in index.get("components", {}):
        raise KeyError(f"{folder} has no component {name!r}")
    return _load_component(folder, index, name)


def _load_component(folder: str | os.PathLike, index: Mapping[str, Any], name: str) -> HubModule:
    """Component ``name`` of the checkpoint in ``folder`` whose ``method.json`` is ``index``."""
    return _import_qualname(index["components"][name]).from_pretrained(str(component_dir(folder, name)))


def shared_name(component_folder: Path) -> str | None:
    """The shared network a component folder refers to (its config.json is ``{"shared": name}``), else None."""
    cfg = Path(component_folder) / "config.json"
    if (Path(component_folder) / "model.safetensors").is_file() or not cfg.is_file():
        return None
    name = json.loads(cfg.read_text()).get("shared")
    if name is None:
        return None
    if not isinstance(name, str) or not name.replace("_", "").isalnum():
        raise ValueError(f"{cfg}: shared network name must be a plain name, got {name!r}")
    return name


def component_dir(folder: str | os.PathLike, name: str) -> Path:
    """Where component ``name`` of the checkpoint in ``folder`` is stored: its own subfolder, or the shared
    network it refers to (:data:`SHARED_DIR`)."""
    own = Path(folder) / name
    shared = shared_name(own)
    if shared is None:
        return own
    target = SHARED_DIR / shared
    if not (target / "model.safetensors").is_file():
        raise WeightsNotFoundError(f"{own} refers to the shared network {shared!r}, which is not in {SHARED_DIR}")
    return target


def link_shared(folder: str | os.PathLike) -> list[str]:
    """Replace every component of the checkpoint in ``folder`` whose ``model.safetensors`` is byte-identical to a
    shared network's by a reference to it. Returns the components replaced."""
    import filecmp
    import shutil

    folder = Path(folder)
    index = json.loads((folder / METHOD_INDEX).read_text())
    replaced = []
    for name in index["components"]:
        weights = folder / name / "model.safetensors"
        if not weights.is_file() or not SHARED_DIR.is_dir():
            continue
        for shared in sorted(p for p in SHARED_DIR.iterdir() if (p / "model.safetensors").is_file()):
            if filecmp.cmp(weights, shared / "model.safetensors", shallow=False) and filecmp.cmp(
                folder / name / "config.json", shared / "config.json", shallow=False
            ):
                shutil.rmtree(folder / name)
                (folder / name).mkdir()
                (folder / name / "config.json").write_text(json.dumps({"shared": shared.name}) + "\n")
                replaced.append(name)
                break
    return replaced


def checkpoint_files(folder: str | os.PathLike) -> list[tuple[str, Path]]:
    """(path in the checkpoint, local file) of every file of the checkpoint in ``folder``, a shared network's files
    standing in for the reference to it: what a self-contained copy (a Hub repo) holds."""
    folder = Path(folder)
    files = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(folder)
        if len(rel.parts) == 2 and rel.name == "config.json" and shared_name(path.parent) is not None:
            target = component_dir(folder, rel.parts[0])
            files += [(f"{rel.parts[0]}/{p.name}", p) for p in sorted(target.iterdir()) if p.is_file()]
            continue
        files.append((rel.as_posix(), path))
    return files
