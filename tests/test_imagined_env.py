"""TreasurehuntImagined-v0: the world model as a Gymnasium env and vector env."""

from __future__ import annotations

import shutil
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env

import rpg_env
import rpg_worldmodel
from rpg_base.errors import InputError
from rpg_env.experts import pretrained_path
from rpg_env.policies.sb3 import SB3Policy
from rpg_env.policies.scripted import GreedyPolicy
from rpg_env.record import record
from rpg_env.rollout import rollout
from rpg_worldmodel.checkpoint import load_checkpoint
from rpg_worldmodel.envs.world_model_env import TreasurehuntImaginedEnv, TreasurehuntImaginedVectorEnv

ID = rpg_worldmodel.IMAGINED_ENV_ID


def test_the_single_env_passes_gymnasiums_checker_without_warnings(tiny_world_model):
    run, _ = tiny_world_model
    env = gym.make(ID, checkpoint=run, render_mode="rgb_array").unwrapped
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=False)
    assert [str(w.message) for w in caught] == []
    real = gym.make(rpg_env.ENV_ID)
    assert env.observation_space == real.observation_space and env.action_space == real.action_space
    obs, info = env.reset(seed=0)
    assert info["turn"] == 2 and obs.dtype == np.int8  # the burn-in's real turns count
    assert env.render().shape == (9 * 16, 9 * 16, 3)


def test_the_vector_env_autoresets_past_the_episode_boundary(tiny_world_model):
    run, _ = tiny_world_model
    venv = gym.make_vec(ID, num_envs=4, checkpoint=run)
    assert isinstance(venv.unwrapped, TreasurehuntImaginedVectorEnv)
    obs, info = venv.reset(seed=1)
    assert (info["turn"] == 2).all()
    rng = np.random.default_rng(0)
    for step in range(98):  # turns 3 .. 100
        obs, rewards, terminated, truncated, info = venv.step(rng.integers(0, 4, 4))
        assert (obs.sum(1) == 1).all()  # a valid one-hot view, every cell, every step
        assert not terminated.any() and truncated.all() == (step == 97)
        assert set(np.unique(rewards)) <= {-10.0, -1.0, 0.0, 5.0, 10.0}
    assert (info["turn"] == 100).all()  # the real game's episode length
    obs, rewards, terminated, truncated, info = venv.step(np.zeros(4, dtype=np.int64))
    assert (info["turn"] == 2).all() and (rewards == 0).all() and not truncated.any()
    assert (info["episode_return"] == 0).all() and (info["entropy"] >= 0).all()


def test_same_seed_same_imagined_trajectories_bit_for_bit(tiny_world_model):
    run, _ = tiny_world_model

    def play(seed, **kwargs):
        venv = gym.make_vec(ID, num_envs=3, checkpoint=run, **kwargs)
        obs, _ = venv.reset(seed=seed)
        frames, rewards = [obs], []
        for t in range(20):
            obs, reward, *_ = venv.step(np.array([t % 4, (t + 1) % 4, 3]))
            frames.append(obs)
            rewards.append(reward)
        return np.stack(frames), np.stack(rewards)

    first, again, other = play(5), play(5), play(6)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[0], other[0])
    greedy_a, greedy_b = play(5, sample=False), play(5, temperature=0.5, sample=False)
    np.testing.assert_array_equal(greedy_a[0], greedy_b[0])  # arg-max ignores the temperature


def test_any_policy_of_the_real_game_acts_in_the_dream(tiny_world_model):
    run, _ = tiny_world_model
    venv = gym.make_vec(ID, num_envs=5, checkpoint=run)
    for policy in (SB3Policy.load(pretrained_path("dqn")), GreedyPolicy()):
        result = rollout(venv, policy, seed=2, policy_rng=np.random.default_rng(0))
        assert (result.lengths == 98).all() and np.isfinite(result.returns).all()


def test_one_batched_forward_per_step(tiny_world_model, monkeypatch):
    run, _ = tiny_world_model
    venv = gym.make_vec(ID, num_envs=16, checkpoint=run)
    venv.reset(seed=0)
    model = venv.unwrapped.worlds.model
    calls = []
    original = type(model).imagine_step
    monkeypatch.setattr(type(model), "imagine_step", lambda self, *a, **k: calls.append(a[0].shape[0])
                        or original(self, *a, **k))
    for _ in range(5):
        venv.step(np.zeros(16, dtype=np.int64))
    assert calls == [16] * 5


@pytest.mark.parametrize("threads", [1, 2, None])
def test_steps_run_on_the_thread_setting_and_leave_torchs_own_alone(tiny_world_model, monkeypatch, threads):
    run, _ = tiny_world_model
    before = torch.get_num_threads()
    caller = 3 if before != 3 else 4  # a setting neither 1 nor 2, so a leak would show
    torch.set_num_threads(caller)
    try:
        venv = gym.make_vec(ID, num_envs=2, checkpoint=run, torch_threads=threads)
        model = venv.unwrapped.worlds.model
        seen = []
        original = type(model).imagine_step

        def counting(self, *args, **kwargs):
            seen.append(torch.get_num_threads())
            return original(self, *args, **kwargs)

        monkeypatch.setattr(type(model), "imagine_step", counting)
        venv.reset(seed=0)  # the context's turns go through imagine_step too
        assert torch.get_num_threads() == caller
        venv.step(np.zeros(2, dtype=np.int64))
        assert torch.get_num_threads() == caller  # restored after every step
        assert seen and set(seen) == {threads or caller}
    finally:
        torch.set_num_threads(before)


def test_the_default_is_one_thread_and_a_bad_setting_is_refused(tiny_world_model):
    from rpg_worldmodel.dream import World

    run, _ = tiny_world_model
    assert gym.make(ID, checkpoint=run).unwrapped.worlds.torch_threads == 1
    assert World(str(run), torch_threads=2).make_vec(2).unwrapped.worlds.torch_threads == 2  # dream --threads
    for bad in (0, -2, 1.5, True):
        with pytest.raises(InputError, match="torch_threads must be a positive int"):
            gym.make(ID, checkpoint=run, torch_threads=bad)


def test_context_from_a_file_uses_its_held_out_games(tiny_world_model):
    run, data = tiny_world_model
    env = gym.make(ID, checkpoint=run, reset_from=data).unwrapped
    test_games = set(env.worlds.context.store.episodes.tolist())
    assert test_games == set(load_checkpoint(run).record.splits["test"])
    for seed in range(5):
        _, info = env.reset(seed=seed)
        assert 2 <= info["turn"] < 100


def test_context_from_every_game_of_a_file(tiny_world_model):
    """``reset_split="all"``: a learner imagining from its own experience starts from every game,
    trained on or not (the default keeps to the held-out ones)."""
    run, data = tiny_world_model
    env = gym.make(ID, checkpoint=run, reset_from=data, reset_split="all").unwrapped
    record = load_checkpoint(run).record
    every = set().union(*(set(ids) for ids in record.splits.values()))
    assert set(env.worlds.context.store.episodes.tolist()) == every
    with pytest.raises(InputError, match="reset_split must be 'auto' or 'all'"):
        gym.make(ID, checkpoint=run, reset_from=data, reset_split="train")


def test_a_horizon_truncates_dreams_that_many_turns_after_their_start(tiny_world_model):
    run, _ = tiny_world_model
    venv = gym.make_vec(ID, num_envs=3, checkpoint=run, horizon=4, autoreset_mode="same_step")
    _, info = venv.reset(seed=2)
    started = info["turn"].copy()
    for _ in range(3):
        _, _, terminated, truncated, _ = venv.step(np.zeros(3, dtype=np.int64))
        assert not truncated.any() and not terminated.any()
    _, _, _, truncated, info = venv.step(np.zeros(3, dtype=np.int64))
    assert truncated.all() and (info["final_info"]["turn"] == started + 4).all()
    for _ in range(4):  # the restarted worlds count their own horizon again
        _, _, _, truncated, _ = venv.step(np.zeros(3, dtype=np.int64))
    assert truncated.all()
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InputError, match="horizon must be a positive int"):
            gym.make(ID, checkpoint=run, horizon=bad)


def test_bad_input_is_refused_clearly(tiny_world_model, tmp_path):
    run, _ = tiny_world_model
    with pytest.raises(InputError, match="does not exist"):
        gym.make(ID, checkpoint=tmp_path / "nothing")
    broken = tmp_path / "broken"
    shutil.copytree(run, broken)
    for meta in broken.rglob("meta.json"):
        meta.write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):
        gym.make(ID, checkpoint=broken)
    small = tmp_path / "small.h5"
    record("random", small, 2, seed=0, num_envs=2, mode="w", progress=False,
           env_kwargs={"vision_radius": 2, "max_turns": 10})
    with pytest.raises(InputError, match="views"):
        gym.make(ID, checkpoint=run, reset_from=small)
    env = gym.make(ID, checkpoint=run).unwrapped
    env.reset(seed=0)
    for bad in (4, -1, np.array([1, 2]), 1.5):
        with pytest.raises(InputError, match="actions must"):
            env.step(bad)
    venv = gym.make_vec(ID, num_envs=2, checkpoint=run)
    venv.reset(seed=0)
    with pytest.raises(InputError, match=r"shape \(2,\)"):
        venv.step(np.zeros(3, dtype=np.int64))


def test_sampled_views_are_the_models_own_draw(tiny_world_model):
    # No rule places the agents in a drawn view: a barely trained model, unsure of every cell, draws
    # agents wherever its odds put them, off the centre too, as many as the most a training view
    # held (model.kind_limits, read off the file's views: two).
    run, _ = tiny_world_model
    agent = load_checkpoint(run).record.data.channel_names.index("agent")
    rng = np.random.default_rng(0)
    venv = gym.make_vec(ID, num_envs=16, checkpoint=run, temperature=3.0)
    obs, _ = venv.reset(seed=1)
    centre = obs.shape[-1] // 2
    agents, at_centre = [], []
    for _ in range(6):
        obs, *_ = venv.step(rng.integers(0, 4, 16))
        codes = obs.argmax(1)
        agents.append((codes == agent).sum((1, 2)))
        at_centre.append(codes[:, centre, centre] == agent)
    limit = load_checkpoint(run).config.model.kind_limits[agent]
    assert limit == 2 and np.concatenate(agents).max() == limit and not np.concatenate(at_centre).all()
    with pytest.raises(TypeError, match="views"):  # the placement switch went with the rule
        gym.make(ID, checkpoint=run, views="game")


def test_a_dream_ends_where_the_end_head_says_and_the_vector_env_restarts_it(tiny_world_model):
    run, _ = tiny_world_model
    env = TreasurehuntImaginedEnv(checkpoint=run)
    env.reset(seed=0)
    _, _, terminated, truncated, _ = env.step(0)
    assert not terminated and not truncated  # trained on games that only run out of turns
    with torch.no_grad():
        env.worlds.model.end_head.prior.fill_(30.0)  # the head now says every step ends the game
    _, _, terminated, truncated, _ = env.step(0)
    assert terminated and not truncated
    with pytest.raises(ResetNeeded):
        env.step(0)
    venv = TreasurehuntImaginedVectorEnv(3, checkpoint=run)
    venv.reset(seed=0)
    with torch.no_grad():
        venv.worlds.model.end_head.prior.fill_(30.0)
    _, _, terminated, truncated, _ = venv.step(np.zeros(3, dtype=np.int64))
    assert terminated.all() and not truncated.any()
    _, rewards, terminated, _, infos = venv.step(np.zeros(3, dtype=np.int64))  # the next step restarts them
    assert (rewards == 0).all() and not terminated.any()


def test_where_the_files_paid_only_as_games_ended_a_paying_dream_step_ends_the_dream(tiny_world_model):
    """``model.pays_only_at_ends`` (read off the training files): a step the dream pays ends its game,
    so a dream pays at most once; a step that pays nothing goes on."""
    run, _ = tiny_world_model
    venv = TreasurehuntImaginedVectorEnv(6, checkpoint=run)
    model = venv.worlds.model
    values = np.asarray(model.cfg.reward_values)
    paying = int(np.flatnonzero(values != 0)[0])
    venv.reset(seed=0)
    model.cfg.pays_only_at_ends = True
    with torch.no_grad():
        model.reward_head.mlp[-1].bias[paying] = 1e4  # every step now pays that class
    _, rewards, terminated, truncated, _ = venv.step(np.zeros(6, dtype=np.int64))
    assert (rewards == values[paying]).all() and terminated.all() and not truncated.any()
    model.cfg.pays_only_at_ends = False  # the treasurehunt game pays all along: its dreams go on
    venv.reset(seed=0)
    _, rewards, terminated, _, _ = venv.step(np.zeros(6, dtype=np.int64))
    assert (rewards == values[paying]).all() and not terminated.any()
