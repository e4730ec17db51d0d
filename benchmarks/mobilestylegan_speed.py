"""Seconds per face of the FFHQ-grade generator (zoo.nn.mobilestylegan) on this machine.

    python -m benchmarks.mobilestylegan_speed                      # 2 threads, batch 1 and 8, every size and path
    python -m benchmarks.mobilestylegan_speed --sizes 256 --paths eager,openvino --repeat 3

Per output size (256, 512, 1024; ``256d``: the 256 px draft that the inversion's steps draw) and batch: ``forward`` (synthesis of a W+ [B,23,512] under inference mode) and
``forward+backward`` (the gradient with respect to W+ of the image's mean square, what an inversion step costs).
Paths: ``eager`` (PyTorch as written), ``channels_last`` (the activations in NHWC), ``compile``
(``torch.compile``; forward only), ``openvino`` (our port converted by ``openvino.convert_model`` with a W+ input;
forward only; needs the ``openvino`` test extra). Every path also reports its largest absolute difference from
eager ([-1,1] units). Median of ``--repeat`` timed runs after a warm-up of every size and one of each path; min and max beside it. Writes
``benchmarks/results/mobilestylegan_speed_cpu.{json,md}``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

import torch

from benchmarks.report import command_line, write_results
from zoo.nn.mobilestylegan import NUM_SLOTS, load_mobilestylegan

OUT = Path(__file__).resolve().parent / "results" / "mobilestylegan_speed_cpu"
GOALS = {"forward_256": 0.25, "forward_backward_256": 0.8}


def _time(fn: Callable[[], torch.Tensor], repeat: int) -> tuple[list[float], torch.Tensor]:
    out = fn()  # warm-up (and compilation)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


def _forward_path(model, path: str, size: int, wplus: torch.Tensor, draft: bool = False) -> Callable[[], torch.Tensor]:
    synth = model.synthesis
    if path == "eager":
        return lambda: _no_grad(lambda: synth(wplus, size, draft=draft))
    if path == "channels_last":
        cl = _channels_last_copy(model).synthesis
        return lambda: _no_grad(lambda: cl(wplus, size, draft=draft).contiguous())
    if path == "compile":
        fn = torch.compile(lambda w: synth(w, size, draft=draft))
        return lambda: _no_grad(lambda: fn(wplus))
    if path == "openvino":
        import openvino as ov

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.synthesis = synth

            def forward(self, w):
                return self.synthesis(w, size, draft=draft)

        # traced without the sanity check: the cached Haar mixing matrix is a constant the checker reads as a change
        traced = torch.jit.trace(Wrapped().eval(), wplus, check_trace=False)
        compiled = ov.Core().compile_model(ov.convert_model(traced, example_input=wplus), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        return lambda: torch.from_numpy(compiled(wplus.numpy())[0])
    raise ValueError(f"unknown path {path!r}")


def _no_grad(fn: Callable[[], torch.Tensor]) -> torch.Tensor:
    with torch.inference_mode():
        return fn()


_CL: dict[int, object] = {}


def _channels_last_copy(model):
    import copy

    if id(model) not in _CL:
        _CL[id(model)] = copy.deepcopy(model).to(memory_format=torch.channels_last)
    return _CL[id(model)]


def _backward_fn(model, path: str, size: int, wplus: torch.Tensor, draft: bool = False) -> Callable[[], torch.Tensor]:
    synth = (model if path == "eager" else _channels_last_copy(model)).synthesis

    def step() -> torch.Tensor:
        w = wplus.clone().requires_grad_(True)
        synth(w, size, draft=draft).square().mean().backward()
        return w.grad

    return step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batches", default="1,8")
    p.add_argument("--sizes", default="256,256d,512,1024", help="output sizes; 256d: the 256 px draft")
    p.add_argument("--paths", default="eager,channels_last,compile,openvino")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_mobilestylegan()
    specs = [(int(spec.rstrip("d")), spec.endswith("d")) for spec in args.sizes.split(",")]  # (size, draft)
    # the first size a process times runs up to 2x slow for several calls (measured: 256 px 0.32 s first, 0.16 s after
    # 512), so every size runs forward and backward twice before anything is timed
    for size, draft in specs:
        for _ in range(2):
            w = model.mean_wplus().requires_grad_(True)
            model.synthesis(w, size, draft=draft).square().mean().backward()
    rows = []
    for size, draft in specs:
        for batch in map(int, args.batches.split(",")):
            g = torch.Generator().manual_seed(batch * 1000 + size)
            wplus = model.truncate(model.mapping(torch.randn(batch, NUM_SLOTS, 512, generator=g).flatten(0, 1)).view(batch, NUM_SLOTS, 512), 0.7).detach()
            eager_img = None
            for path in args.paths.split(","):
                row = {"size": f"{size} draft" if draft else size, "batch": batch, "path": path}
                try:
                    times, img = _time(_forward_path(model, path, size, wplus, draft), args.repeat)
                except Exception as err:  # noqa: BLE001 - a path that cannot run here is recorded, the others go on
                    rows.append(row | {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"})
                    print(rows[-1], flush=True)
                    continue
                eager_img = img if path == "eager" else eager_img
                row["forward_s_per_face"] = [round(min(times) / batch, 4), round(statistics.median(times) / batch, 4), round(max(times) / batch, 4)]
                row["max_abs_diff_from_eager"] = 0.0 if eager_img is None or path == "eager" else float((img - eager_img).abs().max())
                if path in ("eager", "channels_last"):
                    times_b, _ = _time(_backward_fn(model, path, size, wplus, draft), max(2, args.repeat // 2))
                    row["forward_backward_s_per_face"] = [
                        round(min(times_b) / batch, 4),
                        round(statistics.median(times_b) / batch, 4),
                        round(max(times_b) / batch, 4),
                    ]
                rows.append(row)
                print(row, flush=True)
    result = {
        "command": command_line("benchmarks.mobilestylegan_speed", argv),
        "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} threads",
        "repeat": args.repeat,
        "columns": "seconds per face [min, median, max] over the timed runs",
        "goals_s_per_face": GOALS,
        "rows": rows,
    }
    lines = [
        "# MobileStyleGAN speed (seconds per face: min / median / max)",
        "",
        f"`{result['command'].strip()}` on {result['machine']}; {args.repeat} timed runs after a warm-up.",
        "",
        "| size | batch | path | forward | forward+backward (W+) | max abs diff from eager |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['size']} | {r['batch']} | {r['path']} | failed: {r['error']} | | |")
            continue
        f = " / ".join(f"{v:.3f}" for v in r["forward_s_per_face"])
        fb = " / ".join(f"{v:.3f}" for v in r.get("forward_backward_s_per_face", [])) or "-"
        lines.append(f"| {r['size']} | {r['batch']} | {r['path']} | {f} | {fb} | {r['max_abs_diff_from_eager']:.1e} |")
    lines += ["", f"Goals (256 px, per face): forward <= {GOALS['forward_256']} s, forward+backward <= {GOALS['forward_backward_256']} s."]
    write_results(args.out, result, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
