"""anonymize-dataset: image folder and a local datasets dataset, report column, resume, CLI errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")

import zoo.dataset_anonymize as zd  # noqa: E402


@pytest.fixture(scope="module")
def face_images():
    import cv2

    from zoo.assets import example_images
    from zoo.imageio import load_image

    rgb, _ = load_image(str(example_images()["astronaut"]))
    small = cv2.resize(rgb, (128, 128), interpolation=cv2.INTER_AREA)
    return [small, np.ascontiguousarray(small[:, ::-1]), cv2.resize(rgb, (96, 96), interpolation=cv2.INTER_AREA)]


def _changed(a, b) -> float:
    return float(np.abs(np.asarray(a, np.int16) - np.asarray(b, np.int16)).mean())


def test_image_folder_to_dataset(tmp_path, face_images):
    from PIL import Image

    src = tmp_path / "photos"
    (src / "sub").mkdir(parents=True)
    for i, im in enumerate(face_images):
        Image.fromarray(im).save(src / ("sub" if i == 2 else "") / f"p{i}.png")
    (src / "notes.txt").write_text("not an image")
    out = tmp_path / "anon"
    summary = zd.anonymize_dataset("blur", src, out, key="k", progress=False, shard_size=2)
    assert summary["rows"] == 3 and summary["shards"] == 2 and summary["failed_rows"] == 0
    ds = datasets.load_from_disk(str(out))
    assert set(ds.column_names) == {"image", "file", zd.REPORT_COLUMN}
    assert sorted(ds["file"]) == ["p0.png", "p1.png", "sub/p2.png"]
    for row in ds:
        rep = json.loads(row[zd.REPORT_COLUMN])
        assert rep["method"] == "blur" and rep["faces_found"] >= 1 and rep["status"] == "ok"
        i = int(row["file"][-5])
        assert _changed(row["image"].convert("RGB"), face_images[i]) > 0.5  # the face was blurred
    assert not (tmp_path / ".anon.zoo-work").exists()  # work folder gone once finished


def test_local_dataset_resume_skips_done_shards(tmp_path, face_images, monkeypatch):
    from PIL import Image

    rows = [Image.fromarray(face_images[i % 3]) for i in range(6)]
    ds = datasets.Dataset.from_dict({"photo": rows, "label": list(range(6))}).cast_column("photo", datasets.Image())
    saved = tmp_path / "src_ds"
    ds.save_to_disk(str(saved))
    out = tmp_path / "anon"

    calls = {"n": 0}
    real = zd._Anonymizer.__call__

    def counting(self, batch):
        calls["n"] += 1
        if calls.get("fail_at") == calls["n"]:
            raise KeyboardInterrupt
        return real(self, batch)

    monkeypatch.setattr(zd._Anonymizer, "__call__", counting)
    calls["fail_at"] = 2  # interrupted in the second shard
    with pytest.raises(KeyboardInterrupt):
        zd.anonymize_dataset("noise", saved, out, key="k", progress=False, shard_size=2, batch_size=2)
    work = tmp_path / ".anon.zoo-work"
    assert sorted(p.name for p in work.iterdir()) == ["manifest.json", "shard-00000"]  # no half-written shard
    assert not out.exists()
    # another key: refused (the finished shard was made with the first one)
    with pytest.raises(zd.DatasetError, match="other settings"):
        zd.anonymize_dataset("noise", saved, out, key="other", progress=False, shard_size=2, batch_size=2)
    calls.update(n=0, fail_at=None)
    summary = zd.anonymize_dataset("noise", saved, out, key="k", progress=False, shard_size=2, batch_size=2)
    assert summary["resumed_shards"] == 1 and summary["new_shards"] == 2 and calls["n"] == 2  # shard 0 skipped
    result = datasets.load_from_disk(str(out))
    assert result["label"] == list(range(6)) and zd.REPORT_COLUMN in result.column_names
    assert all(json.loads(r)["key_fingerprint"] for r in result[zd.REPORT_COLUMN])
    # running again is a no-op
    calls["n"] = 0
    again = zd.anonymize_dataset("noise", saved, out, key="k", progress=False, shard_size=2, batch_size=2)
    assert again["new_shards"] == 0 and calls["n"] == 0


def test_bad_row_is_blurred_not_passed_on(tmp_path, face_images):
    from PIL import Image

    ds = datasets.Dataset.from_dict({"image": [Image.fromarray(face_images[0]), None]}).cast_column("image", datasets.Image())
    summary = zd.anonymize_dataset("pixelate", ds, tmp_path / "o", progress=False)
    assert summary["failed_rows"] == 1
    reps = [json.loads(r) for r in datasets.load_from_disk(str(tmp_path / "o"))[zd.REPORT_COLUMN]]
    assert [r["status"] for r in reps] == ["ok", "error"]


def test_cli_anonymize_dataset(tmp_path, face_images, capsys):
    from PIL import Image

    from zoo.cli import main

    src = tmp_path / "photos"
    src.mkdir()
    Image.fromarray(face_images[0]).save(src / "a.png")
    assert main(["anonymize-dataset", str(src), "-m", "blur", "--out", str(tmp_path / "o"), "-q"]) == 0
    assert "1 row(s)" in capsys.readouterr().err
    assert main(["anonymize-dataset", str(tmp_path / "missing"), "-m", "blur", "--out", str(tmp_path / "o2"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err
