"""`OneHotMiniGrid-v0`: MiniGrid's egocentric view as one-hot named kinds, checked against MiniGrid's
own grid, and recorded to trajectory files by `python -m rpg_env.record` with MiniGrid's own ids."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rpg_env
from rpg_base.cli import command_status
from rpg_base.errors import InputError
from rpg_base.typed_config.values import ConfigError
from rpg_env.envs.minigrid_views import (
    COLORS,
    DOOR_STATES,
    OBJECTS,
    OneHotViews,
    kind_names,
    kind_table,
    one_hot_twin,
)
from rpg_env.envs.protocol import describe
from rpg_env.experts.config import load_expert_config
from rpg_env.experts.train import train
from rpg_env.policies.registry import load_expert_policy
from rpg_env.record import main as record_main
from rpg_env.trajectories.reader import TrajectoryFile

minigrid = pytest.importorskip("minigrid")
from minigrid.core.world_object import Ball, Door, Key  # noqa: E402

TASK = "MiniGrid-DoorKey-5x5-v0"


def expected_kind(cell, colors: bool = False) -> str:
    """The channel name a MiniGrid world object (or None) must land in, from the object itself."""
    if cell is None:
        return "empty"
    name = f"door_{'locked' if cell.is_locked else 'open' if cell.is_open else 'closed'}" \
        if cell.type == "door" else cell.type
    return f"{name}_{cell.color}" if colors and cell.type in ("door", "key", "ball", "box") else name


def test_every_cell_code_has_one_kind_and_the_agent_none():
    for colors in (False, True):
        names, table = kind_names(colors), kind_table(colors)
        assert len(set(names)) == len(names)
        assert table.shape == (len(OBJECTS), len(COLORS), len(DOOR_STATES))
        assert (table[OBJECTS.index("agent")] == -1).all()
        assert set(table[: OBJECTS.index("agent")].ravel()) == set(range(len(names)))
    assert len(kind_names()) == 12 and "door_locked" in kind_names()
    assert "key_yellow" in kind_names(True) and "wall" in kind_names(True)


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped")
def test_made_env_passes_gymnasium_checker_and_declares_the_protocol():
    env = gym.make(rpg_env.MINIGRID_ID, task=TASK)
    check_env(env, skip_render_check=True)
    meta = env.metadata
    assert meta["channel_names"] == kind_names()
    assert meta["action_names"] == ("left", "right", "forward", "pickup", "drop", "toggle", "done")
    assert meta["max_turns"] == 250
    assert meta["rules"] == {"task": TASK, "colors": False, "size": 5, "max_steps": 250}
    described = describe(env)  # how a view is drawn: one colour per kind, the agent at the bottom middle
    assert described.agent_cell == (6, 3) and len(described.channel_colors) == len(kind_names())
    coloured = describe(gym.make(rpg_env.MINIGRID_ID, task=TASK, colors=True))
    assert len(set(coloured.channel_colors)) == len(kind_names(colors=True))  # every kind its own colour
    assert len(set(described.channel_colors)) == len(kind_names())
    # the rules make the same env again
    again = gym.make(rpg_env.MINIGRID_ID, **meta["rules"])
    a, _ = env.reset(seed=3)
    b, _ = again.reset(seed=3)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("colors", [False, True])
def test_an_expert_config_names_a_recorded_twin_as_its_task_under_the_one_hot_wrapper(colors):
    """`expert_env` turns a file's record of the twin (whose task arguments a config cannot check by
    name) into the task and the wrapper: a config accepts it, and its env shows the same views."""
    from rpg_env.envs.any_env import expert_env, make_wrapped_env

    twin = gym.make(rpg_env.MINIGRID_ID, task=TASK, max_steps=30, colors=colors)
    rules = dict(twin.metadata["rules"])
    env_id, env_kwargs, wrappers = expert_env(rpg_env.MINIGRID_ID, rules)
    assert env_id == f"minigrid:{TASK}" and env_kwargs == {"size": 5, "max_steps": 30}
    cfg = load_expert_config("ppo", env_id=env_id, env_kwargs=env_kwargs, wrappers=wrappers)
    with make_wrapped_env(cfg.env_id, cfg.env, cfg.wrappers) as named:
        assert named.observation_space == twin.observation_space
        a, _ = twin.reset(seed=4)
        b, _ = named.reset(seed=4)
        np.testing.assert_array_equal(a, b)
        for action in np.random.default_rng(0).integers(0, 7, 20):
            a, *_ = twin.step(int(action))
            b, *_ = named.step(int(action))
            np.testing.assert_array_equal(a, b)
    assert expert_env("Treasurehunt-v0", {"max_turns": 50}) == ("Treasurehunt-v0", {"max_turns": 50}, [])
    with pytest.raises(ConfigError, match="unknown key .env.size"):  # the twin cannot name the task's
        load_expert_config("ppo", env_id=rpg_env.MINIGRID_ID, env_kwargs=rules)


def test_each_step_view_is_minigrids_own_grid_seen_from_the_agent():
    """Every cell of the one-hot view, over a random game, is the kind of the grid cell MiniGrid's
    own state puts there (its ``get_view_exts``/``relative_coords``), or unseen."""
    env = gym.make(rpg_env.MINIGRID_ID, task="MiniGrid-MultiRoom-N2-S4-v0")
    names = env.metadata["channel_names"]
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(60):
        u = env.unwrapped
        assert obs.sum(0).min() == obs.sum(0).max() == 1  # one kind a cell
        v = u.agent_view_size
        grid, seen = u.gen_obs_grid()
        for y in range(v):
            for x in range(v):
                kind = names[int(obs[:, y, x].argmax())]
                want = expected_kind(grid.get(x, y)) if seen[x, y] else "unseen"
                if (x, y) == (v // 2, v - 1):  # the agent's own cell shows what it carries
                    want = expected_kind(u.carrying)
                assert kind == want, (x, y, kind, want)
                checked += 1
        # the cell ahead is the world's cell in front of the agent
        ahead = names[int(obs[:, v - 2, v // 2].argmax())]
        assert ahead == expected_kind(u.grid.get(*u.front_pos))
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(0, 7)))
        if terminated or truncated:
            obs, _ = env.reset()
    assert checked == 60 * 49


def test_door_states_carried_keys_and_colours_are_kinds():
    for colors in (False, True):
        env = gym.make(rpg_env.MINIGRID_ID, task="MiniGrid-Empty-5x5-v0", colors=colors)
        env.reset(seed=0)
        u, wrapper = env.unwrapped, env.env
        names = env.metadata["channel_names"]
        v = u.agent_view_size
        for door in (Door("yellow", is_locked=True), Door("red", is_open=True), Door("blue")):
            u.grid.set(*u.front_pos, door)
            view = wrapper.observation(u.gen_obs())
            assert names[int(view[:, v - 2, v // 2].argmax())] == expected_kind(door, colors)
        for carried in (Key("yellow"), Ball("green")):
            u.carrying = carried
            view = wrapper.observation(u.gen_obs())
            assert names[int(view[:, v - 1, v // 2].argmax())] == expected_kind(carried, colors)


def test_bad_tasks_are_refused():
    with pytest.raises(InputError, match="MiniGrid env id"):
        gym.make(rpg_env.MINIGRID_ID, task="CartPole-v1")
    with pytest.raises(InputError, match="does not take"):
        gym.make(rpg_env.MINIGRID_ID, task=TASK, no_such_argument=1)
    with pytest.raises(InputError, match="symbolic view"):
        OneHotViews(gym.make("CartPole-v1"))
    assert one_hot_twin("minigrid:MiniGrid-DoorKey-5x5-v0", {"colors": True}) == (
        rpg_env.MINIGRID_ID, {"task": TASK, "colors": True})
    assert one_hot_twin("CartPole-v1", {}) == ("CartPole-v1", {})


def test_record_cli_writes_minigrid_games_that_replay_in_minigrid(tmp_path, capsys):
    out = tmp_path / "doorkey.h5"
    args = ["--policy", "random", "--episodes", "5", "--out", str(out), "--env-id", TASK, "--num-envs", "2",
            "--seed", "7", "--no-progress"]
    assert record_main(args) == 0
    assert "wrote 5 games (5 streams, policy random)" in capsys.readouterr().out
    with TrajectoryFile(out) as tf:
        assert tf.meta["env_id"] == rpg_env.MINIGRID_ID and tf.meta["env_kwargs"]["task"] == TASK
        assert tuple(tf.meta["channel_names"]) == kind_names() and len(tf.meta["action_names"]) == 7
        assert len(tf) == 5 and (tf.episodes["agent_id"] == 0).all()
        actions = np.concatenate([tf.episode(i)["actions"] for i in range(5)])
        assert set(actions.tolist()) == set(range(7))  # the env's 7 actions, not the game's 4
        # a stream is MiniGrid's own game: made from the file's env id and kwargs, reset with the
        # stream's seed (a vector env seeds world i with seed + i), it shows the same views
        for i in range(5):
            row, ep = tf.episodes[i], tf.episode(i)
            env = gym.make(tf.meta["env_id"], **tf.meta["env_kwargs"])
            obs, _ = env.reset(seed=int(row["seed"]) + int(row["env_index"]))
            np.testing.assert_array_equal(obs, ep["obs"][0])
            for t, action in enumerate(ep["actions"]):
                obs, reward, *_ = env.step(int(action))
                np.testing.assert_array_equal(obs, ep["obs"][t + 1])
                assert np.float32(reward) == ep["rewards"][t]
    again = tmp_path / "again.h5"
    assert record_main([*args[:5], str(again), *args[6:]]) == 0
    with TrajectoryFile(out) as a, TrajectoryFile(again) as b:
        assert a.digest() == b.digest()


def test_record_cli_refuses_game_settings_for_another_env(tmp_path, capsys):
    out = tmp_path / "x.h5"
    status = command_status(record_main, ["--policy", "random", "--episodes", "2", "--out", str(out),
                                          "--env-id", TASK, "--vision-radius", "3", "--no-progress"])
    assert status == 2 and "--env-kwargs" in capsys.readouterr().err and not out.exists()
    status = command_status(record_main, ["--policy", "random", "--episodes", "2", "--out", str(out),
                                          "--env-id", TASK, "--env-kwargs", "[1, 2]", "--no-progress"])
    assert status == 2 and "mapping" in capsys.readouterr().err and not out.exists()


def test_an_sb3_expert_trained_on_a_minigrid_task_records_its_own_choices(tmp_path):
    cfg = load_expert_config("ppo", env_id=rpg_env.MINIGRID_ID, env_kwargs={"task": TASK},
                             overrides=["timesteps=256", "n_envs=2", "progress_bar=false",
                                        "net.features_dim=16", "hyperparams.n_steps=128",
                                        "hyperparams.batch_size=64",
                                        "hyperparams.n_epochs=1", "eval.freq=100000", "eval.final_episodes=2",
                                        "checkpoint_freq=100000", "seed=1"])
    run = train(cfg, tmp_path / "run")
    out = tmp_path / "expert.h5"
    assert record_main(["--policy", str(run / "model.zip"), "--episodes", "2", "--out", str(out),
                        "--env-id", TASK, "--num-envs", "2", "--no-progress"]) == 0
    policy = load_expert_policy(run / "model.zip")
    with TrajectoryFile(out) as tf:
        assert tf.episodes["policy_id"].tolist() == ["sb3-run"] * 2
        ep = tf.episode(0)
        # the recorded actions are the expert's own (deterministic) choices on the recorded views,
        # shown one turn at a time (the expert may stack its last views)
        chosen = [policy.act(view[None].astype(np.int8), np.array([t == 0]))[0]
                  for t, view in enumerate(ep["obs"][:-1])]
        np.testing.assert_array_equal(chosen, ep["actions"])
