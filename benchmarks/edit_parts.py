"""Which part of the keyed W+ edit draws a fringe over a bare forehead and loses the expression: each part of the edit
switched off in turn.

    python -m benchmarks.edit_parts [--methods ifadit,dbaf] [--photos t1,biden,...] [--keys 4] [--out PATH]

A reversible method's anonymized code is the original's W+ code with (:meth:`zoo.nn.wplus_identity.WPlusIdentity.with_code`)
its identity code u replaced by the keyed one, the deviations of slots 2-18 rotated with the key, the residual of the
identity slots' mean rotated with the key, and slots 0-1 moved with the code's change (the code's change skips its
mouth directions). Every face the pipeline's
detector finds in the photos is FFHQ-aligned at 256 px and fitted as the methods fit it at their
defaults (40 steps, face term 3), then drawn for each key with:

* ``fit only``: the fitted code itself, nothing edited (what the fit alone changes);
* ``full``: the edit as shipped;
* ``code change only``: u replaced, nothing rotated;
* ``rotations only``: u kept, the deviations and the residual rotated;
* ``no deviation rotation`` / ``no residual rotation`` / ``slots 0-1 kept``: the edit with that one part left out;
* ``mouth directions changed``: the edit with the code's change along the basis's mouth directions too
  (:attr:`zoo.nn.wplus_identity.WPlusIdentity.mouth_directions`, which the shipped edit skips).

For each drawn face (no compositing, no guard): :func:`zoo.compositing.forehead_hair` against the original crop, and
whether it is over :data:`zoo.compositing.FOREHEAD_HAIR_LIMIT` (a fringe); the change of the mouth's and the eyes'
opening (:func:`zoo.face_mesh.aligned_openings`, the 468-point face mesh; dlib is not used). Per method and split (tuning / held-out,
:mod:`benchmarks.real_photos`): face-keys over the limit with 95% Wilson intervals and the mean share; the median
absolute opening changes. Nothing is tuned here and no recognizer is used. Writes
``benchmarks/results/edit_parts.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from benchmarks.forehead_hair import DEFAULT_PHOTOS
from benchmarks.reconstruct_real import packaged_faces
from benchmarks.report import command_line, rate, rate_text, write_results
from zoo.face_mesh import aligned_openings

OUT = Path(__file__).resolve().parent / "results" / "edit_parts"
PARTS = (
    "fit only",
    "full",
    "code change only",
    "rotations only",
    "no deviation rotation",
    "no residual rotation",
    "slots 0-1 kept",
    "mouth directions changed",
)


def drawn_parts(method, code: torch.Tensor, u_drawn: torch.Tensor, keys) -> dict[str, torch.Tensor]:
    """part -> W+ ``[N,23,512]``: the keyed edit of ``code`` toward ``u_drawn`` with parts of it left out (:data:`PARTS`)."""
    ident = method.wplus.identity
    rot, res = method.wplus.rotations(keys, method.name)
    u = ident.code(code)
    return {
        "fit only": code,
        "full": ident.with_code(code, u_drawn, rot, res),
        "code change only": ident.with_code(code, u_drawn),
        "rotations only": ident.with_code(code, u, rot, res),
        "no deviation rotation": ident.with_code(code, u_drawn, None, res),
        "no residual rotation": ident.with_code(code, u_drawn, rot, None),
        "slots 0-1 kept": ident.with_code(code, u_drawn, rot, res, coarse=False),
        "mouth directions changed": ident.with_code(code, u_drawn, rot, res, mouth=False),
    }


def measure(method_name: str, faces: list, keys: int) -> dict[str, dict[str, list[list]]]:
    """measure ("hair", "mouth", "eyes") -> part -> per key, that measure of every face (the openings: absolute
    change against the original crop, None where the mesh saw no face in the original or in the drawn face)."""
    from zoo import load
    from zoo.compositing import forehead_hair
    from zoo.imageio import from_tensor, to_tensor
    from zoo.keys import Secret
    from zoo.methods.fit_controls import FACE_FIT_CONTROL, REFINE_CONTROL

    method = load(method_name)
    fit = method.inversion_fit(REFINE_CONTROL.default, None, None, FACE_FIT_CONTROL.default)  # the methods' default fit
    crops = [f[3] for f in faces]
    x = to_tensor(np.stack(crops), 256)
    with torch.no_grad():
        code = torch.cat([method.encode(x[i : i + 8], fit).detach() for i in range(0, len(x), 8)])
    before = [aligned_openings(c) for c in crops]
    out: dict[str, dict[str, list[list]]] = {m: {p: [] for p in PARTS} for m in ("hair", "mouth", "eyes")}
    for k in range(keys):
        # key label of the benchmark's first name, kept so that its fringe numbers reproduce
        face_keys = [Secret(f"fringe-sources/{k}").derive(method_name, i) for i in range(len(crops))]
        with torch.no_grad():
            u_drawn = method.drawn_identity(method.anonymized_code(method.identity_code(code), face_keys))
            for part, wplus in drawn_parts(method, code, u_drawn, face_keys).items():
                drawn = from_tensor(method.decode(method.drawn_code(x, wplus)))
                out["hair"][part].append([forehead_hair(crops[i], drawn[i]) for i in range(len(crops))])
                after = [aligned_openings(im) for im in drawn]
                for j, what in enumerate(("mouth", "eyes")):
                    out[what][part].append([None if a is None or b is None else round(abs(b[j] - a[j]), 4) for a, b in zip(before, after)])
        print(method_name, "key", k, "done", flush=True)
    return out


def split_rows(values: dict, faces: list, split: str) -> dict[str, dict]:
    """part -> the results file's row for one split: fringes k/n with the mean share, median opening changes."""
    from zoo.compositing import FOREHEAD_HAIR_LIMIT

    idx = {i for i, f in enumerate(faces) if f[1] == split}
    rows = {}
    for part in PARTS:
        v = np.array([[per_key[i] for i in sorted(idx)] for per_key in values["hair"][part]])
        change = {what: [x for per_key in values[what][part] for i, x in enumerate(per_key) if i in idx and x is not None] for what in ("mouth", "eyes")}
        med = {f"{what}_median": round(float(np.median(c)), 3) if c else None for what, c in change.items()}
        rows[part] = {**rate(int((v > FOREHEAD_HAIR_LIMIT).sum()), int(v.size)), "mean": round(float(v.mean()), 3), **med}
    return rows


def write_report(result: dict, out: Path) -> None:
    """The results JSON and its markdown tables (fringes; opening changes) from ``result``."""
    header = ["| method | split | " + " | ".join(PARTS) + " |", "|---|---|" + "---|" * len(PARTS)]
    hair_lines, open_lines = list(header), list(header)
    for name, per in result["methods"].items():
        for split, rows in per["rows"].items():
            hair_lines.append(f"| {name} | {split} | " + " | ".join(f"{rate_text(rows[p])}; {rows[p]['mean']:.3f}" for p in PARTS) + " |")
            open_lines.append(f"| {name} | {split} | " + " | ".join(f"{rows[p]['mouth_median']} / {rows[p]['eyes_median']}" for p in PARTS) + " |")
    lines = [
        "# Which part of the keyed W+ edit draws a fringe over a bare forehead and loses the expression",
        "",
        f"`{result['command']}`. Faces fitted at the methods' defaults (40 steps, face term 3) and drawn for {result['keys']} keys "
        "with parts of the edit left out; no compositing, no guard; dlib is not used.",
        "",
        f"Fringes: `forehead_hair` over {result['limit']} against the original crop. Face-keys k/n [95% Wilson]; mean share of the forehead band.",
        "",
        *hair_lines,
        "",
        "Expression: median absolute change of the inner-lip gap / the eye opening, in outer-eye-corner distances (face mesh).",
        "",
        *open_lines,
    ]
    write_results(out, result, lines)


def main(argv: list[str] | None = None) -> int:
    from zoo.compositing import FOREHEAD_HAIR_LIMIT

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="ifadit,dbaf")
    ap.add_argument("--photos", default=DEFAULT_PHOTOS, help="names from benchmarks.real_photos.REAL_PHOTOS")
    ap.add_argument("--keys", type=int, default=4)
    ap.add_argument("--add", action="store_true", help="keep the results file's methods not run now (same photos and keys)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else OUT
    torch.set_num_threads(1)
    faces = packaged_faces(256, args.photos.split(","))
    splits = sorted({f[1] for f in faces}, key=lambda s: s != "tuning")
    result: dict = {"command": command_line("benchmarks.edit_parts", argv), "keys": args.keys, "limit": FOREHEAD_HAIR_LIMIT, "methods": {}}
    result["faces"] = {s: sum(f[1] == s for f in faces) for s in splits}
    if args.add and out.with_suffix(".json").is_file():
        before = json.loads(out.with_suffix(".json").read_text())
        result["methods"] = {m: per for m, per in before["methods"].items() if m not in args.methods.split(",")}
        result["command"] = before["command"] + " ; " + result["command"]
    for name in args.methods.split(","):
        values = measure(name, faces, args.keys)
        rows = {split: split_rows(values, faces, split) for split in splits}
        result["methods"][name] = {"rows": rows, "values": values, "faces": [[f[0], f[1]] for f in faces]}
    write_report(result, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
