"""The method registry (timm-style): ``load(name)``, ``list_methods()``, ``info(name)``.

Each method module adds one :func:`register_method` line at the bottom of this file, once it really
works; nothing half-built is listed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["MethodEntry", "register_method", "load", "list_methods", "info", "get_method_class"]


@dataclass(frozen=True)
class MethodEntry:
    name: str
    target: str  # "module:ClassName"
    default_repo: str | None = None  # Hub repo id with the method's weights; None = needs no weights
    default_revision: str | None = None


_REGISTRY: dict[str, MethodEntry] = {}


def register_method(name: str, target: str, default_repo: str | None = None, default_revision: str | None = None) -> None:
    _REGISTRY[name] = MethodEntry(name, target, default_repo, default_revision)


def _entry(name: str) -> MethodEntry:
    key = name.strip().lower()
    if key not in _REGISTRY:
        raise KeyError(f"unknown method {name!r}; available: {', '.join(list_methods())}")
    return _REGISTRY[key]


def get_method_class(name: str) -> type:
    module_name, _, cls_name = _entry(name).target.partition(":")
    return getattr(importlib.import_module(module_name), cls_name)


def list_methods() -> list[str]:
    """Names of every registered method, in registration order."""
    return list(_REGISTRY)


def _auto_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load(
    name: str,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    revision: str | None = None,
    local_dir: str | None = None,
    **kwargs: Any,
):
    """Build method ``name`` ready to run.

    Weightless methods (the classical baselines) take their options as ``kwargs``. Neural methods load
    ``local_dir`` when given, else their default Hub repo at ``revision`` (``HF_HUB_OFFLINE=1`` means the
    local cache only); a missing checkpoint raises :class:`zoo.hub.WeightsNotFoundError` naming the repo.
    ``device`` defaults to CUDA when available.
    """
    entry = _entry(name)
    cls = get_method_class(name)
    if entry.default_repo is None and local_dir is None:
        method = cls(**kwargs)
    else:
        if kwargs:
            raise TypeError(f"{name} takes no options besides device/dtype/revision/local_dir; got {sorted(kwargs)}")
        method = cls.from_pretrained(local_dir or entry.default_repo, revision=revision or entry.default_revision)
    return method.to(device if device is not None else _auto_device(), dtype)


def weights_status(name: str) -> tuple[bool, str]:
    """(available, reason) for the default weights, checked without any network access."""
    entry = _entry(name)
    if entry.default_repo is None:
        return True, "needs no weights"
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(entry.default_repo, revision=entry.default_revision, local_files_only=True)
        return True, f"in the local Hub cache ({entry.default_repo})"
    except Exception:  # noqa: BLE001 - any failure means not cached
        return False, f"weights not installed: {entry.default_repo} is not in the local Hub cache (pass local_dir=...)"


def info(name: str) -> dict[str, Any]:
    """Capabilities (reversible, controls, native resolution), weights repo and whether weights are present."""
    entry = _entry(name)
    caps = get_method_class(name).capabilities()
    available, reason = weights_status(name)
    caps.update(
        {
            "default_repo": entry.default_repo,
            "default_revision": entry.default_revision,
            "weights_available": available,
            "weights_status": reason,
        }
    )
    return caps


# ---------------------------------------------------------------- registered methods
register_method("blur", "zoo.methods.baselines:GaussianBlur")
register_method("pixelate", "zoo.methods.baselines:Pixelate")
register_method("noise", "zoo.methods.baselines:AdditiveNoise")
register_method("mask", "zoo.methods.baselines:SolidMask")
register_method("ifadit", "zoo.methods.ifadit:IFADIT", default_repo="face-deid-zoo/ifadit")
register_method("dbaf", "zoo.methods.dbaf:DBAF", default_repo="face-deid-zoo/dbaf")
register_method("hford", "zoo.methods.hford:HFORD", default_repo="face-deid-zoo/hford")
register_method("personal", "zoo.methods.personal:Personal", default_repo="face-deid-zoo/personal")
register_method("ideudemon", "zoo.methods.ideudemon:IDEudemon", default_repo="face-deid-zoo/ideudemon")
