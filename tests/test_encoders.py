"""pSp GradualStyleEncoder / e4e Encoder4Editing on IR-SE: shapes, parameter counts, converters.

The official key list and the reference forward pass below are written from the architecture as
published in eladrich/pixel2style2pixel (models/encoders/{helpers,psp_encoders}.py) and
omertov/encoder4editing (models/encoders/psp_encoders.py), independently of zoo.nn.psp.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from official_layouts import bn_shapes, irse_stem_and_body_shapes

from zoo.convert import ConversionError, get_converter
from zoo.nn.psp import Encoder4Editing, GradualStyleEncoder, psp_decoder_checkpoint

TINY = dict(stage_units=[1, 2, 2, 1], channels=[16, 32, 48, 64], style_dim=24)


pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------------------------------------
# Official layout, from the architecture description
# ------------------------------------------------------------------------------------------------


_bn = bn_shapes


def official_encoder_shapes(units, chans, n_styles=14, style_dim=512, input_nc=3) -> dict[str, tuple[int, ...]]:
    """Key -> shape of a pSp/e4e ``encoder.*`` state dict (IR-SE units, SE reduction 16)."""
    s = irse_stem_and_body_shapes(units, chans, input_nc)
    fpn = chans[3]
    for k in range(n_styles):
        spatial = 16 if k < 3 else 32 if k < 7 else 64
        c_in = fpn
        for j in range(int(math.log2(spatial))):
            s[f"styles.{k}.convs.{2 * j}.weight"] = (style_dim, c_in, 3, 3)
            s[f"styles.{k}.convs.{2 * j}.bias"] = (style_dim,)
            c_in = style_dim
        s[f"styles.{k}.linear.weight"] = (style_dim, style_dim)
        s[f"styles.{k}.linear.bias"] = (style_dim,)
    s["latlayer1.weight"] = (fpn, chans[2], 1, 1)
    s["latlayer1.bias"] = (fpn,)
    s["latlayer2.weight"] = (fpn, chans[1], 1, 1)
    s["latlayer2.bias"] = (fpn,)
    return s


def random_state(shapes: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, shp in shapes.items():
        if k.endswith("num_batches_tracked"):
            out[k] = torch.tensor(7)
        elif k.endswith("running_var"):
            out[k] = torch.rand(shp, generator=g) + 0.5
        elif k.endswith(".weight") and len(shp) == 1 and "res_layer.2" not in k and "input_layer.2" not in k:
            out[k] = 1 + 0.1 * torch.randn(shp, generator=g)  # BN gamma
        elif len(shp) == 4:
            fan_in = shp[1] * shp[2] * shp[3]
            out[k] = torch.randn(shp, generator=g) / math.sqrt(fan_in)
        else:
            out[k] = 0.1 * torch.randn(shp, generator=g)
    return out


def official_checkpoint(enc: dict[str, torch.Tensor], latent_avg: torch.Tensor, encoder_type: str) -> dict:
    sd = {f"encoder.{k}": v for k, v in enc.items()}
    sd["decoder.style.1.weight"] = torch.randn(8, 8)  # stands for the StyleGAN2 generator
    return {"state_dict": sd, "latent_avg": latent_avg, "opts": {"encoder_type": encoder_type, "output_size": 256}}


# ------------------------------------------------------------------------------------------------
# Reference forward pass straight from a state dict
# ------------------------------------------------------------------------------------------------


def _ref_bn(x, sd, p):
    return F.batch_norm(x, sd[f"{p}.running_mean"], sd[f"{p}.running_var"], sd[f"{p}.weight"], sd[f"{p}.bias"], False, 0.0, 1e-5)


def ref_backbone(sd, x, units):
    x = F.prelu(_ref_bn(F.conv2d(x, sd["input_layer.0.weight"], padding=1), sd, "input_layer.1"), sd["input_layer.2.weight"])
    outs, i = [], 0
    for n in units:
        for j in range(n):
            p, stride = f"body.{i}", 2 if j == 0 else 1
            if f"{p}.shortcut_layer.0.weight" in sd:
                sc = _ref_bn(F.conv2d(x, sd[f"{p}.shortcut_layer.0.weight"], stride=stride), sd, f"{p}.shortcut_layer.1")
            else:
                sc = x[:, :, ::stride, ::stride]  # MaxPool2d(kernel 1, stride)
            r = _ref_bn(x, sd, f"{p}.res_layer.0")
            r = F.prelu(F.conv2d(r, sd[f"{p}.res_layer.1.weight"], padding=1), sd[f"{p}.res_layer.2.weight"])
            r = _ref_bn(F.conv2d(r, sd[f"{p}.res_layer.3.weight"], stride=stride, padding=1), sd, f"{p}.res_layer.4")
            se = r.mean(dim=(2, 3), keepdim=True)
            se = torch.sigmoid(F.conv2d(F.relu(F.conv2d(se, sd[f"{p}.res_layer.5.fc1.weight"])), sd[f"{p}.res_layer.5.fc2.weight"]))
            x = r * se + sc
            i += 1
        outs.append(x)
    return outs[1], outs[2], outs[3]


def ref_style(sd, k, feat):
    j = 0
    while f"styles.{k}.convs.{j}.weight" in sd:
        feat = F.leaky_relu(F.conv2d(feat, sd[f"styles.{k}.convs.{j}.weight"], sd[f"styles.{k}.convs.{j}.bias"], stride=2, padding=1), 0.01)
        j += 2
    feat = feat.flatten(1)
    w = sd[f"styles.{k}.linear.weight"]
    return F.linear(feat, w / math.sqrt(w.shape[1]), sd[f"styles.{k}.linear.bias"])


def ref_pyramid(sd, c1, c2, c3):
    up = lambda a, b: F.interpolate(a, size=b.shape[-2:], mode="bilinear", align_corners=True) + b  # noqa: E731
    p2 = up(c3, F.conv2d(c2, sd["latlayer1.weight"], sd["latlayer1.bias"]))
    p1 = up(p2, F.conv2d(c1, sd["latlayer2.weight"], sd["latlayer2.bias"]))
    return p2, p1


def ref_psp(sd, x, units, n_styles):
    c1, c2, c3 = ref_backbone(sd, x, units)
    p2, p1 = ref_pyramid(sd, c1, c2, c3)
    return torch.stack([ref_style(sd, k, c3 if k < 3 else p2 if k < 7 else p1) for k in range(n_styles)], dim=1)


def ref_e4e(sd, x, units, n_styles):
    c1, c2, c3 = ref_backbone(sd, x, units)
    p2, p1 = ref_pyramid(sd, c1, c2, c3)
    w0 = ref_style(sd, 0, c3)
    return torch.stack([w0] + [w0 + ref_style(sd, k, c3 if k < 3 else p2 if k < 7 else p1) for k in range(1, n_styles)], dim=1)


# ------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [GradualStyleEncoder, Encoder4Editing])
@pytest.mark.parametrize("size", [256, 64])
def test_encode_shapes_and_features(cls, size):
    torch.manual_seed(0)
    enc = cls(**TINY).eval()
    x = torch.rand(2, 3, size, size) * 2 - 1
    with torch.no_grad():
        codes, feats = enc.encode(x)
        assert torch.equal(enc(x), codes)
    assert codes.shape == (2, 14, 24)
    assert sorted(feats) == [size // 16, size // 8, size // 4]
    assert feats[size // 4].shape == (2, 32, size // 4, size // 4)  # c1: end of stage 2
    assert feats[size // 8].shape == (2, 48, size // 8, size // 8)  # c2: end of stage 3
    assert feats[size // 16].shape == (2, 64, size // 16, size // 16)  # c3: end of stage 4
    assert torch.isfinite(codes).all()
    # different images give different codes
    assert not torch.allclose(codes[0], codes[1])


def test_official_feature_channels_at_256():
    """Official config on a meta device: c1/c2/c3 have 128/256/512 channels at 64/32/16 px."""
    with torch.device("meta"):
        enc = GradualStyleEncoder()
        codes, feats = enc.encode(torch.empty(1, 3, 256, 256))
    assert codes.shape == (1, 14, 512)
    assert {k: tuple(v.shape) for k, v in feats.items()} == {64: (1, 128, 64, 64), 32: (1, 256, 32, 32), 16: (1, 512, 16, 16)}


def _closed_form_param_count(n_styles: int) -> int:
    """IR-SE50 pSp encoder parameters, counted by hand from the published architecture.

    input layer: conv 3*64*9, BN 2*64, PReLU 64. Unit (in -> d): BN(in) 2*in, conv in*d*9, PReLU d,
    conv d*d*9, BN 2*d, SE 2*d*(d/16), shortcut conv+BN in*d + 2*d when in != d.
    Stages [3,4,14,3] x [64,128,256,512]. Style block at spatial s: log2(s) convs (first 512->512,
    all 3x3 with bias) + EqualLinear 512x512 + 512. latlayer1 256->512 + 512, latlayer2 128->512 + 512.
    """
    total = 3 * 64 * 9 + 2 * 64 + 64
    in_c = 64
    for n, d in zip([3, 4, 14, 3], [64, 128, 256, 512]):
        for _ in range(n):
            total += 2 * in_c + in_c * d * 9 + d + d * d * 9 + 2 * d + 2 * d * (d // 16)
            if in_c != d:
                total += in_c * d + 2 * d
            in_c = d
    conv = 512 * 512 * 9 + 512
    for k in range(n_styles):
        n_convs = 4 if k < 3 else 5 if k < 7 else 6
        total += n_convs * conv + 512 * 512 + 512
    total += 256 * 512 + 512 + 128 * 512 + 512
    return total


@pytest.mark.parametrize("cls", [GradualStyleEncoder, Encoder4Editing])
def test_official_parameter_count(cls):
    shapes = official_encoder_shapes([3, 4, 14, 3], [64, 128, 256, 512], n_styles=14)
    from_keys = sum(math.prod(s) for k, s in shapes.items() if "running_" not in k and "num_batches" not in k)
    expected = _closed_form_param_count(14)
    assert from_keys == expected
    with torch.device("meta"):
        assert cls().num_parameters() == expected  # 256 px generator: 14 styles
        assert cls(n_styles=18).num_parameters() == _closed_form_param_count(18)  # 1024 px: 18 styles
    # The IR-SE50 trunk alone (input layer + body) is the well-known ~23.5M of the ArcFace backbone
    # without its 25088->512 head; the pyramid/style heads dominate the encoder.
    assert 200e6 < expected < 215e6


@pytest.mark.parametrize("kind,cls,ref", [("psp", GradualStyleEncoder, ref_psp), ("e4e", Encoder4Editing, ref_e4e)])
def test_converter_official_keys_roundtrip(kind, cls, ref, tmp_path):
    torch.manual_seed(0)
    units, chans, sd_dim = TINY["stage_units"], TINY["channels"], TINY["style_dim"]
    enc = random_state(official_encoder_shapes(units, chans, n_styles=14, style_dim=sd_dim), seed=1)
    latent_avg = torch.randn(sd_dim)
    ckpt = official_checkpoint(enc, latent_avg, "GradualStyleEncoder" if kind == "psp" else "Encoder4Editing")
    model = get_converter(kind).fn(ckpt)
    assert isinstance(model, cls)
    ours = model.state_dict()
    assert set(ours) == set(enc) | {"latent_avg"}
    for k, v in enc.items():
        assert torch.equal(ours[k], v), k
    assert torch.equal(model.latent_avg, latent_avg.expand(14, sd_dim))

    x = torch.rand(2, 3, 128, 128) * 2 - 1
    model.eval()
    with torch.no_grad():
        codes, _ = model.encode(x)
        expected = ref(enc, x, units, 14)
        torch.testing.assert_close(codes, expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(model.w_plus(x[:1]), expected[:1] + latent_avg, rtol=1e-4, atol=1e-4)

        model.save_pretrained(tmp_path / kind)
        again = cls.from_pretrained(str(tmp_path / kind)).eval()
        assert torch.equal(again(x), codes)
        assert torch.equal(again.latent_avg, model.latent_avg)


def test_converter_accepts_per_style_latent_avg_and_bare_state():
    units, chans, sd_dim = TINY["stage_units"], TINY["channels"], TINY["style_dim"]
    enc = random_state(official_encoder_shapes(units, chans, style_dim=sd_dim), seed=2)
    la = torch.randn(14, sd_dim)
    model = get_converter("e4e").fn(official_checkpoint(enc, la, "Encoder4Editing"))
    assert torch.equal(model.latent_avg, la)
    bare = get_converter("psp").fn(dict(enc))  # encoder keys only, no latent_avg
    assert torch.equal(bare.latent_avg, torch.zeros(14, sd_dim))


def test_converter_rejects_mismatches():
    units, chans, sd_dim = TINY["stage_units"], TINY["channels"], TINY["style_dim"]
    enc = random_state(official_encoder_shapes(units, chans, style_dim=sd_dim), seed=3)
    la = torch.zeros(sd_dim)
    bad = dict(enc)
    bad["latlayer1.weight"] = torch.zeros(64, 47, 1, 1)  # wrong input width
    with pytest.raises(ConversionError, match="shape"):
        get_converter("psp").fn(official_checkpoint(bad, la, "GradualStyleEncoder"))
    missing = {k: v for k, v in enc.items() if k != "styles.3.convs.0.bias"}
    with pytest.raises(ConversionError, match="missing"):
        get_converter("psp").fn(official_checkpoint(missing, la, "GradualStyleEncoder"))
    with pytest.raises(ConversionError, match="encoder_type"):
        get_converter("psp").fn(official_checkpoint(enc, la, "Encoder4Editing"))
    with pytest.raises(ConversionError, match="latent_avg"):
        get_converter("psp").fn(official_checkpoint(enc, torch.zeros(3, sd_dim), "GradualStyleEncoder"))
    ckpt = official_checkpoint(enc, la, "GradualStyleEncoder")
    ckpt["opts"]["output_size"] = 1024  # 18 styles expected, 14 present
    with pytest.raises(ConversionError, match="1024"):
        get_converter("psp").fn(ckpt)


def test_official_size_key_list_matches_module():
    """The full IR-SE50 encoder has exactly the official key names and shapes."""
    expected = official_encoder_shapes([3, 4, 14, 3], [64, 128, 256, 512], n_styles=14)
    with torch.device("meta"):
        ours = {k: tuple(v.shape) for k, v in Encoder4Editing().state_dict().items()}
    assert ours.pop("latent_avg") == (14, 512)
    assert ours == expected


def test_e4e_progressive_stage():
    torch.manual_seed(0)
    enc = Encoder4Editing(**TINY).eval()
    x = torch.rand(1, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        full = enc(x)
        enc.set_progressive_stage(0)  # WTraining: a single w repeated
        w_only = enc(x)
        enc.set_progressive_stage(4)  # offsets 1..4 on, 5.. off
        partial = enc(x)
    assert torch.allclose(w_only, w_only[:, :1].expand_as(w_only))
    torch.testing.assert_close(partial[:, :5], full[:, :5])
    torch.testing.assert_close(partial[:, 5:], w_only[:, 5:])
    assert not torch.allclose(full[:, 5:], w_only[:, 5:])


def test_decoder_goes_to_stylegan2_converter():
    from zoo.nn.stylegan2 import Generator

    torch.manual_seed(0)
    gen = Generator(size=16, style_dim=16, n_mlp=2, channel_multiplier=1, channel_max=16)
    enc = random_state(official_encoder_shapes(TINY["stage_units"], TINY["channels"], style_dim=24), seed=4)
    ckpt = {
        "state_dict": {**{f"encoder.{k}": v for k, v in enc.items()}, **{f"decoder.{k}": v for k, v in gen.state_dict().items()}},
        "latent_avg": torch.zeros(24),
    }
    dec = psp_decoder_checkpoint(ckpt)
    assert set(dec["g_ema"]) == set(gen.state_dict())
    converted = get_converter("psp-decoder").fn(ckpt)
    for k, v in gen.state_dict().items():
        assert torch.equal(converted.state_dict()[k], v), k
    # the encoder converter ignores decoder.* entirely
    assert not any(k.startswith("decoder") for k in get_converter("psp").fn(ckpt).state_dict())


def test_convert_file_from_pt_with_opts(tmp_path):
    """The CLI path: a torch.save'd official checkpoint (with an opts dict) loads without unpickling code."""
    from zoo.convert import convert_file

    enc = random_state(official_encoder_shapes(TINY["stage_units"], TINY["channels"], style_dim=24), seed=5)
    ckpt = official_checkpoint(enc, torch.randn(24), "Encoder4Editing")
    ckpt["opts"].update({"exp_dir": "/tmp/x", "stylegan_size": 256, "lpips_lambda": 0.8, "resume_training_from_ckpt": None, "use_w_pool": True})
    src = tmp_path / "e4e_ffhq_encode.pt"
    torch.save(ckpt, src)
    out = convert_file("e4e", src, tmp_path / "out")
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    model = Encoder4Editing.from_pretrained(str(out))
    assert model.n_styles == 14 and model.style_dim == 24
    assert torch.equal(model.state_dict()["body.3.res_layer.1.weight"], enc["body.3.res_layer.1.weight"])
