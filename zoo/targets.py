"""Resolving ``"module:ClassName"`` strings (registry entries, demo variants, configs) to the class they name."""

from __future__ import annotations

import importlib

__all__ = ["import_target"]


def import_target(target: str) -> type:
    """The class named by ``"module:ClassName"``."""
    module_name, _, cls_name = target.partition(":")
    return getattr(importlib.import_module(module_name), cls_name)
