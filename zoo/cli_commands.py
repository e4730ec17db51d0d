"""The ``python -m zoo`` subcommands other than anonymize and recover: ``anonymize-dataset``, ``list``,
``info``, ``generate`` and ``reconstruct``. Their arguments are declared, and the commands dispatched,
in :mod:`zoo.cli`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cli_args import CLIError, expand_inputs, parse_controls, parse_methods, read_key, run_options

if TYPE_CHECKING:
    import torch

GENERATOR_NAMES = ("generator", "mobilestylegan")


def cmd_anonymize_dataset(args: argparse.Namespace) -> int:
    """``anonymize-dataset SRC --method M --out DIR``: a datasets dataset with anonymized images + reports."""
    from .dataset_anonymize import DatasetError, anonymize_dataset

    methods = parse_methods(args.method)
    if len(methods) != 1:
        raise CLIError("anonymize-dataset takes one --method")
    controls: dict[str, Any] = parse_controls(args.control)
    controls.update(run_options(args))
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
            print("\n".join(_evaluation_lines(ev, "  ")))
        elif ev:
            print(f"  {ev}")
    return 0


def _evaluation_lines(evaluation: dict, indent: str) -> list[str]:
    """A checkpoint's stored evaluation summary as text: its tier, then one line of rates per face set; a nested
    summary (another tier's, e.g. ``dcgan_tier``) indented under its name."""
    lines = [f"{indent}tier: {evaluation['tier']}"] if isinstance(evaluation.get("tier"), str) else []
    nested = []
    for data, block in evaluation.items():
        if not isinstance(block, dict):
            continue
        rates = {k: v for k, v in block.items() if isinstance(v, dict) and "value" in v}
        if rates:
            lines.append(f"{indent}{data}: " + ", ".join(f"{k} {v['value']:.3g}" + (f" (n={v['n']})" if "n" in v else "") for k, v in rates.items()))
        elif any(isinstance(v, dict) for v in block.values()):
            nested += [f"{indent}{data}:"] + _evaluation_lines(block, indent + "  ")
    return lines + nested


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
    model = load_mobilestylegan(cli_device(args.device))
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


def cli_device(name: str | None) -> torch.device:
    """``--device`` (default cpu) as a torch device, or a one-line error for a name torch does not know or a device
    this machine does not have."""
    import torch

    try:
        device = torch.device(name or "cpu")
    except RuntimeError as err:
        raise CLIError(f"--device {name}: {err}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CLIError(f"--device {name}: torch sees no CUDA device here")
    if device.type not in ("cpu", "cuda"):
        raise CLIError(f"--device {name}: only cpu and cuda are supported")
    return device


def cmd_reconstruct(args: argparse.Namespace) -> int:
    """Every face redrawn by the FFHQ-grade generator (W+ refinement) and pasted back:
    ``OUT/<name>__reconstructed.png`` plus ``.json`` (one entry per face)."""
    from .imageio import load_image, save_image_atomic, write_text_atomic
    from .inversion import DEFAULT_FACE_WEIGHT, DEFAULT_IDENTITY_WEIGHT, DEFAULT_POSE_ANGLES, DEFAULT_STEPS, POSE_ANGLES, reconstruct_photo
    from .nn.mobilestylegan import load_mobilestylegan

    steps = DEFAULT_STEPS if args.steps is None else args.steps
    identity_weight = DEFAULT_IDENTITY_WEIGHT if args.identity_weight is None else args.identity_weight
    face_weight = DEFAULT_FACE_WEIGHT if args.face_weight is None else args.face_weight
    if identity_weight < 0 or face_weight < 0:
        raise CLIError("--identity-weight and --face-weight must be >= 0")
    if steps < 0:
        raise CLIError("--steps must be >= 0")
    inputs = expand_inputs(args.inputs)
    generator = load_mobilestylegan(cli_device(args.device))
    if not generator.heads_trained:
        raise CLIError("the generator's 256/512 px heads are not installed (zoo/weights/mobilestylegan/heads)")
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
            rgb,
            steps,
            detector=args.detector,
            identity_weight=identity_weight,
            face_weight=face_weight,
            use_encoder=not args.no_encoder,
            generator=generator,
            pose_angles=POSE_ANGLES if args.pitch else DEFAULT_POSE_ANGLES,
        )
        target = out_dir / f"{stem}__reconstructed.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        save_image_atomic(image, target)
        report = {
            "input": str(path),
            "output": str(target),
            "steps": steps,
            "identity_weight": identity_weight,
            "face_weight": face_weight,
            "pitch": bool(args.pitch),
            "faces": faces,
        }
        write_text_atomic(json.dumps(report, indent=2) + "\n", target.with_suffix(".json"))
        print(f"reconstruct: {path} -> {target} ({len(faces)} face(s))", file=sys.stderr)
    return 1 if failed else 0
