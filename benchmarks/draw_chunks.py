"""Seconds per face of the FFHQ-grade generator on a CPU when a batch's faces are drawn all at once or a few at a
time (:data:`zoo.nn.mobilestylegan.CPU_CHUNK`: the split :meth:`~zoo.nn.mobilestylegan.SynthesisNetwork.forward`
makes on a CPU when autograd records the draw).

    python -m benchmarks.draw_chunks                        # 2 threads; 6 faces; 1 and 6 at a time
    python -m benchmarks.draw_chunks --faces 2,6 --chunks 1,2,6 --repeat 5
    python -m benchmarks.draw_chunks --method dbaf --photo t1  # also a method's anonymization of a packaged photo

Per (faces, chunk): ``draft`` / ``256`` / ``512``, a forward pass under inference mode (the 256 px draft the
inversion fits with, the shown 256 px image, the 512 px image), and ``step``, one step of the default inversion
(:func:`zoo.inversion.refine_wplus` on the draft with the face-region and SFace identity terms: forward and
backward). With ``--method M --photo NAME`` (a packaged photo, :mod:`benchmarks.real_photos`), also the method's
whole anonymization of that photo at its defaults (detection, inversion, guard, compositing), once per chunk. The faces are the generator's own (seed 0; the cost does not depend on the picture). Median of
``--repeat`` timed runs after one warm-up; min and max beside it. Writes ``benchmarks/results/draw_chunks_cpu.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Callable

import torch

import zoo.nn.mobilestylegan as msg
from benchmarks.report import command_line, run_seconds, write_results
from zoo.inversion import DEFAULT_FACE_WEIGHT, DEFAULT_IDENTITY_WEIGHT, draw_fitted, refine_wplus

OUT = Path(__file__).resolve().parent / "results" / "draw_chunks_cpu"
KINDS = ("draft", "256", "512", "step")


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--faces", type=_ints, default=[6], help="faces in the batch, comma-separated")
    ap.add_argument("--chunks", type=_ints, default=[1, 6], help="faces drawn at once, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--method", default=None, help="a method to time on --photo at its defaults (once per chunk)")
    ap.add_argument("--photo", default="t1", help="the packaged photo for --method")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = msg.load_mobilestylegan(torch.device("cpu"))
    shipped = msg.CPU_CHUNK
    with torch.inference_mode():
        z = torch.randn(max(args.faces), msg.STYLE_DIM, generator=torch.Generator().manual_seed(0))
        styles = g.style(z, psi=0.7)
        targets = draw_fitted(g, styles).clamp(-1, 1)
    rows = []
    try:
        for n in args.faces:
            w = msg.as_wplus(styles[:n])
            for chunk in sorted({min(c, n) for c in args.chunks}):
                msg.CPU_CHUNK = chunk  # the split the inversion's draws make (autograd records them)
                parts = w.split(chunk)  # a forward pass alone is never split by the network: split here
                jobs: dict[str, Callable[[], object]] = {
                    "draft": lambda: torch.cat([g.synthesis(p, 256, draft=True) for p in parts]),
                    "256": lambda: torch.cat([g.synthesis(p, 256) for p in parts]),
                    "512": lambda: torch.cat([g.synthesis(p, 512) for p in parts]),
                    "step": lambda: refine_wplus(targets[:n], 1, generator=g, identity_weight=DEFAULT_IDENTITY_WEIGHT, face_weight=DEFAULT_FACE_WEIGHT),
                }
                for kind in KINDS:
                    if kind == "step":
                        times = run_seconds(jobs[kind], args.repeat)
                    else:
                        with torch.inference_mode():
                            times = run_seconds(jobs[kind], args.repeat)
                    per = [t / n for t in times]
                    rows.append(
                        {
                            "faces": n,
                            "chunk": chunk,
                            "kind": kind,
                            "seconds_per_face": round(statistics.median(per), 4),
                            "min": round(min(per), 4),
                            "max": round(max(per), 4),
                        }
                    )
                    print(rows[-1], flush=True)
        if args.method:
            from benchmarks.real_photos import photos
            from zoo import load

            rgb = photos([args.photo])[args.photo][0]
            method = load(args.method)
            for chunk in sorted(set(args.chunks)):
                msg.CPU_CHUNK = chunk
                t0 = time.perf_counter()
                result = method.anonymize(rgb, key="draw-chunks")
                rows.append(
                    {
                        "method": args.method,
                        "photo": args.photo,
                        "faces": len(result.faces),
                        "chunk": chunk,
                        "kind": "anonymize",
                        "seconds": round(time.perf_counter() - t0, 1),
                    }
                )
                print(rows[-1], flush=True)
    finally:
        msg.CPU_CHUNK = shipped
    result = {"command": command_line("benchmarks.draw_chunks", argv), "threads": args.threads, "repeat": args.repeat, "cpu_chunk": shipped, "rows": rows}
    lines = [
        "# The generator on a CPU: a batch's faces drawn all at once or a few at a time",
        "",
        f"`{result['command']}`, {args.threads} threads, median of {args.repeat} (min - max), seconds per face. `step`: one step"
        " of the default inversion (draft forward + backward, face-region and SFace identity terms; the step's own",
        f"overhead of starting a fit included). The shipped split: {shipped} face(s) at a time (`zoo.nn.mobilestylegan.CPU_CHUNK`).",
        "",
        "| faces | drawn at once | draft 256 px | 256 px | 512 px | inversion step |",
        "|---|---|---|---|---|---|",
    ]
    for n in args.faces:
        for chunk in sorted({min(c, n) for c in args.chunks}):
            cells = {
                r["kind"]: f"{r['seconds_per_face']} ({r['min']} - {r['max']})" for r in rows if r["faces"] == n and r["chunk"] == chunk and "photo" not in r
            }
            lines.append(f"| {n} | {chunk} | " + " | ".join(cells[k] for k in KINDS) + " |")
    for r in rows:
        if r["kind"] == "anonymize":
            lines.append(f"\n`{r['method']}` anonymizing `{r['photo']}` ({r['faces']} faces) at its defaults, {r['chunk']} drawn at once: {r['seconds']} s.")
    write_results(args.out, result, lines)
    return result


if __name__ == "__main__":
    main()
