"""The inversion encoder of the demo backbone (:mod:`zoo.nn.dcgan`), trained on the generator's own faces.

Every training face is ``x = G(z)`` with a known ``z ~ N(0, I)`` (drawn from the trainer's seeded
generator), rounded to 8 bits as a saved PNG would be. The encoder E learns ``z_hat = E(x)`` with

    L = lambda_lat |z_hat - z|^2  +  lambda_img |G(z_hat) - x|_1  +  lambda_id (1 - cos(S(G(z_hat)), S(x)))

where S is SFace in torch (frozen, :mod:`zoo.nn.sface`) and G the frozen packaged DCGAN. Stage 1 uses
the latent term alone (cheap: G runs without gradients); stage 2 adds the image and identity terms,
which make the re-generated face the same person rather than merely a nearby latent.

    python training/train.py --config training/configs/dcgan_encoder.yaml --stage 1 --output-dir outputs/dcgan_encoder/stage1
    python training/train.py --config training/configs/dcgan_encoder.yaml --stage 2 --output-dir outputs/dcgan_encoder/stage2

This is a backbone, not a de-identification method: ``anonymize_faces`` raises.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from zoo.methods.base import NeuralMethod
from zoo.nn.dcgan import LATENT_DIM, DCGANGenerator, InversionEncoder
from zoo.nn.sface import load_sface

__all__ = ["DCGANInversion", "quantize_8bit"]


def quantize_8bit(x: torch.Tensor) -> torch.Tensor:
    """[-1,1] float -> the same image after a round trip through uint8 (what a saved PNG holds)."""
    return torch.round((x.clamp(-1, 1) + 1) * 127.5) / 127.5 - 1


class DCGANInversion(NeuralMethod):
    """Components ``encoder`` (trained) and ``generator`` (frozen, packaged weights); stages 1 and 2, group ``e``."""

    name = "dcgan_inversion"
    summary = "Inversion encoder of the packaged DCGAN (demo backbone), not a de-identification method."
    reversible = False
    uses_key = False
    component_names = ("encoder", "generator")
    stages: ClassVar[tuple[int, ...]] = (1, 2)
    resolution = 64

    train_generator: torch.Generator | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "DCGANInversion":
        model = config.get("model", {})
        return cls(config, {"encoder": InversionEncoder(**model.get("encoder", {})), "generator": DCGANGenerator()})

    def trainable_parameters(self, stage: int) -> dict[str, list[nn.Parameter]]:
        if stage not in self.stages:
            raise ValueError(f"{self.name} has stages {self.stages}, not {stage}")
        return {"e": list(self.components["encoder"].parameters())}

    def _faces(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.randn(n, LATENT_DIM, generator=self.train_generator).to(self.device)
        with torch.no_grad():
            x = quantize_8bit(self.components["generator"](z))
        return z, x

    def compute_losses(self, stage: int, group: str, batch: dict[str, torch.Tensor], step: int):
        lam = self.stage_config(stage).get("lambdas", {})
        z, x = self._faces(batch["image"].shape[0])
        z_hat = self.components["encoder"](x)
        terms = {"lat": ((z_hat - z) ** 2).mean()}
        if float(lam.get("img", 0)) or float(lam.get("id", 0)):
            x_hat = self.components["generator"](z_hat)
            terms["img"] = (x_hat - x).abs().mean()
            if float(lam.get("id", 0)):
                sface = load_sface(self.device)
                with torch.no_grad():
                    e_x = sface.embed_aligned(x)
                terms["id"] = 1 - (sface.embed_aligned(x_hat) * e_x).sum(1).mean()
        total = sum(float(lam.get(k, 1.0 if k == "lat" else 0.0)) * v for k, v in terms.items())
        return total, {k: float(v.detach()) for k, v in terms.items()}

    def sample_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = batch["image"]
        return {"input": x, "encoded": self.components["generator"](self.components["encoder"](x))}

    def anonymize_faces(self, x, keys, **controls):
        raise NotImplementedError("dcgan_inversion is a backbone, not a de-identification method")
