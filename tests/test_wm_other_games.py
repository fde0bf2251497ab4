"""The world model on files of a game it was not written for (MiniGrid through `OneHotMiniGrid-v0`):
the view shape, the actions and the reward classes come from the files, and nothing in
`rpg_worldmodel` names MiniGrid or its objects."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from rpg_worldmodel.checkpoint import load_checkpoint
from rpg_worldmodel.config import ModelConfig, load_world_model_config
from rpg_worldmodel.data.sources import (
    MAX_REWARD_CLASSES,
    fill_view_shape,
    observed_rewards,
    plays_the_game,
    reward_classes,
)
from rpg_worldmodel.evaluation.run import run_evaluation
from rpg_worldmodel.train import train

pytest.importorskip("minigrid")

ROOT = Path(__file__).resolve().parents[1]
TINY = ["model.width=24", "model.num_heads=2", "model.num_layers=1", "model.num_frames=3",
        "train.max_steps=3", "train.batch_size=8", "train.warmup_steps=1", "train.eval_every=3",
        "train.checkpoint_every=3", "train.progress=false", "data.max_val_windows=32",
        "train.num_threads=1", "model.refiner_views=16"]


@pytest.fixture(scope="module")
def room_file(tmp_path_factory) -> Path:
    from rpg_env.record import record

    # the empty 5x5 room: random play reaches its goal often enough to pay a few rewards
    path = tmp_path_factory.mktemp("minigrid") / "empty.h5"
    record("random", path, 12, seed=0, num_envs=4, mode="w", progress=False, env_id="OneHotMiniGrid-v0",
           env_kwargs={"task": "MiniGrid-Empty-5x5-v0", "max_steps": 40})
    return path


def _meta(path: Path) -> dict:
    from rpg_env.trajectories.reader import TrajectoryFile

    with TrajectoryFile(path) as tf:
        return dict(tf.meta)


def test_a_default_model_takes_the_files_view_shape_and_actions(room_file):
    meta = _meta(room_file)
    model = ModelConfig()
    fill_view_shape(model, meta)
    assert (model.num_channels, model.view_size, model.num_actions) == (12, 7, 7)
    assert model.patch_size == 1  # the largest patch of at most the default 3 that tiles 7
    sized = ModelConfig(view_size=6, num_channels=12)  # sized by hand: left as given, checked later
    fill_view_shape(sized, meta)
    assert (sized.view_size, sized.num_actions, sized.patch_size) == (6, 4, 3)


def test_another_games_rewards_are_read_off_its_files_not_the_point_table(room_file):
    meta = _meta(room_file)
    assert not plays_the_game(meta)  # it names a channel "wall", but it is not the treasurehunt game
    assert reward_classes(meta).values == (0.0,)  # no -1 wall bump read into it
    assert plays_the_game({"channel_names": ["empty", "wall", "gem", "bone", "food", "agent"]})
    assert plays_the_game({"channel_names": ["empty", "wall", "gem", "agent", "ruby"]})  # a variant
    assert observed_rewards(np.array([0.0, 0.5, 0.5, 0.91234, 0.0])) == (0.0, 0.5, 0.9123)
    many = observed_rewards(np.linspace(0.1, 1.0, 100))
    assert len(many) == MAX_REWARD_CLASSES and many[0] == 0.0 and many[1] == 0.1 and many[-1] == 1.0


def test_training_on_a_minigrid_file_needs_no_setting_of_its_game(room_file, tmp_path):
    cfg = load_world_model_config(None, [*TINY, f"data.path={room_file}", f"out_dir={tmp_path / 'run'}"])
    summary = train(cfg)
    assert np.isfinite(summary.val["loss"]) and summary.val["view_ce"] > 0 and "reward_ce" in summary.val
    loaded = load_checkpoint(tmp_path / "run")
    model_cfg = loaded.config.model
    assert (model_cfg.num_channels, model_cfg.view_size, model_cfg.num_actions) == (12, 7, 7)
    rewards = _rewards(room_file, loaded.record.splits["train"]).astype(np.float64)
    classes = np.asarray(model_cfg.reward_values)
    assert (rewards > 0).any() and 0.0 in classes  # the training split's rewards, each a class
    assert np.abs(rewards[:, None] - classes[None]).min(1).max() < 1e-4
    # in a 5x5 room the view's three far rows are always behind a wall: read off the files as fixed
    assert set(range(21)) <= set(model_cfg.fixed_cells)
    # MiniGrid's view turns about the viewer, at the bottom middle (3 rows below the view's centre):
    # both quarter turns are read off the files, none is told
    assert sorted(model_cfg.turns) == [(1, 3, 3), (3, 3, -3)]
    # the training window, left empty, is read off the training games: nine in ten give windows
    lengths = np.array([len(_rewards(room_file, [i])) for i in loaded.record.splits["train"]])
    assert model_cfg.train_window == max(3, min(16, int(np.percentile(lengths, 10))))
    assert (lengths >= model_cfg.window).mean() >= 0.9
    views = torch.zeros(2, 3, 12, 7, 7)
    views[:, :, 0] = 1.0
    out = loaded.model(views, torch.zeros(2, 3, dtype=torch.long))
    assert out.view.shape == (2, 3, 12, 7, 7) and out.action.shape == (2, 3, 7)
    assert out.reward.shape == (2, 3, len(model_cfg.reward_values))
    # evaluated beside the baselines any file has: copy and the action frequencies; the motion and
    # memory oracles, the reward rule and the cells' floor know the treasurehunt game and stay out
    metrics = run_evaluation(tmp_path / "run", [room_file], num_boot=20, rollout_horizon=3)
    held_out = metrics["files"][str(room_file)]
    assert set(held_out["predictors"]) == {"model", "copy", "majority_action", "previous_action"}
    assert held_out["floor_method"] is None and metrics["baselines"]["motion_oracle"] is None
    assert "view_ce_vs_copy" in held_out["quality_checks"]
    assert {"reward_ce", "reward_acc", "end_ce", "end_f1"} <= set(held_out["predictors"]["model"])
    assert set(metrics["rollout"]["model_minus"]) == {"copy"}


def _rewards(path: Path, episodes) -> np.ndarray:
    from rpg_env.trajectories.reader import TrajectoryFile

    with TrajectoryFile(path) as tf:
        return np.concatenate([tf.episode(int(i))["rewards"] for i in episodes])


def test_no_line_of_the_world_model_names_minigrid_or_its_objects():
    pattern = re.compile(r"minigrid|\bdoors?\b|\blava\b|\bballs?\b|\bkey_|\"key\"", re.IGNORECASE)
    hits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for path in sorted((ROOT / "rpg_worldmodel").rglob("*.py"))
            for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []


def test_windows_reach_each_games_final_view_and_mark_where_it_ended(room_file):
    """The step that reaches the goal is the game's last: its view and reward are targets (in a
    game that pays only at its goal, every reward is there), and the windows say it ended there."""
    from rpg_env.trajectories.reader import TrajectoryFile
    from rpg_worldmodel.data.stores import NO_ACTION
    from rpg_worldmodel.data.windows import TrajectoryWindows

    with TrajectoryFile(room_file) as tf:
        table = tf.episodes[:]
        paid = float(sum(tf.episode(i)["rewards"].sum() for i in range(len(tf))))
    terminated = (table["flags"] & 1).astype(bool)  # FLAG_TERMINATED
    assert terminated.any() and not terminated.all() and paid > 0
    windows = TrajectoryWindows(room_file, np.arange(len(table)), num_frames=3)
    batch = windows.get_batch(np.arange(len(windows)))
    ends, starts = batch["ends"].numpy()[:, :3], batch["start"].numpy()  # the scored steps
    lengths = table["length"][batch["episode"].numpy()]
    rows, positions = np.nonzero(ends)
    assert len(rows) == int(terminated.sum())  # one end a game that ended, at its last step
    assert (starts[rows] + positions == lengths[rows] - 1).all()
    last = starts + 3 == lengths  # windows ending on the final view: nothing is taken there
    assert (batch["actions"].numpy()[last, -1] == NO_ACTION).all()
    assert (batch["actions"].numpy()[~last] >= 0).all()
    # every point paid is a reward target once: the first window's 3 steps, then each last step
    rewards = batch["rewards"].numpy()
    scored = np.where(starts == 0, rewards[:, :3].sum(1), rewards[:, 2])
    assert scored.sum() == pytest.approx(paid)


def test_the_end_head_trains_on_the_ends_and_a_batch_without_them_trains_none(room_file):
    from rpg_worldmodel.data.windows import TrajectoryWindows
    from rpg_worldmodel.models.world_model import WorldModel

    model_cfg = ModelConfig(width=24, num_heads=2, num_layers=1, num_frames=3, refiner_layers=0,
                            reward_values=(0.0, 1.0))
    fill_view_shape(model_cfg, _meta(room_file))
    model = WorldModel(model_cfg).train()
    windows = TrajectoryWindows(room_file, np.arange(12), num_frames=3)
    batch = windows.get_batch(np.arange(len(windows)))
    assert batch["ends"].any()
    loss, stats = model.loss(batch)
    loss.backward()
    assert stats["end_ce"] > 0 and 0 <= stats["end_acc"] <= 1
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.end_head.parameters())
    _, without = model.loss({k: v for k, v in batch.items() if k != "ends"})
    assert "end_ce" not in without


def test_a_window_left_empty_is_sixteen_steps_unless_a_tenth_of_the_games_are_shorter():
    from rpg_worldmodel.data.shards import fitted_window

    assert fitted_window(np.full(50, 100), num_frames=5) == 16  # treasurehunt: every game 100 turns
    # DoorKey's expert wins in 8-12 steps: the 10th percentile, so nine games in ten give windows
    expert = np.array([8, 9, 9, 9, 10, 11, 11, 12, 12, 12, 13, 14, 15, 9, 10, 11, 12, 9, 10, 11])
    assert fitted_window(expert, num_frames=5) == int(np.percentile(expert, 10)) == 9
    # a lucky 2-step game among 100-step ones (random play in FourRooms) leaves the window as it is
    assert fitted_window(np.array([2, 15, *[100] * 98]), num_frames=5) == 16
    assert fitted_window(np.array([2, 3, 3, 4, 4, 9]), num_frames=5) == 5  # never below num_frames


def test_games_shorter_than_a_training_window_are_named_with_the_window_that_fits(room_file):
    """A won game can be short (an expert's DoorKey game: 9 steps; the default window: 16): such a
    game gives no window, and its end and reward would never be trained on."""
    from rpg_worldmodel.data.shards import DataFiles, short_games_message, training_windows

    files = DataFiles.open(str(room_file))
    splits = {"train": np.arange(8), "val": np.arange(8, 12)}
    lengths = files.store(splits["train"], False).lengths
    window = int(lengths.max())  # every game but the longest is shorter
    with pytest.warns(UserWarning, match=r"training games are shorter than model.train_window") as caught:
        _, _, summary = training_windows(files, splits, load_world_model_config(None).data,
                                         ModelConfig(num_frames=1, train_window=window))
    assert summary["games_without_window"] == int((lengths < window).sum()) > 0
    assert f"set model.train_window={max(1, int(np.percentile(lengths, 10)))}" in str(caught[0].message)
    message = short_games_message(np.array([9, 9, 12, 250]), 16)
    assert message.startswith("3 of 4 training games") and "model.train_window=9" in message
    assert "to train on 100% of them" in message
    # a few short games among long ones (FourRooms, where random play seldom finds the goal fast):
    # the window that trains on every game, not the 10th percentile (longer than the window itself)
    few = short_games_message(np.array([8, 12, *[100] * 18]), 16, least=5)
    assert few.startswith("2 of 20") and "model.train_window=8 (the shortest game's length" in few
    assert "to train on 100% of them" in few
    # never below the model's own num_frames, and then the games still shorter are counted
    clamped = short_games_message(np.array([2, 3, 3, 4, 9, 250]), 16, least=5)
    assert "model.train_window=5" in clamped and "at least model.num_frames = 5" in clamped
    assert "to train on 33% of them; a smaller model.num_frames reaches more" in clamped
