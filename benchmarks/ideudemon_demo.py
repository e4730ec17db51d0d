"""IDEudemon demo tier, measured: the privacy dial on real and held-out faces with the dlib judge.

    OMP_NUM_THREADS=1 python -m benchmarks.ideudemon_demo --config training/configs/ideudemon_demo.yaml
    python -m benchmarks.ideudemon_demo --checkpoint zoo/weights/ideudemon          # what ships

Data (FFHQ-aligned crops at the method's resolution, as ``training.evaluate`` makes them):

* real faces of the bundled photos (insightface's ``t1.jpg``, 6 faces; ``zoo/assets/astronaut.jpg``);
* held-out real faces: insightface's ``Tom_Hanks_54745.png`` (used nowhere else in the zoo) and any
  ``--photos``;
* ``--n`` held-out synthetic faces (``zoo.synthetic`` seed 1, indices from 10^9, as the evaluator).

For every scale in ``--scales`` (and 0, the fit-then-render reference) and ``--keys`` keys per face:

* dlib (never used to build anything here) same-person rate at 0.6 between input and output crop,
  with the 95% Wilson interval and N (= faces x keys), and the mean dlib distance;
* on the whole photos, the same through the full pipeline (detect, align, anonymize, paste back),
  judged at each face's original place (``zoo.judges.embed_at_original_places``);
* head pose error: median L2 of the (yaw, pitch, roll) change, degrees, from 68 dlib landmarks
  (``zoo.face3d.landmarks.head_pose``);
* YuNet detection rate on the output crops;
* share of outputs whose pixels outside the blend mask equal the input's exactly;
* time per face (CPU, ``--threads`` threads): ``anonymize_faces`` on one crop, and a whole photo with
  one face (``zoo/assets/astronaut.jpg``) through ``method.anonymize``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

from training.evaluate import rate
from zoo.face3d.landmarks import pose_difference

REPO = Path(__file__).resolve().parents[1]


def _photos(extra: list[str]) -> tuple[list[Path], list[Path]]:
    from zoo.assets import example_images
    from zoo.detectors import package_dir

    ex = example_images()
    bundled = [ex[k] for k in ("group", "astronaut") if k in ex]
    held = []
    d = package_dir("insightface")
    if d is not None and Path(d, "data", "images", "Tom_Hanks_54745.png").is_file():
        held.append(Path(d, "data", "images", "Tom_Hanks_54745.png"))
    held += [Path(p) for p in extra]
    return bundled, held


def _crops(paths: list[Path], size: int) -> tuple[np.ndarray, list[str]]:
    from zoo import alignment, detection
    from zoo.imageio import load_image

    crops, names = [], []
    for p in paths:
        rgb, _ = load_image(str(p))
        for i, face in enumerate(detection.detect_faces(rgb)):
            crops.append(alignment.align_face(rgb, face.landmarks, size).crop)
            names.append(f"{p.name}#{i}")
    return (np.stack(crops) if crops else np.zeros((0, size, size, 3), np.uint8)), names


def _pose(img: np.ndarray) -> np.ndarray:
    from zoo.face3d.landmarks import LandmarkError, detect_landmarks68, head_pose

    try:
        return head_pose(detect_landmarks68(img), img.shape[:2])
    except LandmarkError:
        return np.full(3, np.nan)


def _interval(r: dict) -> str:
    return f"{r['value']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] (n={r['n']})"


@torch.no_grad()
def measure_set(method, crops: np.ndarray, scales: list[float], keys: int, label: str) -> list[dict]:
    from zoo.detection import detect_faces
    from zoo.imageio import from_tensor, to_tensor
    from zoo.judges import get_judge
    from zoo.keys import Secret

    dlib = get_judge("dlib")
    x = to_tensor(crops)
    e0 = dlib.embed_aligned(crops)
    pose0 = np.stack([_pose(c) for c in crops])
    rows = []
    for s in scales:
        matched, dist, pose_err, detected, identical = [], [], [], [], []
        for k in range(keys if s > 0 else 1):
            ks = [Secret(f"ideudemon-demo-{k}").derive("ideudemon", i) for i in range(len(crops))]
            s1 = method.step_one(x, ks, s)
            y = method.step_two(x, s1)
            out = from_tensor(y)
            e = dlib.embed_aligned(out)
            matched += list(dlib.same_person(e0, e))
            dist += list(dlib.distance(e0, e))
            for i, o in enumerate(out):
                pose_err.append(float(pose_difference(_pose(o), pose0[i])))
                detected.append(bool(detect_faces(o, "yunet")))
                outside = (s1["head"][i, 0] == 0).numpy()
                identical.append(bool(np.array_equal(o[outside], crops[i][outside])) and bool(outside.any()))
        pe = np.asarray(pose_err)
        rows.append(
            {
                "set": label,
                "scale": float(s),
                "keys": keys if s > 0 else 1,
                "faces": int(len(crops)),
                "dlib_same_person": rate(matched, "outputs dlib matches to their input crop (distance < 0.6)"),
                "dlib_distance_mean": float(np.mean(dist)),
                "dlib_distance_std": float(np.std(dist)),
                "pose_error_deg_median": float(np.nanmedian(pe)),
                "pose_error_deg_mean": float(np.nanmean(pe)),
                "pose_measured": int(np.isfinite(pe).sum()),
                "yunet_detected": rate(detected, "output crops in which YuNet finds a face"),
                "outside_blend_identical": rate(identical, "outputs whose pixels outside the blend mask equal the input's"),
            }
        )
        r = rows[-1]
        print(
            f"[{label}] scale {s:.2f}: dlib matched {_interval(r['dlib_same_person'])}, dist {r['dlib_distance_mean']:.3f}, "
            f"pose {r['pose_error_deg_median']:.2f} deg, YuNet {r['yunet_detected']['value']:.3f}, "
            f"identical outside {r['outside_blend_identical']['value']:.3f}",
            flush=True,
        )
    return rows


def measure_photos(method, paths: list[Path], scales: list[float], keys: int) -> list[dict]:
    from zoo.detection import detect_faces
    from zoo.imageio import load_image
    from zoo.judges import embed_at_original_places, get_judge

    dlib = get_judge("dlib")
    loaded = [(p, load_image(str(p))[0]) for p in paths]
    rows = []
    for s in scales:
        matched, fallbacks = [], 0
        for k in range(keys):
            for p, rgb in loaded:
                faces = detect_faces(rgb)
                res = method.anonymize(rgb, key=f"ideudemon-photo-{k}", scale=s)
                fallbacks += len(res.fallbacks)
                anon = np.asarray(res.image.convert("RGB"))
                matched += list(dlib.same_person(dlib.embed_photo_faces(rgb, faces), embed_at_original_places(dlib, rgb, anon, faces)))
        rows.append(
            {
                "scale": float(s),
                "photos": [p.name for p in paths],
                "dlib_same_person": rate(matched, "faces dlib matches at their original place (whole photo)"),
                "fallbacks": int(fallbacks),
            }
        )
        print(f"[photos] scale {s:.2f}: dlib matched {_interval(rows[-1]['dlib_same_person'])}, fallbacks {fallbacks}", flush=True)
    return rows


def timing(method, crop: np.ndarray, threads: int, repeats: int = 5) -> dict:
    import cv2

    from zoo.assets import example_images
    from zoo.imageio import load_image, to_tensor
    from zoo.keys import Secret

    torch.set_num_threads(threads)
    cv2.setNumThreads(threads)
    x = to_tensor(crop[None])
    key = [Secret("timing").derive("ideudemon", 0)]
    method.anonymize_faces(x, key, scale=0.25)  # warm-up (loads dlib / YuNet)
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        method.anonymize_faces(x, key, scale=0.25)
        t.append(time.perf_counter() - t0)
    rgb, _ = load_image(str(example_images()["astronaut"]))
    method.anonymize(rgb, key="timing")
    tp = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        method.anonymize(rgb, key="timing")
        tp.append(time.perf_counter() - t0)
    return {
        "threads": threads,
        "crop_size": int(crop.shape[0]),
        "aligned_crop_s_median": float(np.median(t)),
        "photo": "astronaut.jpg (512x512, 1 face)",
        "photo_s_median": float(np.median(tp)),
        "repeats": repeats,
    }


def to_markdown(res: dict) -> str:
    lines = [
        f"# IDEudemon demo tier (Step I with a shape + texture identity, {res.get('step2_label', 'no restorer')}): measured on CPU",
        "",
        f"Command: `{res['command']}`",
        "",
        f"Weights: {res['weights_label']}. Resolution {res['resolution']} px; config step1 = `{json.dumps(res['step1'])}`; "
        f"step2 = `{json.dumps(res.get('step2', {}))}` ({res.get('step2_label', 'no restorer')}); {res['seconds']:.0f} s on {res['machine']}.",
        "",
        "Judge: dlib ResNet (never used to build or tune anything in this method except the gain choice, "
        "see docs/ideudemon.md), same person when the L2 distance < 0.6, on FFHQ-aligned crops. 'matched' = "
        "share of outputs dlib still calls the input's person (lower = more private), 95% Wilson interval, "
        "n = faces x keys (keys of one face are not independent samples of people: the interval is optimistic). "
        "Scale 0 = fit-then-render with no noise (what the parametric re-render alone does).",
        "",
    ]
    for label, desc in res["sets"].items():
        lines += [
            f"## {label}: {desc}",
            "",
            "| scale | dlib matched | dlib dist | pose err (deg, median) | YuNet finds a face | identical outside blend mask |",
            "|---|---|---|---|---|---|",
        ]
        for r in res["rows"]:
            if r["set"] != label:
                continue
            lines.append(
                f"| {r['scale']:.2f} | {_interval(r['dlib_same_person'])} | {r['dlib_distance_mean']:.3f} ± {r['dlib_distance_std']:.3f} | "
                f"{r['pose_error_deg_median']:.2f} | {_interval(r['yunet_detected'])} | {_interval(r['outside_blend_identical'])} |"
            )
        lines.append("")
    if res.get("photos"):
        lines += [
            "## Whole photos through the pipeline, dlib at the original face places",
            "",
            f"Photos: {', '.join(res['photos'][0]['photos'])}; {res['photo_keys']} keys.",
            "",
            "| scale | dlib matched | fail-closed fallbacks |",
            "|---|---|---|",
        ]
        for r in res["photos"]:
            lines.append(f"| {r['scale']:.2f} | {_interval(r['dlib_same_person'])} | {r['fallbacks']} |")
        lines.append("")
    t = res["timing"]
    lines += [
        "## Time per face (CPU)",
        "",
        f"{t['threads']} threads: one aligned {t['crop_size']} px crop through `anonymize_faces` {t['aligned_crop_s_median']:.3f} s (median of {t['repeats']}); "
        f"whole photo {t['photo']} through `anonymize` (detect, align, Step I, paste back) {t['photo_s_median']:.3f} s.",
        "",
    ]
    return "\n".join(lines)


def set_step_two(method, *, with_restorer: bool = False, no_restorer: bool = False, prior: bool = True, register: bool = False) -> None:
    """What Step II runs, from the benchmarks' flags: the checkpoint's restorer switched on (``with_restorer``, an error
    without one) or off (``no_restorer``), the FFHQ prior off (``prior`` False: Step I alone unless a restorer runs),
    ``step1.register_features`` on (``register``)."""
    if no_restorer:
        method.use_restorer = False
    if with_restorer:
        if "restorer" not in method.components:
            raise ValueError("--with-restorer: this checkpoint has no restorer")
        method.use_restorer = True
    if not prior:
        method.ffhq_prior = None
    if register:
        method.register_features = True


def step_two_label(method) -> str:
    """Which Step II ran: the restorer (size, output), the FFHQ prior, or none; and whether features were registered."""
    if getattr(method, "use_restorer", False):
        label = f"restorer at {method.restorer_size} px, output {method.restorer_output}"
    elif getattr(method, "ffhq_prior", None) is not None:
        label = "FFHQ prior (step2.prior ffhq)"
    else:
        label = "no restorer" + (" (checkpoint's restorer not run)" if "restorer" in method.components else "")
    return label + (", features registered" if getattr(method, "register_features", False) else "")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--config", default=None)
    src.add_argument("--checkpoint", default=None)
    p.add_argument("--n", type=int, default=100, help="held-out synthetic faces")
    p.add_argument("--keys", type=int, default=4)
    p.add_argument("--scales", default="0.05,0.25,0.4")
    p.add_argument("--photos", nargs="*", default=[], help="more held-out real photos")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "ideudemon_demo_cpu"))
    p.add_argument("--no-restorer", action="store_true", help="Step I alone (the checkpoint's restorer left out)")
    p.add_argument("--with-restorer", action="store_true", help="run the checkpoint's restorer even where its config ships it switched off")
    p.add_argument("--restorer-output", choices=["replace", "residual"], help="override step2.output")
    p.add_argument("--no-prior", action="store_true", help="Step II's FFHQ prior off (Step I alone unless a restorer runs)")
    p.add_argument("--register", action="store_true", help="step1.register_features on (the features moved onto the coded mesh)")
    a = p.parse_args(argv)
    import platform

    import zoo
    from zoo.methods.ideudemon import IDEudemon

    t0 = time.time()
    if a.checkpoint:
        method = zoo.load("ideudemon", local_dir=a.checkpoint, device="cpu")
    else:
        from training.train import load_config

        method = IDEudemon.from_config(load_config(a.config or str(REPO / "training" / "configs" / "ideudemon_demo.yaml")))
    method = method.to("cpu")
    set_step_two(method, with_restorer=a.with_restorer, no_restorer=a.no_restorer, prior=not a.no_prior, register=a.register)
    if a.restorer_output:
        method.restorer_output = a.restorer_output
        method.config["step2"] = {**(method.config.get("step2") or {}), "output": a.restorer_output}
    step2_label = step_two_label(method)
    size = method.resolution
    scales = [0.0] + [float(s) for s in a.scales.split(",")]
    bundled, held = _photos(a.photos)
    real_b, names_b = _crops(bundled, size)
    real_h, names_h = _crops(held, size)
    from zoo.synthetic import synthetic_faces_uint8

    synth = synthetic_faces_uint8(a.n, seed=1, resolution=size, offset=10**9)
    sets = {
        "real": (
            np.concatenate([real_b, real_h]),
            f"{len(real_b)} real faces of the bundled photos ({', '.join(p.name for p in bundled)}) + "
            f"{len(real_h)} held-out real faces ({', '.join(names_h) or 'none'})",
        ),
        "synthetic": (synth, f"{a.n} held-out synthetic faces (zoo.synthetic seed 1, indices from 10^9)"),
    }
    rows = []
    for label, (crops, _) in sets.items():
        rows += measure_set(method, crops, scales, a.keys, label)
    photos = measure_photos(method, bundled + held, [s for s in scales if s > 0], a.keys)
    tim = timing(method, real_b[0] if len(real_b) else synth[0], a.threads)
    print(f"[timing] {tim}", flush=True)
    command = "python -m benchmarks.ideudemon_demo " + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:]))
    res = {
        "command": command,
        "weights_label": getattr(method, "weights_label", None) or "full method",
        "resolution": size,
        "step1": method.config.get("step1", {}),
        "step2": method.config.get("step2", {}),
        "step2_label": step2_label,
        "sets": {k: v[1] for k, v in sets.items()},
        "rows": rows,
        "photos": photos,
        "photo_keys": a.keys,
        "timing": tim,
        "seconds": time.time() - t0,
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads for the timing",
        "judge": {"name": "dlib", "threshold": 0.6},
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=float))
    out.with_suffix(".md").write_text(to_markdown(res))
    print(f"[ideudemon-demo] wrote {out}.md / .json")
    return res


if __name__ == "__main__":
    main()
