"""The training protocol as a typed interface: what a method implements so ``training/train.py`` can train it.

``training/PROTOCOL.md`` explains every member and what the trainer guarantees in return. The protocol is
structural (:class:`typing.Protocol`): a method in ``zoo/methods/`` implements these members without
importing anything from ``training`` (the library never imports the trainer). The trainer checks a class
with :func:`check_trainable` before it builds anything, the optimizer groups with :func:`check_groups` and
the first losses of every group with :func:`check_losses`, so a method that does not follow the protocol
fails at once with one line naming what is missing, not somewhere inside accelerate.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, Mapping, Protocol, runtime_checkable

import torch
from torch import nn

__all__ = ["TrainableMethod", "AfterOptimizerStep", "ProtocolError", "check_trainable", "check_groups", "check_losses", "REQUIRED_METHODS", "OPTIONAL_HOOKS"]


@runtime_checkable
class TrainableMethod(Protocol):
    """A method the trainer can train (a ``zoo.methods.base.NeuralMethod`` subclass that implements these)."""

    name: ClassVar[str]
    stages: ClassVar[tuple[int, ...]]  # the paper's training stages, in order
    components: dict[str, nn.Module]  # reached at call time; wrapped together for DDP by the trainer
    config: dict[str, Any]
    train_generator: torch.Generator | None  # set by the trainer before every call; None outside training

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "TrainableMethod":
        """Every component from the YAML config (random init + frozen pretrained parts)."""

    def trainable_parameters(self, stage: int) -> dict[str, list[nn.Parameter]]:
        """Optimizer groups for ``stage`` in update order; every other parameter is frozen for the stage."""

    def compute_losses(self, stage: int, group: str, batch: dict[str, torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, float]]:
        """The total loss that updates ``group`` and the terms to log."""

    def sample_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Rows of the sample grid, each [B,3,R,R] in [-1,1]."""

    def save_pretrained(self, folder: Any) -> Any:
        """Write the folder ``zoo.load(name, local_dir=folder)`` opens (``NeuralMethod`` has it)."""

    def to(self, device: Any = None, dtype: Any = None) -> Any:
        """Move every component (``DeidMethod`` has it)."""


@runtime_checkable
class AfterOptimizerStep(Protocol):
    """Optional hook: called after ``group``'s optimizer stepped (weight clipping, buffer updates, ...)."""

    def after_optimizer_step(self, stage: int, group: str, step: int) -> None: ...


REQUIRED_METHODS = ("from_config", "trainable_parameters", "compute_losses", "sample_outputs", "save_pretrained", "to")
OPTIONAL_HOOKS = ("after_optimizer_step",)


class ProtocolError(TypeError):
    """A method does not implement the training protocol (the message names what is missing)."""


def _implemented(cls: type, member: str) -> bool:
    fn = inspect.getattr_static(cls, member, None)
    if fn is None:
        return False
    if isinstance(fn, (classmethod, staticmethod)):
        fn = fn.__func__
    return callable(fn) and getattr(fn, "__qualname__", "").split(".")[0] != "TrainableMethod"


def check_trainable(cls: Any, stage: int | None = None) -> type:
    """``cls`` if it implements :class:`TrainableMethod` (and trains in ``stage`` when given), else
    :class:`ProtocolError` (or ``ValueError`` for a stage it does not have) in one line."""
    if not isinstance(cls, type):
        raise ProtocolError(f"expected a method class, got {type(cls).__name__} {cls!r}")
    label = getattr(cls, "name", None) or cls.__name__
    missing = [m for m in REQUIRED_METHODS if not _implemented(cls, m)]
    if not isinstance(getattr(cls, "name", None), str) or not cls.name:
        missing.insert(0, "name")
    stages = getattr(cls, "stages", None)
    if not (isinstance(stages, tuple) and stages and all(isinstance(s, int) for s in stages)):
        missing.insert(0, "stages (a tuple of ints)")
    if missing:
        raise ProtocolError(
            f"{label} ({cls.__module__}.{cls.__qualname__}) cannot be trained: it lacks {', '.join(missing)} of the training protocol (training/PROTOCOL.md)"
        )
    if stage is not None and int(stage) not in cls.stages:
        raise ValueError(f"{label} trains in stages {tuple(cls.stages)}, not {stage}")
    return cls


def check_groups(label: str, stage: int, groups: Any) -> dict[str, list[nn.Parameter]]:
    """The result of ``trainable_parameters(stage)``: a non-empty ``{group name: [parameters]}``."""
    if not isinstance(groups, Mapping) or not groups:
        raise ProtocolError(f"{label}.trainable_parameters({stage}) returned no groups ({type(groups).__name__}); expected {{group name: [parameters]}}")
    for g, params in groups.items():
        params = list(params) if not isinstance(params, list) else params
        if not isinstance(g, str) or not params or not all(isinstance(p, torch.Tensor) for p in params):
            raise ProtocolError(f"{label}.trainable_parameters({stage}): group {g!r} must be a non-empty list of parameters")
    return {g: list(ps) for g, ps in groups.items()}


def check_losses(label: str, group: str, out: Any) -> tuple[torch.Tensor, Mapping[str, Any]]:
    """The result of ``compute_losses``: ``(scalar loss tensor, {term: float})``."""
    ok = isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], torch.Tensor) and out[0].numel() == 1
    if not ok or not isinstance(out[1], Mapping):
        raise ProtocolError(f"{label}.compute_losses(..., group={group!r}) must return (scalar loss tensor, {{term: float}}), got {type(out).__name__}")
    return out
