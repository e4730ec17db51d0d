"""Keys: secret -> PBKDF2 -> HKDF-expand -> per-method, per-face key material."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from zoo.keys import KeyMaterial, Secret, as_secret, new_secret

REPO = Path(__file__).resolve().parents[1]


def _hkdf_expand(prk: bytes, info: bytes, n: int) -> bytes:
    """RFC 5869 HKDF-Expand, written out independently of zoo.keys."""
    out, t, i = b"", b"", 1
    while len(out) < n:
        t = hmac.new(prk, t + info + bytes([i]), hashlib.sha256).digest()
        out, i = out + t, i + 1
    return out[:n]


def test_kdf_is_the_documented_standard_construction():
    s = Secret("correct horse battery staple")
    master = hashlib.pbkdf2_hmac("sha256", b"correct horse battery staple", b"face-deid-zoo/kdf/v1", 100_000, dklen=32)
    assert s.fingerprint == "k:" + _hkdf_expand(master, b"fingerprint", 4).hex()
    km = s.derive("dbaf", 2)
    assert km.seed == _hkdf_expand(master, b"dbaf|key|face2", 32)


_CHILD = """
import json, sys
from zoo.keys import Secret
km = Secret("same secret").derive("ifadit", 1)
print(json.dumps({{"fp": km.fingerprint, "u": km.uniform(16).tolist(), "n": km.normal(16).tolist(),
                  "d": km.digits(6), "g": __import__("torch").randn(4, generator=km.generator()).tolist()}}))
"""


@pytest.mark.slow  # 4 s: a new process
def test_same_secret_same_vectors_in_a_fresh_process():
    km = Secret("same secret").derive("ifadit", 1)
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # a different hash seed must not matter
    out = subprocess.run([sys.executable, "-c", _CHILD.format(repo=str(REPO))], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    child = json.loads(out.stdout)
    assert child["fp"] == km.fingerprint
    assert child["u"] == km.uniform(16).tolist()
    assert child["n"] == km.normal(16).tolist()
    assert child["d"] == km.digits(6)
    assert child["g"] == torch.randn(4, generator=km.generator()).tolist()


def test_different_secrets_faces_methods_purposes_differ():
    a, b = Secret("alice"), Secret("bob")
    base = a.derive("dbaf", 0).uniform(64)
    assert not torch.equal(base, b.derive("dbaf", 0).uniform(64))  # secret
    assert not torch.equal(base, a.derive("dbaf", 1).uniform(64))  # face
    assert not torch.equal(base, a.derive("hford", 0).uniform(64))  # method
    assert not torch.equal(base, a.derive("dbaf", 0, purpose="ref").uniform(64))  # purpose
    assert not torch.equal(base, a.derive("dbaf", 0).uniform(64, context="other"))  # context
    assert a.fingerprint != b.fingerprint
    assert torch.equal(base, Secret("alice").derive("dbaf", 0).uniform(64))


def test_fingerprint_and_repr_never_show_the_secret():
    secret = "my very private passphrase"
    s = Secret(secret)
    km = s.derive("personal", 0)
    for text in (s.fingerprint, repr(s), str(s), repr(km), km.label):
        assert secret not in text and "private" not in text
    assert s.fingerprint.startswith("k:") and len(s.fingerprint) == 10
    assert not any(secret in str(getattr(s, attr, "")) for attr in dir(s) if not attr.startswith("__"))
    # bytes and str secrets with the same content are the same key
    assert Secret(secret.encode()).fingerprint == s.fingerprint
    assert as_secret(s) is s and as_secret(None) is None and as_secret(secret).fingerprint == s.fingerprint


def test_empty_secret_is_refused():
    with pytest.raises(ValueError, match="empty"):
        Secret("")
    with pytest.raises(ValueError, match="empty"):
        Secret(" \n\t")


def test_key_text_is_one_rule_for_the_api_the_cli_and_the_app(tmp_path, monkeypatch):
    """A key typed with a stray space in the app, passed to --key, read from a file with its final
    newline or set in ZOO_KEY is the same key; inner whitespace and case still matter."""
    import argparse

    from zoo import cli
    from zoo.keys import key_text

    fp = Secret("my key").fingerprint
    assert Secret("  my key \n").fingerprint == Secret(b"my key\r\n").fingerprint == fp
    assert Secret("my  key").fingerprint != fp and Secret("My key").fingerprint != fp
    assert key_text(b"\xff\xfe\n") == b"\xff\xfe\n"  # a binary key file is kept as it is
    assert key_text(None) == key_text("  ") == ""  # an empty form field
    (tmp_path / "key.txt").write_bytes(b"my key\r\n")
    monkeypatch.delenv("ZOO_KEY", raising=False)
    seen = []
    for kw in ({"key": " my key ", "key_file": None}, {"key": None, "key_file": str(tmp_path / "key.txt")}):
        secret, _ = cli.read_key(argparse.Namespace(**kw))
        seen.append(Secret(secret).fingerprint)
    monkeypatch.setenv("ZOO_KEY", "my key\n")
    seen.append(Secret(cli.read_key(argparse.Namespace(key=None, key_file=None))[0]).fingerprint)
    space_app = pytest.importorskip("space_app")
    seen.append(Secret(space_app.key_or_error("\tmy key  ")).fingerprint)
    assert seen == [fp] * 4
    with pytest.raises(cli.CLIError, match="empty"):
        cli.read_key(argparse.Namespace(key="   ", key_file=None))


def test_uniform_vectors_fill_the_range_evenly():
    km = Secret("uniform").derive("ifadit", 0)
    u = km.uniform(4096).numpy()
    assert u.dtype == np.float32 and u.shape == (4096,)
    assert u.min() >= -1.0 and u.max() < 1.0
    hist, _ = np.histogram(u, bins=8, range=(-1, 1))
    assert np.all(np.abs(hist / 4096 - 1 / 8) < 0.03)
    v = km.uniform(1000, low=2.0, high=5.0).numpy()
    assert v.min() >= 2.0 and v.max() < 5.0 and abs(v.mean() - 3.5) < 0.15


def test_normal_vectors_have_zero_mean_unit_std():
    for i in range(3):
        z = Secret(f"normal {i}").derive("personal", i).normal(4096).numpy()
        assert z.shape == (4096,) and np.isfinite(z).all()
        assert abs(z.mean()) < 0.06 and abs(z.std() - 1.0) < 0.05
    odd = Secret("odd").derive("x").normal(7)
    assert odd.shape == (7,)


def test_digits_have_the_requested_length():
    lengths = set()
    secret = Secret("digits")
    for i in range(200):
        d = secret.derive("personal", i).digits(6)
        assert len(d) == 6 and d.isdigit()
        lengths.add(d[0])
    assert len(lengths) >= 8  # leading digits vary (a leading zero is kept by zfill)
    assert len(KeyMaterial(b"\x00" * 32).digits(12)) == 12


def test_generator_is_keyed():
    a = Secret("gen").derive("noise", 0)
    b = Secret("gen").derive("noise", 1)
    x1 = torch.randn(100, generator=a.generator("noise"))
    x2 = torch.randn(100, generator=a.generator("noise"))
    x3 = torch.randn(100, generator=b.generator("noise"))
    assert torch.equal(x1, x2) and not torch.equal(x1, x3)


def test_new_secret_is_random_and_long_enough():
    secrets = {new_secret() for _ in range(50)}
    assert len(secrets) == 50
    assert all(len(s) >= 20 for s in secrets)  # 16 bytes of entropy, URL-safe base64


def test_a_keyless_run_uses_a_random_secret_without_stretching_it(monkeypatch, t1_rgb):
    """key=None: a fresh 32-byte random master key (no PBKDF2: it adds nothing to 256 random bits), a
    new one per call, so two keyless runs give different noise."""
    import zoo
    from zoo import keys as K

    a, b = Secret.random(), Secret.random()
    assert a.derive("noise").seed != b.derive("noise").seed and a.fingerprint.startswith("k:")

    def no_kdf(*args, **kwargs):
        raise AssertionError("PBKDF2 ran for a random secret")

    monkeypatch.setattr(K.hashlib, "pbkdf2_hmac", no_kdf)
    m = zoo.load("noise", device="cpu")
    one, two = (np.asarray(m.anonymize(t1_rgb)) for _ in range(2))
    assert not np.array_equal(one, two)
    with pytest.raises(AssertionError, match="PBKDF2"):
        Secret("a human key")  # a given key is still stretched


def test_carrier_stream_depends_on_key_variant_and_part():
    """The keystream that seals a carried code: any length (past HKDF's 8160 bytes per info string), a prefix of a
    longer one, and different for another key, variant or part."""
    key = Secret("stream test").derive("dbaf", 0)
    long = key.carrier_stream(20000, 1, "code")
    assert len(long) == 20000 and long[:100] == key.carrier_stream(100, 1, "code")
    assert long[8160:8260] != long[:100] and long[16320:16420] != long[8160:8260]  # chunks differ
    others = [
        key.carrier_stream(100, 2, "code"),
        key.carrier_stream(100, 1, "latent"),
        Secret("stream test").derive("dbaf", 1).carrier_stream(100, 1, "code"),
        Secret("other").derive("dbaf", 0).carrier_stream(100, 1, "code"),
    ]
    assert len({long[:100], *others}) == 5
