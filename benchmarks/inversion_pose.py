"""Does the W+ inversion keep the head's pose? The encoder's start with and without the pose correction, then the
methods' 20 refinement steps, then the fitted code turned again, on real faces (face mesh and SFace; never dlib).

    python -m benchmarks.inversion_pose [--split tuning|held-out] [--photos a,b,...] [--steps 20]
        [--identity-weight W] [--rows encoder,corrected,...] [--out PATH]
    python -m benchmarks.inversion_pose --merge A.json B.json [--out PATH]    # one results file from split runs

Every face of the real photos (:func:`benchmarks.reconstruct_real.packaged_faces`) of the split is FFHQ-aligned at
256 px. Three starts: the W+ encoder's estimate as it is, turned to the face's yaw, and turned to its yaw and pitch
(:func:`zoo.inversion.pose_corrected`). From each, ``steps`` refinement steps (:func:`zoo.inversion.refine_wplus`:
pixels only, the fit every reversible method runs first; with ``--identity-weight 1``, the fit they keep for real
faces, SFace's identity term in every step); from the yaw-corrected start, the fitted code also turned to the yaw
again (``turned again``; :func:`zoo.inversion.invert_wplus` does not do it, see there). Per row, before and after the steps: |yaw| and |pitch| change by the face mesh
(:func:`zoo.face_mesh.mesh_head_pose`, degrees) between the drawn face and the original crop; after the steps, SFace cosine to the original and the reconstruction loss. Also the
correction's own time per face. Writes ``benchmarks/results/inversion_pose.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.reconstruct_real import packaged_faces
from benchmarks.report import command_line, write_results
from zoo.face3d.landmarks import angle_difference

OUT = Path(__file__).resolve().parent / "results" / "inversion_pose"
#: the encoder's start; that start turned to the yaw (what zoo.inversion.invert_wplus refines by default); turned to
#: the yaw and the pitch; the yaw-corrected fit turned again
ROWS = ("encoder", "corrected", "yaw + pitch", "turned again")


def measure(faces: list, steps: int, batch: int = 4, identity_weight: float = 0.0, rows: tuple[str, ...] = ROWS) -> dict:
    """row (``rows`` of :data:`ROWS`) -> per-face lists (yaw/pitch errors at the start and after ``steps``, SFace
    cosine, loss), plus the yaw correction's seconds per face."""
    from zoo.alignment import ffhq_template
    from zoo.face_mesh import mesh_head_pose
    from zoo.imageio import from_tensor, to_tensor
    from zoo.inversion import encode_wplus, pose_corrected, reconstruction_loss, refine_wplus
    from zoo.nn.mobilestylegan import load_mobilestylegan
    from zoo.nn.sface import load_sface

    g, sface, template = load_mobilestylegan(), load_sface(), ffhq_template(256)
    crops = [f[3] for f in faces]
    pose0 = np.array([mesh_head_pose(c, template)[:2] for c in crops])

    def pose_errors(images: torch.Tensor, which: slice) -> np.ndarray:
        got = np.array([mesh_head_pose(np.asarray(im), template)[:2] for im in from_tensor(images)])
        return np.abs(angle_difference(got, pose0[which]))

    out: dict = {s: {k: [] for k in ("yaw_start", "pitch_start", "yaw", "pitch", "sface", "loss")} for s in rows}
    correction_seconds = 0.0
    for i in range(0, len(crops), batch):
        x = torch.cat([to_tensor(c, 256) for c in crops[i : i + batch]])
        which = slice(i, i + x.shape[0])
        plain = encode_wplus(x, correct_pose=False, generator=g)
        t0 = time.perf_counter()
        corrected = pose_corrected(x, plain, g)
        correction_seconds += time.perf_counter() - t0
        with torch.no_grad():
            ref = sface.embed_aligned(x)
        starts = {"encoder": plain, "corrected": corrected}
        if "yaw + pitch" in rows:
            starts["yaw + pitch"] = pose_corrected(x, plain, g, ("yaw", "pitch"))
        fits, codes = {}, {}
        for name, start in starts.items():
            if name not in rows and not (name == "corrected" and "turned again" in rows):
                continue
            with torch.no_grad():
                e0 = pose_errors(g.synthesis(start, 256), which)
            r = refine_wplus(x, steps, generator=g, start=start, identity_weight=identity_weight)
            fits[name], codes[name] = (e0, r.image), r.wplus
        if "turned again" in rows:
            with torch.no_grad():
                fits["turned again"] = (fits["corrected"][0], g.synthesis(pose_corrected(x, codes["corrected"], g), 256))
        fits = {name: fit for name, fit in fits.items() if name in rows}
        for name, (e0, image) in fits.items():
            e1 = pose_errors(image, which)
            with torch.no_grad():
                cos = (sface.embed_aligned(image) * ref).sum(1)
                loss = reconstruction_loss(image, x)
            rec = out[name]
            rec["yaw_start"] += e0[:, 0].tolist()
            rec["pitch_start"] += e0[:, 1].tolist()
            rec["yaw"] += e1[:, 0].tolist()
            rec["pitch"] += e1[:, 1].tolist()
            rec["sface"] += cos.tolist()
            rec["loss"] += loss.tolist()
        print(f"{i + x.shape[0]}/{len(crops)} faces", flush=True)
    out["correction_seconds_per_face"] = correction_seconds / max(len(crops), 1)
    return out


def _stats(v: list[float]) -> str:
    a = np.array(v, dtype=np.float64)
    a = a[np.isfinite(a)]
    if not len(a):
        return "- | - | - | -"
    return f"{np.median(a):.2f} | {np.quantile(a, 0.9):.2f} | {a.max():.1f} | {int((a > 5).sum())}/{len(a)}"


def write_report(result: dict, out: Path) -> None:
    lines = [
        "# Head pose through the W+ inversion: the encoder's start as it is, turned to the yaw (and the pitch), and the fit turned again (face mesh, SFace; never dlib)",
        "",
        f"`{result['command']}`. {result['steps']} refinement steps, "
        + (
            f"SFace's identity term at weight {result['identity_weight']} in each (the reversible methods' fit of real faces)"
            if result.get("identity_weight")
            else "pixels only (the reversible methods' first fit)"
        )
        + ". |change| against the "
        "original crop in degrees by the face mesh: median | 90th percentile | max | faces over 5 degrees (of those the mesh "
        "reads). SFace: cosine of the reconstruction to the original (higher = the person kept).",
        "",
        "Photos: " + ", ".join(result.get("photos", [])) + ".",
        "",
        "| split | faces | start | yaw, start only: median | p90 | max | > 5 deg | yaw, after the steps: median | p90 | max | > 5 deg "
        "| pitch, after the steps: median | p90 | max | > 5 deg | SFace cosine median | loss median |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for split, per in result["splits"].items():
        for name in ROWS:
            if name not in per:
                continue
            v = per[name]
            lines.append(
                f"| {split} | {len(v['yaw'])} | {name} | {_stats(v['yaw_start'])} | {_stats(v['yaw'])} | {_stats(v['pitch'])} | "
                f"{np.median(v['sface']):.3f} | {np.median(v['loss']):.4f} |"
            )
    secs = {s: round(p["correction_seconds_per_face"], 3) for s, p in result["splits"].items()}
    lines += [
        "",
        f"The correction's cost (the target's face mesh, then up to 3 rounds of a 256 px draw and its face mesh), seconds per face: {json.dumps(secs)} ({result.get('threads', '?')} threads, under other load).",
    ]
    write_results(out, result, lines)
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=("tuning", "held-out", "both"), default="both")
    ap.add_argument("--photos", default=None, help="only the faces of these photos (default: every real photo)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--identity-weight", type=float, default=0.0, help="SFace's identity term in each step (the methods: 1)")
    ap.add_argument("--rows", default=",".join(ROWS), help=f"which of {', '.join(ROWS)}")
    ap.add_argument("--merge", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    if a.merge:
        parts = [json.loads(p.read_text()) for p in a.merge]
        result = {**parts[0], "command": " ; ".join(p["command"] for p in parts), "splits": {k: v for p in parts for k, v in p["splits"].items()}}
        result["photos"] = sorted({name for p in parts for name in p.get("photos", [])})
        write_report(result, a.out)
        return 0
    faces = [f for f in packaged_faces() if a.photos is None or f[0] in a.photos.split(",")]
    splits = ("tuning", "held-out") if a.split == "both" else (a.split,)
    rows = tuple(r for r in ROWS if r in a.rows.split(","))
    result = {
        "command": command_line("benchmarks.inversion_pose", argv),
        "steps": a.steps,
        "identity_weight": a.identity_weight,
        "threads": torch.get_num_threads(),
        "splits": {},
    }
    result["photos"] = sorted({f[0] for f in faces if f[1] in splits})
    for split in splits:
        result["splits"][split] = measure([f for f in faces if f[1] == split], a.steps, identity_weight=a.identity_weight, rows=rows)
    write_report(result, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
