"""Example photos: two small ones bundled here (see LICENSES.md) plus real photos shipped in packages.

``example_images()`` returns ``{name: path}`` for every example present on this machine, without
network access: ``astronaut`` (1 face) and ``coffee`` (no face) always; ``group`` (insightface's
t1.jpg, 6 faces) and ``grace_hopper`` (matplotlib) when those packages are installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["ASSETS_DIR", "example_images"]

ASSETS_DIR = Path(__file__).resolve().parent


def _package_file(package: str, *parts: str) -> Path | None:
    spec = importlib.util.find_spec(package)  # finds the folder without importing the package
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0], *parts)
    return path if path.is_file() else None


def example_images() -> dict[str, Path]:
    """Example photos available offline, bundled ones first."""
    found: dict[str, Path | None] = {
        "group": _package_file("insightface", "data", "images", "t1.jpg"),
        "astronaut": ASSETS_DIR / "astronaut.jpg",
        "grace_hopper": _package_file("matplotlib", "mpl-data", "sample_data", "grace_hopper.jpg"),
        "coffee": ASSETS_DIR / "coffee.jpg",
    }
    return {k: v for k, v in found.items() if v is not None and v.is_file()}
