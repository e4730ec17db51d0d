"""What the privacy guard does to wrong-key recovery: held-out generated faces, guard off and on.

    python -m benchmarks.guard_wrong_key [--methods personal,ifadit,dbaf,hford] [--n 200] [--threads 1]

Per method: the evaluator's held-out faces (``synthetic:N:1``, 256 px aligned crops), anonymized with
the evaluator's key ("evaluation key") with the privacy guard off and on, then recovered from the
anonymized crops (carried codes) with its wrong key ("a wrong key"). dlib (threshold 0.6) judges the
anonymized faces and the wrong-key recoveries against the originals; with the guard on, also per kept
key variant. Writes ``benchmarks/results/guard_wrong_key.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "results" / "guard_wrong_key"


def _images(results) -> np.ndarray:
    return np.stack([np.asarray(r.image.convert("RGB")) for r in results])


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default="personal,ifadit,dbaf,hford")
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    out_path = Path(args.out)
    import torch

    torch.set_num_threads(args.threads)
    from training.evaluate import load_eval_images, rate
    from zoo import load
    from zoo.judges import get_judge

    images, _ = load_eval_images(f"synthetic:{args.n}:1", 256)
    judge = get_judge("dlib")
    e_orig = judge.embed_aligned(images)
    out: dict = {"command": " ".join(["python -m benchmarks.guard_wrong_key", *(argv if argv is not None else sys.argv[1:])]), "faces": args.n, "methods": {}}
    md = [
        f"Command: `{out['command']}`; {args.n} held-out generated faces (seed 1), dlib at 0.6, value [95% Wilson interval].",
        "",
        "| method | guard | anonymized, same person | wrong-key recovery, same person | faces re-keyed |",
        "|---|---|---|---|---|",
    ]
    for name in [m for m in args.methods.split(",") if m]:
        m = load(name, device="cpu")
        rows = {}
        for guard in (False, True):
            anon = m.anonymize(list(images), key="evaluation key", aligned=True, privacy_guard=guard)
            wrong = _images(m.recover(list(_images(anon)), key="a wrong key", aligned=True))
            same_anon = judge.same_person(e_orig, judge.embed_aligned(_images(anon)))
            same_wrong = judge.same_person(e_orig, judge.embed_aligned(wrong))
            variants = np.array([(r.faces[0].guard or {}).get("variant", 0) for r in anon])
            row = {
                "anonymized_same_person": rate(same_anon, "anonymized faces dlib matches to the original"),
                "wrong_key_same_person": rate(same_wrong, "wrong-key recoveries dlib matches to the original"),
                "rekeyed": int((variants > 0).sum()),
            }
            if guard:
                row["by_variant"] = {
                    int(v): {
                        "faces": int((variants == v).sum()),
                        "anonymized_same_person": float(same_anon[variants == v].mean()),
                        "wrong_key_same_person": float(same_wrong[variants == v].mean()),
                    }
                    for v in np.unique(variants)
                }
            rows["on" if guard else "off"] = row
            fmt = lambda r: f"{r['value']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]"  # noqa: E731
            md.append(
                f"| `{name}` | {'on' if guard else 'off'} | {fmt(row['anonymized_same_person'])} | {fmt(row['wrong_key_same_person'])} | {row['rekeyed'] if guard else '-'} |"
            )
            print(md[-1], flush=True)
        out["methods"][name] = rows
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.with_suffix(".json").write_text(json.dumps(out, indent=1))
    out_path.with_suffix(".md").write_text("\n".join(md) + "\n")
    return out


if __name__ == "__main__":
    main()
