"""Rewards: classes from the file, the rule that reads them off the view, the reward head's figures,
and checkpoints of schema 1 (no reward head) migrated, not broken."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from conftest import TINY_WORLD_MODEL

from rpg_env.trajectories.reader import TrajectoryFile
from rpg_worldmodel.checkpoint import load_checkpoint, read_checkpoint_record
from rpg_worldmodel.config import load_world_model_config
from rpg_worldmodel.data.sources import reward_classes
from rpg_worldmodel.evaluation.baselines import RewardRule
from rpg_worldmodel.evaluation.oracles import views_to_codes
from rpg_worldmodel.evaluation.run import run_evaluation
from rpg_worldmodel.report.document import write_report
from rpg_worldmodel.run_record import CHECKPOINT_VERSION, CheckpointError, migrate
from rpg_worldmodel.train import train


def test_reward_classes_come_from_the_files_game():
    meta = {"channel_names": ["empty", "wall", "gem", "bone", "food", "agent"],
            "env_kwargs": {"gem_value": 10.0, "food_value": 5.0, "bone_value": -10.0, "wall_penalty": -1.0}}
    classes = reward_classes(meta)
    assert classes.values == (-10.0, -1.0, 0.0, 5.0, 10.0)
    assert classes.names == ("bone", "wall bump", "nothing", "food", "gem")
    other = reward_classes({**meta, "env_kwargs": {"gem_value": 5.0, "wall_penalty": 0.0}})
    assert other.values == (-10.0, 0.0, 5.0) and other.names == ("bone", "nothing|wall bump", "gem|food")


def test_the_rule_is_the_games_own_rule_for_the_learner(tiny_world_model):
    _, data = tiny_world_model
    with TrajectoryFile(data) as tf:
        meta = dict(tf.meta)
        rule = RewardRule(meta, reward_classes(meta).values)
        learner = np.flatnonzero(tf.episodes["agent_id"] == 0)
        for i in learner[:10]:
            ep = tf.episode(int(i))
            codes = views_to_codes(ep["obs"][:-1])
            np.testing.assert_array_equal(rule.predict(codes, ep["actions"]), rule.classes(ep["rewards"]))


@pytest.fixture(scope="module")
def schema_one(tiny_world_model, tmp_path_factory):
    """A checkpoint as rpg_worldmodel 0.1 wrote it: learned positions, no reward head, version 1."""
    _, data = tiny_world_model
    root = tmp_path_factory.mktemp("schema_one")
    old_model = ["model.position=learned", "model.reward_head=false", "model.action_frames=0",
                 "model.memory_map=false", "model.move_rules=false", "train.max_steps=4",
                 "train.checkpoint_every=2"]
    cfg = load_world_model_config(None, [*TINY_WORLD_MODEL, *old_model])
    cfg.data.path, cfg.out_dir = str(data), str(root / "run")
    result = train(cfg, stop_at=2)
    for meta_file in (root / "run" / "checkpoints").rglob("meta.json"):
        meta = json.loads(meta_file.read_text())
        meta["version"] = 1
        for key in ("position", "reward_head", "reward_values", "action_frames", "memory_map", "move_rules",
                    "move_deltas", "blocking_kinds"):
            meta["config"]["model"].pop(key)
        meta_file.write_text(json.dumps(meta))
    return root / "run", result.checkpoint, data


def test_a_schema_one_checkpoint_loads_evaluates_and_resumes(schema_one, tmp_path):
    run, checkpoint, data = schema_one
    loaded = load_checkpoint(checkpoint)
    assert loaded.record.migrated_from == 1
    assert loaded.config.model.position == "learned" and not loaded.config.model.reward_head
    assert loaded.config.model.action_frames == 0  # the linear action head of schemas 1..3
    assert not loaded.config.model.memory_map  # no memory map before schema 5
    metrics = run_evaluation(checkpoint, [data], out=tmp_path / "eval", num_boot=50)
    main = metrics["files"][metrics["self"]]
    assert "reward_acc" not in main["predictors"]["model"]
    report = write_report(tmp_path / "eval" / "metrics.json").read_text()
    assert "no reward head" in report
    from rpg_worldmodel.train import main as train_main

    assert train_main(["--resume", str(run)]) == 0  # continues to max_steps under the old schema
    assert read_checkpoint_record(run).step == 4


@pytest.mark.parametrize(("version", "match"), [(99, "newer rpg_worldmodel"),
                                                ("two", "no rpg_worldmodel wrote"),
                                                (0, "no rpg_worldmodel wrote")])
def test_unknown_schema_versions_are_refused(tiny_world_model, tmp_path, version, match):
    run, data = tiny_world_model
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    for meta_file in copy.rglob("meta.json"):
        meta = json.loads(meta_file.read_text())
        meta["version"] = version
        meta_file.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(copy)


#: What schemas 7 to 11 added, as a checkpoint of an older schema reads it: the map of the
#: attention's window, trained on windows of num_frames steps, and no cell refiner.
SCHEMA_7 = {"memory_steps": 0, "map_size": 64, "refiner_layers": 0, "train_window": 0,
            # and what schema 8 added: the doubt budget and the refiner's views (no refiner here)
            "sample_doubt": 0.2, "refiner_views": 64,
            # and schema 9: the global layer (attention, as every older model had)
            "layer": "attention", "srwm_heads": 1,
            # and schema 10: the map read cell by cell, not along its lines
            "map_reach": 0,
            # and schema 11: no floor under the joint draw
            "sample_floor": 0.0}


def test_a_schema_3_checkpoint_keeps_its_linear_action_head():
    from rpg_worldmodel.models.world_model import WorldModel

    meta = migrate({"version": 3, "config": {"model": {"width": 24, "num_heads": 2}}, "data": {"files": []}})
    assert meta["migrated_from"] == 3 and meta["config"]["model"] == {
        "action_frames": 0, "memory_map": False, "move_rules": False, "width": 24, "num_heads": 2, **SCHEMA_7}
    cfg = load_world_model_config(None, [f"model.{k}={v}" for k, v in meta["config"]["model"].items()])
    model = WorldModel(cfg.model)
    assert isinstance(model.action_head, torch.nn.Linear) and model.memory_map is None and model.moves is None
    assert model.refiner is None


def test_a_schema_4_checkpoint_has_no_memory_map():

    meta = migrate({"version": 4, "config": {"model": {"action_frames": 5}}, "data": {"files": []}})
    assert meta["migrated_from"] == 4 and meta["config"]["model"] == {"action_frames": 5, "memory_map": False,
                                                                       "move_rules": False, **SCHEMA_7}


def test_a_schema_5_checkpoint_started_from_random_weights():

    meta = migrate({"version": 5, "config": {"model": {"move_rules": True}, "train": {"lr": 0.01}},
                    "data": {"files": []}})
    assert meta["migrated_from"] == 5 and meta["config"]["train"] == {"init_from": "", "lr": 0.01}


def test_a_schema_6_checkpoint_keeps_its_window_map_and_draws_cells_on_their_own():
    from rpg_worldmodel.models.world_model import WorldModel

    meta = migrate({"version": 6, "config": {"model": {"width": 24, "num_heads": 2}}, "data": {"files": []}})
    assert meta["migrated_from"] == 6 and meta["config"]["model"] == {"width": 24, "num_heads": 2, **SCHEMA_7}
    cfg = load_world_model_config(None, [f"model.{k}={v}" for k, v in meta["config"]["model"].items()])
    model = WorldModel(cfg.model)
    assert model.refiner is None and model.memory_map.keep == model.memory_map.reach == 5


def test_an_interim_schema_5_checkpoint_without_the_movement_table_is_refused(tiny_world_model, tmp_path):
    # schema 5 gained model.move_rules before release; a meta without it would load wrong silently
    run, _ = tiny_world_model
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    for meta_file in copy.rglob("meta.json"):
        meta = json.loads(meta_file.read_text())
        assert meta["version"] == CHECKPOINT_VERSION
        meta["version"] = 5
        del meta["config"]["model"]["move_rules"]
        meta_file.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="before the movement table.*retrain"):
        load_checkpoint(copy)
    assert load_checkpoint(run).config.model.move_rules  # the untouched run still loads
