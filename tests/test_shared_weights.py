"""zoo.hub's shared networks: a network several bundled checkpoints use is stored once and referenced."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from zoo import hub
from zoo.nn.dcgan import InversionEncoder

WEIGHTS = Path(hub.__file__).resolve().parent / "weights"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_bundled_network_is_stored_once():
    files = sorted(WEIGHTS.rglob("*.safetensors"))
    assert files
    by_digest: dict[str, list[str]] = {}
    for f in files:
        by_digest.setdefault(_digest(f), []).append(f.relative_to(WEIGHTS).as_posix())
    assert [v for v in by_digest.values() if len(v) > 1] == []


def test_bundled_demo_checkpoints_refer_to_the_shared_encoder():
    for method in ("dbaf", "hford", "ifadit", "personal"):
        folder = WEIGHTS / method
        assert json.loads((folder / "encoder" / "config.json").read_text()) == {"shared": "dcgan_encoder"}
        assert hub.component_dir(folder, "encoder") == hub.SHARED_DIR / "dcgan_encoder"
        rels = [rel for rel, _ in hub.checkpoint_files(folder)]
        assert "encoder/model.safetensors" in rels and "encoder/config.json" in rels  # a pushed copy is self-contained


def _checkpoint(tmp_path: Path, encoder: InversionEncoder) -> Path:
    folder = tmp_path / "ckpt"
    hub.save_components(folder, "toy", {"encoder": encoder})
    return folder


def test_link_shared_replaces_an_identical_network_and_loading_follows_it(tmp_path, monkeypatch):
    torch.manual_seed(0)
    enc = InversionEncoder(latent_dim=8, channels=[4, 4, 4, 4, 4])
    shared = tmp_path / "shared"
    enc.save_pretrained(shared / "tiny_encoder")
    monkeypatch.setattr(hub, "SHARED_DIR", shared)
    folder = _checkpoint(tmp_path, enc)
    assert hub.link_shared(folder) == ["encoder"]
    assert not (folder / "encoder" / "model.safetensors").exists()
    _, comps, _ = hub.load_components(folder)
    for a, b in zip(comps["encoder"].state_dict().values(), enc.state_dict().values()):
        assert torch.equal(a, b)
    # a self-contained copy (what a Hub repo gets) loads without the shared folder
    copy = tmp_path / "copy"
    for rel, path in hub.checkpoint_files(folder):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, copy / rel)
    monkeypatch.setattr(hub, "SHARED_DIR", tmp_path / "nowhere")
    _, comps, _ = hub.load_components(copy)
    assert torch.equal(next(iter(comps["encoder"].state_dict().values())), next(iter(enc.state_dict().values())))


def test_link_shared_keeps_a_network_that_differs(tmp_path, monkeypatch):
    torch.manual_seed(0)
    enc = InversionEncoder(latent_dim=8, channels=[4, 4, 4, 4, 4])
    other = InversionEncoder(latent_dim=8, channels=[4, 4, 4, 4, 4])
    shared = tmp_path / "shared"
    other.save_pretrained(shared / "tiny_encoder")
    monkeypatch.setattr(hub, "SHARED_DIR", shared)
    folder = _checkpoint(tmp_path, enc)
    assert hub.link_shared(folder) == []
    assert (folder / "encoder" / "model.safetensors").is_file()


def test_a_missing_or_odd_shared_reference_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(hub, "SHARED_DIR", tmp_path / "shared")
    folder = tmp_path / "ckpt"
    (folder / "encoder").mkdir(parents=True)
    (folder / "method.json").write_text(json.dumps({"method": "toy", "config": {}, "components": {"encoder": "zoo.nn.dcgan.InversionEncoder"}}))
    (folder / "encoder" / "config.json").write_text(json.dumps({"shared": "absent"}))
    with pytest.raises(hub.WeightsNotFoundError, match="shared network 'absent'"):
        hub.load_components(folder)
    (folder / "encoder" / "config.json").write_text(json.dumps({"shared": "../../etc"}))
    with pytest.raises(ValueError, match="plain name"):
        hub.load_components(folder)
