"""Which W+ slots' deviations the key rotates: identity left (SFace) and head pose kept (face mesh), tuning faces only.

    python -m benchmarks.deviation_slots [--methods dbaf,personal,ifadit] [--starts 4,3,2] [--keys 3] [--out PATH]

Every face of the tuning photos (:data:`benchmarks.real_photos.REAL_PHOTOS`) is FFHQ-aligned at 256 px and inverted
as the methods invert real faces (the W+ encoder + 20 refinement steps with SFace's identity term); each method's
keyed identity code is then written into the code with the deviations of slots ``start``..18 rotated with the key
(:meth:`zoo.nn.wplus_identity.WPlusIdentity.with_code`), for each ``start``. Per setting, over faces x keys: SFace's
cosine between the drawn face and the original crop (the guard's recognizer; at or above 0.363, its threshold, the
guard would blur), and the change of yaw by the face mesh's pose (:func:`zoo.face_mesh.mesh_head_pose`). dlib, the
judge of every published number, is not used: this chose :data:`zoo.nn.wplus_identity.DEVIATION_SLOTS`. Writes
``benchmarks/results/deviation_slots.{json,md}``.
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

OUT = Path(__file__).resolve().parent / "results" / "deviation_slots"
#: SFace cosine at its published threshold: a face at or above it is blurred by the guard (zoo.guard)
SFACE_LINE = 0.363


def measure(method_name: str, faces: list, starts: list[int], keys: int) -> dict[int, dict[str, list[float]]]:
    """start -> {"cos": [...], "yaw": [...]} over faces x keys for one method."""
    from zoo import load
    from zoo.alignment import ffhq_template
    from zoo.face_mesh import mesh_head_pose
    from zoo.imageio import from_tensor, to_tensor
    from zoo.keys import Secret
    from zoo.nn.sface import load_sface

    method, sface, template = load(method_name), load_sface(), ffhq_template(256)
    x = torch.cat([to_tensor(f[3], 256) for f in faces])
    with torch.no_grad():
        original = sface.embed_aligned(x)
    code = torch.cat([method.encode(x[i : i + 8], InversionFit(20, 1.0, 0.4)).detach() for i in range(0, len(x), 8)])
    pose0 = np.array([mesh_head_pose(f[3], template) for f in faces])
    out: dict[int, dict[str, list[float]]] = {s: {"cos": [], "yaw": []} for s in starts}
    for k in range(keys):
        face_keys = [Secret(f"deviation-slots/{k}").derive(method_name, i) for i in range(len(faces))]
        with torch.no_grad():
            u_anon = method.anonymized_code(method.identity_code(code), face_keys)
            for start in starts:
                drawn = method.decode(method.with_identity(code, method.drawn_identity(u_anon), face_keys, deviation_slots=tuple(range(start, 19))))
                pose = np.array([mesh_head_pose(im, template) for im in from_tensor(drawn)])
                out[start]["cos"] += (sface.embed_aligned(drawn) * original).sum(1).tolist()
                out[start]["yaw"] += np.abs(angle_difference(pose[:, 0], pose0[:, 0])).tolist()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="dbaf,personal,ifadit")
    ap.add_argument("--starts", default="4,3,2", help="first rotated slot of each setting")
    ap.add_argument("--keys", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    faces = [f for f in packaged_faces() if f[1] == "tuning"]
    starts = [int(s) for s in args.starts.split(",")]
    result: dict = {"command": command_line("benchmarks.deviation_slots", argv), "faces": len(faces), "keys": args.keys, "methods": {}}
    lines = [
        "# Which W+ slots' deviations the key rotates (tuning faces; SFace and the face mesh, never dlib)",
        "",
        f"`{result['command']}`. {len(faces)} tuning faces x {args.keys} keys per method. SFace cosine to the original crop "
        f"(>= {SFACE_LINE}: the guard would blur) and |yaw change| by the face mesh, degrees.",
        "",
        "| method | rotated slots | face-keys | SFace cos median | at or above the blur line | yaw change median | 90th percentile |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in args.methods.split(","):
        per = measure(name, faces, starts, args.keys)
        result["methods"][name] = {str(s): v for s, v in per.items()}
        for s, v in per.items():
            cos, yaw = np.array(v["cos"]), np.array(v["yaw"])
            lines.append(
                f"| {name} | {s}-18 | {len(cos)} | {np.median(cos):.3f} | {int((cos >= SFACE_LINE).sum())} | {np.nanmedian(yaw):.2f} | {np.nanquantile(yaw, 0.9):.2f} |"
            )
        print(lines[-len(per) :], flush=True)
    write_results(Path(args.out) if args.out else OUT, result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
