"""The reversible methods on the FFHQ-grade backbone (config ``latent_space: wplus``): what they do to faces.

    python -m benchmarks.wplus_methods [--methods dbaf,hford,ifadit,personal] [--sets generated,tuning,held-out]
                                       [--generated 200] [--keys 4] [--steps 20]

Faces, split before measuring:

* ``generated``: the generator's own faces (seeds 5,000,000+, truncation 0.8; never used for any setting),
  drawn from W+ exactly, so recovery tests the keyed transform, not the inversion;
* real faces from photos that packages ship (:data:`benchmarks.real_photos.REAL_PHOTOS`): ``tuning`` (t1.jpg,
  6 faces) and ``held-out`` (astronaut, camera, grace_hopper, Tom_Hanks), FFHQ-aligned at 256 px and inverted
  with the W+ encoder + ``--steps`` refinement steps (SFace identity term at the method's default weight).

Per face and method, with ``--keys`` keys per face: the anonymized faces, the first key's right-key recovery from
the carried code (what a lossless save carries, :mod:`zoo.carrier`), from the pixels alone (re-inverted with the
same steps) and from a JPEG (quality 90) copy's pixels, and a wrong-key recovery. Measured on the aligned 256 px
crops against the original (real faces) or the generator's own image (generated):

* dlib same person at 0.6 (the judge: no setting here uses it), and SFace / FaceRes (the guard's view);
* the chance floor (generated): dlib same person between each face and an unrelated generated face (seeds
  6,000,000+), both drawn by the same generator;
* the keys on one face: dlib same person between every pair of its anonymized faces;
* the recovered face's nearest original (dlib distance) among all the set's faces is its own;
* head pose change (yaw and pitch; 68 dlib landmarks + solvePnP, :func:`zoo.face3d.landmarks.head_pose`),
  median and 90th percentile; dlib finds a face in the anonymized crop;
* PSNR inside the face mask: recovery and anonymized face against the original.

No privacy guard and no paste-back: the methods themselves. Rates carry 95% Wilson intervals. Writes
``benchmarks/results/wplus_methods.{json,md}``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import cv2
import numpy as np
import torch

from benchmarks.reconstruct_real import aligned_landmarks, packaged_faces
from benchmarks.report import command_line, rate, rate_text, write_results
from zoo import load
from zoo.alignment import ffhq_template
from zoo.carrier import quantize_code
from zoo.face3d.landmarks import head_pose
from zoo.imageio import from_tensor, to_tensor
from zoo.judges import get_judge
from zoo.paste import face_mask

OUT = Path(__file__).resolve().parent / "results" / "wplus_methods"
METHODS = ("dbaf", "hford", "ifadit", "personal")


def _rate(flags) -> dict:
    """:func:`benchmarks.report.rate` of a sequence of yes/no outcomes."""
    flags = [bool(f) for f in flags]
    return rate(sum(flags), len(flags))


def generated_faces(method, n: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """``n`` of the generator's own faces (truncation 0.8) from ``seed``: W+ ``[n,23,512]`` and uint8 256 px crops,
    drawn as the methods draw a code (``method.decode``), so a face's own code gives it back exactly."""
    gen = torch.Generator().manual_seed(seed)
    w = method.wplus.generator.style(torch.randn(n, 512, generator=gen), 0.8)[:, None].expand(-1, 23, -1).contiguous()
    return w, np.concatenate([from_tensor(method.decode(w[i : i + 8])) for i in range(0, n, 8)])


def _pose(crops: np.ndarray) -> np.ndarray:
    """(yaw, pitch) in degrees of each aligned crop ``[N,S,S,3]`` (nan where dlib's landmarks fail)."""
    template = ffhq_template(crops.shape[1])
    landmarks = [aligned_landmarks(c, template) for c in crops]
    return np.array([np.full(2, np.nan) if lm is None else head_pose(lm, c.shape[:2])[:2] for c, lm in zip(crops, landmarks)])


def _jpeg(crops: np.ndarray, quality: int) -> np.ndarray:
    """uint8 RGB crops ``[N,S,S,3]`` through a JPEG save at ``quality``."""
    out = []
    for c in crops:
        ok, buf = cv2.imencode(".jpg", cv2.cvtColor(c, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
        out.append(cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB))
    return np.stack(out)


def _dlib_finds_face(crop: np.ndarray) -> bool:
    """dlib's HOG detector (upsampled once) finds a face in an aligned uint8 crop."""
    import dlib

    return len(dlib.get_frontal_face_detector()(np.ascontiguousarray(crop), 1)) > 0


def _nearest_is_own(judge, recovered: np.ndarray, originals: np.ndarray) -> np.ndarray:
    """Per recovered face: is its own original (same row) the nearest of all ``originals`` (judge distance)?"""
    d = np.stack([judge.distance(np.repeat(r[None], len(originals), 0), originals) for r in recovered])
    return d.argmin(1) == np.arange(len(recovered))


def _psnr(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> np.ndarray:
    err = (a.astype(np.float64) - b.astype(np.float64))[:, mask]
    return 10 * np.log10(255.0**2 / np.maximum((err**2).reshape(len(a), -1).mean(1), 1e-9))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--sets", default="generated,tuning,held-out", help="which faces: generated, tuning, held-out")
    p.add_argument("--generated", type=int, default=200)
    p.add_argument("--keys", type=int, default=4, help="keys per face (pairwise same person between them)")
    p.add_argument("--steps", type=int, default=20, help="refinement steps of every inversion of a real face")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    methods = {name: load(name, latent_space="wplus") for name in args.methods.split(",")}
    for name, m in methods.items():
        if m.wplus is None:
            raise SystemExit(f"{name} is not on the W+ backbone (config latent_space)")
    judges = {n: get_judge(n) for n in ("dlib", "sface", "faceres")}
    mask = face_mask(256) > 0.5
    first = next(iter(methods.values()))

    # ---------------------------------------------------------------- faces and their W+ codes
    wanted = [w.strip() for w in args.sets.split(",") if w.strip()]
    unknown = set(wanted) - {"generated", "tuning", "held-out"}
    if unknown:
        raise SystemExit(f"unknown --sets {sorted(unknown)}: choose among generated, tuning, held-out")
    sets: dict[str, dict] = {}
    if "generated" in wanted:
        with torch.no_grad():
            codes, images = generated_faces(first, args.generated, 5_000_000)
            _, unrelated = generated_faces(first, args.generated, 6_000_000)
        sets["generated"] = {"names": [f"seed5e6+{i}" for i in range(len(codes))], "crops": images, "codes": codes, "steps": 0, "unrelated": unrelated}
    real = packaged_faces() if {"tuning", "held-out"} & set(wanted) else []
    for split in ("tuning", "held-out"):
        rows = [r for r in real if r[1] == split]
        if split not in wanted or not rows:
            continue
        crops = np.stack([r[3] for r in rows])
        t0 = time.perf_counter()
        fit = first.inversion_fit(args.steps, None, None, 0.0)
        codes = torch.cat([first.encode(to_tensor(c[None]), fit) for c in crops])
        sets[split] = {
            "names": [f"{r[0]}:{r[2]}" for r in rows],
            "crops": crops,
            "codes": codes,
            "steps": args.steps,
            "inversion_s_per_face": round((time.perf_counter() - t0) / len(rows), 2),
        }
        print(f"{split}: {len(rows)} faces inverted, {sets[split]['inversion_s_per_face']} s/face", flush=True)

    # ---------------------------------------------------------------- methods
    result: dict = {
        "command": command_line("benchmarks.wplus_methods", argv),
        "threads": args.threads,
        "steps": args.steps,
        "keys": args.keys,
        "methods": list(methods),
        "sets": {},
    }
    dl = judges["dlib"]
    for set_name, s in sets.items():
        crops, codes = s["crops"], s["codes"]
        x = to_tensor(crops)
        emb = {n: j.embed_aligned(crops) for n, j in judges.items()}
        pose0 = _pose(crops)
        per_set: dict = {"n": len(crops), "faces": s["names"]}
        if "inversion_s_per_face" in s:
            per_set["inversion_s_per_face"] = s["inversion_s_per_face"]
        if "unrelated" in s:
            per_set["chance_floor_dlib"] = _rate(dl.same_person(dl.embed_aligned(s["unrelated"]), emb["dlib"]))
        with torch.no_grad():
            recon = from_tensor(first.decode(codes))
        per_set["reconstruction"] = {
            "dlib_same": _rate(dl.same_person(dl.embed_aligned(recon), emb["dlib"])),
            "psnr_db_median": round(float(np.median(_psnr(recon, crops, mask))), 2),
        }
        for name, m in methods.items():
            t0 = time.perf_counter()
            outs = []
            for k in range(args.keys):
                keys = m.face_keys(m.run_secret(f"wplus-bench-key-{k + 1}"), len(crops))
                anon, carried = [], []
                for i in range(0, len(crops), 8):  # batches of 8 faces
                    with torch.no_grad():
                        u_anon, w_anon = m.keyed_codes(codes[i : i + 8], keys[i : i + 8])
                        anon.append(from_tensor(m.decode(m.drawn_code(x[i : i + 8], w_anon))))
                    # what a lossless save carries (zoo.carrier): u_anon and the anonymized W+ rows in 4-bit steps
                    rows = m.wplus.carried_rows(w_anon).numpy()
                    carried += [{"latent": u.numpy(), "code": quantize_code(r)} for u, r in zip(u_anon, rows)]
                outs.append((keys, np.concatenate(anon), carried))
            keys, anon, carried = outs[0]
            t_anon = (time.perf_counter() - t0) / (args.keys * len(crops))
            wrong = [k.wrong_key() for k in keys]
            recovered: dict[str, list[np.ndarray]] = {"carried": [], "pixels": [], "jpeg90": [], "wrong": []}
            t_rec = 0.0
            for i in range(0, len(crops), 8):
                y = to_tensor(anon[i : i + 8])
                y_jpeg = to_tensor(_jpeg(anon[i : i + 8], 90))
                kk, cc, ww = keys[i : i + 8], carried[i : i + 8], wrong[i : i + 8]
                t0 = time.perf_counter()
                with torch.no_grad(), m.run_scope():  # the recoveries of one saved face share its inversion
                    recovered["carried"].append(from_tensor(m.recover_faces(y, kk, refine_steps=s["steps"], carried=cc)))
                    t_rec += time.perf_counter() - t0
                    recovered["pixels"].append(from_tensor(m.recover_faces(y, kk, refine_steps=s["steps"])))
                    recovered["wrong"].append(from_tensor(m.recover_faces(y, ww, refine_steps=s["steps"], carried=cc)))
                with torch.no_grad(), m.run_scope():
                    recovered["jpeg90"].append(from_tensor(m.recover_faces(y_jpeg, kk, refine_steps=s["steps"])))
            rec = {k: np.concatenate(v) for k, v in recovered.items()}
            rec_emb = {k: dl.embed_aligned(v) for k, v in rec.items()}
            anon_emb = [dl.embed_aligned(o[1]) for o in outs]
            row: dict = {"anonymize_s_per_face": round(t_anon, 2), "recover_s_per_face": round(t_rec / len(crops), 2)}
            for n, j in judges.items():
                row[f"anonymized_same_{n}"] = _rate(j.same_person(j.embed_aligned(anon), emb[n]) if n != "dlib" else dl.same_person(anon_emb[0], emb[n]))
            # dlib, and the guard's recognizers (what settings are tuned with)
            for n, e in (("dlib", anon_emb), *((n, [judges[n].embed_aligned(o[1]) for o in outs]) for n in ("sface", "faceres"))):
                pairs = [judges[n].same_person(e[a], e[b]) for a in range(args.keys) for b in range(a + 1, args.keys)]
                row[f"keys_pairwise_same_{n}"] = _rate(np.concatenate(pairs))
            row["anonymized_detected_dlib"] = _rate([_dlib_finds_face(c) for c in anon])
            row["recovered_carried_same_dlib"] = _rate(dl.same_person(rec_emb["carried"], emb["dlib"]))
            row["recovered_carried_nearest_own"] = _rate(_nearest_is_own(dl, rec_emb["carried"], emb["dlib"]))
            row["recovered_pixels_same_dlib"] = _rate(dl.same_person(rec_emb["pixels"], emb["dlib"]))
            row["recovered_jpeg90_pixels_same_dlib"] = _rate(dl.same_person(rec_emb["jpeg90"], emb["dlib"]))
            row["wrong_key_same_dlib"] = _rate(dl.same_person(rec_emb["wrong"], emb["dlib"]))
            for n in ("sface", "faceres"):
                j = judges[n]
                row[f"wrong_key_same_{n}"] = _rate(j.same_person(j.embed_aligned(rec["wrong"]), emb[n]))
            row["recovered_carried_psnr_db_median"] = round(float(np.median(_psnr(rec["carried"], crops, mask))), 2)
            row["anonymized_psnr_db_median"] = round(float(np.median(_psnr(anon, crops, mask))), 2)
            change = np.abs(_pose(anon) - pose0)
            for a, angle in enumerate(("yaw", "pitch")):
                row[f"{angle}_change_deg_median"] = round(float(np.nanmedian(change[:, a])), 1)
                row[f"{angle}_change_deg_p90"] = round(float(np.nanpercentile(change[:, a], 90)), 1)
            per_set[name] = row
            print(set_name, name, {k: (v["rate"] if isinstance(v, dict) else v) for k, v in row.items()}, flush=True)
        result["sets"][set_name] = per_set
        write_results(args.out, result, _markdown(result, args))

    return 0


def _markdown(result: dict, args) -> list[str]:
    """The results file's tables: privacy, recovery, what stays."""

    def cell(r: dict) -> str:
        return rate_text(r, 2)

    lines = [
        "# The reversible methods on the FFHQ-grade backbone (W+ identity code)",
        "",
        f"`{result['command'].strip()}`, {args.threads} threads; generated faces drawn from their W+ exactly; real faces "
        f"inverted with the W+ encoder + {args.steps} refinement steps. {args.keys} keys per face.",
        "dlib judges at 0.6 (no setting uses it); SFace and FaceRes at the guard's thresholds. Rates k/n [95% Wilson].",
        "The methods themselves on aligned 256 px crops: no privacy guard, no compositing (the whole-photo numbers: wrong_keys.md, appearance.md).",
    ]
    methods = result["methods"]

    def section(title: str, header: list[str], cells) -> None:
        """One table: a row per face set and method, ``cells(row, per_set)`` after the set and method columns."""
        lines.extend(["", f"## {title}", "", "| faces | method | " + " | ".join(header) + " |", "|---" * (len(header) + 2) + "|"])
        for set_name, per in result["sets"].items():
            for name in methods:
                lines.append(f"| {set_name} ({per['n']}) | {name} | " + " | ".join(cells(per[name], per)) + " |")

    section(
        "Privacy",
        [
            "anonymized same (dlib)",
            "(SFace)",
            "(FaceRes)",
            "chance floor (dlib)",
            "keys pairwise same (dlib)",
            "(SFace)",
            "(FaceRes)",
            "wrong key same (dlib)",
            "(SFace)",
            "(FaceRes)",
        ],
        lambda r, per: [
            cell(r["anonymized_same_dlib"]),
            cell(r["anonymized_same_sface"]),
            cell(r["anonymized_same_faceres"]),
            cell(per["chance_floor_dlib"]) if "chance_floor_dlib" in per else "-",
            cell(r["keys_pairwise_same_dlib"]),
            *(cell(r[f"keys_pairwise_same_{n}"]) if f"keys_pairwise_same_{n}" in r else "-" for n in ("sface", "faceres")),
            cell(r["wrong_key_same_dlib"]),
            cell(r["wrong_key_same_sface"]),
            cell(r["wrong_key_same_faceres"]),
        ],
    )
    section(
        "Recovery with the right key",
        ["carried code: same (dlib)", "its own original nearest", "PSNR dB (median)", "pixels only: same", "JPEG q90 pixels: same", "s/face anon / recover"],
        lambda r, per: [
            cell(r["recovered_carried_same_dlib"]),
            cell(r["recovered_carried_nearest_own"]),
            str(r["recovered_carried_psnr_db_median"]),
            cell(r["recovered_pixels_same_dlib"]),
            cell(r["recovered_jpeg90_pixels_same_dlib"]),
            f"{r['anonymize_s_per_face']} / {r['recover_s_per_face']}",
        ],
    )
    section(
        "What stays (anonymized face against the original)",
        ["dlib finds the face", "yaw change deg, median (p90)", "pitch change deg, median (p90)", "PSNR dB in the face mask (median)"],
        lambda r, per: [
            cell(r["anonymized_detected_dlib"]),
            f"{r['yaw_change_deg_median']} ({r['yaw_change_deg_p90']})",
            f"{r['pitch_change_deg_median']} ({r['pitch_change_deg_p90']})",
            str(r["anonymized_psnr_db_median"]),
        ],
    )
    lines += [
        "",
        "Reconstruction (the backbone alone, identity unchanged): "
        + "; ".join(f"{k} {cell(v['reconstruction']['dlib_same'])} same person, {v['reconstruction']['psnr_db_median']} dB" for k, v in result["sets"].items()),
    ]
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
