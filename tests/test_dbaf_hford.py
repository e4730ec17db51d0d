"""DBAF and HFORD (zoo/methods/dbaf/, hford/, stylegan_identity.py, zoo/nn/identity_levels.py) on tiny random-weight models."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from zoo.convert import ConversionError
from zoo.keys import Secret
from zoo.methods.dbaf import DBAF, convert_dbaf_cid, convert_dbaf_kria, convert_dbaf_maar
from zoo.methods.hford import HFORD
from zoo.nn.identity_levels import (
    ChannelSpatialAttention,
    IdentityDisentangler,
    KeyedIdentityEditor,
    feature_resolutions,
    key_latents,
    level_index,
    level_sizes,
)

ROOT = Path(__file__).resolve().parent.parent
RES = 64
LAMBDAS1 = {"c": 1.0, "lpips": 0.0, "rec": 3.5, "parse": 0.0, "reg": 0.1, "adv": 1.0}
LAMBDAS2 = {"id": 2.0, "lpips": 0.0, "rec": 0.05, "parse": 0.0, "reg": 0.1, "adv": 1.0}


def tiny_config(name: str, **over) -> dict:
    cfg = {
        "method": name,
        "resolution": RES,
        "model": {
            "generator": {"style_dim": 32, "n_mlp": 2, "channel_max": 16},
            "encoder": {"stage_units": [1, 1, 1, 1], "channels": [8, 12, 16, 24]},
            "disentangler": {"shared": name == "dbaf", "depth": 1, "heads": 2, "dim_head": 8, "mlp_dim": 32, "dropout": 0.0},
            "retention": {"reduction": 4},
            "editor": {"n_extra": 1, "lr_mul": 0.01},
            "discriminator": {"channel_max": 16},
        },
        "identity_encoder": None,
        "stages": {
            0: {"lambdas": {"rec": 1.0, "reg": 0.01, "adv": 1.0}},
            1: {"lambdas": LAMBDAS1, "r1": {"gamma": 10, "every": 2}},
            2: {"lambdas": LAMBDAS2, "r1": {"gamma": 10, "every": 2}},
        },
    }
    cfg.update(over)
    return cfg


def build(cls, seed: int = 0):
    torch.manual_seed(seed)
    m = cls.from_config(tiny_config(cls.name))
    with torch.no_grad():  # non-zero noise strengths so the retention maps reach the image
        for conv in m.generator.convs:
            conv.noise.weight.fill_(0.1)
        m.generator.conv1.noise.weight.fill_(0.1)
    return m.to("cpu")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module", params=[DBAF, HFORD], ids=["dbaf", "hford"])
def method(request):
    return build(request.param)


def faces(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, RES, RES, generator=g) * 2 - 1


def keys_for(name: str, secrets: list[str]):
    return [Secret(s).derive(name, 0) for s in secrets]


# ------------------------------------------------------------------ shared pieces
def test_levels_follow_riddle_split_proportionally():
    assert level_sizes(14) == (4, 4, 6)  # rows 1-4 / 5-8 / 9-14 at 256 px
    assert level_sizes(18) == (5, 5, 8)
    assert level_sizes(10) == (3, 3, 4)
    assert level_sizes(8) == (2, 3, 3)
    assert level_index(14) == [0] * 4 + [1] * 4 + [2] * 6
    assert feature_resolutions(256) == (16, 32, 64)


def test_attention_block_is_eq_3_to_5():
    """ARM(M) = SA(CA(x)) * x * CA(x) with x = Conv(M): check against the equations written out."""
    torch.manual_seed(0)
    block = ChannelSpatialAttention(8, reduction=2).eval()
    x = torch.randn(2, 8, 5, 5)
    mlp = block.channel_mlp
    ca = torch.sigmoid(mlp(x.mean((2, 3))) + mlp(x.amax((2, 3))))[:, :, None, None]  # eq. (4)
    g = x * ca
    bn = block.spatial_bn
    conv = F.conv2d(torch.cat([g.amax(1, keepdim=True), g.mean(1, keepdim=True)], 1), block.spatial_conv.weight, padding=3)
    sa = torch.sigmoid(
        (conv - bn.running_mean.view(1, -1, 1, 1)) / torch.sqrt(bn.running_var.view(1, -1, 1, 1) + bn.eps) * bn.weight.view(1, -1, 1, 1)
        + bn.bias.view(1, -1, 1, 1)
    )  # eq. (3)
    torch.testing.assert_close(block(x), sa * x * ca)  # eq. (5)


def test_disentangler_attends_within_levels_only():
    """Changing a fine row changes A only in the fine level (and I = C - A, eq. 4)."""
    torch.manual_seed(0)
    net = IdentityDisentangler(n_latent=14, style_dim=16, shared=True, depth=1, heads=2, dim_head=4, mlp_dim=16, dropout=0.0).eval()
    c = torch.randn(1, 14, 16)
    a, i = net.split(c)
    torch.testing.assert_close(a + i, c)
    c2 = c.clone()
    c2[0, 12] += 1.0
    a2 = net(c2)
    diff = (a2 - a).abs().sum(-1)[0]
    assert diff[:8].max() == 0 and diff[8:].min() > 0


def test_keys_come_from_the_secret_one_w_per_level(method):
    g = method.generator
    p1 = key_latents(g, keys_for(method.name, ["secret one"]))
    p1b = key_latents(g, keys_for(method.name, ["secret one"]))
    p2 = key_latents(g, keys_for(method.name, ["secret two"]))
    torch.testing.assert_close(p1, p1b)
    assert not torch.allclose(p1, p2)
    c, m, f = level_sizes(g.n_latent)
    for lo, hi in ((0, c), (c, c + m), (c + m, g.n_latent)):  # one w repeated over each level
        assert torch.equal(p1[0, lo:hi], p1[0, lo : lo + 1].expand(hi - lo, -1))
    assert not torch.allclose(p1[0, 0], p1[0, c]) and not torch.allclose(p1[0, c], p1[0, -1])
    # w = mapping(z) with z ~ N(0, I) from the key material (the authors' sample_w)
    z = keys_for(method.name, ["secret one"])[0].normal(g.style_dim, context="w|level0")
    with torch.no_grad():
        torch.testing.assert_close(p1[0, 0], g.mapping(z[None])[0])


# ------------------------------------------------------------------ inference behaviour
def test_different_keys_give_different_outputs(method):
    x = faces(2)
    with torch.no_grad():
        a = method.anonymize_faces(x, keys_for(method.name, ["k1", "k1"]))
        b = method.anonymize_faces(x, keys_for(method.name, ["k2", "k2"]))
    assert a.shape == x.shape and a.min() >= -1 and a.max() <= 1
    assert (a - b).abs().mean() > 1e-3
    assert (a - x).abs().mean() > 1e-2


def test_reconstruction_is_the_unedited_pass(method):
    """reconstruct_faces = G(A + I) (no key edit); the public reconstruct() runs it on crops."""
    x = faces(2)
    with torch.no_grad():
        rec = method.reconstruct_faces(x)
        direct = method.synthesize(method.decompose(x)["codes"], method.decompose(x)["maps"]).clamp(-1, 1)
        anon = method.anonymize_faces(x, keys_for(method.name, ["k1", "k1"]))
    assert method.can_reconstruct
    assert torch.allclose(rec, direct, atol=1e-6)
    from zoo.methods.stylegan_identity import ReconstructionBaseline

    with torch.no_grad():  # the evaluator's stand-alone wrapper runs the same pass
        assert torch.equal(ReconstructionBaseline(method).anonymize_faces(x, [None, None]), rec)
    assert (rec - anon).abs().mean() > 1e-3  # the key edit changes what the plain pass gives
    crop = ((x[0].permute(1, 2, 0) + 1) * 127.5).round().to(torch.uint8).numpy()
    out = method.reconstruction(crop, aligned=True)
    assert out.faces[0].status == "processed" and out.faces[0].key_fingerprint is None
    assert np.asarray(out.image).shape == crop.shape


def test_batch_of_one_equals_row_of_batch_of_eight(method):
    x = faces(8, seed=3)
    ks = keys_for(method.name, [f"key {i % 3}" for i in range(8)])
    with torch.no_grad():
        full = method.anonymize_faces(x, ks)
        one = method.anonymize_faces(x[5:6], ks[5:6])
        rec_full = method.recover_faces(full, ks)
        rec_one = method.recover_faces(full[5:6], ks[5:6])
    torch.testing.assert_close(one[0], full[5], atol=2e-5, rtol=0)
    torch.testing.assert_close(rec_one[0], rec_full[5], atol=2e-5, rtol=0)


def _train_edit_inversion(m, steps: int = 80, lr: float = 0.02):
    """A few dozen steps on a latent proxy of the recovery / anonymity losses (eq. 29-30, 11-12):
    the same key must undo its edit of I, a wrong key must not, and the edit must move I.
    Equal-linear layers get lr / lr_mul (their weights are stored scaled by 1 / lr_mul)."""
    editor = m.editor
    groups = []
    for mlp in editor.mlps:
        for i, layer in enumerate(mlp.layers):
            lr_mul = getattr(layer, "lr_mul", 1.0)
            groups.append({"params": list(layer.parameters()), "lr": lr / lr_mul})
    opt = torch.optim.Adam(groups)
    rng = torch.Generator().manual_seed(1)
    with torch.no_grad():
        parts = m.decompose(faces(16, seed=7))
    ident = parts["identity"]
    scale = ident.pow(2).mean().sqrt()
    from zoo.nn.identity_levels import random_key_latents

    for _ in range(steps):
        p = random_key_latents(m.generator, 16, rng)
        q = random_key_latents(m.generator, 16, rng)
        ano = editor(ident, p)
        rec = editor(ano, p)
        wrong = editor(ano, q)
        d = lambda a, b: (a - b).pow(2).mean(-1).sqrt().mean() / scale  # noqa: E731
        loss = d(rec, ident) + F.relu(1.0 - d(ano, ident)) + F.relu(1.0 - d(wrong, ident))
        opt.zero_grad()
        loss.backward()
        opt.step()
    editor.eval()


@pytest.mark.parametrize("cls", [DBAF, HFORD], ids=["dbaf", "hford"])
def test_right_key_edit_inverts_on_the_codes(cls):
    """The keyed edit is learned to undo itself (DBAF eq. 21 / HFORD recovery), not analytic: after a
    few dozen training steps, anonymize -> recover through the edit path gives back the input's W+
    codes with the right key, and not with a wrong one."""
    m = build(cls, seed=1)
    x = faces(4, seed=11)  # faces the edit was not trained on
    ks, wrong = keys_for(cls.name, ["right"] * 4), keys_for(cls.name, ["wrong"] * 4)

    def errors():
        with torch.no_grad():
            p = m.decompose(x)
            w_ano = m.edit(p, m.key_latents(ks))  # C_hat = A + edit([I, P])
            q = {"attr": p["attr"], "identity": w_ano - p["attr"]}  # the anonymized identity code I_hat
            err = lambda w: float((w - p["codes"]).norm(dim=-1).mean() / p["identity"].norm(dim=-1).mean())  # noqa: E731
            return err(m.edit(q, m.key_latents(ks))), err(m.edit(q, m.key_latents(wrong))), err(w_ano)

    before_right, _, _ = errors()
    _train_edit_inversion(m)
    right, wrong_err, moved = errors()
    assert right < 0.3 * before_right
    assert right < 0.3 * wrong_err
    assert moved > 3 * right


def test_recover_uses_the_anonymized_image_itself(method):
    """recover_faces(y, keys) is G(y, P): the anonymized image is re-encoded, nothing else is kept."""
    x = faces(2, seed=5)
    ks = keys_for(method.name, ["k", "k"])
    with torch.no_grad():
        y = method.anonymize_faces(x, ks)
        r = method.recover_faces(y, ks)
        manual = method.synthesize(method.edit(method.decompose(y), method.key_latents(ks)), method.decompose(y)["maps"]).clamp(-1, 1)
    torch.testing.assert_close(r, manual)


# ------------------------------------------------------------------ checkpoints and processes
def _save(method, folder: Path) -> Path:
    method.save_pretrained(folder)
    return folder


def test_save_load_roundtrip(method, tmp_path):
    import zoo

    folder = _save(method, tmp_path / method.name)
    index = json.loads((folder / "method.json").read_text())
    assert set(method.component_names) <= set(index["components"])
    x = faces(2, seed=9)
    ks = keys_for(method.name, ["shared secret", "other secret"])
    loaded = zoo.load(method.name, local_dir=str(folder), device="cpu")
    with torch.no_grad():
        torch.testing.assert_close(loaded.anonymize_faces(x, ks), method.anonymize_faces(x, ks), atol=0, rtol=0)
        torch.testing.assert_close(loaded.recover_faces(x, ks), method.recover_faces(x, ks), atol=0, rtol=0)


@pytest.mark.slow  # 5 s: a new process
def test_same_secret_same_output_in_a_new_process(tmp_path):
    """Keys come from the secret alone: a fresh process loading the checkpoint gives the same faces."""
    x = faces(2, seed=9)
    np.save(tmp_path / "x.npy", x.numpy())
    refs = {}
    for cls in (DBAF, HFORD):
        m = build(cls, seed=4)
        _save(m, tmp_path / cls.name)
        with torch.no_grad():
            refs[cls.name] = m.anonymize_faces(x, keys_for(cls.name, ["shared secret", "other secret"])).numpy()
    code = (
        "import sys, numpy as np, torch; torch.set_num_threads(1);"
        "import zoo; from zoo.keys import Secret;"
        "x = torch.from_numpy(np.load(sys.argv[2] + '/x.npy'))\n"
        "for name in ('dbaf', 'hford'):\n"
        "    m = zoo.load(name, local_dir=sys.argv[2] + '/' + name, device='cpu')\n"
        "    ks = [Secret(s).derive(name, 0) for s in ('shared secret', 'other secret')]\n"
        "    np.save(sys.argv[2] + '/y_' + name + '.npy', m.anonymize_faces(x, ks).detach().numpy())"
    )
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", code, str(ROOT), str(tmp_path)], check=True, env=env, timeout=120)
    for name, ref in refs.items():
        np.testing.assert_allclose(np.load(tmp_path / f"y_{name}.npy"), ref, atol=1e-6, rtol=0)


def test_full_photo_anonymize_and_recover(method, astronaut_rgb):
    res = method.anonymize(astronaut_rgb, key="photo key")
    assert len(res.faces) == 1 and res.fallbacks == []
    out = np.asarray(res)
    assert out.shape == astronaut_rgb.shape
    x0, y0, x1, y1 = (int(v) for v in res.faces[0].box)
    assert np.abs(out[y0:y1, x0:x1].astype(int) - astronaut_rgb[y0:y1, x0:x1]).mean() > 2  # the face changed
    assert np.array_equal(out[:40], astronaut_rgb[:40])  # far from the face: untouched
    assert res.report()["key_fingerprint"] == Secret("photo key").fingerprint
    rec = method.recover(out, key="photo key")
    assert np.asarray(rec).shape == astronaut_rgb.shape


# ------------------------------------------------------------------ training protocol
@pytest.mark.parametrize("cls", [DBAF, HFORD], ids=["dbaf", "hford"])
@pytest.mark.slow
def test_training_losses_reach_the_trained_parts(cls):
    m = build(cls, seed=2)
    m.train_generator = torch.Generator().manual_seed(5)
    batch = {"image": faces(2, seed=1), "image_b": faces(2, seed=2)}
    for comp in m.components.values():
        comp.train()
    for stage in (0, 1, 2):
        groups = m.trainable_parameters(stage)
        assert list(groups) == ["d", "g"]
        g_ids = {id(p) for p in groups["g"]}
        # e4e frozen in the papers' stages; trained only by the backbone stage 0 (no pretrained weights)
        assert bool(g_ids & {id(p) for p in m.encoder.parameters()}) == (stage == 0)
        assert not g_ids & {id(p) for p in m.generator.style.parameters()}  # mapping makes keys only
        assert (id(next(m.editor.parameters())) in g_ids) == (stage == 2)  # cMLP/KRIA: stage 2 only
        assert (id(next(m.disentangler.parameters())) in g_ids) == (stage > 0)
        for group, params in groups.items():
            for p in m.components.values():
                p.requires_grad_(False)
            for p in params:
                p.requires_grad_(True)
                p.grad = None
            loss, logs = m.compute_losses(stage, group, batch, step=0)
            assert torch.isfinite(loss) and logs["total"] == pytest.approx(float(loss.detach()))
            loss.backward()
            reached = [p for p in params if p.grad is not None and p.grad.abs().sum() > 0]
            assert len(reached) > 0.5 * len(params), (stage, group)
        if stage == 0:
            assert {"rec", "reg", "adv"} <= set(logs)
        elif stage == 1:
            assert {"c", "rec", "reg", "adv"} <= set(logs)
        else:
            assert {"id", "rev", "dif"} <= set(logs)
    with torch.no_grad():
        rows = m.sample_outputs(batch)
    assert set(rows) >= {"input", "anonymized", "recovered", "wrong_key"}


def test_identity_losses_follow_each_paper():
    """DBAF eq. 29-32 sum over S_1; HFORD eq. 10-13 average (n = 4, m = 1)."""
    ori = torch.tensor([[1.0, 0.0, 0.0]])
    ano = [torch.tensor([[0.6, 0.8, 0.0]]), torch.tensor([[0.0, 1.0, 0.0]])]
    err = [torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[-1.0, 0.0, 0.0]])]
    rec = torch.tensor([[0.8, 0.6, 0.0]])
    # cosines with ori: 0.6, 0, 0, -1 ; pairwise positive cosines in S_1: (a1,a2)=0.8 only
    d = DBAF.identity_terms(ori, ano, rec, err)
    assert float(d["dif"]) == pytest.approx(0.6)
    assert float(d["rev"]) == pytest.approx(0.2)
    assert float(d["div"]) == pytest.approx(2 * 0.8)  # ordered pairs, summed
    h = HFORD.identity_terms(ori, ano, rec, err)
    assert float(h["anony"]) == pytest.approx(0.6 / 4)
    assert float(h["dif"]) == pytest.approx(2 * 0.8 / 12)
    assert float(h["rev"]) == pytest.approx(0.2)


# ------------------------------------------------------------------ the authors' checkpoint layout
def _official_cid(d=512, n=14, depth=6, heads=14, dim_head=64, mlp=2048, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g) * 0.05  # noqa: E731
    sd = {"linear_w.weight": r(d, d), "linear_w.bias": r(d), "pos_embedding": r(n, 1, d)}
    inner = heads * dim_head
    for k in range(3):
        for i in range(depth):
            p = f"layers.{k}.transformer.layers.{i}."
            sd.update({
                p + "0.norm.weight": 1 + r(d), p + "0.norm.bias": r(d),
                p + "0.fn.to_qkv.weight": r(3 * inner, d),
                p + "0.fn.to_out.0.weight": r(d, inner), p + "0.fn.to_out.0.bias": r(d),
                p + "1.norm.weight": 1 + r(d), p + "1.norm.bias": r(d),
                p + "1.fn.net.0.weight": r(mlp, d), p + "1.fn.net.0.bias": r(mlp),
                p + "1.fn.net.3.weight": r(d, mlp), p + "1.fn.net.3.bias": r(d),
            })  # fmt: skip
    return sd


def _official_attr_block(seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g) * 0.1  # noqa: E731
    sd = {}
    for c, cin in (("c3", 512), ("c2", 256), ("c1", 128)):
        sd.update({
            f"conv_{c}.weight": r(512, cin, 1, 1), f"conv_{c}.bias": r(512),
            f"cbam_{c}.ChannelGate.mlp.1.weight": r(32, 512), f"cbam_{c}.ChannelGate.mlp.1.bias": r(32),
            f"cbam_{c}.ChannelGate.mlp.3.weight": r(512, 32), f"cbam_{c}.ChannelGate.mlp.3.bias": r(512),
            f"cbam_{c}.SpatialGate.spatial.conv.weight": r(1, 2, 7, 7),
            f"cbam_{c}.SpatialGate.spatial.bn.weight": 1 + r(1), f"cbam_{c}.SpatialGate.spatial.bn.bias": r(1),
            f"cbam_{c}.SpatialGate.spatial.bn.running_mean": r(1), f"cbam_{c}.SpatialGate.spatial.bn.running_var": 1 + r(1).abs(),
            f"cbam_{c}.SpatialGate.spatial.bn.num_batches_tracked": torch.tensor(7),
        })  # fmt: skip
    return sd


def _official_id_mlp(seed=0):
    g = torch.Generator().manual_seed(seed)
    widths = [1024, 2048, 1024, 512, 512, 512, 512, 512]
    sd = {}
    for k in range(3):
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            sd[f"mapper.{k}.model.{i}.weight"] = torch.randn(b, a, generator=g) / 0.01  # EqualLinear stores N(0,1)/lr_mul
            sd[f"mapper.{k}.model.{i}.bias"] = torch.randn(b, generator=g)
        sd[f"mapper.{k}.model.7.weight"] = torch.randn(512, 512, generator=g) * 0.04
        sd[f"mapper.{k}.model.7.bias"] = torch.randn(512, generator=g) * 0.04
    return sd


def test_official_kria_converts_strictly_and_computes_the_cmlp():
    sd = _official_id_mlp()
    kria = convert_dbaf_kria(sd)
    assert sum(p.numel() for p in kria.parameters()) == sum(v.numel() for v in sd.values())
    g = torch.Generator().manual_seed(3)
    ident, key = torch.randn(2, 14, 512, generator=g), torch.randn(2, 14, 512, generator=g)
    # reference: the authors' forward (rows 0-3 / 4-7 / 8-13 -> mapper 0 / 1 / 2 on [I, P]), equal-lr maths
    ref = []
    for r in range(14):
        k = 0 if r < 4 else 1 if r < 8 else 2
        h = torch.cat([ident[:, r], key[:, r]], -1)
        for i in range(7):
            w, b = sd[f"mapper.{k}.model.{i}.weight"], sd[f"mapper.{k}.model.{i}.bias"]
            h = F.leaky_relu(h @ (w * 0.01 / math.sqrt(w.shape[1])).T + b * 0.01, 0.2) * math.sqrt(2)
        ref.append(h @ sd[f"mapper.{k}.model.7.weight"].T + sd[f"mapper.{k}.model.7.bias"])
    with torch.no_grad():
        torch.testing.assert_close(kria(ident, key), torch.stack(ref, 1), atol=1e-4, rtol=1e-4)
    bad = dict(sd)
    bad["mapper.0.model.9.weight"] = torch.zeros(1)
    with pytest.raises(ConversionError):
        convert_dbaf_kria(bad)


def test_official_maar_converts_strictly_and_computes_cbam():
    sd = _official_attr_block()
    maar = convert_dbaf_maar(sd).eval()
    g = torch.Generator().manual_seed(4)
    feats = {16: torch.randn(1, 512, 16, 16, generator=g), 32: torch.randn(1, 256, 32, 32, generator=g), 64: torch.randn(1, 128, 64, 64, generator=g)}
    with torch.no_grad():
        out = maar(feats)
        # reference for c2 (32 px): 1x1 conv, CBAM channel gate (avg+max -> mlp), spatial gate (BN eval)
        p = "cbam_c2."
        x = F.conv2d(feats[32], sd["conv_c2.weight"], sd["conv_c2.bias"])
        mlp = lambda v: F.linear(
            F.relu(F.linear(v, sd[p + "ChannelGate.mlp.1.weight"], sd[p + "ChannelGate.mlp.1.bias"])),
            sd[p + "ChannelGate.mlp.3.weight"],
            sd[p + "ChannelGate.mlp.3.bias"],
        )  # noqa: E731
        x = x * torch.sigmoid(mlp(x.mean((2, 3))) + mlp(x.amax((2, 3))))[:, :, None, None]
        s = F.conv2d(torch.cat([x.amax(1, keepdim=True), x.mean(1, keepdim=True)], 1), sd[p + "SpatialGate.spatial.conv.weight"], padding=3)
        bn = lambda k: sd[p + "SpatialGate.spatial.bn." + k]  # noqa: E731
        s = (s - bn("running_mean")) / torch.sqrt(bn("running_var") + 1e-5) * bn("weight") + bn("bias")
        torch.testing.assert_close(out[32], x * torch.sigmoid(s), atol=1e-4, rtol=1e-4)
    assert [tuple(out[r].shape[1:]) for r in (16, 32, 64)] == [(512, 16, 16), (512, 32, 32), (512, 64, 64)]
    bad = dict(sd)
    bad["cbam_c1.ChannelGate.mlp.1.weight"] = torch.zeros(16, 512)  # shape differs from the layout
    with pytest.raises(ConversionError):
        convert_dbaf_maar(bad)
    bad = dict(sd)
    del bad["cbam_c2.SpatialGate.spatial.bn.running_var"]
    with pytest.raises(ConversionError):
        convert_dbaf_maar(bad)


@pytest.mark.slow
def test_official_cid_converts_strictly_and_reproduces_the_batch_one_forward():
    sd = _official_cid()
    cid = convert_dbaf_cid(sd).eval()
    assert cid.attention == "row" and not cid.shared and len(cid.blocks) == 3
    assert sum(p.numel() for p in cid.parameters()) == sum(v.numel() for v in sd.values())
    # the authors' forward at test batch size 1: every W+ row is a length-1 sequence, so softmax = 1
    # and attention returns to_out(v); reference written from their ViT equations
    c = torch.randn(1, 14, 512, generator=torch.Generator().manual_seed(5))
    h = F.linear(c, sd["linear_w.weight"], sd["linear_w.bias"]) + sd["pos_embedding"][:, 0]
    outs = []
    for k, (lo, hi) in enumerate(((0, 4), (4, 8), (8, 14))):
        x = h[:, lo:hi]
        for i in range(6):
            p = f"layers.{k}.transformer.layers.{i}."
            y = F.layer_norm(x, (512,), sd[p + "0.norm.weight"], sd[p + "0.norm.bias"])
            v = F.linear(y, sd[p + "0.fn.to_qkv.weight"])[..., 2 * 896 :]
            x = x + F.linear(v, sd[p + "0.fn.to_out.0.weight"], sd[p + "0.fn.to_out.0.bias"])
            y = F.layer_norm(x, (512,), sd[p + "1.norm.weight"], sd[p + "1.norm.bias"])
            x = x + F.linear(
                F.gelu(F.linear(y, sd[p + "1.fn.net.0.weight"], sd[p + "1.fn.net.0.bias"])), sd[p + "1.fn.net.3.weight"], sd[p + "1.fn.net.3.bias"]
            )
        outs.append(x)
    with torch.no_grad():
        torch.testing.assert_close(cid(c), torch.cat(outs, 1), atol=1e-4, rtol=1e-4)
    bad = dict(sd)
    del bad["layers.2.transformer.layers.5.1.fn.net.3.bias"]
    with pytest.raises(ConversionError):
        convert_dbaf_cid(bad)
    bad = dict(sd)
    bad["layers.0.extra.weight"] = torch.zeros(1)
    with pytest.raises(ConversionError):
        convert_dbaf_cid(bad)


def test_official_files_convert_through_the_registry(tmp_path):
    """``python -m zoo.convert dbaf-kria best_model_id_mlp.pth OUT`` path: registered, strict, saves."""
    from zoo.convert import convert_file, list_converters

    assert {"dbaf-cid", "dbaf-maar", "dbaf-kria"} <= set(list_converters())
    src = tmp_path / "best_model_id_mlp.pth"
    torch.save(_official_id_mlp(seed=2), src)
    out = convert_file("dbaf-kria", src, tmp_path / "kria")
    loaded = KeyedIdentityEditor.from_pretrained(str(out))
    direct = convert_dbaf_kria(_official_id_mlp(seed=2))
    for (k1, v1), (k2, v2) in zip(loaded.state_dict().items(), direct.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2)


def test_official_release_assembles_into_a_working_method(tmp_path):
    """The five released files (e4e .pt, fine-tuned decoder, CID, MAAR, KRIA) -> one DBAF checkpoint.

    Built here at 64 px from tiny modules written out in the authors' layouts (e4e: ``state_dict`` with
    ``encoder.*`` + ``latent_avg`` + ``opts``; decoder: a rosinality state dict)."""
    import zoo
    from zoo.methods.dbaf import convert_official_dbaf

    ref = build(DBAF, seed=6)
    enc_sd = {f"encoder.{k}": v for k, v in ref.encoder.state_dict().items() if k != "latent_avg"}
    e4e = {"state_dict": enc_sd, "latent_avg": torch.randn(10, 32), "opts": {"encoder_type": "Encoder4Editing", "output_size": 64}}
    decoder = {k: v.clone() for k, v in ref.generator.state_dict().items()}
    d, inner = 32, 14 * 2
    cid = _official_cid(d=d, n=10, depth=1, heads=14, dim_head=2, mlp=32, seed=1)
    feat = {"c3": 24, "c2": 16, "c1": 12}  # the tiny encoder's c3 / c2 / c1 widths
    g = torch.Generator().manual_seed(2)
    attr = {}
    for c, cin in feat.items():
        for k, shape in {
            f"conv_{c}.weight": (16, cin, 1, 1), f"conv_{c}.bias": (16,),
            f"cbam_{c}.ChannelGate.mlp.1.weight": (4, 16), f"cbam_{c}.ChannelGate.mlp.1.bias": (4,),
            f"cbam_{c}.ChannelGate.mlp.3.weight": (16, 4), f"cbam_{c}.ChannelGate.mlp.3.bias": (16,),
            f"cbam_{c}.SpatialGate.spatial.conv.weight": (1, 2, 7, 7), f"cbam_{c}.SpatialGate.spatial.bn.weight": (1,),
            f"cbam_{c}.SpatialGate.spatial.bn.bias": (1,), f"cbam_{c}.SpatialGate.spatial.bn.running_mean": (1,),
        }.items():  # fmt: skip
            attr[k] = torch.randn(*shape, generator=g) * 0.1
        attr[f"cbam_{c}.SpatialGate.spatial.bn.running_var"] = torch.ones(1)
        attr[f"cbam_{c}.SpatialGate.spatial.bn.num_batches_tracked"] = torch.tensor(3)
    widths = [2 * d, 4 * d, 2 * d, d, d]
    mlp = {}
    for k in range(3):
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            mlp[f"mapper.{k}.model.{i}.weight"] = torch.randn(b, a, generator=g) * 100
            mlp[f"mapper.{k}.model.{i}.bias"] = torch.zeros(b)
        mlp[f"mapper.{k}.model.4.weight"] = torch.randn(d, d, generator=g) * 0.05
        mlp[f"mapper.{k}.model.4.bias"] = torch.zeros(d)
    assert inner == 28
    m = convert_official_dbaf(e4e, decoder, cid, attr, mlp)
    assert m.disentangler.attention == "row" and len(m.disentangler.blocks) == 3
    torch.testing.assert_close(m.encoder.latent_avg, e4e["latent_avg"])
    m.save_pretrained(tmp_path / "official")
    loaded = zoo.load("dbaf", local_dir=str(tmp_path / "official"), device="cpu")
    x = faces(2, seed=4)
    ks = keys_for("dbaf", ["k1", "k2"])
    with torch.no_grad():
        y = loaded.anonymize_faces(x, ks)
        torch.testing.assert_close(y, m.to("cpu").anonymize_faces(x, ks))
    assert torch.isfinite(y).all() and (y - x).abs().mean() > 1e-2


# ------------------------------------------------------------------ demo tier (DCGAN latent)
@pytest.mark.parametrize("name", ["dbaf", "hford"])
def test_demo_editor_is_its_own_inverse_only_with_the_right_key(name, tmp_path):
    from training.train import load_config
    from zoo.keys import Secret
    from zoo.methods.dbaf import DBAFDemo
    from zoo.methods.hford import HFORDDemo

    cls = {"dbaf": DBAFDemo, "hford": HFORDDemo}[name]
    cfg = load_config(str(Path(__file__).resolve().parents[1] / "training" / "configs" / f"{name}_demo.yaml"))
    cfg.pop("encoder_path", None)  # a fresh encoder is enough here
    m = cls.from_config(cfg)
    torch.manual_seed(0)
    for p in m.editor.parameters():  # a random, far-from-identity g_P
        p.data.normal_(0, 0.05)
    assert {"dbaf": DBAF, "hford": HFORD}[name].variant_for(cfg) is cls
    keys = [Secret(b"right key").derive(name, i) for i in range(8)]
    wrong = [Secret(b"wrong key").derive(name, i) for i in range(8)]
    z = torch.randn(8, 100)
    with torch.no_grad():
        anon = m.edit_latent(z, keys)
        back = m.unedit_latent(anon, keys)
        bad = m.unedit_latent(anon, wrong)
    assert (back - z).abs().max() < 2e-3  # float32 through 2 x 4 coupling blocks with random weights
    assert (bad - z).norm(dim=1).min() > 0.5 * z.norm(dim=1).min()
    assert torch.nn.functional.cosine_similarity(anon, z).max() < 0.9
    # the key vector is the secret's, on every machine
    (p1, q1), (p2, q2) = m.key_vectors(keys[:1]), m.key_vectors([Secret(b"right key").derive(name, 0)])
    assert torch.equal(p1, p2) and torch.equal(q1, q2)
    assert torch.allclose(q1[0].T @ q1[0], torch.eye(q1.shape[-1]), atol=1e-5)  # orthonormal basis of S
    # a saved demo checkpoint loads back as the demo variant and edits identically
    m.save_pretrained(tmp_path / name)
    again = {"dbaf": DBAF, "hford": HFORD}[name].from_pretrained(tmp_path / name)
    assert type(again) is cls
    with torch.no_grad():
        assert torch.allclose(again.edit_latent(z, keys), anon, atol=1e-5)
    # every loss of the paper's identity terms is computed and finite
    m.train_generator = torch.Generator().manual_seed(0)
    cfg["stages"][2]["latent_batch"] = 16
    m.config["stages"][2]["latent_batch"] = 16
    total, logs = m.compute_losses(2, "g", {"image": torch.zeros(2, 3, 64, 64)}, 0)
    assert torch.isfinite(total) and logs["rev"] < 1e-3 and logs["rec"] < 1e-4
    assert set(cls.identity_terms(z, [anon, anon], back, [bad, bad])) <= set(logs)
