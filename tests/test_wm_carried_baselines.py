"""A checkpoint that carries its fitted baselines (as the shipped world model does) is evaluated
beside the same baselines where its training file is gone; carried baselines of another file, or
a damaged file, are refused with what to do."""

import json
import shutil
import warnings

import numpy as np
import pytest

from rpg_base.errors import InputError
from rpg_env.record import record
from rpg_worldmodel.checkpoint import META_FILE, MODEL_FILE, choose_checkpoint, load_checkpoint
from rpg_worldmodel.evaluation.baselines import BASELINES_FILE, fit_baselines, load_baselines, save_baselines
from rpg_worldmodel.evaluation.episodes import checkpoint_split, training_files
from rpg_worldmodel.evaluation.run import EvalOptions, Evaluation
from rpg_worldmodel.run_record import read_record


@pytest.fixture(scope="module")
def moved_run(tiny_world_model, tmp_path_factory):
    """``(run copy whose training file is recorded at a path that does not exist, the training
    file, a fresh file of other games, the checkpoint folder evaluation uses)``."""
    run, data = tiny_world_model
    root = tmp_path_factory.mktemp("carried")
    copy = root / "run"
    shutil.copytree(run, copy)
    for meta_file in copy.rglob(META_FILE):
        meta = json.loads(meta_file.read_text())
        for entry in meta["data"]["files"]:
            entry["path"] = str(root / "gone" / "greedy.h5")
        meta_file.write_text(json.dumps(meta))
    fresh = root / "fresh.h5"
    record("greedy", fresh, 6, seed=77, num_envs=6, mode="w", progress=False)
    return copy, data, fresh, load_checkpoint(copy).path


def _fit(record, data, reward_values):
    trained = training_files(record)[0]
    fb = fit_baselines(data, trained.part(checkpoint_split(record))["train"], EvalOptions().baseline_episodes,
                       EvalOptions().seed, reward_values)
    return fb, {"path": str(data), "fingerprint": trained.fingerprint, "seed": EvalOptions().seed,
                "max_episodes": EvalOptions().baseline_episodes}


def test_carried_baselines_score_exactly_as_the_ones_fitted_on_the_training_file(moved_run):
    run, data, fresh, folder = moved_run
    opts = EvalOptions(num_boot=20, floor="bound", theory_of_mind=False)
    with pytest.raises(FileNotFoundError, match="pass a training file as --data"):
        Evaluation(run, [fresh], opts)
    ck = load_checkpoint(run)
    fb, fitted_on = _fit(ck.record, data, ck.config.model.reward_values)
    save_baselines(fb, folder / BASELINES_FILE, fitted_on)
    try:
        carried = Evaluation(run, [fresh], opts)
        assert "carried by the checkpoint" in carried.train_path
        fitted = Evaluation(run, [fresh, data], opts)  # the training file found among --data
        assert fitted.train_path == str(data)
        a, b = carried.evaluate_file(fresh, num_examples=0), fitted.evaluate_file(fresh, num_examples=0)
        for name in ("motion_oracle", "memory_oracle", "copy", "majority_action", "reward_rule"):
            assert a["predictors"][name] == b["predictors"][name], name
        assert "carried by the checkpoint" in carried.metrics()["baselines"]["fitted_on"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            Evaluation(run, [fresh], opts)  # fitted as this evaluation asks: no warning
        # another seed cannot refit them here: it uses them and says they were fitted otherwise
        with pytest.warns(UserWarning, match="fitted with seed 0 .* not seed 3 .* --data"):
            other = Evaluation(run, [fresh], EvalOptions(num_boot=20, floor="bound", theory_of_mind=False,
                                                         seed=3))
        assert "fitted with seed 0" in other.train_path
    finally:
        (folder / BASELINES_FILE).unlink()


def test_saved_baselines_round_trip_every_table(tiny_world_model, tmp_path):
    run, data = tiny_world_model
    ck = load_checkpoint(run)
    fb, fitted_on = _fit(ck.record, data, ck.config.model.reward_values)
    path = save_baselines(fb, tmp_path / BASELINES_FILE, fitted_on)
    back = load_baselines(path, [fitted_on["fingerprint"]])
    for name in ("copy_cal", "shift_cal", "memory_cal", "majority", "previous", "reward_rule"):
        np.testing.assert_array_equal(getattr(back, name).counts, getattr(fb, name).counts)
    assert back.channel_names == fb.channel_names and back.action_names == fb.action_names
    assert back.train_episodes_used == fb.train_episodes_used
    np.testing.assert_array_equal(back.reward_rule.values, fb.reward_rule.values)
    np.testing.assert_array_equal(back.reward_rule.value_by_code, fb.reward_rule.value_by_code)


def test_carried_baselines_of_another_file_or_damaged_are_refused(tiny_world_model, tmp_path):
    run, data = tiny_world_model
    ck = load_checkpoint(run)
    fb, fitted_on = _fit(ck.record, data, ck.config.model.reward_values)
    path = save_baselines(fb, tmp_path / BASELINES_FILE, fitted_on)
    with pytest.raises(InputError, match="not on the checkpoint's training files"):
        load_baselines(path, ["another-fingerprint"])
    doc = json.loads(path.read_text())
    cases = {
        "truncated": path.read_text()[:200],
        "foreign": json.dumps({**doc, "format": "something.else"}),
        "future": json.dumps({**doc, "version": 99}),
        "bad table": json.dumps({**doc, "copy": {"alpha": 0.5, "counts": [[1.0, 2.0]]}}),
        "negative counts": json.dumps({**doc, "majority_action": {"alpha": 0.5, "counts": [[-1.0] * 4]}}),
    }
    for case, text in cases.items():
        path.write_text(text)
        with pytest.raises(InputError, match="delete the file and pass the checkpoint's training file"):
            load_baselines(path, [fitted_on["fingerprint"]])
        assert path.read_text() == text, case  # refused, never rewritten


def test_a_shipped_checkpoint_holds_no_path_of_its_machine_and_evaluates_as_its_source(
        tiny_world_model, moved_run, tmp_path):
    """What `rpg_worldmodel.ship` writes beside the weights (the record and the baselines) names the
    training file without its path; the folder is then evaluated exactly as the run it came from on
    that file (known by its content), and beside its carried baselines where the file is not."""
    from rpg_worldmodel.ship import _ship_baselines, _ship_record

    run, data = tiny_world_model
    fresh = moved_run[2]
    pipeline, folder = tmp_path / "pipeline", tmp_path / "shipped"
    shutil.copytree(run, pipeline / "run")
    folder.mkdir()
    choice = choose_checkpoint(pipeline / "run")
    shutil.copy(choice.folder / MODEL_FILE, folder / MODEL_FILE)
    record_ = read_record(choice.folder / META_FILE)
    _ship_record(record_, choice, pipeline, folder)
    _ship_baselines(record_, folder, data.name)
    meta, baselines = (json.loads((folder / name).read_text()) for name in (META_FILE, BASELINES_FILE))
    assert [f["path"] for f in meta["data"]["files"]] == [data.name] == [baselines["fitted_on"]["path"]]
    assert meta["shipped"]["from"].startswith("pipeline/run/checkpoints/step_")
    assert meta["config"]["data"]["path"] == data.name and meta["config"]["out_dir"] == "run"
    placed = json.dumps([meta[key] for key in ("config", "data", "shipped")] + [meta["provenance"]["data"]])
    assert str(tmp_path) not in placed and str(data.parent) not in placed
    opts = EvalOptions(num_boot=20, floor="bound", theory_of_mind=False)
    shipped, source = Evaluation(folder, [data], opts), Evaluation(run, [data], opts)
    assert shipped.train_path == source.train_path == str(data)
    assert shipped.evaluate_file(data, num_examples=0) == source.evaluate_file(data, num_examples=0)
    assert "carried by the checkpoint" in Evaluation(folder, [fresh], opts).train_path
