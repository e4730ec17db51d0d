"""Command line: ``python -m zoo anonymize|recover|list|info|generate|reconstruct``.

    python -m zoo anonymize photos/ extra.jpg "more/*.png" --method blur --method pixelate --out out/
    python -m zoo anonymize group.jpg --method dbaf --key-file my.key --out out/
    python -m zoo recover out/group__dbaf.png --method dbaf --key-file my.key --out restored/
    python -m zoo anonymize clip.mp4 --method personal --key-file my.key --out out/        # video
    python -m zoo anonymize clip.mp4 --method personal --key-file my.key --lossless --out out/   # FFV1 .mkv
    python -m zoo anonymize-dataset photos/ --method blur --out anon_ds/                 # a datasets dataset
    python -m zoo list
    python -m zoo info blur
    python -m zoo info generator                                                      # the FFHQ-grade backbone
    python -m zoo generate --seed 0 -n 4 --psi 0.7 --size 256 --out faces/            # 000.png .. 003.png
    python -m zoo reconstruct group.jpg --out recon/                                  # every face redrawn by the generator

Inputs are files, folders (searched recursively for images) and glob patterns. ``--method`` may be
repeated and each value may be a comma-separated list (``--method blur,pixelate`` = ``--method blur
--method pixelate``). The key comes from ``--key TEXT``, ``--key-file PATH`` (the file's bytes, one
trailing newline removed) or the ``ZOO_KEY`` environment variable; without one, methods that use a key
get a fresh random key that is never shown, so the result cannot be recovered.

For every input and method the CLI writes ``OUT/<name>__<method>.png`` (``..._recovered.png`` for
recover) and a JSON report next to it (faces found, boxes, method, key fingerprint, fallbacks; never
the key). Videos (.mp4 .mov .m4v .mkv .webm .avi) give ``OUT/<name>__<method>.<ext>`` (same container;
``.mkv`` with ``--lossless``) with the audio kept, each tracked face keeping one key (:mod:`zoo.video`).
Files are written atomically. A bad input is reported and skipped; the exit status is 1 when any input
failed, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from .cli_args import IMAGE_EXTS as IMAGE_EXTS
from .cli_args import VIDEO_EXTS, CLIError, expand_inputs, parse_controls, parse_methods, read_key, run_options
from .cli_commands import GENERATOR_NAMES as GENERATOR_NAMES
from .cli_commands import cmd_anonymize_dataset, cmd_generate, cmd_info, cmd_list, cmd_reconstruct

#: recover statuses that leave a face as it was (zoo.pipeline), and the warning each gets ({} = the face indices)
_REFUSED_WARNINGS = {
    "key_mismatch": "the key does not match face(s) {}; nothing was recovered from them",
    "no_code": "face(s) {} carry no code (a JPEG copy, a resize or an edit loses it); nothing was recovered from them: "
    "recover from the lossless image the tool wrote",
}


def output_paths(out_dir: Path, stem: Path, method: str, operation: str, used: set[Path], ext: str = ".png") -> tuple[Path, Path]:
    suffix = f"__{method}" + ("_recovered" if operation == "recover" else "")
    base = out_dir / stem.parent / f"{stem.name}{suffix}"
    candidate, n = base, 1
    while candidate.with_suffix(ext) in used or candidate.with_suffix(".json") in used:
        n += 1
        candidate = base.with_name(f"{base.name}_{n}")
    image_path = candidate.with_suffix(ext)
    used.add(image_path)
    used.add(candidate.with_suffix(".json"))
    return image_path, candidate.with_suffix(".json")


def _video_faces_from(path: Path, method: str) -> dict | None:
    """The anonymize report next to a video (``clip__m.mp4`` -> ``clip__m.json``) when it is a video
    report of ``method``: its per-frame faces and track ids drive recovery."""
    report = path.with_suffix(".json")
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and data.get("kind") == "video" and data.get("method") == method and data.get("operation") == "anonymize":
        return data
    return None


def _run_video_job(args, operation, method, path: Path, out_path: Path, key, controls: dict) -> Any:
    from .video import anonymize_video, recover_video

    opts = {"lossless": args.lossless, "max_gap": args.max_gap, "progress": not args.quiet}
    if operation == "anonymize":
        return anonymize_video(method, path, out_path, key=key, **opts, **controls)
    return recover_video(method, path, out_path, key, faces_from=_video_faces_from(path, method.name), **opts, **controls)


# ---------------------------------------------------------------------- commands
def _load_method(name: str, args: argparse.Namespace):
    from . import load

    kwargs: dict[str, Any] = {}
    if getattr(args, "local_dir", None):
        kwargs["local_dir"] = args.local_dir
    if getattr(args, "revision", None):
        kwargs["revision"] = args.revision
    return load(name, device=args.device, **kwargs)


def run_images(args: argparse.Namespace, operation: str) -> int:
    """anonymize / recover; ``--detector`` and ``--max-megapixels`` apply for this call only."""
    from . import imageio

    saved_env, saved_max = os.environ.get("ZOO_DETECTOR"), imageio.MAX_PIXELS
    try:
        return _run_images(args, operation)
    finally:
        imageio.MAX_PIXELS = saved_max
        if saved_env is None:
            os.environ.pop("ZOO_DETECTOR", None)
        else:
            os.environ["ZOO_DETECTOR"] = saved_env


def _run_images(args: argparse.Namespace, operation: str) -> int:
    from tqdm import tqdm

    from . import __version__, imageio
    from .detectors import resolve_detector
    from .imageio import save_image_atomic, write_text_atomic

    if args.detector:
        resolve_detector(args.detector)  # fail early on a typo
        os.environ["ZOO_DETECTOR"] = args.detector
    if args.max_megapixels is not None:
        imageio.MAX_PIXELS = int(args.max_megapixels * 1e6)
    methods = parse_methods(args.method)
    controls = parse_controls(args.control)
    controls.update(run_options(args))
    key, key_source = read_key(args)
    if operation == "recover" and key is None:
        raise CLIError("recover needs the key used to anonymize: --key, --key-file or ZOO_KEY")
    inputs = expand_inputs(args.inputs)
    if not inputs:
        raise CLIError("no input images found")
    out_dir = Path(args.out).expanduser()

    failures: list[str] = []
    done = 0
    used: set[Path] = set()
    loaded = {}
    for name in methods:
        try:
            loaded[name] = _load_method(name, args)
        except Exception as err:  # noqa: BLE001 - unknown method, missing weights: report, go on with the others
            failures.append(f"method {name}: {type(err).__name__}: {err}")
            print(f"error: method {name}: {err}", file=sys.stderr)
            continue
        m = loaded[name]
        if operation == "recover" and not m.reversible:
            failures.append(f"method {name}: not reversible")
            print(f"error: method {name} is not reversible, nothing to recover", file=sys.stderr)
            del loaded[name]
        elif operation == "anonymize" and key is None and m.uses_key and getattr(m, "reversible", False):
            print(f"note: no key given; {name} uses a fresh random key, so these results cannot be recovered", file=sys.stderr)

    # the secret is stretched once for the whole run (not once per image and method)
    stretched = None
    if key is not None and any(m.uses_key for m in loaded.values()):
        from .keys import as_secret

        stretched = as_secret(key)
    run_keys = {name: (m.run_secret(key, stretched) if (key is not None and m.uses_key) else None) for name, m in loaded.items()}
    jobs = [(path, stem, name) for path, stem in inputs for name in loaded]
    bar = tqdm(jobs, desc=operation, unit="file", disable=args.quiet or None, file=sys.stderr)
    for path, stem, name in bar:
        method = loaded[name]
        video = path.suffix.lower() in VIDEO_EXTS
        ext = (".mkv" if args.lossless else path.suffix.lower()) if video else ".png"
        image_path, report_path = output_paths(out_dir, stem, name, operation, used, ext)
        try:
            t0 = time.perf_counter()
            if video:
                if args.aligned:
                    raise CLIError("--aligned takes images, not videos")
                vres = _run_video_job(args, operation, method, path, image_path, run_keys[name], controls)
                report = vres.report()
                report.update({"key_source": key_source, "zoo_version": __version__, "wall_seconds": round(time.perf_counter() - t0, 4)})
                write_text_atomic(json.dumps(report, indent=2) + "\n", report_path)
                done += 1
                if args.quiet is False and bar.disable:
                    print(f"{path} -> {image_path} ({vres.frames} frames, {len(vres.tracks)} track(s), {vres.fallbacks} fallback(s))", file=sys.stderr)
                continue
            fn = method.anonymize if operation == "anonymize" else method.recover
            result = fn(str(path), key=run_keys[name], aligned=args.aligned, **controls)
            report = result.report()
            report.update(
                {
                    "input": str(path),
                    "output": str(image_path),
                    "key_source": key_source,
                    "detector": None if args.aligned else resolve_detector("auto"),
                    "zoo_version": __version__,
                    "wall_seconds": round(time.perf_counter() - t0, 4),
                }
            )
            save_image_atomic(result.image, image_path)
            write_text_atomic(json.dumps(report, indent=2) + "\n", report_path)
            done += 1
            for status, why in _REFUSED_WARNINGS.items():
                refused = [f.index for f in result.faces if f.status == status]
                if refused:
                    tqdm.write(f"warning: {path} [{name}]: " + why.format(refused), file=sys.stderr)
            if args.quiet is False and bar.disable:
                fb = f", fallback blur on faces {result.fallbacks}" if result.fallbacks else ""
                print(f"{path} -> {image_path} ({len(result.faces)} face(s){fb})", file=sys.stderr)
        except Exception as err:  # noqa: BLE001 - one bad file must not stop the others
            msg = f"{path} [{name}]: {_job_error_line(err, path)}"
            failures.append(msg)
            tqdm.write(f"error: {msg}", file=sys.stderr)
    bar.close()
    total = len(inputs) * len(methods)
    # each failure was printed once, as it happened: the summary only counts them
    print(
        f"{operation}: {done} of {total} file(s) written to {out_dir}; {len(failures)} failure(s)"
        + (" (shown above; the other files were written)" if failures else ""),
        file=sys.stderr,
    )
    return 1 if failures else 0


def _job_error_line(err: BaseException, path: Any) -> str:
    """One line for a failed input: the reason (without repeating the path or naming the exception class
    of an expected user error) and what to do next."""
    from .imageio import ImageTooLargeError, InvalidImageError
    from .nn.faceres import MissingRecognizerError
    from .nn.mobilestylegan import MissingGeneratorError
    from .video_io import VideoError

    text = str(err).replace(f"{path}: ", "").strip() or type(err).__name__
    if isinstance(err, (MissingRecognizerError, MissingGeneratorError)):
        return text  # names the setup command
    if isinstance(err, ImageTooLargeError):
        return f"{text}; shrink the image or raise --max-megapixels"
    if isinstance(err, InvalidImageError):
        return f"{text}; give a photo (JPEG, PNG, WebP, TIFF, BMP) or a video (.mp4 .mov .mkv .webm .avi)"
    if isinstance(err, VideoError):
        return f"{text}; check that the file plays, or convert it to .mp4"
    if isinstance(err, (ValueError, CLIError)):
        return text
    return f"{type(err).__name__}: {text} (unexpected; please report it with the command you ran)"


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m zoo", description="Face de-identification zoo.")
    sub = p.add_subparsers(dest="command", required=True)
    for op, help_ in (("anonymize", "anonymize every face in images"), ("recover", "recover faces with the key (reversible methods)")):
        s = sub.add_parser(op, help=help_, description=help_)
        s.add_argument("inputs", nargs="+", help="image files, folders (recursive), glob patterns, or example:NAME (group, astronaut, coffee)")
        s.add_argument("--method", "-m", action="append", help="method name; repeat it or give a comma list")
        s.add_argument("--key", help="secret text (prefer --key-file or ZOO_KEY: command lines are visible to other users)")
        s.add_argument("--key-file", help="file holding the secret (text loses surrounding whitespace, as a typed key; other bytes are used as they are)")
        s.add_argument("--out", "-o", default="zoo_out", help="output folder (default: zoo_out)")
        s.add_argument("--aligned", action="store_true", help="inputs are already aligned square face crops")
        s.add_argument(
            "--detector",
            help="face detector: auto, yunet, retinaface, centerface, insightface, or several joined by + (e.g. yunet+retinaface) (default: $ZOO_DETECTOR or auto)",
        )
        s.add_argument(
            "--min-face-score", type=float, help="face detector threshold in (0, 1); lower finds more faces (default: the detector's own, YuNet 0.6)"
        )
        s.add_argument("--control", "-c", action="append", metavar="NAME=VALUE", help="method control, e.g. strength=0.8 (repeatable)")
        if op == "anonymize":
            s.add_argument(
                "--privacy-guard",
                metavar="on|off|DISTANCE",
                help="privacy guard (zoo.guard): on (default for the generative methods), off, or the SFace distance every face must reach (default 0.85; FaceRes and MobileFace, the independent recognizers, must also be far); a face still recognised is re-keyed, then blurred",
            )
        s.add_argument("--device", help="torch device (default: cuda when available)")
        s.add_argument("--local-dir", help="load the method's weights from this folder instead of the Hub")
        s.add_argument("--revision", help="Hub revision of the method's weights")
        s.add_argument("--max-megapixels", type=float, help="largest accepted image (default 40)")
        s.add_argument(
            "--lossless", action="store_true", help="videos: write FFV1 in .mkv (keeps the demo methods' latent carrier, so recovery is exact; large files)"
        )
        s.add_argument("--max-gap", type=int, default=5, help="videos: frames a tracked face may go undetected and still be processed (default 5)")
        s.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    s = sub.add_parser(
        "anonymize-dataset",
        help="anonymize an image folder or a datasets dataset",
        description="Anonymize every image of an image folder, a saved datasets dataset or a Hub dataset; writes a datasets dataset (save_to_disk) with the anonymized images and a deid_report column. Resumable.",
    )
    s.add_argument("source", help="image folder, save_to_disk folder, or Hub dataset id")
    s.add_argument("--method", "-m", action="append", help="method name (one)")
    s.add_argument("--out", "-o", required=True, help="output folder (datasets.load_from_disk reads it)")
    s.add_argument("--key", help="secret text (prefer --key-file or ZOO_KEY)")
    s.add_argument("--key-file", help="file holding the secret (text loses surrounding whitespace, as a typed key; other bytes are used as they are)")
    s.add_argument("--split", help="split of a Hub / DatasetDict source")
    s.add_argument("--image-column", help="image column (default: the first Image column)")
    s.add_argument("--num-proc", type=int, help="worker processes for Dataset.map on this machine")
    s.add_argument("--batch-size", type=int, default=8, help="rows per map batch (default 8)")
    s.add_argument("--shard-size", type=int, default=256, help="rows per resumable shard (default 256)")
    s.add_argument("--push-to-hub", metavar="REPO_ID", help="also push the result to this Hub dataset repo (private)")
    s.add_argument("--min-face-score", type=float, help="face detector threshold in (0, 1)")
    s.add_argument(
        "--privacy-guard",
        metavar="on|off|DISTANCE",
        help="privacy guard (zoo.guard): on (default for the generative methods), off, or the SFace distance every face must reach (default 0.85; FaceRes and MobileFace, the independent recognizers, must also be far); a face still recognised is re-keyed, then blurred",
    )
    s.add_argument("--control", "-c", action="append", metavar="NAME=VALUE", help="method control (repeatable)")
    s.add_argument("--device", help="torch device (default: the process's accelerate device)")
    s.add_argument("--local-dir", help="load the method's weights from this folder")
    s.add_argument("--revision", help="Hub revision of the method's weights")
    s.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    s = sub.add_parser("list", help="list the methods, their controls and whether their weights are here")
    s.add_argument("--json", action="store_true")
    s = sub.add_parser("info", help="print one method's capabilities as JSON (or the generator's: info generator)")
    s.add_argument("name")
    s = sub.add_parser(
        "generate",
        help="draw faces with the FFHQ-grade generator (MobileStyleGAN)",
        description="Draw faces with the FFHQ-grade generator; writes OUT/000.png, 001.png, ...",
    )
    s.add_argument("--z", help="a .npy file holding float z's [N,512] (standard normal)")
    s.add_argument("--seed", type=int, help="face i uses z from numpy's default_rng(seed + i) (default 0)")
    s.add_argument("-n", type=int, default=1, help="how many faces with --seed (default 1)")
    s.add_argument("--psi", type=float, default=0.7, help="truncation toward the mean face, 1 = none (default 0.7)")
    s.add_argument("--size", type=int, default=1024, help="output side: 256, 512 or 1024 (default 1024)")
    s.add_argument("--out", "-o", required=True, help="output folder")
    s.add_argument("--device", help="torch device (default cpu)")
    s = sub.add_parser(
        "reconstruct",
        help="redraw every face with the FFHQ-grade generator (how well the backbone knows it)",
        description="Invert every face into the generator's W+ (the W+ encoder's estimate, then Adam refinement at 256 px), draw it at the face's size and paste it back; writes OUT/<name>__reconstructed.png and .json.",
    )
    s.add_argument("inputs", nargs="+", help="image files, folders (recursive), glob patterns, or example:NAME")
    s.add_argument("--steps", type=int, help="refinement steps (default: zoo.inversion.DEFAULT_STEPS, 40: 7-15 s per face on 2 cores, by the CPU)")
    s.add_argument("--identity-weight", type=float, help="weight of the SFace identity term (default: zoo.inversion.DEFAULT_IDENTITY_WEIGHT, 1.0)")
    s.add_argument("--face-weight", type=float, help="weight of the face-region pixel term (default: zoo.inversion.DEFAULT_FACE_WEIGHT, 3.0)")
    s.add_argument("--no-encoder", action="store_true", help="start refinement from the average face, not the W+ encoder's estimate")
    s.add_argument("--pitch", action="store_true", help="turn the encoder's estimate to the head's pitch as well as its yaw")
    s.add_argument("--detector", help="face detector (default: $ZOO_DETECTOR or auto)")
    s.add_argument("--device", help="torch device the faces are inverted on (default cpu)")
    s.add_argument("--out", "-o", required=True, help="output folder")
    return p


def _terminate(signum, frame) -> None:
    # SIGTERM unwinds like Ctrl-C, so half-written temp files are removed (zoo.imageio._atomic_write)
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        if args.command in ("anonymize", "recover"):
            return run_images(args, args.command)
        if args.command == "anonymize-dataset":
            return cmd_anonymize_dataset(args)
        if args.command == "list":
            return cmd_list(args)
        if args.command == "generate":
            return cmd_generate(args)
        if args.command == "reconstruct":
            return cmd_reconstruct(args)
        return cmd_info(args)
    except (CLIError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
