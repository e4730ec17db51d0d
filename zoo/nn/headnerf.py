"""HeadNeRF (Hong et al., "HeadNeRF: A Real-time NeRF-based Parametric Head Model", CVPR 2022).

The parametric NeRF that IDEudemon's Step I fits to a face and re-renders with a perturbed identity
code (IDEudemon eq. 2 and 4). Written here from the paper and the public layout of
``CrisHY1995/headnerf`` (``NetWorks/HeadNeRFNet.py``, ``models.py``, ``neural_renderer.py``) so that
the released ``TrainedModels/model_Reso{32,32HR,64}.pth`` convert 1:1 (converter ``headnerf``).

Codes (IDEudemon Sec. 4.1, HeadNeRF ``BaseOptions``): identity 100, expression 79, albedo
("text") 100, illumination 27. The *shape code* is ``[iden, expr]`` (179), the *appearance code*
``[text, illu]`` (127). IDEudemon's z_app (206) is ``[expr, text, illu]``.

Rendering (coarse level only, as the released models are used with ``hier_sampling=False``):

1. one ray per feature-map pixel ``(x, y)``, ``d = R K^-1 [x, y, 1]``; ``num_sample_coarse`` points
   from world z = ``world_z1`` (2.5) to ``world_z2`` (-3.5) along each ray;
2. the MLP (``fg_CD_predictor``) maps ``[gamma(p), shape_code]`` (gamma: 10 log-spaced frequencies
   plus the input, no pi factor) to a density and a ``featmap_nc``-channel feature, conditioned on
   ``appea_code`` (and the embedded view direction when ``include_vd``);
3. volume rendering to a ``featmap_nc x F x F`` feature map plus background alpha; the learned
   background feature map is added with that alpha;
4. the 2D neural renderer (pixel-shuffle upsampling blocks with [1 2 1] blur) turns it into an RGB
   image of ``pred_img_size`` pixels in [0, 1] (sigmoid).

State-dict keys (official names)::

    fg_CD_predictor.FeaExt_module_{0..7}.{weight,bias}        1x1 convs, skip input at module 5
    fg_CD_predictor.density_module / RGB_layer_{0,1,2}.{weight,bias}
    neural_render.bg_featmap                                  [1, C, F, F]
    neural_render.feat_upsample_list.{i}.layer_{1,2}.{weight,bias}, .blur_layer.f  ([3] = 1 2 1)
    neural_render.rgb_upsample.1.f
    neural_render.feat_2_rgb_list.{0..n}.{weight,bias}, neural_render.feat_layers.{i}.{weight,bias}

Images leave :meth:`HeadNeRF.forward` in [0, 1] (the official range); :mod:`zoo.face3d.headnerf`
maps them to the zoo's [-1, 1].
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from zoo.convert import ConversionError, check_and_load, register_converter
from zoo.hub import HubModule

__all__ = [
    "CODE_DIMS",
    "HeadNeRF",
    "NeRFMLP",
    "NeuralRenderer",
    "positional_encoding",
    "default_camera",
    "DEFAULT_INV_INMAT_32",
    "convert_headnerf",
]

#: code sizes of HeadNeRF / IDEudemon: identity, expression, albedo (texture), illumination
CODE_DIMS = {"iden": 100, "expr": 79, "text": 100, "illu": 27}

#: inverse intrinsics of the official 32x32 feature-map camera (``ConfigFiles/cam_inmat_info_32x32.json``);
#: scale the first two rows' focal terms by ``32 / featmap_size`` for other feature-map sizes.
DEFAULT_INV_INMAT_32 = ((0.007790804840624332, 0.0, -0.12553827464580536), (0.0, 0.007790804840624332, -0.12832458317279816), (0.0, 0.0, 1.0))


def positional_encoding(x: torch.Tensor, n_freqs: int, include_input: bool = True) -> torch.Tensor:
    """NeRF embedding along dim 1: ``[x, sin(2^0 x), cos(2^0 x), ..., sin(2^(n-1) x), cos(2^(n-1) x)]``.

    ``x [B, 3, ...] -> [B, 3 (1 + 2 n), ...]`` (HeadNeRF uses no pi factor).
    """
    parts = [x] if include_input else []
    for k in range(n_freqs):
        f = 2.0**k
        parts += [torch.sin(x * f), torch.cos(x * f)]
    return torch.cat(parts, dim=1)


def _encoded_dims(n_freqs: int, include_input: bool = True) -> int:
    return 3 * (2 * n_freqs + (1 if include_input else 0))


class NeRFMLP(nn.Module):
    """Conditional NeRF MLP of 1x1 convs over ``[B, C, rays, samples]`` tensors (official ``MLPforNeRF``).

    ``n_layers`` feature layers of width ``hidden`` with the position input concatenated again after
    layer ``n_layers // 2``; density head; colour branch ``RGB_layer_0`` -> concat conditioning ->
    ``RGB_layer_1`` (width hidden/2) -> ``RGB_layer_2`` (``out_features`` channels).
    """

    def __init__(self, vp_channels: int, vd_channels: int, n_layers: int = 8, hidden: int = 256, out_features: int = 3):
        super().__init__()
        self.n_layers, self.skip = n_layers, n_layers // 2
        self.out_features = out_features
        self.add_module("FeaExt_module_0", nn.Conv2d(vp_channels, hidden, 1))
        for i in range(1, n_layers):
            c_in = hidden + vp_channels if i - 1 == self.skip else hidden
            self.add_module(f"FeaExt_module_{i}", nn.Conv2d(c_in, hidden, 1))
        self.density_module = nn.Conv2d(hidden, 1, 1)
        self.RGB_layer_0 = nn.Conv2d(hidden, hidden, 1)
        self.RGB_layer_1 = nn.Conv2d(hidden + vd_channels, hidden // 2, 1)
        self.RGB_layer_2 = nn.Conv2d(hidden // 2, out_features, 1)

    def forward(self, vp: torch.Tensor, vd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``vp [B, Cp, R, S]`` (encoded points + shape code), ``vd [B, Cd, R, S]`` -> (feature, density >= 0).

        The 1x1 convolutions run as matrix products on channel-last tensors (same weights, same result).
        """
        lin = lambda conv, t: F.linear(t, conv.weight.flatten(1), conv.bias)  # noqa: E731
        p, d = vp.permute(0, 2, 3, 1), vd.permute(0, 2, 3, 1)
        x = p
        for i in range(self.n_layers):
            x = F.relu(lin(getattr(self, f"FeaExt_module_{i}"), x))
            if i == self.skip:
                x = torch.cat([p, x], dim=-1)
        density = F.relu(lin(self.density_module, x))
        x = lin(self.RGB_layer_0, x)
        x = F.relu(lin(self.RGB_layer_1, torch.cat([x, d], dim=-1)))
        rgb = lin(self.RGB_layer_2, x)
        if self.out_features == 3:
            rgb = torch.sigmoid(rgb)
        return rgb.permute(0, 3, 1, 2), density.permute(0, 3, 1, 2)


class Blur121(nn.Module):
    """Normalised separable [1 2 1] x [1 2 1] blur with reflect padding (kornia ``filter2d`` default).

    The kernel lives in the persistent buffer ``f`` (``[3]``), as in the official checkpoints.
    """

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("f", torch.tensor([1.0, 2.0, 1.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.f[None, :] * self.f[:, None]
        k = (k / k.sum()).to(x.dtype)
        c = x.shape[1]
        x = F.pad(x, (1, 1, 1, 1), mode="reflect")
        return F.conv2d(x, k.expand(c, 1, 3, 3), groups=c)


class PixelShuffleUpsample(nn.Module):
    """``c -> 2c -> 4c`` 1x1 convs (LeakyReLU 0.2) + the input tiled 4 times, pixel shuffle x2, blur."""

    def __init__(self, channels: int):
        super().__init__()
        self.layer_1 = nn.Conv2d(channels, channels * 2, 1)
        self.layer_2 = nn.Conv2d(channels * 2, channels * 4, 1)
        self.blur_layer = Blur121()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.leaky_relu(self.layer_1(x), 0.2)
        out = F.leaky_relu(self.layer_2(out), 0.2) + x.repeat(1, 4, 1, 1)
        return self.blur_layer(F.pixel_shuffle(out, 2))


class NeuralRenderer(nn.Module):
    """2D renderer: feature map ``[B, C, F, F]`` -> RGB ``[B, 3, S, S]`` in [0, 1], ``S = F 2^n``.

    ``n = log2(S / F)`` blocks; block i maps ``max(C / 2^i, min_feat)`` to ``max(C / 2^(i+1), min_feat)``
    channels; RGB skip outputs are summed coarse-to-fine (bilinear x2 + blur between scales).
    """

    def __init__(self, feat_nc: int = 256, featmap_size: int = 64, img_size: int = 512, min_feat: int = 32, bg_type: str = "white"):
        super().__init__()
        n_blocks = int(round(math.log2(img_size / featmap_size)))
        if featmap_size * 2**n_blocks != img_size or n_blocks < 1:
            raise ValueError(f"img_size {img_size} must be featmap_size {featmap_size} times a power of two >= 2")
        self.n_blocks = n_blocks
        ch = lambda i: max(feat_nc // 2**i, min_feat)  # noqa: E731
        fill = {"white": 1.0, "black": 0.0}
        if bg_type not in fill:
            raise ValueError("bg_type must be 'white' or 'black'")
        self.bg_featmap = nn.Parameter(torch.full((1, feat_nc, featmap_size, featmap_size), fill[bg_type]))
        self.feat_upsample_list = nn.ModuleList(PixelShuffleUpsample(ch(i)) for i in range(n_blocks))
        self.rgb_upsample = nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False), Blur121())
        self.feat_2_rgb_list = nn.ModuleList([nn.Conv2d(feat_nc, 3, 1)] + [nn.Conv2d(ch(i + 1), 3, 1) for i in range(n_blocks)])
        self.feat_layers = nn.ModuleList(nn.Conv2d(ch(i), ch(i + 1), 1) for i in range(n_blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rgb = self.rgb_upsample(self.feat_2_rgb_list[0](x))
        net = x
        for i in range(self.n_blocks):
            net = F.leaky_relu(self.feat_layers[i](self.feat_upsample_list[i](net)), 0.2)
            rgb = rgb + self.feat_2_rgb_list[i + 1](net)
            if i < self.n_blocks - 1:
                rgb = self.rgb_upsample(rgb)
        return torch.sigmoid(rgb)


def default_camera(batch: int = 1, featmap_size: int = 64, device: Any = None, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The official frontal camera (``RenderUtils.base_cam_info``): camera-to-world ``R = diag(1, -1, -1)``,
    centre ``(0, 0, 12)``, and the 32 px intrinsics rescaled to ``featmap_size``.

    Returns ``{"rmats": [B,3,3], "tvecs": [B,3,1], "inv_inmats": [B,3,3]}``.
    """
    r = torch.diag(torch.tensor([1.0, -1.0, -1.0], dtype=dtype, device=device)).expand(batch, 3, 3).clone()
    t = torch.tensor([0.0, 0.0, 12.0], dtype=dtype, device=device).view(1, 3, 1).expand(batch, 3, 1).clone()
    inv = torch.tensor(DEFAULT_INV_INMAT_32, dtype=dtype, device=device)
    inv[:2, :2] = inv[:2, :2] / (featmap_size / 32.0)
    return {"rmats": r, "tvecs": t, "inv_inmats": inv.expand(batch, 3, 3).clone()}


class HeadNeRF(HubModule):
    """HeadNeRF network (``HeadNeRFNet`` with ``hier_sampling=False``), official key names.

    ``forward(shape_code [N, iden+expr], appea_code [N, text+illu], rmats [N,3,3], tvecs [N,3,1],
    inv_inmats [N,3,3]) -> {"image": [N,3,S,S] in [0,1], "bg_image": [1,3,S,S], "alpha": [N,1,F,F]}``;
    ``alpha`` is the accumulated foreground opacity on the feature-map grid (1 - background alpha).
    Camera matrices are camera-to-world (rotation, centre) and the inverse intrinsics of the
    ``featmap_size`` grid, as the official code takes them.
    """

    def __init__(
        self,
        featmap_size: int = 64,
        featmap_nc: int = 256,
        pred_img_size: int = 512,
        iden_code_dims: int = 100,
        expr_code_dims: int = 79,
        text_code_dims: int = 100,
        illu_code_dims: int = 27,
        mlp_hidden_nchannels: int = 384,
        mlp_layers: int = 8,
        vp_n_freqs: int = 10,
        include_vd: bool = False,
        vd_n_freqs: int = 4,
        num_sample_coarse: int = 64,
        world_z1: float = 2.5,
        world_z2: float = -3.5,
        min_feat: int = 32,
        bg_type: str = "white",
    ):
        super().__init__()
        self.featmap_size, self.featmap_nc, self.pred_img_size = featmap_size, featmap_nc, pred_img_size
        self.iden_code_dims, self.expr_code_dims = iden_code_dims, expr_code_dims
        self.text_code_dims, self.illu_code_dims = text_code_dims, illu_code_dims
        self.shape_code_dims = iden_code_dims + expr_code_dims
        self.appea_code_dims = text_code_dims + illu_code_dims
        self.vp_n_freqs, self.include_vd, self.vd_n_freqs = vp_n_freqs, include_vd, vd_n_freqs
        self.num_sample_coarse, self.world_z1, self.world_z2 = num_sample_coarse, world_z1, world_z2
        vp = self.shape_code_dims + _encoded_dims(vp_n_freqs)
        vd = self.appea_code_dims + (_encoded_dims(vd_n_freqs) if include_vd else 0)
        self.fg_CD_predictor = NeRFMLP(vp, vd, mlp_layers, mlp_hidden_nchannels, featmap_nc)
        self.neural_render = NeuralRenderer(featmap_nc, featmap_size, pred_img_size, min_feat, bg_type)
        ys, xs = torch.meshgrid(torch.arange(featmap_size), torch.arange(featmap_size), indexing="ij")
        self.register_buffer("ray_xy", torch.stack([xs.reshape(-1), ys.reshape(-1)]).float(), persistent=False)

    # ---------------------------------------------------------------- rays and samples
    def sample_points(self, rmats: torch.Tensor, tvecs: torch.Tensor, inv_inmats: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Points ``[N, 3, R, S]``, unit directions ``[N, 3, R, S]`` and segment lengths ``[N, 1, R, S]``."""
        n = rmats.shape[0]
        xy1 = F.pad(self.ray_xy, (0, 0, 0, 1), value=1.0).to(rmats.dtype).expand(n, 3, -1)
        d = rmats.bmm(inv_inmats.bmm(xy1))  # [N, 3, R]
        d = d / d.norm(dim=1, keepdim=True)
        step = -1.0 / d[:, 2:3]  # ray length per unit of world z
        o = tvecs.expand(n, 3, d.shape[-1])
        z1 = (o[:, 2] - self.world_z1).unsqueeze(-1)  # [N, R, 1]
        z2 = (o[:, 2] - self.world_z2).unsqueeze(-1)
        t = torch.linspace(0.0, 1.0, self.num_sample_coarse + 1, dtype=d.dtype, device=d.device).view(1, 1, -1)
        z = z1 * (1 - t) + z2 * t  # [N, R, S+1]
        dists = (z[..., 1:] - z[..., :-1]).unsqueeze(1) * step.unsqueeze(-1)  # [N, 1, R, S]
        z = z[..., :-1].unsqueeze(1)
        pts = o.unsqueeze(-1) + d.unsqueeze(-1) * step.unsqueeze(-1) * z
        dirs = d.unsqueeze(-1).expand(-1, -1, -1, self.num_sample_coarse)
        return pts, dirs, dists

    @staticmethod
    def composite(features: torch.Tensor, density: torch.Tensor, dists: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Volume rendering: ``alpha_i = 1 - exp(-sigma_i delta_i)``, ``w_i = alpha_i prod_{j<i}(1 - alpha_j)``.

        Returns (``sum_i w_i f_i`` ``[N, C, R]``, background alpha ``1 - sum_i w_i`` ``[N, 1, R]``).
        """
        alpha = 1.0 - torch.exp(-density * dists)
        trans = torch.cumprod(F.pad(1.0 - alpha + 1e-10, (1, 0), value=1.0), dim=-1)[..., :-1]
        w = alpha * trans
        return (w * features).sum(-1), 1.0 - w.sum(-1)

    def forward(
        self, shape_code: torch.Tensor, appea_code: torch.Tensor, rmats: torch.Tensor, tvecs: torch.Tensor, inv_inmats: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        n, fs = shape_code.shape[0], self.featmap_size
        pts, dirs, dists = self.sample_points(rmats, tvecs, inv_inmats)
        r, s = pts.shape[-2:]
        vp = torch.cat([positional_encoding(pts, self.vp_n_freqs), shape_code[:, :, None, None].expand(-1, -1, r, s)], dim=1)
        app = appea_code[:, :, None, None].expand(-1, -1, r, s)
        vd = torch.cat([positional_encoding(dirs, self.vd_n_freqs), app], dim=1) if self.include_vd else app
        feat, density = self.fg_CD_predictor(vp, vd)
        fg, bg_alpha = self.composite(feat, density, dists)
        fg = fg.view(n, self.featmap_nc, fs, fs)
        bg_alpha = bg_alpha.view(n, 1, fs, fs)
        bg = self.neural_render.bg_featmap
        return {
            "image": self.neural_render(fg + bg_alpha * bg),
            "bg_image": self.neural_render(bg),
            "alpha": 1.0 - bg_alpha,
        }


# ----------------------------------------------------------------------------------------------------
# converter


def _net_state(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    para = state.get("para") if isinstance(state.get("para"), dict) else {}
    net = state.get("net", state)
    if not isinstance(net, dict) or not net or not all(torch.is_tensor(v) for v in net.values()):
        raise ConversionError("headnerf: expected the official {'para': {...}, 'net': state_dict} file (or a flat state dict)")
    return {k[7:] if k.startswith("module.") else k: v for k, v in net.items()}, para


@register_converter("headnerf", "HeadNeRF official model_Reso32/Reso32HR/Reso64.pth ({'para', 'net'}; hier_sampling=False)")
def convert_headnerf(state: dict[str, Any]) -> HeadNeRF:
    """Build :class:`HeadNeRF` from an official checkpoint; sizes come from the weights (and ``para``).

    The split of the 179-d shape code into identity/expression and of the 127-d appearance code into
    albedo/illumination cannot be read from the weights; the official 100/79 and 100/27 are used and
    the sums are checked.
    """
    sd, para = _net_state(state)
    if any(k.startswith("fine_fg_CD_predictor.") for k in sd):
        raise ConversionError("headnerf: this checkpoint has a fine (hierarchical) MLP; only hier_sampling=False models are supported")
    w0 = sd.get("fg_CD_predictor.FeaExt_module_0.weight")
    bg = sd.get("neural_render.bg_featmap")
    if w0 is None or bg is None:
        raise ConversionError("headnerf: missing fg_CD_predictor.FeaExt_module_0.weight or neural_render.bg_featmap")
    hidden, vp = int(w0.shape[0]), int(w0.shape[1])
    n_layers = sum(1 for k in sd if k.startswith("fg_CD_predictor.FeaExt_module_") and k.endswith(".weight"))
    featmap_nc, featmap_size = int(bg.shape[1]), int(bg.shape[-1])
    n_blocks = sum(1 for k in sd if k.startswith("neural_render.feat_layers.") and k.endswith(".weight"))
    pred_img_size = int(para.get("pred_img_size", featmap_size * 2**n_blocks))
    if pred_img_size != featmap_size * 2**n_blocks:
        raise ConversionError(f"headnerf: para says {pred_img_size} px but the renderer has {n_blocks} x2 blocks from {featmap_size}")
    if "featmap_size" in para and int(para["featmap_size"]) != featmap_size:
        raise ConversionError(f"headnerf: para featmap_size {para['featmap_size']} != weights {featmap_size}")
    shape_dims = vp - _encoded_dims(10)
    if shape_dims != CODE_DIMS["iden"] + CODE_DIMS["expr"]:
        raise ConversionError(f"headnerf: MLP input {vp} is not gamma(p) (63) + a 179-d shape code")
    vd = int(sd["fg_CD_predictor.RGB_layer_1.weight"].shape[1]) - hidden
    appea = CODE_DIMS["text"] + CODE_DIMS["illu"]
    if vd == appea:
        include_vd = False
    elif vd == appea + _encoded_dims(4):
        include_vd = True
    else:
        raise ConversionError(f"headnerf: colour branch takes {vd} conditioning channels, expected {appea} (+27 with view dirs)")
    c_last = int(sd[f"neural_render.feat_layers.{n_blocks - 1}.weight"].shape[0])
    min_feat = c_last if c_last > featmap_nc // 2**n_blocks else 32  # the channel floor shows only when it binds
    model = HeadNeRF(
        featmap_size=featmap_size,
        featmap_nc=featmap_nc,
        pred_img_size=pred_img_size,
        mlp_hidden_nchannels=hidden,
        mlp_layers=n_layers,
        include_vd=include_vd,
        min_feat=min_feat,
    )
    return check_and_load(model, sd, "headnerf")
