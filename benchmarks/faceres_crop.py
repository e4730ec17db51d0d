"""Where FaceRes expects the face: the package's own face mesh run on FFHQ-aligned faces, the box ``human`` cuts.

``human`` (the library the recognizer ships for) boxes a face by the bounding box of its 468 face-mesh points,
enlarged 1.5x about its centre, rotated upright, cut to 192 px and resized to 224 px for FaceRes
(``src/face/facemesh.ts``, ``faceres.ts``). The zoo aligns faces by 5 landmarks into the FFHQ frame, so this script
measures that box in the FFHQ frame: it runs ``facemesh.json`` from the same tarball through TensorFlow.js (``.node/``,
installed by setup) on 24 generated faces (psi 0.7, 256 px; FFHQ-aligned by construction) and the 6 faces of the
tuning photo; the mesh is taken twice, the second time on the box the first gave (as ``human`` tracks a face).
Result (box in units of the crop side): ``results/faceres_crop.{json,md}``; ``zoo.nn.faceres.FACERES_BOX`` is it,
with x centred on the face's axis of symmetry.

    python -m benchmarks.faceres_crop
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import cv2
import numpy as np

from benchmarks.report import command_line, write_results

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent / "results" / "faceres_crop"


def face_mesh(crops: np.ndarray, boxes: np.ndarray, tmp: Path) -> np.ndarray:
    """468 mesh points ``[N,468,2]`` in crop pixels, the mesh run on each crop's box (x0, y0, x1, y1) at 192 px."""
    from zoo.nn.faceres import faceres_source_dir

    inputs = []
    for c, (x0, y0, x1, y1) in zip(crops, boxes):
        m = np.array([[192 / (x1 - x0), 0, -x0 * 192 / (x1 - x0)], [0, 192 / (y1 - y0), -y0 * 192 / (y1 - y0)]])
        inputs.append(cv2.warpAffine(c, m, (192, 192), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101))
    (np.stack(inputs).astype("<f4") / 255).tofile(tmp / "in.f32")
    subprocess.run(
        [
            "node",
            str(ROOT / "tools" / "tfjs_reference.mjs"),
            str(faceres_source_dir() / "models" / "facemesh.json"),
            str(tmp / "in.f32"),
            f"{len(crops)},192,192,3",
            str(tmp / "mesh"),
            "Identity_2",
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    pts = np.fromfile(tmp / "mesh.0.f32", "<f4").reshape(len(crops), 468, 3)[..., :2]
    scale = (boxes[:, 2:] - boxes[:, :2]) / 192
    return pts * scale[:, None] + boxes[:, None, :2]


def main(argv: list[str] | None = None) -> int:
    import torch

    from benchmarks.real_photos import package_file, read_image
    from zoo.alignment import align_face
    from zoo.detection import detect_faces
    from zoo.nn.mobilestylegan import load_mobilestylegan

    g = load_mobilestylegan()
    with torch.no_grad():
        z = torch.from_numpy(np.random.default_rng(7).standard_normal((24, 512)).astype(np.float32))
        img = g.synthesis(g.truncate(g.mapping(z), 0.7), size=256)
    sets = {"generated": ((img.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()}
    t1 = read_image(package_file("insightface", "data", "images", "t1.jpg"))
    sets["t1 (tuning photo)"] = np.stack([align_face(t1, f.landmarks, 256).crop for f in detect_faces(t1)])
    result = {"command": command_line("benchmarks.faceres_crop", argv), "sets": {}}
    all_boxes = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, crops in sets.items():
            s = crops.shape[1]
            pts = face_mesh(crops, np.tile([0.0, 0.0, s, s], (len(crops), 1)), Path(tmp))
            lo, hi = pts.min(1), pts.max(1)
            ctr, half = (lo + hi) / 2, (hi - lo).max(1, keepdims=True) * 0.75  # human: enlarge 1.5x, squarify to track
            pts = face_mesh(crops, np.concatenate([ctr - half, ctr + half], 1), Path(tmp))
            bbox = np.concatenate([pts.min(1), pts.max(1)], 1) / s
            all_boxes.append(bbox)
            result["sets"][name] = {"faces": len(crops), "mesh_bbox_mean": bbox.mean(0).round(4).tolist(), "mesh_bbox_sd": bbox.std(0).round(4).tolist()}
    bbox = np.concatenate(all_boxes).mean(0)
    ctr, size = (bbox[:2] + bbox[2:]) / 2, bbox[2:] - bbox[:2]
    box = [0.5 - 0.75 * size[0], ctr[1] - 0.75 * size[1], 0.5 + 0.75 * size[0], ctr[1] + 0.75 * size[1]]
    result.update(
        {"faces": int(sum(len(c) for c in sets.values())), "mesh_bbox_mean": bbox.round(4).tolist(), "faceres_box": [round(float(v), 3) for v in box]}
    )
    lines = ["# FaceRes crop in the FFHQ frame", "", f"`{result['command']}`", "", "| faces | n | mesh bbox mean (x0, y0, x1, y1) | sd |", "|---|---|---|---|"]
    for name, e in result["sets"].items():
        lines.append(f"| {name} | {e['faces']} | {e['mesh_bbox_mean']} | {e['mesh_bbox_sd']} |")
    lines += [
        "",
        f"All {result['faces']} faces: mesh bbox {result['mesh_bbox_mean']}; enlarged 1.5x about its centre, x centred "
        f"on 0.5: **{result['faceres_box']}** (units of the FFHQ crop side).",
    ]
    write_results(OUT, result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
