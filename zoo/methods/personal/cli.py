"""``python -m zoo.methods.personal build-library ...``: embed training faces into a checkpoint's reference library."""

from __future__ import annotations

import argparse

from .library import load_library_images
from .method import Personal


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m zoo.methods.personal", description="personal (Cao et al.) utilities")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build-library", help="embed training faces and store the reference library in a checkpoint")
    b.add_argument("--checkpoint", required=True, help="personal checkpoint folder (method.json)")
    b.add_argument("--data", required=True, help="folder of aligned crops, or synthetic:N[:SEED]")
    b.add_argument("--out", help="output folder (default: overwrite --checkpoint)")
    b.add_argument("--k", type=int, default=10, help="identities mixed per reference (paper: 10)")
    b.add_argument("--limit", type=int)
    b.add_argument("--labels-from-subfolders", action="store_true", help="images of one identity share a sub-folder")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--center", action="store_true", help="subtract the identities' mean first (not in the paper; see build_reference_base)")
    args = p.parse_args(argv)
    method = Personal.from_pretrained(args.checkpoint)
    images, labels = load_library_images(args.data, args.limit, args.labels_from_subfolders, method.resolution)
    method.config["library"] = {"data": args.data, "labels_from_subfolders": args.labels_from_subfolders}
    base = method.build_library(images, labels, k=args.k, seed=args.seed, center=args.center)
    out = method.save_pretrained(args.out or args.checkpoint)
    print(f"{out}: reference library of {base.shape[0]} identities, k = {args.k}")
