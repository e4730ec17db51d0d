"""benchmarks/recovery_chain.py: each link measured against a known answer on tiny random models."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from test_dbaf_hford import build as build_stylegan
from test_ifadit import tiny_config as ifadit_tiny_config
from torch import nn

from zoo.keys import Secret
from zoo.methods.dbaf import DBAF
from zoo.methods.hford import HFORD
from zoo.methods.ifadit import IFADIT

pytestmark = pytest.mark.usefixtures("one_thread")

_spec = importlib.util.spec_from_file_location("recovery_chain", Path(__file__).resolve().parents[1] / "benchmarks" / "recovery_chain.py")
chain = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(chain)


def _faces(n: int, res: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, res, res, generator=g) * 2 - 1
    return torch.nn.functional.avg_pool2d(x, 3, 1, 1)


class _KeyReflection(nn.Module):
    """An exact involution of the identity code: edit(I, P) = P - I, so edit(edit(I, P), P) = I."""

    def forward(self, identity: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        return key - identity


class _NoEdit(nn.Module):
    """edit(I, P) = I: anonymization leaves the code unchanged."""

    def forward(self, identity: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        return identity


def _keys(method, secret: str, n: int):
    return method.face_keys(Secret(secret), n)


@pytest.mark.parametrize("cls", [DBAF, HFORD], ids=["dbaf", "hford"])
def test_stylegan_chain_matches_the_method_and_known_edits(cls):
    m = build_stylegan(cls, seed=3)
    x = _faces(3, m.resolution, seed=1)
    ks, kw = _keys(m, "right", 3), _keys(m, "wrong", 3)

    # the chain's anonymized and recovered rows are exactly what the method returns for a saved file
    _, images = chain.stylegan_chain(m, x, ks, kw)
    with torch.no_grad():
        y = chain.as_saved_file(m.anonymize_faces(x, ks))
        torch.testing.assert_close(images["anonymized"], y)
        torch.testing.assert_close(images["recovered"], m.recover_faces(y, ks), atol=1e-5, rtol=0)
        torch.testing.assert_close(images["wrong_key"], m.recover_faces(y, kw), atol=1e-5, rtol=0)

    # an exactly self-inverse edit: the right key undoes it, a wrong key does not, and the exact split
    # recovers the reconstruction itself (A + I = C)
    m.components[cls.editor_name] = _KeyReflection()
    metrics, images = chain.stylegan_chain(m, x, ks, kw)
    assert metrics["edit_inverse_error"] < 1e-5
    assert metrics["edit_wrong_key_error"] > 0.1
    torch.testing.assert_close(images["recovered_with_exact_split"], images["reconstruction"], atol=1e-5, rtol=0)
    with torch.no_grad():
        p = m.decompose(x)
        c_an = p["attr"] + m.key_latents(ks) - p["identity"]
    assert metrics["code_change"] == pytest.approx(chain.relative_error(c_an, p["codes"]), rel=1e-5)

    # no edit: the anonymized code is C itself, so the split cannot drift and re-encoding is E(G(C)) vs C
    m.components[cls.editor_name] = _NoEdit()
    metrics, _ = chain.stylegan_chain(m, x, ks, kw)
    assert metrics["code_change"] < 1e-5  # A + (C - A) = C up to float rounding
    assert metrics["attribute_split_drift"] < 1e-6
    assert metrics["edit_inverse_error"] < 1e-6
    with torch.no_grad():
        p = m.decompose(x)
        again = m.decompose(chain.as_saved_file(m.synthesize(p["codes"], p["maps"])))["codes"]
    assert metrics["reencoding_error"] == pytest.approx(chain.relative_error(again, p["codes"]), rel=1e-5)


def test_ifadit_chain_matches_the_method_and_the_exact_inverse():
    torch.manual_seed(0)
    m = IFADIT.from_config(ifadit_tiny_config()).to("cpu")
    for comp in m.components.values():
        comp.eval()
    x = _faces(4, m.resolution, seed=2)
    ks, kw = _keys(m, "right", 4), _keys(m, "wrong", 4)
    metrics, images = chain.ifadit_chain(m, x, ks, kw)

    assert metrics["flow_inverse_right"] == pytest.approx(1.0, abs=1e-5)  # the SIF inverts exactly
    assert metrics["flow_inverse_wrong"] < 0.999  # and only with its own key
    with torch.no_grad():
        y = chain.as_saved_file(m.anonymize_faces(x, ks))
        torch.testing.assert_close(images["anonymized"], y)
        torch.testing.assert_close(images["recovered"], m.recover_faces(y, ks), atol=1e-5, rtol=0)
        # a perfect ICL would hand T^-1 the exact z_anon, i.e. the original identity z
        exact = m.refine(m.synthesize(m.identity(x), m.attributes(y)), y).clamp(-1, 1)
    torch.testing.assert_close(images["recovered_from_exact_latent"], exact, atol=1e-4, rtol=0)
    assert metrics["latent_recovery_right"] < metrics["flow_inverse_right"]  # the random ICL is not exact


def test_unknown_method_is_a_clear_error():
    with pytest.raises(ValueError, match="recovery chain is defined for"):
        chain.run("blur", "nowhere")
