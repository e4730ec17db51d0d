"""`python -m zoo`: end to end on a folder of real photos, bad inputs, keys, list/info."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from zoo.cli import expand_inputs, main
from zoo.keys import Secret

REPO = Path(__file__).resolve().parents[1]
SECRET = "cli test secret 42"


@pytest.fixture
def photos(tmp_path, t1_path, astronaut_rgb) -> Path:
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    shutil.copy(t1_path, folder / "group.jpg")
    Image.fromarray(astronaut_rgb).save(folder / "sub" / "portrait.png")
    return folder


def _run(*args, env_extra=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "zoo", *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)


@pytest.mark.slow
def test_anonymize_a_folder_end_to_end(photos, tmp_path):
    out = tmp_path / "out"
    key_file = tmp_path / "my.key"
    key_file.write_text(SECRET + "\n")
    proc = _run("anonymize", str(photos), "--method", "blur,noise", "--key-file", str(key_file), "--out", str(out), "-c", "strength=0.8")
    assert proc.returncode == 0, proc.stderr
    assert "4 of 4 file(s) written" in proc.stderr
    expected = {
        "group__blur.png",
        "group__blur.json",
        "group__noise.png",
        "group__noise.json",
        "sub/portrait__blur.png",
        "sub/portrait__blur.json",
        "sub/portrait__noise.png",
        "sub/portrait__noise.json",
    }
    assert {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} == expected
    fingerprint = Secret(SECRET).fingerprint
    for stem, n_faces, size in (("group", 6, (1280, 886)), ("sub/portrait", 1, (512, 512))):
        for method in ("blur", "noise"):
            report_text = (out / f"{stem}__{method}.json").read_text()
            assert SECRET not in report_text and "secret" not in report_text
            report = json.loads(report_text)
            assert report["method"] == method and report["faces_found"] == n_faces == len(report["faces"])
            assert report["fallbacks"] == [] and report["controls"] == {"strength": 0.8, "shape": "ellipse", "mask_scale": 1.3}
            # noise draws its noise from the key; blur ignores the key, so it reports no fingerprint
            assert report["key_fingerprint"] == (fingerprint if method == "noise" else None) and report["key_source"] == "--key-file"
            assert all(len(f["box"]) == 4 for f in report["faces"])
            with Image.open(out / f"{stem}__{method}.png") as im:
                assert im.size == size == tuple(report["image_size"])
    # the same key from --key gives the same keyed result (the key file's trailing newline is dropped)
    out2 = tmp_path / "out2"
    assert main(["anonymize", str(photos / "group.jpg"), "-m", "noise", "--key", SECRET, "--out", str(out2), "-c", "strength=0.8", "-q"]) == 0
    assert np.array_equal(np.asarray(Image.open(out2 / "group__noise.png")), np.asarray(Image.open(out / "group__noise.png")))


def test_bad_files_are_reported_and_the_rest_still_processed(photos, tmp_path, capsys):
    (photos / "broken.png").write_text("not an image")
    (photos / "tiny.png").write_bytes(b"")
    out = tmp_path / "out"
    rc = main(["anonymize", str(photos), "--method", "mask", "--out", str(out), "-q"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "2 of 4 file(s) written" in err and "2 failure(s)" in err
    assert "broken.png" in err and "not a readable image" in err and "tiny.png" in err
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert "group__mask.png" in files and "sub/portrait__mask.png" in files
    assert not any("broken" in f or "tiny" in f for f in files)  # nothing for the bad inputs
    assert not any(Path(f).name.startswith(".") or f.endswith(".tmp") for f in files)  # no temp leftovers
    report = json.loads((out / "group__mask.json").read_text())
    assert report["key_fingerprint"] is None and report["key_source"].startswith("none")


def test_globs_controls_and_usage_errors(photos, tmp_path, capsys):
    found = expand_inputs([str(photos / "*.jpg"), str(photos / "sub")])
    assert [p.name for p, _ in found] == ["group.jpg", "portrait.png"]
    assert main(["anonymize", str(photos / "*.nothing"), "-m", "blur", "--out", str(tmp_path / "o")]) == 2
    assert "no files match" in capsys.readouterr().err
    assert main(["anonymize", str(photos), "-m", "blur", "-c", "strength", "--out", str(tmp_path / "o")]) == 2
    assert "name=value" in capsys.readouterr().err
    assert main(["anonymize", str(photos), "--out", str(tmp_path / "o")]) == 2
    assert "--method" in capsys.readouterr().err
    assert main(["anonymize", str(photos), "-m", "blur", "--detector", "nope", "--out", str(tmp_path / "o")]) == 2
    assert "unknown face detector" in capsys.readouterr().err
    assert main(["anonymize", str(photos), "-m", "blur", "--min-face-score", "1.5", "--out", str(tmp_path / "o")]) == 2
    assert "--min-face-score must be between 0 and 1" in capsys.readouterr().err
    # a control out of range fails every image, with the reason
    assert main(["anonymize", str(photos / "group.jpg"), "-m", "blur", "-c", "strength=3", "-q", "--out", str(tmp_path / "o")]) == 1
    assert "above its maximum" in capsys.readouterr().err
    # recover needs a key and a reversible method
    assert main(["recover", str(photos / "group.jpg"), "-m", "blur", "--out", str(tmp_path / "o")]) == 2
    assert "needs the key" in capsys.readouterr().err
    assert main(["recover", str(photos / "group.jpg"), "-m", "blur", "--key", "k", "-q", "--out", str(tmp_path / "o")]) == 1
    assert "not reversible" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").rglob("*.png"))


def test_aligned_crops_and_detector_choice(tmp_path, t1_rgb, t1_faces, capsys):
    from zoo.alignment import align_face

    folder = tmp_path / "crops"
    folder.mkdir()
    for i, f in enumerate(t1_faces[:2]):
        Image.fromarray(align_face(t1_rgb, f.landmarks, 256).crop).save(folder / f"face{i}.png")
    out = tmp_path / "out"
    assert main(["anonymize", str(folder), "-m", "pixelate", "--aligned", "--out", str(out), "-q"]) == 0
    report = json.loads((out / "face0__pixelate.json").read_text())
    assert report["aligned_input"] is True and report["faces_found"] == 1 and report["detector"] is None
    assert main(["anonymize", str(folder / "face1.png"), "-m", "blur", "--detector", "yunet", "--out", str(out), "-q"]) == 0
    assert json.loads((out / "face1__blur.json").read_text())["detector"] == "yunet"
    # a lower detector threshold finds at least the faces the default finds, each with its score
    full = tmp_path / "full.png"
    Image.fromarray(t1_rgb).save(full)
    assert main(["anonymize", str(full), "-m", "blur", "--min-face-score", "0.3", "--out", str(out), "-q"]) == 0
    low = json.loads((out / "full__blur.json").read_text())
    assert low["faces_found"] >= len(t1_faces) and all(f["score"] >= 0.3 for f in low["faces"])


def test_list_and_info(capsys):
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    for name in ("blur", "pixelate", "noise", "mask"):
        assert any(line.startswith(name + " ") for line in text.splitlines())
    assert "strength=1.0 [0.0..1.0]" in text and "mask_scale=1.3 [1.0..3.0]" in text
    personal = text[text.index("\npersonal: ") :]
    assert personal.index("tier: FFHQ-grade W+") < personal.index("  generated: ") < personal.index("  dcgan_tier:\n")
    assert main(["list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["blur"]["weights"] == "none needed" and rows["blur"]["reversible"] == "no"
    # the bundled demo checkpoints are listed as such, with their label and stored evaluation
    assert rows["personal"]["weights"] == "demo (bundled)" and rows["personal"]["weights_label"].startswith("demo:")
    assert rows["personal"]["resolution"] == "256" and "refine_steps" in rows["personal"]["controls"]  # the W+ tier
    evaluation = rows["personal"]["evaluation"]  # the default (W+) tier's numbers first, the 64 px tier's beside them
    assert evaluation["tier"].startswith("FFHQ-grade W+") and evaluation["generated"]["anonymized_same_person"]["n"] >= 100
    assert evaluation["real_held_out"]["recovery_same_person"]["n"] >= 40
    assert evaluation["dcgan_tier"]["generated"]["anonymized_same_person"]["n"] >= 200
    assert main(["info", "pixelate"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["name"] == "pixelate" and info["controls"]["strength"]["default"] == 1.0
    assert main(["info", "nope"]) == 2
    assert "unknown method" in capsys.readouterr().err


@pytest.mark.slow  # end to end through every method or a subprocess (CI runs it with -m slow)
def test_secret_is_stretched_once_per_run_and_keyless_methods_get_no_fingerprint(photos, tmp_path, monkeypatch):
    import hashlib

    import zoo.keys

    calls = []
    real = hashlib.pbkdf2_hmac

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(zoo.keys.hashlib, "pbkdf2_hmac", counting)
    out = tmp_path / "out"
    assert main(["anonymize", str(photos), "--method", "blur,noise,personal", "--key", "a long secret", "--out", str(out), "-q"]) == 0
    reports = [json.loads(p.read_text()) for p in out.rglob("*.json")]
    assert len(reports) >= 6 and len(calls) == 1  # several images x three methods, one PBKDF2 run
    by_method = {}
    for r in reports:
        by_method.setdefault(r["method"], set()).add(r["key_fingerprint"])
    assert by_method["blur"] == {None}  # blur ignores the key: no fingerprint
    assert by_method["noise"] == by_method["personal"] == {Secret("a long secret").fingerprint}


@pytest.mark.slow  # end to end through every method or a subprocess (CI runs it with -m slow)
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_sigterm_and_ctrl_c_leave_no_temporary_file(photos, tmp_path, signame):
    import signal
    import time

    sig = getattr(signal, signame)

    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "zoo", "anonymize", str(photos), str(photos), "--method", "personal,blur,noise", "--key", "k", "--out", str(out), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    deadline = time.time() + 120
    while time.time() < deadline and not list(out.rglob("*.png")) and proc.poll() is None:
        time.sleep(0.05)  # wait until it is writing
    proc.send_signal(sig)
    rc = proc.wait(timeout=120)
    assert rc in (0, 128 + sig, 1, 130, -sig)  # finished, or stopped by the signal (Ctrl-C: KeyboardInterrupt)
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_recover_leaves_faces_without_a_carried_code_as_they_are_and_says_so(tmp_path, astronaut_rgb, capsys):
    """A JPEG holds no carrier block (here: a photo the tool never anonymized): every face is reported no_code, the
    image comes back unchanged, and the CLI warns once per file."""
    src = tmp_path / "copy.jpg"
    Image.fromarray(astronaut_rgb).save(src, quality=95)
    out = tmp_path / "out"
    assert main(["recover", str(src), "-m", "personal", "--key", SECRET, "--out", str(out), "-q"]) == 0
    err = capsys.readouterr().err
    assert "carry no code" in err and "nothing was recovered" in err
    report = json.loads((out / "copy__personal_recovered.json").read_text())
    assert report["faces"] and {f["status"] for f in report["faces"]} == {"no_code"}
    assert np.array_equal(np.asarray(Image.open(out / "copy__personal_recovered.png").convert("RGB")), np.asarray(Image.open(src).convert("RGB")))
