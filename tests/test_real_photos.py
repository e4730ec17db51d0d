"""The real-photo registry behind every benchmark on real faces (benchmarks/real_photos.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import real_photos as RP


def test_every_photo_is_tuning_or_held_out_and_annotated():
    fixture = json.loads(RP.FIXTURE.read_text())
    for name, (split, where) in RP.REAL_PHOTOS.items():
        assert split in ("tuning", "held-out"), name
        assert name in fixture and fixture[name]["boxes"], name
        assert where[0].startswith(("sdist:", "wheel:")) or len(where) >= 2
        requirement = RP._archive_requirement(where)
        assert requirement is None or requirement in RP.ARCHIVES, name  # every archive's hash is pinned
    assert RP.split_of("crowd") == "tuning"  # built from t1


def test_in_split_keeps_the_order_and_only_that_splits_photos():
    names = list(RP.REAL_PHOTOS)
    held_out, tuning = RP.in_split(names, "held-out"), RP.in_split(names, "tuning")
    assert held_out and tuning and sorted(held_out + tuning) == sorted(names)
    assert held_out == [n for n in names if RP.REAL_PHOTOS[n][0] == "held-out"]
    assert RP.in_split(names, "all") == names and RP.in_split(["crowd"], "tuning") == ["crowd"]
    with pytest.raises(ValueError, match="split must be one of"):
        RP.in_split(names, "heldout")


def test_one_person_is_never_on_both_sides():
    held_out = {n for n, (s, _) in RP.REAL_PHOTOS.items() if s == "held-out"}
    tuning = set(RP.REAL_PHOTOS) - held_out
    assert not {RP.person_of(n) for n in tuning} & {RP.person_of(n) for n in held_out}
    for who, names in RP.SAME_PERSON.items():
        assert set(names) <= set(RP.REAL_PHOTOS) and len({RP.REAL_PHOTOS[n][0] for n in names}) == 1, who


def test_an_unfetched_source_distribution_photo_is_absent_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    assert RP.photo_path("biden") is None
    assert RP.sdist_dir(RP.FACE_RECOGNITION_SDIST) == tmp_path / "photos" / "face_recognition-1.3.0"
    assert "biden" not in RP.photos()


def test_installed_package_photos_resolve():
    path = RP.photo_path("t1")
    if path is None:
        pytest.skip("insightface not installed")
    assert path.is_file() and path.name == "t1.jpg"


def test_photos_reads_only_the_names_asked_for(monkeypatch):
    """``photos(names)`` reads those photos alone; ``crowd`` comes from t1 without t1 itself being returned."""
    if RP.photo_path("t1") is None or RP.photo_path("astronaut") is None:
        pytest.skip("insightface or scikit-image not installed")
    read = []
    real_read = RP.read_image
    monkeypatch.setattr(RP, "read_image", lambda path: read.append(path) or real_read(path))
    got = RP.photos(["crowd", "astronaut"])
    assert sorted(got) == ["astronaut", "crowd"]
    assert sorted(p.name for p in read) == sorted([RP.photo_path("t1").name, RP.photo_path("astronaut").name])
    rgb, boxes = got["crowd"]
    assert rgb.dtype == np.uint8 and boxes.shape[1] == 4 and len(boxes) > 0


def test_an_archive_whose_hash_differs_is_refused_and_not_kept(tmp_path, monkeypatch):
    """--fetch reads an archive only when its sha256 is the pinned one."""
    import io
    import urllib.request

    name, _ = RP.ARCHIVES["fer==22.5.1"]
    page = f'<a href="../../files/{name}#sha256=00">{name}</a>'.encode()

    def fake_urlopen(url, timeout=None):
        return io.BytesIO(page if url.endswith("/fer/") else b"not the archive")

    monkeypatch.setattr(RP, "_index_url", lambda: "https://index.invalid/simple")
    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    with pytest.raises(ValueError, match="sha256"):
        RP._download_archive("fer==22.5.1", tmp_path)
    assert not list(tmp_path.iterdir())
