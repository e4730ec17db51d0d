"""Golden outputs: every method gives the same result for the same key before and after a refactor.

The tests compare against ``tests/golden/``; ``python tests/test_golden.py [--methods a,b]`` rewrites it.

For every registered method: the packaged astronaut photo anonymized with the key ``golden`` at the
method's defaults (the W+ methods without their fit and guard: :data:`GOLDEN_CONTROLS`), and for reversible
methods the recovery of that output with the same key. Each output is stored as the face region (the report's
box, doubled, clipped to the photo) in a PNG, plus the report's per-face decisions in ``golden.json``. Regenerate
only when a change is meant to alter outputs, and say so in the commit.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
PHOTO = Path(__file__).resolve().parents[1] / "zoo" / "assets" / "astronaut.jpg"
KEY = "golden"


def region(box: list[float], size: tuple[int, int]) -> tuple[int, int, int, int]:
    """The face box doubled about its centre, clipped to the photo: (x0, y0, x1, y1) in pixels."""
    x0, y0, x1, y1 = box
    cx, cy, half_w, half_h = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0), (y1 - y0)
    w, h = size
    return max(0, int(cx - half_w)), max(0, int(cy - half_h)), min(w, int(cx + half_w)), min(h, int(cy + half_h))


def decisions(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-face decisions a refactor must not change."""
    keep = ("status", "blur_reason")
    return [{k: face.get(k) for k in keep} for face in report["faces"]]


#: run options of the W+ methods' goldens: their fit (Adam on W+) and the guard's choice among near-tied key variants
#: amplify float summation order: goldens written at the defaults on another machine differed from the same code's
#: deterministic output here by a mean 0.5-0.9 levels and, for ``ifadit``, by another variant (8.3 levels). Without the fit and the guard the keyed
#: transform, the generator and the compositing stage are still pinned, and one thread against two moves no face
#: by more than 0.001 levels on average. The fit and the guard are tested on their own (tests/test_guard.py,
#: tests/test_demo_backbone.py, tests/test_wplus_encoder.py).
GOLDEN_CONTROLS: dict[str, dict[str, Any]] = {name: {"privacy_guard": False, "refine_steps": 0} for name in ("dbaf", "hford", "ifadit", "personal")}


def run(name: str) -> dict[str, Any]:
    """{operation: (uint8 HxWx3 array, decisions, region)} for one method, on one torch thread: the W+ methods'
    inversion and guard amplify float summation order (2 threads against 1 moved ``dbaf``'s astronaut face by 0.6
    levels on average, and once changed the guard's region), so the goldens are written and checked on one thread,
    whatever the machine's core count."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run(name)
    finally:
        torch.set_num_threads(threads)


def _run(name: str) -> dict[str, Any]:
    from zoo import load

    method = load(name, device="cpu")
    out: dict[str, Any] = {}
    result = method.anonymize(str(PHOTO), key=KEY, **GOLDEN_CONTROLS.get(name, {}))
    report = result.report()
    anonymized = np.asarray(result.image.convert("RGB"))
    box = region(report["faces"][0]["box"], result.image.size)
    out["anonymize"] = (anonymized, decisions(report), box)
    if method.capabilities().get("reversible"):
        recovered = method.recover(Image.fromarray(anonymized), key=KEY)
        out["recover"] = (np.asarray(recovered.image.convert("RGB")), decisions(recovered.report()), box)
    return out


def _index() -> dict[str, Any]:
    return json.loads((GOLDEN_DIR / "golden.json").read_text())


def _golden_methods(slow: bool) -> list[str]:
    """Weightless and single-pass methods run in the routine suite; the W+ methods (tens of seconds
    each on 2 cores) in the slow one."""
    names = sorted({k.split("/")[0] for k in _index()})
    fast = {"blur", "pixelate", "noise", "mask"}
    return [n for n in names if (n not in fast) == slow]


def _compare(name: str, monkeypatch) -> None:
    monkeypatch.delenv("ZOO_LATENT_SPACE", raising=False)  # the defaults users get (conftest picks the 64 px tier)
    index = _index()
    for operation, (image, faces, box) in run(name).items():
        entry = index[f"{name}/{operation}"]
        assert list(box) == entry["region"], (name, operation, box)
        assert faces == entry["faces"], (name, operation, faces)
        x0, y0, x1, y1 = box
        got = image[y0:y1, x0:x1].astype(np.int16)
        want = np.asarray(Image.open(GOLDEN_DIR / entry["file"]).convert("RGB")).astype(np.int16)
        diff = np.abs(got - want)
        # Float summation order differs between CPUs: a pixel may move by a level or two, never the face.
        assert diff.mean() < 0.5 and np.percentile(diff, 99.9) <= 8, (name, operation, diff.mean(), diff.max())
        outside = image.copy()
        outside[y0:y1, x0:x1] = 0
        original = np.asarray(Image.open(PHOTO).convert("RGB")).copy()
        original[y0:y1, x0:x1] = 0
        assert np.abs(outside.astype(np.int16) - original).max() <= 12, (name, operation, "changed outside the face")


@pytest.mark.parametrize("name", _golden_methods(slow=False))
def test_golden_output_is_unchanged(name, monkeypatch):
    _compare(name, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("name", _golden_methods(slow=True))
def test_golden_output_is_unchanged_for_neural_methods(name, monkeypatch):
    _compare(name, monkeypatch)


def main(argv: list[str] | None = None) -> None:
    from zoo import list_methods

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=",".join(list_methods()))
    args = parser.parse_args(argv)
    index_path = GOLDEN_DIR / "golden.json"
    index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    for name in args.methods.split(","):
        for operation, (image, faces, box) in run(name).items():
            x0, y0, x1, y1 = box
            file = f"{name}_{operation}.png"
            Image.fromarray(image[y0:y1, x0:x1]).save(GOLDEN_DIR / file, optimize=True)
            index[f"{name}/{operation}"] = {"file": file, "region": list(box), "faces": faces}
            print(name, operation, faces)
    index_path.write_text(json.dumps(dict(sorted(index.items())), indent=1) + "\n")


if __name__ == "__main__":
    main()
