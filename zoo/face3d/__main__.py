"""``python -m zoo.face3d build-shape-space ...`` (:mod:`zoo.face3d.shape_space`) and
``python -m zoo.face3d build-texture-space ...`` (:mod:`zoo.face3d.texture_space`)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(
            "usage: python -m zoo.face3d build-shape-space [--n N] [--seed S] [--components K] [--photos] [--out FILE]\n"
            "       python -m zoo.face3d build-texture-space [--n N] [--seed S] [--components K] [--size PX] [--out FILE]"
        )
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "build-shape-space":
        from .shape_space import main_build

        main_build(rest)
        return 0
    if cmd == "build-texture-space":
        from .texture_space import main_build as main_build_texture

        main_build_texture(rest)
        return 0
    print(f"unknown command {cmd!r}; try build-shape-space or build-texture-space", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
