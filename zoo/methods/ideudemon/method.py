"""IDEudemon (Wen et al., "Divide and Conquer: a Two-Step Method for High Quality Face
De-identification with Model Explainability").

Pipeline on aligned face crops (tensors ``[N, 3, R, R]`` in [-1, 1]), equation numbers from the paper::

    Step I   (z_id, z_app, z_cam) = M.fit(X)                      eq. 1-2 (parametric head model M)
             z'_id = clip(z_id + n, -1, 1),  n ~ N(0, scale^2 I)   eq. 3 + Sec. 4.1 (noise from the key)
             X_p, M_p = M.render(z'_id, z_app, z_cam)              eq. 4
    Step II  X_l = VSA(X, X_p)                                     visual similarity assistance (Sec. 3.3)
             X' = G(X_l)                                           GFPGAN-style restorer (U-Net + StyleGAN2 prior + CS-SFT)

``M`` is a :class:`zoo.face3d.ParametricHeadModel`: the offline ``mesh`` backend (default) or the
paper's ``headnerf``. The noise ``n`` is ``key.normal(100)`` (Box-Muller on the zoo key material) times
``scale``, so an output is reproducible from (image, key, scale). The method is not reversible.

Visual similarity assistance: hair, accessories, background and body come from X, the face from X_p.
With a face parser (config ``face_parser``): styling mask (hair, hat, glasses, earrings, necklace)
and face mask from the parser on X and X_p. Without one (offline default): the landmark face
polygons of X and X_p (:mod:`zoo.face3d.mesh`)::

    X_l = S_X X + (1 - S_X) [F_p X_p + (1 - F_p) (K_X X + (1 - K_X) X_p)]

(S_X styling of X, F_p face of X_p, K_X = 1 - face of X). Where the new face does not cover the old
one, X_p fills the gap (white for HeadNeRF, whose background is white: the paper's "white gaps"; the
stretched surroundings for the mesh renderer). Not in the paper (config ``blend_output``, default
on): the restorer output is blended back into X outside the dilated union of both face regions, so
hair, background and clothing are carried over pixel-exactly.

Training (one stage, ``training/PROTOCOL.md``) on triplets (X, X_l, X') with X_l from the
*unperturbed* fit (so L_rec against X is meaningful):

    L_rec  = l1 ||X' - X||_1 + per ||phi(X') - phi(X)||_1       eq. 5 (VGG-19 conv1_2..conv5_4 pre-activation)
    L_adv  = adv softplus(-D(X'))                                eq. 6 (non-saturating, GFPGAN's wgan_softplus)
    L_comp = sum_ROI local softplus(-D_ROI(X'_ROI))
             + fs (0.5 ||Gram(psi_1) - Gram(psi_1^real)||_1 + ||Gram(psi_2) - ...||_1)   eq. 7 (GFPGAN's layer weights)
    L_id   = id (1 - cos(r_id(X'), r_id(X_l)))                   eq. 8
    total  = eq. 9; lambdas l1 0.1, per 2, adv 0.1, fs 200, id 5 as published; local 1 (GFPGAN, not given)

Discriminators (group ``d``): softplus losses for D and the three ROI discriminators, lazy R1 on D
(gamma 10 every 16 steps, GFPGAN). ROIs: left eye, right eye, mouth boxes from the fitted landmarks
(:func:`zoo.face3d.landmarks.component_boxes`), cut with :func:`zoo.nn.discriminators.crop_rois` to
80/80/120 px at 512 (scaled with R). Augmentation as the paper: horizontal flip and colour jitter.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Sequence

import numpy as np
import torch
from torch import nn

from ... import losses
from ...keys import KeyMaterial
from ...nn.ops import gaussian_blur, resize_images
from ...registry import register_method
from ..base import Control, NeuralMethod
from .modules import (
    FACE_CLASSES,
    FFHQ_PRIOR_LABEL,
    GUARD_SCALE_STEP,
    METHOD_NAME,
    RESTORER_LABEL,
    RESTORER_OFF_LABEL,
    ROI_NAMES,
    SCALE_DEFAULT,
    SCALE_MAX,
    STEP_ONE_LABEL,
    STYLING_CLASSES,
    dilate_mask,
    hybrid_image,
    id_noise,
)
from .restorer import FFHQPriorRestorer, SFacePerceptual, has_restorer


@register_method("ideudemon", default_repo="face-deid-zoo/ideudemon")
class IDEudemon(NeuralMethod):
    """IDEudemon on aligned crops; see the module docstring. Control: ``scale`` (noise std of eq. 3)."""

    name = METHOD_NAME
    summary = "Step I: fit a parametric head model, add key-seeded Gaussian noise to its 100-d ID code, re-render; Step II: keep hair/background, GFPGAN-style restorer."
    paper = "Wen et al., Divide and Conquer: a Two-Step Method for High Quality Face De-identification with Model Explainability (IDEudemon)"
    reversible = False
    uses_key = True
    controls = (
        Control(
            "scale", "float", SCALE_DEFAULT, 0.05, SCALE_MAX, help="std of the Gaussian noise on the ID code (paper: 0.2-0.3 recommended, 0.05-0.40 studied)"
        ),
    )
    component_names = ("restorer",)
    stages: ClassVar[tuple[int, ...]] = (1,)
    resolution = 512
    max_batch = 8
    #: privacy guard (zoo.guard): a face a recognizer still finds close is drawn again up to 3 times, each with
    #: new key noise and a larger ``scale`` (:meth:`guard_variant`)
    guard_variants: ClassVar[int] = 3

    train_generator: torch.Generator | None = None
    weights_label: str | None = None
    #: set by the trainer's loss calls: the restorer runs even when ``step2.enabled`` is false
    training_mode: bool = False

    def __init__(self, config: dict[str, Any], components: dict[str, nn.Module], extra: dict[str, torch.Tensor] | None = None):
        super().__init__(config, components, extra)
        backend = str(self.config.get("backend", "mesh"))
        step1 = dict(self.config.get("step1", {}) or {})
        self.noise_gain: torch.Tensor | None = None  # [id_dim] per-component gain on the key noise (mesh backend)
        self.texture_noise = "add"
        self.texture_max_angle = 1.5
        #: mesh backend: move the rendered features onto the coded geometry after the blend-back
        #: (``step1.register_features``, default off; the demo config says why it stays off with the FFHQ prior)
        self.register_features = False
        if backend == "mesh":
            from ...face3d import MeshHeadModel, ShapeSpace, TextureSpace, load_shape_space, load_texture_space

            if "shape_space.mean" in self.extra:
                space = ShapeSpace.from_tensors(self.extra, "shape_space.")
            else:
                space = load_shape_space(self.config.get("shape_space"))
                self.extra.update(space.tensors("shape_space."))
            texture = None
            if bool(step1.get("texture", True)):  # appearance is part of the identity unless a config turns it off
                if TextureSpace.has_tensors(self.extra, "texture_space."):
                    texture = TextureSpace.from_tensors(self.extra, "texture_space.")
                else:
                    texture = load_texture_space(self.config.get("texture_space"))
                    self.extra.update(texture.tensors("texture_space."))
            self.head_model = MeshHeadModel(space, feather=float(step1.get("feather", 0.01)), work_size=int(step1.get("work_size", 256)), texture=texture)
            gain = torch.full((self.head_model.id_dim,), float(step1.get("shape_gain", 1.0)))
            gain[self.head_model.shape_dim :] = float(step1.get("texture_gain", 1.0))
            self.noise_gain = gain
            self.texture_noise = str(step1.get("texture_noise", "add"))
            self.texture_max_angle = float(step1.get("texture_max_angle", 1.5))  # in units of pi/2
            self.register_features = bool(step1.get("register_features", False))
            if self.texture_noise not in ("add", "mix"):
                raise ValueError(f"step1.texture_noise must be 'add' or 'mix', not {self.texture_noise!r}")
        elif backend == "headnerf":
            from ...face3d.headnerf import HeadNeRFHeadModel

            if "headnerf" not in self.components:
                raise ValueError("ideudemon backend 'headnerf' needs a 'headnerf' component (python -m zoo.convert headnerf ...)")
            self.head_model = HeadNeRFHeadModel(
                self.components["headnerf"],
                iterations=int(step1.get("iterations", 300)),
                head_mask=self._parser_head_mask if "face_parser" in self.components else None,
            )
        else:
            raise ValueError(f"unknown ideudemon backend {backend!r} (mesh | headnerf)")
        step2 = dict(self.config.get("step2", {}) or {})
        #: the restorer's working size (``step2.size``, default the crop resolution): X_l is resized to it
        #: (antialiased) and G's output back to the crop size before the blend-back
        self.restorer_size = int(step2.get("size", self.resolution))
        #: ``step2.output`` when the restorer works below the crop size: ``replace`` (G's output, upsampled)
        #: or ``residual`` (X_l plus the upsampled change G makes at its size: X_l's own detail kept)
        self.restorer_output = str(step2.get("output", "replace"))
        if self.restorer_output not in ("replace", "residual"):
            raise ValueError(f"step2.output must be 'replace' or 'residual', not {self.restorer_output!r}")
        #: ``step2.cache_step1`` (training): Step I of each training face is computed once and kept
        self.cache_step1 = bool(step2.get("cache_step1", False))
        self._step1_cache: dict[bytes, tuple[torch.Tensor, torch.Tensor]] = {}
        #: ``step2.enabled`` (default true): whether anonymization runs the restorer; a checkpoint may ship
        #: one switched off (set ``method.use_restorer = True`` to run it)
        self.use_restorer = "restorer" in self.components and bool(step2.get("enabled", True))
        prior = step2.get("prior")
        if prior not in (None, "ffhq"):
            raise ValueError(f"step2.prior must be 'ffhq' or absent, not {prior!r}")
        #: ``step2.prior: ffhq``: Step II draws the face on the FFHQ prior (:class:`FFHQPriorRestorer`) in place of a restorer
        self.ffhq_prior = FFHQPriorRestorer(step2.get("key_style")) if prior == "ffhq" else None
        if bool(step2.get("demo", False)) and (self.ffhq_prior or "restorer" in self.components):
            self.weights_label = FFHQ_PRIOR_LABEL if self.ffhq_prior else RESTORER_LABEL if self.use_restorer else RESTORER_OFF_LABEL
        if "restorer" in self.components and next(self.components["restorer"].parameters()).dtype != torch.float32:
            self.components["restorer"] = self.components["restorer"].float()  # shipped in fp16, run in fp32
        vsa = dict(self.config.get("vsa", {}) or {})
        self.blend_output = bool(vsa.get("blend_output", True))
        self.blend_dilate = float(vsa.get("blend_dilate", 0.04))  # fraction of R
        self.blend_feather = float(vsa.get("blend_feather", 0.015))
        self._aux: dict[str, nn.Module | None] = {"vgg": None, "identity": None}
        self._cache: tuple[Any, ...] | None = None

    def modules(self):
        return list(self.components.values())

    @property
    def restorer(self) -> nn.Module:
        return self.components["restorer"]

    # ------------------------------------------------------------------ Step I (eq. 1-4)
    def _parser_head_mask(self, x: torch.Tensor) -> torch.Tensor:
        from ...nn.bisenet import region_mask

        return 1.0 - region_mask(self.components["face_parser"].parse(x), "background")

    def fit(self, x: torch.Tensor) -> tuple[torch.Tensor, Any, Any]:
        """eq. 1-2: ``x [N,3,R,R]`` in [-1,1] -> (z_id ``[N,100]``, z_app, z_cam)."""
        return self.head_model.fit(x)

    @staticmethod
    def perturb(z_id: torch.Tensor, noise: torch.Tensor, scale: float) -> torch.Tensor:
        """eq. 3 with the truncation of Sec. 4.1: ``clip(z_id + scale * noise, -1, 1)``."""
        return (z_id + float(scale) * noise.to(z_id)).clamp(-1.0, 1.0)

    def perturb_code(self, z_id: torch.Tensor, noise: torch.Tensor, scale: float) -> torch.Tensor:
        """eq. 3 on this backend's ID code (``noise`` standard normal ``[N, id_dim]``).

        HeadNeRF, or a mesh model without gains: :meth:`perturb`. Mesh backend: the shape part is eq. 3
        with its noise times ``step1.shape_gain``; the texture part (``step1.texture_noise``) is either
        eq. 3 times ``texture_gain`` (``add``) or a rotation in the plane of the input's code and a keyed
        random texture (``mix``)::

            z' = clip(cos(t) z + sin(t) n / 3, -1, 1),   t = min(texture_max_angle, texture_gain * scale) * pi / 2

        ``n / 3`` is one standard deviation per component in the code's 3-sigma units, i.e. a keyed
        random texture: ``t = 1`` (in units of pi/2) replaces the input's texture by it (a plausible
        face, where additive noise that large saturates the clipped code); ``t > 1`` also moves away
        from the input (``cos(t) < 0``), still keyed while ``t < 2``.
        """
        if self.noise_gain is None:
            return self.perturb(z_id, noise, scale)
        noise = noise.to(z_id)
        gain = self.noise_gain.to(z_id)
        k = getattr(self.head_model, "shape_dim", z_id.shape[1])
        if self.texture_noise == "add" or k == z_id.shape[1]:
            return self.perturb(z_id, noise * gain, scale)
        shape = self.perturb(z_id[:, :k], noise[:, :k] * gain[:k], scale)
        t = min(self.texture_max_angle, float(gain[k]) * float(scale)) * np.pi / 2
        tex = (float(np.cos(t)) * z_id[:, k:] + float(np.sin(t)) * noise[:, k:] / 3.0).clamp(-1.0, 1.0)
        return torch.cat([shape, tex], 1)

    def step_one(
        self, x: torch.Tensor, keys: Sequence[KeyMaterial] | None = None, scale: float = SCALE_DEFAULT, noise: torch.Tensor | None = None
    ) -> dict[str, Any]:
        """Step I + visual similarity assistance (no restorer).

        ``noise`` ``[N, 100]`` (standard normal) overrides the key-derived noise (training, tests).
        Returns ``x_p`` (render), ``x_l`` (hybrid), masks ``face_x``, ``face_p``, ``head`` ``[N,1,R,R]``,
        the ``keys`` (for Step II's keyed prior style), the codes ``z_id``, ``z_id_p``, ``app``, ``cam`` and
        ``landmarks`` ``[N, 68, 2]`` (or None).
        """
        z_id, app, cam = self.fit(x)
        if noise is None:
            if keys is None:
                raise ValueError("step_one needs keys or an explicit noise tensor")
            if len(keys) != x.shape[0]:
                raise ValueError(f"need one key per face: {len(keys)} keys for {x.shape[0]} faces")
            noise = id_noise(keys, z_id.shape[1])
        z_p = self.perturb_code(z_id, noise, scale)
        x_p, face_p = self.head_model.render(z_p, app, cam)  # eq. 4
        face_x = self.head_model.source_mask(app, cam) if hasattr(self.head_model, "source_mask") else self.head_model.face_mask(z_id, app, cam)
        x_l, masks = self.visual_similarity_assistance(x, x_p.to(x), face_x.to(x), face_p.to(x))
        codes = {"z_id": z_id, "z_id_p": z_p, "app": app, "cam": cam, "landmarks": self.head_model.landmarks(app, cam)}
        return {"x_p": x_p, "x_l": x_l, **masks, "keys": keys, **codes}

    def visual_similarity_assistance(self, x: torch.Tensor, x_p: torch.Tensor, face_x: torch.Tensor, face_p: torch.Tensor):
        """Hybrid X_l (Sec. 3.3): identity-agnostic areas of X, face of X_p. Returns (x_l, masks)."""
        parser = self.components.get("face_parser")
        styling = torch.zeros_like(face_x)
        if parser is not None:
            from ...nn.bisenet import region_mask

            lab_x, lab_p = parser.parse(x), parser.parse(x_p)
            styling = region_mask(lab_x, STYLING_CLASSES).to(x)
            face_x = region_mask(lab_x, FACE_CLASSES).to(x)
            face_p = region_mask(lab_p, FACE_CLASSES).to(x)
        x_l = hybrid_image(x, x_p, face_x, face_p, styling)
        r = x.shape[-1]
        head = gaussian_blur(dilate_mask(torch.maximum(face_x, face_p), int(round(self.blend_dilate * r))), self.blend_feather * r).clamp(0, 1)
        head = head * (1 - styling)
        return x_l, {"face_x": face_x, "face_p": face_p, "styling": styling, "head": head}

    # ------------------------------------------------------------------ Step II
    def restore(self, x_l: torch.Tensor, noise: list[torch.Tensor] | None = None, keys: Sequence[KeyMaterial] | None = None) -> torch.Tensor:
        """G(X_l) -> X': the GFPGAN-style restorer; its fixed noise buffers (deterministic) unless ``noise``
        (one ``[N, 1, r, r]`` map per style conv, e.g. :meth:`_train_noise`) is given. Without a restorer
        (:class:`IDEudemonStepOne`) X_l itself. With ``step2.prior: ffhq`` the FFHQ-prior face, unless the trained
        restorer is switched on (``use_restorer``) or trained; ``keys`` (one per row) pick the prior's keyed style."""
        if self.ffhq_prior is not None and not (self.use_restorer or self.training_mode):
            return self.ffhq_prior(x_l, keys)
        if "restorer" not in self.components or not (self.use_restorer or self.training_mode):
            return x_l
        r, s = x_l.shape[-1], self.restorer_size
        inp = resize_images(x_l, s)
        out = self.restorer(inp, return_rgb=False, randomize_noise=False, noise=noise)[0]
        if r != s and self.restorer_output == "residual":
            return x_l + resize_images(out - inp, r)
        return resize_images(out, r)

    def blend(self, y: torch.Tensor, x: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        return head * y + (1 - head) * x if self.blend_output else y

    # ------------------------------------------------------------------ DeidMethod
    def guard_variant(self, keys: Sequence[KeyMaterial], controls: dict[str, Any], number: int) -> tuple[list, dict[str, Any]]:
        """The guard's variant ``number``: key material derived from each face's key (new noise) and, stronger each
        time, ``scale`` + :data:`GUARD_SCALE_STEP` x ``number``, at most the paper's largest studied 0.40."""
        keys_n, ctl = super().guard_variant(keys, controls, number)
        if number > 0:
            ctl["scale"] = min(SCALE_MAX, float(ctl.get("scale", SCALE_DEFAULT)) + GUARD_SCALE_STEP * number)
        return keys_n, ctl

    def anonymize_faces(self, x: torch.Tensor, keys: Sequence[KeyMaterial], scale: float = SCALE_DEFAULT, **controls: Any) -> torch.Tensor:
        """Aligned faces ``[N,3,R,R]`` in [-1,1] -> de-identified faces, one key per row."""
        return self.step_two(x, self.step_one(x, keys, scale))

    def step_two(self, x: torch.Tensor, s1: dict[str, Any]) -> torch.Tensor:
        """Step II on a :meth:`step_one` result: restorer (when on), blend-back into ``x`` and, on the mesh
        backend with ``step1.register_features``, the features moved onto the coded geometry
        (:meth:`~zoo.face3d.MeshHeadModel.register_features`, inside the blend mask). ``[N,3,R,R]`` in [-1,1]."""
        y = self.blend(self.restore(s1["x_l"], keys=s1.get("keys")), x, s1["head"]).clamp(-1, 1)
        if self.register_features:
            y = self.head_model.register_features(y, s1["z_id_p"], s1["app"], s1["cam"], s1["head"]).clamp(-1, 1)
        return y

    # ------------------------------------------------------------------ training protocol
    @classmethod
    def build_components(cls, config: dict[str, Any]) -> dict[str, nn.Module]:
        """Random-init (or pretrained, when the config names them) components for training."""
        from ...hub import resolve_checkpoint
        from ...nn.discriminators import FacialComponentDiscriminator
        from ...nn.gfpgan import GFPGANv1Clean, StyleGAN2GeneratorClean
        from ...nn.stylegan2_discriminator import Discriminator

        res = int((config.get("step2", {}) or {}).get("size", config.get("resolution", cls.resolution)))
        m = dict(config.get("model", {}) or {})
        pre = dict(config.get("pretrained", {}) or {})
        if pre.get("restorer"):
            restorer = GFPGANv1Clean.from_pretrained(str(resolve_checkpoint(pre["restorer"])))
            if restorer.log_size != int(np.log2(res)):
                raise ValueError(f"pretrained restorer works at {2**restorer.log_size} px, config resolution is {res}")
        else:
            restorer = GFPGANv1Clean(out_size=res, **(m.get("restorer") or {}))
            if pre.get("decoder"):
                dec = StyleGAN2GeneratorClean.from_pretrained(str(resolve_checkpoint(pre["decoder"])))
                restorer.stylegan_decoder.load_state_dict(dec.state_dict(), strict=True)
        if bool((m.get("restorer") or {}).get("fix_decoder", False)):
            restorer.stylegan_decoder.requires_grad_(False)
        comps: dict[str, nn.Module] = {"restorer": restorer}
        if pre.get("discriminator"):
            comps["discriminator"] = Discriminator.from_pretrained(str(resolve_checkpoint(pre["discriminator"])))
        else:
            comps["discriminator"] = Discriminator(size=res, **(m.get("discriminator") or {}))
        for roi in ROI_NAMES:
            comps[f"d_{roi}"] = FacialComponentDiscriminator(**(m.get("component_discriminator") or {}))
        if config.get("face_parser"):
            from ...nn.bisenet import BiSeNet

            comps["face_parser"] = BiSeNet.from_pretrained(str(resolve_checkpoint(config["face_parser"]))).eval().requires_grad_(False)
        if config.get("backend") == "headnerf":
            from ...nn.headnerf import HeadNeRF

            if not pre.get("headnerf"):
                raise ValueError("backend 'headnerf' needs pretrained.headnerf (a converted HeadNeRF folder)")
            comps["headnerf"] = HeadNeRF.from_pretrained(str(resolve_checkpoint(pre["headnerf"]))).eval().requires_grad_(False)
        return comps

    @classmethod
    def variant_for(cls, config: dict[str, Any]) -> type:
        """:class:`IDEudemonStepOne` for a config with ``step2: {restorer: false}``, else the full method."""
        return IDEudemonStepOne if not has_restorer(config) else cls

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "IDEudemon":
        target = cls.variant_for(config)
        if target is not cls:
            return target.from_config(config)
        method = cls(dict(config), cls.build_components(config))
        method._load_aux()
        return method

    def _lambdas(self) -> dict[str, float]:
        return {k: float(v) for k, v in (self.config.get("stages", {}).get(1, {}).get("lambdas", {}) or {}).items()}

    def _load_aux(self) -> None:
        """Training-only frozen networks (not saved): VGG-19 for eq. 5, ArcFace r_id for eq. 8."""
        from ...nn.identity_encoder import load_identity_encoder
        from ...nn.vgg import VGG19Features, load_vgg19

        lam = self._lambdas()
        if lam.get("per", 0.0):
            spec = dict(self.config.get("perceptual", {}) or {})
            if spec.get("net") == "sface":  # demo: SFace-torch feature maps (no VGG weights offline)
                vgg = SFacePerceptual(spec.get("layers"))
            elif spec.get("repo"):
                vgg = load_vgg19(spec["repo"], spec.get("revision"))
            else:  # random trunk: tiny configs / tests only (documented in the config)
                vgg = VGG19Features(width=float(spec.get("width", 1.0)))
            self._aux["vgg"] = vgg.eval().requires_grad_(False)
        if lam.get("id", 0.0):
            ident = load_identity_encoder(self.config.get("identity_encoder"), (self.config.get("model", {}) or {}).get("identity"))
            self._aux["identity"] = ident.eval().requires_grad_(False)

    def _aux_net(self, name: str, device: torch.device) -> nn.Module:
        net = self._aux[name]
        if net is None:
            raise RuntimeError(f"ideudemon: the {name} network is not loaded (its lambda is 0 in the config)")
        if next(net.parameters()).device != torch.device(device):
            # a copy: these frozen networks can be the process's shared instances (load_sface), which other
            # callers expect to stay where they were loaded
            self._aux[name] = net = copy.deepcopy(net).to(device)
        return net

    def trainable_parameters(self, stage: int) -> dict[str, list[nn.Parameter]]:
        if stage != 1:
            raise ValueError(f"ideudemon has stages {self.stages}, not {stage}")
        c = self.components
        g = [p for p in c["restorer"].parameters()]
        if bool((self.config.get("model", {}).get("restorer") or {}).get("fix_decoder", False)):
            frozen = {id(p) for p in c["restorer"].stylegan_decoder.parameters()}
            g = [p for p in g if id(p) not in frozen]
        d = list(c["discriminator"].parameters())
        if self._lambdas().get("local", 0.0) or self._lambdas().get("fs", 0.0):
            for roi in ROI_NAMES:
                d += list(c[f"d_{roi}"].parameters())
        return {"g": g, "d": d}

    def _augment(self, x: torch.Tensor) -> torch.Tensor:
        """Horizontal flip (p = 0.5) and colour jitter (GFPGAN: p = 0.3, shift 20/255 per channel), Sec. 4.1."""
        return self._augment_pair(x, x, torch.zeros(x.shape[0], 3, 4, device=x.device))[0]

    def _triplet(self, batch: dict[str, torch.Tensor], step: int) -> dict[str, Any]:
        """(X, X_l from the unperturbed fit, component boxes), computed once per step and batch."""
        key = (step, batch["image"].data_ptr(), tuple(batch["image"].shape))
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        if self.cache_step1:
            out = self._cached_triplet(batch["image"])
            self._cache = (key, out)
            return out
        with torch.no_grad():
            x = self._augment(batch["image"])
            s1 = self.step_one(x, noise=torch.zeros(x.shape[0], self.head_model.id_dim), scale=0.0)
        out = {"x": x, "x_l": s1["x_l"].detach(), "boxes": self._boxes(s1["landmarks"], x)}
        self._cache = (key, out)
        return out

    def _cached_triplet(self, images: torch.Tensor) -> dict[str, Any]:
        """``step2.cache_step1``: Step I (scale 0) once per training face (keyed by its pixels), then the
        paper's augmentation applied to the pair (X, X_l) alike: the same flip (eye boxes swapped) and
        the same colour shift on both."""
        rows = [img.detach().cpu().numpy().tobytes() for img in images]
        todo = [i for i, k in enumerate(rows) if k not in self._step1_cache]
        if todo:
            with torch.no_grad():
                xs = images[todo]
                s1 = self.step_one(xs, noise=torch.zeros(len(todo), self.head_model.id_dim), scale=0.0)
                boxes = self._boxes(s1["landmarks"], xs)
            for j, i in enumerate(todo):
                self._step1_cache[rows[i]] = (s1["x_l"][j].detach().cpu(), boxes[j].cpu())
        x_l = torch.stack([self._step1_cache[k][0] for k in rows]).to(images)
        boxes = torch.stack([self._step1_cache[k][1] for k in rows]).to(images)
        x, x_l, boxes = self._augment_pair(images, x_l, boxes)
        return {"x": x, "x_l": x_l, "boxes": boxes}

    def _augment_pair(self, x: torch.Tensor, x_l: torch.Tensor, boxes: torch.Tensor):
        """The augmentation of :meth:`_augment` applied alike to X, X_l and the component boxes ``[N,3,4]``."""
        aug = dict(self.config.get("augment", {}) or {})
        g = self.train_generator if self.train_generator is not None else torch.Generator().manual_seed(0)
        n, r = x.shape[0], x.shape[-1]
        if aug.get("hflip", True):
            flip = (torch.rand(n, generator=g) < 0.5).to(x.device)
            fb = torch.stack([r - boxes[..., 2], boxes[..., 1], r - boxes[..., 0], boxes[..., 3]], -1)[:, [1, 0, 2]]
            x = torch.where(flip.view(n, 1, 1, 1), x.flip(-1), x)
            x_l = torch.where(flip.view(n, 1, 1, 1), x_l.flip(-1), x_l)
            boxes = torch.where(flip.view(n, 1, 1), fb, boxes)
        p, shift = float(aug.get("color_jitter_prob", 0.3)), float(aug.get("color_jitter_shift", 20.0))
        if p > 0 and shift > 0:
            on = (torch.rand(n, generator=g) < p).to(x)
            delta = on.view(n, 1, 1, 1) * ((torch.rand(n, 3, generator=g) * 2 - 1).to(x) * (2 * shift / 255.0)).view(n, 3, 1, 1)
            x, x_l = (x + delta).clamp(-1, 1), (x_l + delta).clamp(-1, 1)
        return x, x_l, boxes

    def _boxes(self, lms: Any, x: torch.Tensor) -> torch.Tensor:
        from ...face3d.landmarks import component_boxes

        r = x.shape[-1]
        if lms is None:  # backend without landmarks: the FFHQ template positions
            from ...alignment import ffhq_template

            t = ffhq_template(r)
            boxes = np.tile(
                np.array(
                    [
                        [t[0, 0] - 0.08 * r, t[0, 1] - 0.08 * r, t[0, 0] + 0.08 * r, t[0, 1] + 0.08 * r],
                        [t[1, 0] - 0.08 * r, t[1, 1] - 0.08 * r, t[1, 0] + 0.08 * r, t[1, 1] + 0.08 * r],
                        [t[3:, 0].mean() - 0.12 * r, t[3:, 1].mean() - 0.12 * r, t[3:, 0].mean() + 0.12 * r, t[3:, 1].mean() + 0.12 * r],
                    ]
                ),
                (x.shape[0], 1, 1),
            )
        else:
            boxes = np.stack([component_boxes(lm, r) for lm in lms])  # [N, 3, 4]
        return torch.as_tensor(boxes, dtype=x.dtype, device=x.device)

    def _rois(self, images: torch.Tensor, boxes: torch.Tensor) -> dict[str, torch.Tensor]:
        from ...nn.discriminators import crop_rois

        r = images.shape[-1]
        n = images.shape[0]
        sizes = {"left_eye": max(16, round(80 * r / 512)), "right_eye": max(16, round(80 * r / 512)), "mouth": max(24, round(120 * r / 512))}
        idx = torch.arange(n, device=images.device, dtype=images.dtype).view(n, 1)
        return {roi: crop_rois(images, torch.cat([idx, boxes[:, i]], 1), sizes[roi]) for i, roi in enumerate(ROI_NAMES)}

    def _train_noise(self, n: int, device: torch.device) -> list[torch.Tensor]:
        dec = self.restorer.stylegan_decoder
        g = self.train_generator if self.train_generator is not None else torch.Generator().manual_seed(0)
        return [torch.randn(n, 1, 2 ** ((i + 5) // 2), 2 ** ((i + 5) // 2), generator=g).to(device) for i in range(dec.num_layers)]

    def compute_losses(self, stage: int, group: str, batch: dict[str, torch.Tensor], step: int):
        if stage != 1:
            raise ValueError(f"ideudemon has stages {self.stages}, not {stage}")
        self.training_mode = True
        for name in ("face_parser", "headnerf"):
            if name in self.components:
                self.components[name].eval()
        lam = self._lambdas()
        t = self._triplet(batch, step)
        x, x_l, boxes = t["x"], t["x_l"], t["boxes"]
        use_comp = bool(lam.get("local", 0.0) or lam.get("fs", 0.0))
        if group == "d":
            with torch.no_grad():
                fake = self.restore(x_l, self._train_noise(x.shape[0], x.device))
            disc = self.components["discriminator"]
            real = x.detach().requires_grad_(True)
            real_pred = disc(real)
            loss = losses.nonsaturating_d_loss(real_pred, disc(fake))  # eq. 6, discriminator side
            logs = {"d": float(loss.detach())}
            if use_comp:
                rr, rf = self._rois(x, boxes), self._rois(fake, boxes)
                comp = sum(losses.nonsaturating_d_loss(self.components[f"d_{k}"](rr[k])[0], self.components[f"d_{k}"](rf[k])[0]) for k in ROI_NAMES)
                loss = loss + comp
                logs["d_comp"] = float(comp.detach())
            loss = losses.add_lazy_r1(loss, logs, real_pred, real, self.config["stages"][1].get("r1"), step)
            logs["total"] = float(loss.detach())
            return loss, logs

        out = self.restore(x_l, self._train_noise(x.shape[0], x.device))  # X'
        terms: dict[str, Any] = {
            "l1": lambda: losses.l1_loss(out, x),  # eq. 5, first term
            "per": lambda: self._aux_net("vgg", x.device).perceptual_loss(out, x),  # eq. 5 (GFPGAN's layer weights)
            "adv": lambda: losses.nonsaturating_g_loss(self.components["discriminator"](out)),  # eq. 6
        }
        if use_comp:
            rf, rr = self._rois(out, boxes), self._rois(x, boxes)
            fake_out = {k: self.components[f"d_{k}"](rf[k], return_feats=True) for k in ROI_NAMES}
            with torch.no_grad():
                real_feats = {k: self.components[f"d_{k}"](rr[k], return_feats=True)[1] for k in ROI_NAMES}
            terms["local"] = lambda: sum(losses.nonsaturating_g_loss(fake_out[k][0]) for k in ROI_NAMES)  # eq. 7, first term
            terms["fs"] = lambda: sum(  # eq. 7, second term (GFPGAN's weights 0.5 / 1 for the two feature levels)
                0.5 * losses.l1_loss(losses.gram_matrix(fake_out[k][1][0]), losses.gram_matrix(real_feats[k][0]))
                + losses.l1_loss(losses.gram_matrix(fake_out[k][1][1]), losses.gram_matrix(real_feats[k][1]))
                for k in ROI_NAMES
            )
        terms["id"] = lambda: losses.identity_cosine_loss(  # eq. 8: identity of X' follows X_l
            self._aux_net("identity", x.device).embed(out), self._aux_net("identity", x.device).embed(x_l).detach()
        )
        return losses.weighted_sum(terms, lam)  # eq. 9

    @torch.no_grad()
    def sample_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = batch["image"]
        n = x.shape[0]
        g = self.train_generator if self.train_generator is not None else torch.Generator().manual_seed(0)
        noise = torch.randn(n, self.head_model.id_dim, generator=g)
        s0 = self.step_one(x, noise=torch.zeros_like(noise), scale=0.0)
        s1 = self.step_one(x, noise=noise, scale=0.25)
        return {
            "input": x,
            "fit_render": s0["x_p"].clamp(-1, 1),
            "restored_fit": self.blend(self.restore(s0["x_l"]), x, s0["head"]).clamp(-1, 1),
            "hybrid_0.25": s1["x_l"].clamp(-1, 1),
            "anonymized_0.25": self.blend(self.restore(s1["x_l"]), x, s1["head"]).clamp(-1, 1),
        }


class IDEudemonStepOne(IDEudemon):
    """IDEudemon without Step II's restorer (config ``step2: {restorer: false}``): Step I (fit, keyed
    noise on the shape + texture identity code, re-render), visual similarity assistance and the
    blend-back. The checkpoint holds no network, only the config and the shape / texture spaces, so it
    runs offline on any CPU; the face is the parametric re-render (low detail), not a restored photo."""

    component_names: ClassVar[tuple[str, ...]] = ()
    demo: ClassVar[bool] = True
    weights_label: ClassVar[str] = STEP_ONE_LABEL

    @classmethod
    def build_components(cls, config: dict[str, Any]) -> dict[str, nn.Module]:
        comps: dict[str, nn.Module] = {}
        if config.get("face_parser"):
            from ...hub import resolve_checkpoint
            from ...nn.bisenet import BiSeNet

            comps["face_parser"] = BiSeNet.from_pretrained(str(resolve_checkpoint(config["face_parser"]))).eval().requires_grad_(False)
        return comps

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "IDEudemonStepOne":
        return cls(dict(config), cls.build_components(config))

    def trainable_parameters(self, stage: int):
        raise ValueError("this IDEudemon checkpoint has no restorer to train (config step2.restorer is false)")
