"""ArcFace (IR-SE50, iResNet), BiSeNet face parser, LPIPS and VGG19 features.

Official key lists, parameter counts and reference forward passes are written here from the published
architectures (TreB1eN/InsightFace_Pytorch model.py, deepinsight arcface_torch backbones/iresnet.py,
zllrunning/face-parsing.PyTorch model.py + resnet.py, richzhang/PerceptualSimilarity lpips,
torchvision's AlexNet/VGG layouts), independently of the modules under test.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from official_layouts import bn_shapes, irse_stem_and_body_shapes

from zoo.convert import ConversionError, get_converter
from zoo.hub import WeightsNotFoundError
from zoo.nn.arcface import IResNet, IRSEArcFace, arcface_crop
from zoo.nn.bisenet import CLASS_NAMES, REGION_GROUPS, BiSeNet, FaceParser, region_mask
from zoo.nn.lpips import LPIPS, LPIPSUnavailable, load_lpips
from zoo.nn.vgg import VGG19Features, load_vgg19

TINY_UNITS, TINY_CHANS = [1, 2, 1, 1], [16, 32, 48, 64]


pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------------------------------------
# helpers: official key lists and random tensors
# ------------------------------------------------------------------------------------------------


_bn = bn_shapes


def irse_arcface_shapes(units, chans, emb=512, side=7) -> dict[str, tuple[int, ...]]:
    """model_ir_se50.pth layout: input_layer, body (IR-SE units), output_layer (BN2d, -, -, Linear, BN1d)."""
    s = irse_stem_and_body_shapes(units, chans)
    s.update(_bn("output_layer.0", chans[-1]))
    s["output_layer.3.weight"] = (emb, chans[-1] * side * side)
    s["output_layer.3.bias"] = (emb,)
    s.update(_bn("output_layer.4", emb))
    return s


def iresnet_shapes(layers, chans, emb=512, side=7) -> dict[str, tuple[int, ...]]:
    """arcface_torch backbone.pth layout."""
    s = {"conv1.weight": (chans[0], 3, 3, 3), **_bn("bn1", chans[0]), "prelu.weight": (chans[0],)}
    in_c = chans[0]
    for st, (n, d) in enumerate(zip(layers, chans), start=1):
        for b in range(n):
            p = f"layer{st}.{b}"
            s.update(_bn(f"{p}.bn1", in_c))
            s[f"{p}.conv1.weight"] = (d, in_c, 3, 3)
            s.update(_bn(f"{p}.bn2", d))
            s[f"{p}.prelu.weight"] = (d,)
            s[f"{p}.conv2.weight"] = (d, d, 3, 3)
            s.update(_bn(f"{p}.bn3", d))
            if b == 0:
                s[f"{p}.downsample.0.weight"] = (d, in_c, 1, 1)
                s.update(_bn(f"{p}.downsample.1", d))
            in_c = d
    s.update(_bn("bn2", chans[-1]))
    s["fc.weight"] = (emb, chans[-1] * side * side)
    s["fc.bias"] = (emb,)
    s.update(_bn("features", emb))
    return s


def bisenet_shapes(n_classes=19, trunk=(64, 128, 256, 512), ctx=128, fuse=256, aux=64) -> dict[str, tuple[int, ...]]:
    """79999_iter.pth layout (zllrunning face-parsing.PyTorch)."""
    s = {"cp.resnet.conv1.weight": (trunk[0], 3, 7, 7), **_bn("cp.resnet.bn1", trunk[0])}
    in_c = trunk[0]
    for st, d in enumerate(trunk, start=1):
        for b in range(2):
            p = f"cp.resnet.layer{st}.{b}"
            s[f"{p}.conv1.weight"] = (d, in_c, 3, 3)
            s.update(_bn(f"{p}.bn1", d))
            s[f"{p}.conv2.weight"] = (d, d, 3, 3)
            s.update(_bn(f"{p}.bn2", d))
            if b == 0 and (in_c != d or st > 1):
                s[f"{p}.downsample.0.weight"] = (d, in_c, 1, 1)
                s.update(_bn(f"{p}.downsample.1", d))
            in_c = d

    def cbr(p, i, o, k):
        s[f"{p}.conv.weight"] = (o, i, k, k)
        s.update(_bn(f"{p}.bn", o))

    for name, c_in in (("arm16", trunk[2]), ("arm32", trunk[3])):
        cbr(f"cp.{name}.conv", c_in, ctx, 3)
        s[f"cp.{name}.conv_atten.weight"] = (ctx, ctx, 1, 1)
        s.update(_bn(f"cp.{name}.bn_atten", ctx))
    cbr("cp.conv_head32", ctx, ctx, 3)
    cbr("cp.conv_head16", ctx, ctx, 3)
    cbr("cp.conv_avg", trunk[3], ctx, 1)
    cbr("ffm.convblk", trunk[1] + ctx, fuse, 1)
    s["ffm.conv1.weight"] = (fuse // 4, fuse, 1, 1)
    s["ffm.conv2.weight"] = (fuse, fuse // 4, 1, 1)
    for name, c_in, mid in (("conv_out", fuse, fuse), ("conv_out16", ctx, aux), ("conv_out32", ctx, aux)):
        cbr(f"{name}.conv", c_in, mid, 3)
        s[f"{name}.conv_out.weight"] = (n_classes, mid, 1, 1)
    return s


def random_state(shapes, seed=0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, shp in shapes.items():
        if k.endswith("num_batches_tracked"):
            out[k] = torch.tensor(3)
        elif k.endswith("running_var"):
            out[k] = torch.rand(shp, generator=g) + 0.5
        elif k.endswith("running_mean"):
            out[k] = 0.1 * torch.randn(shp, generator=g)
        elif len(shp) == 4:
            out[k] = torch.randn(shp, generator=g) / math.sqrt(shp[1] * shp[2] * shp[3])
        elif len(shp) == 2:
            out[k] = torch.randn(shp, generator=g) / math.sqrt(shp[1])
        else:
            out[k] = 1 + 0.1 * torch.randn(shp, generator=g) if k.endswith("weight") else 0.1 * torch.randn(shp, generator=g)
    return out


def _params(shapes) -> int:
    return sum(math.prod(s) for k, s in shapes.items() if "running_" not in k and "num_batches" not in k)


def _ref_bn(x, sd, p, eps=1e-5):
    return F.batch_norm(x, sd[f"{p}.running_mean"], sd[f"{p}.running_var"], sd[f"{p}.weight"], sd[f"{p}.bias"], False, 0.0, eps)


# ------------------------------------------------------------------------------------------------
# parameter counts
# ------------------------------------------------------------------------------------------------


def test_irse50_arcface_parameter_count():
    # Closed form: IR-SE50 trunk (see tests/test_encoders.py) + output layer BN2d(512) + Linear(25088, 512) + BN1d(512).
    trunk = 3 * 64 * 9 + 2 * 64 + 64
    in_c = 64
    for n, d in zip([3, 4, 14, 3], [64, 128, 256, 512]):
        for _ in range(n):
            trunk += 2 * in_c + in_c * d * 9 + d + d * d * 9 + 2 * d + 2 * d * (d // 16) + (in_c * d + 2 * d if in_c != d else 0)
            in_c = d
    expected = trunk + 2 * 512 + 512 * 7 * 7 * 512 + 512 + 2 * 512
    assert _params(irse_arcface_shapes([3, 4, 14, 3], [64, 128, 256, 512])) == expected
    with torch.device("meta"):
        assert IRSEArcFace().num_parameters() == expected
    assert round(expected / 1e6, 1) == 43.8  # model_ir_se50.pth: the published 43.8M parameters


def test_iresnet_parameter_counts():
    def closed_form(layers):
        total = 3 * 64 * 9 + 2 * 64 + 64
        in_c = 64
        for n, d in zip(layers, [64, 128, 256, 512]):
            for b in range(n):
                total += 2 * in_c + in_c * d * 9 + 2 * d + d + d * d * 9 + 2 * d + (in_c * d + 2 * d if b == 0 else 0)
                in_c = d
        return total + 2 * 512 + 512 * 49 * 512 + 512 + 2 * 512

    r50, r100 = closed_form([3, 4, 14, 3]), closed_form([3, 13, 30, 3])
    assert _params(iresnet_shapes([3, 4, 14, 3], [64, 128, 256, 512])) == r50
    with torch.device("meta"):
        assert IResNet.iresnet50().num_parameters() == r50
        assert IResNet.iresnet100().num_parameters() == r100
    # arcface_torch model zoo: r50 43.6M, r100 65.2M parameters
    assert (round(r50 / 1e6, 1), round(r100 / 1e6, 1)) == (43.6, 65.2)


def test_bisenet_parameter_count():
    # ResNet-18 trunk = torchvision resnet18 (11,689,512 params) without its 1000-way fc (512*1000 + 1000).
    trunk = 11_689_512 - (512 * 1000 + 1000)
    cbr = lambda i, o, k: i * o * k * k + 2 * o  # noqa: E731  conv (no bias) + BN
    arm = lambda i, o: cbr(i, o, 3) + o * o + 2 * o  # noqa: E731
    heads = (
        arm(256, 128) + arm(512, 128) + 2 * cbr(128, 128, 3) + cbr(512, 128, 1)  # context path
        + cbr(256, 256, 1) + 256 * 64 + 64 * 256  # feature fusion
        + cbr(256, 256, 3) + 256 * 19 + 2 * (cbr(128, 64, 3) + 64 * 19)  # main + two auxiliary heads
    )  # fmt: skip
    assert _params(bisenet_shapes()) == trunk + heads
    with torch.device("meta"):
        net = BiSeNet()
        assert net.num_parameters() == trunk + heads
        assert net.cp.resnet.num_parameters() == trunk


# ------------------------------------------------------------------------------------------------
# ArcFace
# ------------------------------------------------------------------------------------------------


def test_arcface_crop_maps_aligned_faces_to_112():
    torch.manual_seed(0)
    x = torch.rand(2, 3, 256, 256) * 2 - 1
    crop = arcface_crop(x)
    assert crop.shape == (2, 3, 112, 112)
    torch.testing.assert_close(crop, F.adaptive_avg_pool2d(x[:, :, 35:223, 32:220], 112))
    # the box scales with the image: rows 70:446, cols 64:440 at 512 px; a smooth face gives nearly the same crop
    big = torch.rand(1, 3, 512, 512)
    torch.testing.assert_close(arcface_crop(big), F.adaptive_avg_pool2d(big[:, :, 70:446, 64:440], 112))
    smooth = F.interpolate(torch.rand(1, 3, 8, 8), size=256, mode="bilinear", align_corners=False)
    smooth2x = F.interpolate(smooth, scale_factor=2, mode="bilinear", align_corners=False)
    assert (arcface_crop(smooth2x) - arcface_crop(smooth)).abs().max() < 0.03
    assert arcface_crop(torch.rand(1, 3, 1024, 1024)).shape == (1, 3, 112, 112)
    # only the box matters: changing pixels outside it leaves the crop unchanged
    y = x.clone()
    y[:, :, :35] = 5.0
    torch.testing.assert_close(arcface_crop(y), crop)


@pytest.mark.parametrize("cls", ["irse", "iresnet"])
def test_embed_is_unit_norm_and_identity_sensitive(cls):
    torch.manual_seed(0)
    if cls == "irse":
        net = IRSEArcFace(stage_units=TINY_UNITS, channels=TINY_CHANS).eval()
    else:
        net = IResNet(layers=TINY_UNITS, channels=TINY_CHANS).eval()
    x = F.interpolate(torch.rand(3, 3, 16, 16) * 2 - 1, size=256, mode="bilinear", align_corners=False)  # smooth "faces"
    with torch.no_grad():
        e = net.embed(x)
        e_small = net.embed(F.interpolate(x, size=128, mode="bilinear", antialias=True, align_corners=False))
        e_crop = net.embed(arcface_crop(x), ffhq_aligned=False)
    assert e.shape == (3, 512)
    torch.testing.assert_close(e.norm(dim=1), torch.ones(3))
    torch.testing.assert_close(e_crop, e)  # an ArcFace crop is used as is
    assert (e_small * e).sum(1).min() > 0.9  # same faces at half resolution stay close
    assert (e[0] * e[1]).sum() < 0.999  # different inputs, different embeddings


def ref_irse_arcface(sd, x, units):
    x = F.prelu(_ref_bn(F.conv2d(x, sd["input_layer.0.weight"], padding=1), sd, "input_layer.1"), sd["input_layer.2.weight"])
    i = 0
    for n in units:
        for j in range(n):
            p, stride = f"body.{i}", 2 if j == 0 else 1
            if f"{p}.shortcut_layer.0.weight" in sd:
                sc = _ref_bn(F.conv2d(x, sd[f"{p}.shortcut_layer.0.weight"], stride=stride), sd, f"{p}.shortcut_layer.1")
            else:
                sc = x[:, :, ::stride, ::stride]
            r = F.prelu(F.conv2d(_ref_bn(x, sd, f"{p}.res_layer.0"), sd[f"{p}.res_layer.1.weight"], padding=1), sd[f"{p}.res_layer.2.weight"])
            r = _ref_bn(F.conv2d(r, sd[f"{p}.res_layer.3.weight"], stride=stride, padding=1), sd, f"{p}.res_layer.4")
            se = torch.sigmoid(F.conv2d(F.relu(F.conv2d(r.mean((2, 3), keepdim=True), sd[f"{p}.res_layer.5.fc1.weight"])), sd[f"{p}.res_layer.5.fc2.weight"]))
            x, i = r * se + sc, i + 1
    x = _ref_bn(x, sd, "output_layer.0").flatten(1)
    x = F.linear(x, sd["output_layer.3.weight"], sd["output_layer.3.bias"])
    x = _ref_bn(x, sd, "output_layer.4")
    return x / x.norm(dim=1, keepdim=True)


def ref_iresnet(sd, x, layers):
    x = F.prelu(_ref_bn(F.conv2d(x, sd["conv1.weight"], padding=1), sd, "bn1"), sd["prelu.weight"])
    for st, n in enumerate(layers, start=1):
        for b in range(n):
            p, stride = f"layer{st}.{b}", 2 if b == 0 else 1
            out = F.conv2d(_ref_bn(x, sd, f"{p}.bn1"), sd[f"{p}.conv1.weight"], padding=1)
            out = F.prelu(_ref_bn(out, sd, f"{p}.bn2"), sd[f"{p}.prelu.weight"])
            out = _ref_bn(F.conv2d(out, sd[f"{p}.conv2.weight"], stride=stride, padding=1), sd, f"{p}.bn3")
            idn = _ref_bn(F.conv2d(x, sd[f"{p}.downsample.0.weight"], stride=stride), sd, f"{p}.downsample.1") if b == 0 else x
            x = out + idn
    x = _ref_bn(x, sd, "bn2").flatten(1)
    return _ref_bn(F.linear(x, sd["fc.weight"], sd["fc.bias"]), sd, "features")


def test_arcface_irse50_converter(tmp_path):
    torch.manual_seed(0)
    sd = random_state(irse_arcface_shapes(TINY_UNITS, TINY_CHANS), seed=1)
    old_style = {f"module.{k}": v for k, v in sd.items() if not k.endswith("num_batches_tracked")}  # pre-0.4.1 + DataParallel
    net = get_converter("arcface-irse50").fn(old_style).eval()
    assert isinstance(net, IRSEArcFace)
    x = torch.rand(2, 3, 112, 112) * 2 - 1
    with torch.no_grad():
        torch.testing.assert_close(net(x), ref_irse_arcface(sd, x, TINY_UNITS), rtol=1e-4, atol=1e-5)
    for k, v in sd.items():
        if not k.endswith("num_batches_tracked"):
            assert torch.equal(net.state_dict()[k], v), k
    net.save_pretrained(tmp_path)
    with torch.no_grad():
        assert torch.equal(IRSEArcFace.from_pretrained(str(tmp_path)).eval()(x), net(x))
    bad = dict(sd)
    bad["output_layer.3.weight"] = torch.zeros(512, 64 * 6 * 6 + 1)
    with pytest.raises(ConversionError):
        get_converter("arcface-irse50").fn(bad)
    bad = dict(sd)
    bad["body.1.res_layer.5.fc1.weight"] = torch.zeros(3, 32, 1, 1)
    with pytest.raises(ConversionError, match="shape"):
        get_converter("arcface-irse50").fn(bad)


def test_iresnet_converters():
    torch.manual_seed(0)
    sd = random_state(iresnet_shapes(TINY_UNITS, TINY_CHANS), seed=2)
    net = get_converter("iresnet").fn(sd).eval()
    x = torch.rand(2, 3, 112, 112) * 2 - 1
    with torch.no_grad():
        torch.testing.assert_close(net(x), ref_iresnet(sd, x, TINY_UNITS), rtol=1e-4, atol=1e-5)
    # the depth-specific converters check the blocks per stage
    with pytest.raises(ConversionError, match="expected"):
        get_converter("iresnet50").fn(sd)
    with torch.device("meta"):
        full = {k: torch.empty(s) for k, s in iresnet_shapes([3, 13, 30, 3], [64, 128, 256, 512]).items()}
    assert set(IResNet.iresnet100().state_dict()) == set(full)
    with pytest.raises(ConversionError, match="expected"):
        get_converter("iresnet50").fn(full)
    bad = dict(sd)
    bad["layer2.0.bn3.running_var"] = torch.ones(7)
    with pytest.raises(ConversionError, match="shape"):
        get_converter("iresnet").fn(bad)


def test_official_arcface_key_lists_match_modules():
    with torch.device("meta"):
        irse = {k: tuple(v.shape) for k, v in IRSEArcFace().state_dict().items()}
        r50 = {k: tuple(v.shape) for k, v in IResNet.iresnet50().state_dict().items()}
    assert irse == irse_arcface_shapes([3, 4, 14, 3], [64, 128, 256, 512])
    assert r50 == iresnet_shapes([3, 4, 14, 3], [64, 128, 256, 512])


# ------------------------------------------------------------------------------------------------
# BiSeNet
# ------------------------------------------------------------------------------------------------

TINY_BISENET = dict(trunk_channels=[8, 16, 24, 32], context_channels=16, fuse_channels=32, aux_channels=8)


def ref_bisenet(sd, x):
    """zllrunning BiSeNet forward (main output) from a state dict."""

    def cbr(x, p, stride=1, pad=1):
        return F.relu(_ref_bn(F.conv2d(x, sd[f"{p}.conv.weight"], stride=stride, padding=pad), sd, f"{p}.bn"))

    def block(x, p, stride):
        r = F.relu(_ref_bn(F.conv2d(x, sd[f"{p}.conv1.weight"], stride=stride, padding=1), sd, f"{p}.bn1"))
        r = _ref_bn(F.conv2d(r, sd[f"{p}.conv2.weight"], padding=1), sd, f"{p}.bn2")
        sc = _ref_bn(F.conv2d(x, sd[f"{p}.downsample.0.weight"], stride=stride), sd, f"{p}.downsample.1") if f"{p}.downsample.0.weight" in sd else x
        return F.relu(r + sc)

    def arm(x, p):
        f = cbr(x, f"{p}.conv")
        a = torch.sigmoid(_ref_bn(F.conv2d(f.mean((2, 3), keepdim=True), sd[f"{p}.conv_atten.weight"]), sd, f"{p}.bn_atten"))
        return f * a

    H, W = x.shape[-2:]
    h = F.relu(_ref_bn(F.conv2d(x, sd["cp.resnet.conv1.weight"], stride=2, padding=3), sd, "cp.resnet.bn1"))
    h = F.max_pool2d(h, 3, 2, 1)
    feats = []
    for st in range(1, 5):
        for b in range(2):
            h = block(h, f"cp.resnet.layer{st}.{b}", 2 if (b == 0 and st > 1) else 1)
        feats.append(h)
    f8, f16, f32 = feats[1:]
    avg = cbr(f32.mean((2, 3), keepdim=True), "cp.conv_avg", pad=0)
    s32 = arm(f32, "cp.arm32") + F.interpolate(avg, f32.shape[-2:], mode="nearest")
    up32 = cbr(F.interpolate(s32, f16.shape[-2:], mode="nearest"), "cp.conv_head32")
    s16 = arm(f16, "cp.arm16") + up32
    up16 = cbr(F.interpolate(s16, f8.shape[-2:], mode="nearest"), "cp.conv_head16")
    fuse = cbr(torch.cat([f8, up16], 1), "ffm.convblk", pad=0)
    a = torch.sigmoid(F.conv2d(F.relu(F.conv2d(fuse.mean((2, 3), keepdim=True), sd["ffm.conv1.weight"])), sd["ffm.conv2.weight"]))
    fuse = fuse + fuse * a
    out = F.conv2d(cbr(fuse, "conv_out.conv"), sd["conv_out.conv_out.weight"])
    return F.interpolate(out, (H, W), mode="bilinear", align_corners=True)


def test_bisenet_converter_official_and_tiny(tmp_path):
    torch.manual_seed(0)
    # full official layout: every key maps 1:1
    full = random_state(bisenet_shapes(), seed=3)
    net = get_converter("bisenet").fn(full)
    assert net.n_classes == 19
    ours = net.state_dict()
    assert set(ours) == set(full)
    assert all(torch.equal(ours[k], v) for k, v in full.items())
    # tiny layout: converter infers the widths, forward matches the reference
    sd = random_state(bisenet_shapes(n_classes=5, trunk=(8, 16, 24, 32), ctx=16, fuse=32, aux=8), seed=4)
    tiny = get_converter("bisenet").fn({f"module.{k}": v for k, v in sd.items()}).eval()
    x = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        torch.testing.assert_close(tiny(x)[0], ref_bisenet(sd, x), rtol=1e-4, atol=1e-4)
    tiny.save_pretrained(tmp_path)
    with torch.no_grad():
        assert torch.equal(FaceParser.from_pretrained(tmp_path).net(x)[0], tiny(x)[0])
    bad = dict(full)
    bad["ffm.conv1.weight"] = torch.zeros(64, 255, 1, 1)
    with pytest.raises(ConversionError, match="shape"):
        get_converter("bisenet").fn(bad)


def test_face_parser_labels_and_masks():
    torch.manual_seed(0)
    parser = FaceParser(BiSeNet(**TINY_BISENET, parse_size=64))
    x = torch.rand(2, 3, 70, 50) * 2 - 1
    labels = parser.parse(x)
    assert labels.shape == (2, 70, 50) and labels.dtype == torch.long
    assert labels.min() >= 0 and labels.max() < 19
    with torch.no_grad():
        logits = parser.net.logits(x)
    assert torch.equal(labels, logits.argmax(1))

    lab = torch.tensor([[[0, 1, 17], [6, 9, 13]]])
    assert torch.equal(region_mask(lab, "hair")[0, 0], torch.tensor([[0.0, 0, 1], [0, 0, 0]]))
    assert torch.equal(region_mask(lab, "face")[0, 0], torch.tensor([[0.0, 1, 0], [1, 0, 1]]))
    assert torch.equal(region_mask(lab, "accessories")[0, 0], torch.tensor([[0.0, 0, 0], [1, 1, 0]]))
    assert torch.equal(region_mask(lab, ["background", "l_lip", 17])[0, 0], torch.tensor([[1.0, 0, 1], [0, 0, 1]]))
    assert parser.region_mask(lab, "skin").shape == (1, 1, 2, 3)
    # every class belongs to exactly one of these partitions of the image
    parts = ["background", "face", "ears", "hair", "neck", "cloth", "hat"]
    extra = {9, 15}  # earrings and necklace are accessories
    covered = sorted(sum((list(REGION_GROUPS[p]) for p in parts), []) + sorted(extra))
    assert covered == list(range(19))
    assert CLASS_NAMES[17] == "hair" and CLASS_NAMES[6] == "eye_g" and len(CLASS_NAMES) == 19
    with pytest.raises(KeyError):
        region_mask(lab, "beard")


# ------------------------------------------------------------------------------------------------
# LPIPS and VGG
# ------------------------------------------------------------------------------------------------

ALEX_CONVS = {0: (64, 3, 11), 3: (192, 64, 5), 6: (384, 192, 3), 8: (256, 384, 3), 10: (256, 256, 3)}


def torchvision_alexnet_state(seed=5) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for i, (o, c, k) in ALEX_CONVS.items():
        sd[f"features.{i}.weight"] = torch.randn(o, c, k, k, generator=g) / math.sqrt(c * k * k)
        sd[f"features.{i}.bias"] = 0.1 * torch.randn(o, generator=g)
    sd["classifier.1.weight"] = torch.randn(16, 9216 // 576, generator=g)  # classifier entries are dropped
    sd["classifier.1.bias"] = torch.zeros(16)
    return sd


def lpips_lin_state(chns, seed=6) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {f"lin{i}.model.1.weight": torch.rand(1, c, 1, 1, generator=g) for i, c in enumerate(chns)}


def ref_lpips_alex(trunk, lin, x0, x1):
    shift = torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1)
    scale = torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1)

    def feats(x):
        x = (x - shift) / scale
        out = []
        h = F.relu(F.conv2d(x, trunk["features.0.weight"], trunk["features.0.bias"], stride=4, padding=2))
        out.append(h)
        h = F.relu(F.conv2d(F.max_pool2d(h, 3, 2), trunk["features.3.weight"], trunk["features.3.bias"], padding=2))
        out.append(h)
        h = F.relu(F.conv2d(F.max_pool2d(h, 3, 2), trunk["features.6.weight"], trunk["features.6.bias"], padding=1))
        out.append(h)
        for i in (8, 10):
            h = F.relu(F.conv2d(h, trunk[f"features.{i}.weight"], trunk[f"features.{i}.bias"], padding=1))
            out.append(h)
        return out

    total = 0
    for k, (a, b) in enumerate(zip(feats(x0), feats(x1))):
        a = a / (a.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
        b = b / (b.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
        total = total + F.conv2d((a - b) ** 2, lin[f"lin{k}.model.1.weight"]).mean((2, 3), keepdim=True)
    return total


def test_lpips_metric_properties_random_trunk():
    torch.manual_seed(0)
    lp = LPIPS(net="alex")
    x = torch.rand(3, 3, 64, 64) * 2 - 1
    y = torch.rand(3, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        d_xx, d_xy, d_yx = lp(x, x), lp(x, y), lp(y, x)
        d_near = lp(x, (x + 0.02 * torch.randn_like(x)).clamp(-1, 1))
        d01 = lp((x + 1) / 2, (y + 1) / 2, normalize=True)
    assert d_xy.shape == (3, 1, 1, 1)
    assert torch.all(d_xx.abs() < 1e-6)
    assert torch.all(d_xy > 0)
    torch.testing.assert_close(d_xy, d_yx)
    assert torch.all(d_near < d_xy)
    torch.testing.assert_close(d01, d_xy)
    assert not any(p.requires_grad for p in lp.parameters())
    # gradients still flow to the images (LPIPS as a loss)
    z = x.clone().requires_grad_(True)
    lp(z, y).sum().backward()
    assert z.grad is not None and z.grad.abs().sum() > 0


def test_lpips_vgg_tiny_and_spatial():
    torch.manual_seed(0)
    lp = LPIPS(net="vgg", width=0.125, spatial=True)
    x, y = torch.rand(2, 3, 32, 32) * 2 - 1, torch.rand(2, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        d = lp(x, y)
    assert d.shape == (2, 1, 32, 32) and torch.all(d >= 0) and d.sum() > 0


def test_lpips_converter_layouts_match_reference(tmp_path):
    torch.manual_seed(0)
    trunk, lin = torchvision_alexnet_state(), lpips_lin_state([64, 192, 384, 256, 256])
    x0, x1 = torch.rand(2, 3, 64, 64) * 2 - 1, torch.rand(2, 3, 64, 64) * 2 - 1
    expected = ref_lpips_alex(trunk, lin, x0, x1)
    # the lpips package's own module layout: slices of torchvision's features
    slice_of = {0: 1, 3: 2, 6: 3, 8: 4, 10: 5}
    pkg = {f"net.slice{slice_of[int(k.split('.')[1])]}.{k.split('.', 1)[1]}": v for k, v in trunk.items() if k.startswith("features.")}
    pkg.update(lin)
    for src in ({"trunk": trunk, "lin": lin, "net": "alex"}, {**trunk, **lin}, pkg):
        lp = get_converter("lpips").fn(src)
        with torch.no_grad():
            torch.testing.assert_close(lp(x0, x1), expected, rtol=1e-4, atol=1e-6)
    with pytest.raises(ConversionError, match="vgg"):
        get_converter("lpips").fn({"trunk": trunk, "lin": lin, "net": "vgg"})
    bad_lin = dict(lin)
    bad_lin["lin2.model.1.weight"] = torch.rand(1, 383, 1, 1)
    with pytest.raises(ConversionError, match="shape"):
        get_converter("lpips").fn({"trunk": trunk, "lin": bad_lin})
    with pytest.raises(ConversionError):
        get_converter("lpips").fn({"trunk": trunk})

    # a converted checkpoint loads through load_lpips from a local folder (subfolder per trunk)
    lp.save_pretrained(tmp_path / "alex")
    loaded = load_lpips("alex", repo_id=str(tmp_path))
    with torch.no_grad():
        assert torch.equal(loaded(x0, x1), lp(x0, x1))
    with pytest.raises(LPIPSUnavailable):
        load_lpips("vgg", repo_id=str(tmp_path))


def test_lpips_offline_raises(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(LPIPSUnavailable, match="offline") as info:
        load_lpips("alex", repo_id="no-such-owner-zz/no-such-lpips-repo")
    assert isinstance(info.value, WeightsNotFoundError)
    with pytest.raises(WeightsNotFoundError):
        load_vgg19(repo_id="no-such-owner-zz/no-such-vgg19-repo")


def test_vgg19_features_pre_activation_and_converter():
    torch.manual_seed(0)
    # torchvision vgg19 layout: convs at these feature indices (cfg E), then classifier.*
    conv_idx = [0, 2, 5, 7, 10, 12, 14, 16, 19, 21, 23, 25, 28, 30, 32, 34]
    widths = [64, 64, 128, 128, 256, 256, 256, 256, 512, 512, 512, 512, 512, 512, 512, 512]
    sd, c_in = {}, 3
    for i, c in zip(conv_idx, widths):
        c = c // 8  # a width-1/8 VGG19 keeps the test fast
        sd[f"features.{i}.weight"] = torch.randn(c, c_in, 3, 3) / math.sqrt(9 * c_in)
        sd[f"features.{i}.bias"] = 0.1 * torch.randn(c)
        c_in = c
    sd["classifier.0.weight"] = torch.zeros(4, 4)
    vgg = get_converter("vgg19").fn(sd)
    assert isinstance(vgg, VGG19Features)
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        feats = vgg(x)
    assert list(feats) == ["conv1_2", "conv2_2", "conv3_4", "conv4_4", "conv5_4"]
    assert [tuple(f.shape[1:]) for f in feats.values()] == [(8, 32, 32), (16, 16, 16), (32, 8, 8), (64, 4, 4), (64, 2, 2)]
    # conv1_2 is taken before its ReLU: reproduce it by hand and check it has negative values
    z = ((x + 1) / 2 - torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)) / torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    z = F.relu(F.conv2d(z, sd["features.0.weight"], sd["features.0.bias"], padding=1))
    z = F.conv2d(z, sd["features.2.weight"], sd["features.2.bias"], padding=1)
    torch.testing.assert_close(feats["conv1_2"], z, rtol=1e-4, atol=1e-5)
    assert (feats["conv1_2"] < 0).any()
    loss_same = vgg.perceptual_loss(x, x)
    loss_diff = vgg.perceptual_loss(x, torch.rand_like(x) * 2 - 1)
    assert loss_same.item() == 0 and loss_diff.item() > 0
    with pytest.raises(ConversionError):
        get_converter("vgg19").fn({**sd, "features.34.weight": torch.zeros(64, 63, 3, 3)})
