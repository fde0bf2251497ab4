"""Rewards: classes from the file, the rule that reads them off the view, the reward head's figures,
a model without a reward head (the first version's parts) that trains, evaluates and resumes, and
checkpoints of older schemas refused in one line, not loaded wrong."""

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
from rpg_worldmodel.run_record import CHECKPOINT_VERSION, CheckpointError
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
def first_version(tiny_world_model, tmp_path_factory):
    """A run of the first version's parts at the current schema: learned positions, no reward
    head, the linear action head and no memory map."""
    _, data = tiny_world_model
    root = tmp_path_factory.mktemp("first_version")
    old_model = ["model.position=learned", "model.reward_head=false", "model.action_frames=0",
                 "model.memory_map=false", "train.max_steps=4", "train.checkpoint_every=2"]
    cfg = load_world_model_config(None, [*TINY_WORLD_MODEL, *old_model])
    cfg.data.path, cfg.out_dir = str(data), str(root / "run")
    result = train(cfg, stop_at=2)
    return root / "run", result.checkpoint, data


def test_a_model_without_a_reward_head_loads_evaluates_and_resumes(first_version, tmp_path):
    run, checkpoint, data = first_version
    loaded = load_checkpoint(checkpoint)
    assert json.loads((checkpoint / "meta.json").read_text())["version"] == CHECKPOINT_VERSION
    assert loaded.config.model.position == "learned" and not loaded.config.model.reward_head
    assert loaded.config.model.action_frames == 0  # the linear action head
    assert not loaded.config.model.memory_map and loaded.model.reward_head is None
    metrics = run_evaluation(checkpoint, [data], out=tmp_path / "eval", num_boot=50)
    main = metrics["files"][metrics["self"]]
    assert "reward_acc" not in main["predictors"]["model"]
    report = write_report(tmp_path / "eval" / "metrics.json").read_text()
    assert "no reward head" in report
    from rpg_worldmodel.train import main as train_main

    assert train_main(["--resume", str(run)]) == 0  # continues to max_steps, then the refiner stage
    cfg = read_checkpoint_record(run).config.train
    assert read_checkpoint_record(run).step == 4 + cfg.refiner_steps == 4 + 3 * 4  # refiner_stage=3


def _with_version(run, tmp_path, version):
    """A copy of the checkpoints of ``run`` whose meta.json files claim schema ``version``."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    for meta_file in copy.rglob("meta.json"):
        meta = json.loads(meta_file.read_text())
        assert meta["version"] == CHECKPOINT_VERSION
        meta["version"] = version
        meta_file.write_text(json.dumps(meta))
    return copy


@pytest.mark.parametrize(("version", "match"), [(99, "newer rpg_worldmodel"),
                                                ("two", "no rpg_worldmodel wrote"),
                                                (0, "no rpg_worldmodel wrote")])
def test_unknown_schema_versions_are_refused(tiny_world_model, tmp_path, version, match):
    run, _ = tiny_world_model
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(_with_version(run, tmp_path, version))


@pytest.mark.parametrize("version", [1, 4, 5, 10, 11])
def test_checkpoints_of_older_schemas_are_refused_saying_to_retrain(tiny_world_model, tmp_path, version):
    """Their models were told the game (schemas 5..11: the movement table and the reward prior) or
    came before it: this code cannot rebuild them, and says so in one line instead of loading a
    model that is not the one trained."""
    run, _ = tiny_world_model
    with pytest.raises(CheckpointError, match=rf"meta.json is a checkpoint of schema {version}, whose model "
                                              rf"was told the game's movement table.*retrain it") as refused:
        load_checkpoint(_with_version(run, tmp_path, version))
    assert "\n" not in str(refused.value)
    assert load_checkpoint(run).step > 0  # the untouched run still loads


def test_the_first_versions_settings_still_build_their_parts():
    """What schemas 1..6 ran with is still a setting: the linear action head, no memory map, the
    map of the attention's window trained on num_frames windows, and cells drawn on their own."""
    from rpg_worldmodel.models.world_model import WorldModel

    old = ["model.width=24", "model.num_heads=2", "model.action_frames=0", "model.memory_map=false",
           "model.refiner_layers=0"]
    model = WorldModel(load_world_model_config(None, old).model)
    assert isinstance(model.action_head, torch.nn.Linear) and model.memory_map is None
    assert model.refiner is None and not hasattr(model, "moves")
    window_map = ["model.width=24", "model.num_heads=2", "model.memory_steps=0", "model.train_window=0",
                  "model.refiner_layers=0"]
    model = WorldModel(load_world_model_config(None, window_map).model)
    assert model.refiner is None and model.memory_map.keep == model.memory_map.reach == 5
