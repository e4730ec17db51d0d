"""Putting a photo's output faces back: :func:`compose` once, or :class:`PhotoComposer` for a caller that composes the
same photo again and again with other candidate faces (the privacy guard measures up to about 20 candidates per
face, each at its place in the whole photo).

Each face is composited (:func:`zoo.compositing.composite_face`: mesh region, colour, grain, blend) or pasted
through the 5-point mask (:func:`zoo.paste.paste_back`); a face without output is blurred
(:func:`zoo.paste.blur_face`). A :class:`PhotoComposer` gives exactly the canvas :func:`compose` gives, faster:

* each face's :class:`~zoo.compositing.RegionPlan` (mesh, region, the original's colour and sharpness) is made once
  per reach and crop size;
* a face composited with the same crop over the same pixels as the last time is not composited again: its pixels
  are copied. ``composite_face`` reads and writes the canvas only inside the region plan's window, so this is exact. In
  a group photo the guard measures one face at a time, and every other face is drawn as before.

All images are uint8 RGB [H, W, 3].
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import cv2
import numpy as np

from . import compositing, paste

__all__ = ["PhotoComposer", "compose"]

log = logging.getLogger(__name__)


@dataclass
class _Composited:
    """One face's last composite at one (reach, crop size): the crop, the canvas inside the plan's window before, and
    after, and its report."""

    crop: np.ndarray
    before: np.ndarray
    after: np.ndarray
    info: compositing.CompositeInfo


class PhotoComposer:
    """Composes output faces into copies of uint8 ``rgb``, as :func:`compose` does, for ``faces`` (detected faces)
    with alignment ``matrices`` (photo -> crop). ``composite``: composited, else pasted through the 5-point mask;
    ``blend_mode``: :func:`zoo.compositing.blend`'s. Call it with one output crop (or None) per face."""

    def __init__(self, rgb: np.ndarray, faces: Sequence[Any], matrices: Sequence[np.ndarray], composite: bool = True, blend_mode: str = "feather"):
        compositing.check_blend_mode(blend_mode)  # here: a compositing that fails falls back to the paste
        self.rgb = np.asarray(rgb, dtype=np.uint8)
        self.faces, self.matrices = list(faces), list(matrices)
        self.composite, self.blend_mode = bool(composite), blend_mode
        self._plans: dict[tuple, compositing.RegionPlan] = {}
        self._last: dict[tuple, _Composited] = {}

    def __call__(
        self,
        outs: Sequence[np.ndarray | None],
        reaches: Sequence[float | None] | None = None,
        infos: list | None = None,
        restore: Sequence[bool] | None = None,
    ) -> np.ndarray:
        """A copy of the photo with every output crop (uint8 [S, S, 3], or None: blurred) put back. ``reaches``: each
        face's compositing reach (None: the default; :func:`zoo.compositing.region_reach`); ``infos``, when given,
        receives one :class:`zoo.compositing.CompositeInfo` (or None) per face; ``restore`` (right-key recovery):
        each face that was blurred when it was anonymized, whose recovered crop replaces the whole blurred
        rectangle (:func:`zoo.paste.restore_blurred`) instead of being matched to the blur."""
        if len(outs) != len(self.faces):
            raise ValueError(f"one output per face: {len(self.faces)} faces, {len(outs)} outputs")
        canvas = self.rgb.copy()
        reaches = [None] * len(outs) if reaches is None else list(reaches)
        restore = [False] * len(outs) if restore is None else list(restore)
        for position, (face, matrix, out, reach) in enumerate(zip(self.faces, self.matrices, outs, reaches)):
            info = None
            if out is None:
                canvas = paste.blur_face(canvas, face)
            elif restore[position]:
                canvas, shift = paste.restore_blurred(canvas, np.asarray(out, dtype=np.uint8), matrix, face)
                info = compositing.CompositeInfo("blur box", shift, "kept", "feather")
            elif not self.composite:
                canvas = paste.paste_back(canvas, out, matrix)
            else:
                try:
                    canvas, info = self._composite(position, canvas, np.asarray(out, dtype=np.uint8), reach)
                except (cv2.error, ValueError, np.linalg.LinAlgError) as e:  # the plain paste still replaces the face
                    log.warning("compositing failed (%s); pasting the face with the 5-point mask", e)
                    canvas = paste.paste_back(canvas, out, matrix)
            if infos is not None:
                infos.append(info)
        return canvas

    def _composite(self, position: int, canvas: np.ndarray, crop: np.ndarray, reach: float | None) -> tuple[np.ndarray, compositing.CompositeInfo]:
        """Face ``position`` composited into ``canvas`` (this call's own copy of the photo), in place where it can be."""
        face, matrix = self.faces[position], self.matrices[position]
        key = (position, reach, crop.shape[0])
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = compositing.plan_region(self.rgb, matrix, face.landmarks, crop.shape[0], reach)
        if plan.window is None:
            return compositing.composite_face(canvas, self.rgb, crop, matrix, face.landmarks, self.blend_mode, reach=reach, plan=plan)
        window = plan.slices
        before = canvas[window]
        last = self._last.get(key)
        if last is not None and np.array_equal(last.crop, crop) and np.array_equal(last.before, before):
            canvas[window] = last.after
            return canvas, last.info
        before = before.copy()
        out, info = compositing.composite_face(canvas, self.rgb, crop, matrix, face.landmarks, self.blend_mode, reach=reach, plan=plan, in_place=True)
        self._last[key] = _Composited(crop, before, out[window].copy(), info)
        return out, info


def compose(
    rgb: np.ndarray,
    faces: Sequence[Any],
    matrices: Sequence[np.ndarray],
    outs: Sequence[np.ndarray | None],
    infos: list | None = None,
    composite: bool = True,
    reaches: Sequence[float | None] | None = None,
    blend_mode: str = "feather",
    restore: Sequence[bool] | None = None,
) -> np.ndarray:
    """A copy of uint8 ``rgb`` with every output crop put back: composited (``composite``:
    :func:`zoo.compositing.composite_face`, mesh mask, colour, grain, blend) or pasted through the 5-point mask;
    a face without output is blurred. ``infos``, when given, receives one
    :class:`zoo.compositing.CompositeInfo` (or None) per face; ``reaches``: each face's compositing reach (None:
    the default; :func:`zoo.compositing.region_reach`); ``blend_mode``: :func:`zoo.compositing.blend`'s; ``restore``:
    :meth:`PhotoComposer.__call__`'s."""
    return PhotoComposer(rgb, faces, matrices, composite, blend_mode)(outs, reaches, infos, restore)
