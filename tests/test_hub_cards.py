"""Hub model cards (hub_cards/): rendered from the template, methods.yaml and the evaluator's JSON, and
parsed back by huggingface_hub's own ModelCard / ModelCardData parser."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from huggingface_hub import ModelCard  # noqa: E402

import hub_cards  # noqa: E402
from hub_cards import CardError, NoResultsError, card_methods, render_card  # noqa: E402
from hub_cards.__main__ import main as cli  # noqa: E402

FACTS = yaml.safe_load(hub_cards.METHODS_YAML.read_text())
PAPER_METHODS = ["hford", "dbaf", "ifadit", "ideudemon", "personal"]


def _eval_json(path: Path, method: str, seed: int = 0) -> dict:
    """An evaluator-style JSON with numbers drawn here (the test checks they reach the card unchanged)."""
    rng = np.random.default_rng(seed)
    data = {
        "method": method,
        "dataset": {"name": "bundled test photos", "hub_id": None, "split": "test", "num_images": int(rng.integers(5, 50))},
        "judges": ["sface", "dlib"],
        "command": f"python training/evaluate.py --method {method} --out eval.json",
        "metrics": {
            "id_similarity_sface": float(rng.uniform(0, 1)),
            "recover_psnr": {"value": float(rng.uniform(20, 40)), "unit": "dB", "description": "PSNR of the recovered face"},
            "wrong_key": {"id_similarity_sface": float(rng.uniform(0, 1))},
            "notes": "not a number: must not appear as a metric",
        },
    }
    path.write_text(json.dumps(data))
    return data


def test_every_paper_method_has_a_card():
    assert sorted(card_methods()) == sorted(PAPER_METHODS)


@pytest.mark.parametrize("method", PAPER_METHODS)
def test_card_without_eval_parses_and_says_no_results(method):
    text = render_card(method)
    card = ModelCard(text)  # huggingface_hub's parser: YAML front matter + body
    facts = FACTS[method]
    data = card.data
    assert data.license == facts["license"]
    if facts["license"] == "other":
        assert data.license_name == facts["license_name"] and data.license_link == facts["license_link"]
    assert data.library_name == FACTS["common"]["library_name"]
    assert method in data.tags and set(FACTS["common"]["tags"]) <= set(data.tags)
    assert ("reversible" in data.tags) == facts["reversible"]
    assert data.eval_results is None and "model-index" not in text  # no numbers without an eval file
    body = card.text
    assert "No measured results yet" in body
    assert f'load("{method}"' in body
    for stage in facts["stages"]:
        assert f"training/train.py --method {method} --stage {stage} --config training/configs/{method}.yaml" in body
    first_paragraph = facts["description"].strip().split("\n\n")[0].split("\n")[0]
    assert first_paragraph in body  # the two-paragraph description
    assert facts["bibtex"].strip().splitlines()[0] in body and "```bibtex" in body
    assert "non-commercial" in body.lower() and "CC BY-NC-SA 4.0" in body  # FFHQ / StyleGAN licences
    assert ("recover(" in body) == facts["reversible"]


def test_card_with_eval_json_carries_exactly_the_measured_numbers(tmp_path):
    data = _eval_json(tmp_path / "eval.json", "dbaf", seed=1)
    text = render_card("dbaf", tmp_path / "eval.json", repo_id="someone/dbaf-test")
    card = ModelCard(text)
    results = {r.metric_name: r for r in card.data.eval_results}
    m = data["metrics"]
    expected = {
        "id_similarity_sface": m["id_similarity_sface"],
        "recover_psnr": m["recover_psnr"]["value"],
        "wrong_key/id_similarity_sface": m["wrong_key"]["id_similarity_sface"],
    }
    assert set(results) == set(expected)  # the text entry is not a metric
    for name, value in expected.items():
        r = results[name]
        assert r.metric_value == pytest.approx(value, abs=1e-6)
        assert r.dataset_name == "bundled test photos" and r.dataset_split == "test"
        assert r.task_type == "image-to-image"
        assert f"| {name} | {value:.4g}" in card.text  # the table in the body
    assert "No measured results yet" not in card.text
    assert data["command"] in card.text and "sface, dlib" in card.text
    assert 'snapshot_download("someone/dbaf-test")' in card.text  # how to load from this repo
    assert "--push-to-hub someone/dbaf-test" in card.text
    assert card.data.model_name == "face-deid-zoo-dbaf"


def test_reads_the_evaluators_own_json():
    """The layout training/evaluate.py writes: nested entries with value/ci95/n, and unavailable entries."""
    import torch

    import zoo
    from training.evaluate import evaluate
    from zoo.synthetic import synthetic_faces_uint8

    torch.manual_seed(0)
    images = synthetic_faces_uint8(4, seed=0, resolution=128)
    result = evaluate(zoo.load("blur"), images, judges=("sface",), robustness=False, detection=False, landmarks=False, lpips=False)
    result = json.loads(json.dumps(result, default=str))  # as read back from eval.json
    (ev,) = hub_cards.load_evaluations(result, "blur")
    rows = {r["key"]: r for r in ev["rows"]}
    deid = result["metrics"]["privacy"]["sface"]["deid_rate"]
    assert rows["privacy/sface/deid_rate"]["value"] == deid["value"]
    assert rows["privacy/sface/deid_rate"]["value_text"].startswith(f"{deid['value']:.4g} [{deid['ci95'][0]:.3g}, {deid['ci95'][1]:.3g}]")
    assert rows["quality/psnr"]["value"] == result["metrics"]["quality"]["psnr"]["value"]
    assert result["metrics"]["quality"]["lpips"]["value"] is None and not any(k.startswith("quality/lpips") for k in rows)
    assert not any(k.startswith("quality/fid") for k in rows)  # unavailable: never shown as a number
    assert all(np.isfinite(r["value"]) for r in rows.values())


def test_eval_json_for_another_method_or_broken_is_refused(tmp_path):
    _eval_json(tmp_path / "hford.json", "hford")
    with pytest.raises(NoResultsError, match="no results for 'dbaf'"):
        render_card("dbaf", tmp_path / "hford.json")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(CardError, match="not valid JSON"):
        render_card("dbaf", tmp_path / "broken.json")
    with pytest.raises(CardError, match="no card facts"):
        render_card("not-a-method")


def test_training_info_adds_metadata():
    text = render_card("personal", training={"datasets": ["someone/faces"], "base_model": "someone/arcface", "steps": 1234})
    card = ModelCard(text)
    assert card.data.datasets == ["someone/faces"] and card.data.base_model == ["someone/arcface"]
    assert "- steps: 1234" in card.text


def test_cli_render_all_with_one_methods_eval(tmp_path, capsys):
    data = _eval_json(tmp_path / "eval.json", "ifadit", seed=2)
    out = tmp_path / "cards"
    assert cli(["render", "--eval-json", str(tmp_path / "eval.json"), "--out", str(out)]) == 0
    assert sorted(p.stem for p in out.glob("*.md")) == sorted(PAPER_METHODS)
    for method in PAPER_METHODS:
        card = ModelCard((out / f"{method}.md").read_text())
        if method == "ifadit":
            assert card.data.eval_results[0].metric_value == pytest.approx(data["metrics"]["id_similarity_sface"], abs=1e-6)
        else:
            assert card.data.eval_results is None
    assert cli(["render", "--method", "dbaf", "--eval-json", str(tmp_path / "eval.json"), "--out", str(out)]) == 2
    assert "no results for 'dbaf'" in capsys.readouterr().err


def _checkpoint(folder: Path, method: str) -> Path:
    import torch
    from safetensors.torch import save_file

    (folder / "net").mkdir(parents=True)
    (folder / "method.json").write_text(json.dumps({"method": method, "config": {}, "components": {}}))
    save_file({"w": torch.zeros(2)}, str(folder / "net" / "model.safetensors"))
    return folder


def test_push_fails_clearly_before_uploading(tmp_path, monkeypatch, capsys):
    from huggingface_hub import HfApi

    def no_upload(*args, **kwargs):
        raise AssertionError("must not touch the Hub")

    for name in ("create_repo", "create_commit", "upload_folder", "whoami"):
        monkeypatch.setattr(HfApi, name, no_upload)
    ckpt = _checkpoint(tmp_path / "ckpt", "dbaf")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CardError, match="HF_HUB_OFFLINE"):
        hub_cards.push_to_hub("dbaf", "someone/dbaf", ckpt)
    assert cli(["push", "--method", "dbaf", "--repo", "someone/dbaf", "--folder", str(ckpt)]) == 2
    assert "nothing was uploaded" in capsys.readouterr().err
    with pytest.raises(CardError, match="not 'hford'"):
        hub_cards.push_to_hub("hford", "someone/hford", ckpt)
    with pytest.raises(CardError, match="not found"):
        hub_cards.push_to_hub("dbaf", "someone/dbaf", tmp_path / "missing")
    with pytest.raises(CardError, match="owner/name"):
        hub_cards.push_to_hub("dbaf", "no-slash", ckpt)
    # online but without a token: still refused before any upload
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr("zoo.hub.hub_offline", lambda: False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    with pytest.raises(CardError, match="no Hugging Face token"):
        hub_cards.push_to_hub("dbaf", "someone/dbaf", ckpt)


def test_one_hub_offline_rule(monkeypatch):
    """zoo.hub.hub_offline (used by loading, train --push-to-hub and the card push): offline when
    HF_HUB_OFFLINE is truthy now, or was when huggingface_hub was imported."""
    from huggingface_hub import constants

    from zoo.hub import hub_offline

    assert not hasattr(hub_cards, "_hub_offline")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for value, offline in (("1", True), ("true", True), (" ON ", True), ("yes", True), ("0", False), ("", False), ("off", False)):
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        assert hub_offline() is offline, value
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # set at import, unset since: huggingface_hub stays offline
    assert hub_offline() is True


def test_rendered_cards_are_current():
    """hub_cards/rendered/ holds what the renderer makes now (run `python -m hub_cards render` after edits)."""
    for method in PAPER_METHODS:
        path = hub_cards.RENDERED_DIR / f"{method}.md"
        assert path.is_file(), f"{path} missing: run python -m hub_cards render"
        assert path.read_text() == render_card(method), f"{path} is stale: run python -m hub_cards render"


def test_extra_sections_reach_the_card(tmp_path):
    """Further measured tables (personal's every privacy level) come after the evaluation, verbatim."""
    _eval_json(tmp_path / "eval.json", "personal", seed=3)
    table = "| d | anonymized, same person |\n|---|---|\n| 0 | 0.4217 |\n| 9 | 0.0123 |"
    text = render_card("personal", tmp_path / "eval.json", extra_sections=[("Every privacy level", table)])
    card = ModelCard(text)
    assert "### Every privacy level" in card.text and table in card.text
    assert card.text.index("## Evaluation") < card.text.index(table) < card.text.index("## Limitations")
    assert "### Every privacy level" not in render_card("personal", tmp_path / "eval.json")


@pytest.mark.parametrize("method", ["personal", "ifadit", "dbaf", "hford", "ideudemon"])
def test_bundled_demo_cards_are_current(method, tmp_path):
    """zoo/weights/<method>/README.md is what training.bundle renders now from the saved evaluation
    (`python -m training.bundle --method M --card-only` after a template or methods.yaml edit), read from the results
    file its bundle command wrote (ideudemon's names one with --results)."""
    from training.bundle import REPO, recard

    weights = REPO / "zoo" / "weights" / method
    (tmp_path / "method.json").write_text((weights / "method.json").read_text())
    text = recard(method, tmp_path).read_text()
    assert text == (weights / "README.md").read_text(), f"{weights}/README.md is stale: python -m training.bundle --method {method} --card-only"
    index = json.loads((tmp_path / "method.json").read_text())
    assert index == json.loads((weights / "method.json").read_text()), f"{weights}/method.json's evaluation is stale: same command"
    if method == "personal":  # the table for every level d = 0..9 (issue 15) is in the card
        assert all(f"\n| {d} | " in text for d in range(10))


def test_recard_refuses_what_bundle_did_not_write(tmp_path):
    from training.bundle import recard

    with pytest.raises(FileNotFoundError, match="bundle the checkpoint first"):
        recard("dbaf", tmp_path)
    (tmp_path / "method.json").write_text("{}")
    (tmp_path / "eval.json").write_text("[]")
    with pytest.raises(ValueError, match="not written by training.bundle"):
        recard("dbaf", tmp_path, tmp_path / "eval.json")


def test_default_tier_evaluation_leads_the_card_and_method_json(tmp_path, monkeypatch):
    """A W+ checkpoint's card and method.json lead with the default tier's measured rates (generated faces, whole
    photos per split), each number as the results files hold it; the bundle evaluator's 64 px summary stays beside
    them under ``dcgan_tier``, also when the refresh runs twice."""
    import training.bundle as bundle
    from training.bundle import REPO, recard

    rng = np.random.default_rng(7)

    def rate(n):
        k = int(rng.integers(0, n + 1))
        return {"k": k, "n": n, "rate": round(k / n, 3), "95ci": [0.01, 0.99]}

    row = {
        m: rate(12)
        for m in (
            "anonymized_same_dlib anonymized_same_sface anonymized_same_faceres keys_pairwise_same_dlib anonymized_detected_dlib "
            "recovered_carried_same_dlib recovered_carried_nearest_own recovered_pixels_same_dlib recovered_jpeg90_pixels_same_dlib "
            "wrong_key_same_dlib"
        ).split()
    }
    row.update({k: float(rng.uniform(1, 30)) for k in ("yaw_change_deg_median", "yaw_change_deg_p90", "pitch_change_deg_median", "pitch_change_deg_p90")})
    row.update(recovered_carried_psnr_db_median=31.5, anonymized_psnr_db_median=16.25, anonymize_s_per_face=0.3, recover_s_per_face=0.3)
    wplus = {
        "command": "python -m benchmarks.wplus_methods --sets generated",
        "keys": 4,
        "sets": {"generated": {"n": 12, "chance_floor_dlib": rate(12), "dbaf": row}},
    }
    photos = {
        "command": "python -m benchmarks.wrong_keys --methods hford --keys 2 ; python -m benchmarks.wrong_keys --methods dbaf --keys 2",
        "methods": {
            "dbaf": {
                split: {
                    "faces": 9,
                    "anonymized_matched": rate(9),
                    "right_key_matched": rate(9),
                    "face_keys_matched": rate(18),
                    "jpeg_face_keys_matched": rate(9),
                    "guard_blurred": 2,
                }
                for split in ("tuning", "held-out")
            }
        },
    }
    (tmp_path / "wplus.json").write_text(json.dumps(wplus))
    (tmp_path / "photos.json").write_text(json.dumps(photos))
    held_out = {"faces": 79, "anonymized_matched": rate(79), "right_key_matched": rate(79), "face_keys_matched": rate(158), "guard_blurred": 3}
    shipped_run = {"command": "python -m benchmarks.wrong_keys --methods dbaf --split held-out", "methods": {"dbaf": {"held-out": held_out}}}
    (tmp_path / "photos_shipped.json").write_text(json.dumps(shipped_run))
    monkeypatch.setattr(bundle, "WPLUS_RESULTS", tmp_path / "wplus.json")
    # the shipped setting's run measures the held-out split only: the tuning split comes from the other file, labelled
    monkeypatch.setattr(
        bundle, "PHOTO_RESULTS", ((tmp_path / "absent.json", ""), (tmp_path / "photos_shipped.json", ""), (tmp_path / "photos.json", "faster fit"))
    )
    shipped = json.loads((REPO / "zoo" / "weights" / "dbaf" / "method.json").read_text())
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "method.json").write_text(json.dumps(shipped))
    recard("dbaf", tmp_path / "ckpt")
    text = recard("dbaf", tmp_path / "ckpt").read_text()  # twice: the 64 px summary is kept, not nested again
    ev = json.loads((tmp_path / "ckpt" / "method.json").read_text())["evaluation"]
    assert ev["tier"].startswith("FFHQ-grade W+")
    assert ev["generated"]["anonymized_same_person"]["value"] == row["anonymized_same_dlib"]["rate"]
    assert ev["generated"]["chance_floor_same_person"]["n"] == 12
    assert ev["real_held_out"]["recovery_same_person"]["value"] == held_out["right_key_matched"]["rate"]
    assert ev["real_held_out"]["recovery_same_person"]["n"] == 79 and ev["real_held_out"]["command"] == shipped_run["command"]
    assert "faster fit" not in ev["real_held_out"]["data"] and ev["real_tuning"]["data"].endswith("; faster fit")
    assert ev["real_tuning"]["recovery_same_person"]["value"] == photos["methods"]["dbaf"]["tuning"]["right_key_matched"]["rate"]
    assert ev["real_tuning"]["command"] == "python -m benchmarks.wrong_keys --methods dbaf --keys 2"  # the method's own run
    dcgan = shipped["evaluation"].get("dcgan_tier") or shipped["evaluation"]
    assert ev["dcgan_tier"]["generated"] == dcgan["generated"] and "dcgan_tier" not in ev["dcgan_tier"]
    evaluation = text[text.index("## Evaluation") :]
    first_wplus = evaluation.index("FFHQ-grade W+ (the default): the generator's own faces")
    assert first_wplus < evaluation.index("FFHQ-grade W+ (the default): held-out real photos") < evaluation.index("64 px DCGAN tier")
    assert "| recovery/psnr | 31.5 dB |" in evaluation and "| utility/anonymized_psnr | 16.25 dB |" in evaluation
