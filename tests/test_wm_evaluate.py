"""Held-out evaluation: episode selection, window coverage, eval-only scoring, the CLI."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from rpg_base.cli import command_status
from rpg_base.errors import InputError
from rpg_env.record import record
from rpg_env.trajectories.reader import TrajectoryFile
from rpg_env.trajectories.splits import split_episodes
from rpg_worldmodel import evaluate as E
from rpg_worldmodel.config import WorldModelConfig
from rpg_worldmodel.data.shards import DataFiles, data_record
from rpg_worldmodel.data.windows import CONTEXTS, window_plan
from rpg_worldmodel.evaluation.baselines import fit_baselines
from rpg_worldmodel.evaluation.episodes import TrainingEpisodesError, select_episodes
from rpg_worldmodel.evaluation.scoring import iter_windows, score_eval_set
from rpg_worldmodel.evaluation.tables import masking_table
from rpg_worldmodel.models.world_model import WorldModel
from rpg_worldmodel.run_record import DataRecord, RunRecord


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("wm_eval")
    greedy, rand = root / "greedy.h5", root / "random.h5"
    record("greedy", greedy, 20, seed=0, num_envs=10, mode="w", progress=False)
    record("random", rand, 4, seed=1, num_envs=4, mode="w", progress=False)
    return greedy, rand


def _record(path):
    """A run's record of training on ``path`` alone with its default split."""
    split = {k: tuple(v.tolist()) for k, v in split_episodes(TrajectoryFile(path)).items()}
    return RunRecord(splits=split, data=DataRecord.from_dict(data_record(DataFiles.open(str(path)))), seed=0,
                     versions={})


def _tiny_model(num_frames=3):
    cfg = WorldModelConfig()
    cfg.model.width, cfg.model.num_heads, cfg.model.num_layers = 24, 2, 1
    cfg.model.num_frames = num_frames
    torch.manual_seed(0)
    return WorldModel(cfg.model), cfg


def test_selection_uses_the_recorded_test_split_and_refuses_training_episodes(files):
    greedy, rand = files
    rec = _record(greedy)
    es = select_episodes(rec, greedy)
    assert es.episodes == sorted(rec.splits["test"]) and es.held_out
    assert not set(es.episodes) & set(rec.splits["train"])
    for split in ("train", "all"):
        with pytest.raises(TrainingEpisodesError, match="--allow-training-episodes"):
            select_episodes(rec, greedy, split)
    with pytest.warns(UserWarning, match="TRAINING EPISODES"):
        marked = select_episodes(rec, greedy, "train", allow_training_episodes=True)
    assert not marked.held_out and "INCLUDING TRAINING EPISODES" in marked.label
    assert marked.episodes == sorted(rec.splits["train"])
    # another file: every episode is held out
    other = select_episodes(rec, rand)
    assert other.episodes == list(range(len(TrajectoryFile(rand)))) and other.held_out
    with pytest.raises(ValueError, match="split must be"):
        select_episodes(rec, greedy, "everything")


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("length,t", [(100, 5), (7, 5), (6, 5), (5, 5), (11, 3), (10, 3)])
def test_window_plan_scores_each_target_once(context, length, t):
    starts, score = window_plan(length, t, context)
    targets = sorted((starts[:, None] + np.arange(t)[None] + 1)[score].tolist())
    assert targets == list(range(1, length + 1)) if length >= t else targets == []
    assert (starts + t <= length).all()  # the window's last view exists (the game's final one at most)
    if context == "full" and length > t:
        assert score[1:, :-1].sum() == 0  # later windows: only the full-history position
    with pytest.raises(ValueError, match="context"):
        window_plan(length, t, "sliding")


@pytest.mark.parametrize("context", CONTEXTS)
def test_every_transition_is_scored_exactly_once(files, context):
    greedy, _ = files
    tf = TrajectoryFile(greedy)
    es = select_episodes(_record(greedy), greedy)
    t = 4
    seen = {}
    for batch in iter_windows(es, t, batch_size=37, desc="", context=context):
        assert batch.views.shape[1:3] == (t + 1, 6) and batch.actions.shape[1] == t + 1
        w, p = np.nonzero(batch.score)
        for row, start_offset in zip(batch.rows[w], p, strict=True):
            seen.setdefault(int(row), []).append(int(start_offset))
    for row, ep in enumerate(es.episodes):
        length = int(tf.episodes["length"][ep])
        assert len(seen[row]) == length  # targets 1 .. L: the game's final view too
    if context != "full":
        return
    # and windows hold the right data: rebuild one episode's windows and compare
    first = next(iter_windows(es, t, batch_size=10_000, desc=""))
    ep = tf.episode(es.episodes[0])
    np.testing.assert_array_equal(first.views[0], ep["obs"][: t + 1])
    np.testing.assert_array_equal(first.views[3], ep["obs"][3 : t + 4])
    np.testing.assert_array_equal(first.actions[3], ep["actions"][3 : t + 4])


def test_scoring_never_changes_the_model_and_is_deterministic(files):
    greedy, _ = files
    rec = _record(greedy)
    model, cfg = _tiny_model()
    model.train()  # the evaluator must switch to eval mode itself
    before = {k: v.clone() for k, v in model.state_dict().items()}
    es = select_episodes(rec, greedy)
    fb = fit_baselines(greedy, rec.splits["train"])
    a = score_eval_set(model, cfg, es, fb, desc="")
    b = score_eval_set(model, cfg, es, fb, desc="")
    assert not model.training
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    for name in a.counts:
        for key in a.counts[name]:
            np.testing.assert_array_equal(a.counts[name][key], b.counts[name][key])
    # every predictor scored the same predictions; no action follows a game's final view
    n = a.num_predictions
    acted = a.counts["model"]["action_n"].sum()
    assert acted == n - len(es.episodes) == a.counts["majority_action"]["action_n"].sum()
    assert a.counts["motion_oracle"]["cells"].sum() == n * 81


def test_baselines_are_fitted_on_training_episodes_only(files):
    greedy, _ = files
    rec = _record(greedy)
    fb = fit_baselines(greedy, rec.splits["train"])
    tf = TrajectoryFile(greedy)
    steps = sum(int(tf.episodes["length"][i]) for i in rec.splits["train"])
    assert fb.shift_cal.counts.sum() == steps * 81
    assert fb.majority.counts.sum() == steps - len(rec.splits["train"])
    assert fb.train_episodes_used == len(rec.splits["train"])


def test_masking_table_rows_columns_and_seeded_masks(files):
    greedy, _ = files
    es = select_episodes(_record(greedy), greedy)
    plain, cfg = _tiny_model()
    other, cfg2 = _tiny_model()
    cfg2.train.train_mask = "random_cells"
    models = {"none": (plain, cfg), "random_cells": (other, cfg2)}
    masks = ("none", "random_cells", "gem")
    a = masking_table(models, es, masks, num_boot=50, seed=3, context="stride")
    b = masking_table(models, es, masks, num_boot=50, seed=3, context="stride")
    assert a == b  # masks and bootstrap are seeded
    assert list(a["table"]) == ["none", "random_cells"]
    assert all(list(row) == list(masks) for row in a["table"].values())
    row = a["table"]["none"]
    assert row["random_cells"]["view_ce"]["value"] != row["none"]["view_ce"]["value"]
    assert row["gem"]["view_ce"]["value"] != row["none"]["view_ce"]["value"]
    # identical weights, identical masks: identical rows
    assert a["table"]["none"] == a["table"]["random_cells"]
    cost = a["cost"]["none"]
    assert cost["none"]["view_ce"] == {"value": 0.0, "lo": 0.0, "hi": 0.0}
    expected = row["gem"]["view_ce"]["value"] - row["none"]["view_ce"]["value"]
    assert cost["gem"]["view_ce"]["value"] == pytest.approx(expected)
    assert a["train_steps"] == {"none": cfg.train.max_steps, "random_cells": cfg2.train.max_steps}
    c = masking_table({"none": (plain, cfg)}, es, ("random_cells",), num_boot=50, seed=4, context="stride")
    assert c["table"]["none"]["random_cells"] != row["random_cells"]


# ------------------------------------------------------------------------------ with a real checkpoint
@pytest.fixture(scope="module")
def trained(files, tmp_path_factory):
    from rpg_worldmodel.config import load_world_model_config
    from rpg_worldmodel.train import train

    greedy, _ = files
    cfg = load_world_model_config(None, [
        "model.width=24", "model.num_heads=2", "model.num_layers=1", "model.num_frames=3",
        "train.max_steps=4", "train.warmup_steps=1", "train.batch_size=8", "train.eval_every=4",
        "train.checkpoint_every=4", "train.progress=false", "data.max_val_windows=16"])
    cfg.data.path = str(greedy)
    cfg.out_dir = str(tmp_path_factory.mktemp("wm_run") / "run")
    return train(cfg).checkpoint


def test_cli_refuses_training_episodes_and_evaluates_held_out(files, trained, tmp_path, capsys):
    greedy, rand = files
    code = command_status(E.main, ["--checkpoint", str(trained), "--data", str(greedy), "--split", "train",
                                   "--out", str(tmp_path / "refused")])
    assert code == 2
    assert "trained on" in capsys.readouterr().err
    assert not (tmp_path / "refused" / "metrics.json").exists()
    with pytest.raises(InputError, match="add --masks"):  # an option the command would not use
        E.main(["--checkpoint", str(trained), "--data", str(greedy), "--masked-checkpoint", str(trained)])

    out = tmp_path / "eval"
    code = E.main(["--checkpoint", str(trained), "--data", str(greedy), "--data", str(rand),
                   "--out", str(out), "--bootstrap", "100", "--masks", "none", "wall"])
    assert code == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == str(out / "metrics.json")
    metrics = json.loads((out / "metrics.json").read_text())
    main = metrics["files"][str(greedy)]
    assert main["held_out"] and main["selection"] == "test split recorded in the checkpoint"
    assert metrics["self"] == str(greedy) and str(rand) in metrics["transfer"]
    assert list(metrics["masking"]["table"]["none"]) == ["none", "wall"]
    assert metrics["provenance"]["seed"] == 0 and "torch" in metrics["provenance"]["versions"]
    with pytest.raises(InputError, match=r"mask='everything' is not a mask of this data .* choose one of "
                                         r"\['none', 'random_cells', 'gem', 'bone', 'food', 'wall'\]"):
        E.main(["--checkpoint", str(trained), "--data", str(greedy), "--masks", "everything"])


def test_training_file_is_recognised_by_content(files, trained, tmp_path):
    import shutil

    from rpg_worldmodel.checkpoint import load_checkpoint

    greedy, _ = files
    rec = load_checkpoint(trained).record
    copy = tmp_path / "copy.h5"
    shutil.copy(greedy, copy)
    with pytest.raises(TrainingEpisodesError):
        select_episodes(rec, copy, "all")  # a renamed copy is still the training data
    assert select_episodes(rec, copy).episodes == sorted(rec.splits["test"])
    # the training path re-recorded with other games: the recorded split no longer applies
    files = (dataclasses.replace(rec.data.files[0], path=str(copy)),)
    moved = dataclasses.replace(rec, data=dataclasses.replace(rec.data, files=files))
    record("greedy", copy, 3, seed=9, num_envs=3, mode="w", progress=False)
    with pytest.raises(ValueError, match="changed since the checkpoint"):
        select_episodes(moved, copy)


def test_data_recorded_for_another_view_is_refused_naming_both_shapes(files, trained, tmp_path, capsys):
    greedy, _ = files
    other = tmp_path / "radius3.h5"
    record("greedy", other, 2, seed=0, num_envs=2, mode="w", progress=False,
           env_kwargs={"vision_radius": 3})
    code = command_status(E.main, ["--checkpoint", str(trained), "--data", str(greedy), "--data", str(other),
                                   "--out", str(tmp_path / "eval")])
    err = capsys.readouterr().err
    assert code == 2
    assert "(6, 7, 7)" in err and "(6, 9, 9)" in err and str(other) in err
    assert not (tmp_path / "eval" / "metrics.json").exists()
