"""The pipeline that owns the photo flow around a method, in the spirit of a diffusers pipeline::

    decode -> detect (any rotation) -> align -> method -> privacy guard -> composite -> carrier -> report

:class:`DeidPipeline` wraps one :class:`~zoo.methods.base.DeidMethod` (the method only anonymizes / recovers
batches of aligned crops in [-1, 1]). The steps it calls live in their own modules: :mod:`zoo.detection`,
:mod:`zoo.alignment`, :mod:`zoo.guard`, :mod:`zoo.compositing` / :mod:`zoo.paste`, :mod:`zoo.carrier`,
:mod:`zoo.report`. A face that cannot be processed is blurred (fail closed) and every face found is in the report.

    from zoo import load
    from zoo.keys import as_secret
    from zoo.pipeline import DeidPipeline
    result = DeidPipeline(load("dbaf")).run("anonymize", "photo.jpg", as_secret("k"), aligned=False, controls={})

(``load("dbaf").anonymize("photo.jpg", key="k")`` is the same call.)
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import Any, Sequence

import numpy as np
import torch

from .composer import PhotoComposer, compose
from .keys import KeyMaterial, Secret
from .report import DeidResult, FaceRecord

__all__ = ["DeidPipeline", "compose", "attach_carried", "RUN_OPTIONS"]

log = logging.getLogger(__name__)
#: the error of a face whose carried key check the given key does not reproduce (recover; status "key_mismatch")
KEY_MISMATCH = "the key does not match this face's carried code (a wrong key recovers nothing)"
#: the error of a face with no carried code (recover, methods that carry one; status "no_code"): a lossy copy, a
#: resize or an edit destroyed it, or the tool never anonymized the face. Re-inverting the pixels gives neither the
#: person back with the right key nor a guaranteed stranger with a wrong one, so recovery leaves the face as it is.
NO_CODE = "no carried code for this face (recover from the lossless image the tool wrote; a JPEG copy, a resize or an edit loses it)"
#: recover errors that leave a face exactly as it was
REFUSED = (KEY_MISMATCH, NO_CODE)

ImageLike = Any  # PIL.Image.Image | np.ndarray (uint8 HxWx3) | str | os.PathLike | bytes | DeidResult

#: options a run takes with the method controls that are not method controls
RUN_OPTIONS: tuple[str, ...] = ("min_face_score", "privacy_guard")


class DeidPipeline:
    """The photo (or aligned-crop, or video-frame) flow around ``method``; holds no state besides the method."""

    def __init__(self, method: Any):
        self.method = method

    def _process_batch(self, operation: str, crops: np.ndarray, keys: list[KeyMaterial], controls: dict, carried: list | None = None):
        """uint8 [N,R,R,3] -> (uint8 [N,R,R,3], latents) through the tensor functions, in chunks of max_batch.

        ``latents``: for a method that carries its codes (:attr:`carries_latent`, anonymize only), one dict per face
        of float32 arrays, {"latent": ``[d]``} and optionally {"code": ``[rows, cols]``} (what :mod:`zoo.carrier`
        writes), else None. ``carried`` (recover only): per face such a dict, a bare latent or None, passed on to
        :meth:`recover_faces`.
        """
        from .imageio import from_tensor, to_tensor

        outs: list[np.ndarray] = []
        latents: list[dict[str, np.ndarray]] = []
        with torch.inference_mode():
            for s in range(0, len(crops), self.method.max_batch):
                x = to_tensor(crops[s : s + self.method.max_batch], self.method.resolution).to(self.method.device, self.method.dtype)
                k = keys[s : s + self.method.max_batch]
                if operation == "anonymize" and self.method.carries_latent:
                    y, carried_out = self.method.anonymize_faces_carrying(x, k, **controls)
                    arrays = {name: v.float().cpu().numpy() for name, v in carried_out.items()}
                    latents.extend({name: a[i] for name, a in arrays.items()} for i in range(x.shape[0]))
                elif operation == "anonymize":
                    y = self.method.anonymize_faces(x, k, **controls)
                elif operation == "recover" and self.method.carries_latent:
                    y = self.method.recover_faces(x, k, carried=(carried or [None] * len(crops))[s : s + self.method.max_batch], **controls)
                elif operation == "recover":
                    y = self.method.recover_faces(x, k, **controls)
                else:  # the controls that the reconstruction takes (e.g. the demo tier's refine_steps)
                    accepted = inspect.signature(self.method.reconstruct_faces).parameters
                    y = self.method.reconstruct_faces(x, **{k: v for k, v in controls.items() if k in accepted})
                if y.shape != x.shape:
                    raise RuntimeError(f"{self.method.name}.{operation}_faces returned shape {tuple(y.shape)} for {tuple(x.shape)}")
                if not torch.isfinite(y).all():
                    raise FloatingPointError(f"{self.method.name} produced non-finite values")
                outs.append(from_tensor(y.float().cpu()))
        return np.concatenate(outs, axis=0), (latents if latents else None)

    def keys_for(self, operation: str, secret: Secret | None, indices: Sequence[int]) -> list:
        """One key per face, face ``indices[j]`` keyed by its index (a carried face keeps the index it had
        when it was anonymized). Methods that ignore the key get none (and no fresh random secret is
        stretched for them)."""
        n = len(indices)
        if operation == "reconstruct" or not self.method.uses_key:
            return [None] * n
        if list(indices) == list(range(n)):
            return self.method.face_keys(secret, n)
        return [self.method.face_keys(secret, 1, start=int(i))[0] for i in indices]

    def process_isolated(self, operation, crops, keys, controls, carried=None):
        """Run the whole batch; if it fails, retry face by face so one bad face cannot sink the others.
        Returns (images or None per face, error or None per face, carried latent or None per face)."""
        carried = carried if carried is not None else [None] * len(crops)
        try:
            out, lat = self._process_batch(operation, crops, keys, controls, carried)
            return list(out), [None] * len(crops), (list(lat) if lat is not None else [None] * len(crops))
        except Exception as err:  # noqa: BLE001 - fail closed, report the reason
            log.warning("%s batch failed (%s); retrying faces one by one", self.method.name, err)
        results: list[np.ndarray | None] = []
        errors: list[str | None] = []
        latents: list[np.ndarray | None] = []
        for i in range(len(crops)):
            try:
                out, lat = self._process_batch(operation, crops[i : i + 1], keys[i : i + 1], controls, carried[i : i + 1])
                results.append(out[0])
                latents.append(lat[0] if lat is not None else None)
                errors.append(None)
            except Exception as err:  # noqa: BLE001 - fail closed: the face is blurred and the reason reported
                results.append(None)
                latents.append(None)
                errors.append(f"{type(err).__name__}: {err}")
        return results, errors, latents

    def split_run_options(self, operation: str, controls: dict[str, Any]):
        """``controls`` -> (detector threshold: float or None, privacy guard or None, validated method
        controls). ``min_face_score`` must lie in (0, 1); ``privacy_guard`` (:meth:`privacy_guard`) applies to
        anonymization only."""
        controls = dict(controls)
        min_score = controls.pop("min_face_score", None)
        if min_score is not None and not 0.0 < float(min_score) < 1.0:
            raise ValueError(f"min_face_score must be between 0 and 1 (exclusive), got {min_score!r}")
        guard = self.method.privacy_guard(controls.pop("privacy_guard", None)) if operation == "anonymize" else None
        return (None if min_score is None else float(min_score)), guard, self.method.validate_controls(controls)

    def _guard_crops(self, guard, crops, key_indices, secret, controls, outs, latents):
        """The privacy guard on aligned crops (``aligned=True``): :func:`zoo.guard.protect` with the three recognizers'
        distances between the aligned input and output crops. Returns (outs, latents, variants, checks)."""
        from .guard import protect

        live = [i for i in range(len(outs)) if outs[i] is not None]
        originals = dict(zip(live, guard.crop_embeddings(crops[live]))) if live else {}

        def distances(candidate: list, which: list[int], reach: dict[int, float] | None = None) -> dict[int, tuple[float, ...]]:
            if not which:
                return {}
            d = guard.distances(np.stack([originals[i] for i in which]), guard.crop_embeddings(np.stack([candidate[i] for i in which])))
            return {i: tuple(float(v) for v in x) for i, x in zip(which, d)}

        return protect(self, guard, crops, key_indices, secret, controls, outs, latents, distances)

    def process_frames(self, *args: Any, **kwargs: Any) -> list[tuple[np.ndarray, list[FaceRecord]]]:
        """See :meth:`_process_frames` (run inside :meth:`run_scope`)."""
        with self.method.run_scope():
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

        ``frames``: uint8 RGB ``[H, W, 3]`` each; ``faces[f]``: the :class:`~zoo.detectors.DetectedFace`
        list of frame ``f``; ``indices[f]``: each face's key index (face ``i`` is keyed by (secret, method
        name, i), so a video track keeps one key by keeping one index); ``carried[f]`` (recover, methods
        that carry a latent): each face's :class:`~zoo.carrier.CarriedLatent` (or bare code) or None.
        ``controls`` must be validated (:meth:`validate_controls`). ``guard`` (anonymize): a
        :class:`~zoo.guard.PrivacyGuard` that checks every output face, or None; ``guard_variants``: how many
        key variants it may try (default :attr:`guard_variants`; a video passes 0 so that a track keeps
        one identity, and a face the guard rejects is drawn over a wider region, or blurred, in that frame). Every face of every frame
        goes through the method in one batch (in chunks of :attr:`max_batch`); a face that fails is
        hard-blurred (fail closed). Returns one ``(canvas, records)`` per frame: the processed copy and
        one :class:`FaceRecord` per face.
        """
        if operation == "anonymize" and self.method.works_in_photo:
            flat_keys = self.keys_for("anonymize", secret, [int(i) for ix in indices for i in ix])  # one call per batch
            out, pos = [], 0
            for rgb, fs, ix in zip(frames, faces, indices):
                out.append(self._frame_in_photo(rgb, list(fs), list(ix), secret, controls, flat_keys[pos : pos + len(ix)]))
                pos += len(ix)
            return out
        from . import alignment, carrier, paste

        carries = self.method.carries_latent and operation in ("anonymize", "recover")
        tag = carrier.method_tag(self.method.name)
        fingerprint = secret.fingerprint if secret is not None else None
        if carried is None:
            carried = [[None] * len(fs) for fs in faces]
        flat = [(f, j) for f in range(len(frames)) for j in range(len(faces[f]))]
        aligned_all = [alignment.align_face(frames[f], faces[f][j].landmarks, self.method.resolution) for f, j in flat]
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
            infos: list = [None] * n
            done = [j for j in range(n) if errors[j] not in REFUSED]  # a face recovery refuses stays as it was
            reaches = [_region_reach(operation, checks[j], fr_carried[j]) for j in range(n)]
            # right-key recovery of a face blurred at anonymization: the recovered face over the whole blurred rectangle
            restore = [operation == "recover" and errors[j] is None and bool(getattr(fr_carried[j], "blurred", False)) for j in range(n)]
            got: list = []
            canvas = compose(
                rgb,
                [fr_faces[j] for j in done],
                [aligned_faces[j].matrix for j in done],
                [outs[j] for j in done],
                got,
                self.method.draws_new_face,
                [reaches[j] for j in done],
                self.method.blend_mode,
                [restore[j] for j in done],
            )
            for j, info in zip(done, got):
                infos[j] = info
            for face, check in zip(fr_faces, checks):
                if check is not None and check.blurred:
                    canvas = paste.blur_face(canvas, face)
            records: list[FaceRecord] = []
            if n:
                flags: list[bool | None] = [None] * n
                if carries and operation == "anonymize":  # after every paste, so no face covers another's block
                    taken: list = []
                    face_keys = self.keys_for("anonymize", secret, fr_indices)
                    # the largest faces place their blocks first; a small face's block may ride beside it
                    for j in sorted(range(n), key=lambda j: -min(fr_faces[j].width, fr_faces[j].height)):
                        face, out, lat = fr_faces[j], outs[j], latents[j]
                        flags[j] = False
                        if out is not None and lat is not None:
                            blurred = checks[j] is not None and checks[j].blurred
                            block = carried_block(tag, fr_indices[j], face.box, face.landmarks, lat, variants[j], face_keys[j], reaches[j], blurred)
                            flags[j] = carrier.embed(canvas, block, face.center, taken)
                elif carries:
                    flags = [c is not None and (c.complete if isinstance(c, carrier.CarriedLatent) else True) for c in fr_carried]
                for j, (face, err) in enumerate(zip(fr_faces, errors)):
                    status = face_status(err, checks[j] is not None and checks[j].blurred)
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
        from .carrier import CarriedLatent

        n = len(crops)
        variants = [c.variant if isinstance(c, CarriedLatent) and operation == "recover" else 0 for c in carried]
        keys = self.keys_for(operation, secret, key_indices)
        outs: list = [None] * n
        errors: list = [None] * n
        latents: list = [None] * n
        codes: list = [None] * n
        for i, c in enumerate(carried):  # a wrong key, or no code, recovers nothing; the right key opens the block
            opened = c.opened(keys[i]) if isinstance(c, CarriedLatent) else None
            if operation == "recover" and self.method.carries_latent and c is None:
                errors[i] = NO_CODE
            elif operation == "recover" and isinstance(c, CarriedLatent) and opened is None:
                errors[i] = KEY_MISMATCH
            else:
                codes[i] = opened.values() if opened is not None else c
        for v in sorted(set(variants)):
            ids = [i for i in range(n) if variants[i] == v and errors[i] not in REFUSED]
            if not ids:
                continue
            k, ctl = self.method.guard_variant([keys[i] for i in ids], controls, v)
            o, e, lat = self.process_isolated(operation, crops[ids], k, ctl, [codes[i] for i in ids])
            for pos, i in enumerate(ids):
                outs[i], errors[i], latents[i] = o[pos], e[pos], lat[pos]
        return outs, errors, latents, variants

    def _guard_faces(self, guard, place, flat, crops, key_indices, secret, controls, outs, latents, n_variants=None):
        """The privacy guard over the faces of frames: :func:`zoo.guard.protect` with the three recognizers' distances of
        each output face, at its place in the composed frame, to the original face. ``place[i]``: (frame, face,
        alignment matrix) of face i. Returns (outs, latents, variants, checks)."""
        from .guard import STRONGER_REACHES, protect

        by_frame: dict[int, list[int]] = {}
        for i, (f, _) in enumerate(flat):
            by_frame.setdefault(f, []).append(i)
        originals = {f: guard.photo_embeddings(place[ids[0]][0], [place[i][1] for i in ids]) for f, ids in by_frame.items()}
        composers = {
            f: PhotoComposer(place[ids[0]][0], [place[i][1] for i in ids], [place[i][2] for i in ids], self.method.draws_new_face, self.method.blend_mode)
            for f, ids in by_frame.items()
        }

        def distances(candidate: list, which: list[int], reach: dict[int, float] | None = None) -> dict[int, tuple[float, ...]]:
            got = {}
            for f, ids in by_frame.items():
                wanted = [i for i in ids if i in which]
                if not wanted:
                    continue
                canvas = composers[f]([candidate[i] for i in ids], [(reach or {}).get(i) for i in ids])
                emb = guard.photo_embeddings(canvas, [place[i][1] for i in wanted])
                d = guard.distances(originals[f][[ids.index(i) for i in wanted]], emb)
                got.update({i: tuple(float(v) for v in x) for i, x in zip(wanted, d)})
            return got

        reaches = STRONGER_REACHES if self.method.draws_new_face else ()
        widths = [float(face.width) for _, face, _ in place]
        return protect(self, guard, crops, key_indices, secret, controls, outs, latents, distances, n_variants, reaches, widths)

    def _frame_in_photo(
        self, rgb: np.ndarray, faces: list, indices: list[int], secret: Secret | None, controls: dict, keys: list | None = None
    ) -> tuple[np.ndarray, list[FaceRecord]]:
        """:meth:`process_frames` for a method that works in photo pixels; if it fails, every face of the
        frame is hard-blurred and reported as ``fallback_blur`` (fail closed)."""
        from . import paste

        fingerprint = secret.fingerprint if secret is not None else None
        err = None
        try:
            keys = self.keys_for("anonymize", secret, indices) if keys is None else keys
            canvas, actions = self.method.anonymize_in_photo(rgb, faces, keys, **controls)
            if canvas.shape != rgb.shape or canvas.dtype != np.uint8 or len(actions) != len(faces):
                raise RuntimeError(
                    f"{self.method.name}.anonymize_in_photo returned {canvas.shape} {canvas.dtype}, {len(actions)} actions for {len(faces)} faces"
                )
        except Exception as e:  # noqa: BLE001 - fail closed, report the reason
            log.warning("%s failed on a photo (%s); blurring its faces", self.method.name, e)
            err = f"{type(e).__name__}: {e}"
            canvas = np.array(rgb, dtype=np.uint8, copy=True)
            for face in faces:
                canvas = paste.blur_face(canvas, face)
            actions = ["hard blur (fail closed)"] * len(faces)
        records = [
            FaceRecord(
                index=int(indices[j]),
                box=[float(v) for v in face.box],
                score=float(face.score),
                landmarks=[[float(a), float(b)] for a, b in face.landmarks],
                status="processed" if err is None else "fallback_blur",
                error=err,
                key_fingerprint=fingerprint if self.method.uses_key else None,
                action=actions[j],
            )
            for j, face in enumerate(faces)
        ]
        return canvas, records

    def run(self, operation: str, image: ImageLike, secret: Secret | None, aligned: bool, controls: dict):
        """One call of the public API (:meth:`DeidMethod.anonymize` / ``recover`` / ``reconstruction``): a photo, or aligned
        crop(s) with ``aligned``. Returns a :class:`~zoo.report.DeidResult` (a list of them for a list of crops)."""
        with self.method.run_scope():
            return self._run_in_scope(operation, image, secret, aligned, controls)

    def _run_in_scope(self, operation: str, image: ImageLike, secret: Secret | None, aligned: bool, controls: dict):
        from . import carrier, detection, imageio, paste

        t0 = time.perf_counter()
        min_score, guard, controls = self.split_run_options(operation, controls)  # detector threshold: photos only
        fingerprint = secret.fingerprint if secret is not None and self.method.uses_key else None
        carries = self.method.carries_latent and operation in ("anonymize", "recover")
        tag = carrier.method_tag(self.method.name)

        if aligned:
            items = list(image) if isinstance(image, (list, tuple)) else [image]
            loaded = [imageio.load_image(it) for it in items]
            crops = np.stack([imageio.resize_square(rgb, self.method.resolution) for rgb, _ in loaded])
            indices: list[int] = list(range(len(crops)))
            carried: list[Any] = [None] * len(crops)
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
                if err in REFUSED:
                    out_rgb = np.array(rgb, copy=True)
                elif out is None:
                    out_rgb = paste.blur_hard(rgb)
                else:
                    out_rgb = imageio.resize_to(paste.blur_hard(out) if blurred else out, (h, w))
                    if carries and operation == "anonymize" and lat is None:  # the guard kept this face's code out
                        flag = False
                    elif carries and operation == "anonymize":
                        (face_key,) = self.keys_for("anonymize", secret, [i])
                        block = carried_block(tag, i, np.array([0, 0, w, h]), np.zeros((5, 2)), lat, variants[i], face_key)
                        flag = carrier.embed(out_rgb, block, (w / 2, h / 2))
                if carries and operation == "recover":
                    flag = carried[i] is not None and carried[i].complete
                status = face_status(err, blurred)
                rec = FaceRecord(
                    indices[i], [0.0, 0.0, float(w), float(h)], 1.0, [], status, err, fingerprint, flag, checks[i].as_dict() if checks[i] is not None else None
                )
                results.append(
                    DeidResult(
                        imageio.to_pil(out_rgb, alpha),
                        self.method.name,
                        operation,
                        [rec],
                        fingerprint,
                        controls,
                        True,
                        time.perf_counter() - t0,
                        self.method.weights_text,
                    )
                )
            return results if isinstance(image, (list, tuple)) else results[0]

        rgb, alpha = imageio.load_image(image)
        faces = detection.detect_faces(rgb, min_score=min_score)
        indices = list(range(len(faces)))
        carried = [None] * len(faces)
        if carries and operation == "recover":
            faces, indices, carried = attach_carried(faces, carrier.extract_all(rgb, tag))
        [(canvas, records)] = self.process_frames(operation, [rgb], [faces], [indices], secret, controls, [carried], guard=guard)
        return DeidResult(
            imageio.to_pil(canvas, alpha),
            self.method.name,
            operation,
            records,
            fingerprint,
            controls,
            False,
            time.perf_counter() - t0,
            self.method.weights_text,
        )


def face_status(error: str | None, blurred: bool) -> str:
    """A face's report status (:class:`~zoo.report.FaceRecord`) from its processing error and the guard's blur."""
    if error is not None:
        return {KEY_MISMATCH: "key_mismatch", NO_CODE: "no_code"}.get(error, "fallback_blur")
    return "guard_blur" if blurred else "processed"


def _region_reach(operation: str, check: Any, carried: Any) -> float | None:
    """The compositing reach of one face (:func:`zoo.compositing.region_reach`; None: the default region): the one
    the privacy guard kept (anonymize), or the one the face's carried block names (recover), so that the recovered
    face covers all of the anonymized one."""
    if check is not None:
        return check.reach
    return getattr(carried, "reach", None) if operation == "recover" else None


def carried_block(tag: int, index: int, box, landmarks, carried: dict, variant: int, key, reach: float | None = None, blurred: bool = False) -> Any:
    """The :class:`~zoo.carrier.CarriedLatent` of one anonymized face: what the method carries (``carried``:
    {"latent", optional "code"}), its place (``box`` [4], ``landmarks`` [5, 2], image pixels), the guard's key
    ``variant`` and the check byte of the face's ``key``, sealed with that key (None: no key, no check, no seal), and
    the compositing ``reach`` the guard kept (None: the default region); ``blurred``: the guard blurred the face."""
    from .carrier import CarriedLatent

    return CarriedLatent(
        tag,
        index,
        np.asarray(box, np.float32),
        np.asarray(landmarks, np.float32),
        carried["latent"],
        variant=variant,
        code=carried.get("code"),
        key_check=key.carrier_check(variant) if key is not None else None,
        key=key,
        reach=reach,
        blurred=bool(blurred),
    )


def attach_carried(faces: list, found: list, base_indices: Sequence[int] | None = None) -> tuple[list, list[int], list]:
    """Match carrier blocks to detected faces (a block inside a detected box belongs to that face).

    A matched face is aligned with the landmarks it had when it was anonymized and keyed by its
    anonymization index; a block no detector found still gets its face recovered (fail closed the other
    way round: a face the tool anonymized is never left anonymized for lack of a detection).
    ``base_indices``: the key index of each face that no block claims (default: its position; a video
    passes its track ids)."""
    from .detectors import DetectedFace

    out_faces: list = []
    indices: list[int] = []
    carried: list[Any] = []
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
