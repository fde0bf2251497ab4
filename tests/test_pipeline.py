"""The whole pipeline, tiny (--quick), end to end through its command line."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rpg_base.errors import InputError
from rpg_base.provenance import git_revision
from rpg_worldmodel.config import load_world_model_config
from rpg_worldmodel.envs.whole_games import JUDGING_POLICIES
from rpg_worldmodel.pipeline import PipelineSettings, resolve_expert, run_pipeline, training_config


def _strip_volatile(metrics: dict) -> dict:
    """Drop what legitimately differs between two identical runs (timestamps, timings, paths)."""
    metrics = json.loads(json.dumps(metrics))
    metrics.pop("provenance", None)
    pipeline = metrics.get("pipeline", {})
    pipeline.pop("timings_s", None)
    for rec in pipeline.get("recorded", {}).values():
        for key in [k for k in rec if "seconds" in k or k.endswith("_s") or "per_s" in k]:
            rec.pop(key)
    return metrics


def _differences(a, b, path=""):
    """Paths where two JSON trees differ (for a readable failure message)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in
                (_differences(a.get(k), b.get(k), f"{path}/{k}") if k in a and k in b else [f"{path}/{k}"])]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in _differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pipeline") / "quick"
    proc = subprocess.run([sys.executable, "-m", "rpg_worldmodel.pipeline", "--quick", "--seeds", "0", "1",
                           "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc


def test_quick_pipeline_prints_the_report_path_last(quick_run):
    out, proc = quick_run
    last = proc.stdout.strip().splitlines()[-1]
    assert Path(last).resolve() == (out / "report.md").resolve()
    for stage in ("experts", "record", "train", "evaluate", "transfer", "masking probes", "seeds (0, 1)",
                  "report"):
        assert f"] {stage}" in proc.stdout, stage


def test_quick_pipeline_outputs(quick_run):
    out, _ = quick_run
    metrics = json.loads((out / "metrics.json").read_text())
    main = metrics["files"][metrics["self"]]
    assert main["held_out"] and main["selection"].startswith("test split")
    for predictor in ("model", "copy", "motion_oracle"):
        for figure in ("view_ce", "cell_acc", "changed_acc", "f1_gem", "f1_wall", "f1_agent"):
            iv = main["predictors"][predictor][figure]
            if iv["value"] is not None and iv["lo"] is not None:
                assert iv["lo"] - 1e-9 <= iv["value"] <= iv["hi"] + 1e-9, (predictor, figure, iv)
    for predictor in ("model", "majority_action"):
        assert main["predictors"][predictor]["action_acc"]["value"] is not None
    assert metrics["pipeline"]["git_revision"] == git_revision()  # read as the run starts
    # the games of random play train the views, not the action head
    assert load_world_model_config(out / "run" / "config.yaml").data.unmodelled_policies == ("random",)
    assert set(main["model_minus"]) == {"copy", "motion_oracle", "memory_oracle", "majority_action",
                                        "previous_action", "reward_rule"}
    for predictor in ("model", "reward_rule"):
        figures = main["predictors"][predictor]
        assert {"reward_ce", "reward_acc", "return_mae", "reward_recall_gem"} <= set(figures)
    assert "reward_acc_vs_reward_rule" in main["quality_checks"]
    (cross_key, transfer), = metrics["transfer"].items()
    assert cross_key in metrics["files"] and cross_key != metrics["self"]
    gap = transfer["relative_gap"]["total_ce"]
    self_ce = transfer["model"]["self"]["total_ce"]["value"]
    cross_ce = transfer["model"]["cross"]["total_ce"]["value"]
    assert gap["value"] == pytest.approx((cross_ce - self_ce) / self_ce)
    table = metrics["masking"]["table"]
    assert set(table) == {"none", "random_cells"}  # rows: train masks
    assert all(set(row) == {"none", "random_cells", "gem"} for row in table.values())  # columns: eval masks
    # The probe model is the main model fine-tuned with the mask, so the rows share their start.
    main_checkpoint = metrics["checkpoint"]
    assert metrics["masking"]["fine_tuned_from"] == {"random_cells": main_checkpoint}
    probe = json.loads((Path(metrics["pipeline"]["masked_checkpoint"]) / "meta.json").read_text())
    assert probe["init_from"] == main_checkpoint and probe["config"]["train"]["train_mask"] == "random_cells"
    assert probe["splits"] == json.loads((Path(main_checkpoint) / "meta.json").read_text())["splits"]
    for name in ("entity_f1.png", "view_strip.png", "learning_curves.png", "masking.png"):
        assert (out / name).stat().st_size > 1000, name
    transfer_png = list(out.glob("transfer_*.png"))
    assert len(transfer_png) == 1
    report = (out / "report.md").read_text()
    pngs = ("entity_f1.png", "view_strip.png", "learning_curves.png", "masking.png", transfer_png[0].name)
    for name in pngs:
        assert f"]({name})" in report, name
    for section in ("## Held-out table", "## Cross-agent transfer", "## Masking probes"):
        assert section in report
    assert "| random_cells (fine-tuned " in report and f"started from `{main_checkpoint}`" in report
    # The dream over whole games, beside the real game: the real games score 1.0 exactly, the measures
    # are shares with intervals, and the report carries them.
    dream = metrics["pipeline"]["dream_fidelity"]
    assert set(dream["policies"]) == set(dream["argmax"]) == set(JUDGING_POLICIES)
    for row in [*dream["policies"].values(), *dream["argmax"].values()]:
        assert row["real"]["frame_validity"]["value"] == 1.0 == row["real"]["geometric_consistency"]["value"]
        valid = row["imagined"]["frame_validity"]
        assert 0.0 <= valid["lo"] <= valid["value"] <= valid["hi"] <= 1.0 and valid["total"] > 0
        assert len(row["validity_by_turn"]) == valid["total"] // dream["worlds"]
    assert "## The dream over whole games" in report and "- greedy: valid frames " in report
    assert "At arg-max" in report and "- dream: valid frames " in report
    rounds = [dream[key]["greedy"]["sample_rounds"] for key in ("policies", "argmax")]
    assert rounds[0] == rounds[1] is not None  # the arg-max view is decided in the draw's rounds too


def test_quick_pipeline_judges_whole_dreams_and_their_inhabitants(quick_run):
    """One room and one map of its own from the first turn to the last: exactly 1 for the real games;
    co-players and items in view beside the real game's; all in metrics.json and the report's table."""
    out, _ = quick_run
    dream = json.loads((out / "metrics.json").read_text())["pipeline"]["dream_fidelity"]
    for row in [*dream["policies"].values(), *dream["argmax"].values()]:
        for whole in ("room_games", "room_frames", "map_games", "map_frames"):
            assert row["real"][whole]["value"] == 1.0 and 0.0 <= row["imagined"][whole]["value"] <= 1.0
        assert row["real"]["co_players"]["total"] > 0 and "co_players" in row["inhabitants_vs_real"]
    report = (out / "report.md").read_text()
    assert "| dream | room_games | room_frames | map_games |" in report
    assert "| argmax/wall-follower | " in report and "one room: " in report


def test_quick_pipeline_reports_every_headline_figure_across_seeds(quick_run):
    out, proc = quick_run
    metrics = json.loads((out / "metrics.json").read_text())
    seeds = metrics["seeds"]
    assert seeds["seeds"] == [0, 1] and seeds["runs"] == [str(out / "run"), str(out / "run_seed_1")]
    assert (out / "run_seed_1" / "checkpoints" / "best.json").is_file()
    main = metrics["files"][metrics["self"]]["predictors"]["model"]
    for figure in ("view_ce", "action_acc", "f1_items", "reward_acc", "total_ce"):
        row = seeds["self"][figure]
        assert len(row["per_seed"]) == 2
        assert row["per_seed"][0] == pytest.approx(main[figure]["value"])  # seed 0 is the detailed model
        assert row["value"] == pytest.approx(np.mean(row["per_seed"]))
        assert row["lo"] <= row["value"] <= row["hi"]
    assert seeds["self"]["view_ce"]["per_seed"][0] != seeds["self"]["view_ce"]["per_seed"][1]
    assert {"total_ce", "view_ce"} <= set(seeds["transfer_gap"]) and "view_ce" in seeds["cross"]
    report = (out / "report.md").read_text()
    assert "## Across training seeds" in report and "](seeds.png)" in report
    assert (out / "seeds.png").stat().st_size > 1000
    assert "across seeds 0, 1: view_ce" in proc.stdout
    assert "using " in proc.stdout and "best by validation loss" in proc.stdout


@pytest.mark.slow
def test_quick_pipeline_is_deterministic(quick_run, tmp_path):
    out, _ = quick_run
    again = tmp_path / "quick"
    settings = PipelineSettings.quick_settings(out=str(again))
    settings.extra_seeds = (1,)
    report = run_pipeline(settings)  # in-process this time
    assert report == again / "report.md"
    first = _strip_volatile(json.loads((out / "metrics.json").read_text()))
    second = _strip_volatile(json.loads((again / "metrics.json").read_text()))
    first = json.loads(json.dumps(first).replace(str(out), "OUT"))
    second = json.loads(json.dumps(second).replace(str(again), "OUT"))
    assert _differences(first, second) == []
    with pytest.raises(FileExistsError, match="--overwrite"):
        run_pipeline(PipelineSettings.quick_settings(out=str(again)))
    assert (again / "report.md").exists()  # the refused run removed nothing


def test_expert_resolution_errors():
    with pytest.raises(InputError, match="unknown expert"):
        resolve_expert("alphazero")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_expert("missing/model.zip")
    assert resolve_expert("greedy") == ("greedy", "greedy")
    quick = PipelineSettings.quick_settings()
    assert quick.quick and quick.self_games < PipelineSettings().self_games


def test_overrides_the_pipeline_would_ignore_are_refused(tmp_path):
    assert training_config(["train.max_steps=5"], seed=1).train.max_steps == 5
    for override in ("data.path=x.h5", "path=x.h5", "out_dir=elsewhere"):
        with pytest.raises(InputError, match="the pipeline sets"):
            training_config([override], seed=0)
    with pytest.raises(InputError, match="the pipeline sets data.path"):
        run_pipeline(PipelineSettings(out=str(tmp_path / "p"), train_overrides=["data.path=x.h5"]))
    assert not (tmp_path / "p").exists()  # refused before anything was written


@pytest.mark.slow
def test_the_dream_stage_skips_a_shipped_agent_that_is_missing(tiny_world_model, monkeypatch):
    """A shipped agent removed from the install costs the dream stage its rows, said in the JSON,
    not the pipeline run it ends."""
    from rpg_worldmodel.envs import whole_games
    from rpg_worldmodel.pipeline import stage_dream

    run, _ = tiny_world_model
    found = whole_games.judging_source

    def without_the_dream_agent(name):
        if name == "dream":
            raise FileNotFoundError("the shipped dream is missing at /nowhere/model.zip")
        return found(name)

    monkeypatch.setattr(whole_games, "judging_source", without_the_dream_agent)
    dream = stage_dream(run, PipelineSettings.quick_settings())
    assert set(dream["policies"]) == set(dream["argmax"]) == set(JUDGING_POLICIES) - {"dream"}
    assert "missing" in dream["skipped"]["dream"]
