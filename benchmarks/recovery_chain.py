"""Where a keyed recovery loses the identity: the recovery chain of a checkpoint, link by link.

    python -m benchmarks.recovery_chain --method dbaf   --local-dir outputs/dbaf/stage2/model   [--faces 32] [--out FILE]
    python -m benchmarks.recovery_chain --method ifadit --local-dir outputs/ifadit/stage2/model [--faces 32] [--out FILE]

Recovery in the zoo starts from the anonymized image a user has, never from a hidden latent. It is a
chain, and the evaluator only sees its end (the judge's cosine of the recovered face to the original).
This script measures every link on held-out synthetic faces (the evaluator's ``synthetic:N:777``), with
the anonymized image passed through uint8 like a saved file:

* **DBAF / HFORD** (``C`` = e4e W+ code, ``A``/``I`` = the IDM/CID split, ``P`` = key latents):
  ``code_change`` |C_an - C| / |C| (how far the keyed edit moves the code), ``reencoding_error``
  |E(Y) - C_an| / |C_an| (does the encoder find the code the image was drawn from),
  ``attribute_split_drift`` |A(C_an) - A| / |A| (does the split of the anonymized code give back the
  original attributes), ``edit_inverse_error`` |edit(I_an, P) - I| / |I| with the exact A (the keyed
  edit undoing itself) and ``edit_wrong_key_error`` (the same with a wrong key). Images:
  recovered from the exact anonymized code, and with the exact split.
* **iFADIT** (cosines in the method's own identity space): ``flow_inverse_right`` / ``_wrong``
  (T^-1(z_anon, k) vs z; 1 for the right key by construction), ``anonymized_latent`` cos(z_anon, z),
  ``realised`` cos(E_ID(Y), z_anon) (does the generator draw the identity it was given),
  ``icl_estimate`` cos(C(E_ID(Y)), z_anon), ``latent_recovery_right`` / ``_wrong`` cos(T^-1(C(E_ID(Y)), k), z).
  Image: recovered from the exact z_anon (what a perfect ICL would give).

Every image row is scored by the SFace judge (cosine to the original, N faces). Writes JSON (and a
Markdown table next to it) with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from zoo import imageio, losses  # noqa: E402
from zoo.keys import KeyMaterial, Secret  # noqa: E402

__all__ = ["as_saved_file", "relative_error", "stylegan_chain", "ifadit_chain", "judge_rows", "main"]


def as_saved_file(x: torch.Tensor) -> torch.Tensor:
    """[N,3,R,R] in [-1,1] -> the same images after a round trip through uint8 (what a user's file holds)."""
    return imageio.to_tensor(imageio.from_tensor(x.clamp(-1, 1))).to(x.device, x.dtype)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean over rows of |a - b| / |b| (norms over every axis but the first)."""
    num = (a - b).flatten(1).norm(dim=1)
    den = b.flatten(1).norm(dim=1).clamp_min(1e-12)
    return float((num / den).mean())


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(losses.cosine_similarity(a, b).mean())


@torch.no_grad()
def stylegan_chain(method, x: torch.Tensor, keys: Sequence[KeyMaterial], wrong_keys: Sequence[KeyMaterial]) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """DBAF / HFORD chain on aligned faces ``x`` [N,3,R,R] in [-1,1] -> (link metrics, images in [-1,1])."""
    m = method
    k, kw = m.key_latents(keys), m.key_latents(wrong_keys)
    p = m.decompose(x)
    c_an = m.edit(p, k)  # C_an = A + edit([I, P])
    y = as_saved_file(m.synthesize(c_an, p["maps"]))  # = anonymize_faces(x, keys), saved
    q = m.decompose(y)  # recovery re-encodes the anonymized image
    split_attr, split_ident = m.disentangler.split(c_an)
    i_an = c_an - p["attr"]
    i_back, i_wrong = m.editor(i_an, k), m.editor(i_an, kw)
    metrics = {
        "code_change": relative_error(c_an, p["codes"]),
        "reencoding_error": relative_error(q["codes"], c_an),
        "attribute_split_drift": relative_error(split_attr, p["attr"]),
        "edit_inverse_error": relative_error(i_back, p["identity"]),
        "edit_wrong_key_error": relative_error(i_wrong, p["identity"]),
    }
    exact = {"attr": split_attr, "identity": split_ident}
    images = {
        "reconstruction": m.synthesize(p["codes"], p["maps"]),
        "anonymized": y,
        "recovered": m.synthesize(m.edit(q, k), q["maps"]),
        "wrong_key": m.synthesize(m.edit(q, kw), q["maps"]),
        "recovered_from_exact_code": m.synthesize(m.edit(exact, k), q["maps"]),
        "recovered_with_exact_split": m.synthesize(p["attr"] + i_back, p["maps"]),
    }
    return metrics, {name: img.clamp(-1, 1) for name, img in images.items()}


@torch.no_grad()
def ifadit_chain(method, x: torch.Tensor, keys: Sequence[KeyMaterial], wrong_keys: Sequence[KeyMaterial]) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """iFADIT chain on aligned faces ``x`` [N,3,R,R] in [-1,1] -> (link metrics, images in [-1,1])."""
    m = method
    k1, k2 = m.key_vectors(keys), m.key_vectors(wrong_keys)
    z, a = m.identity(x), m.attributes(x)
    z_an = m.transform(z, k1)
    y = as_saved_file(m.refine(m.synthesize(z_an, a), x))  # = anonymize_faces(x, keys), saved
    e_y = m.identity(y)
    z_hat = m.components["icl"](e_y)
    a_y = m.attributes(y)
    z_right, z_wrong = m.inverse_transform(z_hat, k1), m.inverse_transform(z_hat, k2)
    metrics = {
        "flow_inverse_right": _cos(m.inverse_transform(z_an, k1), z),
        "flow_inverse_wrong": _cos(m.inverse_transform(z_an, k2), z),
        "anonymized_latent": _cos(z_an, z),
        "realised": _cos(e_y, z_an),
        "icl_estimate": _cos(z_hat, z_an),
        "latent_recovery_right": _cos(z_right, z),
        "latent_recovery_wrong": _cos(z_wrong, z),
    }
    images = {
        "reconstruction": m.refine(m.reconstruct(x), x),
        "anonymized": y,
        "recovered": m.refine(m.synthesize(z_right, a_y), y),
        "wrong_key": m.refine(m.synthesize(z_wrong, a_y), y),
        "recovered_from_exact_latent": m.refine(m.synthesize(m.inverse_transform(z_an, k1), a_y), y),
    }
    return metrics, {name: img.clamp(-1, 1) for name, img in images.items()}


CHAINS = {"dbaf": stylegan_chain, "hford": stylegan_chain, "ifadit": ifadit_chain}


def judge_rows(judge, originals: np.ndarray, images: dict[str, torch.Tensor], size: int = 256) -> dict[str, dict[str, float]]:
    """Judge cosine of every image row to ``originals`` (uint8 [N,size,size,3]): mean, std, match rate."""
    e0 = judge.embed_aligned(originals)
    rows = {}
    for name, img in images.items():
        out = np.stack([imageio.resize_to(o, (size, size)) for o in imageio.from_tensor(img)])
        c = np.asarray(judge.score(e0, judge.embed_aligned(out)), dtype=np.float64)
        rows[name] = {"cosine": float(c.mean()), "std": float(c.std()), "match_rate": float(np.mean(c >= judge.threshold)), "n": int(len(c))}
    return rows


def run(method_name: str, local_dir: str, faces: int = 32, key: str = "evaluation key", wrong_key: str = "another key", batch: int = 8) -> dict[str, Any]:
    from training.evaluate import load_eval_images
    from zoo import load
    from zoo.judges import get_judge

    if method_name not in CHAINS:
        raise ValueError(f"recovery chain is defined for {sorted(CHAINS)}, not {method_name!r}")
    m = load(method_name, local_dir=local_dir, device="cpu")
    for comp in m.components.values():
        comp.eval()
    crops, _ = load_eval_images(f"synthetic:{faces}:777", 256)
    x = imageio.to_tensor(np.stack([imageio.resize_square(c, m.resolution) for c in crops]), m.resolution)
    ks, kw = m.face_keys(Secret(key), len(x)), m.face_keys(Secret(wrong_key), len(x))
    chain = CHAINS[method_name]
    sums: dict[str, float] = {}
    parts: dict[str, list[torch.Tensor]] = {}
    for i in range(0, len(x), batch):
        metrics, images = chain(m, x[i : i + batch], ks[i : i + batch], kw[i : i + batch])
        for name, v in metrics.items():
            sums[name] = sums.get(name, 0.0) + v * len(x[i : i + batch]) / len(x)
        for name, img in images.items():
            parts.setdefault(name, []).append(img)
    judge = get_judge("sface")
    rows = judge_rows(judge, crops, {n: torch.cat(v) for n, v in parts.items()})
    return {
        "method": method_name,
        "checkpoint": local_dir,
        "faces": f"synthetic:{faces}:777 at {m.resolution} px",
        "judge": f"sface (cosine, threshold {judge.threshold})",
        "links": sums,
        "images": rows,
        "command": "python -m benchmarks.recovery_chain " + " ".join(sys.argv[1:]),
    }


def to_markdown(result: dict[str, Any]) -> str:
    lines = [f"## Recovery chain: {result['method']} ({result['checkpoint']})", "", f"Faces: {result['faces']}. Command: `{result['command']}`.", ""]
    lines += ["| link | value |", "|---|---|"] + [f"| {k} | {v:.3f} |" for k, v in result["links"].items()]
    lines += ["", f"| image row | {result['judge']} cosine to original | match rate |", "|---|---|---|"]
    lines += [f"| {k} | {v['cosine']:.3f} +- {v['std']:.3f} | {v['match_rate']:.3f} (n={v['n']}) |" for k, v in result["images"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--method", required=True, choices=sorted(CHAINS))
    p.add_argument("--local-dir", required=True)
    p.add_argument("--faces", type=int, default=32)
    p.add_argument("--out", help="JSON file to write (a .md table is written next to it)")
    args = p.parse_args(argv)
    result = run(args.method, args.local_dir, args.faces)
    md = to_markdown(result)
    print(md)
    if args.out:
        out = Path(args.out)
        imageio.write_text_atomic(json.dumps(result, indent=2) + "\n", out)
        imageio.write_text_atomic(md, out.with_suffix(".md"))
    return result


if __name__ == "__main__":
    main()
