"""Train any zoo method, any stage, on accelerate (CPU, one GPU, many GPUs/nodes).

    accelerate launch training/train.py --method dbaf --stage 1 --config training/configs/dbaf.yaml
    python training/train.py --method dbaf --stage 1 --config training/configs/dbaf_tiny.yaml --max-steps 20

The method implements ``training.protocol.TrainableMethod`` (explained in ``training/PROTOCOL.md``; checked
before anything is built); this file owns everything else:
optimizers (``training.optim``), EMA (``training.ema``), data (``training.data``), mixed precision,
gradient accumulation, checkpoints (accelerate state for ``--resume`` + the method's
``save_pretrained`` folder), time-bounded runs, progress bar, trackers, sample grids and the Hub push.

Output folder (``--output-dir``, default ``outputs/<method>/stage<S>``)::

    state/              accelerate state (models, optimizers, EMA, RNG, step) for --resume
    model/              the method checkpoint: zoo.load(name, local_dir="<out>/model")
    samples/step_*.png  sample grids (rows: the method's sample_outputs keys)
    logs/               TensorBoard events (when tensorboard is installed)
    train_state.json    step, seed, stage, last losses, whether the run finished
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from training.protocol import AfterOptimizerStep, check_groups, check_losses, check_trainable

__all__ = ["train", "load_config", "resolve_method_class", "check_push_to_hub", "main"]


# ============================================================ config and method lookup
def load_config(path: str | os.PathLike | Mapping[str, Any]) -> dict[str, Any]:
    """A training config from a YAML file (or a dict), with stage keys normalised to ints."""
    if isinstance(path, Mapping):
        cfg = copy.deepcopy(dict(path))
    else:
        import yaml

        with open(path) as fh:
            cfg = yaml.safe_load(fh) or {}
    cfg["stages"] = {int(k): dict(v or {}) for k, v in (cfg.get("stages") or {}).items()}
    return cfg


def resolve_method_class(name: str) -> type:
    """A method class from a zoo name (``dbaf``) or ``module:Class`` (``training.toy:ToyMethod``)."""
    from zoo.registry import get_method_class
    from zoo.targets import import_target

    if ":" in name:
        return import_target(name)

    try:
        return get_method_class(name)
    except KeyError:
        # a method still being trained is not registered yet: try zoo.methods.<name>
        module = importlib.import_module(f"zoo.methods.{name.lower()}")
        for obj in vars(module).values():
            if isinstance(obj, type) and getattr(obj, "name", None) == name.lower() and _follows_protocol(obj):
                return obj
        raise


def _follows_protocol(cls: type) -> bool:
    try:
        check_trainable(cls)
    except TypeError:
        return False
    return True


def check_push_to_hub(repo_id: str) -> None:
    """Fail before training when ``--push-to-hub`` cannot work (offline, bad repo id, no token)."""
    from zoo.hub import hub_offline

    if repo_id.count("/") != 1:
        raise SystemExit(f"--push-to-hub {repo_id!r}: expected a Hub repo id 'owner/name'")
    if hub_offline():
        raise SystemExit(
            f"--push-to-hub {repo_id}: HF_HUB_OFFLINE=1, so the checkpoint could not be uploaded. Not starting "
            "training. Unset HF_HUB_OFFLINE (and log in with `hf auth login`), or train without --push-to-hub "
            "and upload <output-dir>/model later."
        )
    from huggingface_hub import whoami

    try:
        whoami()
    except Exception as err:  # noqa: BLE001 - any failure means we cannot push
        raise SystemExit(f"--push-to-hub {repo_id}: cannot reach the Hub or not logged in ({type(err).__name__}: {err}). Not starting training.") from None


def _seed_of(*parts: Any) -> int:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _flat_scalars(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flat_scalars(v, key + "."))
        elif isinstance(v, (int, float, str, bool)):
            out[key] = v
        elif v is not None:
            out[key] = str(v)
    return out


# ============================================================ pieces
class _MethodModule(nn.Module):
    """All components of a method as one module whose forward is ``compute_losses``: the unit that
    ``accelerator.prepare`` wraps (DDP, autocast), so methods need no distributed code."""

    def __init__(self, method):
        super().__init__()
        self.components = nn.ModuleDict(method.components)
        object.__setattr__(self, "method", method)  # not a submodule

    def forward(self, stage: int, group: str, batch: dict[str, torch.Tensor], step: int):
        return self.method.compute_losses(stage, group, batch, step)


class _Counter:
    """The step counter, saved and restored with accelerate's state."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.step = int(state["step"])


def _save_grid(rows: Mapping[str, torch.Tensor], path: Path, max_cols: int = 8) -> None:
    """Rows of ``[B,3,R,R]`` images in [-1,1] -> one PNG, one row per key."""
    from PIL import Image, ImageDraw

    from zoo.imageio import from_tensor

    names = list(rows)
    imgs = [from_tensor(rows[n][:max_cols].float().cpu()) for n in names]
    r = imgs[0].shape[1]
    cols = max(len(a) for a in imgs)
    label_w = 90
    canvas = np.full((len(names) * r, label_w + cols * r, 3), 255, np.uint8)
    for i, a in enumerate(imgs):
        for j, im in enumerate(a):
            canvas[i * r : (i + 1) * r, label_w + j * r : label_w + (j + 1) * r] = np.asarray(Image.fromarray(im).resize((r, r)) if im.shape[0] != r else im)
    pil = Image.fromarray(canvas)
    draw = ImageDraw.Draw(pil)
    for i, n in enumerate(names):
        draw.text((3, i * r + 3), n, fill=(0, 0, 0))
    path.parent.mkdir(parents=True, exist_ok=True)
    pil.save(path)


def load_init(method, folder: str | os.PathLike) -> list[str]:
    """Load every component present in a method checkpoint folder into ``method`` (strict per component)."""
    from zoo.hub import load_components

    _, comps, _ = load_components(folder)
    loaded = []
    for name, module in comps.items():
        if name in method.components:
            method.components[name].load_state_dict(module.state_dict(), strict=True)
            loaded.append(name)
    return loaded


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str))
    tmp.replace(path)


def _render_card(method_name: str, model_dir: Path, repo_id: str, info: Mapping[str, Any]) -> str | None:
    """The model card from ``hub_cards.render_card`` (with ``model_dir/eval.json`` when present)."""
    try:
        from hub_cards import render_card
    except ImportError:
        return None
    eval_file = model_dir / "eval.json"
    data = dict((info.get("config") or {}).get("data") or {})
    training = {
        "stage": info["stage"],
        "steps": info["step"],
        "images seen": info["images_seen"],
        "data": data.get("name") or data.get("path") or data.get("source", "synthetic"),
        "seed": info["seed"],
        "mixed precision": info["mixed_precision"],
        "processes": info["num_processes"],
    }
    if data.get("source") == "hub" and data.get("name") and data["name"].count("/") == 1:
        training["datasets"] = [data["name"]]
    return render_card(method_name, str(eval_file) if eval_file.is_file() else None, repo_id, training=training)


# ============================================================ the trainer
@dataclass
class _Run:
    """One invocation of :func:`train`: the settings it resolved and what it built, shared by its steps."""

    cls: type
    cfg: dict[str, Any]
    stage: int
    seed: int
    total_steps: int
    batch_size: int
    grad_accum: int
    out: Path
    mixed_precision: str
    log_with: str | None
    accelerator: Any = None
    method: Any = None
    groups: dict[str, list[nn.Parameter]] = field(default_factory=dict)
    optimizers: dict[str, Any] = field(default_factory=dict)  # prepared by accelerate, in update order
    model: Any = None  # the prepared _MethodModule
    ema: Any = None
    ema_group: str | None = None
    counter: _Counter = field(default_factory=_Counter)
    checked: set = field(default_factory=set)  # groups whose compute_losses output was checked

    @property
    def state_dir(self) -> Path:
        return self.out / "state"

    @property
    def model_dir(self) -> Path:
        return self.out / "model"

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    def ema_applied(self):
        return self.ema.applied() if self.ema is not None else contextlib.nullcontext()


def _resolve_run(method, config, stage, output_dir, *, max_steps, grad_accum, seed, mixed_precision, log_with) -> _Run:
    """Settings of a run, checked before anything is built: the method class follows the training protocol
    and trains in ``stage``, and the config has that stage."""
    cfg = load_config(config)
    cls = method if isinstance(method, type) else resolve_method_class(str(method))
    stage = int(stage)
    if stage not in cfg["stages"]:
        raise ValueError(f"config has no stage {stage}; it has {sorted(cfg['stages'])}")
    check_trainable(cls, stage)
    scfg = cfg["stages"][stage]
    seed = int(cfg.get("seed", 0) if seed is None else seed)
    cfg["seed"] = seed
    if log_with == "tensorboard" and importlib.util.find_spec("tensorboard") is None and importlib.util.find_spec("tensorboardX") is None:
        print("[train] tensorboard is not installed: logging to the progress bar and train_state.json only")
        log_with = None
    return _Run(
        cls=cls,
        cfg=cfg,
        stage=stage,
        seed=seed,
        total_steps=int(max_steps if max_steps is not None else scfg.get("steps", 1000)),
        batch_size=int(scfg.get("batch_size", 4)),
        grad_accum=int(grad_accum),
        out=Path(output_dir or Path("outputs") / cls.name / f"stage{stage}"),
        mixed_precision=mixed_precision,
        log_with=log_with,
    )


def _start_accelerator(run: _Run, cpu: bool) -> None:
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration, set_seed

    run.accelerator = Accelerator(
        mixed_precision=run.mixed_precision,
        log_with=run.log_with,
        project_config=ProjectConfiguration(project_dir=str(run.out), logging_dir=str(run.out / "logs")),
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],
        cpu=cpu,
    )
    set_seed(run.seed)  # network initialisation is the same in every process and every resumed run


def _build_method(run: _Run, init_from: str | os.PathLike | None) -> None:
    """The method from the config, initialised from ``init_from`` (default: the previous stage's model)."""
    acc, cfg, stage = run.accelerator, run.cfg, run.stage
    m = run.cls.from_config(cfg)
    if init_from is None and stage != min(cfg["stages"]):
        previous = run.out.parent / f"stage{stage - 1}" / "model"
        init_from = previous if previous.is_dir() else None
        if init_from is None:
            acc.print(f"[train] stage {stage}: no --init-from and no {previous}; starting from the config's initialisation")
    if init_from is not None:
        loaded = load_init(m, init_from)
        acc.print(f"[train] initialised {loaded} from {init_from}")
    m.to(acc.device)
    run.method = m


def _build_optimization(run: _Run) -> None:
    """Optimizer groups (everything else frozen), optimizers, EMA, and the accelerate-prepared model."""
    from training.ema import EMA
    from training.optim import build_optimizer

    m, stage, scfg, acc = run.method, run.stage, run.cfg["stages"][run.stage], run.accelerator
    groups = check_groups(run.cls.name, stage, m.trainable_parameters(stage))
    missing = [g for g in groups if g not in scfg.get("optimizer", {})]
    if missing:
        raise ValueError(f"stage {stage} config has no optimizer for group(s) {missing}; add stages.{stage}.optimizer.<group>")
    trainable = {id(p) for ps in groups.values() for p in ps}
    for module in m.components.values():
        for p in module.parameters():
            if id(p) not in trainable:
                p.requires_grad_(False)
    optimizers = {g: build_optimizer(ps, scfg["optimizer"][g]) for g, ps in groups.items()}
    ema_cfg = run.cfg.get("ema")
    if ema_cfg and ema_cfg.get("group") in groups:
        run.ema = EMA(groups[ema_cfg["group"]], float(ema_cfg.get("decay", 0.999)), bool(ema_cfg.get("warmup", False)))
        run.ema_group = ema_cfg["group"]
    prepared = acc.prepare(_MethodModule(m), *optimizers.values())
    run.model, run.optimizers, run.groups = prepared[0], dict(zip(optimizers, prepared[1:])), groups
    acc.register_for_checkpointing(run.counter)
    if run.ema is not None:
        acc.register_for_checkpointing(run.ema)


def _restore(run: _Run, resume: bool) -> int:
    """Load the accelerate state for ``--resume``; the step to start from."""
    acc = run.accelerator
    if resume and run.state_dir.is_dir():
        acc.load_state(str(run.state_dir))
        acc.print(f"[train] resumed from {run.state_dir} at step {run.counter.step}")
    elif resume:
        acc.print(f"[train] --resume: no state in {run.state_dir}; starting at step 0")
    return run.counter.step


def _data(run: _Run, start_step: int, num_workers: int):
    """(iterator over micro-batches from ``start_step`` for this process, the fixed sample batch)."""
    from training.data import StepBatches, build_source

    cfg, acc = run.cfg, run.accelerator
    data_cfg = dict(cfg.get("data") or {"source": "synthetic"})
    # data.resolution: train at another size than the method's crops (e.g. a restorer that works below them)
    resolution = int(data_cfg.pop("resolution", cfg.get("resolution", getattr(run.cls, "resolution", 256))))
    source = build_source(data_cfg, resolution, run.seed)
    stream = StepBatches(source, run.batch_size, run.grad_accum, start_step, acc.process_index, acc.num_processes)
    loader = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=num_workers, pin_memory=acc.device.type == "cuda")
    sample_n = int(cfg.get("sample_count", min(8, run.batch_size)))
    try:
        sample_batch = source.batch(list(range(sample_n)))
    except AttributeError:  # streaming source
        sample_batch = {k: v[:sample_n] for k, v in next(iter(StepBatches(source, sample_n))).items()}
    return iter(loader), sample_batch


def _set_requires_grad(run: _Run, active: str | None) -> None:
    """Only ``active``'s parameters require grad (None: no group's)."""
    for g, ps in run.groups.items():
        for p in ps:
            p.requires_grad_(g == active)


def _save(run: _Run, finished: bool, last_logs: Mapping[str, float]) -> dict[str, Any]:
    """Accelerate state (for --resume), the method checkpoint (EMA weights) and train_state.json."""
    acc, out = run.accelerator, run.out
    acc.wait_for_everyone()
    tmp = out / "state.tmp"
    if acc.is_main_process and tmp.exists():
        shutil.rmtree(tmp)
    acc.wait_for_everyone()
    acc.save_state(str(tmp))
    acc.wait_for_everyone()
    info = {
        "method": run.cls.name,
        "stage": run.stage,
        "step": run.counter.step,
        "total_steps": run.total_steps,
        "seed": run.seed,
        "finished": finished,
        "last_losses": dict(last_logs),
        "images_seen": run.counter.step * run.batch_size * run.grad_accum * run.world,
        "mixed_precision": run.mixed_precision,
        "grad_accum": run.grad_accum,
        "num_processes": run.world,
        "config": run.cfg,
    }
    if acc.is_main_process:
        if run.state_dir.exists():
            shutil.rmtree(run.state_dir)
        tmp.replace(run.state_dir)
        run.method.to(acc.device)  # eval mode for saving
        with run.ema_applied():
            run.method.save_pretrained(run.model_dir)
        _write_json(run.model_dir / "train_info.json", {k: v for k, v in info.items() if k != "config"})
        _write_json(out / "train_state.json", info)
    acc.wait_for_everyone()
    return info


def _samples(run: _Run, sample_batch: Mapping[str, torch.Tensor], step: int) -> None:
    """The sample grid of ``step`` (main process; EMA weights, components in eval mode)."""
    if not run.accelerator.is_main_process:
        return
    m = run.method
    for module in m.components.values():
        module.eval()
    m.train_generator = torch.Generator().manual_seed(_seed_of("samples", run.seed))
    batch = {k: v.to(run.accelerator.device) for k, v in sample_batch.items()}
    with torch.no_grad(), run.ema_applied():
        rows = m.sample_outputs(batch)
    _save_grid(rows, run.out / "samples" / f"step_{step:07d}.png")


def _train_step(run: _Run, batches, step: int) -> dict[str, float]:
    """One optimizer step of every group (in order), each over ``grad_accum`` micro-batches; the logged terms."""
    acc, m, rank = run.accelerator, run.method, run.accelerator.process_index
    micro = [{k: v.to(acc.device, non_blocking=True) for k, v in next(batches).items()} for _ in range(run.grad_accum)]
    for module in m.components.values():
        module.train()
    logs: dict[str, float] = {}
    for group, opt in run.optimizers.items():
        _set_requires_grad(run, group)
        for i, batch in enumerate(micro):
            m.train_generator = torch.Generator().manual_seed(_seed_of("train", run.seed, step, i, rank, group))
            sync = contextlib.nullcontext() if i == run.grad_accum - 1 else acc.no_sync(run.model)
            with sync:
                out = run.model(run.stage, group, batch, step)
                if group not in run.checked:
                    check_losses(run.cls.name, group, out)
                    run.checked.add(group)
                loss, terms = out
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"{run.cls.name} stage {run.stage} group {group}: non-finite loss {loss.item()} at step {step} ({terms})")
                acc.backward(loss / run.grad_accum)
            for k, v in terms.items():
                logs[f"{group}/{k}"] = logs.get(f"{group}/{k}", 0.0) + float(v) / run.grad_accum
        opt.step()
        opt.zero_grad(set_to_none=True)
        if isinstance(m, AfterOptimizerStep):
            m.after_optimizer_step(run.stage, group, step)
        if run.ema is not None and group == run.ema_group:
            run.ema.update()
    _set_requires_grad(run, None)
    return logs


def _out_of_time(run: _Run, t_start: float, max_minutes: float | None) -> bool:
    """Whether ``max_minutes`` passed (in any process: they all stop at the same step)."""
    out_of_time = max_minutes is not None and (time.monotonic() - t_start) > 60 * float(max_minutes)
    if run.world > 1:
        flag = torch.tensor([1.0 if out_of_time else 0.0], device=run.accelerator.device)
        out_of_time = bool(run.accelerator.reduce(flag, reduction="max").item() > 0)
    return out_of_time


def train(
    method: str | type,
    config: str | os.PathLike | Mapping[str, Any],
    stage: int,
    output_dir: str | os.PathLike | None = None,
    *,
    max_steps: int | None = None,
    max_minutes: float | None = None,
    resume: bool = False,
    mixed_precision: str = "no",
    grad_accum: int = 1,
    seed: int | None = None,
    init_from: str | os.PathLike | None = None,
    push_to_hub: str | None = None,
    log_with: str | None = "tensorboard",
    progress: bool = True,
    num_workers: int = 0,
    cpu: bool = False,
) -> dict[str, Any]:
    """Train ``method`` (zoo name, ``module:Class`` or a class implementing
    :class:`training.protocol.TrainableMethod`) for ``stage`` of ``config``.

    ``max_steps`` overrides the stage's total step count (the run ends at that step; with ``resume``
    it continues from the saved step). ``max_minutes`` stops cleanly (checkpoint written) once that
    much wall time has passed in this invocation. Returns the final ``train_state.json`` content.
    """
    from tqdm.auto import tqdm

    t_start = time.monotonic()
    run = _resolve_run(
        method, config, stage, output_dir, max_steps=max_steps, grad_accum=grad_accum, seed=seed, mixed_precision=mixed_precision, log_with=log_with
    )
    if push_to_hub:
        check_push_to_hub(push_to_hub)
    _start_accelerator(run, cpu)
    _build_method(run, init_from)
    _build_optimization(run)
    start_step = _restore(run, resume)
    if run.log_with:
        run.accelerator.init_trackers(f"{run.cls.name}_stage{run.stage}", config=_flat_scalars(run.cfg))
    batches, sample_batch = _data(run, start_step, num_workers)
    sample_every = int(run.cfg.get("sample_every", 0) or 0)
    save_every = int(run.cfg.get("save_every", 0) or 0)

    logs: dict[str, float] = {}
    bar = tqdm(
        total=run.total_steps,
        initial=start_step,
        disable=not (progress and run.accelerator.is_local_main_process),
        desc=f"{run.cls.name} stage {run.stage}",
        dynamic_ncols=True,
    )
    stopped_early = False
    step = start_step
    while step < run.total_steps:
        t0 = time.perf_counter()
        logs = _train_step(run, batches, step)
        step += 1
        run.counter.step = step
        logs["images_per_s"] = run.batch_size * run.grad_accum * run.world / max(time.perf_counter() - t0, 1e-9)
        if run.log_with:
            run.accelerator.log(logs, step=step)
        bar.update(1)
        bar.set_postfix({k.replace("/total", ""): f"{v:.3g}" for k, v in logs.items() if k.endswith("/total") or k == "images_per_s"})
        if sample_every and step % sample_every == 0:
            _samples(run, sample_batch, step)
        if _out_of_time(run, t_start, max_minutes) and step < run.total_steps:
            run.accelerator.print(f"[train] --max-minutes {max_minutes} reached at step {step}/{run.total_steps}: saving and stopping")
            stopped_early = True
            break
        if save_every and step % save_every == 0 and step < run.total_steps:
            _save(run, False, logs)
    bar.close()
    for p in (p for ps in run.groups.values() for p in ps):
        p.requires_grad_(True)
    if sample_every and not stopped_early and step % sample_every != 0:
        _samples(run, sample_batch, step)
    info = _save(run, not stopped_early and step >= run.total_steps, logs)
    if run.log_with:
        run.accelerator.end_training()
    if push_to_hub and info["finished"] and run.accelerator.is_main_process:
        _push(run.cls.name, run.model_dir, push_to_hub, info)
    return info


def _push(method_name: str, model_dir: Path, repo_id: str, info: Mapping[str, Any]) -> None:
    from huggingface_hub import HfApi

    try:
        card = _render_card(method_name, model_dir, repo_id, info)
    except Exception as err:  # noqa: BLE001 - a card problem must not lose the trained weights
        print(f"[train] model card not rendered ({type(err).__name__}: {err}); uploading without README.md")
        card = None
    if card:
        (model_dir / "README.md").write_text(card)
    api = HfApi()
    api.create_repo(repo_id, exist_ok=True)
    api.upload_folder(repo_id=repo_id, folder_path=str(model_dir), commit_message=f"{method_name} stage {info['stage']} step {info['step']}")
    print(f"[train] pushed {model_dir} to https://huggingface.co/{repo_id}")


# ============================================================ CLI
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", help="zoo method name, or module:Class (default: the config's `method`)")
    p.add_argument("--stage", type=int, required=True)
    p.add_argument("--config", required=True, help="training YAML (training/configs/<method>.yaml)")
    p.add_argument("--output-dir", help="default outputs/<method>/stage<S>")
    p.add_argument("--resume", action="store_true", help="continue from <output-dir>/state")
    p.add_argument("--max-steps", type=int, help="total steps of this stage (overrides the config)")
    p.add_argument("--max-minutes", type=float, help="stop cleanly with a checkpoint after this much time")
    p.add_argument("--mixed-precision", default="no", choices=["no", "fp16", "bf16"])
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--seed", type=int)
    p.add_argument("--init-from", help="method checkpoint to start from (default: the previous stage's model)")
    p.add_argument("--push-to-hub", metavar="REPO", help="upload <output-dir>/model and its card when finished")
    p.add_argument("--log-with", default="tensorboard", help="accelerate tracker (tensorboard, wandb, ...; 'none' to disable)")
    p.add_argument("--num-workers", type=int, default=0, help="data-loading worker processes")
    p.add_argument("--cpu", action="store_true", help="force CPU even when a GPU is present")
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _parser().parse_args(argv)
    if args.push_to_hub:
        check_push_to_hub(args.push_to_hub)  # before anything is built
    cfg = load_config(args.config)
    method = args.method or cfg.get("method")
    if not method:
        raise SystemExit("--method is required when the config has no `method`")
    return train(
        method,
        cfg,
        args.stage,
        args.output_dir,
        max_steps=args.max_steps,
        max_minutes=args.max_minutes,
        resume=args.resume,
        mixed_precision=args.mixed_precision,
        grad_accum=args.grad_accum,
        seed=args.seed,
        init_from=args.init_from,
        push_to_hub=args.push_to_hub,
        log_with=None if str(args.log_with).lower() == "none" else args.log_with,
        progress=not args.no_progress,
        num_workers=args.num_workers,
        cpu=args.cpu,
    )


if __name__ == "__main__":
    main()
