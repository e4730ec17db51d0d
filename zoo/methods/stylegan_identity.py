"""The method base HFORD and DBAF share: e4e -> (A, I) -> keyed edit of I -> StyleGAN2.

:class:`StyleGANIdentityMethod` is the common :class:`~zoo.methods.base.NeuralMethod`: it wires the
components (each paper names its own module classes: :mod:`zoo.methods.dbaf.modules`,
:mod:`zoo.methods.hford.modules`; the shared implementations are in :mod:`zoo.nn.identity_levels`),
derives key latents from the zoo's :class:`~zoo.keys.KeyMaterial`, and runs the anonymize / recover
passes on aligned faces in [-1, 1]. The method subclasses add the paper's losses (training protocol,
``training/PROTOCOL.md``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import torch
from torch import nn

from ..keys import KeyMaterial
from ..nn.identity_levels import (
    AttributeRetention,
    IdentityDisentangler,
    KeyedIdentityEditor,
    feature_resolutions,
    key_latents,
    random_key_latents,
)
from .base import DeidMethod, NeuralMethod

__all__ = ["StyleGANIdentityMethod", "ReconstructionBaseline", "cli"]

# ------------------------------------------------------------------------------------------------
# Building and training (training/PROTOCOL.md)
# ------------------------------------------------------------------------------------------------


def _load_or_build(cls: type, spec: Any, kwargs: dict[str, Any]) -> nn.Module:
    """``cls.from_pretrained(spec)`` (a converted folder / Hub repo) when ``spec`` is given, else ``cls(**kwargs)``."""
    if spec:
        from ..hub import resolve_checkpoint

        return cls.from_pretrained(str(resolve_checkpoint(spec)))
    return cls(**kwargs)


class _TrainingMixin:
    """The training stages shared by HFORD and DBAF (pre-training / disentanglement stage 1,
    anonymization stage 2, and the optional backbone stage 0). Method classes choose the per-paper
    details through class attributes and :meth:`identity_terms` / :meth:`latent_reference`."""

    #: 1 and 2 are the papers' stages. 0 is not in the papers: it pre-trains the e4e encoder, the
    #: retention module and the StyleGAN2 decoder as an autoencoder, standing in for the pretrained
    #: FFHQ e4e / StyleGAN2 weights the papers start from, for configs that have none (offline, tiny).
    stages: ClassVar[tuple[int, ...]] = (0, 1, 2)
    #: DBAF sums the image terms over its outputs (eq. 33-35, 37-38); HFORD applies them to each
    #: generated image (eq. 8-9, 14): we average there.
    sum_over_outputs: ClassVar[bool] = True
    #: the paper's module classes (DBAF: CID / MAAR / KRIA; HFORD: IDM / ARM / cMLPs)
    disentangler_class: ClassVar[type[IdentityDisentangler]] = IdentityDisentangler
    retention_class: ClassVar[type[AttributeRetention]] = AttributeRetention
    editor_class: ClassVar[type[KeyedIdentityEditor]] = KeyedIdentityEditor

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def build_components(cls, config: dict[str, Any]) -> dict[str, nn.Module]:
        """Every component from ``config["model"]`` (random init) or ``config["pretrained"]`` (folders/repos)."""
        from ..nn.psp import Encoder4Editing
        from ..nn.stylegan2 import Generator
        from ..nn.stylegan2_discriminator import Discriminator

        model = config.get("model", {})
        pre = config.get("pretrained", {}) or {}
        res = int(config.get("resolution", 256))
        gen_kw = dict(model.get("generator", {}))
        gen_kw.setdefault("size", res)
        generator = _load_or_build(Generator, pre.get("generator"), gen_kw)
        if not pre.get("generator") and model.get("injection_init") is not None:
            # A pretrained FFHQ generator has non-zero noise strengths, through which the retention maps
            # enter (``injection_mode="noise"``); a random one starts at 0, leaving the maps no path.
            with torch.no_grad():
                for name, p in generator.named_parameters():
                    if name.endswith("noise.weight"):
                        p.fill_(float(model["injection_init"]))
        if generator.size != res:
            raise ValueError(f"generator size {generator.size} != resolution {res}")
        enc_kw = dict(model.get("encoder", {}))
        enc_kw.setdefault("n_styles", generator.n_latent)
        enc_kw.setdefault("style_dim", generator.style_dim)
        encoder = _load_or_build(Encoder4Editing, pre.get("encoder"), enc_kw)
        if encoder.n_styles != generator.n_latent or encoder.style_dim != generator.style_dim:
            raise ValueError("encoder and generator disagree on the W+ shape")
        feat_ch = _encoder_feature_channels(encoder)
        fres = feature_resolutions(res)
        n, d = generator.n_latent, generator.style_dim
        comps: dict[str, nn.Module] = {
            "encoder": encoder,
            "generator": generator,
            cls.disentangler_name: _load_or_build(
                cls.disentangler_class, pre.get(cls.disentangler_name), dict(n_latent=n, style_dim=d, **model.get("disentangler", {}))
            ),
            cls.retention_name: _load_or_build(
                cls.retention_class,
                pre.get(cls.retention_name),
                dict(in_channels=feat_ch, out_channels=[generator.channels[r] for r in fres], resolutions=list(fres), **model.get("retention", {})),
            ),
            cls.editor_name: _load_or_build(cls.editor_class, pre.get(cls.editor_name), dict(n_latent=n, style_dim=d, **model.get("editor", {}))),
        }
        if model.get("discriminator") is not None or pre.get("discriminator"):
            disc_kw = dict(model.get("discriminator") or {})
            disc_kw.setdefault("size", res)
            comps["discriminator"] = _load_or_build(Discriminator, pre.get("discriminator"), disc_kw)
        return comps

    @classmethod
    def build(cls, config: dict[str, Any]) -> dict[str, nn.Module]:
        return cls.build_components(config)

    @classmethod
    def from_config(cls, config: dict[str, Any]):
        """Components from the config, plus the frozen loss networks (identity encoder, LPIPS, parser)."""
        method = cls(dict(config), cls.build_components(config))
        method.loss_nets = _build_loss_nets(config)
        return method

    # -- protocol: parameters ---------------------------------------------------------------------
    def trainable_parameters(self, stage: int) -> dict[str, list[nn.Parameter]]:
        """{"d": discriminator (when lambda adv > 0), "g": ...}.

        Stage 1: disentangler + retention + generator synthesis; stage 2: also the editor (both papers
        train the decoder too: the authors' code fine-tunes it). The mapping network (``style.*``) only
        makes keys and stays frozen; e4e is frozen (the papers). Stage 0 (backbone) trains e4e +
        retention + generator synthesis. ``train_generator`` (config, or per stage) false keeps the
        synthesis network frozen too, e.g. in stage 0 on a generator trained as a GAN (training/gan.py).
        """
        if stage not in self.stages:
            raise ValueError(f"{self.name} has stages {self.stages}, not {stage}")
        g: list[nn.Parameter] = []
        if stage == 0:
            names = ["encoder", self.retention_name]
        else:
            names = [self.disentangler_name, self.retention_name] + ([self.editor_name] if stage == 2 else [])
        for name in names:
            g += list(self.components[name].parameters())
        if self.stage_config(stage).get("train_generator", self.config.get("train_generator", True)):
            g += [p for n, p in self.generator.named_parameters() if not n.startswith("style.")]
        groups: dict[str, list[nn.Parameter]] = {}
        if "discriminator" in self.components and self._lambda(stage, "adv") > 0:
            groups["d"] = list(self.components["discriminator"].parameters())
        groups["g"] = g
        return groups

    # -- helpers ----------------------------------------------------------------------------------
    def _lambda(self, stage: int, name: str) -> float:
        return float(self.stage_config(stage).get("lambdas", {}).get(name, 0.0))

    def _rng(self) -> torch.Generator:
        rng = getattr(self, "train_generator", None)
        if rng is None:
            rng = torch.Generator().manual_seed(0)
        return rng

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        return _aux(self, "identity", x).embed(x)

    def _image_terms(self, target: torch.Tensor, outputs: Sequence[torch.Tensor], stage: int) -> dict[str, Any]:
        """L_lpips, L_rec, L_parse of the generated images against ``target`` (summed or averaged)."""
        k = 1.0 if self.sum_over_outputs else 1.0 / len(outputs)
        from .. import losses as L

        def lp():
            net = _aux(self, "lpips", target)
            return k * sum(L.lpips_loss(o, target, net) for o in outputs)

        def parse():
            parser = _aux(self, "parser", target)
            if parser is None:
                raise RuntimeError("the parse loss needs a face parser: set `parser:` in the config or its lambda to 0")
            ref = _parse_probs(parser, target).detach()
            return k * sum(L.mse_loss(_parse_probs(parser, o), ref) for o in outputs)

        return {
            "lpips": lp,  # HFORD eq. 8, DBAF eq. 12 / 33
            "rec": k * sum(L.l1_loss(o, target) for o in outputs),  # HFORD eq. 9, DBAF eq. 13 / 34
            "parse": parse,  # HFORD eq. 14, DBAF eq. 14 / 35
        }

    def latent_reference(self) -> torch.Tensor | None:
        """w_bar for L_reg; ``None`` = e4e's delta regulariser (HFORD eq. 15)."""
        return None

    def identity_terms(self, e_ori, e_ano, e_rec, e_err) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    # -- stage forward passes ---------------------------------------------------------------------
    def _mix_pass(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Stage 1 (DBAF eq. 5, 9; HFORD Fig. 5): identity of X_id, attributes + maps of X_attr.

        X_id is ``batch["image"]``; X_attr is X_id itself for about one row in three (the authors'
        code alternates same / shuffled pairs with ``cycle_num=3``) and ``batch["image_b"]`` otherwise.
        """
        x_id = batch["image"]
        b = x_id.shape[0]
        p_same = float(self.stage_config(1).get("same_pair_fraction", 1.0 / 3.0))
        same = torch.rand(b, generator=self._rng()) < p_same
        same_dev = same.to(x_id.device)
        x_attr = torch.where(same_dev[:, None, None, None], x_id, batch["image_b"])
        p_id = self.decompose(x_id)
        p_attr = self.decompose(x_attr)
        w_mix = p_id["identity"] + p_attr["attr"]  # eq. (5)
        x_mix = self.synthesize(w_mix, p_attr["maps"])  # eq. (9)
        return {"x_attr": x_attr, "x_mix": x_mix, "same": same_dev, "w": [w_mix]}

    def _backbone_pass(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Stage 0 (not in the papers): X -> e4e -> W+ C and maps -> StyleGAN2 -> X_rec, no CID / KRIA.

        With lambda ``rec_w`` > 0 the decoder also reconstructs from C alone (no maps), so that the
        codes carry the face as a pretrained e4e's do instead of leaving it all to the maps."""
        codes, feats = self.encode(batch["image"])
        out = {"x_rec": self.synthesize(codes, self.retention(feats)), "w": [codes]}
        if self._lambda(0, "rec_w") > 0:
            out["x_rec_w"] = self.generator.synthesize(codes, noise_mode="const")
        if self._lambda(0, "latent") > 0:
            # the encoder on the generator's own faces, whose codes are known: w = f(z) for random z,
            # repeated over the layers as e4e's codes nearly are; E(G(w)) must give w back
            n = batch["image"].shape[0]
            with torch.no_grad():
                z = torch.randn(n, self.generator.style_dim, generator=self._rng()).to(codes.device)
                w = self.generator.mapping(z).unsqueeze(1).expand(-1, self.generator.n_latent, -1)
                x_w = self.generator.synthesize(w, noise_mode="const")
            out["latent"] = (self.encode(x_w)[0], w)
        return out

    def _anonymization_pass(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Stage 2 (DBAF eq. 19-28; HFORD IV-A: 2 anonymization passwords, 3 recovery passwords).

        Keys P1, P2 anonymize X_ori; the recovery passes start from X_ano1 re-encoded (``recovery_input:
        image``, DBAF eq. 21-23: what a user holds) or from its latent code (``latent``: the authors' code
        and HFORD's text, I_hat with X_ori's A and maps) with P1 (-> X_rec) and two wrong keys (-> X_err).
        """
        x = batch["image"]
        b = x.shape[0]
        keys = random_key_latents(self.generator, 4 * b, self._rng()).view(4, b, *self._w_shape())
        p = self.decompose(x)
        w_ano1 = self.edit(p, keys[0])  # eq. (19)
        w_ano2 = self.edit(p, keys[1])  # eq. (20)
        x_ano1 = self.synthesize(w_ano1, p["maps"])  # eq. (24)
        x_ano2 = self.synthesize(w_ano2, p["maps"])  # eq. (25)
        if self.config.get("recovery_input", "image") == "image":
            q = self.decompose(x_ano1)
        else:
            q = {"attr": p["attr"], "identity": w_ano1 - p["attr"], "maps": p["maps"]}
        w_rec = self.edit(q, keys[0])  # eq. (21)
        w_err1 = self.edit(q, keys[2])  # eq. (22)
        w_err2 = self.edit(q, keys[3])  # eq. (23)
        x_rec = self.synthesize(w_rec, q["maps"])  # eq. (26)
        x_err1 = self.synthesize(w_err1, q["maps"])  # eq. (27)
        x_err2 = self.synthesize(w_err2, q["maps"])  # eq. (28)
        return {
            "ano": [x_ano1, x_ano2],
            "rec": x_rec,
            "err": [x_err1, x_err2],
            "w": [w_ano1, w_ano2, w_rec, w_err1, w_err2],
        }

    def _w_shape(self) -> tuple[int, int]:
        return self.generator.n_latent, self.generator.style_dim

    # -- protocol: losses -------------------------------------------------------------------------
    def compute_losses(self, stage: int, group: str, batch: dict[str, torch.Tensor], step: int):
        from .. import losses as L

        lambdas = dict(self.stage_config(stage).get("lambdas", {}))
        if stage > 0:
            self.encoder.eval()  # frozen e4e: its BatchNorm statistics must not follow the batch (authors: e4e.eval())
        if stage == 0:
            out = self._backbone_pass(batch)
            real, fakes = batch["image"], [out["x_rec"]]
        elif stage == 1:
            out = self._mix_pass(batch)
            real, fakes = out["x_attr"], [out["x_mix"]]
        else:
            out = self._anonymization_pass(batch)
            real, fakes = batch["image"], out["ano"] + [out["rec"]] + out["err"]

        if group == "d":  # HFORD eq. 16, DBAF eq. 16 / 37
            disc = self.components["discriminator"]
            real = real.detach().requires_grad_(True)
            real_pred = disc(real)
            k = 1.0 if (self.sum_over_outputs and stage == 2) else 1.0 / len(fakes)
            loss = k * sum(L.nonsaturating_d_loss(real_pred, disc(f.detach())) for f in fakes)
            logs = {"d_loss": float(loss.detach())}
            loss = L.add_lazy_r1(loss, logs, real_pred, real, self.stage_config(stage).get("r1"), step)
            logs["total"] = float(loss.detach())
            return loss, logs

        terms: dict[str, Any] = {}
        ref = self.latent_reference() if stage > 0 else None
        terms["reg"] = sum(L.latent_regularization_loss(w, ref) for w in out["w"]) / len(out["w"])  # eq. 15 / 36
        if stage == 0:  # e4e's objective (Tov et al.): reconstruction + delta regulariser (+ LPIPS, adversarial)
            terms.update(self._image_terms(batch["image"], fakes, stage))
            if "x_rec_w" in out:
                terms["rec_w"] = L.l1_loss(out["x_rec_w"], batch["image"])
            if "latent" in out:  # not in e4e: codes regressed on generated faces (re-encoding G's outputs)
                terms["latent"] = L.l1_loss(*out["latent"])
        elif stage == 1:
            target = out["x_attr"]
            e_mix, e_attr = self._embed(out["x_mix"]), self._embed(target).detach()
            dist = 1.0 - L.cosine_similarity(e_mix, e_attr)  # HFORD eq. 7, DBAF eq. 11
            st = self.stage_config(1)
            terms["c"] = L.identity_contrastive_loss(dist, out["same"], float(st.get("tau_pos", 0.0)), float(st.get("tau_neg", 0.5)))  # eq. 6 / 10
            terms.update(self._image_terms(target, fakes, stage))
        else:
            target = batch["image"]
            e_ori = self._embed(target).detach()
            e_ano = [self._embed(a) for a in out["ano"]]
            e_err = [self._embed(e) for e in out["err"]]
            e_rec = self._embed(out["rec"])
            id_terms = self.identity_terms(e_ori, e_ano, e_rec, e_err)
            terms["id"] = sum(id_terms.values())
            terms.update(self._image_terms(target, fakes, stage))
        if "discriminator" in self.components and float(lambdas.get("adv", 0)) > 0:
            disc = self.components["discriminator"]
            k = 1.0 if (self.sum_over_outputs and stage == 2) else 1.0 / len(fakes)
            terms["adv"] = k * sum(L.nonsaturating_g_loss(disc(f)) for f in fakes)  # eq. 17 / 38
        total, logs = L.weighted_sum(terms, lambdas)
        if stage == 2:
            logs.update({k2: float(v.detach()) for k2, v in id_terms.items()})
            with torch.no_grad():
                logs["cos_ano"] = float(L.cosine_similarity(e_ori, e_ano[0]).mean())
                logs["cos_rec"] = float(L.cosine_similarity(e_ori, e_rec).mean())
        return total, logs

    # -- protocol: samples ------------------------------------------------------------------------
    def sample_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Rows: input, reconstruction, anonymized (key 1), anonymized (key 2), recovered, wrong key."""
        x = batch["image"]
        b = x.shape[0]
        rng = torch.Generator().manual_seed(1234)
        keys = random_key_latents(self.generator, 3 * b, rng).view(3, b, *self._w_shape())
        ano = self.transform(x, keys[0]).clamp(-1, 1)
        return {
            "input": x,
            "reconstruction": self.reconstruct(x).clamp(-1, 1),
            "anonymized": ano,
            "anonymized_key2": self.transform(x, keys[1]).clamp(-1, 1),
            "recovered": self.transform(ano, keys[0]).clamp(-1, 1),
            "wrong_key": self.transform(ano, keys[2]).clamp(-1, 1),
        }


def _encoder_feature_channels(encoder: nn.Module) -> list[int]:
    """Channels of e4e's (c3, c2, c1) maps (coarse 16 px, medium 32 px, fine 64 px at 256): 512, 256, 128."""
    with torch.no_grad():
        x = torch.zeros(1, 3, 64, 64)
        was = encoder.training
        encoder.eval()
        c1, c2, c3 = encoder.backbone(x)
        encoder.train(was)
    return [c3.shape[1], c2.shape[1], c1.shape[1]]


# parse loss: identity-related parts only (HFORD eq. 14: "We only choose identity-related parts")
_IDENTITY_PARTS = ("brows", "eyes", "nose", "mouth", "lips")


def _parse_probs(parser: nn.Module, x: torch.Tensor) -> torch.Tensor:
    from ..nn.bisenet import class_ids

    ids = class_ids(_IDENTITY_PARTS)
    return torch.softmax(parser.logits(x), dim=1)[:, ids]


def _aux(method: Any, name: str, like: torch.Tensor):
    nets = getattr(method, "loss_nets", None)
    if nets is None:
        raise RuntimeError(f"{method.name}: training needs the loss networks; build the method with from_config")
    net = nets.get(name)
    if net is not None and next(net.parameters()).device != like.device:
        net.to(like.device)
    return net


def _build_loss_nets(config: dict[str, Any]) -> dict[str, nn.Module | None]:
    """Frozen networks the losses use: identity encoder (ArcFace / distilled), LPIPS, BiSeNet parser."""
    nets: dict[str, nn.Module | None] = {"identity": _load_identity_encoder(config), "lpips": None, "parser": None}
    lambdas = [st.get("lambdas", {}) for st in (config.get("stages") or {}).values()]
    if config.get("lpips") and any(float(l.get("lpips", 0)) > 0 for l in lambdas):
        from ..nn.lpips import load_lpips

        nets["lpips"] = load_lpips(config.get("lpips_net", "alex"), repo_id=config["lpips"])
    if config.get("parser") and any(float(l.get("parse", 0)) > 0 for l in lambdas):
        from ..hub import resolve_checkpoint
        from ..nn.bisenet import BiSeNet

        nets["parser"] = BiSeNet.from_pretrained(str(resolve_checkpoint(config["parser"])))
    for net in nets.values():
        if net is not None:
            net.eval().requires_grad_(False)
    return nets


def _load_identity_encoder(config: dict[str, Any]) -> nn.Module:
    """F_arc of the identity losses: ``config["identity_encoder"]`` (a converted ArcFace or the SFace-distilled
    encoder of ``python -m training.distill identity``) or, when null, a random tiny IR-SE (tests only)."""
    from ..nn.identity_encoder import load_identity_encoder

    return load_identity_encoder(config.get("identity_encoder"), config.get("model", {}).get("identity_random"))


# ------------------------------------------------------------------------------------------------
# The common method
# ------------------------------------------------------------------------------------------------


class StyleGANIdentityMethod(_TrainingMixin, NeuralMethod):
    """e4e -> (A, I) -> keyed edit of I -> StyleGAN2 with retained attribute maps.

    Components: ``encoder`` (e4e :class:`~zoo.nn.psp.Encoder4Editing`), ``generator``
    (:class:`~zoo.nn.stylegan2.Generator`), and the three method modules named by the class
    attributes ``disentangler_name`` (IDM / CID), ``retention_name`` (ARM / MAAR) and ``editor_name``
    (cMLPs / KRIA). Training adds ``discriminator``.

    anonymize_faces(x, keys) = recover_faces(x, keys): both papers use one mapping G(X, P) for
    anonymization and recovery (DBAF: X_rec = G(X_ano, P)); the keyed edit learned to undo itself
    with the same key.
    """

    reversible = True
    uses_key = True
    disentangler_name: ClassVar[str] = "disentangler"
    retention_name: ClassVar[str] = "retention"
    editor_name: ClassVar[str] = "editor"
    injection_mode: ClassVar[str] = "noise"

    # -- component access -----------------------------------------------------------------------
    @property
    def encoder(self) -> nn.Module:
        return self.components["encoder"]

    @property
    def generator(self) -> nn.Module:
        return self.components["generator"]

    @property
    def disentangler(self) -> IdentityDisentangler:
        return self.components[self.disentangler_name]

    @property
    def retention(self) -> AttributeRetention:
        return self.components[self.retention_name]

    @property
    def editor(self) -> KeyedIdentityEditor:
        return self.components[self.editor_name]

    def modules(self):
        """Every component plus, when built for training, the frozen loss networks."""
        nets = [m for m in (getattr(self, "loss_nets", None) or {}).values() if m is not None]
        return list(self.components.values()) + nets

    # -- building blocks of every pass ------------------------------------------------------------
    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """x [N,3,R,R] in [-1,1] -> (W+ code C = e4e codes + latent_avg [N, n_latent, d], feature maps)."""
        codes, feats = self.encoder.encode(x)
        return codes + self.encoder.latent_avg, feats

    def decompose(self, x: torch.Tensor) -> dict[str, Any]:
        """Encode and disentangle: {"codes": C, "attr": A, "identity": I, "maps": retention maps}."""
        codes, feats = self.encode(x)
        attr, ident = self.disentangler.split(codes)
        return {"codes": codes, "attr": attr, "identity": ident, "maps": self.retention(feats)}

    def synthesize(self, w_plus: torch.Tensor, maps: dict[int, torch.Tensor]) -> torch.Tensor:
        """StyleGAN2 with the retention maps injected (DBAF eq. 9/24, HFORD III-B) -> [N,3,R,R]."""
        return self.generator.synthesize(w_plus, injections=maps, noise_mode="const", injection_mode=self.injection_mode)

    def edit(self, parts: dict[str, Any], key: torch.Tensor) -> torch.Tensor:
        """Edited W+ code: C_hat = A + edit([I, P]) (DBAF eq. 19-23; HFORD: I_hat summed with A)."""
        return parts["attr"] + self.editor(parts["identity"], key)

    def transform(self, x: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        """G(X, P): one keyed pass (anonymization, or recovery when X is anonymized). [-1,1] in/out."""
        parts = self.decompose(x)
        return self.synthesize(self.edit(parts, key), parts["maps"])

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        """No edit: G(A + I) = G(C) with the retention maps (the "reconstruction" baseline)."""
        parts = self.decompose(x)
        return self.synthesize(parts["codes"], parts["maps"])

    def key_latents(self, keys: Sequence[KeyMaterial]) -> torch.Tensor:
        return key_latents(self.generator, keys)

    # -- DeidMethod -------------------------------------------------------------------------------
    def anonymize_faces(self, x: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        """Aligned faces [N,3,R,R] in [-1,1] -> anonymized faces, one key per row."""
        if len(keys) != x.shape[0]:
            raise ValueError(f"need one key per face: {len(keys)} keys for {x.shape[0]} faces")
        return self.transform(x, self.key_latents(keys)).clamp(-1, 1)

    def recover_faces(self, y: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        """Anonymized faces -> recovered faces: re-encode y and apply the same key's edit (DBAF eq. 21)."""
        return self.anonymize_faces(y, keys)

    def reconstruct_faces(self, x: torch.Tensor) -> torch.Tensor:
        """G(A + I) with the retention maps, no key edit: the evaluator's reconstruction reference."""
        return self.reconstruct(x).clamp(-1, 1)


class ReconstructionBaseline(DeidMethod):
    """A method's reconstruction G(C) = G(A + I) with its retention maps and *no* identity edit, run as if
    it were an anonymizer (``python -m training.evaluate --method zoo.methods.dbaf:DBAFReconstruction
    --local-dir DIR ...``). The evaluator now reports the same reconstruction for every method with
    ``reconstruct_faces`` in its own table; this wrapper keeps the earlier commands working."""

    reversible = False
    uses_key = False
    target: ClassVar[type] = StyleGANIdentityMethod

    def __init__(self, method: StyleGANIdentityMethod):
        super().__init__()
        self.method = method
        self.resolution = method.resolution

    @classmethod
    def from_pretrained(cls, repo_or_dir, *, revision: str | None = None) -> "ReconstructionBaseline":
        return cls(cls.target.from_pretrained(repo_or_dir, revision=revision))

    def modules(self):
        return self.method.modules()

    def to(self, device=None, dtype=None) -> "ReconstructionBaseline":
        super().to(device, dtype)
        self.method.to(device, dtype)
        return self

    def anonymize_faces(self, x: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        return self.method.reconstruct_faces(x)


# ------------------------------------------------------------------------------------------------
# Command line: the training losses of a stage, measured on held-out batches
# ------------------------------------------------------------------------------------------------


@torch.no_grad()
def cli(cls: type, argv: list[str] | None = None, extra: Any = None) -> None:
    """``python -m zoo.methods.<dbaf|hford> <command>``: the method's own commands (e.g. DBAF's
    ``convert-official``). Stage-loss analysis lives in ``python -m training.stage_losses``."""
    import argparse

    ap = argparse.ArgumentParser(prog=f"python -m zoo.methods.{cls.name}", epilog="stage losses: python -m training.stage_losses --method NAME ...")
    if extra is None:
        ap.parse_args(argv)
        ap.print_help()
        return
    sub = ap.add_subparsers(dest="cmd", required=True)
    extra(sub)
    args = ap.parse_args(argv)
    args.func(args)
