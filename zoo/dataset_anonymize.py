"""Anonymize a whole image dataset: an image folder, a saved ``datasets`` dataset or a Hub dataset.

    python -m zoo anonymize-dataset photos/ --method blur --out anon_ds/
    python -m zoo anonymize-dataset user/faces --split train --method personal --key-file my.key \\
        --out anon_ds/ --num-proc 4 --push-to-hub user/faces-anonymized
    accelerate launch -m zoo anonymize-dataset user/faces --method dbaf --out anon_ds/   # shards over processes/GPUs

The result is a ``datasets`` dataset saved with ``save_to_disk`` at ``--out`` (``datasets.load_from_disk``):
the source's columns, the image column replaced by the anonymized image (PNG, lossless, so the demo
methods' latent carrier survives) and one report column ``deid_report`` (the JSON report of each row:
faces, boxes, fallbacks, key fingerprint; never the key). A row whose image cannot be processed gets a
fully hard-blurred image and its error in the report (fail closed: no original image is passed on).

Work is done in shards of ``shard_size`` rows (``Dataset.map`` with ``num_proc`` inside a shard); each
finished shard is saved under ``<out>.zoo-work/`` so an interrupted run resumes where it stopped (the same
method, key, controls and source are required; the run's settings are in ``manifest.json`` there). Under
``accelerate launch`` every process takes every N-th shard on its own device and the main process
assembles the result.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .pipeline import RUN_OPTIONS

__all__ = ["anonymize_dataset", "load_source", "REPORT_COLUMN", "DatasetError"]

REPORT_COLUMN = "deid_report"
IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".gif", ".ppm", ".pgm"}


class DatasetError(ValueError):
    """A source or output the tool cannot use (one-line message in the CLI)."""


def load_source(source: Any, split: str | None = None):
    """A ``datasets.Dataset`` from a Dataset, an image folder (recursive; columns ``image``, ``file``), a
    ``save_to_disk`` folder, or a Hub dataset id (``HF_HUB_OFFLINE=1``: the local cache only)."""
    import datasets

    if isinstance(source, datasets.Dataset):
        return source
    if isinstance(source, datasets.DatasetDict):
        return _pick_split(source, split)
    p = Path(str(source)).expanduser()
    if p.is_dir() and ((p / "state.json").is_file() or (p / "dataset_dict.json").is_file()):
        ds = datasets.load_from_disk(str(p))
        return _pick_split(ds, split) if isinstance(ds, datasets.DatasetDict) else ds
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in IMAGE_EXTS and not f.name.startswith("."))
        if not files:
            raise DatasetError(f"no images in {p}")
        ds = datasets.Dataset.from_dict({"image": [str(f) for f in files], "file": [str(f.relative_to(p)) for f in files]})
        return ds.cast_column("image", datasets.Image())
    if p.exists():
        raise DatasetError(f"{p} is neither a folder of images nor a saved dataset")
    try:
        ds = datasets.load_dataset(str(source), split=split)
    except Exception as err:  # noqa: BLE001 - one line for the user
        raise DatasetError(f"cannot load dataset {source!r}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}") from None
    return _pick_split(ds, split) if isinstance(ds, datasets.DatasetDict) else ds


def _pick_split(dd, split):
    if split is not None:
        if split not in dd:
            raise DatasetError(f"no split {split!r}; the dataset has {', '.join(dd)}")
        return dd[split]
    if len(dd) == 1:
        return next(iter(dd.values()))
    raise DatasetError(f"the dataset has several splits ({', '.join(dd)}); choose one with --split")


def _image_column(ds, name: str | None) -> str:
    import datasets

    if name is not None:
        if name not in ds.column_names:
            raise DatasetError(f"no column {name!r}; columns: {', '.join(ds.column_names)}")
        return name
    for col, feat in ds.features.items():
        if isinstance(feat, datasets.Image):
            return col
    raise DatasetError(f"no image column found (columns: {', '.join(ds.column_names)}); name it with --image-column")


class _Anonymizer:
    """The ``Dataset.map`` function: one batch of rows -> anonymized images + reports. Picklable: a worker
    process loads the method itself (once) and stretches the key once."""

    def __init__(self, method_name: str, load_kwargs: dict, key, controls: dict, column: str, method=None):
        self.method_name, self.load_kwargs, self.key, self.controls, self.column = method_name, load_kwargs, key, controls, column
        self._method = method
        self._secret = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_method"] = state["_secret"] = None
        return state

    def _ready(self):
        if self._method is None:
            from . import load

            self._method = load(self.method_name, **self.load_kwargs)
        if self._secret is None and self.key is not None and self._method.uses_key:
            self._secret = self._method.run_secret(self.key)
        return self._method

    def __call__(self, batch: dict) -> dict:
        from .imageio import load_image, to_pil
        from .paste import blur_hard

        m = self._ready()
        images, reports = [], []
        for item in batch[self.column]:
            t0 = time.perf_counter()
            try:
                if item is None:
                    raise ValueError("no image in this row")
                res = m.anonymize(item, key=self._secret, **self.controls)
                images.append(res.image)
                rep = res.report()
                rep["status"] = "ok"
            except Exception as err:  # noqa: BLE001 - fail closed per row
                try:
                    rgb, _ = load_image(item)
                    images.append(to_pil(blur_hard(rgb)))
                except Exception:  # noqa: BLE001 - nothing readable: an empty grey image
                    images.append(to_pil(np.full((8, 8, 3), 127, np.uint8)))
                rep = {"method": m.name, "status": "error", "error": f"{type(err).__name__}: {err}"}
            rep["wall_seconds"] = round(time.perf_counter() - t0, 4)
            reports.append(json.dumps(rep))
        return {self.column: images, REPORT_COLUMN: reports}


def _settings(method, key, controls, ds, source, column, shard_size) -> dict:
    secret = method.run_secret(key) if (key is not None and method.uses_key) else None
    return {
        "method": method.name,
        "weights": method.weights_text,
        "key_fingerprint": secret.fingerprint if secret is not None else None,
        "controls": {k: v for k, v in controls.items()},
        "source": str(source) if not hasattr(source, "_fingerprint") else f"Dataset {source._fingerprint}",
        "source_fingerprint": getattr(ds, "_fingerprint", None),
        "rows": len(ds),
        "image_column": column,
        "shard_size": shard_size,
    }


def anonymize_dataset(
    method,
    source,
    out,
    *,
    key=None,
    split: str | None = None,
    image_column: str | None = None,
    num_proc: int | None = None,
    batch_size: int = 8,
    shard_size: int = 256,
    push_to_hub: str | None = None,
    private: bool = True,
    load_kwargs: dict | None = None,
    progress: bool = True,
    **controls,
) -> dict:
    """Anonymize every image of ``source`` with ``method`` (a loaded method or its name) and save the
    dataset at ``out``. Returns a summary: rows, shards done now / resumed, failures, seconds, path."""
    import datasets

    t0 = time.perf_counter()
    load_kwargs = dict(load_kwargs or {})
    device = load_kwargs.pop("device", None)
    if isinstance(method, str):
        method_name, method = method, None
    else:
        method_name = method.name
    out = Path(out).expanduser()
    work = out.with_name(f".{out.name}.zoo-work")
    if not progress:
        datasets.disable_progress_bars()
    ds = load_source(source, split)
    column = _image_column(ds, image_column)
    if REPORT_COLUMN in ds.column_names:
        ds = ds.remove_columns(REPORT_COLUMN)
    if shard_size < 1 or batch_size < 1:
        raise ValueError("shard_size and batch_size must be >= 1")

    from accelerate import PartialState

    state = PartialState()
    if method is None:
        from . import load

        method = load(method_name, device=device or str(state.device), **load_kwargs)
    controls = dict(controls)
    method.validate_controls({k: v for k, v in controls.items() if k not in RUN_OPTIONS})
    settings = _settings(method, key, controls, ds, source, column, shard_size)
    manifest = work / "manifest.json"

    if (out / "state.json").is_file() and (out / "zoo_manifest.json").is_file():
        done = json.loads((out / "zoo_manifest.json").read_text())
        if done.get("settings") != settings:
            raise DatasetError(f"{out} already holds a dataset made with other settings; choose another --out")
        summary = {**done["summary"], "resumed_shards": done["summary"]["shards"], "new_shards": 0, "seconds": round(time.perf_counter() - t0, 2)}
        if push_to_hub and state.is_main_process:
            datasets.load_from_disk(str(out)).push_to_hub(push_to_hub, private=private)
            summary["pushed_to"] = push_to_hub
        return summary
    if out.exists() and any(out.iterdir()):
        raise DatasetError(f"output folder {out} exists and is not a finished zoo dataset; choose another --out")
    if state.is_main_process:
        work.mkdir(parents=True, exist_ok=True)
        if manifest.is_file():
            old = json.loads(manifest.read_text())
            if old != settings:
                raise DatasetError(f"{work} holds an unfinished run with other settings (method, key, controls or source); delete it or choose another --out")
        else:
            manifest.write_text(json.dumps(settings, indent=2) + "\n")
    state.wait_for_everyone()

    n_shards = max(1, -(-len(ds) // shard_size))
    mine = [i for i in range(n_shards) if i % state.num_processes == state.process_index]
    fn = _Anonymizer(
        method_name, {**load_kwargs, "device": device or str(state.device)}, key, controls, column, method=method if not num_proc or num_proc <= 1 else None
    )
    if num_proc and num_proc > 1:
        fn.load_kwargs["device"] = "cpu"  # worker processes of one machine: CPU (GPUs: accelerate launch)
    new = resumed = 0
    bar = None
    if progress and state.is_main_process:
        from tqdm import tqdm

        bar = tqdm(total=len(ds), desc="anonymize-dataset", unit="img", file=sys.stderr)
    for i in mine:
        final = work / f"shard-{i:05d}"
        rows = min(shard_size, len(ds) - i * shard_size)
        if (final / "state.json").is_file():
            resumed += 1
            if bar is not None:
                bar.update(rows)
            continue
        shard = ds.select(range(i * shard_size, i * shard_size + rows))
        tmp = work / f".shard-{i:05d}.tmp-{os.getpid()}"
        try:
            mapped = shard.map(
                fn,
                batched=True,
                batch_size=batch_size,
                num_proc=num_proc if num_proc and num_proc > 1 and rows > 1 else None,
                features=_out_features(shard, column),
                new_fingerprint=f"zoo-deid-{settings['method']}-{i}-{os.getpid()}",
                keep_in_memory=True,
                desc=None,
            )
            mapped.save_to_disk(str(tmp))
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        new += 1
        if bar is not None:
            bar.update(rows)
    if bar is not None:
        bar.close()
    state.wait_for_everyone()
    summary: dict[str, Any] = {}
    if state.is_main_process:
        parts = [datasets.load_from_disk(str(work / f"shard-{i:05d}")) for i in range(n_shards)]
        full = datasets.concatenate_datasets(parts)
        reports = [json.loads(r) for r in full[REPORT_COLUMN]]
        summary = {
            "rows": len(full),
            "shards": n_shards,
            "new_shards": new,
            "resumed_shards": resumed,
            "failed_rows": sum(r.get("status") != "ok" for r in reports),
            "faces": sum(r.get("faces_found", 0) for r in reports),
            "fallbacks": sum(len(r.get("fallbacks", [])) for r in reports),
            "processes": state.num_processes,
            "num_proc": num_proc or 1,
            "output": str(out),
        }
        tmp_out = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        try:
            full.save_to_disk(str(tmp_out))
            (tmp_out / "zoo_manifest.json").write_text(json.dumps({"settings": settings, "summary": summary}, indent=2) + "\n")
            if out.exists():
                out.rmdir()  # empty (checked above)
            os.replace(tmp_out, out)
        except BaseException:
            shutil.rmtree(tmp_out, ignore_errors=True)
            raise
        shutil.rmtree(work, ignore_errors=True)
        if push_to_hub:
            full.push_to_hub(push_to_hub, private=private)
            summary["pushed_to"] = push_to_hub
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    return summary


def _out_features(ds, column):
    import datasets

    feats = ds.features.copy()
    feats[column] = datasets.Image()
    feats[REPORT_COLUMN] = datasets.Value("string")
    return feats
