"""The identity-similarity column: the judges a visitor can pick (:data:`JUDGES`), a judge scoring the faces of
a result against the original photo's (:class:`JudgeColumn`, :class:`FaceScores`), and the scores as text."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.common import log

#: dlib first: no method trains with it and no setting uses it; FaceRes and MobileFace: no method trains with them,
#: the privacy guard's independent recognizers; SFace: the demo checkpoints' training encoder and the guard's first
JUDGES = ("dlib", "faceres", "mobileface", "sface")
JUDGE_LABELS = {
    "dlib": "dlib (independent)",
    "faceres": "FaceRes (independent, privacy guard)",
    "mobileface": "MobileFace (independent, privacy guard)",
    "sface": "SFace (used in training, privacy guard)",
}

_JUDGES: dict[str, Any] = {}
_JUDGE_LOCK = threading.Lock()


class JudgeColumn:
    """The app's identity-similarity column: a :class:`zoo.judges.Judge` (a face recognizer the methods
    do not use) scoring the faces of two photos, with the column's label.

    Reports the judge's own metric (cosine for SFace, Euclidean distance for dlib) with its published
    threshold; faces are measured at the positions found in the original. A missing embedding or
    score is ``None``, never an error.
    """

    def __init__(self, name: str):
        from zoo import judges

        self.name = name
        self.model = judges.get_judge(name)
        self.metric = self.model.metric
        self.threshold = float(self.model.threshold)
        self.higher_is_same = self.metric == "cosine"

    def embed(self, rgb: np.ndarray, faces: list) -> list[np.ndarray | None]:
        if not faces:
            return []
        embs = self.model.embed_photo_faces(np.ascontiguousarray(rgb), faces)
        return [np.asarray(e, dtype=np.float64) for e in embs]

    def score(self, a: np.ndarray | None, b: np.ndarray | None) -> float | None:
        if a is None or b is None:
            return None
        return float(self.model.score(a, b)[0])

    def same(self, value: float | None) -> bool | None:
        return None if value is None else self.model.same_score(value)

    @property
    def column(self) -> str:
        rule = f"same person when {'≥' if self.higher_is_same else '<'} {self.threshold:g}"
        return f"{self.name} {self.metric} ({rule})"


def judge_column(name: str) -> JudgeColumn | None:
    """The (cached) similarity column of judge ``name``, or None when that judge cannot load here."""
    with _JUDGE_LOCK:
        if name not in _JUDGES:
            try:
                _JUDGES[name] = JudgeColumn(name)
            except Exception as err:  # noqa: BLE001 - no judge means no similarity column, not a crash
                log.warning("judge %s unavailable: %s", name, err)
                _JUDGES[name] = None
        return _JUDGES[name]


def _detect(rgb: np.ndarray) -> list:
    from zoo import detection

    return detection.detect_faces(rgb)


@dataclass
class FaceScores:
    """The faces of the original photo and the judge's embeddings of them, to score results against."""

    judge: JudgeColumn | None
    faces: list
    original: list = field(default_factory=list)

    @classmethod
    def of(cls, rgb: np.ndarray, judge_name: str | None) -> "FaceScores":
        faces = _detect(rgb)
        judge = judge_column(judge_name) if judge_name else None
        original: list = []
        if judge and faces:
            try:
                original = judge.embed(rgb, faces)
            except Exception as err:  # noqa: BLE001 - a judge failure costs the scores, not the results
                log.warning("judge %s failed on the original: %s", judge.name, err)
                judge = None
        return cls(judge, faces, original)

    def against(self, rgb: np.ndarray) -> list[float | None]:
        """The judge's score of every original face against the same place in ``rgb`` (None if it failed)."""
        if not self.judge or not self.faces:
            return []
        try:
            embs = self.judge.embed(rgb, self.faces)
        except Exception as err:  # noqa: BLE001 - the judge column is optional; its failure is shown, not raised
            log.warning("judge %s failed: %s", self.judge.name, err)
            return [None] * len(self.faces)
        return [self.judge.score(a, b) for a, b in zip(self.original, embs)]


def fmt_score(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def scores_caption(scores: list[float | None], judge: JudgeColumn | None) -> str:
    if judge is None or not scores:
        return ""
    return f"{judge.name}: " + ", ".join(fmt_score(v) for v in scores)
