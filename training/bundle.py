"""Evaluate a demo checkpoint with the independent judge and bundle it into the package.

    python -m training.bundle --method personal --config training/configs/personal_demo.yaml
    python -m training.bundle --method ifadit --checkpoint outputs/ifadit_demo/stage2/model

Steps: build the method (``--config``: ``from_config``; ``--checkpoint``: a trained model folder), save it
(demo encoders in fp16) and load the saved folder back through ``zoo.load(local_dir=...)``, so that
what is measured is exactly what ships; evaluate it (``training.evaluate``) with dlib (never used in
training) and SFace on ``--n`` held-out generated faces (seeded, disjoint from training) and on the real
faces of the packaged photos; write the tables to ``benchmarks/results/<method>_demo_cpu.{json,md}``;
store the weights label and a short evaluation summary in the checkpoint's ``method.json``; copy the
folder to ``zoo/weights/<method>`` (or ``--out``). A demo method that runs on the FFHQ-grade W+ by default is
evaluated here on its 64 px DCGAN tier; its W+ numbers come from the benchmarks' results files
(:func:`refresh_evaluation`, also run by ``--card-only``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from training.evaluate import evaluate, load_eval_images, to_markdown, wilson_interval

__all__ = ["summarize", "bundle", "main"]

REPO = Path(__file__).resolve().parents[1]


def _value(entry: Mapping[str, Any]) -> dict[str, Any]:
    out = {"value": round(float(entry["value"]), 4)}
    if "ci95" in entry:
        out["ci95"] = [round(float(v), 4) for v in entry["ci95"]]
        out["n"] = int(entry["n"])
    return out


def summarize(result: Mapping[str, Any], judge: str = "dlib") -> dict[str, Any]:
    """The headline numbers of an evaluation (rates with 95% intervals and N), for ``method.json``."""
    m = result["metrics"]
    out: dict[str, Any] = {
        "judge": judge,
        "data": result["dataset"]["name"] if isinstance(result["dataset"], Mapping) else str(result["dataset"]),
        "anonymized_same_person": _value({**m["privacy"][judge]["identification_rate"]}),
    }
    if "recovery" in m:
        out["recovery_same_person"] = _value(m["recovery"][judge]["recovery_rate"])
        out["recovery_closer_than_anonymized"] = _value(m["recovery"][judge]["closer_than_anonymized"])
        out["wrong_key_same_person"] = _value(m["wrong_key"][judge]["identification_rate"])
        if "identification_rate_all_keys" in m["wrong_key"][judge]:
            out["wrong_key_same_person_all_keys"] = _value(m["wrong_key"][judge]["identification_rate_all_keys"])
    jpeg = (m.get("robustness") or {}).get("jpeg90", {}).get(judge, {}).get("recovery_rate")
    if jpeg:  # a lossy copy loses the carried latent: recovery from the pixels alone
        out["recovery_same_person_from_jpeg90"] = _value(jpeg)
    if "diversity" in m:
        out["keys_same_person_pairwise"] = _value(m["diversity"][judge]["pairwise_same_rate"])
    det = (m.get("utility") or {}).get("detection_rate")
    if det and det.get("value") is not None:
        out["face_detected"] = _value(det)
    if "reconstruction" in m:
        out["reconstruction_same_person"] = _value(m["reconstruction"][judge]["identification_rate"])
    return out


def photo_rows(method, photos: list[str], key: str = "evaluation key", wrong_key: str = "a wrong key") -> dict[str, Any]:
    """Whole photos through the full pipeline, judged by dlib at each face's original place and full
    resolution (the way a person would check a shared photo): faces still matched after anonymization,
    and faces whose right-key recovery (from the anonymized photo, re-detected) is closer to the original
    than the anonymized face; wrong-key recoveries still matched."""
    from training.evaluate import rate
    from zoo.detection import detect_faces
    from zoo.imageio import load_image
    from zoo.judges import embed_at_original_places, get_judge

    dlib = get_judge("dlib")
    matched, closer, wrong_matched, n_faces = [], [], [], 0
    for path in photos:
        rgb, _ = load_image(path)
        faces = detect_faces(rgb)
        n_faces += len(faces)
        anon = np.asarray(method.anonymize(rgb, key=key).image.convert("RGB"))
        e0 = dlib.embed_photo_faces(rgb, faces)
        e_anon = embed_at_original_places(dlib, rgb, anon, faces)
        matched += list(dlib.same_person(e0, e_anon))
        if method.reversible:
            rec = np.asarray(method.recover(anon, key=key).image.convert("RGB"))
            bad = np.asarray(method.recover(anon, key=wrong_key).image.convert("RGB"))
            e_rec = embed_at_original_places(dlib, rgb, rec, faces)
            closer += list(dlib.distance(e0, e_rec) < dlib.distance(e0, e_anon))
            wrong_matched += list(dlib.same_person(e0, embed_at_original_places(dlib, rgb, bad, faces)))
    out = {
        "photos": [Path(p).name for p in photos],
        "faces": n_faces,
        "anonymized_same_person": rate(matched, "faces dlib still matches at their original place after anonymization (full photo)"),
    }
    if method.reversible:
        out["recovery_closer_than_anonymized"] = rate(
            closer, "faces whose right-key recovery of the photo is closer to the original than the anonymized face (dlib)"
        )
        out["wrong_key_same_person"] = rate(wrong_matched, "faces dlib matches after a wrong-key recovery of the photo")
    return out


def bundle(
    method_name: str,
    *,
    config: str | None = None,
    checkpoint: str | None = None,
    n: int = 200,
    seed: int = 1,
    photos: list[str] | None = None,
    controls: Mapping[str, Any] | None = None,
    out: str | None = None,
    results: str | None = None,
    command: str | None = None,
    encoder: str | None = None,
) -> dict[str, Any]:
    import zoo
    from zoo.methods.latent_demo import DEMO_LABEL
    from zoo.registry import get_method_class

    cls = get_method_class(method_name)
    if config:
        from training.train import load_config, resolve_method_class

        cfg = load_config(config)
        built = resolve_method_class(str(cfg.get("method", method_name))).from_config(cfg)
    elif checkpoint:
        built = cls.from_pretrained(checkpoint)
    else:
        raise ValueError("give --config or --checkpoint")
    # the config's `bundle` block: what the shipped checkpoint runs with (the demo methods: the W+ tier)
    built.config.update(built.config.pop("bundle", None) or {})
    if "latent_space" in built.config and hasattr(built, "use_latent_space"):
        built.use_latent_space(built.config["latent_space"])
    if encoder:  # a later (better) inversion encoder of the same backbone, swapped in before evaluation
        from zoo.nn.dcgan import InversionEncoder

        built.components["encoder"] = InversionEncoder.from_pretrained(encoder).float()
        built.config["encoder_path"] = str(encoder)
    tmp = Path(tempfile.mkdtemp(prefix=f"bundle_{method_name}_"))
    built.save_pretrained(tmp)
    index = json.loads((tmp / "method.json").read_text())
    index["weights_label"] = getattr(built, "weights_label", None) or DEMO_LABEL
    (tmp / "method.json").write_text(json.dumps(index, indent=2, sort_keys=True))
    # the evaluator measures the 64 px tier of a demo method that runs on W+ (its W+ default is measured by
    # benchmarks/wplus_methods.py and benchmarks/wrong_keys.py: refresh_evaluation below)
    tier = {"latent_space": "dcgan"} if hasattr(built, "use_latent_space") else {}
    method = zoo.load(method_name, local_dir=str(tmp), device="cpu", **tier)

    size = method.resolution
    evaluations = {}
    images, ds = load_eval_images(f"synthetic:{n}:{seed}", size)
    # robustness rows: a JPEG / resized copy loses the carried latent (zoo.carrier), so they measure
    # recovery from the pixels alone
    evaluations["generated"] = evaluate(method, images, ("dlib", "sface"), controls=controls, robustness=method.reversible, dataset=ds, command=command)
    photo_crops, names = [], []
    for p in photos or []:
        crops, _ = load_eval_images(f"photos:{p}", size)
        photo_crops.append(crops)
        names.append(Path(p).name)
    if photo_crops:
        crops = np.concatenate(photo_crops)
        ds_real = {"name": f"real faces of the packaged photos ({', '.join(names)})", "num_images": int(len(crops))}
        evaluations["real"] = evaluate(method, crops, ("dlib", "sface"), controls=controls, robustness=False, landmarks=False, dataset=ds_real, command=command)

    index["evaluation"] = {name: summarize(r) for name, r in evaluations.items()}
    if photos:
        evaluations["photos"] = photo_rows(method, photos)
        index["evaluation"]["photos"] = {k: (_value(v) if isinstance(v, Mapping) and "value" in v else v) for k, v in evaluations["photos"].items()}
    index["evaluation"]["command"] = command
    (tmp / "method.json").write_text(json.dumps(index, indent=2, sort_keys=True))
    dest = Path(out) if out else REPO / "zoo" / "weights" / method_name
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(tmp, dest)
    shutil.rmtree(tmp, ignore_errors=True)
    if not out:  # bundled into the package: a network stored in zoo/weights/shared is referenced, not copied
        from zoo.hub import link_shared

        link_shared(dest)
    default = shipped_tier_entries(method_name, index)
    index = refresh_evaluation(dest, index, default)
    res = Path(results) if results else REPO / "benchmarks" / "results" / f"{method_name}_demo_cpu"
    res.parent.mkdir(parents=True, exist_ok=True)
    # evaluator entries as a list (the layout hub_cards reads), whole-photo rows beside them
    layout = {"results": [r for k, r in evaluations.items() if k != "photos"], "photos": evaluations.get("photos")}
    res.with_suffix(".json").write_text(json.dumps(layout, indent=1, default=str))
    md = [f"# {method_name}: demo checkpoint, evaluated", "", f"Weights: {index['weights_label']}.", f"Command: `{command}`", ""]
    md += [to_markdown(r) for k, r in evaluations.items() if k != "photos"]
    if "photos" in evaluations:
        ph = evaluations["photos"]
        md += [
            f"## Whole photos ({', '.join(ph['photos'])}; {ph['faces']} faces), dlib at the original face places\n\n| measure | value |\n|---|---|\n"
            + "\n".join(
                f"| {k.replace('_', ' ')} | {v['value']:.3f} [{v['ci95'][0]:.3f}, {v['ci95'][1]:.3f}] (n={v['n']}) |"
                for k, v in ph.items()
                if isinstance(v, Mapping)
            )
        ]
    res.with_suffix(".md").write_text("\n\n".join(md) + "\n")
    write_card(method_name, dest, layout, index, config, default)
    return index["evaluation"]


#: results files that measure the shipped default of the reversible demo methods (the FFHQ-grade W+ tier)
WPLUS_RESULTS = REPO / "benchmarks" / "results" / "wplus_methods.json"
#: whole-photo results files (``benchmarks/wrong_keys.py``), first choice first, each with how its methods ran where
#: that is not as shipped: each split of a method is taken from the first file that measures it
PHOTO_RESULTS: tuple[tuple[Path, str], ...] = (
    (REPO / "benchmarks" / "results" / "wrong_keys_guard_rank.json", ""),
    (
        REPO / "benchmarks" / "results" / "wrong_keys.json",
        "faster fit (-c refine_steps=20 -c face_fit=0) and an earlier privacy guard that drew fewer faces over a wider region",
    ),
)
#: the whole-photo appearance results (``benchmarks/appearance.py``) of every method as shipped
APPEARANCE_RESULTS = REPO / "benchmarks" / "results" / "appearance_guard_rank.json"
#: how the card and method.json name the 64 px tier the bundle evaluator measured
DCGAN_TIER = "64 px DCGAN tier (ZOO_LATENT_SPACE=dcgan)"


def _metric(r: Mapping[str, Any] | None, description: str) -> dict[str, Any] | None:
    """A results file's rate (``k``, ``n``, ``rate``, ``95ci``) as an evaluator metric entry (hub_cards), None if absent."""
    if not r or not r.get("n"):
        return None
    return {"value": r["rate"], "n": r["n"], "ci95": list(r["95ci"]), "description": description}


def _number(value: Any, description: str, unit: str = "") -> dict[str, Any] | None:
    return None if value is None else {"value": float(value), "description": description, "unit": unit}


def _pruned(tree: Mapping[str, Any]) -> dict[str, Any]:
    """``tree`` without the None leaves (measures a results file does not hold)."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and "value" not in value:
            value = _pruned(value)
            if not value:
                continue
        if value is not None:
            out[key] = value
    return out


def default_tier_entries(method_name: str) -> list[dict[str, Any]]:
    """Evaluator-style entries (:mod:`hub_cards`) of the method as it ships, on the FFHQ-grade W+ tier: the
    generator's own faces from :data:`WPLUS_RESULTS` (``benchmarks/wplus_methods.py``: the keyed transform alone)
    and whole real photos, per split, from :data:`PHOTO_RESULTS` (``benchmarks/wrong_keys.py``: defaults, privacy
    guard on); each entry's ``set`` names its faces (``generated``, ``real_held_out``, ``real_tuning``). [] where
    neither file holds the method."""
    entries: list[dict[str, Any]] = []
    dlib = "dlib (euclidean, threshold 0.6; never used by a method, the guard or a setting)"
    if WPLUS_RESULTS.is_file():
        result = json.loads(WPLUS_RESULTS.read_text())
        per = result.get("sets", {}).get("generated", {})
        r = per.get(method_name)
        if r and "keys_pairwise_same_dlib" in r:
            metrics = {
                "privacy": {
                    "dlib": {
                        "identification_rate": _metric(r["anonymized_same_dlib"], "anonymized face matched to the original"),
                        "chance_floor": _metric(per.get("chance_floor_dlib"), "an unrelated generated face matched to the original"),
                    },
                    "sface": {"identification_rate": _metric(r["anonymized_same_sface"], "as above, SFace at its threshold (used in training)")},
                    "faceres": {"identification_rate": _metric(r["anonymized_same_faceres"], "as above, FaceRes (the guard's second recognizer)")},
                },
                "diversity": {
                    "dlib": {
                        "pairwise_same_rate": _metric(r["keys_pairwise_same_dlib"], f"{result.get('keys', 4)} keys on one face, pairs judged the same person")
                    }
                },
                "recovery": {
                    "dlib": {
                        "recovery_rate": _metric(r["recovered_carried_same_dlib"], "right key, from the lossless save's carried code: same person"),
                        "nearest_own": _metric(r["recovered_carried_nearest_own"], "the recovered face's nearest original among all test faces is its own"),
                    },
                    "psnr": _number(r.get("recovered_carried_psnr_db_median"), "right-key recovery against the original, inside the face mask, median", "dB"),
                    "pixels_only": {"dlib": {"recovery_rate": _metric(r["recovered_pixels_same_dlib"], "right key, the code re-inverted from the pixels")}},
                },
                "robustness": {
                    "jpeg90": {"dlib": {"recovery_rate": _metric(r["recovered_jpeg90_pixels_same_dlib"], "right key from a JPEG q90 copy (pixels only)")}}
                },
                "wrong_key": {
                    "dlib": {
                        "identification_rate": _metric(r["wrong_key_same_dlib"], "a wrong key's recovery matched to the original (the keyed transform alone)")
                    }
                },
                "utility": {
                    "detection_rate": _metric(r["anonymized_detected_dlib"], "dlib's HOG detector finds the anonymized face"),
                    "yaw_change_median": _number(r["yaw_change_deg_median"], "|yaw change|, median", "deg"),
                    "yaw_change_p90": _number(r["yaw_change_deg_p90"], "|yaw change|, 90th percentile", "deg"),
                    "pitch_change_median": _number(r["pitch_change_deg_median"], "|pitch change|, median", "deg"),
                    "pitch_change_p90": _number(r["pitch_change_deg_p90"], "|pitch change|, 90th percentile", "deg"),
                    "anonymized_psnr": _number(r["anonymized_psnr_db_median"], "anonymized face against the original, inside the face mask, median", "dB"),
                },
                "speed": {
                    "anonymize": _number(r["anonymize_s_per_face"], "keyed transform + 256 px drawing per face (no inversion: drawn from W+)", "s"),
                    "recover": _number(r["recover_s_per_face"], "right-key recovery from the carried code per face", "s"),
                },
            }
            entries.append(
                {
                    "method": method_name,
                    "set": "generated",
                    "dataset": {
                        "name": "FFHQ-grade W+ (the default): the generator's own faces (seeds 5,000,000+, truncation 0.8), the keyed transform alone",
                        "num_images": per["n"],
                    },
                    "judges": [dlib],
                    "command": result["command"].strip(),
                    "metrics": _pruned(metrics),
                }
            )
    photo_results = [(json.loads(path.read_text()), how) for path, how in PHOTO_RESULTS if path.is_file()]
    for split in ("held-out", "tuning"):
        found = _photo_split(photo_results, method_name, split)
        if found is None:
            continue
        result, s, how = found
        n = s["faces"]
        metrics = {
            "privacy": {"dlib": {"identification_rate": _metric(s["anonymized_matched"], "anonymized face matched to the original at its place in the photo")}},
            "guard": {
                "blurred": {
                    "value": round(s["guard_blurred"] / n, 4),
                    "n": n,
                    "ci95": [round(v, 3) for v in wilson_interval(s["guard_blurred"], n)],
                    "description": "faces the privacy guard blurred (it still found the person)",
                }
            },
            "recovery": {"dlib": {"recovery_rate": _metric(s["right_key_matched"], "right key, from the saved PNG: same person")}},
            "wrong_key": {
                "dlib": {
                    "identification_rate": _metric(
                        s["face_keys_matched"], "wrong keys on the saved PNG: face-keys matched (a refused key leaves the anonymized face)"
                    ),
                    "jpeg_copy_identification_rate": _metric(s.get("jpeg_face_keys_matched"), "another key on a JPEG q95 copy: face-keys matched"),
                }
            },
        }
        entries.append(
            {
                "method": method_name,
                "set": f"real_{split.replace('-', '_')}",
                "dataset": {
                    "name": f"FFHQ-grade W+ (the default): {split} real photos that packages ship, whole photos, privacy guard on"
                    + (f"; {how}" if how else ""),
                    "num_faces": n,
                },
                "judges": [dlib],
                "command": _own_command(result["command"], method_name),
                "metrics": _pruned(metrics),
            }
        )
    return entries


def _photo_split(photo_results: list[tuple[dict[str, Any], str]], method_name: str, split: str) -> tuple[dict[str, Any], dict[str, Any], str] | None:
    """(results file, its ``split`` row of ``method_name``, how the method ran) from the first of ``photo_results``
    (:data:`PHOTO_RESULTS` read, in order) that measures that split, None where none does."""
    for result, how in photo_results:
        row = result.get("methods", {}).get(method_name, {}).get(split)
        if row and row.get("faces"):
            return result, row, how
    return None


def _own_command(command: str, method_name: str) -> str:
    """Of a results file's commands (several runs joined by `` ; ``), the ones that measured ``method_name``, in
    order and joined the same way (a later ``--add`` run replaced some of the first run's photos); the whole
    command where no run names its methods."""
    runs = [c.strip() for c in command.split(" ; ")]
    own = []
    for run in runs:
        words = shlex.split(run)
        if "--methods" in words[:-1] and method_name in words[words.index("--methods") + 1].split(","):
            own.append(run)
    return " ; ".join(own) if own else command.strip()


def shipped_tier_entries(method_name: str, index: Mapping[str, Any]) -> list[dict[str, Any]]:
    """:func:`default_tier_entries` for a checkpoint (``method.json`` index) that runs on W+ by default, else []."""
    return default_tier_entries(method_name) if (index.get("config") or {}).get("latent_space") == "wplus" else []


def _summary_value(metrics: Mapping[str, Any], *path: str) -> dict[str, Any] | None:
    """The metric entry at ``path`` in an entry's nested ``metrics`` as a summary value, None where it is absent."""
    entry: Any = metrics
    for key in path:
        entry = entry.get(key) if isinstance(entry, Mapping) else None
    return _value(entry) if isinstance(entry, Mapping) and "value" in entry else None


def default_tier_summary(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """``method.json``'s evaluation summary of :func:`default_tier_entries`: per face set, the headline rates."""
    out: dict[str, Any] = {}
    for e in entries:
        m = e["metrics"]
        row = {
            "judge": "dlib",
            "data": e["dataset"]["name"],
            "command": e["command"],
            "anonymized_same_person": _summary_value(m, "privacy", "dlib", "identification_rate"),
            "chance_floor_same_person": _summary_value(m, "privacy", "dlib", "chance_floor"),
            "keys_same_person_pairwise": _summary_value(m, "diversity", "dlib", "pairwise_same_rate"),
            "recovery_same_person": _summary_value(m, "recovery", "dlib", "recovery_rate"),
            "recovery_nearest_own": _summary_value(m, "recovery", "dlib", "nearest_own"),
            "recovery_same_person_from_jpeg90": _summary_value(m, "robustness", "jpeg90", "dlib", "recovery_rate"),
            "wrong_key_same_person": _summary_value(m, "wrong_key", "dlib", "identification_rate"),
            "guard_blurred": _summary_value(m, "guard", "blurred"),
            "face_detected": _summary_value(m, "utility", "detection_rate"),
        }
        out[e["set"]] = {k: v for k, v in row.items() if v is not None}
    return out


def refresh_evaluation(folder: Path, index: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """``index`` (``folder/method.json``) with its evaluation summary for the tier the checkpoint runs by default,
    written back: with the W+ tier's ``entries`` (:func:`shipped_tier_entries`), their :func:`default_tier_summary`
    first and the bundle evaluator's 64 px summary under ``dcgan_tier``; without, unchanged."""
    if not entries:
        return index
    evaluation = dict(index.get("evaluation") or {})
    dcgan = evaluation.get("dcgan_tier") or {k: v for k, v in evaluation.items() if k in ("command", "generated", "real", "photos")}
    index["evaluation"] = {
        "tier": "FFHQ-grade W+ (the default)",
        **default_tier_summary(entries),
        "dcgan_tier": {"tier": DCGAN_TIER, **{k: v for k, v in dcgan.items() if k != "tier"}},
    }
    (folder / "method.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return index


def _rate_cell(r: Mapping[str, Any] | None) -> str:
    """A results file's rate as the cards write it: ``k/n [lo, hi]`` (95% Wilson), ``-`` when not measured."""
    return "-" if r is None else f"{r['k']}/{r['n']} [{r['95ci'][0]:.2f}, {r['95ci'][1]:.2f}]"


def wplus_section(default: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The card's note on the FFHQ-grade W+ tier (the shipped default of the reversible demo methods) and its
    generator's terms, when :data:`WPLUS_RESULTS` measures this method."""
    if not any(e["set"] == "generated" for e in default):
        return []
    text = (
        "The keyed transform runs, by default, on the identity code of the FFHQ-grade generator's W+ (`latent_space: "
        "wplus`, 256 px; `zoo.nn.wplus_identity`): pose, expression, hair and lighting stay, the identity code is edited "
        "with the key, the rest of the identity slots is rotated with it, and the code's change also moves the 4 and 8 px "
        "slots along directions that leave the head's pose alone. The evaluations above labelled *FFHQ-grade "
        f"W+ (the default)* measure it; those labelled *{DCGAN_TIER}* measure the same keyed transform on the small "
        "generator it was trained with.\n\n"
        "Weights of the generator: MobileStyleGAN from the `random-face` wheel, a distillation of NVIDIA's StyleGAN2-FFHQ "
        "(NVIDIA Source Code License-NC; FFHQ CC BY-NC-SA 4.0): research and non-commercial use. They are converted "
        "into the user's cache at first use and never redistributed."
    )
    return [("On the FFHQ-grade backbone (the default)", text)]


def _photos_of(per_method: dict, split: str) -> list[str]:
    """The photos of an appearance results entry's face rows in ``split``, in the order they were run."""
    return list(dict.fromkeys(r["photo"] for r in per_method.get("faces", []) if r["split"] == split))


def appearance_section(method_name: str) -> list[tuple[str, str]]:
    """The card's section on whole photos at the defaults (privacy guard and compositing on), from
    :data:`APPEARANCE_RESULTS` (``python -m benchmarks.appearance``) when it holds this method."""
    path = APPEARANCE_RESULTS
    if not path.is_file():
        return []
    result = json.loads(path.read_text())
    per = result.get("methods", {}).get(method_name)
    if not per:
        return []

    lines = [
        "Whole real photos at the defaults (privacy guard and compositing on), judged by dlib at each face's place "
        f"(`{_own_command(result['command'], method_name)}`; tuning = {', '.join(_photos_of(per, 'tuning'))}, held-out = "
        f"{', '.join(_photos_of(per, 'held-out'))}: real photos that packages ship, benchmarks/real_photos.py; "
        "rates k/n [95% Wilson] over every face, medians over the faces the method drew (not blurred by the guard); "
        "dE: CIE76 colour difference output vs original):",
        "",
        "| split | faces | dlib same person | blurred by the guard | right-key recovery same | wrong-key recovery same | dlib finds the face | face dE | skin-ring dE | sharpness (out/in) | yaw / pitch change deg, median (p90) | landmark NME |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for split in ("tuning", "held-out"):
        s = per.get(split) or {}
        if not s.get("n"):
            continue
        m = s["median"]
        pose = f"{m['yaw_p50']} ({m['yaw_p90']}) / {m['pitch_p50']} ({m['pitch_p90']})" if m.get("yaw_p50") is not None else f"{m['yaw']} / -"
        lines.append(
            f"| {split} | {s['n']} | {_rate_cell(s['same'])} | {_rate_cell(s.get('guard_blurred'))} | {_rate_cell(s.get('recovered_same'))} | {_rate_cell(s.get('wrong_key_same'))} | {_rate_cell(s['detected'])} "
            f"| {m['face_de']} | {m['ring_de']} | {m['sharpness']} | {pose} | {m['nme']} |"
        )
    lines += ["", f"Source: `{path.with_suffix('.md').relative_to(REPO).as_posix()}`."]
    return [("Whole photos: privacy, recovery and how the face fits in", "\n".join(lines))]


def extra_sections(method_name: str, default: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Further measured tables for the card: whole photos (:func:`appearance_section`), the W+ latent space
    (:func:`wplus_section` of the W+ tier's entries ``default``) and
    ``benchmarks/results/<method>_demo_levels.md`` (``personal``'s every privacy level, written by
    ``benchmarks/personal_levels.py``) when they exist."""
    out = appearance_section(method_name) + wplus_section(default)
    path = REPO / "benchmarks" / "results" / f"{method_name}_demo_levels.md"
    if not path.is_file():
        return out
    lines = path.read_text().splitlines()
    title = lines[0].lstrip("# ").strip() if lines and lines[0].startswith("#") else "Every level"
    return out + [(title[:1].upper() + title[1:], "\n".join(lines[1:]).strip() + f"\n\nSource: `benchmarks/results/{path.name}`.")]


def _bundle_option(index: Mapping[str, Any], option: str) -> str | None:
    """The value of ``option`` (e.g. ``--config``) in the bundle command ``method.json`` records, None if it has none."""
    evaluation = index.get("evaluation") or {}
    words = shlex.split((evaluation.get("dcgan_tier") or evaluation).get("command") or "")
    return words[words.index(option) + 1] if option in words[:-1] else None


def _bundled_results(index: Mapping[str, Any]) -> Path | None:
    """The results file (``.json``) the bundle command recorded in ``method.json`` wrote, when it named one
    (``--results STEM``, relative to the repository)."""
    stem = _bundle_option(index, "--results")
    if stem is None:
        return None
    return (Path(stem) if Path(stem).is_absolute() else REPO / stem).with_suffix(".json")


def recard(method_name: str, folder: str | Path | None = None, results: str | Path | None = None) -> Path:
    """Render a bundled checkpoint's card again from its saved evaluation (``method.json`` and the results file its
    bundle wrote: ``results``, else the ``--results`` stem of the bundle command ``method.json`` records, else
    ``benchmarks/results/<method>_demo_cpu.json``), without evaluating again; a checkpoint that runs on W+ by
    default first gets its evaluation summary from the default tier's results files (:func:`refresh_evaluation`)."""
    folder = Path(folder) if folder else REPO / "zoo" / "weights" / method_name
    if not (folder / "method.json").is_file():
        raise FileNotFoundError(f"{folder / 'method.json'} not found: bundle the checkpoint first (python -m training.bundle --method {method_name} ...)")
    index = json.loads((folder / "method.json").read_text())
    res = Path(results) if results else _bundled_results(index) or REPO / "benchmarks" / "results" / f"{method_name}_demo_cpu.json"
    if not res.is_file():
        raise FileNotFoundError(f"{res} not found: bundle the checkpoint first (python -m training.bundle --method {method_name} ...)")
    default = shipped_tier_entries(method_name, index)
    index = refresh_evaluation(folder, index, default)
    layout = json.loads(res.read_text())
    if not isinstance(layout, dict) or "results" not in layout:
        raise ValueError(f"{res} was not written by training.bundle (no 'results' list)")
    return write_card(method_name, folder, layout, index, _bundle_option(index, "--config"), default)


def _dataset(entry: Mapping[str, Any]) -> dict[str, Any]:
    ds = entry.get("dataset")
    return dict(ds) if isinstance(ds, Mapping) else {"name": str(ds)}


def write_card(method_name: str, folder: Path, layout: Mapping[str, Any], index: Mapping[str, Any], config: str | None, default: list[dict[str, Any]]) -> Path:
    """The checkpoint's model card (``README.md``), rendered by :mod:`hub_cards` from the evaluation: ``default`` (the
    W+ tier's entries, :func:`shipped_tier_entries`) first, then the bundle evaluator's ``layout``."""
    from hub_cards import render_card

    evaluation = index.get("evaluation") or {}
    bundled = evaluation.get("dcgan_tier") or evaluation  # what the bundle evaluator measured
    training = {
        "weights": index.get("weights_label") or "",
        "recipe": f"training/configs/{Path(config).name}" if config else f"training/configs/{method_name}_demo.yaml",
        "deviations from the paper": "listed, each with the measurement behind it, at the top of the recipe",
        "evaluation command": bundled.get("command") or "",
        "licence of these demo weights": "they hold no paper weights and no StyleGAN2 / FFHQ / CelebA data: they were "
        "trained here on faces drawn by the DCGAN of the `gan-face-generate` package (package licence field: "
        "'Copyright (c) 2023, chien liu', no terms stated), so no licence is granted beyond research use; the licence "
        "metadata and text of this card are the paper recipe's",
    }
    if layout.get("photos"):
        ph = layout["photos"]
        where = f", {DCGAN_TIER}" if "dcgan_tier" in evaluation else ""
        training[f"whole photos (dlib at the original face places{where})"] = "; ".join(
            f"{k.replace('_', ' ')} {v['value']:.3f} (n={v['n']})" for k, v in ph.items() if isinstance(v, Mapping) and "value" in v
        )
    results = list(layout["results"])
    if default:  # the shipped default first; the bundle evaluator's 64 px entries after it, labelled
        results = default + [{**r, "dataset": {**_dataset(r), "name": f"{DCGAN_TIER}: {_dataset(r)['name']}"}} for r in results]
    card = render_card(method_name, eval_json={"results": results}, training=training, extra_sections=extra_sections(method_name, default))
    out = Path(folder) / "README.md"
    out.write_text(card)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.bundle", description=__doc__.split("\n\n")[0])
    p.add_argument("--method", required=True)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="build from a config (methods whose demo needs no training step)")
    src.add_argument(
        "--card-only", action="store_true", help="only render the bundled checkpoint's card (and, on W+, its evaluation summary) again from saved results"
    )
    src.add_argument("--checkpoint", help="a trained model folder (training/train.py OUT/model)")
    p.add_argument("--encoder", help="an InversionEncoder folder to use instead of the checkpoint's (demo backbone)")
    p.add_argument("--n", type=int, default=200, help="held-out generated faces to evaluate on")
    p.add_argument("--seed", type=int, default=1, help="seed of the held-out generated faces")
    p.add_argument("--photos", nargs="*", default=None, help="photos whose real faces are evaluated too (default: the packaged ones)")
    p.add_argument("--control", action="append", default=[], help="NAME=VALUE, e.g. level=5")
    p.add_argument("--out", help="destination folder (default zoo/weights/<method>)")
    p.add_argument("--results", help="results path stem (default benchmarks/results/<method>_demo_cpu)")
    args = p.parse_args(argv)
    if args.card_only:
        print(recard(args.method, args.out, Path(args.results).with_suffix(".json") if args.results else None))
        return 0
    from training.evaluate import parse_controls
    from zoo.assets import example_images

    ex = example_images()
    photos = args.photos if args.photos is not None else [str(ex[k]) for k in ("group", "astronaut", "grace_hopper") if k in ex]
    command = "python -m training.bundle " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    summary = bundle(
        args.method,
        config=args.config,
        checkpoint=args.checkpoint,
        n=args.n,
        seed=args.seed,
        photos=photos,
        controls=parse_controls(args.control),
        out=args.out,
        results=args.results,
        command=command,
        encoder=args.encoder,
    )
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
