"""The world model takes the game's vocabulary from the trajectory file: a file with a kind of cell
it has never heard of trains, is masked by name, is scored per kind and is reported, with no edit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rpg_base.typed_config.values import ConfigError
from rpg_env.game import constants
from rpg_env.game.constants import CellKind

#: A kind the reference game does not have: an item worth 3 points that spawns like the others.
RUBY = CellKind("ruby", "r", (150, 20, 120), "diamond", passable=True, pickup=True, spawns=True,
                value_param="ruby_value", default_value=3.0)
REFERENCE = ("empty", "wall", "gem", "bone", "food", "agent")
WITH_RUBY = (*REFERENCE, "ruby")


@pytest.fixture(scope="module")
def ruby_file(tmp_path_factory):
    """A recording of a game whose vocabulary has a ruby; the vocabulary is the reference's again
    once it is written, so the world model sees a kind only the file names."""
    from rpg_env.record import record

    path = tmp_path_factory.mktemp("ruby") / "ruby.h5"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(constants, "CELL_KINDS", (*constants.CELL_KINDS, RUBY))
        record("greedy", path, 24, seed=0, num_envs=8, mode="w", progress=False,
               env_kwargs={"height": 12, "width": 12, "spawn_prob": 0.05, "max_turns": 30})
    assert constants.vocabulary().cell_names == REFERENCE
    return path


def test_the_kinds_of_a_file_follow_its_channel_names():
    from rpg_worldmodel.data.kinds import entity_names, item_names, items_first, maskable_kinds
    from rpg_worldmodel.data.masks import mask_choices

    renamed = ("agent", "empty", "ruby", "wall", "gem")
    assert entity_names(WITH_RUBY) == ("wall", "gem", "bone", "food", "agent", "ruby")
    assert item_names(WITH_RUBY) == ("gem", "bone", "food", "ruby")
    assert items_first(REFERENCE) == ("gem", "bone", "food", "wall", "agent")
    assert items_first(renamed) == ("ruby", "gem", "agent", "wall")
    assert maskable_kinds(renamed) == ("ruby", "gem", "wall")
    assert mask_choices(REFERENCE) == ("none", "random_cells", "gem", "bone", "food", "wall")
    assert mask_choices(WITH_RUBY) == ("none", "random_cells", "gem", "bone", "food", "ruby", "wall")


def test_masks_are_checked_against_the_datas_channels():
    import torch

    from rpg_worldmodel.data.masks import apply_input_mask, check_mask

    check_mask("ruby", WITH_RUBY, "train.train_mask")
    with pytest.raises(ConfigError, match=r"train.train_mask='rubies' is not a mask of this data .*"
                                          r"'ruby', 'wall'\]; did you mean 'ruby'\?"):
        check_mask("rubies", WITH_RUBY, "train.train_mask")
    with pytest.raises(ConfigError, match="choose one of"):
        check_mask("ruby", REFERENCE)
    with pytest.raises(ConfigError, match="is not a mask"):
        check_mask("agent", WITH_RUBY)  # the players are not masked
    views = torch.ones(2, 3, 7, 5, 5)
    masked = apply_input_mask(views, "ruby", channel_names=WITH_RUBY)
    assert masked[:, :, 6].sum() == 0 and masked[:, :, :6].equal(views[:, :, :6])


def test_figures_quality_bar_and_tables_name_every_kind():
    from rpg_worldmodel.evaluation.metrics import figures_from_counts
    from rpg_worldmodel.evaluation.tables import mask_figures, quality_bar
    from rpg_worldmodel.report.plots import cell_colours
    from rpg_worldmodel.report.text import main_figures, recorded_kinds

    c = len(WITH_RUBY)
    tp, fp, fn = np.arange(1, c + 1, dtype=float), np.ones(c), np.ones(c)
    view = {"ce_sum": 1.0, "cells": 2.0, "correct": 1.0, "changed": 1.0, "changed_correct": 1.0}
    figs = figures_from_counts({**view, "tp": tp, "fp": fp, "fn": fn}, WITH_RUBY)
    f1 = {n: 2 * tp[k] / (2 * tp[k] + 2) for k, n in enumerate(WITH_RUBY)}
    assert figs["f1_ruby"] == pytest.approx(f1["ruby"]) and "f1_empty" not in figs
    assert figs["f1_items"] == pytest.approx(np.mean([f1[n] for n in ("gem", "bone", "food", "ruby")]))
    assert [f for f, _, _ in quality_bar(WITH_RUBY)][1:5] == ["f1_gem", "f1_bone", "f1_food", "f1_ruby"]
    assert mask_figures(WITH_RUBY)[3:9] == ("f1_gem", "f1_bone", "f1_food", "f1_ruby", "f1_wall", "f1_agent")
    assert main_figures({"channel_names": list(REFERENCE)}) == (
        "view_ce", "cell_acc", "changed_acc", "f1_gem", "f1_bone", "f1_food", "f1_wall", "f1_agent",
        "action_ce", "action_acc")
    # A metrics.json written before the names were recorded: its per-kind figures name them.
    old = {"predictors": {"model": {"view_ce": {}, "f1_wall": {}, "f1_ruby": {}, "f1_items": {}}}}
    assert recorded_kinds(old) == ("wall", "ruby")
    # Colours: the game's own for the kinds its vocabulary names, distinct others for the rest.
    colours = cell_colours(WITH_RUBY)
    assert colours[:3] == ["#ece8dc", "#545460", "#28a0e6"] and len(set(colours)) == len(colours)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(constants, "CELL_KINDS", (*constants.CELL_KINDS, RUBY))
        assert cell_colours(WITH_RUBY)[-1] == "#961478"


def test_a_file_with_a_new_kind_trains_evaluates_and_reports(ruby_file, tmp_path):
    from conftest import TINY_WORLD_MODEL

    from rpg_worldmodel.config import load_world_model_config
    from rpg_worldmodel.evaluation.run import run_evaluation
    from rpg_worldmodel.report.document import write_report
    from rpg_worldmodel.train import train

    # The model is told nothing of the game (its moves it learns, with the memory map that follows
    # them); the reward classes are read from the vocabulary by name, which does not know a ruby's
    # points: this model predicts views and actions only, of 7 channels.
    game_free = ["model.num_channels=7", "model.reward_head=false"]
    cfg = load_world_model_config(None, [*TINY_WORLD_MODEL, *game_free, "train.max_steps=6",
                                         "train.eval_every=6", "train.checkpoint_every=6"])
    cfg.data.path, cfg.out_dir = str(ruby_file), str(tmp_path / "refused")
    cfg.train.train_mask = "rubies"
    with pytest.raises(ConfigError, match=r"train.train_mask='rubies'.*did you mean 'ruby'"):
        train(cfg)
    assert not (tmp_path / "refused").exists()
    cfg.train.train_mask, cfg.out_dir = "ruby", str(tmp_path / "run")
    result = train(cfg)
    metrics = run_evaluation(result.best, [ruby_file], tmp_path / "eval", masks=["none", "ruby", "wall"],
                             num_boot=20, floor="bound")
    main = metrics["files"][str(ruby_file)]
    assert main["channel_names"] == list(WITH_RUBY)
    assert {"f1_ruby", "f1_items"} <= set(main["predictors"]["model"])
    assert "f1_ruby_vs_motion_oracle" in main["quality_checks"]
    assert metrics["train_mask"] == "ruby"
    assert list(metrics["masking"]["table"]["ruby"]) == ["none", "ruby", "wall"]
    assert "f1_ruby" in metrics["masking"]["table"]["ruby"]["ruby"]
    report = write_report(tmp_path / "eval" / "metrics.json").read_text()
    assert "f1_ruby" in report and (tmp_path / "eval" / "entity_f1.png").is_file()
    assert (tmp_path / "eval" / "view_strip.png").is_file()
    saved = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert saved["masking"]["channel_names"] == list(WITH_RUBY)
