"""The identity code of W+ latents (zoo.nn.wplus_identity) and the demo tier's W+ latent space."""

from __future__ import annotations

import pytest
import torch

from zoo.nn.mobilestylegan import NUM_SLOTS, STYLE_DIM
from zoo.nn.wplus_identity import (
    COARSE_SLOTS,
    DEVIATION_SLOTS,
    DEVIATION_SLOTS_V5,
    IDENTITY_SLOTS,
    WPlusIdentity,
    identity_basis_dir,
    load_wplus_identity,
)


def _toy(k: int = 6, big_k: int = 9, seed: int = 0) -> WPlusIdentity:
    gen = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(STYLE_DIM, big_k, generator=gen))[0]
    sigma = torch.rand(big_k, generator=gen) + 0.5
    Q = torch.linalg.qr(torch.randn(big_k, k, generator=gen))[0]
    return WPlusIdentity((U / sigma) @ Q, (U * sigma) @ Q, U, torch.randn(STYLE_DIM, generator=gen))


def _rotations(ident: WPlusIdentity, n: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return ident.rotations(torch.randn(n, STYLE_DIM * STYLE_DIM, generator=gen), torch.randn(n, ident.complement_dim**2, generator=gen))


def _wplus(n: int = 3, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, NUM_SLOTS, STYLE_DIM, generator=torch.Generator().manual_seed(seed))


def test_with_code_sets_the_code_and_the_right_rotations_undo_it():
    ident = _toy()
    w = _wplus()
    u = ident.code(w)
    u_new = torch.randn_like(u)
    rot = _rotations(ident, w.shape[0], 2)
    edited = ident.with_code(w, u_new, *rot)
    assert torch.allclose(ident.code(edited), u_new, atol=1e-4)
    back = ident.with_code(edited, u, *rot, inverse=True)
    assert torch.allclose(back, w, atol=1e-4)
    # other rotations (a wrong key) leave the deviations and the residual scrambled
    wrong = ident.with_code(edited, u, *_rotations(ident, w.shape[0], 3), inverse=True)
    assert torch.allclose(ident.code(wrong), u, atol=1e-4)
    assert (wrong - w).abs().mean() > 0.5
    # without rotations only the identity code changes
    plain = ident.with_code(w, u_new)
    assert torch.allclose(ident.with_code(plain, u), w, atol=1e-4)


def test_rotations_are_orthogonal():
    ident = _toy()
    r, rc = _rotations(ident, 2, 4)
    assert torch.allclose(r @ r.transpose(1, 2), torch.eye(STYLE_DIM).expand(2, -1, -1), atol=1e-4)
    assert torch.allclose(rc @ rc.transpose(1, 2), torch.eye(ident.complement_dim).expand(2, -1, -1), atol=1e-4)


def test_slots_outside_the_deviation_slots_are_untouched():
    ident = _toy()
    w = _wplus()
    edited = ident.with_code(w, torch.randn(w.shape[0], ident.dim), *_rotations(ident, w.shape[0], 5))
    others = [s for s in range(NUM_SLOTS) if s not in DEVIATION_SLOTS]
    assert torch.equal(edited[:, others], w[:, others])
    assert not torch.equal(edited[:, list(IDENTITY_SLOTS)], w[:, list(IDENTITY_SLOTS)])


def test_bad_shapes_are_refused():
    ident = _toy()
    with pytest.raises(ValueError, match="W\\+ must be"):
        ident.code(torch.zeros(2, 5, STYLE_DIM))
    with pytest.raises(ValueError, match="identity code must be"):
        ident.with_code(_wplus(2), torch.zeros(2, ident.dim + 1))
    with pytest.raises(ValueError, match="identity slots"):
        WPlusIdentity(ident.code_matrix, ident.edit_matrix, ident.span, ident.w_mean, slots=(30,))


def _shipped():
    if not (identity_basis_dir() / "basis.safetensors").is_file():
        pytest.skip("no shipped identity basis")
    return load_wplus_identity()


def test_shipped_basis_is_whitened_for_the_generators_faces():
    """u of the generator's own faces is about N(0, I): what the keyed transforms were trained on."""
    from zoo.nn.mobilestylegan import load_mobilestylegan

    ident = _shipped()
    g = load_mobilestylegan()
    with torch.no_grad():
        w = g.style(torch.randn(2048, STYLE_DIM, generator=torch.Generator().manual_seed(3)))
        u = ident.code(w[:, None].expand(-1, NUM_SLOTS, -1))
    assert ident.dim == 100
    assert u.mean(0).abs().max() < 0.25
    var = u.var(0)
    assert 0.75 < float(var.mean()) < 1.25
    assert float(var.min()) > 0.4 and float(var.max()) < 2.0
    # the code and edit matrices are inverse to each other
    assert torch.allclose(ident.code_matrix.T @ ident.edit_matrix, torch.eye(ident.dim), atol=1e-3)


@pytest.fixture(scope="module")
def personal_wplus():
    from zoo import load

    _shipped()
    return load("personal", latent_space="wplus", device="cpu")


def test_demo_method_on_wplus_keeps_the_rest_of_the_face_and_inverts_exactly(personal_wplus):
    """The keyed transform edits only the identity code; the right key gives the original W+ back exactly,
    a wrong key does not."""
    m = personal_wplus
    assert m.resolution == 256 and m.wplus is not None
    g = m.wplus.generator
    with torch.no_grad():
        code = g.style(torch.randn(2, STYLE_DIM, generator=torch.Generator().manual_seed(5)), 0.8)[:, None].expand(-1, NUM_SLOTS, -1).contiguous()
        keys = m.face_keys(m.run_secret("right"), 2)
        u_anon = m.anonymized_code(m.identity_code(code), keys)
        anon = m.with_identity(code, u_anon, keys)
        back = m.with_identity(anon, m.recovered_code(u_anon, keys), keys, inverse=True)
        wrong_keys = [k.wrong_key() for k in keys]
        wrong = m.with_identity(anon, m.recovered_code(u_anon, wrong_keys), wrong_keys, inverse=True)
    assert torch.allclose(back, code, atol=1e-3)
    assert (wrong - code).abs().amax() > 0.5
    assert (u_anon - m.identity_code(code)).norm(dim=1).min() > 5.0  # |u| ~ 10: the identity moved far
    others = [s for s in range(NUM_SLOTS) if s not in DEVIATION_SLOTS + COARSE_SLOTS]
    assert torch.equal(anon[:, others], code[:, others])
    assert (anon[:, list(COARSE_SLOTS)] - code[:, list(COARSE_SLOTS)]).abs().amax() > 0.1  # the coarse slots hold identity too


def test_the_coarse_slots_take_the_codes_change_and_the_inverse_removes_it():
    """With a ``coarse_edit``, slots 0-1 move by coarse_edit (u_new - u); the inverse call with the original code
    gives W+ back exactly; ``coarse=False`` (a code written without it) leaves them alone."""
    base = _toy()
    coarse = torch.randn(STYLE_DIM, base.dim, generator=torch.Generator().manual_seed(8)) * 0.1
    ident = WPlusIdentity(base.code_matrix, base.edit_matrix, base.span, base.w_mean, coarse_edit=coarse)
    w = _wplus()
    u = ident.code(w)
    u_new = torch.randn_like(u)
    rot = _rotations(ident, w.shape[0], 2)
    edited = ident.with_code(w, u_new, *rot)
    assert torch.allclose(edited[:, list(COARSE_SLOTS)], w[:, list(COARSE_SLOTS)] + ((u_new - u) @ coarse.T)[:, None], atol=1e-5)
    assert torch.allclose(ident.with_code(edited, u, *rot, inverse=True), w, atol=1e-4)
    plain = ident.with_code(w, u_new, *rot, coarse=False)
    assert torch.equal(plain[:, list(COARSE_SLOTS)], w[:, list(COARSE_SLOTS)])
    with pytest.raises(ValueError, match="coarse_edit must be"):
        WPlusIdentity(base.code_matrix, base.edit_matrix, base.span, base.w_mean, coarse_edit=coarse[:, :3])


def test_the_codes_change_skips_the_mouth_directions_and_the_inverse_is_still_exact():
    """With ``mouth_directions`` H the drawn code is u + (I - H H^T)(u_new - u): nothing moves along H; the inverse
    call with the original code (which reads u from the edited W+ and projects again) gives W+ back exactly;
    ``mouth=False`` (a code written without them) sets u_new itself."""
    base = _toy()
    coarse = torch.randn(STYLE_DIM, base.dim, generator=torch.Generator().manual_seed(8)) * 0.1
    h = torch.linalg.qr(torch.randn(base.dim, 2, generator=torch.Generator().manual_seed(9)))[0]
    ident = WPlusIdentity(base.code_matrix, base.edit_matrix, base.span, base.w_mean, coarse_edit=coarse, mouth_directions=h)
    w = _wplus()
    u = ident.code(w)
    u_new = u + 3.0 * torch.randn_like(u)
    rot = _rotations(ident, w.shape[0], 2)
    edited = ident.with_code(w, u_new, *rot)
    drawn = ident.code(edited)
    assert torch.allclose(drawn @ h, u @ h, atol=1e-4)  # no change along H
    assert torch.allclose(drawn - drawn @ h @ h.T, u_new - u_new @ h @ h.T, atol=1e-4)  # u_new everywhere else
    assert (u_new @ h - u @ h).abs().amax() > 0.5
    assert torch.allclose(ident.with_code(edited, u, *rot, inverse=True), w, atol=1e-4)
    assert torch.allclose(ident.code(ident.with_code(w, u_new, *rot, mouth=False)), u_new, atol=1e-4)
    with pytest.raises(ValueError, match="orthonormal"):
        WPlusIdentity(base.code_matrix, base.edit_matrix, base.span, base.w_mean, mouth_directions=2.0 * h)


def test_leading_directions_are_the_signed_leading_singular_vectors_of_the_gradients():
    from zoo.nn.wplus_identity import leading_directions

    gen = torch.Generator().manual_seed(4)
    main = torch.zeros(10)
    main[3] = -1.0
    grads = torch.randn(12, 1, generator=gen) * 5.0 * main + 0.01 * torch.randn(12, 10, generator=gen)  # one direction dominates
    h = leading_directions(grads, 2)
    assert h.shape == (10, 2) and torch.allclose(h.T @ h, torch.eye(2), atol=1e-5)
    assert h[3, 0] > 0.99  # signed: the largest entry positive
    assert (h.gather(0, h.abs().argmax(0, keepdim=True)) > 0).all()


def test_carried_blocks_say_how_their_code_was_drawn():
    from zoo.nn.wplus_identity import carried_edit

    assert carried_edit(None) == {"deviation_slots": None, "coarse": True, "mouth": True}
    assert carried_edit({"latent": 0})["mouth"]
    assert carried_edit({"block_version": 8}) == {"deviation_slots": None, "coarse": True, "mouth": False}
    assert carried_edit({"block_version": 9})["mouth"] and not carried_edit({"block_version": 7})["coarse"]
    assert carried_edit({"block_version": 5})["deviation_slots"] == DEVIATION_SLOTS_V5


def test_shipped_mouth_directions_are_one_unit_direction_from_the_measured_gradients():
    """The shipped basis keeps one mouth direction out of the code's change: the leading direction of the gradients
    its config records (so it can be rebuilt), of unit length."""
    import json

    from zoo.nn.wplus_identity import identity_basis_dir, leading_directions

    ident = _shipped()
    h = ident.mouth_directions
    config = json.loads((identity_basis_dir() / "config.json").read_text())["mouth_directions"]
    assert h is not None and h.shape == (ident.dim, config["r"]) == (ident.dim, 1)
    grads = torch.tensor(config["gradients_per_unit"], dtype=torch.float64)
    assert grads.shape == (config["faces"], ident.dim)
    assert float((leading_directions(grads, 1).double().T @ h.double()).abs()) > 0.999
    assert abs(float(h.norm()) - 1.0) < 1e-4


def test_shipped_coarse_edit_has_no_component_along_the_pose_gradients_of_its_slots():
    """The shipped ``coarse_edit`` = U diag(sigma) (I - P P^T) Q: in whitened coordinates its columns are orthogonal
    to the three pose gradients measured in slots 0-1 (config.json), and it keeps most of the identity edit."""
    import json

    ident = _shipped()
    assert ident.coarse_edit is not None
    config = json.loads((identity_basis_dir() / "config.json").read_text())
    assert config["coarse_slots"] == list(COARSE_SLOTS)
    grad = torch.tensor([config["coarse_pose_gradient_deg_per_sigma"][str(i)] for i in range(ident.span.shape[1])], dtype=torch.float64)
    # whitened coordinates of the columns: diag(1/sigma) U^T coarse_edit, with sigma read off the edit matrix
    sigma = ((ident.span.T @ ident.edit_matrix).norm(dim=1) / (ident.span.T @ ident.code_matrix).norm(dim=1)).sqrt().double()
    white = (ident.span.T @ ident.coarse_edit).double() / sigma[:, None]
    q = (ident.span.T @ ident.edit_matrix).double() / sigma[:, None]
    pose = torch.linalg.qr(grad)[0]
    # measured 0.019 of the largest entry (the stored gradients are rounded to 0.01); Q itself (pose-free in slots
    # 4-12, not in slots 0-1) 0.37
    assert (pose.T @ white).abs().amax() < 0.05 * white.abs().amax()
    assert (pose.T @ q).abs().amax() > 0.2 * q.abs().amax()
    assert float(white.norm()) > 0.9 * float(q.norm())  # 3 of 103 directions removed


def test_demo_method_on_wplus_runs_on_faces_and_carries_the_identity_code(personal_wplus):
    m = personal_wplus
    g = m.wplus.generator
    with torch.no_grad():
        x = g.generate(torch.randn(1, STYLE_DIM, generator=torch.Generator().manual_seed(9)), 0.7, size=256).clamp(-1, 1)
        keys = m.face_keys(m.run_secret("k"), 1)
        y, carried = m.anonymize_faces_carrying(x, keys, refine_steps=0)
        u_anon, rows = carried["latent"], carried["code"]
        rec_latent = m.recover_faces(y, keys, refine_steps=0, carried=[u_anon[0].numpy()])
        rec = m.recover_faces(y, keys, refine_steps=0, carried=[{"latent": u_anon[0].numpy(), "code": rows[0].numpy()}])
        recon = m.reconstruct_faces(x, refine_steps=0)
    assert y.shape == x.shape == rec.shape == rec_latent.shape and u_anon.shape == (1, 100) and rows.shape == (1, 20, 512)
    assert torch.isfinite(y).all() and torch.isfinite(rec).all() and torch.isfinite(rec_latent).all()
    assert (y - x).abs().mean() > 0.02  # a different face
    # with the carried W+ rows, recovery is the reconstruction itself (no re-inversion of y)
    assert (rec - recon).abs().amax() < 1e-3 < (y - recon).abs().mean()


@pytest.mark.slow
def test_code_norm_draws_every_face_at_one_norm_and_the_carried_code_still_gives_the_input_back(personal_wplus, monkeypatch):
    """``wplus.code_norm`` R: the anonymized face is drawn with its identity code at norm R whatever the input's; the
    carrier holds the keyed code at the input's norm, so the right key gives the input back exactly; a re-inverted
    face is read at ``wplus.read_norm``."""
    m = personal_wplus
    import copy

    whole_code = copy.deepcopy(m.wplus.identity)
    whole_code.mouth_directions = None  # the edit sets the whole code (norms exact)
    monkeypatch.setattr(m.wplus, "identity", whole_code)
    monkeypatch.setattr(m, "config", {**m.config, "wplus": {**(m.config.get("wplus") or {}), "code_norm": 9.0, "read_norm": 4.5}})
    g = m.wplus.generator
    with torch.no_grad():
        w = g.style(torch.randn(2, STYLE_DIM, generator=torch.Generator().manual_seed(21)), 0.8)[:, None].expand(-1, NUM_SLOTS, -1).contiguous()
        u = m.identity_code(w)
        code = m.with_identity(w, u * torch.tensor([[0.4], [1.0]]) * 10.0 / u.norm(dim=1, keepdim=True))  # |u| 4 and 10
        x = m.decode(code).clamp(-1, 1)
        monkeypatch.setattr(m, "encode", lambda faces, fit=None: code)  # the inversion of x is the code it was drawn from
        keys = m.face_keys(m.run_secret("norm"), 2)
        u_anon, code_anon = m.keyed_codes(code, keys)
        y, carried = m.anonymize_faces_carrying(x, keys, refine_steps=0)
        rec = m.recover_faces(y, keys, refine_steps=0, carried=[{"latent": carried["latent"][i].numpy(), "code": carried["code"][i].numpy()} for i in range(2)])
        read = m.read_identity(m.identity_code(code_anon))
    assert torch.allclose(m.identity_code(code_anon).norm(dim=1), torch.tensor([9.0, 9.0]), atol=1e-3)
    assert torch.allclose(u_anon.norm(dim=1), torch.tensor([4.0, 10.0]), atol=1e-2)  # the rotation keeps the input's norm
    assert torch.allclose(carried["latent"], u_anon, atol=1e-4)
    assert (rec - m.decode(code)).abs().amax() < 1e-2 < (y - m.decode(code)).abs().mean()
    assert torch.allclose(read.norm(dim=1), torch.tensor([4.5, 4.5]), atol=1e-3)
    monkeypatch.setattr(m, "config", {**m.config, "wplus": {"code_norm": -1.0}})
    with pytest.raises(ValueError, match="code_norm"):
        m.drawn_identity(u_anon)


@pytest.mark.slow  # an option the shipped checkpoints leave off
def test_kept_pose_draws_the_face_at_the_input_yaw_and_carries_the_unturned_code(personal_wplus, t1_rgb):
    """``wplus.keep_pose``: the anonymized face is drawn turned back to the input's face-mesh yaw, which the identity
    edit had moved; the carried code, which the key undoes, is the same as without."""
    import numpy as np

    from zoo.alignment import align_face
    from zoo.detection import detect_faces
    from zoo.face3d.landmarks import angle_difference
    from zoo.imageio import from_tensor, to_tensor
    from zoo.inversion import mesh_poses

    m = personal_wplus
    shipped = m.config["wplus"].get("keep_pose", False)
    faces = detect_faces(t1_rgb)
    x = to_tensor(np.stack([align_face(t1_rgb, faces[i].landmarks, 256).crop for i in (1, 3)]))  # turned 38 and 24 degrees
    keys = m.face_keys(m.run_secret("pose"), 2)
    try:
        with torch.no_grad():
            m.config["wplus"]["keep_pose"] = False
            plain, carried_plain = m.anonymize_faces_carrying(x, keys, refine_steps=0)
            m.config["wplus"]["keep_pose"] = True
            kept, carried = m.anonymize_faces_carrying(x, keys, refine_steps=0)
    finally:
        m.config["wplus"]["keep_pose"] = shipped
    assert torch.equal(carried["code"], carried_plain["code"]) and torch.equal(carried["latent"], carried_plain["latent"])
    wanted = mesh_poses(list(from_tensor(x)))[:, 0]
    off_plain, off_kept = (np.abs(angle_difference(wanted, mesh_poses(list(from_tensor(y)))[:, 0])) for y in (plain, kept))
    print("yaw off the input (deg), plain / kept:", off_plain.round(2), off_kept.round(2))
    assert (off_kept <= off_plain + 0.5).all() and off_kept.mean() < 0.5 * off_plain.mean()  # measured 4.0, 5.9 -> 0.8, 2.2


def test_the_8px_block_deviations_rotate_with_the_key_and_the_pose_slots_do_not():
    assert DEVIATION_SLOTS == tuple(range(2, 19)) and set(DEVIATION_SLOTS_V5) < set(DEVIATION_SLOTS)
    ident = _toy()
    w = _wplus()
    edited = ident.with_code(w, torch.randn(w.shape[0], ident.dim), *_rotations(ident, w.shape[0], 6))
    assert torch.equal(edited[:, :2], w[:, :2]) and not torch.equal(edited[:, 2:4], w[:, 2:4])
    old = ident.with_code(w, torch.randn(w.shape[0], ident.dim), *_rotations(ident, w.shape[0], 6), deviation_slots=DEVIATION_SLOTS_V5)
    assert torch.equal(old[:, :4], w[:, :4])


def test_a_code_from_a_version_5_block_is_recovered_with_its_own_deviation_slots(personal_wplus):
    """Blocks of zoo.carrier version <= 5 hold codes whose deviations were rotated from slot 4: recovery undoes
    exactly those; read as a current block the same code comes back wrong in the 8 px slots."""
    m = personal_wplus
    g = m.wplus.generator
    gen = torch.Generator().manual_seed(12)
    with torch.no_grad():
        w = g.style(torch.randn(1, STYLE_DIM, generator=gen), 0.7)[:, None].expand(-1, NUM_SLOTS, -1)
        code = w + 0.3 * torch.randn(1, NUM_SLOTS, STYLE_DIM, generator=gen)  # an inverted real face has deviations
        keys = m.face_keys(m.run_secret("v5"), 1)
        u_anon = m.anonymized_code(m.identity_code(code), keys)
        anon = m.with_identity(code, u_anon, keys, deviation_slots=DEVIATION_SLOTS_V5, coarse=False, mouth=False)
        y = m.decode(anon)
        carried = {"latent": u_anon[0].numpy(), "code": m.wplus.carried_rows(anon)[0].numpy()}
        as_v5 = m.recover_faces(y, keys, refine_steps=0, carried=[{**carried, "block_version": 5}])
        as_v6 = m.recover_faces(y, keys, refine_steps=0, carried=[{**carried, "block_version": 6}])
        original = m.decode(code)
    assert (as_v5 - original).abs().amax() < 0.02
    assert (as_v6 - original).abs().mean() > 0.02


@pytest.mark.slow
def test_codes_of_older_blocks_are_recovered_with_the_edit_they_were_drawn_with(personal_wplus):
    """Blocks of zoo.carrier version <= 7 hold codes drawn with slots 0-1 as they were, version 8 with the code's
    change along the mouth directions too: recovery undoes exactly what each was drawn with (the inverse of the
    current edit reads the drawn code, whose change already skips the mouth directions, so only older codes need
    their own)."""
    m = personal_wplus
    assert m.wplus.identity.mouth_directions is not None  # the shipped basis has them
    g = m.wplus.generator
    gen = torch.Generator().manual_seed(13)
    with torch.no_grad():
        code = g.style(torch.randn(1, STYLE_DIM, generator=gen), 0.7)[:, None].expand(-1, NUM_SLOTS, -1).contiguous()
        keys = m.face_keys(m.run_secret("v7"), 1)
        u_anon = m.anonymized_code(m.identity_code(code), keys)
        original = m.decode(code)
        blocks, drawn = {}, {}
        for version, coarse, mouth in ((7, False, False), (8, True, False), (9, True, True)):
            anon = m.with_identity(code, u_anon, keys, coarse=coarse, mouth=mouth)
            blocks[version] = {"latent": u_anon[0].numpy(), "code": m.wplus.carried_rows(anon)[0].numpy(), "block_version": version}
            drawn[version] = m.decode(anon)
            back = m.recover_faces(drawn[version], keys, refine_steps=0, carried=[blocks[version]])
            assert (back - original).abs().amax() < 0.02, version
        # undoing the current edit on a version 8 code would leave its change along the mouth directions half undone
        v8_as_v9 = m.recover_faces(drawn[8], keys, refine_steps=0, carried=[{**blocks[8], "block_version": 9}])
        v9_as_v7 = m.recover_faces(drawn[9], keys, refine_steps=0, carried=[{**blocks[9], "block_version": 7}])
    assert (v8_as_v9 - original).abs().mean() > 0.002 and (v9_as_v7 - original).abs().mean() > 0.01


@pytest.mark.parametrize("name", ["dbaf", "hford", "ifadit", "personal"])
def test_shipped_reversible_methods_default_to_wplus(name, monkeypatch):
    from zoo import load

    monkeypatch.delenv("ZOO_LATENT_SPACE", raising=False)
    m = load(name, device="cpu")
    assert m.latent_space == "wplus" and m.resolution == 256
    assert "FFHQ-grade" in m.weights.label
    assert not {"generator", "encoder"} & set(m.components)  # the DCGAN tier's parts are not loaded on W+
    fast = load(name, device="cpu", latent_space="dcgan")
    assert fast.latent_space == "dcgan" and fast.resolution == 64 and fast.wplus is None
    assert {"generator", "encoder"} <= set(fast.components)


def test_wplus_code_norms_and_the_code_scale_that_the_right_key_undoes(monkeypatch):
    """Real faces' inversions have identity codes of norm about 4.5 (``benchmarks/results/code_norms_tuning.md``): the
    rotations of dbaf, hford and personal give the keyed (carried) code the input's norm, ifadit's flow about the
    prior's (10) whatever the input's. ``wplus.code_scale`` multiplies what is drawn; the right key undoes it exactly."""
    from zoo import load

    monkeypatch.delenv("ZOO_LATENT_SPACE", raising=False)
    u = torch.randn(16, 100, generator=torch.Generator().manual_seed(3))
    u = 4.6 * u / u.norm(dim=1, keepdim=True)
    for name in ("dbaf", "hford", "ifadit", "personal"):
        m = load(name, device="cpu")
        keys = m.face_keys(m.run_secret("norms"), len(u))
        with torch.no_grad():
            u_anon = m.anonymized_code(u, keys)
            ratio = float((u_anon.norm(dim=1) / u.norm(dim=1)).median())
            assert (ratio > 1.5) if name == "ifadit" else (0.98 < ratio < 1.02), (name, ratio)
            assert torch.allclose(m.recovered_code(u_anon, keys), u, atol=1e-3), name
            monkeypatch.setattr(m, "config", {**m.config, "wplus": {**(m.config.get("wplus") or {}), "code_scale": 0.5 * m.anonymized_code_scale}})
            halved = m.anonymized_code(u, keys)
            assert torch.allclose(halved, 0.5 * u_anon, atol=1e-5), name
            assert torch.allclose(m.recovered_code(halved, keys), u, atol=1e-3), name


def test_wplus_method_switched_to_dcgan_builds_its_backbone(monkeypatch, tmp_path):
    """A method loaded on W+ (no DCGAN parts) draws the same 64 px faces after switching to the DCGAN tier as one
    loaded there, from any working directory; saved on W+, the checkpoint keeps both tiers."""
    from zoo import load

    monkeypatch.delenv("ZOO_LATENT_SPACE", raising=False)
    monkeypatch.chdir(tmp_path)
    switched = load("dbaf", device="cpu").use_latent_space("dcgan")
    direct = load("dbaf", device="cpu", latent_space="dcgan")
    z = torch.randn(2, 100, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(switched.decode(z), direct.decode(z))
        x = direct.decode(z)
        assert torch.equal(switched.encode(x), direct.encode(x))
    load("dbaf", device="cpu").save_pretrained(tmp_path / "dbaf")
    again = load("dbaf", device="cpu", local_dir=str(tmp_path / "dbaf"))
    assert not {"generator", "encoder"} & set(again.components)
    assert {"generator", "encoder"} <= {p.name for p in again.checkpoint_folder.iterdir()}
    with torch.no_grad():
        assert torch.equal(again.use_latent_space("dcgan").decode(z), direct.decode(z))


@pytest.mark.slow
def test_default_wplus_anonymizes_a_real_photo_and_recovers_it(astronaut_rgb, monkeypatch):
    """The default path end to end on a real portrait: the face is replaced or, where the guard still finds the
    person, blurred (never returned untouched); the report lists it; the right key's recovery from the saved PNG
    starts from the carried code and gives the person back (SFace), a wrong key does not."""
    import io

    import numpy as np

    from zoo import load

    monkeypatch.delenv("ZOO_LATENT_SPACE", raising=False)
    m = load("personal", device="cpu")
    result = m.anonymize(astronaut_rgb, key="a key")
    report = result.report()
    assert report["faces_found"] == 1
    face = report["faces"][0]
    assert face["status"] in ("processed", "guard_blur")
    assert face["status"] == "guard_blur" or face["latent_carried"]
    x0, y0, x1, y1 = (int(round(v)) for v in face["box"])
    out = np.asarray(result)
    assert np.abs(out[y0:y1, x0:x1].astype(int) - astronaut_rgb[y0:y1, x0:x1]).mean() > 5
    buf = io.BytesIO()
    result.image.save(buf, format="PNG")
    recovered = m.recover(buf.getvalue(), key="a key")
    rec = np.asarray(recovered)
    assert rec.shape == astronaut_rgb.shape
    if face["latent_carried"]:
        from zoo.detectors import DetectedFace
        from zoo.judges import get_judge

        assert recovered.report()["faces"][0]["latent_carried"]
        wrong = np.asarray(m.recover(buf.getvalue(), key="another key"))
        sface = get_judge("sface")
        place = [DetectedFace(np.array(face["box"]), np.array(face["landmarks"]), 1.0, "report")]
        original = sface.embed_photo_faces(astronaut_rgb, place)
        line = sface.distance_threshold  # SFace's published line (cosine 0.363)
        assert sface.distance(original, sface.embed_photo_faces(rec, place))[0] < line
        assert sface.distance(original, sface.embed_photo_faces(wrong, place))[0] > line


def test_the_wplus_space_takes_its_pose_angles_from_the_config_and_the_face_term_per_call(monkeypatch):
    """``wplus.pose_angles``: which angles the inversion turns the encoder's start to (default yaw only); anything
    but yaw and pitch is refused with a one-line error. The face-region term's weight reaches the inversion per call
    (0 unless asked for)."""
    import zoo.inversion as inv
    from zoo.methods.wplus_latents import WPlusLatents

    with pytest.raises(ValueError, match="pose_angles"):
        WPlusLatents(("yaw", "roll"))
    seen = []

    def fake_invert(x, steps, *, generator=None, identity_weight=0.0, face_weight=1.0, pose_angles=("yaw",)):
        seen.append((pose_angles, face_weight))
        return inv.InversionResult(torch.zeros(x.shape[0], NUM_SLOTS, STYLE_DIM), x, [], 0.0)

    monkeypatch.setattr(inv, "invert_wplus", fake_invert)
    space = WPlusLatents.__new__(WPlusLatents)  # no generator needed for the calls below
    space.generator_on, space.pose_angles = (lambda device: None), ("yaw", "pitch")
    space.encode(torch.zeros(1, 3, 256, 256), steps=2, face_weight=0.5)
    space.encode(torch.zeros(1, 3, 256, 256), steps=2)
    assert seen == [(("yaw", "pitch"), 0.5), (("yaw", "pitch"), 0.0)] and inv.DEFAULT_POSE_ANGLES == ("yaw",)


def test_the_face_fit_control_reaches_the_inversion_and_keys_the_code_cache(monkeypatch):
    """``face_fit`` (a W+ method's control, default 3) is the face-region weight of the original face's fit; faces fitted
    with another weight are not taken from the call's code cache."""
    import zoo
    from zoo.methods.fit_controls import InversionFit
    from zoo.methods.latent_demo import FACE_FIT_CONTROL, FIT_CONTROLS, LatentDemoMethod
    from zoo.methods.wplus_latents import WPlusLatents

    assert FACE_FIT_CONTROL in FIT_CONTROLS and FACE_FIT_CONTROL.default == 3.0
    method = zoo.load("dbaf").use_latent_space("wplus")
    assert "face_fit" in {c.name for c in method.controls}
    weights = []
    real = WPlusLatents.encode

    def recording(self, x, steps=0, identity_weight=0.0, face_weight=0.0):
        weights.append(face_weight)
        return real(self, x, 0, identity_weight, face_weight)  # no refinement: only what reaches it matters here

    monkeypatch.setattr(WPlusLatents, "encode", recording)
    x = torch.zeros(1, 3, 256, 256)
    with method.run_scope():
        method.encode_cached(x, InversionFit(2, face_fit=3.0))
        method.encode_cached(x, InversionFit(2, face_fit=3.0))  # cached
        method.encode_cached(x, InversionFit(2))  # another fit: inverted again
    assert weights == [3.0, 0.0]
    assert LatentDemoMethod._code_rows(x, InversionFit(2, face_fit=3.0)) != LatentDemoMethod._code_rows(x, InversionFit(2))
    dcgan = zoo.load("dbaf").use_latent_space("dcgan")
    dcgan.encode(torch.zeros(1, 3, 64, 64), InversionFit(face_fit=FACE_FIT_CONTROL.default))  # the default passes (no face term there)
    with pytest.raises(ValueError, match="W\\+ tier only"):
        dcgan.encode(torch.zeros(1, 3, 64, 64), InversionFit(face_fit=5.0))


@pytest.mark.parametrize("name", ["dbaf", "hford", "ifadit", "personal"])
def test_demo_recipe_ships_the_bundled_tier(name):
    """The recipe's `bundle` block (training.bundle applies it) sets what the bundled checkpoint runs with: a bundle
    made from the recipe runs on the same tier as the one shipped."""
    import json
    from pathlib import Path

    from training.train import load_config

    root = Path(__file__).resolve().parents[1]
    cfg = load_config(str(root / "training" / "configs" / f"{name}_demo.yaml"))
    shipped = json.loads((root / "zoo" / "weights" / name / "method.json").read_text())["config"]
    assert "bundle" not in shipped
    for key, value in cfg["bundle"].items():
        assert shipped[key] == value, key
