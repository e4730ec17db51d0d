"""Which 256 px image to fit real faces with, and to draw the fitted codes with: the draft or the full image.

    python -m benchmarks.fit_renderer --photos t1,biden,astronaut,camera,grace_hopper,tom_hanks

Every face of the photos, FFHQ-aligned at 256 px, is inverted as the methods invert (:func:`zoo.inversion.invert_wplus`:
encoder, yaw turn, ``--steps`` Adam steps with SFace's identity term 1.0) three ways:

* ``draft fit, draft drawn``: what the zoo does (fit and draw with ``synthesis(w, 256, draft=True)``);
* ``draft fit, full drawn``: the same code drawn with the full 256 px image (block 5);
* ``full fit, full drawn``: the steps fitted against the full image.

Per face: PSNR of the drawn face against the aligned crop (dB, [-1,1] range 2), SFace cosine to the crop (the
identity the fit pulls toward, so not an independent judge), seconds per face. Tuning and held-out reported apart
(``benchmarks.real_photos``). Writes ``benchmarks/results/fit_renderer.{json,md}``.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.real_photos import packaged_photos
from benchmarks.report import command_line, write_results

OUT = Path(__file__).resolve().parent / "results" / "fit_renderer"
WAYS = ("draft fit, draft drawn", "draft fit, full drawn", "full fit, full drawn")


class _FullImageGenerator:
    """The generator with its draft flag ignored: every 256 px image is the full one (the inversion calls only
    ``synthesis`` and ``mean_wplus``)."""

    def __init__(self, generator):
        self.inner = generator

    def synthesis(self, wplus: torch.Tensor, size: int = 1024, draft: bool = False) -> torch.Tensor:
        return self.inner.synthesis(wplus, size)

    def mean_wplus(self, batch: int = 1) -> torch.Tensor:
        return self.inner.mean_wplus(batch)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", default="t1,biden")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from zoo.alignment import align_face
    from zoo.detection import detect_faces
    from zoo.imageio import to_tensor
    from zoo.inversion import invert_wplus
    from zoo.nn.mobilestylegan import load_mobilestylegan
    from zoo.nn.sface import load_sface

    g, sface = load_mobilestylegan(), load_sface()
    full = _FullImageGenerator(g)
    rows = []
    for name, split, rgb in packaged_photos(args.photos.split(",")):
        for i, face in enumerate(detect_faces(rgb)):
            crop = align_face(rgb, face.landmarks, 256).crop
            target = to_tensor(crop)
            with torch.no_grad():
                target_id = sface.embed_aligned(target)
            row: dict = {"photo": name, "split": split, "face": i}
            for fit_with, generator in (("draft", g), ("full", full)):
                t0 = time.perf_counter()
                code = invert_wplus(target, args.steps, generator=generator, identity_weight=1.0, face_weight=0.0).wplus  # type: ignore[arg-type]
                seconds = time.perf_counter() - t0
                draws = ("draft", "full") if fit_with == "draft" else ("full",)
                for draw in draws:
                    with torch.no_grad():
                        image = g.synthesis(code, 256, draft=draw == "draft").clamp(-1, 1)
                        row[f"{fit_with} fit, {draw} drawn"] = {
                            "psnr": round(10 * math.log10(4 / float(F.mse_loss(image, target))), 2),
                            "sface_cos": round(float((sface.embed_aligned(image) * target_id).sum()), 4),
                            "seconds": round(seconds, 2),
                        }
            rows.append(row)
            print(row, flush=True)
    summary = {}
    for split in ("tuning", "held-out"):
        part = [r for r in rows if r["split"] == split]
        if part:
            summary[split] = {
                way: {k: round(float(np.median([r[way][k] for r in part])), 3) for k in ("psnr", "sface_cos", "seconds")} | {"faces": len(part)} for way in WAYS
            }
    result = {"command": command_line("benchmarks.fit_renderer", argv), "steps": args.steps, "threads": args.threads, "summary": summary, "rows": rows}
    lines = [
        "# Fitting and drawing real faces: the 256 px draft or the full 256 px image",
        "",
        f"`{result['command'].strip()}`; {args.steps} steps with SFace's identity term, {args.threads} threads. Medians per split.",
        "",
        "| split | faces | way | PSNR dB | SFace cosine | s/face |",
        "|---|---|---|---|---|---|",
    ]
    for split, per in summary.items():
        for way, s in per.items():
            lines.append(f"| {split} | {s['faces']} | {way} | {s['psnr']} | {s['sface_cos']} | {s['seconds']} |")
    write_results(args.out, result, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
