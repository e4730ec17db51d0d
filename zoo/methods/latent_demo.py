"""The demo tier: a paper's keyed identity transform run in the latent space of the demo backbone.

Paper-scale weights (StyleGAN2-FFHQ + e4e, ArcFace) are not reachable offline, so each reversible
method also ships a small checkpoint built on :mod:`zoo.nn.dcgan` (the packaged 64 px DCGAN, its
inversion encoder, latent refinement). What every such method shares lives here::

    z      = invert(X)               inversion encoder + ``refine_steps`` Adam steps on z (GAN inversion)
    X_anon = G(T(z, key))            the paper's keyed transform T, in the method file
    X_rec  = G(T^-1(invert(X_anon), key))   recovery from the (saved) anonymized image

Images are aligned crops ``[N,3,64,64]`` in [-1,1]; latents ``[N,100]``. Where a paper works on an
identity code separated from attributes, the demo backbone has a single entangled code: its latent
plays the identity code, and the method file says so. Outputs are whole generated faces (pose and
expression are not kept): this is a demonstration of each paper's key mechanics that runs on any
CPU, labelled as such everywhere a user sees it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import torch

from ..keys import KeyMaterial
from ..nn.dcgan import DCGANGenerator, InversionEncoder, invert
from .base import Control, NeuralMethod

__all__ = ["LatentDemoMethod", "DEMO_LABEL", "REFINE_CONTROL"]

DEMO_LABEL = "demo: 64 px, trained here on synthetic faces (packaged DCGAN backbone); not the paper's weights"
REFINE_CONTROL = Control(
    "refine_steps", "int", 20, 0, 1000, "latent refinement steps when re-encoding a face (0 = inversion encoder alone; more = closer fit, slower)"
)


class LatentDemoMethod(NeuralMethod):
    """Base of the demo-tier methods: components ``generator`` (packaged DCGAN, config only) and ``encoder``.

    Subclasses implement :meth:`edit_latent` and :meth:`unedit_latent` (the paper's keyed transform and
    its inverse) and list ``controls`` (ending with :data:`REFINE_CONTROL`).
    """

    component_names: ClassVar[tuple[str, ...]] = ("generator", "encoder")
    resolution = 64
    demo: ClassVar[bool] = True
    weights_label: ClassVar[str] = DEMO_LABEL

    # ------------------------------------------------------------------ backbone
    @staticmethod
    def backbone_components(config: dict[str, Any]) -> dict[str, torch.nn.Module]:
        """Fresh ``generator`` + ``encoder``; the encoder's trained weights come from ``config['encoder_path']``."""
        encoder_path = config.get("encoder_path")
        if encoder_path:
            from ..hub import resolve_checkpoint

            encoder = InversionEncoder.from_pretrained(str(resolve_checkpoint(encoder_path)))
        else:
            encoder = InversionEncoder(**(config.get("model", {}).get("encoder", {}) or {}))
        return {"generator": DCGANGenerator(), "encoder": encoder}

    def encode(self, x: torch.Tensor, refine_steps: int = 0) -> torch.Tensor:
        """Aligned faces ``[N,3,64,64]`` in [-1,1] -> latents ``[N,100]``."""
        if x.shape[-1] != self.resolution:
            raise ValueError(f"{self.name} (demo) works on {self.resolution} px crops, got {tuple(x.shape)}")
        return invert(self.components["generator"], self.components["encoder"], x, int(refine_steps))

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.components["generator"](z)

    # ------------------------------------------------------------------ the keyed transform
    def edit_latent(self, z: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        raise NotImplementedError

    def unedit_latent(self, z: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------------ DeidMethod
    def _check_keys(self, x: torch.Tensor, keys: Sequence[KeyMaterial]) -> None:
        if len(keys) != x.shape[0]:
            raise ValueError(f"need one key per face: {len(keys)} keys for {x.shape[0]} faces")

    def anonymize_faces(self, x: torch.Tensor, keys: Sequence[KeyMaterial], refine_steps: int = 20, **controls: Any) -> torch.Tensor:
        self._check_keys(x, keys)
        return self.decode(self.edit_latent(self.encode(x, refine_steps), keys, **controls))

    def recover_faces(self, y: torch.Tensor, keys: Sequence[KeyMaterial], refine_steps: int = 20, **controls: Any) -> torch.Tensor:
        self._check_keys(y, keys)
        return self.decode(self.unedit_latent(self.encode(y, refine_steps), keys, **controls))

    def reconstruct_faces(self, x: torch.Tensor, refine_steps: int = 20) -> torch.Tensor:
        """G(invert(X)): the backbone alone, identity unchanged (the evaluator's reference row)."""
        return self.decode(self.encode(x, refine_steps))

    def save_pretrained(self, folder) -> Any:
        """As :meth:`NeuralMethod.save_pretrained`, with the trained encoder stored in fp16 (halves the
        bundled size; the evaluation was run on the fp16 weights)."""
        enc = self.components["encoder"]
        dtype = next(enc.parameters()).dtype
        enc.half()
        try:
            return super().save_pretrained(folder)
        finally:
            enc.to(dtype)
