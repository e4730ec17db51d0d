"""``python -m zoo.convert list`` | ``python -m zoo.convert <kind> <original file> <out folder>``."""

from __future__ import annotations

import argparse
import sys

from . import ConversionError, convert_file, list_converters


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.convert", description=__doc__)
    parser.add_argument("kind", help="converter name, or 'list'")
    parser.add_argument("src", nargs="?", help="original checkpoint file (.pt/.pth/.safetensors)")
    parser.add_argument("out", nargs="?", help="output folder (config.json + model.safetensors)")
    args = parser.parse_args(argv)
    if args.kind == "list":
        for kind, desc in list_converters().items():
            print(f"{kind:24s} {desc}")
        return 0
    if not args.src or not args.out:
        parser.error("kind, src and out are required")
    try:
        out = convert_file(args.kind, args.src, args.out)
    except (ConversionError, KeyError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
