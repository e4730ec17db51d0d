"""The interface every zoo method shares, and the full-photo pipeline around it.

A method implements two tensor functions on aligned face crops at its native resolution::

    anonymize_faces(x, keys, **controls) -> y      # x, y: [N, 3, R, R] float in [-1, 1]
    recover_faces(y, keys, **controls) -> x_hat    # reversible methods only

``keys`` holds one :class:`~zoo.keys.KeyMaterial` per face (derived from the user's secret, the method
name and the face's index). Everything else is shared and lives here: image loading, face detection,
FFHQ-style alignment, inverse warp + feathered paste-back, per-face keys, fail-closed blurring of any
face that cannot be processed, and the JSON report.

Public API (images are PIL images or uint8 HxWx3 arrays)::

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
import inspect
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Iterable, Sequence

import cv2
import numpy as np
import torch
from PIL import Image

from ..keys import KeyMaterial, Secret, as_secret

__all__ = ["Control", "FaceRecord", "DeidResult", "DeidMethod", "ImageLike", "attach_carried"]

log = logging.getLogger(__name__)

ImageLike = Any  # PIL.Image.Image | np.ndarray (uint8 HxWx3) | str | os.PathLike | bytes | DeidResult


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


@dataclass
class FaceRecord:
    """What happened to one face. Coordinates are input-image pixels."""

    index: int
    box: list[float]  # [x0, y0, x1, y1]
    score: float
    landmarks: list[list[float]]  # 5 x [x, y]: left eye, right eye, nose, left mouth, right mouth
    status: str = "processed"  # "processed" | "fallback_blur" (the method failed) | "guard_blur" (zoo.guard)
    error: str | None = None
    key_fingerprint: str | None = None
    latent_carried: bool | None = None  # demo tier: the anonymized code rode in the image (zoo.carrier)
    guard: dict | None = None  # privacy guard (zoo.guard): SFace and FaceRes distances, key variant kept, blurred or not
    action: str | None = None  # what was done to the face in photo pixels (methods with anonymize_in_photo)
    composite: dict | None = None  # how the new face was put into the photo (zoo.compositing): mask, colour, sharpness, blend


@dataclass
class DeidResult:
    """An anonymized (or recovered) image with its report. ``np.asarray(result)`` gives uint8 HxWx3."""

    image: Image.Image
    method: str
    operation: str  # "anonymize" | "recover"
    faces: list[FaceRecord] = field(default_factory=list)
    key_fingerprint: str | None = None
    controls: dict[str, Any] = field(default_factory=dict)
    aligned_input: bool = False
    seconds: float = 0.0
    weights: str | None = None  # which weights produced it (e.g. the demo-checkpoint label)

    @property
    def fallbacks(self) -> list[int]:
        return [f.index for f in self.faces if f.status != "processed"]

    def report(self) -> dict[str, Any]:
        """JSON-serialisable report: faces, boxes, method, key fingerprint, fallbacks (never the key)."""
        return {
            "method": self.method,
            "operation": self.operation,
            "image_size": list(self.image.size),
            "faces_found": len(self.faces),
            "faces": [asdict(f) for f in self.faces],
            "fallbacks": self.fallbacks,
            "key_fingerprint": self.key_fingerprint,
            "controls": self.controls,
            "aligned_input": self.aligned_input,
            "weights": self.weights,
            "seconds": round(self.seconds, 4),
        }

    def __array__(self, dtype=None, copy=None):
        arr = np.asarray(self.image.convert("RGB"))
        return arr.astype(dtype) if dtype is not None else arr


class DeidMethod:
    """Base class of every zoo method. Subclasses set the class attributes and the ``*_faces`` functions."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    reversible: ClassVar[bool] = False
    uses_key: ClassVar[bool] = True
    #: demo tier: anonymize writes each face's anonymized latent into its pixels (:mod:`zoo.carrier`) and
    #: recover starts from it when it is intact (``anonymize_faces_carrying``, ``recover_faces(carried=)``)
    carries_latent: ClassVar[bool] = False
    controls: ClassVar[tuple[Control, ...]] = ()
    #: privacy guard (:mod:`zoo.guard`): whether anonymization checks every face by default (on for the
    #: generative methods, :class:`NeuralMethod`), and how many key variants (:meth:`guard_variant`) it
    #: may try on a face SFace still finds close to the original
    guard_by_default: ClassVar[bool] = False
    guard_variants: ClassVar[int] = 0
    #: reversible keyed methods: the guard also recovers each candidate with one stand-in wrong key and accepts it
    #: only if neither recognizer knows the person in that recovery either (:func:`zoo.guard.wrong_key_probe`)
    guard_wrong_key_check: ClassVar[bool] = True
    #: the method draws a new face (generative): its output goes through :mod:`zoo.compositing` (face-mesh mask,
    #: colour, grain, blend). Methods whose recovery reads the output pixels back keep the plain paste.
    draws_new_face: ClassVar[bool] = False
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

    def anonymize_faces_carrying(self, x: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`anonymize_faces`, also returning the anonymized latents ``[N, d]`` (methods with
        :attr:`carries_latent`)."""
        raise NotImplementedError(f"{self.name} carries no latent")

    def reconstruct_faces(self, x: torch.Tensor) -> torch.Tensor:
        """The method's own pass with the identity left unchanged ([N,3,R,R] in [-1,1] both ways), for
        generative methods that re-synthesise the face: the reference the evaluator compares anonymized
        faces with (how far the generator alone moves the identity)."""
        raise NotImplementedError(f"{self.name} has no identity-preserving reconstruction")

    def anonymize_in_photo(self, rgb: np.ndarray, faces: Sequence[Any], keys: Sequence[KeyMaterial | None], **controls: Any) -> tuple[np.ndarray, list[str]]:
        """Optional: anonymize every face of a photo directly in photo pixels (no aligned crop), for methods
        whose effect is a region of the photo (the classical baselines' head-sized regions). ``rgb``: uint8
        [H, W, 3]; ``faces``: :class:`~zoo.pipeline.DetectedFace` list; one key per face (None for methods
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
        return self._run("anonymize", image, secret, aligned, controls)

    def recover(self, image: ImageLike, key: str | bytes | Secret, *, aligned: bool = False, **controls: Any):
        """Recover the original faces from an anonymized photo (or crop(s)) with the same key."""
        if not self.reversible:
            raise NotImplementedError(f"method {self.name!r} is not reversible")
        if key is None:
            raise ValueError("recover() needs the key that was used to anonymize")
        return self._run("recover", image, as_secret(key), aligned, controls)

    def reconstruction(self, image: ImageLike, *, aligned: bool = False, **controls: Any):
        """Every face through :meth:`reconstruct_faces` (no identity change), pasted back like :meth:`anonymize`."""
        if not self.can_reconstruct:
            raise NotImplementedError(f"method {self.name!r} has no identity-preserving reconstruction")
        return self._run("reconstruct", image, None, aligned, controls)

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
    def _process_batch(self, operation: str, crops: np.ndarray, keys: list[KeyMaterial], controls: dict, carried: list | None = None):
        """uint8 [N,R,R,3] -> (uint8 [N,R,R,3], latents) through the tensor functions, in chunks of max_batch.

        ``latents`` is a float32 ``[N, d]`` array of the anonymized codes for a method that carries them
        (:attr:`carries_latent`, anonymize only), else None. ``carried`` (recover only): one carried code
        (float32 ``[d]``) or None per face, passed on to :meth:`recover_faces`.
        """
        from ..imageio import from_tensor, to_tensor

        outs, latents = [], []
        with torch.inference_mode():
            for s in range(0, len(crops), self.max_batch):
                x = to_tensor(crops[s : s + self.max_batch], self.resolution).to(self.device, self.dtype)
                k = keys[s : s + self.max_batch]
                if operation == "anonymize" and self.carries_latent:
                    y, z = self.anonymize_faces_carrying(x, k, **controls)
                    latents.append(z.float().cpu().numpy())
                elif operation == "anonymize":
                    y = self.anonymize_faces(x, k, **controls)
                elif operation == "recover" and self.carries_latent:
                    y = self.recover_faces(x, k, carried=(carried or [None] * len(crops))[s : s + self.max_batch], **controls)
                elif operation == "recover":
                    y = self.recover_faces(x, k, **controls)
                else:  # the controls that the reconstruction takes (e.g. the demo tier's refine_steps)
                    accepted = inspect.signature(self.reconstruct_faces).parameters
                    y = self.reconstruct_faces(x, **{k: v for k, v in controls.items() if k in accepted})
                if y.shape != x.shape:
                    raise RuntimeError(f"{self.name}.{operation}_faces returned shape {tuple(y.shape)} for {tuple(x.shape)}")
                if not torch.isfinite(y).all():
                    raise FloatingPointError(f"{self.name} produced non-finite values")
                outs.append(from_tensor(y.float().cpu()))
        return np.concatenate(outs, axis=0), (np.concatenate(latents) if latents else None)

    def keys_for(self, operation: str, secret: Secret | None, indices: Sequence[int]) -> list:
        """One key per face, face ``indices[j]`` keyed by its index (a carried face keeps the index it had
        when it was anonymized). Methods that ignore the key get none (and no fresh random secret is
        stretched for them)."""
        n = len(indices)
        if operation == "reconstruct" or not self.uses_key:
            return [None] * n
        if list(indices) == list(range(n)):
            return self.face_keys(secret, n)
        return [self.face_keys(secret, 1, start=int(i))[0] for i in indices]

    def process_isolated(self, operation, crops, keys, controls, carried=None):
        """Run the whole batch; if it fails, retry face by face so one bad face cannot sink the others.
        Returns (images or None per face, error or None per face, carried latent or None per face)."""
        carried = carried if carried is not None else [None] * len(crops)
        try:
            out, lat = self._process_batch(operation, crops, keys, controls, carried)
            return list(out), [None] * len(crops), (list(lat) if lat is not None else [None] * len(crops))
        except Exception as err:  # noqa: BLE001 - fail closed, report the reason
            log.warning("%s batch failed (%s); retrying faces one by one", self.name, err)
        results: list[np.ndarray | None] = []
        errors: list[str | None] = []
        latents: list[np.ndarray | None] = []
        for i in range(len(crops)):
            try:
                out, lat = self._process_batch(operation, crops[i : i + 1], keys[i : i + 1], controls, carried[i : i + 1])
                results.append(out[0])
                latents.append(lat[0] if lat is not None else None)
                errors.append(None)
            except Exception as err:  # noqa: BLE001
                results.append(None)
                latents.append(None)
                errors.append(f"{type(err).__name__}: {err}")
        return results, errors, latents

    #: options a run takes with the method controls that are not method controls
    RUN_OPTIONS: ClassVar[tuple[str, ...]] = ("min_face_score", "privacy_guard")

    def split_run_options(self, operation: str, controls: dict[str, Any]):
        """``controls`` -> (detector threshold: float or None, privacy guard or None, validated method
        controls). ``min_face_score`` must lie in (0, 1); ``privacy_guard`` (:meth:`privacy_guard`) applies to
        anonymization only."""
        controls = dict(controls)
        min_score = controls.pop("min_face_score", None)
        if min_score is not None and not 0.0 < float(min_score) < 1.0:
            raise ValueError(f"min_face_score must be between 0 and 1 (exclusive), got {min_score!r}")
        guard = self.privacy_guard(controls.pop("privacy_guard", None)) if operation == "anonymize" else None
        return (None if min_score is None else float(min_score)), guard, self.validate_controls(controls)

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

    def _guard_crops(self, guard, crops, key_indices, secret, controls, outs, latents):
        """The privacy guard on aligned crops (``aligned=True``): :func:`zoo.guard.protect` with the SFace and FaceRes
        distances between the aligned input and output crops. Returns (outs, latents, variants, checks)."""
        from ..guard import protect

        live = [i for i in range(len(outs)) if outs[i] is not None]
        originals = dict(zip(live, guard.crop_embeddings(crops[live]))) if live else {}

        def distances(candidate: list, which: list[int]) -> dict[int, tuple[float, float]]:
            if not which:
                return {}
            d = guard.distances(np.stack([originals[i] for i in which]), guard.crop_embeddings(np.stack([candidate[i] for i in which])))
            return {i: (float(x[0]), float(x[1])) for i, x in zip(which, d)}

        return protect(self, guard, crops, key_indices, secret, controls, outs, latents, distances, crop_originals=originals)

    @contextlib.contextmanager
    def run_scope(self):
        """State that lives for one call (:meth:`process_frames`, an aligned-crop call): e.g. the demo
        methods' GAN-inversion cache that the privacy guard's key variants reuse. Nothing by default."""
        yield

    def process_frames(self, *args: Any, **kwargs: Any) -> list[tuple[np.ndarray, list[FaceRecord]]]:
        """See :meth:`_process_frames` (run inside :meth:`run_scope`)."""
        with self.run_scope():
            return self._process_frames(*args, **kwargs)

    def _process_frames(
        self,
        operation: str,
        frames: Sequence[np.ndarray],
        faces: Sequence[Sequence[Any]],
        indices: Sequence[Sequence[int]],
        secret: Secret | None,
        controls: dict,
        carried: Sequence[Sequence[Any]] | None = None,
        guard: Any = None,
        guard_variants: int | None = None,
    ) -> list[tuple[np.ndarray, list[FaceRecord]]]:
        """The photo path after detection, for one photo or several video frames in one batched call.

        ``frames``: uint8 RGB ``[H, W, 3]`` each; ``faces[f]``: the :class:`~zoo.pipeline.DetectedFace`
        list of frame ``f``; ``indices[f]``: each face's key index (face ``i`` is keyed by (secret, method
        name, i), so a video track keeps one key by keeping one index); ``carried[f]`` (recover, methods
        that carry a latent): each face's :class:`~zoo.carrier.CarriedLatent` (or bare code) or None.
        ``controls`` must be validated (:meth:`validate_controls`). ``guard`` (anonymize): a
        :class:`~zoo.guard.PrivacyGuard` that checks every output face, or None; ``guard_variants``: how many
        key variants it may try (default :attr:`guard_variants`; a video passes 0 so that a track keeps
        one identity, and a face the guard rejects is blurred in that frame). Every face of every frame
        goes through the method in one batch (in chunks of :attr:`max_batch`); a face that fails is
        hard-blurred (fail closed). Returns one ``(canvas, records)`` per frame: the processed copy and
        one :class:`FaceRecord` per face.
        """
        if operation == "anonymize" and self.works_in_photo:
            flat_keys = self.keys_for("anonymize", secret, [int(i) for ix in indices for i in ix])  # one call per batch
            out, pos = [], 0
            for rgb, fs, ix in zip(frames, faces, indices):
                out.append(self._frame_in_photo(rgb, list(fs), list(ix), secret, controls, flat_keys[pos : pos + len(ix)]))
                pos += len(ix)
            return out
        from .. import carrier, pipeline

        carries = self.carries_latent and operation in ("anonymize", "recover")
        tag = carrier.method_tag(self.name)
        fingerprint = secret.fingerprint if secret is not None else None
        if carried is None:
            carried = [[None] * len(fs) for fs in faces]
        flat = [(f, j) for f in range(len(frames)) for j in range(len(faces[f]))]
        aligned_all = [pipeline.align_face(frames[f], faces[f][j].landmarks, self.resolution) for f, j in flat]
        outs_all: list = []
        errors_all: list = []
        latents_all: list = []
        variants_all: list[int] = [0] * len(flat)
        checks_all: list = [None] * len(flat)
        if flat:
            crops = np.stack([a.crop for a in aligned_all])
            key_indices = [indices[f][j] for f, j in flat]
            outs_all, errors_all, latents_all, variants_all = self._process_keyed(
                operation, crops, key_indices, secret, controls, [carried[f][j] for f, j in flat]
            )
            if guard is not None and operation == "anonymize":
                place = [(frames[f], faces[f][j], aligned_all[i].matrix) for i, (f, j) in enumerate(flat)]
                outs_all, latents_all, variants_all, checks_all = self._guard_faces(
                    guard, place, flat, crops, key_indices, secret, controls, outs_all, latents_all, guard_variants
                )
        results: list[tuple[np.ndarray, list[FaceRecord]]] = []
        pos = 0
        for f, rgb in enumerate(frames):
            fr_faces, fr_indices, fr_carried = list(faces[f]), list(indices[f]), list(carried[f])
            n = len(fr_faces)
            sl = slice(pos, pos + n)
            aligned_faces, outs, errors, latents = aligned_all[sl], outs_all[sl], errors_all[sl], latents_all[sl]
            variants, checks = variants_all[sl], checks_all[sl]
            pos += n
            infos: list = []
            canvas = _compose(rgb, fr_faces, [a.matrix for a in aligned_faces], outs, infos, self.draws_new_face)
            for face, check in zip(fr_faces, checks):
                if check is not None and check.blurred:
                    canvas = pipeline.blur_face(canvas, face)
            records: list[FaceRecord] = []
            if n:
                flags: list[bool | None] = [None] * n
                if carries and operation == "anonymize":  # after every paste, so no face covers another's block
                    taken: list = []
                    for j, (face, out, lat) in enumerate(zip(fr_faces, outs, latents)):
                        if out is not None and lat is not None:
                            block = carrier.CarriedLatent(
                                tag, fr_indices[j], face.box.astype(np.float32), face.landmarks.astype(np.float32), lat, variant=variants[j]
                            )
                            flags[j] = carrier.embed(canvas, block, face.center, min(face.width, face.height), taken)
                elif carries:
                    flags = [c is not None for c in fr_carried]
                for j, (face, err) in enumerate(zip(fr_faces, errors)):
                    status = "processed" if err is None else "fallback_blur"
                    if err is None and checks[j] is not None and checks[j].blurred:
                        status = "guard_blur"
                    records.append(
                        FaceRecord(
                            index=fr_indices[j],
                            box=[float(v) for v in face.box],
                            score=float(face.score),
                            landmarks=[[float(a), float(b)] for a, b in face.landmarks],
                            status=status,
                            error=err,
                            key_fingerprint=fingerprint,
                            latent_carried=flags[j],
                            guard=checks[j].as_dict() if checks[j] is not None else None,
                            composite=infos[j].as_dict() if infos[j] is not None and status == "processed" else None,
                        )
                    )
            results.append((canvas, records))
        return results

    def _process_keyed(self, operation, crops, key_indices, secret, controls, carried):
        """Key every face (by its index, and by the guard variant its carried block names) and run them,
        one batch per variant. Returns (outputs, errors, latents, variants), one entry per face."""
        from ..carrier import CarriedLatent

        n = len(crops)
        codes = [c.latent if isinstance(c, CarriedLatent) else c for c in carried]
        variants = [c.variant if isinstance(c, CarriedLatent) and operation == "recover" else 0 for c in carried]
        keys = self.keys_for(operation, secret, key_indices)
        outs: list = [None] * n
        errors: list = [None] * n
        latents: list = [None] * n
        for v in sorted(set(variants)):
            ids = [i for i in range(n) if variants[i] == v]
            k, ctl = self.guard_variant([keys[i] for i in ids], controls, v)
            o, e, lat = self.process_isolated(operation, crops[ids], k, ctl, [codes[i] for i in ids])
            for pos, i in enumerate(ids):
                outs[i], errors[i], latents[i] = o[pos], e[pos], lat[pos]
        return outs, errors, latents, variants

    def _guard_faces(self, guard, place, flat, crops, key_indices, secret, controls, outs, latents, n_variants=None):
        """The privacy guard over the faces of frames: :func:`zoo.guard.protect` with the two recognizers' distances of
        each output face, at its place in the composed frame, to the original face. ``place[i]``: (frame, face,
        alignment matrix) of face i. Returns (outs, latents, variants, checks)."""
        from ..guard import protect

        by_frame: dict[int, list[int]] = {}
        for i, (f, _) in enumerate(flat):
            by_frame.setdefault(f, []).append(i)
        originals = {f: guard.photo_embeddings(place[ids[0]][0], [place[i][1] for i in ids]) for f, ids in by_frame.items()}

        def distances(candidate: list, which: list[int]) -> dict[int, float]:
            got = {}
            for f, ids in by_frame.items():
                wanted = [i for i in ids if i in which]
                if not wanted:
                    continue
                canvas = _compose(
                    place[ids[0]][0], [place[i][1] for i in ids], [place[i][2] for i in ids], [candidate[i] for i in ids], composite=self.draws_new_face
                )
                emb = guard.photo_embeddings(canvas, [place[i][1] for i in wanted])
                d = guard.distances(originals[f][[ids.index(i) for i in wanted]], emb)
                got.update({i: (float(x[0]), float(x[1])) for i, x in zip(wanted, d)})
            return got

        return protect(self, guard, crops, key_indices, secret, controls, outs, latents, distances, n_variants)

    def _frame_in_photo(
        self, rgb: np.ndarray, faces: list, indices: list[int], secret: Secret | None, controls: dict, keys: list | None = None
    ) -> tuple[np.ndarray, list[FaceRecord]]:
        """:meth:`process_frames` for a method that works in photo pixels; if it fails, every face of the
        frame is hard-blurred and reported as ``fallback_blur`` (fail closed)."""
        from .. import pipeline

        fingerprint = secret.fingerprint if secret is not None else None
        err = None
        try:
            keys = self.keys_for("anonymize", secret, indices) if keys is None else keys
            canvas, actions = self.anonymize_in_photo(rgb, faces, keys, **controls)
            if canvas.shape != rgb.shape or canvas.dtype != np.uint8 or len(actions) != len(faces):
                raise RuntimeError(f"{self.name}.anonymize_in_photo returned {canvas.shape} {canvas.dtype}, {len(actions)} actions for {len(faces)} faces")
        except Exception as e:  # noqa: BLE001 - fail closed, report the reason
            log.warning("%s failed on a photo (%s); blurring its faces", self.name, e)
            err = f"{type(e).__name__}: {e}"
            canvas = np.array(rgb, dtype=np.uint8, copy=True)
            for face in faces:
                canvas = pipeline.blur_face(canvas, face)
            actions = ["hard blur (fail closed)"] * len(faces)
        records = [
            FaceRecord(
                index=int(indices[j]),
                box=[float(v) for v in face.box],
                score=float(face.score),
                landmarks=[[float(a), float(b)] for a, b in face.landmarks],
                status="processed" if err is None else "fallback_blur",
                error=err,
                key_fingerprint=fingerprint if self.uses_key else None,
                action=actions[j],
            )
            for j, face in enumerate(faces)
        ]
        return canvas, records

    def _run(self, operation: str, image: ImageLike, secret: Secret | None, aligned: bool, controls: dict):
        with self.run_scope():
            return self._run_in_scope(operation, image, secret, aligned, controls)

    def _run_in_scope(self, operation: str, image: ImageLike, secret: Secret | None, aligned: bool, controls: dict):
        from .. import carrier, imageio, pipeline

        t0 = time.perf_counter()
        min_score, guard, controls = self.split_run_options(operation, controls)  # detector threshold: photos only
        fingerprint = secret.fingerprint if secret is not None and self.uses_key else None
        carries = self.carries_latent and operation in ("anonymize", "recover")
        tag = carrier.method_tag(self.name)

        if aligned:
            items = list(image) if isinstance(image, (list, tuple)) else [image]
            loaded = [imageio.load_image(it) for it in items]
            crops = np.stack([imageio.resize_square(rgb, self.resolution) for rgb, _ in loaded])
            indices, carried = list(range(len(crops))), [None] * len(crops)
            if carries and operation == "recover":
                for i, (rgb, _) in enumerate(loaded):
                    found = carrier.extract_all(rgb, tag)
                    if found:
                        indices[i], carried[i] = found[0].index, found[0]
            outs, errors, latents, variants = self._process_keyed(operation, crops, indices, secret, controls, carried)
            checks: list = [None] * len(crops)
            if guard is not None:
                outs, latents, variants, checks = self._guard_crops(guard, crops, indices, secret, controls, outs, latents)
            results = []
            for i, ((rgb, alpha), out, err, lat) in enumerate(zip(loaded, outs, errors, latents)):
                h, w = rgb.shape[:2]
                flag = None
                blurred = checks[i] is not None and checks[i].blurred
                if out is None:
                    out_rgb = pipeline.blur_hard(rgb)
                else:
                    out_rgb = imageio.resize_to(pipeline.blur_hard(out) if blurred else out, (h, w))
                    if carries and operation == "anonymize":
                        block = carrier.CarriedLatent(tag, i, np.array([0, 0, w, h], np.float32), np.zeros((5, 2), np.float32), lat, variant=variants[i])
                        flag = carrier.embed(out_rgb, block, (w / 2, h / 2), min(w, h))
                    elif carries:
                        flag = carried[i] is not None
                status = "fallback_blur" if err is not None else ("guard_blur" if blurred else "processed")
                rec = FaceRecord(
                    indices[i], [0.0, 0.0, float(w), float(h)], 1.0, [], status, err, fingerprint, flag, checks[i].as_dict() if checks[i] is not None else None
                )
                results.append(
                    DeidResult(
                        imageio.to_pil(out_rgb, alpha), self.name, operation, [rec], fingerprint, controls, True, time.perf_counter() - t0, self.weights_text
                    )
                )
            return results if isinstance(image, (list, tuple)) else results[0]

        rgb, alpha = imageio.load_image(image)
        faces = pipeline.detect_faces(rgb, min_score=min_score)
        indices: list[int] = list(range(len(faces)))
        carried: list[np.ndarray | None] = [None] * len(faces)
        if carries and operation == "recover":
            faces, indices, carried = attach_carried(faces, carrier.extract_all(rgb, tag))
        [(canvas, records)] = self.process_frames(operation, [rgb], [faces], [indices], secret, controls, [carried], guard=guard)
        return DeidResult(
            imageio.to_pil(canvas, alpha), self.name, operation, records, fingerprint, controls, False, time.perf_counter() - t0, self.weights_text
        )


def _compose(
    rgb: np.ndarray,
    faces: Sequence[Any],
    matrices: Sequence[np.ndarray],
    outs: Sequence[np.ndarray | None],
    infos: list | None = None,
    composite: bool = True,
) -> np.ndarray:
    """A copy of uint8 ``rgb`` with every output crop put back: composited (``composite``:
    :func:`zoo.compositing.composite_face`, mesh mask, colour, grain, blend) or pasted through the 5-point mask;
    a face without output is blurred. ``infos``, when given, receives one
    :class:`zoo.compositing.CompositeInfo` (or None) per face."""
    from .. import compositing, pipeline

    canvas = np.array(rgb, dtype=np.uint8, copy=True)
    for face, matrix, out in zip(faces, matrices, outs):
        info = None
        if out is None:
            canvas = pipeline.blur_face(canvas, face)
        elif not composite:
            canvas = pipeline.paste_back(canvas, out, matrix)
        else:
            try:
                canvas, info = compositing.composite_face(canvas, rgb, out, matrix, face.landmarks)
            except (cv2.error, ValueError, np.linalg.LinAlgError) as e:  # the plain paste still replaces the face
                log.warning("compositing failed (%s); pasting the face with the 5-point mask", e)
                canvas = pipeline.paste_back(canvas, out, matrix)
        if infos is not None:
            infos.append(info)
    return canvas


def attach_carried(faces: list, found: list, base_indices: Sequence[int] | None = None) -> tuple[list, list[int], list]:
    """Match carrier blocks to detected faces (a block inside a detected box belongs to that face).

    A matched face is aligned with the landmarks it had when it was anonymized and keyed by its
    anonymization index; a block no detector found still gets its face recovered (fail closed the other
    way round: a face the tool anonymized is never left anonymized for lack of a detection).
    ``base_indices``: the key index of each face that no block claims (default: its position; a video
    passes its track ids)."""
    from ..pipeline import DetectedFace

    out_faces, indices, carried = [], [], []
    used = set()
    for i, face in enumerate(faces):
        hit = None
        for j, c in enumerate(found):
            cx, cy = (c.box[0] + c.box[2]) / 2, (c.box[1] + c.box[3]) / 2
            if j not in used and face.box[0] <= cx <= face.box[2] and face.box[1] <= cy <= face.box[3]:
                hit = j
                break
        if hit is None:
            out_faces.append(face)
            indices.append(i if base_indices is None else int(base_indices[i]))
            carried.append(None)
        else:
            used.add(hit)
            c = found[hit]
            out_faces.append(DetectedFace(c.box, c.landmarks, face.score, "carrier"))
            indices.append(c.index)
            carried.append(c)
    for j, c in enumerate(found):
        if j not in used:
            out_faces.append(DetectedFace(c.box, c.landmarks, 1.0, "carrier"))
            indices.append(c.index)
            carried.append(c)
    return out_faces, indices, carried


class NeuralMethod(DeidMethod):
    """A method built from trained networks, saved/loaded as a diffusers-style component folder.

    Subclasses implement ``__init__(self, config: dict, components: dict[str, HubModule], extra: dict[str, Tensor])``
    and ``build(cls, config) -> components`` (random init, for training), and list their components in
    ``component_names``. ``save_pretrained``/``from_pretrained`` go through :mod:`zoo.hub`.
    """

    component_names: ClassVar[tuple[str, ...]] = ()
    guard_by_default: ClassVar[bool] = True
    draws_new_face: ClassVar[bool] = True

    def __init__(self, config: dict[str, Any], components: dict[str, torch.nn.Module], extra: dict[str, torch.Tensor] | None = None):
        super().__init__()
        self.config = dict(config)
        self.components = dict(components)
        self.extra = dict(extra or {})
        self.resolution = int(self.config.get("resolution", type(self).resolution))
        missing = [n for n in self.component_names if n not in self.components]
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
        from ..hub import load_components

        config, components, extra = load_components(repo_or_dir, revision=revision, expected_method=cls.name)
        return cls.variant_for(config)(config, components, extra)

    #: ``"module:Class"`` of the demo-tier variant (:mod:`zoo.methods.latent_demo`), if the method has one
    demo_variant: ClassVar[str | None] = None

    @classmethod
    def variant_for(cls, config: dict[str, Any]) -> type:
        """The class that runs a checkpoint: the demo variant when its config says ``backbone: dcgan``."""
        if config.get("backbone") == "dcgan" and cls.demo_variant:
            from ..registry import import_target

            return import_target(cls.demo_variant)
        return cls
