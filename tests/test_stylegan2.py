"""StyleGAN2 backbone (zoo.nn.ops, zoo.nn.stylegan2): layout, counts, numerics, injections, converters.

Tiny configurations except for the 256 px config-f models, which are only *built* (cheap) to count
parameters and check the checkpoint layout.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

from zoo.convert import ConversionError, get_converter
from zoo.nn import ops
from zoo.nn.stylegan2 import Discriminator, Generator, ModulatedConv2d, n_latent_for_size

TINY = dict(style_dim=32, n_mlp=2, channel_max=32)


# ------------------------------------------------------------------------------------------
# The rosinality layout, written down independently of zoo.nn.stylegan2 (from the architecture:
# 512 channels up to 32 px, then 256*cm, 128*cm, 64*cm, 32*cm, 16*cm at 64..1024 px; a mapping
# MLP of n_mlp EqualLinear(style_dim, style_dim); two 3x3 styled convs and one 1x1 ToRGB per
# resolution; 4-tap blur kernels stored as buffers; one noise buffer per styled conv).
# ------------------------------------------------------------------------------------------


def official_channels(cm: int, cmax: int = 512) -> dict[int, int]:
    ch = {4: 512, 8: 512, 16: 512, 32: 512, 64: 256 * cm, 128: 128 * cm, 256: 64 * cm, 512: 32 * cm, 1024: 16 * cm}
    return {r: min(c, cmax) for r, c in ch.items()}


def generator_layout(size: int, style_dim: int, n_mlp: int, cm: int = 2, cmax: int = 512):
    """[(key, shape, is_buffer)] of rosinality's Generator.state_dict()."""
    ch = official_channels(cm, cmax)
    out = []
    for i in range(1, n_mlp + 1):
        out += [(f"style.{i}.weight", (style_dim, style_dim), False), (f"style.{i}.bias", (style_dim,), False)]
    out.append(("input.input", (1, ch[4], 4, 4), False))

    def styled(p, cin, cout, up):
        rows = [(f"{p}.conv.weight", (1, cout, cin, 3, 3), False)]
        if up:
            rows.append((f"{p}.conv.blur.kernel", (4, 4), True))
        rows += [
            (f"{p}.conv.modulation.weight", (cin, style_dim), False),
            (f"{p}.conv.modulation.bias", (cin,), False),
            (f"{p}.noise.weight", (1,), False),
            (f"{p}.activate.bias", (cout,), False),
        ]
        return rows

    def to_rgb(p, cin, up):
        rows = [(f"{p}.upsample.kernel", (4, 4), True)] if up else []
        return rows + [
            (f"{p}.conv.weight", (1, 3, cin, 1, 1), False),
            (f"{p}.conv.modulation.weight", (cin, style_dim), False),
            (f"{p}.conv.modulation.bias", (cin,), False),
            (f"{p}.bias", (1, 3, 1, 1), False),
        ]

    out += styled("conv1", ch[4], ch[4], False) + to_rgb("to_rgb1", ch[4], False)
    log_size = int(math.log2(size))
    cin = ch[4]
    for k, i in enumerate(range(3, log_size + 1)):
        cout = ch[2**i]
        out += styled(f"convs.{2 * k}", cin, cout, True) + styled(f"convs.{2 * k + 1}", cout, cout, False)
        out += to_rgb(f"to_rgbs.{k}", cout, True)
        cin = cout
    for j in range(2 * (log_size - 2) + 1):
        r = 2 ** ((j + 5) // 2)
        out.append((f"noises.noise_{j}", (1, 1, r, r), True))
    return out


def discriminator_layout(size: int, cm: int = 2, cmax: int = 512):
    ch = official_channels(cm, cmax)
    out = [("convs.0.0.weight", (ch[size], 3, 1, 1), False), ("convs.0.1.bias", (ch[size],), False)]
    cin = ch[size]
    for j, i in enumerate(range(int(math.log2(size)), 2, -1), start=1):
        cout = ch[2 ** (i - 1)]
        p = f"convs.{j}"
        out += [
            (f"{p}.conv1.0.weight", (cin, cin, 3, 3), False),
            (f"{p}.conv1.1.bias", (cin,), False),
            (f"{p}.conv2.0.kernel", (4, 4), True),
            (f"{p}.conv2.1.weight", (cout, cin, 3, 3), False),
            (f"{p}.conv2.2.bias", (cout,), False),
            (f"{p}.skip.0.kernel", (4, 4), True),
            (f"{p}.skip.1.weight", (cout, cin, 1, 1), False),
        ]
        cin = cout
    out += [
        ("final_conv.0.weight", (ch[4], cin + 1, 3, 3), False),
        ("final_conv.1.bias", (ch[4],), False),
        ("final_linear.0.weight", (ch[4], ch[4] * 16), False),
        ("final_linear.0.bias", (ch[4],), False),
        ("final_linear.1.weight", (1, ch[4]), False),
        ("final_linear.1.bias", (1,), False),
    ]
    return out


def n_params(layout) -> int:
    return sum(math.prod(shape) for _, shape, is_buffer in layout if not is_buffer)


def random_state_dict(layout, seed: int) -> dict[str, torch.Tensor]:
    """A state dict with the given layout; blur kernels hold the real [1,3,3,1] kernels."""
    gen = torch.Generator().manual_seed(seed)
    k1 = torch.tensor([1.0, 3.0, 3.0, 1.0])
    blur = torch.outer(k1, k1) / 64.0
    sd = {}
    for key, shape, _ in layout:
        if key.endswith("kernel"):
            up = key.endswith("upsample.kernel") or (key.startswith("convs.") and ".conv.blur." in key)
            sd[key] = blur * (4.0 if up else 1.0)
        elif key.endswith("noise.weight") or "bias" in key:
            sd[key] = 0.3 * torch.randn(shape, generator=gen)
        else:
            sd[key] = torch.randn(shape, generator=gen)
    return sd


def shapes_of(module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def tiny_generator(size: int = 64, noise_strength: float | None = 0.5, seed: int = 0) -> Generator:
    torch.manual_seed(seed)
    g = Generator(size, **TINY).eval()
    if noise_strength is not None:
        with torch.no_grad():
            for name, p in g.named_parameters():
                if name.endswith("noise.weight"):
                    p.fill_(noise_strength)
    return g


# ------------------------------------------------------------------------------------------
# Sizes, layout and parameter counts
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [64, 128, 256, 512, 1024])
def test_n_latent_per_size(size):
    expected = 2 * int(round(math.log2(size))) - 2
    assert n_latent_for_size(size) == expected
    g = Generator(size, style_dim=8, n_mlp=1, channel_max=8)
    assert g.n_latent == expected and g.log_size == int(math.log2(size))
    assert g.num_layers == expected - 1  # one styled conv at 4 px, two per higher resolution
    assert len(list(g.noises.buffers())) == g.num_layers
    assert sorted(g.channels) == [2**i for i in range(2, g.log_size + 1)]


def test_n_latent_known_values_and_bad_size():
    assert n_latent_for_size(256) == 14 and n_latent_for_size(1024) == 18 and n_latent_for_size(64) == 10
    with pytest.raises(ValueError):
        Generator(96, **TINY)


def test_256_config_f_layout_and_parameter_counts():
    torch.manual_seed(0)
    g = Generator(256)  # style_dim 512, n_mlp 8, channel_multiplier 2
    d = Discriminator(256)
    g_layout = generator_layout(256, 512, 8, cm=2)
    d_layout = discriminator_layout(256, cm=2)
    assert shapes_of(g) == {k: s for k, s, _ in g_layout}
    assert shapes_of(d) == {k: s for k, s, _ in d_layout}
    assert g.n_latent == 14
    assert g.channels == {4: 512, 8: 512, 16: 512, 32: 512, 64: 512, 128: 256, 256: 128}
    # Parameters (buffers excluded) summed from the independent layout above ...
    assert g.num_parameters() == n_params(g_layout)
    assert d.num_parameters() == n_params(d_layout)
    # ... and the totals of rosinality's 256 px config-f g_ema / d, worked out by hand:
    # G: mapping 8*(512*512+512) = 2,101,248; const 8,192; conv1 2,622,465; to_rgb1 264,195;
    #    8..64 px 4*(2*2,622,465 + 264,195) = 22,036,500; 128 px 2,296,069; 256 px 705,669.
    assert g.num_parameters() == 30_034_338
    # D: fromRGB 512; ResBlocks 475,520 + 1,901,312 + 4*4,981,760; final conv 2,364,416;
    #    final linears 4,194,816 + 513.
    assert d.num_parameters() == 28_864_129


def test_tiny_layout_matches_rosinality_layout():
    g = Generator(64, **TINY)
    assert shapes_of(g) == {k: s for k, s, _ in generator_layout(64, 32, 2, cm=2, cmax=32)}
    d = Discriminator(64, channel_max=32)
    assert shapes_of(d) == {k: s for k, s, _ in discriminator_layout(64, cm=2, cmax=32)}


# ------------------------------------------------------------------------------------------
# Mapping, noise, forward compatibility
# ------------------------------------------------------------------------------------------


def test_mapping_is_deterministic_and_mean_latent():
    g = tiny_generator()
    torch.manual_seed(1)
    z = torch.randn(3, 32)
    w1, w2 = g.mapping(z), g.mapping(z.clone())
    assert w1.shape == (3, 32) and torch.equal(w1, w2)
    assert not torch.allclose(w1[0], w1[1])
    # PixelNorm first: scaling z does not change w.
    torch.testing.assert_close(g.mapping(5.0 * z), w1, rtol=1e-5, atol=1e-6)
    m1 = g.mean_latent(64, generator=torch.Generator().manual_seed(7))
    m2 = g.mean_latent(64, generator=torch.Generator().manual_seed(7))
    m3 = g.mean_latent(64, generator=torch.Generator().manual_seed(8))
    assert m1.shape == (1, 32) and torch.equal(m1, m2) and not torch.equal(m1, m3)


def test_noise_modes():
    g = tiny_generator()
    torch.manual_seed(2)
    w = g.mapping(torch.randn(2, 32))
    const1, const2 = g.synthesize(w, noise_mode="const"), g.synthesize(w, noise_mode="const")
    assert const1.shape == (2, 3, 64, 64) and torch.equal(const1, const2)
    rand1, rand2 = g.synthesize(w, noise_mode="random"), g.synthesize(w, noise_mode="random")
    assert not torch.allclose(rand1, rand2)
    none = g.synthesize(w, noise_mode="none")
    assert not torch.allclose(none, const1)
    g0 = tiny_generator(noise_strength=0.0)  # zero noise strength: noise cannot matter
    torch.testing.assert_close(g0.synthesize(w, noise_mode="none"), g0.synthesize(w, noise_mode="const"))
    with pytest.raises(ValueError):
        g.synthesize(w, noise_mode="loud")


def test_forward_is_rosinality_compatible():
    g = tiny_generator()
    torch.manual_seed(3)
    z = torch.randn(2, 32)
    w = g.mapping(z)
    img, latent = g([z], randomize_noise=False, return_latents=True)
    assert latent.shape == (2, g.n_latent, 32)
    torch.testing.assert_close(img, g.synthesize(w.unsqueeze(1).repeat(1, g.n_latent, 1)))
    img_w, none = g([w], input_is_latent=True, randomize_noise=False)
    assert none is None
    torch.testing.assert_close(img_w, img)
    # truncation 0 pulls every sample onto the truncation latent
    t = g.mean_latent(32, generator=torch.Generator().manual_seed(0))
    trunc, _ = g([z], truncation=0.0, truncation_latent=t, randomize_noise=False)
    torch.testing.assert_close(trunc[0], trunc[1])
    # style mixing: the first inject_index layers come from the first style
    z2 = torch.randn(2, 32)
    _, mixed = g([z, z2], inject_index=3, return_latents=True, randomize_noise=False)
    torch.testing.assert_close(mixed[:, :3], g.mapping(z).unsqueeze(1).expand(-1, 3, -1))
    torch.testing.assert_close(mixed[:, 3:], g.mapping(z2).unsqueeze(1).expand(-1, g.n_latent - 3, -1))


# ------------------------------------------------------------------------------------------
# Feature injection
# ------------------------------------------------------------------------------------------


def test_injection_noise_mode_matches_dbaf_attr_noise_semantics():
    """DBAF's generator puts the MAAR maps where the noise of both convs of 16/32/64 px goes."""
    g = tiny_generator()
    torch.manual_seed(4)
    w_plus = torch.randn(2, g.n_latent, 32)
    feat = torch.randn(2, g.channels[32], 32, 32)
    base_img, base = g.synthesize(w_plus, return_features=True)
    img, feats = g.synthesize(w_plus, injections={32: feat}, return_features=True)
    for res in (4, 8, 16):  # layers before the injection are untouched
        assert torch.equal(feats[res], base[res])
    assert not torch.allclose(feats[32], base[32]) and not torch.allclose(img, base_img)
    # same as rosinality forward with the noise list entries of the two 32 px convs replaced
    noise = [getattr(g.noises, f"noise_{i}") for i in range(g.num_layers)]
    assert g.noise_layers(32) == [5, 6]
    noise[5] = noise[6] = feat
    ref, _ = g([w_plus], input_is_latent=True, noise=noise)
    torch.testing.assert_close(img, ref)
    # a zero map is "no noise" at those layers
    zero = torch.zeros_like(feat)
    torch.testing.assert_close(g.synthesize(w_plus, injections={32: zero}, noise_mode="none"), g.synthesize(w_plus, noise_mode="none"))
    # with zero noise strength (a freshly built generator) the maps have no effect
    g0 = tiny_generator(noise_strength=0.0)
    torch.testing.assert_close(g0.synthesize(w_plus, injections={32: feat}), g0.synthesize(w_plus))


def test_injection_add_mode():
    g = tiny_generator()
    torch.manual_seed(5)
    w_plus = torch.randn(2, g.n_latent, 32)
    base_img, base = g.synthesize(w_plus, return_features=True)
    zero_img = g.synthesize(w_plus, injections={16: torch.zeros(2, 32, 16, 16)}, injection_mode="add")
    assert torch.equal(zero_img, base_img)
    feat = torch.randn(2, g.channels[32], 32, 32)
    img, feats = g.synthesize(w_plus, injections={32: feat}, injection_mode="add", return_features=True)
    assert torch.equal(feats[16], base[16])
    torch.testing.assert_close(feats[32], base[32] + feat)
    assert not torch.allclose(img, base_img)
    # multi-scale at once (HFORD / DBAF use 16, 32, 64)
    inj = {r: torch.randn(2, g.channels[r], r, r) for r in (16, 32, 64)}
    _, f3 = g.synthesize(w_plus, injections=inj, injection_mode="add", return_features=True)
    assert torch.equal(f3[8], base[8])


def test_injection_validation():
    g = tiny_generator()
    w_plus = torch.zeros(1, g.n_latent, 32)
    with pytest.raises(ValueError):
        g.synthesize(w_plus, injections={128: torch.zeros(1, 32, 128, 128)})
    with pytest.raises(ValueError):
        g.synthesize(w_plus, injections={32: torch.zeros(1, 32, 16, 16)})
    with pytest.raises(ValueError):
        g.synthesize(w_plus, injections={32: torch.zeros(1, 1, 32, 32)}, injection_mode="add")
    with pytest.raises(ValueError):
        g.synthesize(torch.zeros(1, g.n_latent + 1, 32))


# ------------------------------------------------------------------------------------------
# Converters and Hub round trip
# ------------------------------------------------------------------------------------------


def test_generator_converter_strict(tmp_path):
    layout = generator_layout(64, 32, 2, cm=2, cmax=32)
    sd = random_state_dict(layout, seed=10)
    conv = get_converter("stylegan2").fn
    g = conv({"g_ema": sd, "latent_avg": torch.zeros(32)})
    cfg = g._hub_mixin_config
    assert (cfg["size"], cfg["style_dim"], cfg["n_mlp"], cfg["channel_max"]) == (64, 32, 2, 32)
    direct = Generator(64, **TINY)
    direct.load_state_dict(sd, strict=True)
    torch.manual_seed(11)
    z = torch.randn(2, 32)
    out_conv, _ = g([z], randomize_noise=False)
    out_direct, _ = direct([z], randomize_noise=False)
    assert torch.equal(out_conv, out_direct)
    # safetensors + config.json round trip
    g.save_pretrained(tmp_path / "g")
    again = Generator.from_pretrained(str(tmp_path / "g"))
    assert torch.equal(again([z], randomize_noise=False)[0], out_conv)

    bad = dict(sd)
    bad["convs.3.conv.weight"] = torch.randn(1, 32, 16, 3, 3)
    with pytest.raises(ConversionError):
        conv({"g_ema": bad})
    missing = {k: v for k, v in sd.items() if k != "convs.1.noise.weight"}
    with pytest.raises(ConversionError):
        conv({"g_ema": missing})
    extra = dict(sd, **{"convs.1.extra": torch.zeros(1)})
    with pytest.raises(ConversionError):
        conv({"g_ema": extra})
    with pytest.raises(ConversionError):
        conv({"d": sd})


def test_generator_converter_infers_config_f():
    sd = random_state_dict(generator_layout(256, 512, 8, cm=2), seed=12)
    g = get_converter("stylegan2").fn({"g_ema": sd})
    cfg = g._hub_mixin_config
    assert (cfg["size"], cfg["style_dim"], cfg["n_mlp"], cfg["channel_multiplier"], cfg["channel_max"]) == (256, 512, 8, 2, 512)


def test_discriminator_converter_strict():
    layout = discriminator_layout(64, cm=2, cmax=32)
    sd = random_state_dict(layout, seed=13)
    conv = get_converter("stylegan2-discriminator").fn
    d = conv({"d": sd, "g_ema": {}})
    direct = Discriminator(64, channel_max=32)
    direct.load_state_dict(sd, strict=True)
    torch.manual_seed(14)
    x = torch.randn(4, 3, 64, 64)
    assert d(x).shape == (4, 1) and torch.equal(d(x), direct(x))
    bad = dict(sd)
    bad["final_linear.0.weight"] = torch.randn(32, 100)
    with pytest.raises(ConversionError):
        conv({"d": bad})


# ------------------------------------------------------------------------------------------
# Discriminator
# ------------------------------------------------------------------------------------------


def test_discriminator_minibatch_stddev():
    torch.manual_seed(15)
    d = Discriminator(64, channel_max=16).eval()
    x = torch.randn(4, 3, 64, 64)
    out = d(x)
    assert out.shape == (4, 1)
    # the stddev feature couples the samples of a group: changing sample 3 changes sample 0's logit
    x2 = x.clone()
    x2[3] += 1.0
    assert not torch.allclose(d(x2)[0], out[0])
    # feature value: mean over channels/pixels of the std over the group (here the whole batch)
    f = torch.randn(4, 5, 4, 4)
    expected = torch.sqrt(f.var(0, unbiased=False) + 1e-8).mean()
    got = d.minibatch_stddev(f)
    assert got.shape == (4, 6, 4, 4)
    torch.testing.assert_close(got[:, 5], expected.expand(4, 4, 4))
    assert d(torch.randn(3, 3, 64, 64)).shape == (3, 1)  # batch not divisible by 4


# ------------------------------------------------------------------------------------------
# Ops numerics
# ------------------------------------------------------------------------------------------


def direct_upfirdn2d(x, k, up, down, pad):
    """Definition-level reference: zero insertion, zero padding/cropping, then an explicit sum of
    shifted copies times the flipped kernel taps, then decimation (no conv2d, no F.pad)."""
    n, c, h, w = x.shape
    (ux, uy), (dx, dy) = up, down
    x0, x1, y0, y1 = pad
    z = torch.zeros(n, c, h * uy, w * ux, dtype=x.dtype)
    z[:, :, ::uy, ::ux] = x
    hp, wp = h * uy + y0 + y1, w * ux + x0 + x1
    zp = torch.zeros(n, c, hp, wp, dtype=x.dtype)
    for a in range(hp):
        for b in range(wp):
            sa, sb = a - y0, b - x0
            if 0 <= sa < h * uy and 0 <= sb < w * ux:
                zp[:, :, a, b] = z[:, :, sa, sb]
    kh, kw = k.shape
    oh, ow = hp - kh + 1, wp - kw + 1
    out = torch.zeros(n, c, oh, ow, dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            out += zp[:, :, i : i + oh, j : j + ow] * k[kh - 1 - i, kw - 1 - j]
    return out[:, :, ::dy, ::dx]


@pytest.mark.parametrize(
    "up,down,pad,kshape",
    [
        (1, 1, (1, 2), (4, 4)),
        (2, 1, (2, 1), (4, 4)),
        (1, 2, (1, 1), (4, 4)),
        (2, 2, (-1, 3), (4, 4)),
        (3, 1, (0, -2), (3, 5)),
        (1, 3, (2, 2, 0, 1), (5, 3)),
        ((2, 1), (1, 2), (1, 2, 3, 0), (4, 4)),
    ],
)
def test_upfirdn2d_matches_direct_definition(up, down, pad, kshape):
    gen = torch.Generator().manual_seed(16)
    x = torch.randn(2, 3, 7, 6, generator=gen, dtype=torch.float64)
    k = torch.randn(*kshape, generator=gen, dtype=torch.float64)  # asymmetric: checks the flip
    ups = up if isinstance(up, tuple) else (up, up)
    downs = down if isinstance(down, tuple) else (down, down)
    pads = pad if len(pad) == 4 else (pad[0], pad[1], pad[0], pad[1])
    got = ops.upfirdn2d(x, k, up=up, down=down, pad=pad)
    want = direct_upfirdn2d(x, k, ups, downs, pads)
    assert got.shape == want.shape
    expected_h = (7 * ups[1] + pads[2] + pads[3] - kshape[0] + downs[1]) // downs[1]
    assert got.shape[2] == expected_h
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_up_down_sample_preserve_constants():
    x = torch.full((1, 2, 8, 8), 3.0)
    up = ops.Upsample([1, 3, 3, 1])(x)
    down = ops.Downsample([1, 3, 3, 1])(x)
    assert up.shape == (1, 2, 16, 16) and down.shape == (1, 2, 4, 4)
    torch.testing.assert_close(up[:, :, 2:-2, 2:-2], torch.full((1, 2, 12, 12), 3.0))
    torch.testing.assert_close(down[:, :, 1:-1, 1:-1], torch.full((1, 2, 2, 2), 3.0))
    k = ops.make_kernel([1, 3, 3, 1])
    torch.testing.assert_close(k, torch.outer(torch.tensor([1.0, 3, 3, 1]), torch.tensor([1.0, 3, 3, 1])) / 64)


def test_activations_and_equalized_layers():
    x = torch.tensor([[-1.0, 0.5], [2.0, -3.0]])
    r2 = math.sqrt(2)
    want = torch.tensor([[-0.2 * r2, 0.5 * r2], [2.0 * r2, -0.6 * r2]])
    torch.testing.assert_close(ops.fused_leaky_relu(x), want)
    torch.testing.assert_close(ops.ScaledLeakyReLU()(x), want)
    torch.testing.assert_close(ops.fused_leaky_relu(x, torch.tensor([1.0, 1.0])), ops.fused_leaky_relu(x + 1))
    act = ops.FusedLeakyReLU(2)
    assert act.bias.shape == (2,)

    torch.manual_seed(17)
    lin = ops.EqualLinear(8, 4, bias_init=1, lr_mul=0.01)
    assert torch.all(lin.bias == 1)
    inp = torch.randn(3, 8)
    expected = inp @ (lin.weight * 0.01 / math.sqrt(8)).t() + 0.01 * lin.bias
    torch.testing.assert_close(lin(inp), expected)
    lin_act = ops.EqualLinear(8, 4, activation="fused_lrelu")
    torch.testing.assert_close(lin_act(inp), ops.fused_leaky_relu(inp @ (lin_act.weight / math.sqrt(8)).t()))

    conv = ops.EqualConv2d(3, 5, 3, padding=1)
    img = torch.randn(2, 3, 6, 6)
    torch.testing.assert_close(conv(img), F.conv2d(img, conv.weight / math.sqrt(27), conv.bias, padding=1))

    v = torch.randn(4, 16) * 7
    torch.testing.assert_close(ops.PixelNorm()(v).pow(2).mean(1), torch.ones(4), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["plain", "up", "down"])
def test_modulated_conv_matches_per_sample_reference(mode):
    torch.manual_seed(18)
    m = ModulatedConv2d(6, 5, 3, 8, upsample=mode == "up", downsample=mode == "down")
    x, w = torch.randn(3, 6, 8, 8), torch.randn(3, 8)
    got = m(x, w)
    m.fused = False
    got_activations = m(x, w)
    refs = []
    for i in range(3):  # one sample at a time: Eq. (1) modulation, Eq. (3) demodulation
        s = m.modulation(w[i : i + 1])[0]
        wt = m.scale * m.weight[0] * s.view(1, 6, 1, 1)
        wt = wt / torch.sqrt(wt.pow(2).sum([1, 2, 3], keepdim=True) + 1e-8)
        xi = x[i : i + 1]
        if mode == "up":
            refs.append(m.blur(F.conv_transpose2d(xi, wt.transpose(0, 1), stride=2)))
        elif mode == "down":
            refs.append(F.conv2d(m.blur(xi), wt, stride=2))
        else:
            refs.append(F.conv2d(xi, wt, padding=1))
    ref = torch.cat(refs)
    assert got.shape == ref.shape == (3, 5) + {"plain": (8, 8), "up": (16, 16), "down": (4, 4)}[mode]
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_activations, ref, rtol=1e-4, atol=1e-5)


def test_bf16_autocast_close_to_fp32():
    g = tiny_generator()
    torch.manual_seed(19)
    w = torch.randn(2, g.n_latent, 32)
    inj = {16: torch.randn(2, 32, 16, 16)}
    ref = g.synthesize(w, injections=inj)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        img = g.synthesize(w, injections=inj)
    assert img.shape == ref.shape and torch.isfinite(img).all()
    rel = (img.float() - ref).norm() / ref.norm()
    assert rel < 0.05, rel
