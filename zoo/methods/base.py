"""The contract every zoo method implements: two tensor functions on aligned face crops at its native resolution::

    anonymize_faces(x, keys, **controls) -> y      # x, y: [N, 3, R, R] float in [-1, 1]
    recover_faces(y, keys, **controls) -> x_hat    # reversible methods only

plus its class attributes (name, controls, reversible, resolution, guard settings), its config and weights
(:class:`NeuralMethod`). ``keys`` holds one :class:`~zoo.keys.KeyMaterial` per face (derived from the user's
secret, the method name and the face's index). The photo flow around it (detection, alignment, the privacy
guard, compositing, the latent carrier, fail-closed blurring and the report) is :class:`zoo.pipeline.DeidPipeline`.

Public API (images are PIL images or uint8 HxWx3 arrays), each call one run of the pipeline::

    m.anonymize(image, key=None, **controls) -> DeidResult
    m.recover(image, key, **controls) -> DeidResult          # if m.reversible
    m.diversity(image, keys, **controls) -> list[DeidResult]

Pass ``aligned=True`` to give already aligned square crops (one image or a list) instead of photos,
and ``min_face_score=0.3`` (any of the calls) to lower the face detector's threshold (default: the
detector's own, e.g. YuNet 0.6): more faces found, more false alarms anonymized too. Every face found is
in the report with its detector score and what was done to it.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterable, Sequence

import numpy as np
import torch

from ..keys import KeyMaterial, Secret, as_secret
from ..pipeline import DeidPipeline, ImageLike
from ..report import DeidResult, FaceRecord

__all__ = ["Control", "FaceRecord", "DeidResult", "DeidMethod", "NeuralMethod", "ImageLike"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Control:
    """A user-facing control of a method (a slider or a field in the app, a CLI flag)."""

    name: str
    kind: str  # "float" | "int" | "str"
    default: Any
    minimum: float | None = None
    maximum: float | None = None
    help: str = ""

    def validate(self, value: Any) -> Any:
        if value is None:
            return self.default
        if self.kind == "float":
            value = float(value)
        elif self.kind == "int":
            if float(value) != int(float(value)):
                raise ValueError(f"control {self.name!r} must be an integer, got {value!r}")
            value = int(float(value))
        else:
            value = str(value)
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"control {self.name!r}={value} is below its minimum {self.minimum}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"control {self.name!r}={value} is above its maximum {self.maximum}")
        return value


class DeidMethod:
    """Base class of every zoo method. Subclasses set the class attributes and the ``*_faces`` functions."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    reversible: ClassVar[bool] = False
    uses_key: ClassVar[bool] = True
    #: anonymize writes each face's anonymized code into the photo's low bits (:mod:`zoo.carrier`) and
    #: recover starts from it when it is intact (``anonymize_faces_carrying``, ``recover_faces(carried=)``)
    carries_latent: ClassVar[bool] = False
    controls: ClassVar[tuple[Control, ...]] = ()
    #: privacy guard (:mod:`zoo.guard`): whether anonymization checks every face by default (on for the
    #: generative methods, :class:`NeuralMethod`), and how many key variants (:meth:`guard_variant`) it
    #: may try on a face SFace still finds close to the original
    guard_by_default: ClassVar[bool] = False
    guard_variants: ClassVar[int] = 0
    #: reversible keyed methods: the guard also recovers each candidate with one stand-in wrong key and accepts it
    #: only if no recognizer knows the person in that recovery either (:func:`zoo.guard.wrong_key_probe`);
    #: the face it keeps is recovered with ``guard_wrong_keys`` stand-in wrong keys in all, the nearest counting
    guard_wrong_key_check: ClassVar[bool] = True
    guard_wrong_keys: ClassVar[int] = 1
    #: the method draws a new face (generative): its output goes through :mod:`zoo.compositing` (face-mesh mask,
    #: colour, grain, blend). Methods whose recovery reads the output pixels back keep the plain paste.
    draws_new_face: ClassVar[bool] = False
    #: how a composited face is blended in (:func:`zoo.compositing.blend`): "feather" (alpha) or "poisson"
    #: (gradient-domain, which pulls the photo's colours at the region's edge into the face: docs/reference.md)
    blend_mode: ClassVar[str] = "feather"
    #: native aligned-crop size in pixels (instances may override from their config)
    resolution: int = 256
    #: batch size for aligned faces inside one call
    max_batch: int = 16
    #: the weights this instance runs on (a :class:`zoo.registry.WeightsChoice`, set by ``zoo.load``)
    weights: Any = None

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self.dtype = torch.float32

    # ------------------------------------------------------------------ to implement
    def anonymize_faces(self, x: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        """[N,3,R,R] in [-1,1] -> [N,3,R,R] in [-1,1]; one key per row."""
        raise NotImplementedError

    def recover_faces(self, y: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        """Inverse of :meth:`anonymize_faces` with the same keys (reversible methods only)."""
        raise NotImplementedError(f"{self.name} is not reversible")

    def anonymize_faces_carrying(self, x: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """As :meth:`anonymize_faces`, also returning what the carrier writes into each face (methods with
        :attr:`carries_latent`): {"latent": ``[N, d]``, d <= 100} and optionally {"code": ``[N, rows, cols]``}."""
        raise NotImplementedError(f"{self.name} carries no latent")

    def reconstruct_faces(self, x: torch.Tensor) -> torch.Tensor:
        """The method's own pass with the identity left unchanged ([N,3,R,R] in [-1,1] both ways), for
        generative methods that re-synthesise the face: the reference the evaluator compares anonymized
        faces with (how far the generator alone moves the identity)."""
        raise NotImplementedError(f"{self.name} has no identity-preserving reconstruction")

    def anonymize_in_photo(self, rgb: np.ndarray, faces: Sequence[Any], keys: Sequence[KeyMaterial | None], **controls: Any) -> tuple[np.ndarray, list[str]]:
        """Optional: anonymize every face of a photo directly in photo pixels (no aligned crop), for methods
        whose effect is a region of the photo (the classical baselines' head-sized regions). ``rgb``: uint8
        [H, W, 3]; ``faces``: :class:`~zoo.detectors.DetectedFace` list; one key per face (None for methods
        that ignore the key); ``controls`` validated. Returns the new photo and one line per face saying what
        was done to it (the report's ``action``). Methods that do not override it go through aligned crops."""
        raise NotImplementedError

    @property
    def works_in_photo(self) -> bool:
        return type(self).anonymize_in_photo is not DeidMethod.anonymize_in_photo

    @property
    def can_reconstruct(self) -> bool:
        return type(self).reconstruct_faces is not DeidMethod.reconstruct_faces

    def modules(self) -> Iterable[torch.nn.Module]:
        """The torch modules this method runs (moved by :meth:`to`)."""
        return []

    # ------------------------------------------------------------------ description
    @classmethod
    def capabilities(cls) -> dict[str, Any]:
        return {
            "name": cls.name,
            "summary": cls.summary,
            "paper": cls.paper,
            "reversible": cls.reversible,
            "uses_key": cls.uses_key,
            "controls": {c.name: asdict(c) for c in cls.controls},
            "resolution": cls.resolution,
        }

    def to(self, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> "DeidMethod":
        if device is not None:
            self.device = torch.device(device)
        if dtype is not None:
            self.dtype = dtype
        for module in self.modules():
            module.to(device=self.device, dtype=self.dtype)
            module.eval()
        return self

    def validate_controls(self, controls: dict[str, Any]) -> dict[str, Any]:
        known = {c.name: c for c in self.controls}
        unknown = sorted(set(controls) - set(known))
        if unknown:
            raise ValueError(f"{self.name} has no control(s) {unknown}; it takes {sorted(known) or 'none'}")
        return {name: c.validate(controls.get(name)) for name, c in known.items()}

    def run_secret(self, key: str | bytes | Secret | None, stretched: Secret | None = None):
        """What a whole run passes as ``key`` to every job: the secret stretched once (PBKDF2 is slow on
        purpose, so a CLI run over many files must not repeat it). ``stretched``: an already stretched
        ``Secret`` of the same key, shared across methods. Methods with their own key format override."""
        return stretched if stretched is not None else as_secret(key)

    def face_keys(self, secret: Secret | None, n: int, start: int = 0) -> list[KeyMaterial]:
        """One key per face, face ``i`` keyed by (secret, method name, i)."""
        if secret is None:
            secret = Secret.random()  # one fresh secret, used once and forgotten; faces still get independent keys
        return [secret.derive(self.name, i) for i in range(start, start + n)]

    def guard_variant(self, keys: Sequence[KeyMaterial], controls: dict[str, Any], number: int) -> tuple[list, dict[str, Any]]:
        """The privacy guard's key variant ``number`` (1..:attr:`guard_variants`; 0 = as given): the keys
        and controls to anonymize (and, read back from the carrier, to recover) a face with. Default: key
        material derived from each face's key (:meth:`KeyMaterial.variant`), same controls."""
        return [k.variant(number) if k is not None else None for k in keys], dict(controls)

    # ------------------------------------------------------------------ public API
    def anonymize(self, image: ImageLike, key: str | bytes | Secret | None = None, *, aligned: bool = False, **controls: Any):
        """Anonymize every face of a photo (or the given aligned crop(s) with ``aligned=True``).

        ``key``: the user's secret. With ``key=None`` a fresh random secret is used and forgotten, so the
        result cannot be recovered. Returns a :class:`DeidResult` (a list of them for a list of crops).
        """
        secret = as_secret(key) if (key is not None and self.uses_key) else None  # a keyless method neither stretches nor reports a key
        return DeidPipeline(self).run("anonymize", image, secret, aligned, controls)

    def recover(self, image: ImageLike, key: str | bytes | Secret, *, aligned: bool = False, **controls: Any):
        """Recover the original faces from an anonymized photo (or crop(s)) with the same key."""
        if not self.reversible:
            raise NotImplementedError(f"method {self.name!r} is not reversible")
        if key is None:
            raise ValueError("recover() needs the key that was used to anonymize")
        return DeidPipeline(self).run("recover", image, as_secret(key), aligned, controls)

    def reconstruction(self, image: ImageLike, *, aligned: bool = False, **controls: Any):
        """Every face through :meth:`reconstruct_faces` (no identity change), pasted back like :meth:`anonymize`."""
        if not self.can_reconstruct:
            raise NotImplementedError(f"method {self.name!r} has no identity-preserving reconstruction")
        return DeidPipeline(self).run("reconstruct", image, None, aligned, controls)

    def diversity(self, image: ImageLike, keys: Sequence[str | bytes | Secret] | int = 4, *, aligned: bool = False, **controls: Any) -> list:
        """Anonymize the same input with several keys (``keys`` may be a count of fresh random keys)."""
        if isinstance(keys, int):
            keys = [Secret.random() for _ in range(keys)]
        return [self.anonymize(image, key=k, aligned=aligned, **controls) for k in keys]

    @property
    def weights_text(self) -> str | None:
        """One line for reports: the weights label (None for a method built by hand)."""
        return None if self.weights is None else self.weights.label

    # ------------------------------------------------------------------ internals
    def privacy_guard(self, option: Any = None):
        """The :class:`~zoo.guard.PrivacyGuard` an anonymization runs with: ``option`` None -> on when
        :attr:`guard_by_default`; False -> off; True -> on; a float -> on, retrying to that SFace distance."""
        if option is None:
            option = self.guard_by_default
        if isinstance(option, str):
            option = {"on": True, "true": True, "off": False, "false": False}.get(option.strip().lower(), option)
        if option is False:
            return None
        from ..guard import guard_for

        return guard_for(None if option is True else float(option))

    @contextlib.contextmanager
    def run_scope(self):
        """State that lives for one call (:meth:`process_frames`, an aligned-crop call): e.g. the demo
        methods' GAN-inversion cache that the privacy guard's key variants reuse. Nothing by default."""
        yield


class NeuralMethod(DeidMethod):
    """A method built from trained networks, saved/loaded as a diffusers-style component folder.

    Subclasses implement ``__init__(self, config: dict, components: dict[str, HubModule], extra: dict[str, Tensor])``
    and ``build(cls, config) -> components`` (random init, for training), and list their components in
    ``component_names``. ``save_pretrained``/``from_pretrained`` go through :mod:`zoo.hub`.
    """

    component_names: ClassVar[tuple[str, ...]] = ()
    #: the local folder the method was loaded from (:meth:`from_pretrained`); None for one built in memory
    checkpoint_folder: Path | None = None
    guard_by_default: ClassVar[bool] = True
    draws_new_face: ClassVar[bool] = True

    def __init__(self, config: dict[str, Any], components: dict[str, torch.nn.Module], extra: dict[str, torch.Tensor] | None = None):
        super().__init__()
        self.config = dict(config)
        self.components = dict(components)
        self.extra = dict(extra or {})
        self.resolution = int(self.config.get("resolution", type(self).resolution))
        deferred = set(self.deferred_components(self.config))
        missing = [n for n in self.component_names if n not in self.components and n not in deferred]
        if missing:
            raise ValueError(f"{self.name} checkpoint lacks components {missing}")

    def modules(self) -> Iterable[torch.nn.Module]:
        return self.components.values()

    def extra_tensors(self) -> dict[str, torch.Tensor]:
        """Non-module tensors saved with the checkpoint (override to add, e.g., a reference library)."""
        return self.extra

    def stage_config(self, stage: int) -> dict[str, Any]:
        """``config["stages"][stage]`` (int keys from YAML, str keys after a JSON round trip), or {}."""
        stages = self.config.get("stages", {}) or {}
        return stages.get(stage, stages.get(str(stage), {})) or {}

    def save_pretrained(self, folder) -> Any:
        from ..hub import save_components

        return save_components(folder, self.name, self.components, self.config, self.extra_tensors())

    @classmethod
    def from_pretrained(cls, repo_or_dir, *, revision: str | None = None) -> "NeuralMethod":
        from ..hub import load_components, resolve_checkpoint

        folder = resolve_checkpoint(repo_or_dir, revision=revision)
        config, components, extra = load_components(folder, expected_method=cls.name, skip=lambda c: cls.variant_for(c).deferred_components(c))
        method = cls.variant_for(config)(config, components, extra)
        method.checkpoint_folder = folder
        return method

    @classmethod
    def deferred_components(cls, config: dict[str, Any]) -> tuple[str, ...]:
        """Components a checkpoint with ``config`` does not need at load: not loaded, built on first need (none
        by default)."""
        return ()

    #: ``"module:Class"`` of the demo-tier variant (:mod:`zoo.methods.latent_demo`), if the method has one
    demo_variant: ClassVar[str | None] = None

    @classmethod
    def variant_for(cls, config: dict[str, Any]) -> type:
        """The class that runs a checkpoint: the demo variant when its config says ``backbone: dcgan``."""
        if config.get("backbone") == "dcgan" and cls.demo_variant:
            from ..targets import import_target

            return import_target(cls.demo_variant)
        return cls
