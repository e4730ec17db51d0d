"""`personal`'s privacy level d on the FFHQ-grade backbone, tuning faces only: how far the drawn face is from the
person for the guard's two recognizers, what a wrong password draws, and the head pose kept (never dlib).

    python -m benchmarks.personal_wplus_levels [--levels 4,5,6,7] [--keys 3] [--out PATH]

Every face of the tuning photos (:func:`benchmarks.reconstruct_real.packaged_faces`) is FFHQ-aligned at 256 px and
inverted as the method inverts real faces (the W+ encoder + 20 refinement steps with SFace's identity term). Per
level d and key, the keyed identity code is drawn at d (eq. 13-14, rotation g(d)); the face a wrong password draws
is the anonymized code undone with another password (eq. 16-17), from the carried code. Per level, over faces x
keys: SFace and FaceRes cosine between the drawn face and the original crop (at the guard's SFace and FaceRes lines:
it blurs at SFace >= 0.363 or FaceRes >= 0.6168, and retries key variants until SFace <= 0.15 and FaceRes <= 0.5803;
MobileFace, the guard's third recognizer, is not measured here: ``zoo.guard``); the same for
the wrong-password face; |yaw change| by the face mesh (degrees); and the code-space round trip with the right
password (max abs error of the identity code). This chose ``personal``'s default level. Writes
``benchmarks/results/personal_wplus_levels.{json,md}``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from benchmarks.reconstruct_real import packaged_faces
from benchmarks.report import command_line, write_results
from zoo.face3d.landmarks import angle_difference
from zoo.methods.fit_controls import InversionFit

OUT = Path(__file__).resolve().parent / "results" / "personal_wplus_levels"
SFACE_BLUR, FACERES_BLUR = 0.363, 0.6168  # cosines at which the guard blurs (zoo.guard)
SFACE_TARGET, FACERES_TARGET = 0.15, 0.5803  # cosines the guard's key variants retry to stay under


def measure(faces: list, levels: list[int], keys: int) -> dict[int, dict[str, list[float]]]:
    """level -> per face-key lists: sface, faceres, wrong_sface, wrong_faceres, yaw, roundtrip."""
    from zoo import load
    from zoo.alignment import ffhq_template
    from zoo.face_mesh import mesh_head_pose
    from zoo.imageio import from_tensor, to_tensor
    from zoo.judges import get_judge
    from zoo.keys import Secret

    method, template = load("personal"), ffhq_template(256)
    sface, faceres = get_judge("sface"), get_judge("faceres")
    crops = np.stack([f[3] for f in faces])
    x = torch.cat([to_tensor(c, 256) for c in crops])
    ref_s, ref_f = sface.embed_aligned(crops), faceres.embed_aligned(crops)
    code = torch.cat([method.encode(x[i : i + 8], InversionFit(20, 1.0, 0.4)).detach() for i in range(0, len(x), 8)])
    u = method.identity_code(code)
    pose0 = np.array([mesh_head_pose(c, template) for c in crops])

    def cosines(drawn: torch.Tensor) -> tuple[list[float], list[float], list[np.ndarray]]:
        ims = from_tensor(drawn)
        ims = [np.asarray(i) for i in (ims if isinstance(ims, list) else list(ims))]
        arr = np.stack(ims)
        emb = sface.embed_aligned(arr)
        cs = (emb * ref_s).sum(1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(ref_s, axis=1))
        fs = 1.0 - faceres.distance(faceres.embed_aligned(arr), ref_f)
        return cs.tolist(), fs.tolist(), ims

    out: dict[int, dict[str, list[float]]] = {d: {k: [] for k in ("sface", "faceres", "wrong_sface", "wrong_faceres", "yaw", "roundtrip")} for d in levels}
    for k in range(keys):
        right = [Secret(f"personal-levels/{k}").derive("personal", i) for i in range(len(faces))]
        wrong = [Secret(f"personal-levels/wrong/{k}").derive("personal", i) for i in range(len(faces))]
        with torch.no_grad():
            for d in levels:
                u_anon = method.anonymized_code(u, right, level=d)
                code_anon = method.with_identity(code, u_anon, right)
                s, f, ims = cosines(method.decode(code_anon))
                pose = np.array([mesh_head_pose(im, template) for im in ims])
                u_wrong = method.recovered_code(u_anon, wrong, level=d)
                ws, wf, _ = cosines(method.decode(method.with_identity(code_anon, u_wrong, wrong, inverse=True)))
                back = method.recovered_code(u_anon, right, level=d)
                rec = out[d]
                rec["sface"] += s
                rec["faceres"] += f
                rec["wrong_sface"] += ws
                rec["wrong_faceres"] += wf
                rec["yaw"] += np.abs(angle_difference(pose[:, 0], pose0[:, 0])).tolist()
                rec["roundtrip"] += (back - u).abs().amax(1).tolist()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="4,5,6,7")
    ap.add_argument("--keys", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from zoo.methods.personal import privacy_angle

    faces = [f for f in packaged_faces() if f[1] == "tuning"]
    levels = [int(s) for s in args.levels.split(",")]
    per = measure(faces, levels, args.keys)
    result: dict = {
        "command": command_line("benchmarks.personal_wplus_levels", argv),
        "faces": len(faces),
        "keys": args.keys,
        "levels": {str(d): v for d, v in per.items()},
    }
    lines = [
        "# `personal`'s privacy level on the FFHQ-grade backbone (tuning faces; SFace, FaceRes and the face mesh, never dlib)",
        "",
        f"`{result['command']}`. {len(faces)} tuning faces x {args.keys} passwords per level. Cosines to the original crop "
        f"(the guard blurs at SFace >= {SFACE_BLUR} or FaceRes >= {FACERES_BLUR}; its key variants retry until SFace <= {SFACE_TARGET} "
        f"and FaceRes <= {FACERES_TARGET}). Wrong password: the anonymized code undone with another password. Yaw: |change|, face mesh, degrees.",
        "",
        "| d | g(d) | face-keys | SFace median | FaceRes median | past a blur line | within both targets | wrong password: SFace median | FaceRes median | past a blur line | yaw median | yaw 90th pct | round trip max err |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d, v in per.items():
        s, f, ws, wf, yaw = (np.array(v[k]) for k in ("sface", "faceres", "wrong_sface", "wrong_faceres", "yaw"))
        blur = int(((s >= SFACE_BLUR) | (f >= FACERES_BLUR)).sum())
        ok = int(((s <= SFACE_TARGET) & (f <= FACERES_TARGET)).sum())
        wblur = int(((ws >= SFACE_BLUR) | (wf >= FACERES_BLUR)).sum())
        lines.append(
            f"| {d} | {privacy_angle(d):.0f} deg | {len(s)} | {np.median(s):.3f} | {np.median(f):.3f} | {blur} | {ok} | {np.median(ws):.3f} | "
            f"{np.median(wf):.3f} | {wblur} | {np.nanmedian(yaw):.2f} | {np.nanquantile(yaw, 0.9):.2f} | {max(v['roundtrip']):.1e} |"
        )
        print(lines[-1], flush=True)
    write_results(Path(args.out) if args.out else OUT, result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
