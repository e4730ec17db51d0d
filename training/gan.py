"""StyleGAN2 trained as a GAN on the training data: the backbone DBAF and HFORD start from.

Both papers start from the FFHQ StyleGAN2 and its e4e encoder. Those weights are not reachable
offline, and the tiny recipes' stage 0 (an autoencoder trained for minutes) leaves a W+ space in
which the keyed edits land off the face manifold (``benchmarks/results/{dbaf,hford}_tiny_cpu_chain.md``).
This trains the zoo's :class:`zoo.nn.stylegan2.Generator` the way StyleGAN2 is trained (Karras et al.
2020, "Analyzing and Improving the Image Quality of StyleGAN"), on any data source of the trainer
(the synthetic faces by default), so that every w drawn from the mapping network gives a face:

* D: non-saturating logistic loss + lazy R1 on reals (``r1: {gamma, every}``);
* G: non-saturating logistic loss, with style mixing (two z, a random crossover layer) with
  probability ``mixing`` (0.9 in the paper);
* noise inputs drawn per sample; every random draw comes from the trainer's seeded generator, so a
  resumed run equals one run straight through. The path-length regulariser is not included.

    accelerate launch training/train.py --config training/configs/stylegan2_synthetic.yaml --stage 1 --output-dir outputs/stylegan2_synthetic/stage1

The saved model folder holds ``generator/`` (EMA weights when ``ema`` is set), which the DBAF/HFORD
configs take as ``pretrained: {generator: outputs/stylegan2_synthetic/stage1/model/generator}``.
``python -m training.gan check --generator DIR`` measures whether it draws faces: the face detector's
hit rate on 64 generated images next to its rate on 64 held-out synthetic faces.
This is a backbone, not a de-identification method: ``anonymize_faces`` raises.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import torch
from torch import nn

from zoo import losses
from zoo.keys import KeyMaterial
from zoo.methods.base import NeuralMethod
from zoo.nn.stylegan2 import Generator
from zoo.nn.stylegan2_discriminator import Discriminator

__all__ = ["StyleGAN2Pretraining", "draw_faces", "face_detection_rate", "check_generator", "live_generator", "main"]


class StyleGAN2Pretraining(NeuralMethod):
    """Components ``generator`` and ``discriminator``; one stage (1), groups ``d`` then ``g``."""

    name = "stylegan2"
    summary = "StyleGAN2 trained as a GAN (backbone for DBAF / HFORD), not a de-identification method."
    reversible = False
    uses_key = False
    component_names = ("generator", "discriminator")
    stages: ClassVar[tuple[int, ...]] = (1,)
    resolution = 64

    train_generator: torch.Generator | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "StyleGAN2Pretraining":
        model = config.get("model", {})
        res = int(config.get("resolution", cls.resolution))
        gen_kw = {"size": res, **model.get("generator", {})}
        disc_kw = {"size": res, **model.get("discriminator", {})}
        if gen_kw["size"] != res or disc_kw["size"] != res:
            raise ValueError(f"generator/discriminator size must equal resolution {res}")
        return cls(config, {"generator": Generator(**gen_kw), "discriminator": Discriminator(**disc_kw)})

    @property
    def generator(self) -> Generator:
        return self.components["generator"]

    # ------------------------------------------------------------------ protocol
    def trainable_parameters(self, stage: int) -> dict[str, list[nn.Parameter]]:
        if stage != 1:
            raise ValueError(f"stylegan2 has stages (1,), not {stage}")
        return {"d": list(self.components["discriminator"].parameters()), "g": list(self.generator.parameters())}

    def sample_images(self, n: int) -> torch.Tensor:
        """n images [n,3,R,R] from random z, noise and (with probability ``mixing``) a style crossover,
        every draw from ``self.train_generator``."""
        g, gen = self.generator, self.train_generator
        z = torch.randn(2, n, g.style_dim, generator=gen).to(self.device)
        noise = [torch.randn(n, 1, *getattr(g.noises, f"noise_{i}").shape[-2:], generator=gen).to(self.device) for i in range(g.num_layers)]
        mix = torch.rand((), generator=gen).item() < float(self.stage_config(1).get("mixing", 0.9))
        if mix:
            cross = int(torch.randint(1, g.n_latent, (), generator=gen).item())
            image, _ = g([z[0], z[1]], inject_index=cross, noise=noise)
        else:
            image, _ = g([z[0]], noise=noise)
        return image

    def compute_losses(self, stage: int, group: str, batch: dict[str, torch.Tensor], step: int):
        disc = self.components["discriminator"]
        real = batch["image"]
        n = real.shape[0]
        if group == "d":
            with torch.no_grad():
                fake = self.sample_images(n)
            r1 = self.stage_config(1).get("r1")
            real = real.detach().requires_grad_(losses.lazy_r1_due(r1, step))
            real_pred = disc(real)
            loss = losses.nonsaturating_d_loss(real_pred, disc(fake))
            logs = {"d_adv": float(loss.detach())}
            loss = losses.add_lazy_r1(loss, logs, real_pred, real, r1, step)
            logs["total"] = float(loss.detach())
            return loss, logs
        if group == "g":
            loss = losses.nonsaturating_g_loss(disc(self.sample_images(n)))
            return loss, {"g_adv": float(loss.detach()), "total": float(loss.detach())}
        raise ValueError(f"no group {group!r} in stylegan2")

    @torch.no_grad()
    def sample_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Rows: real faces, and generated faces from fixed z (noise buffers, no mixing)."""
        x = batch["image"]
        return {"real": x, "generated": draw_faces(self.generator, x.shape[0])}

    # ------------------------------------------------------------------ not a de-identification method
    def anonymize_faces(self, x: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        raise NotImplementedError("stylegan2 is a backbone for DBAF / HFORD, not a de-identification method")


# ------------------------------------------------------------------------------------------------
# Does the generator draw faces? (command line)
# ------------------------------------------------------------------------------------------------


@torch.no_grad()
def draw_faces(generator: Generator, n: int, seed: int = 1234, chunk: int = 16) -> torch.Tensor:
    """``n`` images [n,3,R,R] in [-1,1] from fixed z (seeded) through the mapping network, with the
    noise buffers: the same faces every call, for sample grids and :func:`check_generator`."""
    z = torch.randn(n, generator.style_dim, generator=torch.Generator().manual_seed(seed)).to(generator.device)
    out = [generator.synthesize(generator.mapping(z[i : i + chunk]), noise_mode="const") for i in range(0, n, chunk)]
    return torch.cat(out).clamp(-1, 1)


@torch.no_grad()
def face_detection_rate(images_uint8, size: int = 256) -> float:
    """Fraction of images ``uint8 [N,H,W,3]`` in which the zoo's face detector finds a face (each
    resized to ``size``)."""
    from zoo import detection, imageio

    found = [len(detection.detect_faces(imageio.resize_square(img, size))) > 0 for img in images_uint8]
    return float(sum(found)) / max(len(found), 1)


@torch.no_grad()
def check_generator(generator: Generator, n: int = 64, seed: int = 1234, data_seed: int = 1) -> dict[str, Any]:
    """Face detection rate on ``n`` generated images (fixed z, noise buffers) and on ``n`` held-out
    synthetic faces at the same resolution, the reference the generator should reach."""
    from zoo import imageio
    from zoo.synthetic import synthetic_faces_uint8

    fake = draw_faces(generator.eval(), n, seed)
    real = synthetic_faces_uint8(n, seed=data_seed, resolution=generator.size, offset=10**9)
    return {
        "n": n,
        "generated_detection_rate": face_detection_rate(imageio.from_tensor(fake)),
        "real_detection_rate": face_detection_rate(real),
    }


def live_generator(run_dir: str) -> Generator:
    """The generator of a training run with its live (not EMA-averaged) weights, read from the run's
    accelerate state (``RUN/state/model.safetensors``, tensors only) into ``RUN/model/generator``'s
    architecture. The EMA of a short run still carries much of the random initialisation."""
    from pathlib import Path

    from safetensors.torch import load_file

    run = Path(run_dir)
    gen = Generator.from_pretrained(str(run / "model" / "generator"))
    prefix = "components.generator."
    state = {k[len(prefix) :]: v for k, v in load_file(str(run / "state" / "model.safetensors")).items() if k.startswith(prefix)}
    if not state:
        raise ValueError(f"{run}/state/model.safetensors holds no '{prefix}*' tensors")
    gen.load_state_dict(state)
    return gen


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``python -m training.gan check --generator DIR [--n 64]`` (detection rates as JSON) and
    ``python -m training.gan export-live --run-dir RUN --out DIR`` (the live generator weights)."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m training.gan")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="face detection rate on generated vs held-out synthetic faces")
    c.add_argument("--generator", required=True, help="a saved generator folder, e.g. OUT/model/generator")
    c.add_argument("--n", type=int, default=64)
    e = sub.add_parser("export-live", help="save a run's live (non-EMA) generator as a generator folder")
    e.add_argument("--run-dir", required=True, help="the --output-dir of the GAN run")
    e.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if args.cmd == "export-live":
        live_generator(args.run_dir).save_pretrained(args.out)
        result = {"generator": args.out, "from": f"{args.run_dir}/state (live weights)"}
    else:
        result = {"generator": args.generator, **check_generator(Generator.from_pretrained(args.generator), args.n)}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
