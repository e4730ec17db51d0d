"""AEI-Net (AAD generator + U-Net attribute encoder), pix2pixHD multi-scale D, GFPGAN clean, component D.

The reference layouts below (``*_reference_shapes``) are written out here from the original code's
structure (taotaonice/FaceShifter ``AEI_Net``, NVIDIA/pix2pixHD ``MultiscaleDiscriminator``,
TencentARC ``GFPGANv1Clean`` / ``FacialComponentDiscriminator``), independently of zoo/nn/*, and are
used both to build "original" checkpoints for the converters and to count parameters.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from zoo.convert import ConversionError, convert_file
from zoo.nn.aad import AADLayer, AEINet, SmallAEINet, attr_shapes, convert_faceshifter_aei, num_levels
from zoo.nn.discriminators import (
    FacialComponentDiscriminator,
    MultiscaleDiscriminator,
    NLayerDiscriminator,
    convert_gfpgan_component_d,
    convert_pix2pixhd_msd,
    crop_rois,
    gram_matrix,
)
from zoo.nn.gfpgan import GFPGANv1Clean, convert_gfpgan, convert_stylegan2_clean

# ---------------------------------------------------------------------------------------------------
# reference layouts: {key: shape}


def _bn(prefix: str, c: int) -> dict[str, tuple[int, ...]]:
    return {
        f"{prefix}.weight": (c,),
        f"{prefix}.bias": (c,),
        f"{prefix}.running_mean": (c,),
        f"{prefix}.running_var": (c,),
        f"{prefix}.num_batches_tracked": (),
    }


def aei_reference_shapes(c_id: int, c: int) -> dict[str, tuple[int, ...]]:
    """taotaonice/FaceShifter AEI_Net (c=32 is the original: encoder 3-32-64-...-1024-1024)."""
    s: dict[str, tuple[int, ...]] = {}
    enc = [3, c, 2 * c, 4 * c, 8 * c, 16 * c, 32 * c, 32 * c]
    for i in range(1, 8):
        s[f"encoder.conv{i}.0.weight"] = (enc[i], enc[i - 1], 4, 4)
        s.update(_bn(f"encoder.conv{i}.1", enc[i]))
    dec = [(32 * c, 32 * c), (64 * c, 16 * c), (32 * c, 8 * c), (16 * c, 4 * c), (8 * c, 2 * c), (4 * c, c)]
    for i, (cin, cout) in enumerate(dec, start=1):
        s[f"encoder.deconv{i}.deconv.weight"] = (cin, cout, 4, 4)  # ConvTranspose2d: [in, out, k, k]
        s.update(_bn(f"encoder.deconv{i}.bn", cout))
    s["generator.up1.weight"] = (c_id, 32 * c, 2, 2)
    s["generator.up1.bias"] = (32 * c,)
    blocks = [
        (32 * c, 32 * c, 32 * c),
        (32 * c, 32 * c, 64 * c),
        (32 * c, 32 * c, 32 * c),
        (32 * c, 16 * c, 16 * c),
        (16 * c, 8 * c, 8 * c),
        (8 * c, 4 * c, 4 * c),
        (4 * c, 2 * c, 2 * c),
        (2 * c, 3, 2 * c),
    ]
    for k, (cin, cout, catt) in enumerate(blocks, start=1):
        p = f"generator.AADBlk{k}"
        for j in (1, 2, 3) if cin != cout else (1, 2):
            a = f"{p}.AAD{j}"
            s.update(
                {
                    f"{a}.conv1.weight": (cin, catt, 1, 1),
                    f"{a}.conv1.bias": (cin,),
                    f"{a}.conv2.weight": (cin, catt, 1, 1),
                    f"{a}.conv2.bias": (cin,),
                    f"{a}.fc1.weight": (cin, c_id),
                    f"{a}.fc1.bias": (cin,),
                    f"{a}.fc2.weight": (cin, c_id),
                    f"{a}.fc2.bias": (cin,),
                    f"{a}.conv_h.weight": (1, cin, 1, 1),
                    f"{a}.conv_h.bias": (1,),
                }
            )
        s[f"{p}.conv1.weight"] = (cin, cin, 3, 3)
        s[f"{p}.conv2.weight"] = (cout, cin, 3, 3)
        if cin != cout:
            s[f"{p}.conv3.weight"] = (cout, cin, 3, 3)
    return s


def msd_reference_shapes(input_nc=3, ndf=64, n_layers=3, num_D=3, batch=False, interm=False):
    """pix2pixHD MultiscaleDiscriminator (BatchNorm adds weight/bias/running stats after each inner conv)."""
    s: dict[str, tuple[int, ...]] = {}
    chans = [input_nc, ndf] + [min(ndf * 2**n, 512) for n in range(1, n_layers + 1)] + [1]
    for i in range(num_D):
        idx = 0
        for st in range(n_layers + 2):  # stage st: conv chans[st] -> chans[st + 1]
            if interm:
                conv, norm = f"scale{i}_layer{st}.0", f"scale{i}_layer{st}.1"
            else:
                conv, norm = f"layer{i}.{idx}", f"layer{i}.{idx + 1}"
            s[f"{conv}.weight"] = (chans[st + 1], chans[st], 4, 4)
            s[f"{conv}.bias"] = (chans[st + 1],)
            has_norm = 1 <= st <= n_layers
            if has_norm and batch:
                s.update(_bn(norm, chans[st + 1]))
            idx += 1 + (1 if has_norm else 0) + (1 if st <= n_layers else 0)  # conv [+ norm] [+ lrelu]
    return s


def gfpgan_reference_shapes(out_size=512, F_=512, cm=2, narrow=1.0, sft_half=True, different_w=True, num_mlp=8):
    """TencentARC GFPGANv1Clean incl. the stylegan_decoder (StyleGAN2GeneratorClean) and its noise buffers."""
    base = {4: 512, 8: 512, 16: 512, 32: 512, 64: 256 * cm, 128: 128 * cm, 256: 64 * cm, 512: 32 * cm, 1024: 16 * cm}
    dec = {r: int(v * narrow) for r, v in base.items()}
    unet = {r: int(v * narrow * 0.5) for r, v in base.items()}
    L = int(math.log2(out_size))
    s: dict[str, tuple[int, ...]] = {}

    def conv(name, cout, cin, k, bias=True):
        s[f"{name}.weight"] = (cout, cin, k, k)
        if bias:
            s[f"{name}.bias"] = (cout,)

    def resblock(name, cin, cout):
        conv(f"{name}.conv1", cin, cin, 3)
        conv(f"{name}.conv2", cout, cin, 3)
        conv(f"{name}.skip", cout, cin, 1, bias=False)

    conv("conv_body_first", unet[out_size], 3, 1)
    res = [2**i for i in range(L, 1, -1)]  # S, S/2, ..., 4
    for n in range(L - 2):
        resblock(f"conv_body_down.{n}", unet[res[n]], unet[res[n + 1]])
    conv("final_conv", unet[4], unet[8], 3)
    up = [2**i for i in range(2, L + 1)]  # 4, 8, ..., S
    for n in range(L - 2):
        resblock(f"conv_body_up.{n}", unet[up[n]], unet[up[n + 1]])
        conv(f"toRGB.{n}", 3, unet[up[n + 1]], 1)
        c = unet[up[n + 1]]
        for head in ("condition_scale", "condition_shift"):
            conv(f"{head}.{n}.0", c, c, 3)
            conv(f"{head}.{n}.2", c if sft_half else 2 * c, c, 3)
    n_latent = 2 * L - 2
    s["final_linear.weight"] = ((n_latent if different_w else 1) * F_, unet[4] * 16)
    s["final_linear.bias"] = ((n_latent if different_w else 1) * F_,)
    d = "stylegan_decoder"
    for m in range(num_mlp):
        s[f"{d}.style_mlp.{2 * m + 1}.weight"] = (F_, F_)
        s[f"{d}.style_mlp.{2 * m + 1}.bias"] = (F_,)
    s[f"{d}.constant_input.weight"] = (1, dec[4], 4, 4)

    def modconv(name, cout, cin, k):
        s[f"{name}.modulation.weight"] = (cin, F_)
        s[f"{name}.modulation.bias"] = (cin,)
        s[f"{name}.weight"] = (1, cout, cin, k, k)

    def styleconv(name, cin, cout):
        modconv(f"{name}.modulated_conv", cout, cin, 3)
        s[f"{name}.weight"] = (1,)
        s[f"{name}.bias"] = (1, cout, 1, 1)

    def torgb(name, cin):
        modconv(f"{name}.modulated_conv", 3, cin, 1)
        s[f"{name}.bias"] = (1, 3, 1, 1)

    styleconv(f"{d}.style_conv1", dec[4], dec[4])
    torgb(f"{d}.to_rgb1", dec[4])
    for n in range(L - 2):
        cin, cout = dec[up[n]], dec[up[n + 1]]
        styleconv(f"{d}.style_convs.{2 * n}", cin, cout)
        styleconv(f"{d}.style_convs.{2 * n + 1}", cout, cout)
        torgb(f"{d}.to_rgbs.{n}", cout)
    s[f"{d}.noises.noise0"] = (1, 1, 4, 4)
    for n in range(L - 2):
        s[f"{d}.noises.noise{2 * n + 1}"] = s[f"{d}.noises.noise{2 * n + 2}"] = (1, 1, up[n + 1], up[n + 1])
    return s


def component_d_reference_shapes(c=64):
    """GFPGAN FacialComponentDiscriminator (BasicSR ConvLayer: [UpFirDnSmooth,] EqualConv2d, FusedLeakyReLU)."""
    s = {}
    for name, cin, cout, down in (
        ("conv1", 3, c, False),
        ("conv2", c, 2 * c, True),
        ("conv3", 2 * c, 2 * c, False),
        ("conv4", 2 * c, 4 * c, True),
        ("conv5", 4 * c, 4 * c, False),
    ):
        i = 1 if down else 0  # BasicSR's blur has no state
        s[f"{name}.{i}.weight"] = (cout, cin, 3, 3)
        s[f"{name}.{i + 1}.bias"] = (cout,)
    s["final_conv.0.weight"] = (1, 4 * c, 3, 3)
    s["final_conv.0.bias"] = (1,)
    return s


def random_state(shapes: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, shape in shapes.items():
        if k.endswith("num_batches_tracked"):
            out[k] = torch.tensor(7)
        elif k.endswith("running_var"):
            out[k] = torch.rand(shape, generator=g) + 0.5
        else:
            out[k] = torch.randn(shape, generator=g) * 0.2
    return out


def config_of(module, folder) -> dict:
    """The config.json that ``save_pretrained`` writes (the constructor kwargs)."""
    module.save_pretrained(folder)
    return json.loads((folder / "config.json").read_text())


def shapes_of(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def n_params(shapes: dict[str, tuple[int, ...]], skip=("running_", "num_batches", "noises.")) -> int:
    return sum(math.prod(v) for k, v in shapes.items() if not any(t in k for t in skip))


# ---------------------------------------------------------------------------------------------------
# AEI-Net


@pytest.fixture(scope="module")
def tiny_aei():
    torch.manual_seed(0)
    return AEINet(c_id=16, base_channels=2).eval()


def test_attribute_encoder_gives_eight_levels_at_documented_sizes(tiny_aei):
    torch.manual_seed(1)
    c = 2
    z = tiny_aei.encoder(torch.rand(2, 3, 256, 256) * 2 - 1)
    assert len(z) == 8
    expected = [(32 * c, 2), (64 * c, 4), (32 * c, 8), (16 * c, 16), (8 * c, 32), (4 * c, 64), (2 * c, 128), (2 * c, 256)]
    assert [(t.shape[1], t.shape[2], t.shape[3]) for t in z] == [(ch, r, r) for ch, r in expected]
    # z_attr^8 is the bilinear (align_corners) 2x upsample of z_attr^7
    torch.testing.assert_close(z[7], F.interpolate(z[6], scale_factor=2, mode="bilinear", align_corners=True))
    with pytest.raises(ValueError):
        tiny_aei.encoder(torch.zeros(1, 3, 128, 128))


def test_aei_output_and_both_paths_matter(tiny_aei):
    torch.manual_seed(2)
    x1, x2 = torch.rand(2, 1, 3, 256, 256) * 2 - 1
    z1, z2 = F.normalize(torch.randn(2, 1, 16), dim=-1)
    with torch.no_grad():
        y, attrs = tiny_aei(x1, z1)
        y_id, _ = tiny_aei(x1, z2)
        y_att, _ = tiny_aei(x2, z1)
    assert y.shape == (1, 3, 256, 256) and len(attrs) == 8
    assert y.abs().max() <= 1  # tanh output
    assert (y - y_id).abs().mean() > 1e-4  # identity path
    assert (y - y_att).abs().mean() > 1e-4  # attribute path


def test_small_aei_has_log2_levels_and_the_documented_shapes():
    """The tiny configs' AEI-Net at 64 px: n = log2(64) = 6 levels, shapes from attr_shapes."""
    assert num_levels(256) == 8 and num_levels(64) == 6
    with pytest.raises(ValueError):
        num_levels(48)
    torch.manual_seed(3)
    c = 2
    net = SmallAEINet(c_id=16, base_channels=c, image_size=64).eval()
    x = torch.rand(2, 3, 64, 64) * 2 - 1
    z = F.normalize(torch.randn(2, 16), dim=-1)
    with torch.no_grad():
        y, attrs = net(x, z)
        y_other, _ = net(x, z.roll(1, 0))
    assert y.shape == (2, 3, 64, 64) and y.abs().max() <= 1
    assert [(t.shape[1], t.shape[2]) for t in attrs] == attr_shapes(c, 64)
    assert attr_shapes(c, 64) == [(8 * c, 2), (16 * c, 4), (8 * c, 8), (4 * c, 16), (2 * c, 32), (2 * c, 64)]
    assert attr_shapes(c) == [(32 * c, 2), (64 * c, 4), (32 * c, 8), (16 * c, 16), (8 * c, 32), (4 * c, 64), (2 * c, 128), (2 * c, 256)]
    assert (y - y_other).abs().mean() > 1e-4  # the identity reaches the output


def test_aad_layer_attention_mask_selects_identity_or_attributes():
    torch.manual_seed(3)
    layer = AADLayer(c_x=4, c_att=3, c_id=5)
    h, za, za2 = torch.randn(2, 4, 6, 6), torch.randn(2, 3, 6, 6), torch.randn(2, 3, 6, 6)
    zi, zi2 = torch.randn(2, 5), torch.randn(2, 5)
    with torch.no_grad():
        layer.conv_h.weight.zero_()
        layer.conv_h.bias.fill_(40.0)  # M = 1: pure identity integration I = gamma_id * h_bar + beta_id
        h_bar = F.instance_norm(h)
        expect_i = layer.fc1(zi)[:, :, None, None] * h_bar + layer.fc2(zi)[:, :, None, None]
        torch.testing.assert_close(layer(h, za, zi), expect_i)
        torch.testing.assert_close(layer(h, za, zi), layer(h, za2, zi))
        assert not torch.allclose(layer(h, za, zi), layer(h, za, zi2))
        layer.conv_h.bias.fill_(-40.0)  # M = 0: pure attribute integration A = gamma_att * h_bar + beta_att
        expect_a = layer.conv1(za) * h_bar + layer.conv2(za)
        torch.testing.assert_close(layer(h, za, zi), expect_a)
        torch.testing.assert_close(layer(h, za, zi), layer(h, za, zi2))


def test_aei_full_size_layout_matches_reference():
    with torch.device("meta"):
        model = AEINet()
    ref = aei_reference_shapes(512, 32)
    assert shapes_of(model) == ref
    assert model.num_parameters() == n_params(ref)


def test_faceshifter_converter_strict_and_exact(tmp_path):
    torch.manual_seed(4)
    sd = random_state(aei_reference_shapes(16, 2))
    model = convert_faceshifter_aei({"module." + k: v for k, v in sd.items()}).eval()
    assert config_of(model, tmp_path / "aei") == {"c_id": 16, "base_channels": 2, "aad_kernel_size": 1}
    for k, v in model.state_dict().items():
        assert torch.equal(v, sd[k]), k
    # the mapped tensors play their roles: AADBlk1.AAD1 computed by hand from the original tensors
    x, z = torch.rand(1, 3, 256, 256) * 2 - 1, torch.randn(1, 16)
    with torch.no_grad():
        y, att = model(x, z)
        h = F.conv_transpose2d(z[:, :, None, None], sd["generator.up1.weight"], sd["generator.up1.bias"])
        p = "generator.AADBlk1.AAD1."
        hb = F.instance_norm(h)
        gamma_att = F.conv2d(att[0], sd[p + "conv1.weight"], sd[p + "conv1.bias"])
        beta_att = F.conv2d(att[0], sd[p + "conv2.weight"], sd[p + "conv2.bias"])
        gamma_id = F.linear(z, sd[p + "fc1.weight"], sd[p + "fc1.bias"])[:, :, None, None]
        beta_id = F.linear(z, sd[p + "fc2.weight"], sd[p + "fc2.bias"])[:, :, None, None]
        a, i = gamma_att * hb + beta_att, gamma_id * hb + beta_id
        m = torch.sigmoid(F.conv2d(hb, sd[p + "conv_h.weight"], sd[p + "conv_h.bias"]))
        torch.testing.assert_close(model.generator.AADBlk1.AAD1(h, att[0], z), (1 - m) * a + m * i)
    again = AEINet.from_pretrained(str(tmp_path / "aei")).eval()
    with torch.no_grad():
        torch.testing.assert_close(again(x, z)[0], y, rtol=0, atol=0)

    bad = dict(sd)
    bad["generator.AADBlk3.conv1.weight"] = torch.zeros(64, 64, 1, 1)
    with pytest.raises(ConversionError, match="shape"):
        convert_faceshifter_aei(bad)
    extra = dict(sd, **{"generator.extra.weight": torch.zeros(1)})
    with pytest.raises(ConversionError, match="unexpected"):
        convert_faceshifter_aei(extra)
    with pytest.raises(ConversionError):
        convert_faceshifter_aei({k: v for k, v in sd.items() if k != "generator.up1.weight"})


# ---------------------------------------------------------------------------------------------------
# pix2pixHD multi-scale discriminator


def _conv_out(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - k) // s + 1


@pytest.mark.parametrize("interm", [False, True])
def test_msd_outputs_per_scale(interm):
    torch.manual_seed(5)
    n_layers, num_D = 3, 3
    d = MultiscaleDiscriminator(ndf=4, n_layers=n_layers, num_D=num_D, getIntermFeat=interm)
    x = torch.randn(2, 3, 96, 80)
    out = d(x)
    assert len(out) == num_D
    h, w = 96, 80
    for scale in out:
        logits = scale[-1] if interm else scale
        if interm:
            assert len(scale) == n_layers + 2
        eh, ew = h, w
        for stride in [2] * n_layers + [1, 1]:
            eh, ew = _conv_out(eh, 4, stride, 2), _conv_out(ew, 4, stride, 2)
        assert logits.shape == (2, 1, eh, ew)
        h, w = _conv_out(h, 3, 2, 1), _conv_out(w, 3, 2, 1)  # AvgPool2d(3, 2, padding=1)
    # scale 0 sees the full image through the last sub-network (pix2pixHD order), scale 1 the pooled one
    pooled = F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)
    if interm:
        torch.testing.assert_close(d.scale2_layer0(x), out[0][0])
        torch.testing.assert_close(d.scale1_layer0(pooled), out[1][0])
    else:
        torch.testing.assert_close(d.layer2(x), out[0])
        torch.testing.assert_close(d.layer1(pooled), out[1])


def test_msd_default_parameter_count_and_layout():
    with torch.device("meta"):
        d = MultiscaleDiscriminator()
        nb = NLayerDiscriminator(norm="batch")
    ref = msd_reference_shapes()
    assert shapes_of(d) == ref
    # by hand: 3 x (3*64*16+64 + 64*128*16+128 + 128*256*16+256 + 256*512*16+512 + 512*16+1)
    assert d.num_parameters() == n_params(ref) == 3 * 2_764_737 == 8_294_211
    assert nb.num_parameters() == 2_764_737 + 2 * (128 + 256 + 512)


@pytest.mark.parametrize("batch,interm", [(False, False), (True, False), (True, True)])
def test_pix2pixhd_converter(batch, interm, tmp_path):
    torch.manual_seed(6)
    shapes = msd_reference_shapes(input_nc=3, ndf=4, n_layers=2, num_D=2, batch=batch, interm=interm)
    sd = random_state(shapes)
    d = convert_pix2pixhd_msd(sd).eval()
    cfg = config_of(d, tmp_path / "msd")
    assert cfg["norm"] == ("batch" if batch else "instance")
    assert (cfg["n_layers"], cfg["num_D"], cfg["ndf"], cfg["getIntermFeat"]) == (2, 2, 4, interm)
    for k, v in d.state_dict().items():
        assert torch.equal(v, sd[k]), k
    bad = dict(sd)
    key = "scale1_layer1.0.weight" if interm else "layer1.2.weight"
    bad[key] = torch.zeros(sd[key].shape[0], sd[key].shape[1], 3, 3)
    with pytest.raises(ConversionError, match="shape"):
        convert_pix2pixhd_msd(bad)


# ---------------------------------------------------------------------------------------------------
# facial component discriminator, Gram matrix, ROI crops


def test_component_discriminator_shapes_and_converter():
    torch.manual_seed(7)
    sd = random_state(component_d_reference_shapes(c=4))
    d = convert_gfpgan_component_d({"params": sd}).eval()
    x = torch.randn(2, 3, 80, 80)
    logits, feats = d(x, return_feats=True)
    assert logits.shape == (2, 1, 20, 20)
    assert [tuple(f.shape) for f in feats] == [(2, 8, 40, 40), (2, 16, 20, 20)]
    assert d(x)[1] is None
    # the first layer is an equalized-lr conv + fused leaky ReLU of the original tensors
    pre = F.conv2d(x, sd["conv1.0.weight"] / math.sqrt(3 * 9), padding=1) + sd["conv1.1.bias"][:, None, None]
    first = F.leaky_relu(pre, 0.2) * math.sqrt(2)
    torch.testing.assert_close(d.conv1(x), first)
    bad = dict(sd, **{"conv3.0.weight": torch.zeros(8, 8, 1, 1)})
    with pytest.raises(ConversionError, match="shape"):
        convert_gfpgan_component_d({"params": bad})
    with torch.device("meta"):
        full = FacialComponentDiscriminator()
    assert full.num_parameters() == n_params(component_d_reference_shapes(64))


def test_gram_matrix_known_values():
    x = torch.arange(8, dtype=torch.float32).view(1, 2, 2, 2)  # channels [0,1,2,3] and [4,5,6,7]
    g = gram_matrix(x)
    expected = torch.tensor([[[0 + 1 + 4 + 9, 0 + 5 + 12 + 21], [0 + 5 + 12 + 21, 16 + 25 + 36 + 49]]]) / (2 * 4)
    torch.testing.assert_close(g, expected)


def test_crop_rois_samples_bin_centres():
    ys, xs = torch.meshgrid(torch.arange(32.0), torch.arange(40.0), indexing="ij")
    img = torch.stack([xs + 100 * ys, -xs]).unsqueeze(0).repeat(2, 1, 1, 1)
    img[1] *= 2
    boxes = torch.tensor([[0, 2.0, 3.0, 10.0, 7.0], [1, 5.0, 5.0, 13.0, 21.0]])
    out = crop_rois(img, boxes, (4, 4))
    assert out.shape == (2, 2, 4, 4)
    cx0 = 2 + (torch.arange(4) + 0.5) * 2  # bin centres of box 0 in x: 3, 5, 7, 9
    cy0 = 3 + (torch.arange(4) + 0.5) * 1  # and in y: 3.5, 4.5, 5.5, 6.5
    torch.testing.assert_close(out[0, 0], cx0[None, :] + 100 * cy0[:, None])
    cx1 = 5 + (torch.arange(4) + 0.5) * 2
    cy1 = 5 + (torch.arange(4) + 0.5) * 4
    torch.testing.assert_close(out[1, 1], -2 * cx1[None, :].expand(4, 4))
    torch.testing.assert_close(out[1, 0], 2 * (cx1[None, :] + 100 * cy1[:, None]))


# ---------------------------------------------------------------------------------------------------
# GFPGAN


TINY = dict(out_size=64, num_style_feat=32, channel_multiplier=2, narrow=1 / 16)


def test_gfpgan_tiny_shapes_and_noise():
    torch.manual_seed(8)
    m = GFPGANv1Clean(**TINY, sft_half=True, different_w=True, input_is_latent=True).eval()
    x = torch.rand(2, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        img, rgbs = m(x, randomize_noise=False)
        img2, _ = m(x, randomize_noise=False)
        img3, _ = m(x, randomize_noise=True)
        _, none = m(x, return_rgb=False, randomize_noise=False)
    assert img.shape == (2, 3, 64, 64)
    assert [r.shape[-1] for r in rgbs] == [8, 16, 32, 64] and all(r.shape[:2] == (2, 3) for r in rgbs)
    assert none == []
    torch.testing.assert_close(img, img2, rtol=0, atol=0)  # stored noise: deterministic
    # noise strengths start at 0 (as in the original); with non-zero strength random noise matters
    assert torch.equal(img, img3)
    with torch.no_grad():
        for conv in m.stylegan_decoder.style_convs:
            conv.weight.fill_(0.5)
        a, _ = m(x, randomize_noise=True)
        b, _ = m(x, randomize_noise=True)
    assert (a - b).abs().max() > 1e-4


def test_gfpgan_fix_decoder_and_sft_identity():
    torch.manual_seed(9)
    m = GFPGANv1Clean(**TINY, sft_half=False, different_w=False, fix_decoder=True).eval()
    assert not any(p.requires_grad for p in m.stylegan_decoder.parameters())
    assert all(p.requires_grad for n, p in m.named_parameters() if not n.startswith("stylegan_decoder."))
    # SFT with scale = 1, shift = 0 is a no-op: the output is the bare decoder on the same style code
    with torch.no_grad():
        for head, value in ((m.condition_scale, 1.0), (m.condition_shift, 0.0)):
            for seq in head:
                seq[2].weight.zero_()
                seq[2].bias.fill_(value)
        x = torch.rand(1, 3, 64, 64) * 2 - 1
        img, _ = m(x, randomize_noise=False)
        feat = F.leaky_relu(m.conv_body_first(x), 0.2)
        for down in m.conv_body_down:
            feat = down(feat)
        code = m.final_linear(F.leaky_relu(m.final_conv(feat), 0.2).flatten(1))
        bare, _ = m.stylegan_decoder([code], conditions=[], randomize_noise=False)
        torch.testing.assert_close(img, bare)
        # and a non-trivial shift changes it
        m.condition_shift[0][2].bias.fill_(0.5)
        assert (m(x, randomize_noise=False)[0] - img).abs().max() > 1e-4


def test_gfpgan_parameter_counts_match_official_layout():
    with torch.device("meta"):
        release = GFPGANv1Clean(512, 512, 2, fix_decoder=False, input_is_latent=True, different_w=True, narrow=1, sft_half=True)
        brief = GFPGANv1Clean(512, sft_half=True, channel_multiplier=2, narrow=1)
    ref_release = gfpgan_reference_shapes(different_w=True)
    assert shapes_of(release) == ref_release
    assert release.num_parameters() == n_params(ref_release) == 86_444_252
    assert brief.num_parameters() == n_params(gfpgan_reference_shapes(different_w=False)) == 54_979_292
    # different_w only widens final_linear: 4096 -> 16 x 512 instead of 4096 -> 512
    assert release.num_parameters() - brief.num_parameters() == 15 * 512 * (4096 + 1)


def test_gfpgan_converter_strict_and_exact(tmp_path):
    torch.manual_seed(10)
    shapes = gfpgan_reference_shapes(out_size=64, F_=32, cm=2, narrow=1 / 16, sft_half=True, different_w=True, num_mlp=3)
    ema, raw = random_state(shapes, seed=1), random_state(shapes, seed=2)
    m = convert_gfpgan({"params_ema": ema, "params": raw}).eval()
    cfg = config_of(m, tmp_path / "direct")
    assert (cfg["out_size"], cfg["num_mlp"], cfg["num_style_feat"], cfg["channel_multiplier"]) == (64, 3, 32, 2)
    assert cfg["sft_half"] and cfg["different_w"] and cfg["input_is_latent"] and cfg["narrow"] == 1 / 16
    for k, v in m.state_dict().items():
        assert torch.equal(v, ema[k]), k  # params_ema preferred
    assert torch.equal(convert_gfpgan({"params": raw}).final_linear.weight, raw["final_linear.weight"])
    x = torch.rand(1, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        y, _ = m(x, randomize_noise=False)
    # through the command-line path: torch.save'd original -> converter -> safetensors folder -> reload
    torch.save({"params_ema": ema}, tmp_path / "GFPGANtiny.pth")
    out = convert_file("gfpgan", tmp_path / "GFPGANtiny.pth", tmp_path / "gfpgan")
    again = GFPGANv1Clean.from_pretrained(str(out)).eval()
    with torch.no_grad():
        torch.testing.assert_close(again(x, randomize_noise=False)[0], y, rtol=0, atol=0)

    bad = dict(ema, **{"condition_shift.1.2.weight": torch.zeros(3, 3, 3, 3)})
    with pytest.raises(ConversionError, match="shape"):
        convert_gfpgan({"params": bad})
    with pytest.raises(ConversionError, match="missing"):
        convert_gfpgan({k: v for k, v in ema.items() if k != "stylegan_decoder.noises.noise3"})
    with pytest.raises(ConversionError):
        convert_gfpgan({"params_ema": {"foo.weight": torch.zeros(1)}})

    # the decoder alone (a BasicSR StyleGAN2GeneratorClean checkpoint, e.g. the 512 px FFHQ prior)
    dec_sd = {k[len("stylegan_decoder.") :]: v for k, v in ema.items() if k.startswith("stylegan_decoder.")}
    dec = convert_stylegan2_clean({"params_ema": dec_sd}).eval()
    assert config_of(dec, tmp_path / "dec")["out_size"] == 64
    w = torch.randn(1, 10, 32)
    with torch.no_grad():
        alone = dec([w], input_is_latent=True, randomize_noise=False)[0]
        inside = m.stylegan_decoder([w], input_is_latent=True, randomize_noise=False)[0]
    torch.testing.assert_close(alone, inside, rtol=0, atol=0)
    with pytest.raises(ConversionError, match="shape"):
        convert_stylegan2_clean(dict(dec_sd, **{"to_rgbs.1.bias": torch.zeros(1, 4, 1, 1)}))
