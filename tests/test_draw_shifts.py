"""`train.end_repeats` draws the windows that hold a game's end more often; the heads then learn
the odds of the draws, and `draw_shifts` turns them back into the odds of the files, which is what
imagination draws from and evaluation scores (a dream that pays at the draws' odds pays too often)."""

from __future__ import annotations

import math

import h5py
import numpy as np
import pytest
import torch
from conftest import TINY_WORLD_MODEL

from rpg_base.typed_config.values import ConfigError
from rpg_worldmodel.checkpoint import read_checkpoint_record
from rpg_worldmodel.config import ModelConfig, load_world_model_config
from rpg_worldmodel.models.heads import draw_shifts, odds_of_the_files


def test_the_shifts_turn_the_odds_of_the_draws_back_into_the_odds_of_the_files():
    values = (0.0, 1.0)
    rewards = np.array([[0, 0], [0, 0], [0, 0], [0, 1]], dtype=np.float32)  # one paying step of 8
    ends = rewards.astype(bool)  # it ends its game
    draws = np.array([1, 1, 1, 5])  # that window drawn 5 times an epoch: 5 of 16 steps drawn pay
    reward, end = draw_shifts(values, rewards, ends, draws)
    assert reward == pytest.approx((math.log((7 / 8) / (11 / 16)), math.log((1 / 8) / (5 / 16))))
    assert end == pytest.approx(math.log(1 / 7) - math.log(5 / 11))
    # a head that learned nothing but the draws' odds, shifted, gives the files' odds
    learned = torch.log(torch.tensor([11 / 16, 5 / 16]))
    cfg = ModelConfig(reward_values=values, reward_shift=reward, end_shift=end)
    shifted_reward, shifted_end = odds_of_the_files(cfg, learned, torch.logit(torch.tensor(5 / 16)))
    assert torch.softmax(shifted_reward, -1).tolist() == pytest.approx([7 / 8, 1 / 8])
    assert float(torch.sigmoid(shifted_end)) == pytest.approx(1 / 8)


def test_windows_drawn_alike_shift_nothing_and_a_class_no_step_shows_is_left_alone():
    rewards = np.array([[0, 0.5], [0, 0]], dtype=np.float32)  # no step pays 1
    reward, end = draw_shifts((0.0, 0.5, 1.0), rewards, np.zeros_like(rewards, dtype=bool), np.array([3, 3]))
    assert reward == pytest.approx((0.0, 0.0, 0.0)) and end == 0.0
    reward, _ = draw_shifts((0.0, 0.5, 1.0), rewards, np.zeros_like(rewards, dtype=bool), np.array([4, 1]))
    assert reward[2] == 0.0 and reward[1] < 0 < reward[0]
    assert draw_shifts((), rewards, rewards > 0, np.array([1, 1]))[0] == ()  # no reward head


def test_a_shift_per_reward_class_or_none():
    with pytest.raises(ConfigError, match="model.reward_shift holds a logit per class"):
        ModelConfig(reward_values=(0.0, 1.0), reward_shift=(0.1,)).validate()


@pytest.fixture(scope="module")
def empty_room(tmp_path_factory):
    pytest.importorskip("minigrid")
    from rpg_env.record import record

    games = tmp_path_factory.mktemp("empty_room") / "empty.h5"  # a random walk reaches the goal in some games
    record("random", games, 24, seed=0, num_envs=4, env_id="OneHotMiniGrid-v0",
           env_kwargs={"task": "MiniGrid-Empty-5x5-v0"}, progress=False)
    return games


def test_the_scored_steps_are_the_rewards_and_ends_the_loss_reads(empty_room):
    from rpg_worldmodel.data.stores import EpisodeStore
    from rpg_worldmodel.data.windows import TrajectoryWindows

    with h5py.File(empty_room, "r") as f:
        count = len(f["episodes"])
    windows = TrajectoryWindows.of(EpisodeStore.load(empty_room, np.arange(count)), num_frames=4)
    rewards, ends = windows.scored_steps(chunk=7)  # several chunks
    batch = windows.get_batch(np.arange(len(windows)))
    np.testing.assert_array_equal(rewards, batch["rewards"][:, :4].numpy())
    np.testing.assert_array_equal(ends, batch["ends"][:, :4].numpy())
    assert ends.any() and (rewards > 0).any()


def test_training_with_end_repeats_records_the_shifts_and_without_records_none(empty_room, tmp_path):
    from rpg_worldmodel.train import train

    overrides = [*TINY_WORLD_MODEL, "model.train_window=4", "model.reward_values=[0.0,0.5,1.0]"]
    shifted = load_world_model_config(None, [*overrides, "train.end_repeats=5"])
    shifted.data.path, shifted.out_dir = str(empty_room), str(tmp_path / "repeats")
    train(shifted)
    model = read_checkpoint_record(tmp_path / "repeats", "best").config.model
    assert len(model.reward_shift) == 3 and model.reward_shift[0] > 0  # nothing paid: likelier in the files
    assert min(model.reward_shift[1:]) < 0 and model.end_shift < 0  # paying and ending: rarer in the files
    plain = load_world_model_config(None, overrides)
    plain.data.path, plain.out_dir = str(empty_room), str(tmp_path / "plain")
    train(plain)
    model = read_checkpoint_record(tmp_path / "plain", "best").config.model
    assert model.reward_shift == () and model.end_shift == 0.0


def test_a_model_fine_tuned_from_one_with_shifts_reads_its_own(empty_room, tmp_path):
    """The IRIS loop fine-tunes each iteration's model from the last one's (train.init_from): the
    shifts hold no weight, so the start's never stand in the way, and each run records its own."""
    from rpg_worldmodel.train import train

    overrides = [*TINY_WORLD_MODEL, "model.train_window=4", "model.reward_values=[0.0,0.5,1.0]"]
    start = load_world_model_config(None, [*overrides, "train.end_repeats=5"])
    start.data.path, start.out_dir = str(empty_room), str(tmp_path / "start")
    train(start)
    before = read_checkpoint_record(tmp_path / "start", "best").config.model
    for repeats, folder in ((9, "more"), (0, "none")):
        tuned = load_world_model_config(None, [*overrides, f"train.end_repeats={repeats}",
                                               f"train.init_from={tmp_path / 'start'}"])
        tuned.data.path, tuned.out_dir = str(empty_room), str(tmp_path / folder)
        train(tuned)
        after = read_checkpoint_record(tmp_path / folder, "best").config.model
        if repeats:
            assert after.end_shift < before.end_shift < 0  # drawn 10 times rather than 6
        else:
            assert after.reward_shift == () and after.end_shift == 0.0
