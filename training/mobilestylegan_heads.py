"""Train the 256 and 512 px image heads of the FFHQ-grade generator (:mod:`zoo.nn.mobilestylegan`).

The packaged MobileStyleGAN draws only 1024 px images (its intermediate image heads were pruned at export). Each
:class:`zoo.nn.mobilestylegan.ImageHead` learns, on the generator's own samples, to reproduce the area-downsampled
1024 px output (mean squared error, i.e. PSNR):

* ``512``: block 5 features ``[128,256,256]`` -> 512 px; target ``avg_pool(img1024, 2)``. Its image
  area-downsampled by 2 is also the zoo's 256 px image (blocks 6 and 7 never run).
* ``256``: the draft head, block 4 features ``[256,128,128]`` -> 256 px; target ``avg_pool(img1024, 4)``. A
  third of the cost of the 256 px image and less faithful: the inversion fits with it and the methods draw fitted
  codes with it (:func:`zoo.inversion.draw_fitted`).

Styles: w = mapping(z) truncated with psi ~ U(0.5, 1); half of them style-mixed at a random slot; a third pulled
per slot toward another w by up to 0.3 (inverted codes are W+, not one w). Each style is rendered once and kept as a
few random feature crops with their target crops: a head fitted on 256 whole images reached 32 dB on their crops but
28.8 dB on new seeds, so the data favours many styles over many pixels of each. Held-out evaluation: 64 seeds from a
disjoint seed range, at psi 0.7 and 1.0, on whole images.

    python -m training.mobilestylegan_heads data  --n 1280 --out runs/msg_heads/crops        # resumable shards
    python -m training.mobilestylegan_heads train --data runs/msg_heads/crops --out runs/msg_heads --max-minutes 20 [--resume]
        [--init shipped --heads 512 --lr 5e-4]    # fine-tune the shipped 512 px head only (the draft stays as shipped)
    python -m training.mobilestylegan_heads eval  --ckpt runs/msg_heads --out benchmarks/results/mobilestylegan_heads.json
    python -m training.mobilestylegan_heads export --ckpt runs/msg_heads       # fp16 -> zoo/weights/mobilestylegan/heads
    python -m training.mobilestylegan_heads card                               # the shipped heads' card, re-rendered
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from zoo.nn.mobilestylegan import HEAD_BLOCK, NUM_SLOTS, TO_IMG_SLOT, MobileStyleGAN, heads_dir, load_mobilestylegan

__all__ = ["sample_wplus", "make_shards", "train", "evaluate", "export", "main"]

HEAD_SIZES = tuple(HEAD_BLOCK)
EVAL_SEED_OFFSET = 1_000_000  # evaluation seeds: EVAL_SEED_OFFSET + i (training draws from seeds < 1e6)
SHARD_SIZE = 64
CROPS_PER_SAMPLE = 4
EVAL_RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "mobilestylegan_heads.json"
DATA_MINUTES = 20  # measured: 20 shards of 64 styles, 53-68 s each on 2 quiet cores
CROP = 36  # feature crop side; the loss ignores BORDER feature pixels on each side (zero padding inside a crop)
BORDER = 2


def sample_wplus(model: MobileStyleGAN, n: int, rng: np.random.Generator) -> torch.Tensor:
    """``[n,23,512]`` training styles: truncated w's, half style-mixed, a third jittered per slot."""
    z = torch.from_numpy(rng.standard_normal((3 * n, 512)).astype(np.float32))
    w = model.mapping(z)
    psi = torch.from_numpy(rng.uniform(0.5, 1.0, (3 * n, 1)).astype(np.float32))
    w = model.w_avg + psi * (w - model.w_avg)
    a, b, c = w[:n], w[n : 2 * n], w[2 * n :]
    wplus = a[:, None].repeat(1, NUM_SLOTS, 1)
    for i in range(n):
        if rng.random() < 0.5:
            cut = int(rng.integers(1, NUM_SLOTS))
            wplus[i, cut:] = b[i]
        if rng.random() < 1 / 3:
            t = torch.from_numpy(rng.uniform(0.0, 0.3, (NUM_SLOTS, 1)).astype(np.float32))
            wplus[i] = torch.lerp(wplus[i], c[i].expand(NUM_SLOTS, -1), t)
    return wplus


@torch.no_grad()
def render_with_features(model: MobileStyleGAN, wplus: torch.Tensor) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
    """(head size -> the features its head reads, head size -> target image) for W+ ``[B,23,512]``."""
    feats = model.synthesis.block_features(wplus)
    img = model.synthesis.to_img(feats[-1], wplus[:, TO_IMG_SLOT])
    inputs = {s: feats[HEAD_BLOCK[s]] for s in HEAD_SIZES}
    targets = {s: F.avg_pool2d(img, img.shape[-1] // s) for s in HEAD_SIZES}
    return inputs, targets


def make_shards(out: Path, n: int, seed: int = 0, crops: int = CROPS_PER_SAMPLE) -> None:
    """Write ``shard_XXXX.safetensors`` until ``n`` samples exist. Each sample is one style rendered at 1024 px, kept
    as ``crops`` random CROP x CROP feature crops per head with their target crops (fp16) and the to_img style;
    many styles with a few crops each, because a head fitted to few styles does not carry over to new ones.
    Shards already written are kept, so an interrupted run resumes."""
    model = load_mobilestylegan()
    out.mkdir(parents=True, exist_ok=True)
    for shard in range(math.ceil(n / SHARD_SIZE)):
        path = out / f"shard_{shard:04d}.safetensors"
        if path.is_file():
            continue
        t0 = time.time()
        rng = np.random.default_rng([seed, shard])
        tensors: dict[str, list[torch.Tensor]] = {}
        wplus = sample_wplus(model, SHARD_SIZE, rng)
        for i in range(SHARD_SIZE):
            inputs, targets = render_with_features(model, wplus[i : i + 1])
            for s in HEAD_SIZES:
                res = inputs[s].shape[-1]
                for y, x in rng.integers(0, res - CROP + 1, (crops, 2)):
                    tensors.setdefault(f"features_{s}", []).append(inputs[s][:, :, y : y + CROP, x : x + CROP].half())
                    tensors.setdefault(f"target_{s}", []).append(targets[s][:, :, 2 * y : 2 * (y + CROP), 2 * x : 2 * (x + CROP)].half())
        state = {k: torch.cat(v).contiguous() for k, v in tensors.items()}
        state["style"] = wplus[:, TO_IMG_SLOT].repeat_interleave(crops, 0).contiguous()
        tmp = path.with_suffix(".tmp")
        save_file(state, str(tmp))
        tmp.rename(path)
        print(f"{path.name}: {SHARD_SIZE} samples in {time.time() - t0:.1f} s", flush=True)


def _load_data(data: Path) -> dict[str, torch.Tensor]:
    shards = sorted(data.glob("shard_*.safetensors"))
    if not shards:
        raise SystemExit(f"no shards in {data}: run `python -m training.mobilestylegan_heads data --out {data}` first")
    parts = [load_file(str(p)) for p in shards]
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


def _crops(data: dict[str, torch.Tensor], size: int, batch: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    idx = torch.from_numpy(rng.integers(0, data["style"].shape[0], batch))
    return data[f"features_{size}"][idx].float(), data[f"target_{size}"][idx].float(), data["style"][idx]


def _save_state(out: Path, model: MobileStyleGAN, opt: torch.optim.Optimizer, step: int, log: list[dict], run: dict | None = None) -> None:
    heads = model.synthesis.heads
    state = {f"model.{k}": v.contiguous() for k, v in heads.state_dict().items()}
    names = dict(heads.named_parameters())
    for k, p in names.items():
        st = opt.state.get(p, {})
        for m in ("exp_avg", "exp_avg_sq"):
            if m in st:
                state[f"adam.{m}.{k}"] = st[m].contiguous()
    save_file(state, str(out / "train_state.safetensors.tmp"))
    (out / "train_state.safetensors.tmp").rename(out / "train_state.safetensors")
    depth = len(next(iter(heads.values())).convs)
    (out / "train_log.json").write_text(json.dumps({"step": step, "depth": depth, **(run or {}), "log": log}, indent=1))


def train(
    data_dir: Path,
    out: Path,
    steps: int,
    max_minutes: float,
    resume: bool,
    batch: int = 8,
    lr: float = 2e-3,
    seed: int = 0,
    depth: int = 1,
    init: Path | None = None,
    sizes: tuple[int, ...] = HEAD_SIZES,
) -> int:
    """Adam on the heads of ``sizes`` (MSE against the targets); cosine learning rate over ``steps``; stops after
    ``max_minutes``; ``resume`` continues from ``out/train_state.safetensors``. ``init``: a heads folder
    (``config.json`` + ``model.safetensors``, e.g. the shipped one) to start from; heads not in ``sizes`` keep its
    weights untouched. Returns the step reached."""
    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    data = _load_data(data_dir)
    previous = json.loads((out / "train_log.json").read_text()) if resume and (out / "train_log.json").is_file() else None
    init_config = json.loads((init / "config.json").read_text()) if init is not None else None
    depth = (previous or init_config or {}).get("depth", depth)
    model = MobileStyleGAN(head_depth=depth)  # only the heads are trained: no packaged weights are needed here
    heads = model.synthesis.heads
    if init is not None and not resume:
        heads.load_state_dict({k: v.float() for k, v in load_file(str(init / "model.safetensors")).items()})
    heads.requires_grad_(False)
    for s in sizes:
        heads[str(s)].train().requires_grad_(True)
    params = {k: p for k, p in heads.named_parameters() if p.requires_grad}
    opt = torch.optim.Adam(params.values(), lr=lr, betas=(0.9, 0.99))
    step, log, before = 0, [], 0.0
    if resume and (out / "train_state.safetensors").is_file():
        state = load_file(str(out / "train_state.safetensors"))
        heads.load_state_dict({k[6:]: v for k, v in state.items() if k.startswith("model.")})
        meta = json.loads((out / "train_log.json").read_text())
        step, log = meta["step"], meta["log"]
        before = log[-1]["seconds"] if log else 0.0
        for k, p in params.items():
            if f"adam.exp_avg.{k}" in state:
                opt.state[p] = {"step": torch.tensor(float(step)), "exp_avg": state[f"adam.exp_avg.{k}"], "exp_avg_sq": state[f"adam.exp_avg_sq.{k}"]}
    rng = np.random.default_rng([seed, step])
    # what the run trains, for the card: heads, styles, learning rate, and the config of the heads it started from
    run: dict = {"sizes": list(sizes), "styles": int(data["style"].shape[0]) // CROPS_PER_SAMPLE, "lr": lr}
    started_from = init_config if init_config is not None else (previous or {}).get("init_config")
    if started_from is not None:
        run["init_config"] = started_from
    t0, running = time.time(), {s: 0.0 for s in sizes}
    while step < steps and (time.time() - t0) < max_minutes * 60:
        for g in opt.param_groups:
            g["lr"] = 1e-4 + 0.5 * (lr - 1e-4) * (1 + math.cos(math.pi * step / steps))
        loss = torch.zeros(())
        for s in sizes:
            f, t, style = _crops(data, s, batch, rng)
            pred = heads[str(s)](f, style)
            b = 2 * BORDER
            mse = F.mse_loss(pred[..., b:-b, b:-b], t[..., b:-b, b:-b])
            running[s] += float(mse.detach())
            loss = loss + mse
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step % 200 == 0:
            entry = {"step": step, "seconds": round(before + time.time() - t0, 1)} | {
                f"psnr_{s}": round(10 * math.log10(4 / (running[s] / 200)), 2) for s in sizes
            }
            log.append(entry)
            print(entry, flush=True)
            running = {s: 0.0 for s in sizes}
            _save_state(out, model, opt, step, log, run)
    _save_state(out, model, opt, step, log, run)
    return step


def _load_trained(base: MobileStyleGAN, ckpt: Path) -> MobileStyleGAN:
    """A copy of ``base`` with the heads of a training folder."""
    depth = json.loads((ckpt / "train_log.json").read_text()).get("depth", 1)
    model = MobileStyleGAN(head_depth=depth)
    model.load_state_dict({k: v for k, v in base.state_dict().items() if not k.startswith("synthesis.heads.")}, strict=False)
    state = load_file(str(ckpt / "train_state.safetensors"))
    model.synthesis.heads.load_state_dict({k[6:]: v for k, v in state.items() if k.startswith("model.")})
    return model


def _interval(values: np.ndarray) -> list[float]:
    """Normal-approximation 95% interval of the mean."""
    half = 1.96 * values.std(ddof=1) / math.sqrt(len(values))
    return [round(float(values.mean() - half), 2), round(float(values.mean() + half), 2)]


#: what :func:`evaluate` measures: name -> (size, draft)
EVAL_OUTPUTS = {"256": (256, False), "512": (512, False), "256_draft": (256, True)}


@torch.no_grad()
def evaluate(model: MobileStyleGAN, n: int = 64, psis: tuple[float, ...] = (0.7, 1.0)) -> dict:
    """PSNR (dB) of the 256 px image (the 512 px head's, area-downsampled), the 512 px image and the 256 px draft
    against the area-downsampled 1024 output on ``n`` held-out seeds."""
    result: dict = {"seeds": f"{EVAL_SEED_OFFSET}..{EVAL_SEED_OFFSET + n - 1}", "n": n, "heads": {}}
    for psi in psis:
        per: dict[str, list[float]] = {name: [] for name in EVAL_OUTPUTS}
        for i in range(n):
            z = torch.from_numpy(np.random.default_rng(EVAL_SEED_OFFSET + i).standard_normal((1, 512)).astype(np.float32))
            w = model.style(z, psi)[:, None].expand(-1, NUM_SLOTS, -1)
            full = model.synthesis(w, 1024)
            for name, (size, draft) in EVAL_OUTPUTS.items():
                pred = model.synthesis(w, size, draft=draft)
                per[name].append(10 * math.log10(4 / float(F.mse_loss(pred, F.avg_pool2d(full, 1024 // size)))))
        for name in EVAL_OUTPUTS:
            v = np.array(per[name])
            result["heads"].setdefault(name, {})[f"psi_{psi}"] = {
                "psnr_mean": round(float(v.mean()), 2),
                "psnr_95ci": _interval(v),
                "psnr_min": round(float(v.min()), 2),
                "share_at_least_32db": round(float((v >= 32).mean()), 3),
            }
    return result


def export(ckpt: Path, dest: Path | None = None) -> Path:
    """The trained heads as fp16 safetensors + config.json in ``dest`` (default: the package's heads folder)."""
    dest = dest or heads_dir()
    dest.mkdir(parents=True, exist_ok=True)
    state = load_file(str(ckpt / "train_state.safetensors"))
    heads = {k[6:]: v.half().contiguous() for k, v in state.items() if k.startswith("model.")}
    save_file(heads, str(dest / "model.safetensors"), metadata={"format": "pt"})
    log = json.loads((ckpt / "train_log.json").read_text())
    seconds = log["log"][-1]["seconds"] if log["log"] else 0
    if "init_config" in log:  # a fine-tuning run: the base heads' recipe stays, the fine-tuning is added
        config = {k: v for k, v in log["init_config"].items() if k != "fine_tune"}
        config["fine_tune"] = {"heads": log["sizes"], "styles": log["styles"], "steps": log["step"], "lr": log["lr"], "train_seconds": seconds}
    else:
        config = {
            "architecture": "MobileStyleGAN ImageHead",
            "heads": {str(s): {"reads_block": HEAD_BLOCK[s], "output_px": s} for s in HEAD_SIZES},
            "style_slot": TO_IMG_SLOT,
            "depth": log.get("depth", 1),
            "dtype": "float16",
            "steps": log["step"],
            "train_seconds": seconds,
        }
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    evaluation = json.loads(EVAL_RESULTS.read_text()) if EVAL_RESULTS.is_file() else None
    (dest / "README.md").write_text(heads_card(config, evaluation))
    return dest


def evaluation_table(evaluation: dict | None) -> str:
    """The measured PSNR as a markdown table (one row per output and psi)."""
    labels = {"256": "256 (512 head, downsampled)", "512": "512", "256_draft": "256 draft (block-4 head)"}
    rows = []
    for name, per in (evaluation or {}).get("heads", {}).items():
        for psi, r in per.items():
            rows.append(
                f"| {labels.get(name, name)} | {psi.split('_')[1]} | {r['psnr_mean']:.2f} [{r['psnr_95ci'][0]:.2f}, {r['psnr_95ci'][1]:.2f}] | {r['psnr_min']:.2f} | {r['share_at_least_32db']:.2f} |"
            )
    if not rows:
        return "Not evaluated."
    return "\n".join(["| image (px) | psi | PSNR dB, mean [95% CI] | worst seed | share >= 32 dB |", "|---|---|---|---|---|", *rows])


def heads_card(config: dict, evaluation: dict | None) -> str:
    """The heads' model card (Hub front matter, provenance, licence, recipe, measured PSNR)."""
    table = evaluation_table(evaluation)
    n = (evaluation or {}).get("n", "?")
    tune = config.get("fine_tune")
    more_steps = "" if tune is None else f"; the {' and '.join(str(h) for h in tune['heads'])} px head {tune['steps']} more"
    fine_tune = (
        ""
        if tune is None
        else f"""
Then the {" and ".join(str(h) for h in tune["heads"])} px head alone was fine-tuned from those weights (the other head stays
as trained above): `python -m training.mobilestylegan_heads data --n {tune["styles"]} --out runs/msg_heads/crops` (the
first 1280 styles are the ones above) and `python -m training.mobilestylegan_heads train --data runs/msg_heads/crops
--out runs/msg_heads_tune --init shipped --heads {",".join(str(h) for h in tune["heads"])} --lr {tune["lr"]} --steps {tune["steps"]} --max-minutes 40`:
{tune["styles"]} styles, Adam lr {tune["lr"]} cosine to 1e-4, batch 8 crops, {tune["steps"]} steps. Wall time on 2 CPU cores: data
{tune.get("data_minutes", "?")} min, training {tune["train_seconds"] / 60:.1f} min.
"""
    )
    return f"""---
license: other
license_name: nvidia-source-code-license-nc-and-cc-by-nc-sa-4.0
tags:
- stylegan2
- mobilestylegan
- face-generation
library_name: pytorch
---

# MobileStyleGAN image heads (256 and 512 px)

Two small image heads for the FFHQ-grade generator of the face de-identification zoo (`zoo.nn.mobilestylegan`):
MobileStyleGAN (Belousov 2021), a StyleGAN2-FFHQ-1024 distilled network that the `random-face` wheel ships as
OpenVINO IR. The packaged network draws only 1024 px images; these heads draw from the features of its 256 px block
a 512 px image, and a 256 px image as that image area-downsampled (blocks 6 and 7 never run), and from its 128 px block
a cheaper 256 px draft that the inversion fits real faces with (and the zoo's methods draw fitted codes with). They are the only weights here that were trained by this project; the generator's own weights are read from
the installed wheel and converted into the user's cache at first use, never redistributed.

## Architecture
Each head: a modulated depthwise-separable 3x3 conv (block channels -> half, LeakyReLU 0.2), then a modulated 1x1
conv to 12 Haar wavelet channels and the inverse transform (the packaged `to_img` design). The 256 px image is the
512 px head's low band halved (each 2x2 mean of the inverse transform), so its high bands are not computed. Both
heads take the style of W+ slot {config["style_slot"]} (`to_img`). Stored in fp16 ({config["steps"]} training steps{more_steps}).

## Training recipe
`python -m training.mobilestylegan_heads data --n 1280 --out runs/msg_heads/crops` then
`python -m training.mobilestylegan_heads train --data runs/msg_heads/crops --out runs/msg_heads --depth {config["depth"]} --max-minutes 25`
(both resumable: `data` keeps finished shards, `train --resume` continues). Data: 1280 styles (truncation
psi ~ U(0.5, 1), half style-mixed at a random slot, a third pulled per slot toward another w by up to 0.3), each
rendered once at 1024 px and kept as 4 random 36x36 feature crops per head with their target crops; targets are
the 1024 px output area-downsampled by 4 (256 head) and 2 (512 head). Adam (lr 2e-3, cosine to 1e-4, batch 8 crops
per head, 6000 steps), mean squared error with a 2-pixel feature border left out. Wall time on 2 CPU cores: data
{DATA_MINUTES} min, training {config["train_seconds"] / 60:.1f} min. Measured and not adopted: the same recipe on 256
styles kept whole reached 32 dB on its own crops but 28.8 dB (256 px) on new seeds; two convs per head on the 1280
styles gave 29.3 dB (256) and 32.2 dB (512) at psi 0.7, below one conv.
{fine_tune}
## Evaluation
PSNR against the area-downsampled 1024 px output of the same style, {n} held-out seeds (z from numpy
`default_rng(seed)`, seeds {(evaluation or {}).get("seeds", "?")}, never used in training); target >= 32 dB.
`python -m training.mobilestylegan_heads eval --out benchmarks/results/mobilestylegan_heads.json`. The 256 px
image the zoo draws is the 512 px head's, area-downsampled; the draft is the block-4 head.

{table}

## Licence and provenance
The heads were trained on images drawn by MobileStyleGAN, whose weights come from `random-face==2021.7.21.1`
(code Apache-2.0; the wheel states no licence for the weights). Those weights are distilled from NVIDIA's
StyleGAN2-FFHQ (NVIDIA Source Code License-NC), trained on FFHQ (CC BY-NC-SA 4.0). Treat these heads the same way:
research and non-commercial use only.
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m training.mobilestylegan_heads", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data")
    d.add_argument("--n", type=int, default=1280)
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train")
    t.add_argument("--data", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--steps", type=int, default=6000)
    t.add_argument("--max-minutes", type=float, default=20.0)
    t.add_argument("--resume", action="store_true")
    t.add_argument("--batch", type=int, default=8)
    t.add_argument("--depth", type=int, default=1, help="modulated convs per head before its to_img")
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--init", help="a heads folder to start from ('shipped': the package's heads)")
    t.add_argument("--heads", default=",".join(str(s) for s in HEAD_SIZES), help="head sizes to train (the others stay as initialised)")
    e = sub.add_parser("eval")
    e.add_argument("--ckpt", type=Path, help="a training folder (default: the shipped heads)")
    e.add_argument("--n", type=int, default=64)
    e.add_argument("--out", type=Path)
    sub.add_parser("card", help="rewrite the shipped heads' README.md from their config.json and the eval results")
    x = sub.add_parser("export")
    x.add_argument("--ckpt", type=Path, required=True)
    x.add_argument("--dest", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    if args.cmd == "data":
        make_shards(args.out, args.n, args.seed)
    elif args.cmd == "train":
        init = None if args.init is None else heads_dir() if args.init == "shipped" else Path(args.init)
        sizes = tuple(int(s) for s in args.heads.split(","))
        step = train(args.data, args.out, args.steps, args.max_minutes, args.resume, args.batch, args.lr, depth=args.depth, init=init, sizes=sizes)
        print(f"stopped at step {step} of {args.steps}")
    elif args.cmd == "eval":
        model = load_mobilestylegan()
        if args.ckpt is not None:
            model = _load_trained(model, args.ckpt).eval().requires_grad_(False)
        result = evaluate(model, args.n)
        text = json.dumps(result, indent=2)
        print(text)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text + "\n")
            command = "python -m training.mobilestylegan_heads eval" + (f" --ckpt {args.ckpt}" if args.ckpt else "") + f" --n {args.n} --out {args.out}"
            args.out.with_suffix(".md").write_text(
                f"# MobileStyleGAN image heads: PSNR against the area-downsampled 1024 px output\n\n`{command}`\n\n"
                f"{result['n']} held-out seeds ({result['seeds']}, never used in training); target >= 32 dB.\n\n{evaluation_table(result)}\n"
            )
    elif args.cmd == "card":
        config = json.loads((heads_dir() / "config.json").read_text())
        evaluation = json.loads(EVAL_RESULTS.read_text()) if EVAL_RESULTS.is_file() else None
        (heads_dir() / "README.md").write_text(heads_card(config, evaluation))
    elif args.cmd == "export":
        print(export(args.ckpt, args.dest))


if __name__ == "__main__":
    main()
