"""The FFHQ-grade generator: IR reader, Haar transform, W+ semantics, truncation, heads, parity with OpenVINO."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from zoo.convert.openvino_ir import read_ir
from zoo.nn import mobilestylegan as msg


# ------------------------------------------------------------------ the IR reader, on an IR written here
def _write_tiny_ir(tmp_path, weight: np.ndarray, bias: np.ndarray, axes: np.ndarray):
    blob = weight.astype("<f4").tobytes() + bias.astype("<f4").tobytes() + axes.astype("<i8").tobytes()
    o_b, o_a = weight.nbytes, weight.nbytes + bias.nbytes
    xml = f"""<?xml version="1.0"?>
<net name="tiny" version="11">
  <layers>
    <layer id="0" name="x" type="Parameter" version="opset1"><data shape="1,3" element_type="f32"/></layer>
    <layer id="1" name="w" type="Const" version="opset1"><data element_type="f32" shape="2, 3" offset="0" size="{weight.nbytes}"/></layer>
    <layer id="2" name="mm" type="MatMul" version="opset1"><data transpose_a="false" transpose_b="true"/></layer>
    <layer id="3" name="b" type="Const" version="opset1"><data element_type="f32" shape="1, 2" offset="{o_b}" size="{bias.nbytes}"/></layer>
    <layer id="4" name="add" type="Add" version="opset1"><data auto_broadcast="numpy"/></layer>
    <layer id="5" name="axes" type="Const" version="opset1"><data element_type="i64" shape="1" offset="{o_a}" size="8"/></layer>
    <layer id="6" name="out" type="Result" version="opset1"/>
  </layers>
  <edges>
    <edge from-layer="0" from-port="0" to-layer="2" to-port="0"/>
    <edge from-layer="1" from-port="0" to-layer="2" to-port="1"/>
    <edge from-layer="3" from-port="0" to-layer="4" to-port="1"/>
    <edge from-layer="2" from-port="2" to-layer="4" to-port="0"/>
    <edge from-layer="4" from-port="2" to-layer="6" to-port="0"/>
  </edges>
</net>"""
    (tmp_path / "tiny.xml").write_text(xml)
    (tmp_path / "tiny.bin").write_bytes(blob)
    return tmp_path / "tiny.xml"


def test_ir_reader_reads_constants_and_wiring(tmp_path):
    weight = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    bias = np.array([[0.5, -2.0]], dtype=np.float32)
    g = read_ir(_write_tiny_ir(tmp_path, weight, bias, np.array([3])))
    np.testing.assert_array_equal(g.named_constant("w"), weight)
    np.testing.assert_array_equal(g.named_constant("b"), bias)
    assert g.named_constant("axes").dtype == np.int64 and g.named_constant("axes").tolist() == [3]
    mm = g.by_name("mm")
    assert g.layers[mm].inputs == ["0", "1"]  # port order, whatever the edge order in the file
    assert g.layers[g.by_name("add")].inputs == ["2", "3"]
    assert g.consumer(mm, "Add") == g.by_name("add")
    assert g.const_input(mm) == g.by_name("w")
    with pytest.raises(ValueError, match="not a Const"):
        g.constant(mm)


def test_ir_reader_rejects_a_constant_outside_the_weights(tmp_path):
    path = _write_tiny_ir(tmp_path, np.zeros((2, 3), np.float32), np.zeros((1, 2), np.float32), np.array([0]))
    (tmp_path / "tiny.bin").write_bytes(b"\0" * 10)
    with pytest.raises(ValueError, match="does not fit"):
        read_ir(path).named_constant("b")


# ------------------------------------------------------------------ Haar inverse wavelet transform
def test_haar_idwt_matches_the_separable_transposed_convolutions():
    """The IR builds the inverse transform from [1,1]/sqrt2 and [1,-1]/sqrt2 transposed convolutions, first along
    rows, then along columns; haar_idwt must give the same image, and haar_dwt must undo it."""
    torch.manual_seed(0)
    c, x = 3, torch.randn(2, 12, 5, 7)
    h = 1 / math.sqrt(2)
    lo, hi = torch.tensor([h, h]), torch.tensor([h, -h])

    def up_rows(t, f):  # [B,C,H,W] -> [B,C,2H,W]
        return F.conv_transpose2d(t, f.view(1, 1, 2, 1).repeat(t.shape[1], 1, 1, 1), stride=(2, 1), groups=t.shape[1])

    def up_cols(t, f):
        return F.conv_transpose2d(t, f.view(1, 1, 1, 2).repeat(t.shape[1], 1, 1, 1), stride=(1, 2), groups=t.shape[1])

    ll, bands = x[:, :c], x[:, c:].reshape(2, c, 3, 5, 7)
    ref = up_cols(up_rows(ll, lo) + up_rows(bands[:, :, 0], hi), lo) + up_cols(up_rows(bands[:, :, 1], lo) + up_rows(bands[:, :, 2], hi), hi)
    out = msg.haar_idwt(x)
    assert out.shape == (2, 3, 10, 14)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(msg.haar_dwt(out), x, atol=1e-5, rtol=1e-5)


def test_wplus_shape_errors():
    with pytest.raises(ValueError, match=r"\[B,512\] or \[B,23,512\]"):
        msg.as_wplus(torch.zeros(1, 22, 512))
    assert msg.as_wplus(torch.zeros(2, 512)).shape == (2, 23, 512)
    assert len(msg.SLOT_NAMES) == msg.NUM_SLOTS == len(msg.SLOT_RESOLUTIONS) == 23


# ------------------------------------------------------------------ the packaged network
needs_wheel = pytest.mark.skipif(importlib.util.find_spec("random_face") is None, reason="random-face wheel not installed (bash scripts/setup.sh)")


@pytest.fixture(scope="module")
def generator():
    return msg.load_mobilestylegan()


def _z(seed: int, n: int = 1) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal((n, 512)).astype(np.float32))


@needs_wheel
def test_conversion_is_cached_with_the_source_hash(generator):
    out = msg.converted_weights()
    config = __import__("json").loads((out / "config.json").read_text())
    assert config["source"] == msg.RANDOM_FACE and len(config["source_sha256"]) == 64
    assert out.name == config["source_sha256"][:16]
    assert "non-commercial" in config["licence"]
    assert config["w_avg"]["samples"] >= 10_000


@needs_wheel
@pytest.mark.slow
def test_w_and_broadcast_wplus_draw_the_same_face(generator):
    with torch.no_grad():
        w = generator.style(_z(7), psi=0.7)
        a = generator.synthesis(w, size=256)
        b = generator.synthesis(w[:, None].repeat(1, msg.NUM_SLOTS, 1), size=256)
        c = generator.synthesis(torch.cat([w[:, None].repeat(1, 5, 1), generator.style(_z(8))[:, None].repeat(1, 18, 1)], 1), size=256)
    assert torch.equal(a, b)
    assert (a - c).abs().mean() > 0.05  # the slots are really used: other styles in slots 5.. change the face


@needs_wheel
def test_truncation_pulls_toward_the_mean_style(generator):
    with torch.no_grad():
        w = generator.mapping(_z(3))
        torch.testing.assert_close(generator.style(_z(3), psi=0.0), generator.w_avg[None].expand_as(w))
        torch.testing.assert_close(generator.style(_z(3), psi=1.0), w)
        half = generator.style(_z(3), psi=0.5)
    torch.testing.assert_close(half, 0.5 * (w + generator.w_avg), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"z must be \[N,512\]"):
        generator.style(torch.zeros(1, 100))


@needs_wheel
def test_mean_face_is_a_face_in_range(generator):
    with torch.no_grad():
        img = generator.synthesis(generator.mean_wplus(), size=1024)
    assert img.shape == (1, 3, 1024, 1024)
    assert -1.5 < float(img.min()) and float(img.max()) < 1.5 and float(img.std()) > 0.2


@pytest.mark.slow  # 9 s: the 1024 px network drawn to compare its heads
@needs_wheel
def test_trained_heads_match_the_downsampled_1024_output(generator):
    """Two held-out seeds; the benchmark measures 64 (benchmarks/results/mobilestylegan_heads.json)."""
    assert generator.heads_trained, "the 256/512 px heads are not shipped (zoo/weights/mobilestylegan/heads)"
    with torch.no_grad():
        for seed in (2_000_001, 2_000_002):
            w = generator.style(_z(seed), psi=0.7)
            full = generator.synthesis(w, size=1024)
            # these seeds measure 36.5-38.5 (256), 34.0-35.4 (512) and 28.5-28.8 dB (256 draft)
            for size, draft, floor in ((256, False, 34.0), (512, False, 32.0), (256, True, 27.0)):
                mse = F.mse_loss(generator.synthesis(w, size=size, draft=draft), F.avg_pool2d(full, 1024 // size))
                assert 10 * math.log10(4 / float(mse)) > floor, (seed, size, draft)


@needs_wheel
@pytest.mark.slow
def test_256_px_image_is_the_512_px_image_area_downsampled(generator):
    with torch.no_grad():
        w = generator.style(_z(11), psi=0.7)
        small, large = generator.synthesis(w, size=256), generator.synthesis(w, size=512)
        draft = generator.synthesis(w, size=256, draft=True)
    assert small.shape == draft.shape == (1, 3, 256, 256)
    torch.testing.assert_close(small, F.avg_pool2d(large, 2), atol=1e-5, rtol=0)
    assert (small - draft).abs().mean() > 1e-3  # the draft is a different, cheaper head
    with pytest.raises(ValueError, match="draft images are 256 px only"):
        generator.synthesis(w, size=512, draft=True)


def test_missing_wheel_names_the_setup_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(msg.MissingGeneratorError, match="scripts/setup.sh"):
        msg.random_face_data_dir()


@pytest.mark.slow  # 10 s: the CLI in a new process against the packaged network
@needs_wheel
@pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="openvino (a test extra) not installed")
def test_cli_generate_reproduces_the_packaged_network(tmp_path):
    """``generate --psi 1 --size 1024 --z Z.npy`` against the wheel's own graph run by OpenVINO: <= 2 uint8 levels on
    >= 99.99% of pixels."""
    import openvino as ov
    from PIL import Image

    from zoo.cli import main

    z = np.random.default_rng(123).standard_normal((2, 512)).astype(np.float32)
    np.save(tmp_path / "z.npy", z)
    assert main(["generate", "--z", str(tmp_path / "z.npy"), "--psi", "1", "--size", "1024", "--out", str(tmp_path / "out")]) == 0
    core, data = ov.Core(), msg.random_face_data_dir()
    exact = {"INFERENCE_PRECISION_HINT": "f32"}
    mapping = core.compile_model(core.read_model(str(data / "MappingNetwork.xml")), "CPU", exact)
    synthesis = core.compile_model(core.read_model(str(data / "SynthesisNetwork.xml")), "CPU", exact)
    for i in range(2):
        ref = synthesis(mapping(z[i : i + 1])[0])[0][0]
        ref_u8 = np.clip(np.round((ref.transpose(1, 2, 0) + 1) * 127.5), 0, 255).astype(np.int16)
        ours = np.asarray(Image.open(tmp_path / "out" / f"{i:03d}.png")).astype(np.int16)
        diff = np.abs(ours - ref_u8)
        assert (diff <= 2).mean() >= 0.9999, f"face {i}: {(diff > 2).mean():.2e} of pixels differ by more than 2 levels"


def test_cli_generate_rejects_a_z_of_the_wrong_shape(tmp_path, capsys):
    from zoo.cli import main

    np.save(tmp_path / "z.npy", np.zeros((2, 100), np.float32))
    assert main(["generate", "--z", str(tmp_path / "z.npy"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "[N,512]" in err[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("command", [["generate", "-n", "1"], ["reconstruct", "example:astronaut", "--steps", "1"]])
@pytest.mark.parametrize("device", ["nosuch", "mps"] + ([] if torch.cuda.is_available() else ["cuda"]))
def test_cli_device_a_machine_cannot_use_is_one_line(tmp_path, capsys, command, device):
    from zoo.cli import main

    assert main([*command, "--device", device, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --device {device}:")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ inversion and `zoo reconstruct`
@pytest.mark.slow  # 9 s: W+ refinement steps at 256 px
@needs_wheel
def test_refinement_lowers_the_reconstruction_loss(generator):
    from zoo.inversion import refine_wplus

    with torch.no_grad():
        target = F.avg_pool2d(generator.synthesis(generator.style(_z(4_000_001), psi=0.8), size=1024), 4)
    result = refine_wplus(target, steps=8, generator=generator)
    assert result.wplus.shape == (1, 23, 512) and result.image.shape == (1, 3, 256, 256)
    assert len(result.losses) == 8
    assert result.losses[-1] < 0.8 * result.losses[0]


@needs_wheel
@pytest.mark.slow
def test_a_cpu_draws_a_batch_face_by_face_with_the_same_images(generator, monkeypatch):
    """On a CPU the synthesis splits a batch into :data:`CPU_CHUNK` faces at a time (faster there); the images, and an
    inversion's fit, are the same as drawing the whole batch at once, and each face's fit is its own."""
    import zoo.nn.mobilestylegan as msg
    from zoo.inversion import refine_wplus

    assert msg.CPU_CHUNK == 1
    with torch.no_grad():
        styles = torch.cat([generator.style(_z(4_000_002 + i), psi=0.8) for i in range(2)])
        target = generator.synthesis(styles, size=256, draft=True)
    recorded = styles.clone().requires_grad_(True)  # autograd records the draw: a CPU splits the batch
    apart = {size: generator.synthesis(recorded, size, draft=size == 256).detach() for size in (256, 512)}
    apart_fit = refine_wplus(target, steps=2, generator=generator, face_weight=1.0)
    alone_fit = refine_wplus(target[1:2], steps=2, generator=generator, face_weight=1.0)
    monkeypatch.setattr(msg, "CPU_CHUNK", 2)
    for size, image in apart.items():
        assert image.shape == (2, 3, size, size)
        assert (generator.synthesis(recorded, size, draft=size == 256).detach() - image).abs().max() < 1e-3
    together_fit = refine_wplus(target, steps=2, generator=generator, face_weight=1.0)
    start = refine_wplus(target, steps=0, generator=generator).image
    changed = (together_fit.image - start).abs().mean()
    assert changed > 0.01  # the fit changed the faces, so the comparisons below mean something
    # compared through the images: Adam's first steps move a coordinate whose gradient is near zero by the learning
    # rate either way, so codes may differ in coordinates the picture does not depend on
    assert (apart_fit.image - together_fit.image).abs().mean() < 0.02 * changed
    assert (apart_fit.image[1:2] - alone_fit.image).abs().mean() < 0.02 * changed


def _mesh_pose(generator, wplus: torch.Tensor) -> np.ndarray:
    """Face-mesh (yaw, pitch) in degrees of the face ``wplus [1,23,512]`` draws."""
    from zoo.imageio import from_tensor
    from zoo.inversion import mesh_poses

    with torch.no_grad():
        return mesh_poses(list(from_tensor(generator.synthesis(wplus, size=256))))[0]


def _mesh_yaw(generator, wplus: torch.Tensor) -> float:
    return float(_mesh_pose(generator, wplus)[0])


@needs_wheel
@pytest.mark.parametrize("angle, step", [("yaw", 15.0), ("pitch", 30.0)])  # the pitch fit undershoots more (correlation 0.68)
def test_pose_direction_turns_a_generated_head_both_ways(generator, angle, step):
    from zoo.inversion import POSE_ANGLES, POSE_SLOTS, _pose_direction

    direction = _pose_direction(angle)
    assert direction is not None and direction.shape == (512,)
    column = POSE_ANGLES.index(angle)
    w = generator.style(_z(4_000_002), psi=0.7)[:, None].expand(-1, msg.NUM_SLOTS, -1).clone()
    turned = {}
    for deg in (-step, step):
        code = w.clone()
        code[:, :POSE_SLOTS] += deg * direction
        turned[deg] = _mesh_pose(generator, code)[column]
    angle0 = _mesh_pose(generator, w)[column]
    assert turned[-step] < angle0 - 5.0 and turned[step] > angle0 + 5.0


def _turned_head(generator, seed: int, angle: str, degrees: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(w, target_code, target): a generated head's W+ ``[1,23,512]``, that code moved ``degrees`` along the generator's
    ``angle`` direction in the pose slots, and the 256 px face the moved code draws, read back from uint8."""
    from zoo.imageio import from_tensor, to_tensor
    from zoo.inversion import POSE_SLOTS, _pose_direction

    w = generator.style(_z(seed), psi=0.7)[:, None].expand(-1, msg.NUM_SLOTS, -1).clone()
    target_code = w.clone()
    target_code[:, :POSE_SLOTS] += degrees * _pose_direction(angle)
    with torch.no_grad():
        target = to_tensor(from_tensor(generator.synthesis(target_code, size=256))[0])
    return w, target_code, target


@needs_wheel
def test_pose_correction_turns_the_start_toward_the_target_head(generator):
    from zoo.inversion import POSE_SLOTS, pose_corrected

    w, target_code, target = _turned_head(generator, 4_000_003, "yaw", 25.0)
    corrected = pose_corrected(target, w, generator)
    wanted = _mesh_yaw(generator, target_code)
    assert abs(_mesh_yaw(generator, corrected) - wanted) < 0.5 * abs(_mesh_yaw(generator, w) - wanted)
    assert torch.equal(corrected[:, POSE_SLOTS:], w[:, POSE_SLOTS:])


@needs_wheel
@pytest.mark.slow
def test_pose_correction_turns_pitch_only_when_asked(generator):
    from zoo.inversion import POSE_SLOTS, _pose_direction, pose_corrected

    w, target_code, target = _turned_head(generator, 4_000_004, "pitch", 30.0)
    wanted = _mesh_pose(generator, target_code)[1]
    before = abs(_mesh_pose(generator, w)[1] - wanted)
    both = pose_corrected(target, w, generator, ("yaw", "pitch"))
    assert abs(_mesh_pose(generator, both)[1] - wanted) < 0.5 * before
    assert torch.equal(both[:, POSE_SLOTS:], w[:, POSE_SLOTS:])
    # yaw only (the default) moves the code along the yaw direction alone
    yaw_only = pose_corrected(target, w, generator)
    step = (yaw_only - w)[0, :POSE_SLOTS]
    d = _pose_direction("yaw")
    along = (step @ d / (d @ d))[:, None] * d
    assert along.norm() > 0 and (step - along).norm() <= 1e-4 * step.norm()


def test_pose_correction_leaves_faces_the_mesh_cannot_read(monkeypatch):
    import zoo.inversion as inv

    class Drawer:
        def synthesis(self, wplus, size, draft=False):
            return torch.zeros(wplus.shape[0], 3, size, size)

    calls = []

    def fake_poses(images):  # the targets first (10 deg and unreadable), then each drawn code (0, then on target)
        calls.append(len(images))
        if len(calls) == 1:
            return np.array([[10.0, 0.0], [np.nan, np.nan]])
        return np.array([[0.0, 0.0]] * len(images)) if len(calls) == 2 else np.array([[10.0, 0.0]] * len(images))

    direction = torch.linspace(-1.0, 1.0, 512)
    monkeypatch.setattr(inv, "mesh_poses", fake_poses)
    monkeypatch.setattr(inv, "_pose_direction", lambda angle: direction)
    start = torch.randn(2, 23, 512)
    out = inv.pose_corrected(torch.zeros(2, 3, 256, 256), start, Drawer())
    assert torch.allclose(out[0, : inv.POSE_SLOTS], start[0, : inv.POSE_SLOTS] + 10.0 * direction)
    assert torch.equal(out[0, inv.POSE_SLOTS :], start[0, inv.POSE_SLOTS :]) and torch.equal(out[1], start[1])
    assert calls == [2] + [1] * inv.POSE_ITERATIONS  # only the readable face is drawn, every round


def test_inversion_turns_the_encoders_code_before_the_refinement_steps(monkeypatch):
    """invert_wplus: the encoder's code is turned to the head's yaw, then refined from there; the fitted code is not
    turned again. With correct_pose=False the encoder's code is refined as it is."""
    import zoo.inversion as inv

    class Drawer:
        def synthesis(self, wplus, size, draft=False):
            return wplus[:, :3, :1, None].expand(-1, -1, size, size).contiguous()

    turned: list[torch.Tensor] = []
    starts: list[torch.Tensor] = []

    def fake_turn(target, code, generator=None, angles=("yaw",)):
        turned.append(code.detach().clone())
        return code + 1.0

    def fake_refine(target, steps, *, generator=None, start=None, identity_weight=0.0, prior_weight=0.0, face_weight=0.0):
        starts.append(start.clone())
        w = start - 0.25
        return inv.InversionResult(w, generator.synthesis(w, inv.ALIGN_SIZE), [0.0] * steps, 0.0)

    encoded = torch.zeros(1, 23, 512)
    monkeypatch.setattr(inv, "pose_corrected", fake_turn)
    monkeypatch.setattr(inv, "refine_wplus", fake_refine)
    monkeypatch.setattr("zoo.nn.wplus_encoder.load_wplus_encoder", lambda: lambda x: encoded.clone())
    target = torch.zeros(1, 3, 256, 256)
    result = inv.invert_wplus(target, 3, generator=Drawer())
    assert len(turned) == 1 and torch.equal(turned[0], encoded) and torch.equal(starts[0], encoded + 1.0)
    assert torch.equal(result.wplus, encoded + 0.75) and result.start == "encoder"
    turned.clear()
    plain = inv.invert_wplus(target, 3, generator=Drawer(), correct_pose=False)
    assert not turned and torch.equal(plain.wplus, encoded - 0.25)


@needs_wheel
@pytest.mark.slow
def test_reconstruct_writes_every_face_of_a_packaged_photo(tmp_path, astronaut_rgb):
    import json

    from PIL import Image

    from zoo.cli import main
    from zoo.detection import detect_faces

    Image.fromarray(astronaut_rgb).save(tmp_path / "astronaut.png")
    assert main(["reconstruct", str(tmp_path / "astronaut.png"), "--steps", "2", "--pitch", "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "astronaut__reconstructed.json").read_text())
    faces = detect_faces(astronaut_rgb)
    assert len(report["faces"]) == len(faces) >= 1 and report["pitch"] is True
    from zoo.nn.wplus_encoder import load_wplus_encoder

    for face in report["faces"]:
        assert face["status"] == "reconstructed" and face["steps"] == 2 and -1.0 <= face["sface_cosine"] <= 1.0
        assert face["start"] == ("encoder" if load_wplus_encoder() is not None else "w_avg")
    out = np.asarray(Image.open(tmp_path / "out" / "astronaut__reconstructed.png"))
    x0, y0, x1, y1 = (int(v) for v in faces[0].box)
    assert np.abs(out[y0:y1, x0:x1].astype(int) - astronaut_rgb[y0:y1, x0:x1]).mean() > 2  # the face was redrawn
    assert np.array_equal(out[:, :5], astronaut_rgb[:, :5])  # far from the face nothing changes


def test_face_term_of_the_reconstruction_loss_reads_only_the_face_region():
    """face_weight adds nothing for an error outside the face region (the crop's top rows) and adds the mean error
    inside it: a 32 px patch of error 1 at the face's centre."""
    from zoo.inversion import reconstruction_loss

    target = torch.zeros(1, 3, 256, 256)
    outside, inside = target.clone(), target.clone()
    outside[..., :16, :] = 1.0
    inside[..., 128:160, 112:144] = 1.0
    assert torch.allclose(reconstruction_loss(outside, target, 2.0), reconstruction_loss(outside, target, 0.0), atol=1e-6)
    added = float(reconstruction_loss(inside, target, 1.0) - reconstruction_loss(inside, target, 0.0))
    assert 0.02 < added < 0.5  # the patch is a few percent of the face region, seen at 3 scales


@needs_wheel
def test_reconstruct_runs_the_default_inversion_unless_told(monkeypatch, tmp_path, astronaut_rgb):
    """Without --steps / --identity-weight the CLI fits with zoo.inversion's defaults and the report says which;
    given, it passes them on."""
    import json

    from PIL import Image

    from zoo import inversion
    from zoo.cli import main

    seen: list[tuple[int, float]] = []

    def fake_reconstruct(rgb, steps, *, identity_weight, face_weight, **kwargs):
        seen.append((steps, identity_weight, face_weight))
        return np.asarray(rgb).copy(), []

    monkeypatch.setattr(inversion, "reconstruct_photo", fake_reconstruct)
    Image.fromarray(astronaut_rgb).save(tmp_path / "astronaut.png")
    assert main(["reconstruct", str(tmp_path / "astronaut.png"), "--out", str(tmp_path / "a")]) == 0
    given = ["--steps", "3", "--identity-weight", "0", "--face-weight", "0.5"]
    assert main(["reconstruct", str(tmp_path / "astronaut.png"), *given, "--out", str(tmp_path / "b")]) == 0
    defaults = (inversion.DEFAULT_STEPS, inversion.DEFAULT_IDENTITY_WEIGHT, inversion.DEFAULT_FACE_WEIGHT)
    assert seen == [defaults, (3, 0.0, 0.5)]
    report = json.loads((tmp_path / "a" / "astronaut__reconstructed.json").read_text())
    assert (report["steps"], report["identity_weight"], report["face_weight"]) == defaults
    assert main(["reconstruct", str(tmp_path / "astronaut.png"), "--face-weight", "-1", "--out", str(tmp_path / "c")]) == 2
    assert not (tmp_path / "c").exists()


@needs_wheel
def test_reconstruct_blurs_a_face_it_cannot_align(monkeypatch, astronaut_rgb):
    from zoo import detection, detectors, inversion

    face = detection.detect_faces(astronaut_rgb)[0]
    flat = detectors.DetectedFace(face.box, np.repeat(face.landmarks[:1], 5, axis=0), face.score)  # all five points at one place
    monkeypatch.setattr(detection, "detect_faces", lambda rgb, detector=None: [flat])
    out, reports = inversion.reconstruct_photo(astronaut_rgb, steps=1)
    assert reports[0]["status"] == "blurred"
    x0, y0, x1, y1 = (int(v) for v in face.box)
    assert np.abs(out[y0:y1, x0:x1].astype(int) - astronaut_rgb[y0:y1, x0:x1]).mean() > 2


def test_fine_tuning_one_head_leaves_the_other_as_shipped(tmp_path):
    """``train --init shipped --heads 512``: the 512 px head moves, the draft head keeps the shipped weights exactly."""
    from safetensors.torch import load_file, save_file

    from training import mobilestylegan_heads as H
    from zoo.nn.mobilestylegan import heads_dir

    shipped = load_file(str(heads_dir() / "model.safetensors"))
    g = torch.Generator().manual_seed(0)
    n, c = 16, H.CROP
    save_file(
        {
            "features_256": torch.randn(n, 256, c, c, generator=g).half(),
            "target_256": (torch.rand(n, 3, 2 * c, 2 * c, generator=g) * 2 - 1).half(),
            "features_512": torch.randn(n, 128, c, c, generator=g).half(),
            "target_512": (torch.rand(n, 3, 2 * c, 2 * c, generator=g) * 2 - 1).half(),
            "style": torch.randn(n, 512, generator=g),
        },
        str(tmp_path / "shard_0000.safetensors"),
    )
    assert H.train(tmp_path, tmp_path / "run", steps=3, max_minutes=5, resume=False, batch=2, lr=1e-3, init=heads_dir(), sizes=(512,)) == 3
    state = {k[6:]: v for k, v in load_file(str(tmp_path / "run" / "train_state.safetensors")).items() if k.startswith("model.")}
    assert set(state) == set(shipped)
    draft = [k for k in shipped if k.startswith("256.")]
    assert draft and all(torch.equal(state[k], shipped[k].float()) for k in draft)
    assert any(not torch.equal(state[k], shipped[k].float()) for k in shipped if k.startswith("512."))


def test_learning_rate_decay_holds_then_falls_over_the_last_fraction():
    """lr_decay 0 keeps the rate; 0.5 keeps it for the first half of the steps, then lowers it at every step to near
    0, the last step still moving."""
    from zoo.inversion import _decay_factor

    assert all(_decay_factor(s, 40, 0.0) == 1.0 for s in range(1, 41))
    factors = [_decay_factor(s, 40, 0.5) for s in range(1, 41)]
    assert all(f == 1.0 for f in factors[:20])
    assert all(a > b for a, b in zip(factors[20:], factors[21:]))
    assert 0.0 < factors[-1] < 0.05
