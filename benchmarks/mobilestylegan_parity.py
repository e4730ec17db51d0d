"""Our MobileStyleGAN port against the random-face wheel's own graph run by OpenVINO, on z's of our own.

    python -m benchmarks.mobilestylegan_parity --n 16

For each z (numpy ``default_rng(seed + i)``, standard normal [1,512]): w from both mapping networks, the 1024 px
image from both synthesis networks (OpenVINO at fp32 precision), no truncation. Reports the largest absolute
differences ([-1,1] units) and, after conversion to uint8 as ``python -m zoo generate`` writes it, the share of
pixels within 2 levels (goal >= 99.99%). Writes ``benchmarks/results/mobilestylegan_parity.{json,md}``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from benchmarks.report import command_line, write_results
from zoo.imageio import from_tensor
from zoo.nn.mobilestylegan import load_mobilestylegan, random_face_data_dir

OUT = Path(__file__).resolve().parent / "results" / "mobilestylegan_parity"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--seed", type=int, default=7_000_000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    import openvino as ov

    core, data = ov.Core(), random_face_data_dir()
    exact = {"INFERENCE_PRECISION_HINT": "f32"}
    mapping = core.compile_model(core.read_model(str(data / "MappingNetwork.xml")), "CPU", exact)
    synthesis = core.compile_model(core.read_model(str(data / "SynthesisNetwork.xml")), "CPU", exact)
    model = load_mobilestylegan()
    rows = []
    for i in range(args.n):
        z = np.random.default_rng(args.seed + i).standard_normal((1, 512)).astype(np.float32)
        w_ref = mapping(z)[0]
        img_ref = synthesis(w_ref)[0]
        with torch.inference_mode():
            w = model.mapping(torch.from_numpy(z))
            img = model.synthesis(w, 1024)
        ours_u8 = from_tensor(img)[0].astype(np.int16)
        ref_u8 = from_tensor(torch.from_numpy(img_ref))[0].astype(np.int16)
        levels = np.abs(ours_u8 - ref_u8)
        rows.append(
            {
                "seed": args.seed + i,
                "w_max_abs_diff": float(np.abs(w.numpy() - w_ref).max()),
                "image_max_abs_diff": float(np.abs(img.numpy() - img_ref).max()),
                "uint8_max_level_diff": int(levels.max()),
                "share_within_2_levels": float((levels <= 2).mean()),
            }
        )
        print(rows[-1], flush=True)
    share = [r["share_within_2_levels"] for r in rows]
    result = {
        "command": command_line("benchmarks.mobilestylegan_parity", argv),
        "n": args.n,
        "openvino": ov.__version__,
        "worst_image_max_abs_diff": max(r["image_max_abs_diff"] for r in rows),
        "worst_uint8_level_diff": max(r["uint8_max_level_diff"] for r in rows),
        "min_share_within_2_levels": min(share),
        "goal": "<= 2 uint8 levels on >= 99.99% of pixels",
        "rows": rows,
    }
    write_results(
        args.out,
        result,
        [
            "# MobileStyleGAN port vs the packaged OpenVINO graph",
            "",
            f"`{result['command'].strip()}` (OpenVINO {result['openvino']}, fp32): {args.n} z's, 1024 px, no truncation.",
            "",
            f"- largest |difference| of w: {max(r['w_max_abs_diff'] for r in rows):.2e}",
            f"- largest |difference| of the image ([-1,1] units): {result['worst_image_max_abs_diff']:.2e}",
            f"- largest uint8 difference: {result['worst_uint8_level_diff']} level(s); smallest share of pixels within 2 levels: "
            f"{100 * result['min_share_within_2_levels']:.4f}% (goal >= 99.99%)",
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
