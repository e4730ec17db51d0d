"""iFADIT: the Secure Identity Flow inverts exactly, keys behave, the method is batch- and
process-deterministic, checkpoints round-trip, and the official checkpoint layout converts."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fresh_process import anonymize_in_fresh_process

from zoo.convert import ConversionError, get_converter
from zoo.keys import Secret
from zoo.methods.ifadit import IFADIT, IdentityCompensation, LatentMapper, keygen_vectors
from zoo.nn.flows import SecureIdentityFlow
from zoo.nn.stylegan2 import Generator

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny networks: one torch thread is faster


def tiny_config(resolution: int = 32) -> dict:
    return {
        "method": "ifadit",
        "resolution": resolution,
        "seed": 0,
        "identity_encoder": None,
        "model": {
            "identity": {"stage_units": [1, 1, 1, 1], "channels": [8, 8, 16, 16], "embedding_size": 32, "input_size": 32},
            "generator": {"size": resolution, "style_dim": 32, "n_mlp": 2, "channel_max": 16},
            "attr_encoder": {"stage_units": [1, 1, 1, 1], "channels": [8, 8, 16, 16]},
            "mapper": {"hidden": [32]},
            "flow": {"n_blocks": 4, "hidden": [32, 32], "clamp": 1.0},
            "icl": {"hidden": [32, 32, 32]},
        },
        "stages": {
            1: {"lambdas": {"vq": 0.01, "id": 1.0}},
            2: {"lambdas": {"anon": 1.0, "div": 1.0, "deanon": 1.0, "img": 1.0, "img_rec": {"l1": 10.0}, "img_other": {"l1": 0.01}}},
        },
    }


@pytest.fixture(scope="module")
def method() -> IFADIT:
    torch.manual_seed(0)
    return IFADIT.from_config(tiny_config()).to("cpu")


def _faces(n: int, res: int = 32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, res, res, generator=g) * 2 - 1
    return F.avg_pool2d(x, 3, 1, 1)  # some spatial correlation


# ------------------------------------------------------------------ Secure Identity Flow
@pytest.mark.parametrize("block", ["sacb", "allinone"])
def test_sif_inverts_exactly_with_the_right_secret_only(block):
    torch.manual_seed(0)
    flow = SecureIdentityFlow(dim=64, key_dim=32, n_blocks=4, hidden=[48, 48], block=block, clamp=1.0 if block == "sacb" else 2.0).eval()
    f = Generator(size=16, style_dim=32, n_mlp=2, channel_max=16).eval()  # KeyGen's mapping network
    z = F.normalize(torch.randn(16, 64), dim=1)
    keys = [Secret(f"secret {i}").derive("ifadit", 0) for i in range(16)]
    wrong = [Secret(f"other {i}").derive("ifadit", 0) for i in range(16)]
    with torch.no_grad():
        k, k_wrong = keygen_vectors(f, keys), keygen_vectors(f, wrong)
        z_anon = flow(z, k)
        back = flow.inverse(z_anon, k)
        back_wrong = flow.inverse(z_anon, k_wrong)
    assert (back - z).abs().max().item() < 1e-5  # T^-1(T(z, s), s) == z
    assert (z_anon - z).norm(dim=1).min().item() > 0.05  # the flow does change z
    err_wrong = (back_wrong - z).norm(dim=1)
    assert err_wrong.min().item() > 0.01  # a wrong secret does not invert
    assert err_wrong.min().item() > 1000 * (back - z).norm(dim=1).max().item()


def test_sacb_matches_equations_5_to_8():
    """One block computed by hand from its four subnets (eq. 5-6), and its inverse (eq. 7-8)."""
    torch.manual_seed(1)
    flow = SecureIdentityFlow(dim=10, key_dim=4, n_blocks=1, hidden=[8], block="sacb", clamp=1.5).eval()
    blk = flow.blocks[0]
    z, k = torch.randn(3, 10), torch.randn(3, 4)
    z1, z2 = z[:, :5], z[:, 5:]
    a = lambda s: 1.5 * torch.sigmoid(s)  # noqa: E731
    z2n = z2 * torch.exp(a(blk.omega(torch.cat([z1, k], 1)))) + blk.phi(torch.cat([z1, k], 1))
    z1n = z1 * torch.exp(a(blk.rho(torch.cat([z2n, k], 1)))) + blk.eta(torch.cat([z2n, k], 1))
    with torch.no_grad():
        out = flow(z, k)
        torch.testing.assert_close(out, torch.cat([z1n, z2n], 1))
        torch.testing.assert_close(flow.inverse(out, k), z, atol=1e-6, rtol=0)


def test_keygen_is_deterministic_and_secret_specific():
    f = Generator(size=16, style_dim=32, n_mlp=2, channel_max=16).eval()
    k1 = Secret("alpha").derive("ifadit", 0)
    with torch.no_grad():
        a = keygen_vectors(f, [k1])
        b = keygen_vectors(f, [Secret("alpha").derive("ifadit", 0)])
        c = keygen_vectors(f, [Secret("alphb").derive("ifadit", 0)])
    assert torch.equal(a, b)
    assert F.cosine_similarity(a, c).item() < 0.99
    u = k1.uniform(32, context="ifadit-keygen")
    assert u.min() >= -1 and u.max() < 1  # Norm(KDF(s)) in [-1, 1]


# ------------------------------------------------------------------ the method
def test_anonymize_and_recover_shapes_and_keys(method):
    x = _faces(3)
    keys = method.face_keys(Secret("k1"), 3)
    other = method.face_keys(Secret("k2"), 3)
    with torch.no_grad():
        y = method.anonymize_faces(x, keys)
        y2 = method.anonymize_faces(x, other)
        r = method.recover_faces(y, keys)
    assert y.shape == x.shape == r.shape
    assert y.min() >= -1 and y.max() <= 1
    assert (y - y2).abs().max() > 1e-4  # different secrets -> different faces
    # the identity that reaches the generator is recovered exactly before decoding: T^-1(T(z)) = z
    with torch.no_grad():
        k = method.key_vectors(keys)
        z = method.identity(x)
        torch.testing.assert_close(method.components["flow"].inverse(method.components["flow"](z, k), k), z, atol=1e-5, rtol=0)


def test_key_norm_and_z_anon_scale_options(method):
    """``key.norm``: KeyGen vectors (inference) and random training keys get that L2 norm and keep their
    direction; ``z_anon_scale`` scales T's output; the transform stays exactly invertible. Without the
    options the keys are eq. 4's f(u) and z_anon = T(z, k) unchanged."""
    torch.manual_seed(0)
    cfg = dict(tiny_config(), key={"low": -1.0, "high": 1.0, "norm": 0.5}, z_anon_scale=0.25)
    scaled = IFADIT(cfg, method.components)  # same networks, only the two options differ
    keys = method.face_keys(Secret("norm"), 4)
    with torch.no_grad():
        raw = method.key_vectors(keys)
        torch.testing.assert_close(raw, keygen_vectors(method.generator, keys))  # default: unchanged
        k = scaled.key_vectors(keys)
        torch.testing.assert_close(k.norm(dim=1), torch.full((4,), 0.5))
        torch.testing.assert_close(k, raw * (0.5 / raw.norm(dim=1, keepdim=True)))
        assert (raw.norm(dim=1) - 0.5).abs().min() > 0.1  # the option really changed something
        method.train_generator = torch.Generator().manual_seed(3)
        scaled.train_generator = torch.Generator().manual_seed(3)
        k_train, k_train_raw = scaled.random_key_vectors(5), method.random_key_vectors(5)
        method.train_generator = None  # the fixture is shared: leave it as found
        torch.testing.assert_close(k_train.norm(dim=1), torch.full((5,), 0.5))
        torch.testing.assert_close(k_train, k_train_raw * (0.5 / k_train_raw.norm(dim=1, keepdim=True)))
        flow = scaled.components["flow"]
        z = scaled.identity(_faces(4))
        assert torch.equal(method.transform(z, k), flow(z, k))  # default scale 1: eq. 3 as written
        z_an = scaled.transform(z, k)
        torch.testing.assert_close(z_an, 0.25 * flow(z, k))
        assert (z_an - scaled.transform(z, scaled.key_vectors(method.face_keys(Secret("other"), 4)))).abs().max() > 1e-4
        torch.testing.assert_close(scaled.inverse_transform(z_an, k), z, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="key.norm"):
        IFADIT(dict(tiny_config(), key={"norm": 0.0}), method.components)
    with pytest.raises(ValueError, match="z_anon_scale"):
        IFADIT(dict(tiny_config(), z_anon_scale=-1.0), method.components)


def test_background_refinement_keeps_the_border(method):
    x = _faces(2)
    keys = method.face_keys(Secret("k"), 2)
    with torch.no_grad():
        y = method.anonymize_faces(x, keys)
        raw = method.anonymize_latent(x, method.key_vectors(keys))
    # eq. 11: outside the (blurred) face mask the output is the input
    assert torch.allclose(y[..., 0, :], x[..., 0, :].clamp(-1, 1), atol=1e-6)
    m = method.refine_mask(x)
    centre = m[..., 16, 16]
    assert centre.min() > 0.5
    torch.testing.assert_close(y, (m * raw + (1 - m) * x).clamp(-1, 1))


def test_batch_of_one_equals_row_of_batch_of_eight(method):
    x = _faces(8, seed=3)
    keys = method.face_keys(Secret("batch"), 8)
    with torch.no_grad():
        y8 = method.anonymize_faces(x, keys)
        y1 = method.anonymize_faces(x[5:6], keys[5:6])
        r8 = method.recover_faces(y8, keys)
        r1 = method.recover_faces(y8[5:6], keys[5:6])
    torch.testing.assert_close(y1, y8[5:6], atol=1e-4, rtol=0)
    torch.testing.assert_close(r1, r8[5:6], atol=1e-4, rtol=0)


@pytest.mark.slow  # 8 s: a new process loads the checkpoint
def test_save_load_roundtrip_and_new_process(method, tmp_path):
    from zoo import load

    method.save_pretrained(tmp_path / "ckpt")
    index = json.loads((tmp_path / "ckpt" / "method.json").read_text())
    assert index["method"] == "ifadit" and set(method.component_names) <= set(index["components"])
    loaded = load("ifadit", local_dir=str(tmp_path / "ckpt"), device="cpu")
    crop = ((_faces(1, seed=5)[0].permute(1, 2, 0) + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).numpy()
    a = np.asarray(method.anonymize(crop, key="same secret", aligned=True))
    b = np.asarray(loaded.anonymize(crop, key="same secret", aligned=True))
    assert np.array_equal(a, b)
    rec_a = np.asarray(method.recover(a, key="same secret", aligned=True))
    rec_b = np.asarray(loaded.recover(a, key="same secret", aligned=True))
    assert np.array_equal(rec_a, rec_b)
    # same secret, fresh interpreter -> the same anonymized crop
    out = anonymize_in_fresh_process("ifadit", tmp_path / "ckpt", crop, "same secret", tmp_path).astype(int)
    assert np.array_equal(out, a), (np.abs(out - a).max(), (out != a).sum())


def test_training_losses_are_finite_and_reach_the_trained_parts(method):
    x = _faces(2, seed=7)
    batch = {"image": x, "image_b": _faces(2, seed=8)}
    method.train_generator = torch.Generator().manual_seed(0)
    for stage, trained, frozen in ((1, "mapper", "flow"), (2, "flow", "mapper")):
        groups = method.trainable_parameters(stage)
        ids = {id(p) for p in groups["g"]}
        for c in method.components.values():
            for p in c.parameters():
                p.requires_grad_(id(p) in ids)
                p.grad = None
        loss, logs = method.compute_losses(stage, "g", batch, 0)
        assert torch.isfinite(loss) and logs["total"] == pytest.approx(loss.item())
        loss.backward()
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in method.components[trained].parameters())
        assert all(p.grad is None for p in method.components[frozen].parameters())
    for c in method.components.values():
        c.requires_grad_(True).eval()
    with torch.no_grad():
        rows = method.sample_outputs(batch)
    assert set(rows) == {"input", "reconstruction", "anonymized", "recovered", "wrong_key"}


def test_config_without_landmark_network_must_not_weight_it():
    cfg = tiny_config()
    cfg["stages"][1]["lambdas"]["lm"] = 1.0
    with pytest.raises(ValueError, match="landmark"):
        IFADIT.from_config(cfg)


# ------------------------------------------------------------------ official checkpoint layout
def _freia_reference(state: dict, z: torch.Tensor, c: torch.Tensor, n_blocks: int, clamp: float = 2.0) -> torch.Tensor:
    """FrEIA SequenceINN of conditional AllInOneBlocks (hard permutation, SOFTPLUS global affine),
    written out from FrEIA's documented computation."""
    x = z
    for i in range(n_blocks):
        p = lambda n: state[f"module_list.{i}.{n}"]  # noqa: E731
        d1 = x.shape[1] - x.shape[1] // 2
        x1, x2 = x[:, :d1], x[:, d1:]
        h = torch.cat([x1, c], 1)
        for j in range(0, 10, 2):
            h = h @ p(f"subnet.{j}.weight").T + p(f"subnet.{j}.bias")
            if j < 8:
                h = F.leaky_relu(h, 0.01)
        a = 0.1 * h
        s = clamp * torch.tanh(a[:, : x2.shape[1]])
        x2 = x2 * torch.exp(s) + a[:, x2.shape[1] :]
        x = torch.cat([x1, x2], 1)
        scale = 0.1 * F.softplus(p("global_scale"), beta=0.5)
        x = (x * scale + p("global_offset")) @ p("w_perm").T
    return x


def _official_sif_state(seed: int = 0) -> dict:
    """A state dict with the names and shapes of the released G_net_*.pth (4 blocks, 512-d, 512-d key)."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    dims = [(768, 256), (256, 128), (128, 128), (128, 256), (256, 512)]
    for i in range(4):
        perm = torch.randperm(512, generator=g)
        w = torch.zeros(512, 512)
        w[torch.arange(512), perm] = 1.0
        state[f"module_list.{i}.global_scale"] = 9.93 + 0.1 * torch.randn(1, 512, generator=g)
        state[f"module_list.{i}.global_offset"] = 0.01 * torch.randn(1, 512, generator=g)
        state[f"module_list.{i}.w_perm"] = w
        state[f"module_list.{i}.w_perm_inv"] = w.T.contiguous()
        for j, (din, dout) in enumerate(dims):
            state[f"module_list.{i}.subnet.{2 * j}.weight"] = torch.randn(dout, din, generator=g) / din**0.5
            state[f"module_list.{i}.subnet.{2 * j}.bias"] = 0.1 * torch.randn(dout, generator=g)
    return state


def test_official_sif_checkpoint_converts_and_matches_freia():
    state = _official_sif_state()
    flow = get_converter("ifadit-sif").fn({f"module.{k}": v for k, v in state.items()})  # DataParallel prefix
    assert isinstance(flow, SecureIdentityFlow) and flow.block == "allinone" and len(flow.blocks) == 4
    assert (flow.dim, flow.key_dim) == (512, 512)
    z = F.normalize(torch.randn(5, 512), dim=1)
    k = torch.randn(5, 512)
    with torch.no_grad():
        out = flow(z, k)
        torch.testing.assert_close(out, _freia_reference(state, z, k, 4), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(flow.inverse(out, k), z, atol=1e-5, rtol=0)
    bad = dict(state)
    bad["module_list.1.subnet.2.weight"] = torch.zeros(100, 256)
    with pytest.raises(ConversionError):
        get_converter("ifadit-sif").fn(bad)
    with pytest.raises(ConversionError):
        get_converter("ifadit-sif").fn({"model.0.weight": torch.zeros(2, 2)})


def test_official_mapper_and_icl_convert():
    g = torch.Generator().manual_seed(0)
    mapper_sd = {
        "model.0.weight": torch.randn(512, 1024, generator=g) * 0.03,
        "model.0.bias": torch.randn(512, generator=g),
        "model.2.weight": torch.randn(512, 512, generator=g) * 0.04,
        "model.2.bias": torch.randn(512, generator=g),
    }
    mapper = get_converter("ifadit-mapper").fn(mapper_sd)
    assert isinstance(mapper, LatentMapper) and (mapper.id_dim, mapper.style_dim) == (512, 512)
    z, a = torch.randn(2, 512), torch.randn(2, 14, 512)
    ref = F.leaky_relu(torch.cat([z.unsqueeze(1).expand(-1, 14, -1), a], 2) @ mapper_sd["model.0.weight"].T + mapper_sd["model.0.bias"], 0.2)
    ref = ref @ mapper_sd["model.2.weight"].T + mapper_sd["model.2.bias"]
    with torch.no_grad():
        torch.testing.assert_close(mapper(z, a), ref, atol=1e-4, rtol=1e-4)

    dims = [(512, 1024), (1024, 2048), (2048, 1024), (1024, 512)]
    icl_sd = {}
    for j, (din, dout) in enumerate(dims):
        icl_sd[f"model.{2 * j}.weight"] = torch.randn(dout, din, generator=g) / din**0.5
        icl_sd[f"model.{2 * j}.bias"] = torch.randn(dout, generator=g) * 0.1
    icl = get_converter("ifadit-icl").fn(icl_sd)
    assert isinstance(icl, IdentityCompensation)
    # the official loader matches tensors by order and shape: other names load the same way
    renamed = {f"fc_net.{i}": v for i, v in enumerate(icl_sd.values())}
    icl_b = get_converter("ifadit-icl").fn(renamed)
    x = torch.randn(3, 512)
    with torch.no_grad():
        torch.testing.assert_close(icl(x), icl_b(x))
    with pytest.raises(ConversionError):
        get_converter("ifadit-icl").fn({k: v for k, v in icl_sd.items() if not k.startswith("model.6")})
