"""The demo tier: a paper's keyed identity transform run on the identity code of a face's GAN latent.

Paper-scale weights (StyleGAN2-FFHQ + e4e, ArcFace) are not reachable offline, so each reversible method
ships a checkpoint whose keyed transform T (in the method file) was trained here on CPU on 100-d codes
u ~ N(0, I). It runs in one of two latent spaces (config ``latent_space``)::

    code   = invert(X)                     the backbone's inversion of the aligned face
    u      = identity(code)                the 100-d identity code
    u_anon = c T(u, key)                   the keyed code (carried)
    X_anon = G(with_identity(code, d(u_anon)))
    X_rec  = G(with_identity(invert(X_anon), T^-1(u_anon / c, key)))   u_anon: carried in the saved image's
                                           low bits (zoo.carrier) where intact, else read from invert(X_anon)

* ``wplus`` (the shipped default): :class:`WPlusLatents`, the FFHQ-grade generator (:mod:`zoo.nn.mobilestylegan`),
  256 px FFHQ-aligned crops. code = W+ ``[N,23,512]`` from the W+ encoder + ``refine_steps`` Adam steps;
  identity = the whitened, pose-neutral identity code of the middle slots
  (:mod:`zoo.nn.wplus_identity`). Pose, expression, hair and lighting stay; the identity changes; recovery
  takes what the face keeps from the saved image and the identity from the key. c = 1
  (``wplus.code_scale``): at 1.4 the faces lost their expression and some broke up. d (``wplus.code_norm`` R) turns
  u_anon to norm R: real faces' inversions lie near the average face (|u| about 4.5, generated faces 10), where a
  norm-keeping T draws one look for every key; the carrier keeps u_anon (sealed), so the key undoes it exactly; pixels
  alone are read at ``wplus.read_norm``. Without ``code_norm`` d is the identity. The identity edit
  also moves the pose slots: with ``wplus.keep_pose`` X_anon is drawn from the edited code turned back to
  the input's face-mesh yaw (:meth:`WPlusLatents.posed`); the carried code is the unturned one, so the key
  still undoes it exactly. Off in the shipped checkpoints: the head pose follows (held-out dlib yaw change
  median 4.7-6.6 degrees against 5.4-10.2), but the guard recognizers put the tuning faces closer to their
  originals (``dbaf`` SFace distance median 0.789 -> 0.778, FaceRes 0.496 -> 0.446; ``docs/generator.md``).
* ``dcgan``: the packaged 64 px DCGAN (:mod:`zoo.nn.dcgan`); code = z ``[N,100]`` is the identity code
  itself (one entangled code: pose and expression are not kept). Small and fast: the tests use it.
  c (config ``anonymized_code_scale``): the DCGAN inversion encoder returns codes of norm ~5.8 for faces the
  DCGAN drew from N(0, I) at norm ~10; a transform that keeps the norm then draws every anonymized face
  near the mean face, where two keys' faces look alike (dbaf, 60 faces x 4 keys: dlib called 0.28 of key
  pairs the same person, against 0.16 for two random draws). c = 10.0 / 5.82 puts it where the generator
  draws faces (pairs 0.14); a re-inverted code comes back at norm ~5.8 and is used as it is.

Images are aligned crops ``[N,3,R,R]`` in [-1,1] (R = 256 on W+, 64 on the DCGAN). Where a paper works on
an identity code separated from attributes, u plays that code, and the method file says so.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, ClassVar, Sequence

import torch

from ..keys import KeyMaterial
from ..nn.dcgan import LATENT_DIM, DCGANGenerator, InversionEncoder, invert
from .base import NeuralMethod
from .fit_controls import ENCODER_ONLY, FACE_FIT_CONTROL, FIT_CONTROLS, IDENTITY_CHECK_CONTROL, IDENTITY_REFINE_CONTROL, REFINE_CONTROL, InversionFit
from .wplus_latents import WPlusLatents, at_norm

__all__ = [
    "LatentDemoMethod",
    "KeyedInvolutionDemo",
    "DEMO_LABEL",
    "REFINE_CONTROL",
    "IDENTITY_REFINE_CONTROL",
    "IDENTITY_CHECK_CONTROL",
    "FACE_FIT_CONTROL",
    "FIT_CONTROLS",
]

DEMO_LABEL = "demo: 64 px, trained here on synthetic faces (packaged DCGAN backbone); not the paper's weights"


def _checked_space(space: Any) -> str:
    """``space`` as a latent-space name ("dcgan" or "wplus"); anything else is refused."""
    if str(space) not in ("dcgan", "wplus"):
        raise ValueError(f"latent_space must be 'dcgan' or 'wplus', got {space!r}")
    return str(space)


class LatentDemoMethod(NeuralMethod):
    """Base of the demo-tier methods: components ``generator`` (packaged DCGAN, config only) and ``encoder`` (its
    inversion encoder), loaded only on the DCGAN tier (:meth:`deferred_components`); subclasses add their keyed
    transform's network, where it has one.

    Subclasses implement :meth:`edit_latent` and :meth:`unedit_latent` (the paper's keyed transform and
    its inverse on a 100-d identity code) and list ``controls`` (ending with :data:`FIT_CONTROLS`).
    The code lives in one of two latent spaces (config ``latent_space``): ``dcgan`` (the 64 px DCGAN's z is
    the identity code) or ``wplus`` (:class:`WPlusLatents`: the identity code of a W+ latent of the
    FFHQ-grade generator, 256 px, everything else of the face kept).
    """

    component_names: ClassVar[tuple[str, ...]] = ("generator", "encoder")
    resolution = 64
    demo: ClassVar[bool] = True
    carries_latent: ClassVar[bool] = True
    #: privacy guard (zoo.guard): up to 3 more key variants for a face SFace still finds close
    #: (benchmarks/privacy_guard.py, docs/privacy_guard.md)
    guard_variants: ClassVar[int] = 3
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

    @property
    def latent_space(self) -> str:
        return _checked_space(self.config.get("latent_space", "dcgan"))

    @classmethod
    def deferred_components(cls, config: dict[str, Any]) -> tuple[str, ...]:
        """On W+ the DCGAN ``generator`` and its inversion ``encoder`` are not used: they load only if the method is
        switched to the DCGAN tier (:meth:`use_latent_space`)."""
        return ("generator", "encoder") if _checked_space(config.get("latent_space", "dcgan")) == "wplus" else ()

    def __init__(self, config: dict[str, Any], components: dict[str, torch.nn.Module], extra: dict[str, torch.Tensor] | None = None):
        super().__init__(config, components, extra)
        if self.latent_space == "wplus":
            self.resolution = WPlusLatents.resolution
        else:
            self._build_dcgan_backbone()

    def _build_dcgan_backbone(self) -> None:
        """The DCGAN ``generator`` + ``encoder`` where they were not loaded (:meth:`deferred_components`): from the
        checkpoint the method was loaded from, else :meth:`backbone_components`; on the method's device, frozen."""
        missing = [n for n in ("generator", "encoder") if n not in self.components]
        if not missing:
            return
        from ..hub import load_component

        built = None if self.checkpoint_folder is not None else self.backbone_components(self.config)
        for name in missing:
            module = load_component(self.checkpoint_folder, name) if built is None else built[name]
            self.components[name] = module.to(device=self.device, dtype=self.dtype).eval().requires_grad_(False)

    def use_latent_space(self, space: str) -> "LatentDemoMethod":
        """Run the keyed transform in ``space`` ("wplus": 256 px FFHQ-grade generator; "dcgan": 64 px)."""
        self.config["latent_space"] = _checked_space(space)
        self.resolution = WPlusLatents.resolution if space == "wplus" else 64
        if space == "dcgan":
            self._build_dcgan_backbone()
        self.__dict__.pop("_wplus", None)
        self.__dict__.pop("_code_cache", None)
        return self

    @property
    def wplus(self) -> WPlusLatents | None:
        """The W+ latent space (None on the DCGAN), built on first use."""
        if self.latent_space != "wplus":
            return None
        if "_wplus" not in self.__dict__:
            self._wplus = WPlusLatents((self.config.get("wplus") or {}).get("pose_angles"))
        return self._wplus

    def identity_code(self, code: torch.Tensor) -> torch.Tensor:
        """The 100-d identity code the keyed transform edits: z itself on the DCGAN, u of a W+ code."""
        return code if self.wplus is None else self.wplus.identity.code(code)

    def with_identity(self, code: torch.Tensor, u: torch.Tensor, keys: Sequence[KeyMaterial] | None = None, inverse: bool = False, **edit: Any):
        """``code`` with its identity code replaced by ``u`` (on the DCGAN: ``u`` itself). On W+ with ``keys``, the
        rest of the identity slots is rotated with each face's key (``inverse``: back, for the recovery). ``edit``:
        :meth:`~zoo.nn.wplus_identity.WPlusIdentity.with_code`'s ``deviation_slots``, ``coarse`` and ``mouth``, for a
        code drawn with another edit (:func:`~zoo.nn.wplus_identity.carried_edit`)."""
        if self.wplus is None:
            return u
        rot = self.wplus.rotations(keys, self.name) if keys is not None else (None, None)
        return self.wplus.identity.with_code(code, u, *rot, inverse=inverse, **edit)

    @property
    def identity_steps(self) -> int:
        """Steps of the identity-aware refinement (config ``identity_steps``, default 40; :data:`IDENTITY_CHECK_CONTROL`)."""
        return int(self.config.get("identity_steps", 40))

    def encode(self, x: torch.Tensor, fit: InversionFit = ENCODER_ONLY) -> torch.Tensor:
        """Aligned faces ``[N,3,R,R]`` in [-1,1] -> codes (z ``[N,100]`` on the DCGAN, W+ ``[N,23,512]``).

        The inversion encoder, then ``fit.refine_steps`` refinement steps. On W+ the identity term (weight
        ``fit.identity_weight``) and the face-region term (``fit.face_fit``) join every step. On the DCGAN the
        steps are pixel (L1) steps; then, with ``identity_refine`` w > 0, every face whose reconstruction SFace
        puts below ``identity_check`` cosine to the input (:data:`IDENTITY_CHECK_CONTROL`; 0 = none, 1 = all)
        is inverted again from the encoder's code with :attr:`identity_steps` steps that add SFace's identity
        term at weight w (:func:`~zoo.nn.dcgan.refine_latent`)."""
        if x.shape[-1] != self.resolution:
            raise ValueError(f"{self.name} (demo) works on {self.resolution} px crops, got {tuple(x.shape)}")
        if self.wplus is not None:
            return self.wplus.encode(x, fit.refine_steps, fit.identity_weight, fit.face_fit)
        if fit.face_fit not in (0.0, FACE_FIT_CONTROL.default):  # the default is the W+ tier's; the DCGAN has no face term
            raise ValueError(f"face_fit works on the W+ tier only ({self.name} runs on the 64 px DCGAN here)")
        generator = self.components["generator"]
        z = invert(generator, self.components["encoder"], x, fit.refine_steps)
        check, weight = fit.identity_check, fit.identity_refine
        if weight <= 0 or check <= 0 or self.identity_steps <= 0:
            return z
        from ..nn.sface import load_sface

        far = torch.ones(x.shape[0], dtype=torch.bool, device=x.device) if check >= 1 else self.identity_fit(x, z) < check
        if far.any():
            z = z.clone()
            # from the encoder's code again: continuing from the pixel fit left real faces further away (benchmarks/photo_recovery.py,
            # dbaf, 7 faces, 1 key: recovery closer 5/7 and mean dlib distance 0.655 continuing, 7/7 and 0.593 from the encoder's code)
            z[far] = invert(
                generator, self.components["encoder"], x[far], self.identity_steps, identity=load_sface(x.device).embed_aligned, identity_weight=weight
            )
        return z

    def inversion_fit(self, refine_steps: int, identity_refine: float | None, identity_check: float | None, face_fit: float) -> InversionFit:
        """The fit controls of one call as an :class:`InversionFit`, None replaced by this method's control defaults."""
        defaults = {c.name: c.default for c in self.controls}
        weight = defaults.get("identity_refine", 0.0) if identity_refine is None else identity_refine
        check = defaults.get("identity_check", 0.0) if identity_check is None else identity_check
        return InversionFit(refine_steps, weight, check, face_fit)

    @torch.no_grad()
    def identity_fit(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """SFace cosine ``[N]`` in [-1, 1] between aligned faces ``x`` ``[N,3,64,64]`` and their fits G(z)."""
        from ..nn.sface import load_sface

        sface = load_sface(x.device)
        return (sface.embed_aligned(self.decode(z)) * sface.embed_aligned(x)).sum(1)

    def drawn_code(self, x: torch.Tensor, code_anon: torch.Tensor) -> torch.Tensor:
        """The code an anonymized face is drawn from: ``code_anon``, on W+ with ``wplus.keep_pose`` turned to the yaw
        of the input faces ``x`` (:meth:`WPlusLatents.posed`)."""
        keep = self.wplus is not None and bool((self.config.get("wplus") or {}).get("keep_pose", False))
        return self.wplus.posed(x, code_anon) if keep else code_anon

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """A code (z ``[N,100]`` or W+ ``[N,23,512]``) -> faces ``[N,3,R,R]`` in about [-1,1]."""
        return self.components["generator"](z) if self.wplus is None else self.wplus.decode(z)

    # ------------------------------------------------------------------ the keyed transform
    def edit_latent(self, z: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        raise NotImplementedError

    def unedit_latent(self, z: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------------ DeidMethod
    def _check_keys(self, x: torch.Tensor, keys: Sequence[KeyMaterial]) -> None:
        if len(keys) != x.shape[0]:
            raise ValueError(f"need one key per face: {len(keys)} keys for {x.shape[0]} faces")

    @contextlib.contextmanager
    def run_scope(self):
        """One call's GAN-inversion cache (:meth:`encode_cached`), dropped when the last concurrent call
        ends: codes of the input faces are never kept between calls."""
        lock = self.__dict__.setdefault("_code_lock", threading.Lock())
        with lock:
            self._scope_depth = self.__dict__.get("_scope_depth", 0) + 1
        try:
            yield
        finally:
            with lock:
                self._scope_depth -= 1
                if self._scope_depth == 0:
                    self.__dict__.pop("_code_cache", None)

    @staticmethod
    def _code_rows(x: torch.Tensor, fit: InversionFit) -> list[bytes]:
        """Cache keys of the code cache: each face's pixels and the inversion settings."""
        import hashlib

        setting = fit.cache_tag()
        return [hashlib.blake2b(x[i].detach().float().cpu().numpy().tobytes() + setting, digest_size=16).digest() for i in range(x.shape[0])]

    def _scope_cache(self):
        """The call's code cache (an OrderedDict) inside :meth:`run_scope`, else None."""
        from collections import OrderedDict

        lock = self.__dict__.setdefault("_code_lock", threading.Lock())
        with lock:
            if not self.__dict__.get("_scope_depth", 0):
                return None
            return self.__dict__.setdefault("_code_cache", OrderedDict())

    def _remember(self, cache, rows: list[bytes], codes: torch.Tensor) -> None:
        with self._code_lock:
            for r, z in zip(rows, codes):
                cache[r] = z.detach().clone()
            while len(cache) > 256:
                cache.popitem(last=False)

    def encode_cached(self, x: torch.Tensor, fit: InversionFit) -> torch.Tensor:
        """:meth:`encode`, remembering the faces' codes for the rest of the call (:meth:`run_scope`): the
        privacy guard's key variants (:mod:`zoo.guard`) re-anonymize the same crops and must not repeat
        the GAN inversion. Outside a call scope it is :meth:`encode`."""
        cache = self._scope_cache()
        if cache is None:
            return self.encode(x, fit)
        rows = self._code_rows(x, fit)
        with self._code_lock:
            known = {r: cache[r] for r in rows if r in cache}
        missing = [i for i, r in enumerate(rows) if r not in known]
        if missing:
            codes = self.encode(x[missing], fit).detach()
            self._remember(cache, [rows[i] for i in missing], codes)
            known.update({rows[i]: z for i, z in zip(missing, codes)})
        return torch.stack([known[r] for r in rows]).to(x.device, x.dtype)

    def _remember_anonymized(self, y: torch.Tensor, codes: torch.Tensor, fit: InversionFit) -> None:
        """W+ only, inside a call: remember the exact W+ of each anonymized face under its saved (uint8) pixels,
        so that recovering it in the same call (the privacy guard's wrong-key probe) starts from the code it
        was drawn from instead of inverting it again (what a perfect inversion of the saved face would give)."""
        cache = self._scope_cache()
        if cache is None or self.wplus is None:
            return
        from ..imageio import from_tensor, to_tensor

        saved = to_tensor(from_tensor(y.detach().float().cpu()), self.resolution)
        self._remember(cache, self._code_rows(saved, fit), codes)

    def anonymize_faces_carrying(
        self,
        x: torch.Tensor,
        keys: Sequence[KeyMaterial],
        refine_steps: int = REFINE_CONTROL.default,
        identity_refine: float | None = None,
        identity_check: float | None = None,
        face_fit: float = FACE_FIT_CONTROL.default,
        **controls: Any,
    ):
        """(X_anon ``[N,3,R,R]``, carried): the faces and what the carrier writes into each (:mod:`zoo.carrier`):
        {"latent": u_anon ``[N,100]``} and, on W+, "code": the anonymized W+ rows (:meth:`WPlusLatents.carried_rows`,
        ``[N,20,512]``), so that recovery needs no re-inversion. With config ``wplus.keep_pose`` the face is drawn from
        that code turned to the input's yaw (:meth:`WPlusLatents.posed`); the code carried is the unturned one, which
        the key undoes exactly."""
        self._check_keys(x, keys)
        fit = self.inversion_fit(refine_steps, identity_refine, identity_check, face_fit)
        code = self.encode_cached(x, fit)
        u_anon, code_anon = self.keyed_codes(code, keys, **controls)
        drawn = self.drawn_code(x, code_anon)
        y = self.decode(drawn)
        self._remember_anonymized(y, drawn, fit)
        carried = {"latent": u_anon}
        if self.wplus is not None:
            carried["code"] = self.wplus.carried_rows(code_anon)
        return y, carried

    @property
    def anonymized_code_scale(self) -> float:
        """c > 0: anonymized codes are the keyed transform's output times c (module docstring)."""
        scale = float(self.config.get("anonymized_code_scale", 1.0)) if self.wplus is None else float((self.config.get("wplus") or {}).get("code_scale", 1.0))
        if not scale > 0:
            raise ValueError(f"anonymized_code_scale must be > 0, got {scale}")
        return scale

    def anonymized_code(self, z: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        """z_anon = c T(z, key) ``[N,100]``: the keyed code the carrier holds; the face is drawn with
        :meth:`drawn_identity` of it."""
        return self.edit_latent(z, keys, **controls) * self.anonymized_code_scale

    def keyed_codes(self, code: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(u_anon ``[N,100]``, code_anon): the keyed identity code of each face's ``code`` (:meth:`anonymized_code`: what
        the carrier holds, exactly undone by the key) and the code with the identity it is drawn with
        (:meth:`drawn_identity`; on the DCGAN both are u_anon)."""
        u_anon = self.anonymized_code(self.identity_code(code), keys, **controls)
        return u_anon, self.with_identity(code, self.drawn_identity(u_anon), keys)

    def _wplus_norm(self, key: str) -> float | None:
        """Config ``wplus.<key>`` (a norm > 0) on the W+ tier, None where unset or on the DCGAN."""
        value = (self.config.get("wplus") or {}).get(key) if self.wplus is not None else None
        if value is None:
            return None
        if not float(value) > 0:
            raise ValueError(f"wplus.{key} must be > 0, got {value}")
        return float(value)

    def drawn_identity(self, u_anon: torch.Tensor) -> torch.Tensor:
        """The identity code ``[N,100]`` an anonymized face is drawn with: on W+ with ``wplus.code_norm`` R, u_anon turned
        to norm R (every face's at the same distance from the mean face; module docstring), else u_anon."""
        return at_norm(u_anon, self._wplus_norm("code_norm"))

    def read_identity(self, u_drawn: torch.Tensor) -> torch.Tensor:
        """u_anon ``[N,100]`` estimated from the identity code of a re-inverted anonymized face (no carried code): with
        ``wplus.code_norm``, its direction at norm ``wplus.read_norm`` (the input's norm is only in the carried code),
        else as read."""
        return at_norm(u_drawn, self._wplus_norm("read_norm") if self._wplus_norm("code_norm") is not None else None)

    def recovered_code(self, z_anon: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        """T^-1(z_anon / c, key): exact inverse of :meth:`anonymized_code` for a carried code. Each coordinate is
        kept within +-8 (8 sigma of the codes' prior; non-finite values become 0): with a wrong key, or a code read
        back from a re-inverted face, a flow's inverse can overflow (iFADIT on W+: non-finite faces on real photos)."""
        z = self.unedit_latent(z_anon / self.anonymized_code_scale, keys, **controls)
        return torch.nan_to_num(z, nan=0.0, posinf=8.0, neginf=-8.0).clamp(-8.0, 8.0)

    def anonymize_faces(
        self,
        x: torch.Tensor,
        keys: Sequence[KeyMaterial],
        refine_steps: int = REFINE_CONTROL.default,
        identity_refine: float | None = None,
        identity_check: float | None = None,
        face_fit: float = FACE_FIT_CONTROL.default,
        **controls: Any,
    ) -> torch.Tensor:
        return self.anonymize_faces_carrying(x, keys, refine_steps, identity_refine, identity_check, face_fit, **controls)[0]

    def anonymized_codes(self, y: torch.Tensor, carried: Sequence[Any] | None, fit: InversionFit) -> tuple[torch.Tensor, torch.Tensor]:
        """(code, u_anon ``[N,100]``) of anonymized faces ``y``.

        ``carried[i]``: what rode in face i's saved image (:mod:`zoo.carrier`): {"latent": u_anon, "code": W+ rows}
        (either may be missing), a bare u_anon array, or None. u_anon: the carried one, else read from the face's
        inversion (times c on the DCGAN: the inversion returns codes at its own radius, module docstring). code:
        on W+, the carried W+ rows where they came, else the inversion of ``y``; on the DCGAN, u_anon itself."""
        parts = [c if isinstance(c, dict) else ({"latent": c} if c is not None else {}) for c in (carried if carried is not None else [None] * y.shape[0])]
        u = torch.empty(y.shape[0], self.code_dim, device=y.device, dtype=y.dtype)
        no_latent = [i for i, p in enumerate(parts) if p.get("latent") is None]
        code = None
        if self.wplus is not None:
            from ..nn.mobilestylegan import NUM_SLOTS, STYLE_DIM

            code = torch.empty(y.shape[0], NUM_SLOTS, STYLE_DIM, device=y.device, dtype=y.dtype)
            rows = [i for i, p in enumerate(parts) if p.get("code") is not None]
            if rows:
                code[rows] = self.wplus.from_carried_rows(torch.stack([torch.as_tensor(parts[i]["code"]) for i in rows]).to(y))
            invert = [i for i in range(y.shape[0]) if i not in rows]
            if invert:
                code[invert] = self.encode_cached(y[invert], fit)
            if no_latent:
                u[no_latent] = self.read_identity(self.identity_code(code[no_latent]))
        elif no_latent:
            u[no_latent] = self.encode(y[no_latent], fit) * self.anonymized_code_scale
        for i, p in enumerate(parts):
            if p.get("latent") is not None:
                u[i] = torch.as_tensor(p["latent"], dtype=y.dtype, device=y.device)
        return (u if code is None else code), u

    @property
    def code_dim(self) -> int:
        """Size of the identity code (100)."""
        return LATENT_DIM if self.wplus is None else self.wplus.identity.dim

    def recover_faces(
        self,
        y: torch.Tensor,
        keys: Sequence[KeyMaterial],
        refine_steps: int = REFINE_CONTROL.default,
        carried: Sequence[Any] | None = None,
        identity_refine: float | None = None,
        identity_check: float | None = None,
        face_fit: float = FACE_FIT_CONTROL.default,
        **controls: Any,
    ) -> torch.Tensor:
        self._check_keys(y, keys)
        code, u_anon = self.anonymized_codes(y, carried, self.inversion_fit(refine_steps, identity_refine, identity_check, face_fit))
        u = self.recovered_code(u_anon, keys, **controls)
        from ..nn.wplus_identity import carried_edit

        # each face is undone with the W+ slots and edit its block was drawn with
        blocks = carried if carried is not None else [None] * y.shape[0]
        faces = [self.with_identity(code[i : i + 1], u[i : i + 1], [keys[i]], True, **carried_edit(c)) for i, c in enumerate(blocks)]
        return self.decode(torch.cat(faces) if faces else self.with_identity(code, u, keys, True))

    def reconstruct_faces(
        self,
        x: torch.Tensor,
        refine_steps: int = REFINE_CONTROL.default,
        identity_refine: float | None = None,
        identity_check: float | None = None,
        face_fit: float = FACE_FIT_CONTROL.default,
    ) -> torch.Tensor:
        """G(invert(X)): the backbone alone, identity unchanged (the evaluator's reference row)."""
        return self.decode(self.encode(x, self.inversion_fit(refine_steps, identity_refine, identity_check, face_fit)))

    def save_pretrained(self, folder) -> Any:
        """As :meth:`NeuralMethod.save_pretrained`, with the trained encoder stored in fp16 (halves the
        bundled size; the evaluation was run on the fp16 weights)."""
        self._build_dcgan_backbone()  # a checkpoint keeps both tiers, whichever one this method runs
        enc = self.components["encoder"]
        dtype = next(enc.parameters()).dtype
        enc.half()
        try:
            return super().save_pretrained(folder)
        finally:
            enc.to(dtype)


class KeyedInvolutionDemo(LatentDemoMethod):
    """DBAF's KRIA / HFORD's cMLPs on the demo backbone: one keyed edit that is its own inverse.

    The papers apply the *same* network with the *same* key to anonymize and to recover
    (``I_hat = E(I, P)``, ``I = E(I_hat, P)``, DBAF eq. 19-21, HFORD III-B), and learn the reversal with a
    recovery loss. Here E is an involution by construction::

        E(I, key) = g_P^-1( R_S g_P(I) ),   R_S = 1 - 2 Q_S Q_S^T
        so  E(E(I, key), key) = I exactly, and E(E(I, key), key') != I

    g_P: a coupling flow (:class:`~zoo.nn.flows.SecureIdentityFlow`) conditioned on the key vector P
    (its subnets are the papers' conditional MLPs); R_S: the reflection through a key-chosen half of the
    latent space (Q_S: orthonormal basis of ``reflect_dim`` of the 100 dimensions, from the key). Both P
    and S come from the key material, so a secret gives the same edit on every machine; R_S depends only
    on the subspace, not on the basis QR returns. Why not the paper's plain MLP: trained here on CPU it
    did not learn its own reversal (cos(E(E(z,P),P), z) = 0.35 after 1500 steps with the recovery losses
    alone, and it ignored the key); with R = -1 instead of R_S, two keys gave nearly the same face
    (latent cosine 0.85-0.90 after 2200 steps). See ``training/configs/dbaf_demo.yaml``. The disentangler
    (CID / IDM) and the attribute branch (MAAR / ARM) have nothing to act on in the demo backbone (one
    entangled code, no feature maps to keep), so A = 0 and I = z.

    Training (stage 2 only, the backbone is trained by ``training/inversion.py``) on latent codes z ~ N(0, I)
    with two correct keys, two wrong recovery keys and the subclass's :meth:`identity_terms` (the paper's
    equations, cosine of latent codes standing for the identity embedding), plus::

        I_hat_k = E(z, key_k) (k = 1, 2),  z_rec = E(I_hat_1, key_1),  z_err_j = E(I_hat_1, key'_j) (j = 1, 2)
        + rec   = ||z_rec - z||^2                          the image reconstruction loss, on codes (~0 here)
        + prior = gaussian_prior_loss(I_hat_1, I_hat_2)    anonymized codes stay where the DCGAN draws faces
    """

    reversible = True
    uses_key = True
    controls = FIT_CONTROLS
    stages: ClassVar[tuple[int, ...]] = (2,)
    editor_name: ClassVar[str] = "editor"
    key_context: ClassVar[str] = "demo/password"
    train_generator: torch.Generator | None = None

    @staticmethod
    def identity_terms(e_ori, e_ano, e_rec, e_err) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "KeyedInvolutionDemo":
        from ..nn.flows import SecureIdentityFlow

        config = dict(config)
        comps = cls.backbone_components(config)
        dim = comps["generator"].latent_dim
        spec = {"dim": dim, "key_dim": dim, "n_blocks": 4, "hidden": [256, 256], "block": "allinone", "clamp": 2.0}
        comps[cls.editor_name] = SecureIdentityFlow(**{**spec, **config.get("model", {}).get(cls.editor_name, {})})
        return cls(config, comps)

    @property
    def editor(self) -> torch.nn.Module:
        return self.components[self.editor_name]

    @property
    def reflect_dim(self) -> int:
        return int(self.config.get("reflect_dim", self.code_dim // 2))

    def key_vectors(self, keys: Sequence[KeyMaterial]) -> tuple[torch.Tensor, torch.Tensor]:
        """(P ``[N, key_dim]`` N(0, I), Q_S ``[N, 100, reflect_dim]`` orthonormal), one per face."""
        d, k, kd = self.code_dim, self.reflect_dim, int(self.editor.key_dim)
        p = torch.stack([key.normal(kd, context=f"{self.name}/{self.key_context}") for key in keys])
        basis = torch.stack([key.normal(d * k, context=f"{self.name}/{self.key_context}/subspace").view(d, k) for key in keys])
        return p.to(self.device, self.dtype), torch.linalg.qr(basis.double())[0].to(self.device, self.dtype)

    def _random_keys(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        d, k, kd = self.code_dim, self.reflect_dim, int(self.editor.key_dim)
        p = torch.randn(n, kd, generator=self.train_generator)
        q = torch.linalg.qr(torch.randn(n, d, k, generator=self.train_generator))[0]
        return p.to(self.device), q.to(self.device)

    def _edit(self, z: torch.Tensor, key: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        g, (p, q) = self.editor, key
        u = g(z, p)
        u = u - 2 * torch.einsum("nij,nj->ni", q, torch.einsum("nji,nj->ni", q, u))  # R_S
        return g.inverse(u, p)

    def edit_latent(self, z: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        return self._edit(z, self.key_vectors(keys))

    def unedit_latent(self, z: torch.Tensor, keys: Sequence[KeyMaterial], **controls: Any) -> torch.Tensor:
        return self._edit(z, self.key_vectors(keys))  # the same network and key undo the edit

    # -- training protocol -------------------------------------------------------------------------
    def trainable_parameters(self, stage: int) -> dict[str, list[torch.nn.Parameter]]:
        if stage != 2:
            raise ValueError(f"the {self.name} demo trains the anonymization stage (stage 2) only")
        return {"g": list(self.editor.parameters())}

    def compute_losses(self, stage: int, group: str, batch: dict[str, torch.Tensor], step: int):
        from .. import losses

        cfg = self.stage_config(stage)
        n = int(cfg.get("latent_batch", batch["image"].shape[0]))
        z = torch.randn(n, self.components["generator"].latent_dim, generator=self.train_generator).to(self.device)
        p1, p2, w1, w2 = (self._random_keys(n) for _ in range(4))
        ano1, ano2 = self._edit(z, p1), self._edit(z, p2)
        rec = self._edit(ano1, p1)
        err = [self._edit(ano1, w1), self._edit(ano1, w2)]
        terms = {**self.identity_terms(z, [ano1, ano2], rec, err), "rec": (rec - z).pow(2).mean(), "prior": losses.gaussian_prior_loss(torch.cat([ano1, ano2]))}
        return losses.weighted_sum(terms, cfg.get("lambdas", {}))

    @torch.no_grad()
    def sample_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = batch["image"]
        z = self.encode(x)
        p1, p2 = self._random_keys(x.shape[0]), self._random_keys(x.shape[0])
        z_an = self._edit(z, p1)
        return {
            "input": x,
            "reconstruction": self.decode(z),
            "anonymized": self.decode(z_an),
            "recovered": self.decode(self._edit(z_an, p1)),
            "wrong_key": self.decode(self._edit(z_an, p2)),
        }
