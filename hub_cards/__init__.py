"""Hub model cards for the zoo's methods, rendered from one template and the evaluator's JSON.

    from hub_cards import render_card
    text = render_card("dbaf", eval_json="outputs/eval/dbaf.json", repo_id="me/dbaf-ffhq256")

Sources of a card (nothing else, and no number is ever typed in by hand):

* ``hub_cards/methods.yaml``: facts per method (paper, licences, data, two-paragraph description,
  limitations, BibTeX);
* the method's class in the registry when it is importable (stages, controls, resolution, default repo);
* the evaluator's JSON (``training/evaluate.py``), when given: the measured table and the ``model-index``
  metadata. Without it the card says that there are no measured results yet;
* ``training``: what the trainer knows about the run (data source, steps, Hub ids of datasets and base
  models actually used).

The card is built with :meth:`huggingface_hub.ModelCard.from_template` (Jinja2) and re-parsed by
``ModelCard`` before it is returned, so a card that the Hub's parser would reject never leaves here.

Evaluator JSON accepted (one object, a list of them, ``{"results": [...]}`` or
``{"methods": {name: {...}}}``)::

    {"method": "dbaf",
     "dataset": {"name": "...", "hub_id": "owner/ds" | null, "split": "test", "num_images": 200,
                 "description": "..."} | "free text",
     "metrics": {"id_similarity_sface": 0.12,                       # a number, or
                 "recover_psnr": {"value": 31.2, "description": "...", "unit": "dB"},
                 "wrong_key": {"id_similarity_sface": 0.10}},       # nested dicts are flattened with "/"
     "command": "python training/evaluate.py ...", "date": "...", "device": "...", "judges": [...]}
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

__all__ = [
    "CardError",
    "NoResultsError",
    "METHODS_YAML",
    "TEMPLATE",
    "RENDERED_DIR",
    "method_facts",
    "card_methods",
    "load_evaluations",
    "render_card",
    "write_card",
    "push_to_hub",
]

HERE = Path(__file__).resolve().parent
METHODS_YAML = HERE / "methods.yaml"
TEMPLATE = HERE / "template.md"
RENDERED_DIR = HERE / "rendered"


class CardError(ValueError):
    """A card cannot be rendered or pushed (unknown method, bad eval JSON, offline, not logged in...)."""


class NoResultsError(CardError):
    """The evaluator JSON is fine but holds no results for the method asked for."""


# ---------------------------------------------------------------------------------------------- facts
def _all_facts() -> dict[str, Any]:
    with open(METHODS_YAML, encoding="utf-8") as f:
        return yaml.safe_load(f)


def card_methods() -> list[str]:
    """Methods that have a card (every method with facts in methods.yaml)."""
    return [k for k in _all_facts() if k != "common"]


def method_facts(method: str) -> dict[str, Any]:
    """The methods.yaml entry of ``method`` merged over the ``common`` block."""
    facts = _all_facts()
    name = method.strip().lower()
    if name not in facts or name == "common":
        raise CardError(f"no card facts for method {method!r}; known: {', '.join(card_methods())}")
    merged = dict(facts.get("common", {}))
    merged.update(facts[name])
    merged["method"] = name
    return merged


def _registry_view(method: str) -> dict[str, Any]:
    """What the zoo's registry knows about ``method`` (empty when it is not registered/importable)."""
    try:
        from zoo import registry

        if method not in registry.list_methods():
            return {}
        cls = registry.get_method_class(method)
        entry = registry._entry(method)
    except Exception:  # noqa: BLE001 - the card must render even when the method module is unfinished
        return {}
    view: dict[str, Any] = {
        "default_repo": entry.default_repo,
        "default_revision": entry.default_revision,
        "resolution": getattr(cls, "resolution", None),
        "uses_key": getattr(cls, "uses_key", None),
        "reversible": getattr(cls, "reversible", None),
        "controls": [{"name": c.name, "default": c.default, "kind": c.kind} for c in getattr(cls, "controls", ())],
    }
    stages = getattr(cls, "stages", None)
    if stages:
        view["stages"] = [int(s) for s in stages]
    return view


# ---------------------------------------------------------------------------------------------- eval JSON
def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def _flatten_metrics(metrics: Mapping[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """Measured numbers of a (nested) metrics object as rows. An object with a ``value`` key is one
    entry (``std``, ``n``, ``ci95``, ``unit``, ``description`` as training/evaluate.py writes them);
    an entry whose value is not a number (e.g. ``"status": "unavailable: ..."``) is left out, and so are
    counts such as ``num_keys`` (settings, not measurements)."""
    rows: list[dict[str, Any]] = []
    for key, value in metrics.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if _is_number(value):
            if str(key).startswith("num_"):
                continue
            rows.append({"key": name, "value": float(value), "description": "", "unit": ""})
        elif isinstance(value, Mapping) and "value" in value:
            if not _is_number(value["value"]):
                continue  # unavailable / not measured: never shown as a number
            ci = value.get("ci95")
            rows.append(
                {
                    "key": name,
                    "value": float(value["value"]),
                    "description": str(value.get("description", "") or ""),
                    "unit": str(value.get("unit", "") or ""),
                    "std": float(value["std"]) if _is_number(value.get("std")) else None,
                    "n": int(value["n"]) if _is_number(value.get("n")) else None,
                    "ci95": [float(c) for c in ci] if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(map(_is_number, ci)) else None,
                }
            )
        elif isinstance(value, Mapping):
            rows.extend(_flatten_metrics(value, name))
        # strings, lists, None, NaN: not a measured number, not shown
    return rows


def _format_value(row: dict[str, Any]) -> str:
    v = row["value"]
    text = f"{v:.4g}" if abs(v) < 1e5 else f"{v:.4e}"
    if row.get("ci95"):
        lo, hi = row["ci95"]
        text += f" [{lo:.3g}, {hi:.3g}]"
    elif row.get("std") is not None and (row.get("n") or 0) > 1:
        text += f" ± {row['std']:.2g}"
    if row.get("unit"):
        text += f" {row['unit']}"
    if row.get("n"):
        text += f" (n={row['n']})"
    return text


def _dataset_info(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {"name": "unspecified data", "hub_id": None, "split": None, "text": "unspecified data"}
    if isinstance(raw, str):
        return {"name": raw, "hub_id": None, "split": None, "text": raw}
    if not isinstance(raw, Mapping):
        raise CardError(f"eval JSON: 'dataset' must be a string or an object, got {type(raw).__name__}")
    name = str(raw.get("name") or raw.get("hub_id") or raw.get("source") or "unspecified data")
    hub_id = raw.get("hub_id") or raw.get("repo_id")
    split = raw.get("split")
    parts = [name]
    if hub_id and hub_id != name:
        parts.append(f"Hub dataset `{hub_id}`")
    if split:
        parts.append(f"split `{split}`")
    n = raw.get("num_images", raw.get("n_images", raw.get("num_faces")))
    if _is_number(n):
        parts.append(f"{int(n)} {'faces' if 'num_faces' in raw else 'images'}")
    text = ", ".join(parts)
    if raw.get("description"):
        text += f" - {raw['description']}"
    return {"name": name, "hub_id": hub_id, "split": split, "text": text}


def _entries(data: Any) -> list[dict[str, Any]]:
    if isinstance(data, list):
        out: list[dict[str, Any]] = []
        for item in data:
            out.extend(_entries(item))
        return out
    if not isinstance(data, Mapping):
        raise CardError(f"eval JSON must be an object or a list of objects, got {type(data).__name__}")
    if "results" in data and isinstance(data["results"], list):
        shared = {k: v for k, v in data.items() if k != "results"}
        return [{**shared, **e} for e in _entries(data["results"])]
    if "methods" in data and isinstance(data["methods"], Mapping):
        shared = {k: v for k, v in data.items() if k != "methods"}
        return [{**shared, **dict(v), "method": k} for k, v in data["methods"].items()]
    return [dict(data)]


def load_evaluations(eval_json: str | os.PathLike | Mapping | list | None, method: str) -> list[dict[str, Any]]:
    """The evaluations of ``method`` in an evaluator JSON (path or parsed), normalised for the template.

    Returns [] for ``None``. Raises :class:`CardError` when the JSON holds entries but none for ``method``
    or none with a measured number.
    """
    if eval_json is None:
        return []
    source = None
    if isinstance(eval_json, (str, os.PathLike)):
        source = str(eval_json)
        try:
            with open(eval_json, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError as err:
            raise CardError(f"eval JSON not found: {eval_json}") from err
        except json.JSONDecodeError as err:
            raise CardError(f"eval JSON {eval_json} is not valid JSON: {err}") from err
    else:
        data = eval_json
    entries = _entries(data)
    mine = [e for e in entries if str(e.get("method", method)).strip().lower() == method]
    if not mine:
        found = sorted({str(e.get("method")) for e in entries})
        raise NoResultsError(f"eval JSON {source or ''} has no results for {method!r} (it has {found})")
    evaluations = []
    for e in mine:
        metrics = e.get("metrics")
        if not isinstance(metrics, Mapping):
            raise CardError(f"eval JSON entry for {method!r} has no 'metrics' object")
        rows = _flatten_metrics(metrics)
        descriptions = e.get("metric_descriptions") or {}
        for row in rows:
            row["description"] = (row["description"] or str(descriptions.get(row["key"], ""))).replace("|", "\\|")
            row["name"] = row["key"]
            row["value_text"] = _format_value(row)
        if not rows:
            continue
        ds = _dataset_info(e.get("dataset"))
        judges = e.get("judges")
        dataset_text = ds["text"]
        if judges:
            dataset_text += "; identity judges: " + ", ".join(map(str, judges if isinstance(judges, list) else [judges]))
        if isinstance(e.get("controls"), Mapping) and e["controls"]:
            dataset_text += "; controls: " + ", ".join(f"{k}={v}" for k, v in e["controls"].items())
        evaluations.append(
            {
                "dataset": ds,
                "dataset_text": dataset_text,
                "rows": rows,
                "command": e.get("command"),
                "date": e.get("date") or e.get("timestamp"),
                "device": e.get("device"),
                "source": source,
            }
        )
    if not evaluations:
        raise CardError(f"eval JSON {source or ''} has entries for {method!r} but no measured numbers")
    return evaluations


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "dataset"


def _eval_results(method: str, evaluations: list[dict[str, Any]]):
    from huggingface_hub import EvalResult

    results = []
    for ev in evaluations:
        ds = ev["dataset"]
        for row in ev["rows"]:
            results.append(
                EvalResult(
                    task_type="image-to-image",
                    task_name="Face de-identification",
                    dataset_type=ds["hub_id"] or _slug(ds["name"]),
                    dataset_name=ds["name"],
                    dataset_split=ds["split"],
                    metric_type=_slug(row["key"]).replace("-", "_"),
                    metric_name=row["key"],
                    metric_value=round(row["value"], 6),
                )
            )
    return results


# ---------------------------------------------------------------------------------------------- render
def _as_list(v: Any) -> list[str]:
    if v is None:
        return []
    return [v] if isinstance(v, str) else [str(x) for x in v]


def _summarise_train_info(info: Mapping[str, Any] | None) -> dict[str, Any]:
    """The facts of a ``training/train.py`` run worth a line on the card (never losses or paths)."""
    if not info:
        return {}
    out: dict[str, Any] = {}
    if info.get("stage") is not None:
        out["stage"] = info["stage"]
    if info.get("step") is not None:
        out["optimizer steps"] = f"{info['step']}" + (f" of {info['total_steps']}" if info.get("total_steps") else "")
    for key, label in (("images_seen", "images seen"), ("seed", "seed"), ("mixed_precision", "mixed precision"), ("num_processes", "processes")):
        if info.get(key) is not None:
            out[label] = info[key]
    cfg = info.get("config") if isinstance(info.get("config"), Mapping) else {}
    if cfg.get("resolution"):
        out["resolution"] = f"{cfg['resolution']} px"
    data = cfg.get("data") if isinstance(cfg.get("data"), Mapping) else {}
    source = data.get("source")
    if source == "hub" and data.get("name"):
        out["data"] = f"Hub dataset {data['name']}" + (f" ({data['split']})" if data.get("split") else "")
        out["datasets"] = [str(data["name"])]
    elif source == "synthetic":
        out["data"] = "synthetic faces from gan-face-generate (DCGAN trained on DigiFace-1M)"
    elif source == "folder":
        out["data"] = "a local folder of aligned face crops"
    return out


def _load_code(method: str, repo_id: str | None, default_repo: str | None) -> tuple[str, str]:
    if repo_id and repo_id != default_repo:
        code = f'from huggingface_hub import snapshot_download\n\nm = load("{method}", local_dir=snapshot_download("{repo_id}"))'
        return code, f"`{repo_id}`"
    if repo_id or default_repo:
        repo = repo_id or default_repo
        return f'm = load("{method}")   # weights: {repo} (HF_HUB_OFFLINE=1: local cache only)', f"`{repo}`"
    return f'm = load("{method}", local_dir="path/to/{method}-checkpoint")', "a local folder"


def render_card(
    method: str,
    eval_json: str | os.PathLike | Mapping | list | None = None,
    repo_id: str | None = None,
    *,
    training: Mapping[str, Any] | None = None,
    train_info: Mapping[str, Any] | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    extra_sections: Sequence[tuple[str, str]] = (),
) -> str:
    """Markdown text (YAML front matter + body) of ``method``'s Hub model card.

    ``eval_json``: the evaluator's JSON (path or parsed object) or None ("no measured results yet").
    ``repo_id``: the Hub repo the card is for (used in the loading snippet and the push command).
    ``training``: facts about the run, shown as a list; its keys ``datasets`` and
    ``base_model``/``base_models`` (Hub ids) are added to the metadata.
    ``train_info``: the trainer's ``train_info`` dict (stage, step, images seen, config...); summarised
    into ``training``. ``checkpoint_dir``: accepted for the trainer's call, not needed.
    ``extra_sections``: (heading, markdown) pairs of further measured results, shown after the evaluation
    (e.g. ``personal``'s table for every privacy level).
    """
    from huggingface_hub import ModelCard, ModelCardData

    del checkpoint_dir
    facts = method_facts(method)
    name = facts["method"]
    reg = _registry_view(name)
    evaluations = load_evaluations(eval_json, name)

    training = {**_summarise_train_info(train_info), **dict(training or {})}
    hub_datasets = _as_list(facts.get("hub_datasets")) + _as_list(training.pop("datasets", None))
    base_models = _as_list(facts.get("base_models")) + _as_list(training.pop("base_models", None)) + _as_list(training.pop("base_model", None))

    stage_names = {int(k): v for k, v in (facts.get("stage_names") or {}).items()}
    stage_numbers = reg.get("stages") or [int(s) for s in facts.get("stages", [1])]
    stages = [{"number": s, "name": stage_names.get(s, f"stage {s}")} for s in stage_numbers]

    reversible = bool(reg["reversible"]) if reg.get("reversible") is not None else bool(facts.get("reversible"))
    uses_key = reg["uses_key"] if reg.get("uses_key") is not None else ("key" in facts.get("controls", []))
    # controls in the code snippet only when the registry gives their real defaults
    extra_controls = [{"name": c["name"], "default": repr(c["default"])} for c in reg.get("controls", []) if c["name"] != "key"]

    card_data = ModelCardData(
        license=facts.get("license"),
        license_name=facts.get("license_name") if facts.get("license") == "other" else None,
        license_link=facts.get("license_link") if facts.get("license") == "other" else None,
        library_name=facts.get("library_name"),
        pipeline_tag=facts.get("pipeline_tag"),
        tags=list(dict.fromkeys(_as_list(facts.get("tags")) + [name] + (["reversible"] if reversible else []))),
        datasets=list(dict.fromkeys(hub_datasets)) or None,
        base_model=list(dict.fromkeys(base_models)) or None,
        model_name=f"face-deid-zoo-{name}" if evaluations else None,
        eval_results=_eval_results(name, evaluations) or None,
    )
    load_code, load_source = _load_code(name, repo_id, reg.get("default_repo"))
    t = re.search(r"title\s*=\s*\{(.+)\},\s*\n", facts["bibtex"])
    paper_ref = f"*{t.group(1).replace('{', '').replace('}', '')}*" if t else facts["title"]
    m = re.search(r"eprint\s*=\s*\{([^}]+)\}", facts["bibtex"])
    if m:
        paper_ref += f", arXiv:{m.group(1)} (https://arxiv.org/abs/{m.group(1)})"
    else:
        b = re.search(r"booktitle\s*=\s*\{(.+)\},\s*\n", facts["bibtex"])
        y = re.search(r"year\s*=\s*\{(\d{4})\}", facts["bibtex"])
        paper_ref += "".join([f", {b.group(1)}" if b else "", f", {y.group(1)}" if y else ""])
    card = ModelCard.from_template(
        card_data,
        template_path=str(TEMPLATE),
        method=name,
        title=facts["title"],
        summary=facts["summary"],
        description=facts["description"].strip(),
        paper_ref=paper_ref,
        reversible=reversible,
        uses_key=uses_key,
        extra_controls=extra_controls,
        control_help=facts.get("control_help", ""),
        resolution=reg.get("resolution") or 256,
        load_code=load_code,
        load_source=load_source,
        repo_id=repo_id,
        stages=stages,
        built_from=facts.get("built_from", []),
        paper_datasets=facts.get("paper_datasets", ""),
        training=training,
        evaluations=evaluations,
        extra_sections=[{"title": t, "body": b.strip()} for t, b in extra_sections],
        eval_source=evaluations[0]["source"] if evaluations else None,
        limitations=facts.get("limitations", []),
        licence_notes=facts.get("licence_notes", "").strip(),
        bibtex=facts["bibtex"].strip(),
    )
    text = re.sub(r"\n{3,}", "\n\n", str(card)).rstrip() + "\n"
    ModelCard(text)  # re-parse: raises if the front matter is not valid YAML metadata
    return text


def write_card(method: str, out_dir: str | os.PathLike = RENDERED_DIR, **kwargs: Any) -> Path:
    """Render ``method``'s card into ``out_dir/<method>.md`` and return the path."""
    text = render_card(method, **kwargs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{method}.md"
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------- push
def push_to_hub(
    method: str,
    repo_id: str,
    folder: str | os.PathLike,
    *,
    eval_json: str | os.PathLike | Mapping | list | None = None,
    training: Mapping[str, Any] | None = None,
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    token: str | None = None,
) -> str:
    """Upload a checkpoint folder with its rendered card as README.md; returns the commit URL.

    Every check that can fail runs before anything is written or uploaded: the folder is a checkpoint
    of ``method`` (``method.json``), the card renders, the Hub is not disabled (``HF_HUB_OFFLINE``), a
    token exists, and the Hub answers.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CardError(f"checkpoint folder not found: {folder}")
    index = folder / "method.json"
    if not index.is_file():
        raise CardError(f"{folder} is not a zoo checkpoint: it has no method.json (save it with method.save_pretrained)")
    try:
        saved_method = json.loads(index.read_text(encoding="utf-8")).get("method")
    except json.JSONDecodeError as err:
        raise CardError(f"{index} is not valid JSON: {err}") from err
    if saved_method and saved_method != method:
        raise CardError(f"{folder} holds a {saved_method!r} checkpoint, not {method!r}")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*", repo_id or ""):
        raise CardError(f"--repo must look like 'owner/name', got {repo_id!r}")

    from huggingface_hub import CommitOperationAdd, HfApi, get_token

    from zoo import hub as zoo_hub

    if zoo_hub.hub_offline():
        raise CardError("cannot push: the Hugging Face Hub is disabled here (HF_HUB_OFFLINE=1); nothing was uploaded")
    token = token or get_token()
    if not token:
        raise CardError("cannot push: no Hugging Face token (run `hf auth login` or set HF_TOKEN); nothing was uploaded")
    text = render_card(method, eval_json, repo_id, training=training)
    files = _checkpoint_files(folder)
    api = HfApi(token=token)
    try:
        api.whoami()
    except Exception as err:  # noqa: BLE001 - network, auth: say so before uploading anything
        raise CardError(f"cannot push: the Hub did not accept the token or cannot be reached ({type(err).__name__}: {err}); nothing was uploaded") from err

    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    if revision:
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    operations = [CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=text.encode("utf-8"))]
    operations += [CommitOperationAdd(path_in_repo=rel, path_or_fileobj=str(path)) for rel, path in files]
    info = api.create_commit(
        repo_id,
        operations=operations,
        revision=revision,
        commit_message=commit_message or f"{method}: checkpoint and model card",
    )
    return str(getattr(info, "commit_url", info))


_SKIP_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".bin")


def _checkpoint_files(folder: Path) -> list[tuple[str, Path]]:
    """(path in repo, local path) of every file to upload: safetensors/JSON/text, never pickles. A component that
    refers to a shared network (:func:`zoo.hub.link_shared`) is uploaded as that network's files."""
    from zoo.hub import checkpoint_files

    files = []
    for rel, path in checkpoint_files(folder):
        if rel == "README.md" or rel.startswith((".", "state/")) or "/." in rel:
            continue
        if path.suffix.lower() in _SKIP_SUFFIXES:
            continue
        files.append((rel, path))
    if not any(rel.endswith(".safetensors") for rel, _ in files):
        raise CardError(f"{folder} has no .safetensors file to upload")
    return files
