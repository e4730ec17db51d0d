"""Train the W+ encoder of :mod:`zoo.encoder` on the FFHQ-grade generator's own samples.

Data: styles from :func:`training.mobilestylegan_heads.sample_wplus` (truncated w's, style-mixed, jittered per
slot: inverted codes are W+, not one w), each drawn at 256 px as the inversion draws (the generator's 256 px draft) and kept as
(uint8 image ``[3,256,256]``, fp16 W+ ``[23,512]``) in resumable shards.

    python -m training.wplus_encoder data  --n 6144 --out runs/encoder/data                      # resumable shards
    python -m training.wplus_encoder train --data runs/encoder/data --out runs/encoder --max-minutes 20 [--resume] [--phase image]
    python -m training.wplus_encoder export --run runs/encoder       # fp16 -> zoo/weights/wplus_encoder

Training, on augmented inputs (crop jitter, rotation up to 8 degrees, blur, JPEG, noise, colour), Adam: phase
``latent`` (L2 to the sample's W+), then phase ``image`` (``--phase image --resume``: plus the generator's image at the
predicted code against the sample, L1 as in refinement, and SFace identity).
"""

from __future__ import annotations

import argparse
import glob
import json
import time
from pathlib import Path

import cv2
import numpy as np
import torch
from safetensors.torch import load_file, save_file

from zoo.inversion import draw_fitted
from zoo.nn.mobilestylegan import load_mobilestylegan
from zoo.nn.wplus_encoder import WPlusEncoder

__all__ = ["augment", "export", "main", "make_shards", "train"]

SHARD_SIZE = 64
RENDER_BATCH = 8


def make_shards(out: Path, n: int, seed: int = 0) -> None:
    """Write ``shard_XXXX.safetensors`` (``image`` uint8 [64,3,256,256], ``wplus`` fp16 [64,23,512]) until ``n``
    samples exist; shard ``i`` is drawn from seed ``(seed, i)``, so a rerun continues where it stopped."""
    from training.mobilestylegan_heads import sample_wplus

    out.mkdir(parents=True, exist_ok=True)
    model = load_mobilestylegan("cpu")
    for i in range((n + SHARD_SIZE - 1) // SHARD_SIZE):
        path = out / f"shard_{i:04d}.safetensors"
        if path.exists():
            continue
        t0 = time.time()
        rng = np.random.default_rng([seed, i])
        with torch.no_grad():
            wplus = sample_wplus(model, SHARD_SIZE, rng)
            images = torch.cat([draw_fitted(model, wplus[j : j + RENDER_BATCH]) for j in range(0, SHARD_SIZE, RENDER_BATCH)])
        image_u8 = ((images.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
        tmp = path.with_suffix(".tmp")
        save_file({"image": image_u8.contiguous(), "wplus": wplus.half().contiguous()}, str(tmp))
        tmp.rename(path)
        print(f"{path.name}: {time.time() - t0:.1f} s", flush=True)


def augment(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """What real photos do to a face crop: uint8 ``[B,3,S,S]`` -> uint8, each image with its own crop jitter
    (shift up to 3%, scale 0.95-1.05), rotation (up to 8 degrees), and with probability 0.3-0.5 each: Gaussian blur,
    JPEG (quality 30-90), noise (sigma up to 6 levels), colour gain and offset."""
    out = np.empty_like(images)
    s = images.shape[-1]
    for i, chw in enumerate(images):
        img = np.ascontiguousarray(chw.transpose(1, 2, 0))
        m = cv2.getRotationMatrix2D((s / 2, s / 2), rng.uniform(-8, 8), rng.uniform(0.95, 1.05))
        m[:, 2] += rng.uniform(-0.03, 0.03, 2) * s
        img = cv2.warpAffine(img, m, (s, s), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)
        if rng.random() < 0.3:
            img = cv2.GaussianBlur(img, (0, 0), rng.uniform(0.5, 2.0))
        if rng.random() < 0.4:
            _, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(30, 91))])
            img = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
        f = img.astype(np.float32)
        if rng.random() < 0.5:
            f = f * rng.uniform(0.8, 1.2, 3) + rng.uniform(-15, 15, 3)
        if rng.random() < 0.3:
            f = f + rng.normal(0, rng.uniform(1, 6), f.shape)
        out[i] = np.clip(f, 0, 255).round().astype(np.uint8).transpose(2, 0, 1)
    return out


def train(
    data: Path,
    out: Path,
    max_minutes: float,
    resume: bool,
    batch: int = 32,
    lr: float = 1e-3,
    seed: int = 0,
    phase: str = "latent",
    image_weight: float = 1.0,
    identity_weight: float = 0.5,
) -> dict:
    """Adam on the encoder, in one of two phases:

    * ``latent``: ``||E(aug(x)) - w+||^2`` (mean over slots and channels);
    * ``image``: the latent term plus ``image_weight`` x the inversion's reconstruction loss
      (:func:`zoo.inversion.reconstruction_loss`, the generator's 256 px image at E's code against the clean sample)
      plus ``identity_weight`` x (1 - SFace cosine) between them.

    The weights and the log are saved every 5 minutes and at the end (``train_state.safetensors`` +
    ``train_log.json``), so ``--resume`` continues a run (with fresh Adam moments). The last 64 samples are held out
    of training and their latent loss is logged."""
    shards = sorted(glob.glob(str(data / "shard_*.safetensors")))
    if not shards:
        raise FileNotFoundError(f"no shards in {data}; run: python -m training.wplus_encoder data --out {data}")
    loaded = [load_file(f) for f in shards]
    images = torch.cat([d["image"] for d in loaded]).numpy()
    wplus = torch.cat([d["wplus"] for d in loaded]).float()
    del loaded
    held = 64  # the last samples are a held-out check of the latent loss
    g = load_mobilestylegan("cpu")
    enc = WPlusEncoder()
    enc.w_avg.copy_(g.w_avg)
    opt = torch.optim.Adam(enc.parameters(), lr=lr)
    out.mkdir(parents=True, exist_ok=True)
    log = {"steps": 0, "seconds": 0.0, "history": []}
    state_file, log_file = out / "train_state.safetensors", out / "train_log.json"
    if resume and state_file.is_file():  # the weights and the log continue; Adam's moments start afresh
        state = load_file(str(state_file))
        enc.load_state_dict({k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")})
        if log_file.is_file():
            log = json.loads(log_file.read_text())
    rng = np.random.default_rng([seed, log["steps"]])
    t0, last_save = time.time(), time.time()
    n_train = len(images) - held

    def held_loss() -> float:
        enc.eval()
        with torch.no_grad():
            x = torch.from_numpy(images[n_train:]).float() / 127.5 - 1
            loss = float(((enc(x) - wplus[n_train:]) ** 2).mean())
        enc.train()
        return loss

    def save() -> None:
        save_file({f"model.{k}": v.contiguous() for k, v in enc.state_dict().items()}, str(state_file))
        log_file.write_text(json.dumps(log, indent=1))

    sface = None
    if phase == "image":
        from zoo.inversion import reconstruction_loss
        from zoo.nn.sface import load_sface

        sface = load_sface()
    enc.train()
    while time.time() - t0 < max_minutes * 60:
        idx = rng.integers(0, n_train, batch)
        x = torch.from_numpy(augment(images[idx], rng)).float() / 127.5 - 1
        pred = enc(x)
        loss = ((pred - wplus[idx]) ** 2).mean()
        if sface is not None:
            clean = torch.from_numpy(images[idx]).float() / 127.5 - 1
            drawn = draw_fitted(g, pred)
            loss = loss + image_weight * reconstruction_loss(drawn, clean).mean()
            with torch.no_grad():
                target_id = sface.embed_aligned(clean)
            loss = loss + identity_weight * (1 - (sface.embed_aligned(drawn) * target_id).sum(1)).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        log["steps"] += 1
        if log["steps"] % 50 == 0:
            log["history"].append({"step": log["steps"], "train_latent_l2": round(loss.item(), 5), "held_latent_l2": round(held_loss(), 5)})
            print(log["history"][-1], flush=True)
        if time.time() - last_save > 300:
            log["seconds"] += time.time() - last_save
            save()
            last_save = time.time()
    log["seconds"] += time.time() - last_save
    save()
    return log


def export(run: Path, dest: Path | None = None, recipe: str = "") -> Path:
    """The run's encoder -> ``zoo/weights/wplus_encoder`` (fp16 safetensors + config.json)."""
    from zoo.nn.wplus_encoder import encoder_dir

    dest = dest or encoder_dir()
    state = load_file(str(run / "train_state.safetensors"))
    model = {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}
    dest.mkdir(parents=True, exist_ok=True)
    save_file({k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in model.items()}, str(dest / "model.safetensors"))
    log = json.loads((run / "train_log.json").read_text())
    config = {
        "architecture": "WPlusEncoder",
        "input_size": 128,
        "generator": "MobileStyleGAN (random-face wheel, converted)",
        "trained_steps": log["steps"],
        "trained_seconds": round(log["seconds"]),
        "recipe": recipe,
        "last_logged": log["history"][-1] if log["history"] else None,
    }
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return dest


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data", help="generator samples -> resumable shards")
    d.add_argument("--n", type=int, default=4096)
    d.add_argument("--out", type=Path, default=Path("runs/encoder/data"))
    d.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train", help="train the encoder in chunks")
    t.add_argument("--data", type=Path, default=Path("runs/encoder/data"))
    t.add_argument("--out", type=Path, default=Path("runs/encoder"))
    t.add_argument("--max-minutes", type=float, default=20.0)
    t.add_argument("--resume", action="store_true")
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--phase", choices=("latent", "image"), default="latent")
    t.add_argument("--lr", type=float, default=1e-3)
    e = sub.add_parser("export", help="fp16 weights + config -> zoo/weights/wplus_encoder")
    e.add_argument("--run", type=Path, default=Path("runs/encoder"))
    e.add_argument("--recipe", default="", help="the commands that trained it, for the config")
    a = p.parse_args(argv)
    if a.cmd == "export":
        print(export(a.run, recipe=a.recipe))
    elif a.cmd == "data":
        make_shards(a.out, a.n, a.seed)
    else:
        train(a.data, a.out, a.max_minutes, a.resume, a.batch, a.lr, phase=a.phase)


if __name__ == "__main__":
    main()
