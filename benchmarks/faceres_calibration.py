"""Calibration of the guard's independent recognizers (FaceRes, :mod:`zoo.nn.faceres`; MobileFace,
:mod:`zoo.nn.mobileface`): ROC and the same-person threshold.

Labelled faces (the tuning side only; no held-out photo is used):

* **identities**: ``--n`` faces of the FFHQ-grade generator (seeds 2,000,000 + i, disjoint from every training and
  evaluation range; psi 0.7, 256 px) and the 6 faces of the tuning photo (insightface's t1.jpg), FFHQ-aligned;
* **different-person pairs**: every pair of distinct identities;
* **same-person pairs**: each identity against its own variants: the generator's face with its colour and fine
  detail styles (slots 13-22, 128 px and up) taken from another face; and every identity's crop mirrored, in grey,
  as JPEG quality 40, shrunk to 64 px and back, turned 8 degrees, darkened to 70%.

The threshold is the cosine that a false-match rate of ``--fmr`` of different-person pairs reaches (the judges use
it: :data:`zoo.judges.FACERES_THRESHOLD`, :data:`zoo.judges.MOBILEFACE_THRESHOLD`; the guard's floors and targets are
the 5% and 10% points of the same table: :mod:`zoo.guard`); the same-person rate there comes with its 95% Wilson
interval. SFace is measured on the same pairs at its published threshold (0.363) for comparison. Same-person
pairs here are the same photograph transformed, easier than two photographs of one person: the true-match rates are
upper bounds; the false-match side (what the threshold is set from) is measured on real different people.

    python -m benchmarks.faceres_calibration [--recognizer faceres] [--n 200] [--fmr 0.01]
        # -> results/<recognizer>_calibration.{json,md}
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np

from benchmarks.report import command_line, write_results

RESULTS = Path(__file__).resolve().parent / "results"
SEED_OFFSET = 2_000_000
FINE_SLOTS = slice(13, 23)


def _augment(crop: np.ndarray) -> dict[str, np.ndarray]:
    s = crop.shape[0]
    grey = cv2.cvtColor(crop, cv2.COLOR_RGB2GRAY)
    _, jpg = cv2.imencode(".jpg", crop[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 40])
    rot = cv2.warpAffine(crop, cv2.getRotationMatrix2D((s / 2, s / 2), 8, 1.0), (s, s), borderMode=cv2.BORDER_REFLECT_101)
    return {
        "mirror": np.ascontiguousarray(crop[:, ::-1]),
        "grey": np.repeat(grey[:, :, None], 3, 2),
        "jpeg40": cv2.imdecode(jpg, cv2.IMREAD_COLOR)[:, :, ::-1],
        "small64": cv2.resize(cv2.resize(crop, (64, 64), interpolation=cv2.INTER_AREA), (s, s), interpolation=cv2.INTER_LINEAR),
        "rotate8": rot,
        "dark70": (crop.astype(np.float32) * 0.7).round().astype(np.uint8),
    }


def identities(n: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(names, uint8 crops [N,256,256,3], fine-style variants of the generated ones [n,256,256,3])."""
    import torch

    from benchmarks.real_photos import package_file, read_image
    from zoo.alignment import align_face
    from zoo.detection import detect_faces
    from zoo.nn.mobilestylegan import load_mobilestylegan

    g = load_mobilestylegan()
    rng = np.random.default_rng(SEED_OFFSET)
    z = torch.from_numpy(np.stack([np.random.default_rng(SEED_OFFSET + i).standard_normal(512) for i in range(n)]).astype(np.float32))
    donors = rng.permutation(n)
    donors = np.where(donors == np.arange(n), (donors + 1) % n, donors)
    with torch.no_grad():
        w = g.truncate(g.mapping(z), 0.7)
        wplus = w[:, None].repeat(1, 23, 1)
        mixed = wplus.clone()
        mixed[:, FINE_SLOTS] = wplus[donors][:, FINE_SLOTS]
        to_u8 = lambda x: ((x.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()
        gen = np.concatenate([to_u8(g.synthesis(wplus[i : i + 16], size=256)) for i in range(0, n, 16)])
        fine = np.concatenate([to_u8(g.synthesis(mixed[i : i + 16], size=256)) for i in range(0, n, 16)])
    names = [f"generated:{SEED_OFFSET + i}" for i in range(n)]
    t1_path = package_file("insightface", "data", "images", "t1.jpg")
    crops = [gen]
    if t1_path is not None:
        t1 = read_image(t1_path)
        faces = detect_faces(t1)
        crops.append(np.stack([align_face(t1, f.landmarks, 256).crop for f in faces]))
        names += [f"t1:{i}" for i in range(len(faces))]
    return names, np.concatenate(crops), fine


def roc(same: np.ndarray, diff: np.ndarray, fmrs=(0.0001, 0.001, 0.01, 0.05, 0.1, 0.2)) -> list[dict]:
    """For each false-match rate: the threshold (the similarity that fraction of ``diff`` reaches) and the
    same-person rate at it, with its Wilson interval."""
    from training.evaluate import wilson_interval

    out = []
    srt = np.sort(diff)[::-1]
    for fmr in fmrs:
        k = max(int(np.floor(fmr * len(diff))), 1)
        thr = float(srt[k - 1])
        hits = int((same >= thr).sum())
        out.append(
            {
                "fmr": fmr,
                "threshold": round(thr, 4),
                "false_matches": int((diff >= thr).sum()),
                "different_pairs": len(diff),
                "true_match_rate": round(hits / len(same), 4),
                "true_match_ci95": [round(v, 4) for v in wilson_interval(hits, len(same))],
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=200, help="generated identities")
    p.add_argument("--fmr", type=float, default=0.01, help="false-match rate the threshold is set at")
    p.add_argument("--recognizer", choices=("faceres", "mobileface"), default="faceres")
    p.add_argument("--out", type=Path, default=None, help="default: results/<recognizer>_calibration")
    a = p.parse_args(argv)
    a.out = a.out or RESULTS / f"{a.recognizer}_calibration"

    from training.evaluate import wilson_interval
    from zoo.judges import get_judge

    names, crops, fine = identities(a.n)
    n_id = len(names)
    variants = [(i, kind, img) for i, c in enumerate(crops) for kind, img in _augment(c).items()]
    variants += [(i, "fine_styles", fine[i]) for i in range(len(fine))]
    result: dict = {
        "command": command_line("benchmarks.faceres_calibration", argv),
        "identities": n_id,
        "generated": len(fine),
        "real_tuning_faces": n_id - len(fine),
        "fmr": a.fmr,
        "judges": {},
    }
    iu = np.triu_indices(n_id, 1)
    for name in (a.recognizer, "sface"):
        judge = get_judge(name)
        base = judge.embed_aligned(crops)
        var = judge.embed_aligned(np.stack([v[2] for v in variants]))
        nb = base / np.linalg.norm(base, axis=1, keepdims=True)
        diff = (nb @ nb.T)[iu]
        same = judge.score(base[[v[0] for v in variants]], var)
        real_diff = (nb[len(fine) :] @ nb[len(fine) :].T)[np.triu_indices(n_id - len(fine), 1)]
        by_kind = {}
        for kind in sorted({v[1] for v in variants}):
            sel = np.array([v[1] == kind for v in variants])
            by_kind[kind] = {"pairs": int(sel.sum()), "median_cosine": round(float(np.median(same[sel])), 4)}
        entry = {
            "same_pairs": len(same),
            "different_pairs": len(diff),
            "roc": roc(same, diff),
            "by_variant": by_kind,
            "different_median": round(float(np.median(diff)), 4),
            "same_median": round(float(np.median(same)), 4),
            "real_different_max": round(float(real_diff.max()), 4) if len(real_diff) else None,
        }
        if name == "sface":
            k_fm, k_tm = int((diff >= judge.threshold).sum()), int((same >= judge.threshold).sum())
            entry["published_threshold"] = {
                "threshold": judge.threshold,
                "false_match_rate": round(k_fm / len(diff), 5),
                "false_match_ci95": [round(v, 5) for v in wilson_interval(k_fm, len(diff))],
                "true_match_rate": round(k_tm / len(same), 4),
                "true_match_ci95": [round(v, 4) for v in wilson_interval(k_tm, len(same))],
            }
        else:
            entry["chosen"] = roc(same, diff, (a.fmr,))[0]
        result["judges"][name] = entry

    fr = result["judges"][a.recognizer]
    title = {"faceres": "FaceRes", "mobileface": "MobileFace"}[a.recognizer]
    lines = [
        f"# {title} calibration",
        "",
        f"`{result['command']}`",
        "",
        f"{n_id} identities ({result['generated']} generated, {result['real_tuning_faces']} real from the tuning photo), "
        f"{fr['different_pairs']} different-person pairs, {fr['same_pairs']} same-person pairs (each identity's crop "
        "transformed: mirror, grey, JPEG 40, 64 px, 8 degrees, 70% light; generated faces also with another face's "
        "fine styles). Same-person pairs are one photograph transformed: their rates are upper bounds.",
        "",
        "| recognizer | FMR | cosine threshold | false matches | same-person rate [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for name, entry in result["judges"].items():
        for r in entry["roc"]:
            lines.append(
                f"| {name} | {r['fmr']} | {r['threshold']} | {r['false_matches']} of {r['different_pairs']} | "
                f"{r['true_match_rate']} [{r['true_match_ci95'][0]}, {r['true_match_ci95'][1]}] |"
            )
    c = fr["chosen"]
    pub = result["judges"]["sface"]["published_threshold"]
    lines += [
        "",
        f"Chosen {title} threshold (FMR {a.fmr}): cosine **{c['threshold']}**, same-person rate {c['true_match_rate']} "
        f"[{c['true_match_ci95'][0]}, {c['true_match_ci95'][1]}]. The most similar two different real people of the tuning "
        f"photo: {fr['real_different_max']}.",
        "",
        f"SFace at its published 0.363 on the same pairs: false-match rate {pub['false_match_rate']} "
        f"[{pub['false_match_ci95'][0]}, {pub['false_match_ci95'][1]}], same-person rate {pub['true_match_rate']} "
        f"[{pub['true_match_ci95'][0]}, {pub['true_match_ci95'][1]}].",
        "",
        f"| variant | pairs | {title} median cosine | SFace median cosine |",
        "|---|---|---|---|",
    ]
    for kind, e in fr["by_variant"].items():
        lines.append(f"| {kind} | {e['pairs']} | {e['median_cosine']} | {result['judges']['sface']['by_variant'][kind]['median_cosine']} |")
    write_results(a.out, result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
