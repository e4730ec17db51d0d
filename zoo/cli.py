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
    python -m zoo reconstruct group.jpg --steps 100 --out recon/                       # every face redrawn by the generator

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
import glob
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".gif", ".ppm", ".pgm"}
VIDEO_EXTS = {".mp4", ".mov", ".m4v", ".mkv", ".webm", ".avi"}  # = zoo.video.VIDEO_EXTS (not imported: PyAV is lazy)


class CLIError(Exception):
    """A usage error the CLI reports in one line (exit status 2)."""


# ---------------------------------------------------------------------- inputs
def expand_inputs(items: Sequence[str]) -> list[tuple[Path, Path]]:
    """Files, folders (recursive, image extensions only) and globs -> [(path, relative output stem)].

    The relative stem keeps a folder input's sub-folders (``in/a/b.jpg`` -> ``a/b``) so outputs of
    different sub-folders do not collide. Missing paths raise :class:`CLIError`.
    """
    found: list[tuple[Path, Path]] = []
    for item in items:
        if item.startswith("example:"):  # a bundled/packaged example photo, e.g. example:group
            from .assets import example_images

            examples = example_images()
            name = item.split(":", 1)[1]
            if name not in examples:
                raise CLIError(f"no example {name!r} on this machine; available: {', '.join(examples)}")
            found.append((examples[name], Path(name)))
            continue
        p = Path(item).expanduser()
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in IMAGE_EXTS | VIDEO_EXTS and not f.name.startswith("."))
            found += [(f, f.relative_to(p).with_suffix("")) for f in files]
        elif p.is_file():
            found.append((p, Path(p.stem)))
        elif glob.has_magic(item):
            matches = sorted(Path(m) for m in glob.glob(os.path.expanduser(item), recursive=True))
            files = [m for m in matches if m.is_file()]
            if not files:
                raise CLIError(f"no files match {item!r}")
            found += [(m, Path(m.stem)) for m in files]
        else:
            raise CLIError(f"no such file or folder: {item}")
    seen: set[Path] = set()
    unique = []
    for path, stem in found:  # the same file given twice is processed once
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append((path, stem))
    return unique


def parse_methods(values: Sequence[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out += [m.strip().lower() for m in v.split(",") if m.strip()]
    if not out:
        raise CLIError("give at least one --method (see `python -m zoo list`)")
    return list(dict.fromkeys(out))


def parse_controls(values: Sequence[str] | None) -> dict[str, str]:
    controls: dict[str, str] = {}
    for v in values or []:
        name, sep, value = v.partition("=")
        if not sep or not name.strip():
            raise CLIError(f"--control takes name=value, got {v!r}")
        controls[name.strip()] = value.strip()
    return controls


def read_key(args: argparse.Namespace) -> tuple[bytes | str | None, str]:
    """(secret, where it came from). Never printed, never written. Key text follows
    :func:`zoo.keys.key_text`, the rule the app and the API use (surrounding whitespace dropped)."""
    from .keys import key_text

    if args.key is not None and args.key_file is not None:
        raise CLIError("give --key or --key-file, not both")
    if args.key is not None:
        key = key_text(args.key)
        if not key:
            raise CLIError("--key is empty")
        return key, "--key"
    if args.key_file is not None:
        path = Path(args.key_file).expanduser()
        if not path.is_file():
            raise CLIError(f"key file not found: {path}")
        data = key_text(path.read_bytes())  # as typed in the app: no surrounding whitespace
        if not data:
            raise CLIError(f"key file {path} is empty")
        return data, "--key-file"
    env = key_text(os.environ.get("ZOO_KEY", ""))
    if env:
        return env, "ZOO_KEY"
    return None, "none (random, not recoverable)"


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
    from .imageio import save_image_atomic, write_text_atomic
    from .pipeline import resolve_detector

    if args.detector:
        resolve_detector(args.detector)  # fail early on a typo
        os.environ["ZOO_DETECTOR"] = args.detector
    if args.max_megapixels is not None:
        imageio.MAX_PIXELS = int(args.max_megapixels * 1e6)
    methods = parse_methods(args.method)
    controls = parse_controls(args.control)
    controls.update(_run_options(args))
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
    from .video import VideoError

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


def _run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The run options every anonymizing command passes with the method controls: the detector threshold
    (``--min-face-score``) and the privacy guard (``--privacy-guard``)."""
    options: dict[str, Any] = {}
    if args.min_face_score is not None:
        if not 0.0 < args.min_face_score < 1.0:
            raise CLIError(f"--min-face-score must be between 0 and 1 (exclusive), got {args.min_face_score}")
        options["min_face_score"] = args.min_face_score
    if getattr(args, "privacy_guard", None) is not None:
        options["privacy_guard"] = _guard_option(args.privacy_guard)
    return options


def _guard_option(text: str) -> bool | float:
    """``--privacy-guard on|off|DISTANCE`` -> the ``privacy_guard`` run option (zoo.guard)."""
    value = text.strip().lower()
    if value in ("on", "off"):
        return value == "on"
    try:
        return float(value)
    except ValueError:
        raise CLIError(f"--privacy-guard takes on, off or an SFace distance such as 0.85, got {text!r}") from None


def cmd_anonymize_dataset(args: argparse.Namespace) -> int:
    """``anonymize-dataset SRC --method M --out DIR``: a datasets dataset with anonymized images + reports."""
    from .dataset_anonymize import DatasetError, anonymize_dataset

    methods = parse_methods(args.method)
    if len(methods) != 1:
        raise CLIError("anonymize-dataset takes one --method")
    controls: dict[str, Any] = parse_controls(args.control)
    controls.update(_run_options(args))
    if args.num_proc is not None and args.num_proc < 1:
        raise CLIError("--num-proc must be at least 1")
    key, key_source = read_key(args)
    load_kwargs = {k: v for k, v in (("local_dir", args.local_dir), ("revision", args.revision)) if v}
    if args.device:
        load_kwargs["device"] = args.device
    try:
        summary = anonymize_dataset(
            methods[0],
            args.source,
            args.out,
            key=key,
            split=args.split,
            image_column=args.image_column,
            num_proc=args.num_proc,
            batch_size=args.batch_size,
            shard_size=args.shard_size,
            push_to_hub=args.push_to_hub,
            load_kwargs=load_kwargs,
            progress=not args.quiet,
            **controls,
        )
    except (DatasetError, KeyError) as err:
        raise CLIError(str(err).strip("'\"")) from None
    if summary.get("rows") is not None:
        print(
            f"anonymize-dataset: {summary['rows']} row(s) -> {summary['output']} ({summary['new_shards']} shard(s) done now, "
            f"{summary['resumed_shards']} resumed; {summary['failed_rows']} row(s) failed and were blurred; key: {key_source})",
            file=sys.stderr,
        )
    return 1 if summary.get("failed_rows") else 0


def cmd_list(args: argparse.Namespace) -> int:
    from .registry import info, list_methods

    rows = []
    for name in list_methods():
        try:
            i = info(name)
        except Exception as err:  # noqa: BLE001 - a broken method must not hide the others
            rows.append((name, "?", "?", f"error: {err}", ""))
            continue
        ctrls = ", ".join(f"{c}={v['default']}" + (f" [{v['minimum']}..{v['maximum']}]" if v["minimum"] is not None else "") for c, v in i["controls"].items())
        if not i["weights_available"]:
            weights = "missing"
        elif i.get("weights_kind") == "none":
            weights = "none needed"
        else:
            weights = {"bundled": "demo (bundled)", "hub": "Hub", "local": "local"}.get(i.get("weights_kind"), "ready")
        rows.append((name, "yes" if i["reversible"] else "no", str(i["resolution"]), weights, ctrls or "-", i.get("weights_status", ""), i.get("evaluation")))
    if args.json:
        keys = ("name", "reversible", "resolution", "weights", "controls", "weights_label", "evaluation")
        print(json.dumps([dict(zip(keys, r)) for r in rows], indent=2, default=str))
        return 0
    head = ("method", "reversible", "res", "weights", "controls")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(4)]
    for r in [head, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(r[:4], widths)) + "  " + r[4])
    notes = [r for r in rows if r[3] not in ("missing", "none needed", "?")]
    for r in notes:
        print(f"\n{r[0]}: {r[5]}")
        ev = r[6]
        if isinstance(ev, dict):
            for data, block in ev.items():
                if isinstance(block, dict):
                    print(
                        f"  {data}: "
                        + ", ".join(
                            f"{k} {v['value']:.3g}" + (f" (n={v['n']})" if "n" in v else "") for k, v in block.items() if isinstance(v, dict) and "value" in v
                        )
                    )
        elif ev:
            print(f"  {ev}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from .registry import info

    if args.name in GENERATOR_NAMES:
        from .nn.mobilestylegan import generator_info

        print(json.dumps(generator_info(), indent=2, default=str))
        return 0
    try:
        print(json.dumps(info(args.name), indent=2, default=str))
    except KeyError as err:
        raise CLIError(str(err).strip("'\"")) from None
    return 0


GENERATOR_NAMES = ("generator", "mobilestylegan")


def cmd_generate(args: argparse.Namespace) -> int:
    """Faces from the FFHQ-grade generator: ``OUT/000.png``, ``001.png``, ... (uint8 RGB)."""
    import numpy as np
    import torch

    from .imageio import from_tensor, save_image_atomic
    from .nn.mobilestylegan import SIZES, STYLE_DIM, load_mobilestylegan

    if args.size not in SIZES:
        raise CLIError(f"--size must be one of {', '.join(map(str, SIZES))}")
    if args.z is not None:
        if args.seed is not None:
            raise CLIError("give --z or --seed, not both")
        try:
            z = np.load(args.z, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise CLIError(f"cannot read {args.z}: {err}") from None
        if z.ndim != 2 or z.shape[1] != STYLE_DIM or z.dtype.kind != "f":
            raise CLIError(f"--z must hold a float array [N,{STYLE_DIM}], got {z.dtype} {list(z.shape)}")
        z = z.astype(np.float32)
    else:
        if args.n < 1:
            raise CLIError("-n must be at least 1")
        seed = 0 if args.seed is None else args.seed
        z = np.stack([np.random.default_rng(seed + i).standard_normal(STYLE_DIM).astype(np.float32) for i in range(args.n)])
    model = load_mobilestylegan(args.device or "cpu")
    if args.size != 1024 and not model.heads_trained:
        raise CLIError(f"no trained {args.size} px head is installed; use --size 1024")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = next(model.parameters()).device
    with torch.inference_mode():
        for i in range(len(z)):
            img = model.generate(torch.from_numpy(z[i : i + 1]).to(device), psi=args.psi, size=args.size)
            save_image_atomic(from_tensor(img)[0], out / f"{i:03d}.png")
    print(f"generate: {len(z)} face(s) at {args.size} px, psi {args.psi} -> {out}/", file=sys.stderr)
    return 0


def cmd_reconstruct(args: argparse.Namespace) -> int:
    """Every face redrawn by the FFHQ-grade generator (W+ refinement) and pasted back:
    ``OUT/<name>__reconstructed.png`` plus ``.json`` (one entry per face)."""
    from .imageio import load_image, save_image_atomic, write_text_atomic
    from .inversion import reconstruct_photo
    from .nn.mobilestylegan import load_mobilestylegan

    if args.steps < 0:
        raise CLIError("--steps must be >= 0")
    inputs = expand_inputs(args.inputs)
    generator = load_mobilestylegan()
    if not generator.heads_trained:
        raise CLIError("the generator's 256 px head is not installed (zoo/weights/mobilestylegan/heads)")
    out_dir = Path(args.out)
    failed = 0
    for path, stem in inputs:
        try:
            rgb, _ = load_image(path)
        except (OSError, ValueError) as err:
            print(f"error: {path}: {err}", file=sys.stderr)
            failed += 1
            continue
        image, faces = reconstruct_photo(
            rgb, args.steps, detector=args.detector, identity_weight=args.identity_weight, use_encoder=not args.no_encoder, generator=generator
        )
        target = out_dir / f"{stem}__reconstructed.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        save_image_atomic(image, target)
        report = {"input": str(path), "output": str(target), "steps": args.steps, "identity_weight": args.identity_weight, "faces": faces}
        write_text_atomic(json.dumps(report, indent=2) + "\n", target.with_suffix(".json"))
        print(f"reconstruct: {path} -> {target} ({len(faces)} face(s))", file=sys.stderr)
    return 1 if failed else 0


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
                help="privacy guard (zoo.guard): on (default for the generative methods), off, or the SFace distance every face must reach (default 0.85; FaceRes, the second recognizer, must also be far); a face still recognised is re-keyed, then blurred",
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
        help="privacy guard (zoo.guard): on (default for the generative methods), off, or the SFace distance every face must reach (default 0.85; FaceRes, the second recognizer, must also be far); a face still recognised is re-keyed, then blurred",
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
    s.add_argument("--steps", type=int, default=100, help="refinement steps (default 100)")
    s.add_argument("--identity-weight", type=float, default=0.0, help="weight of the SFace identity term (default 0)")
    s.add_argument("--no-encoder", action="store_true", help="start refinement from the average face, not the W+ encoder's estimate")
    s.add_argument("--detector", help="face detector (default: $ZOO_DETECTOR or auto)")
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
