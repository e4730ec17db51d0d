"""How far from the average face the W+ methods draw: the norm of the identity code, real faces against anonymized.

The W+ identity code u (:mod:`zoo.nn.wplus_identity`) is whitened: the generator's own faces have ``|u|`` about
sqrt(100), while a real face's inversion sits much nearer the average face. A keyed transform that keeps the norm
(``dbaf``/``hford``'s rotation, ``personal``'s hypersphere rotation) draws the anonymized face at the original's
distance from the average face; one that does not (``ifadit``'s flow, trained toward the N(0, I) prior) draws it
further out, where the generator's faces are exaggerated (deep lines, heavy features). A method's
``wplus.code_scale`` c multiplies the anonymized code (exactly undone by recovery from the carried code).

For each method: every real face of the split (:func:`benchmarks.reconstruct_real.packaged_faces`; the tuning faces give the
ratio, the held-out faces check it), FFHQ-aligned as the methods align it, inverted with the methods' default fit; ``|u|`` of the
inversion, ``|T(u)|`` of the keyed transform's output (one key per face, before c), the norm it is drawn at (``|c T(u)|``,
or ``wplus.code_norm`` where the method sets one), and the
ratio median ``|u|`` / median ``|T(u)|`` (the c that draws at the real faces' median norm). No recognizer or judge
is used.

    python -m benchmarks.code_norms --split tuning     # -> results/code_norms_tuning.{json,md}
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks.reconstruct_real import packaged_faces
from benchmarks.report import command_line, write_results

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("dbaf", "hford", "ifadit", "personal")


def spread(values: np.ndarray) -> dict[str, float]:
    """Median, 10th and 90th percentile, rounded."""
    return {k: round(float(np.percentile(values, q)), 3) for k, q in (("median", 50), ("p10", 10), ("p90", 90))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=("tuning", "held-out"), default="tuning")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch

    import zoo
    from zoo.imageio import to_tensor
    from zoo.keys import Secret

    if args.threads:
        torch.set_num_threads(args.threads)
    faces = [f for f in packaged_faces() if f[1] == args.split]
    names, crops = [f"{f[0]}:{f[2]}" for f in faces], np.stack([f[3] for f in faces])
    x = to_tensor(crops)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    result: dict = {"command": command_line("benchmarks.code_norms", argv), "split": args.split, "faces": len(names), "methods": {}}
    codes = None
    with torch.inference_mode():
        for name in methods:
            method = zoo.load(name).use_latent_space("wplus")
            if codes is None:  # every W+ method inverts with the same default fit: invert once
                fit = method.inversion_fit(20, None, None, 0.0)
                codes = torch.cat([method.encode(x[i : i + 4], fit) for i in range(0, len(x), 4)])
                result["fit"] = {"refine_steps": fit.refine_steps, "identity_refine": fit.identity_refine, "identity_check": fit.identity_check}
            u = method.identity_code(codes)
            keys = method.face_keys(Secret("benchmarks.code_norms"), len(names))
            scale = method.anonymized_code_scale
            carried = method.anonymized_code(u, keys)
            transformed, drawn = carried / scale, method.drawn_identity(carried)
            un, tn, dn = (t.norm(dim=1).double().numpy() for t in (u, transformed, drawn))
            result["methods"][name] = {
                "code_scale": scale,
                "real": spread(un),
                "transformed": spread(tn),
                "drawn": spread(dn),
                "real_over_transformed": round(float(np.median(un) / np.median(tn)), 3),
            }
            print(name, result["methods"][name], flush=True)
    out = args.out or RESULTS / f"code_norms_{args.split.replace('-', '_')}"
    md = [
        "# Identity-code norms: real faces and what the methods draw",
        "",
        f"`{result['command']}`",
        "",
        f"{result['faces']} real faces ({args.split}), FFHQ-aligned, inverted with the methods' default fit; one key per face. "
        "|u|: the inversion's identity code; |T(u)|: the keyed transform's output; drawn: |c T(u)| (c = `wplus.code_scale`), or `wplus.code_norm` where set. "
        "Median (10th-90th percentile). The generator's own faces: |u| about 10.",
        "",
        "| method | c | real abs(u) | abs(T(u)) | drawn | median abs(u) / median abs(T(u)) |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in result["methods"].items():
        cell = {k: f"{r[k]['median']} ({r[k]['p10']}-{r[k]['p90']})" for k in ("real", "transformed", "drawn")}
        md.append(f"| {name} | {r['code_scale']} | {cell['real']} | {cell['transformed']} | {cell['drawn']} | {r['real_over_transformed']} |")
    write_results(out, result, md)
    print(f"-> {out}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
