"""HDF5Recorder / HDF5VectorRecorder: what is recorded, appending rules, SIGKILL survival."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import gymnasium as gym
import numpy as np
import pytest

import rpg_env
from rpg_env.trajectories.format import (
    FLAG_INTERRUPTED,
    FLAG_TRUNCATED,
    EnvMismatchError,
    TrajectoryFormatError,
    UncleanFileError,
)
from rpg_env.trajectories.maintenance import repair, validate
from rpg_env.trajectories.reader import TrajectoryFile
from rpg_env.trajectories.recorders import HDF5Recorder, HDF5VectorRecorder

SMALL = {"height": 8, "width": 8, "vision_radius": 2, "max_turns": 6, "spawn_prob": 0.1}


def play(env: gym.Env, games: int, seed: int, rng_seed: int = 0) -> list[dict]:
    """Play ``games`` full games with random actions; returns what the env showed, per game."""
    rng = np.random.default_rng(rng_seed)
    trace = []
    obs, info = env.reset(seed=seed)
    for g in range(games):
        t = {"obs": [obs], "co_obs": [info["co_obs"][0]], "actions": [], "rewards": [],
             "co_actions": [], "co_rewards": []}
        done = False
        while not done:
            action = int(rng.integers(4))
            obs, reward, terminated, truncated, info = env.step(action)
            t["obs"].append(obs)
            t["co_obs"].append(info["co_obs"][0])
            t["actions"].append(action)
            t["rewards"].append(reward)
            t["co_actions"].append(int(info["co_actions"][0]))
            t["co_rewards"].append(float(info["co_rewards"][0]))
            done = terminated or truncated
        trace.append(t)
        if g < games - 1:
            obs, info = env.reset()
    return trace


def test_single_env_records_learner_and_co_player(tmp_path):
    path = tmp_path / "h.h5"
    env = HDF5Recorder(gym.make(rpg_env.ENV_ID, co_policy="greedy", **SMALL), path, policy_id="human")
    trace = play(env, games=3, seed=11)
    env.close()
    with TrajectoryFile(path) as tf:
        ep = tf.episodes
        assert len(tf) == 6
        assert ep["game_id"].tolist() == [0, 0, 1, 1, 2, 2]
        assert ep["agent_id"].tolist() == [0, 1] * 3
        assert ep["policy_id"].tolist() == ["human", "greedy"] * 3
        assert ep["seed"].tolist() == [11] * 6 and ep["reset_count"].tolist() == [0, 0, 1, 1, 2, 2]
        assert (ep["length"] == SMALL["max_turns"]).all()
        assert ((ep["flags"] & FLAG_TRUNCATED) != 0).all()
        assert tf.meta["env_kwargs"]["max_turns"] == 6 and tf.meta["obs_shape"] == (6, 5, 5)
        assert tf.meta["action_names"] == ["up", "down", "left", "right"]
        for g, t in enumerate(trace):
            learner, co = tf.episode(2 * g), tf.episode(2 * g + 1)
            np.testing.assert_array_equal(learner["obs"], np.stack(t["obs"]))  # incl. last next-obs
            np.testing.assert_array_equal(learner["actions"], t["actions"])
            np.testing.assert_array_equal(learner["rewards"], np.float32(t["rewards"]))
            np.testing.assert_array_equal(co["obs"], np.stack(t["co_obs"]))
            np.testing.assert_array_equal(co["actions"], t["co_actions"])
            np.testing.assert_array_equal(co["rewards"], np.float32(t["co_rewards"]))
            assert ep["return"][2 * g] == pytest.approx(sum(t["rewards"]))
    assert validate(path, deep=True) == []


def test_interrupted_games_dropped_or_flagged(tmp_path):
    for keep in (False, True):
        path = tmp_path / f"i{keep}.h5"
        env = HDF5Recorder(gym.make(rpg_env.ENV_ID, **SMALL), path, policy_id="p", keep_interrupted=keep,
                           record_co_players=False)
        env.reset(seed=0)
        env.step(0)
        env.step(1)
        env.reset()  # restart mid-game
        for _ in range(SMALL["max_turns"]):
            env.step(2)
        env.reset()
        env.step(3)
        env.close()  # quit mid-game
        with TrajectoryFile(path) as tf:
            flags = tf.episodes["flags"]
            if keep:
                assert tf.episodes["length"].tolist() == [2, 6, 1]
                assert [bool(f & FLAG_INTERRUPTED) for f in flags] == [True, False, True]
            else:
                assert tf.episodes["length"].tolist() == [6]
                assert not flags[0] & FLAG_INTERRUPTED


def test_append_same_settings_and_refuse_others(tmp_path):
    path = tmp_path / "a.h5"
    for _ in range(2):
        env = HDF5Recorder(gym.make(rpg_env.ENV_ID, **SMALL), path, policy_id="random")
        play(env, games=2, seed=1)
        env.close()
    with TrajectoryFile(path) as tf:
        assert tf.episodes["game_id"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
        assert tf.episodes["run"].tolist() == [0] * 4 + [1] * 4
        digest = tf.digest()
    other = gym.make(rpg_env.ENV_ID, **{**SMALL, "max_turns": 9})
    with pytest.raises(EnvMismatchError, match=r"env_kwargs\.max_turns \(file: 6, new: 9\)"):
        HDF5Recorder(other, path, policy_id="random")
    with TrajectoryFile(path) as tf:
        assert tf.digest() == digest


def test_recorder_rejects_non_onehot_env_and_bad_policy_id(tmp_path):
    with pytest.raises(ValueError, match="obs_mode='onehot'"):
        HDF5Recorder(gym.make(rpg_env.ENV_ID, obs_mode="rgb", **SMALL), tmp_path / "x.h5")
    with pytest.raises(ValueError, match="policy_id"):
        HDF5Recorder(gym.make(rpg_env.ENV_ID, **SMALL), tmp_path / "y.h5", policy_id="")
    assert not (tmp_path / "x.h5").exists() and not (tmp_path / "y.h5").exists()
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"garbage" * 50)
    with pytest.raises(TrajectoryFormatError, match="not an HDF5 file"):
        HDF5Recorder(gym.make(rpg_env.ENV_ID, **SMALL), bad)
    assert bad.read_bytes() == b"garbage" * 50


def _vector_trace(mode: str, path, games: int, num_envs: int = 3):
    env = gym.make_vec(rpg_env.ENV_ID, num_envs=num_envs, autoreset_mode=mode, **SMALL)
    rec = HDF5VectorRecorder(env, path, policy_id="random", max_games=games)
    rng = np.random.default_rng(0)
    obs, _ = rec.reset(seed=5)
    seen = []  # per step: (obs before, actions, rewards, obs after, done)
    while not rec.done:
        actions = rng.integers(0, 4, size=num_envs)
        new_obs, rewards, term, trunc, infos = rec.step(actions)
        seen.append((obs, actions, rewards, new_obs, term | trunc, infos))
        obs = new_obs
    rec.close()
    return seen


def test_vector_same_step_records_every_world(tmp_path):
    path = tmp_path / "v.h5"
    seen = _vector_trace("SameStep", path, games=7)
    with TrajectoryFile(path) as tf:
        ep = tf.episodes
        assert len(np.unique(ep["game_id"])) == 7 and len(tf) == 14
        assert (ep["length"] == SMALL["max_turns"]).all()
        assert sorted(ep["env_index"][ep["agent_id"] == 0].tolist()) == [0, 0, 0, 1, 1, 2, 2]
        # Stream of world 1's first game equals what the env returned (last obs from final_obs).
        first = int(np.flatnonzero((ep["env_index"] == 1) & (ep["agent_id"] == 0))[0])
        e = tf.episode(first)
        steps = seen[: SMALL["max_turns"]]
        np.testing.assert_array_equal(e["obs"][:-1], np.stack([s[0][1] for s in steps]))
        np.testing.assert_array_equal(e["obs"][-1], steps[-1][5]["final_obs"][1])
        np.testing.assert_array_equal(e["actions"], [s[1][1] for s in steps])
        np.testing.assert_array_equal(e["rewards"], [s[2][1] for s in steps])
    assert validate(path, deep=True) == []


def test_vector_next_step_autoreset_games_are_complete(tmp_path):
    path = tmp_path / "n.h5"
    seen = _vector_trace("NextStep", path, games=6)
    with TrajectoryFile(path) as tf:
        assert len(tf) == 12
        assert (tf.episodes["length"] == SMALL["max_turns"]).all()
        assert tf.episodes["reset_count"].tolist() == [0] * 6 + [1] * 6
        # World 2's second game starts at the observation returned by the autoreset step.
        second = int(np.flatnonzero((tf.episodes["env_index"] == 2) & (tf.episodes["agent_id"] == 0))[1])
        e = tf.episode(second)
        reset_step = SMALL["max_turns"]  # index in `seen` of the step that reset the worlds
        np.testing.assert_array_equal(e["obs"][0], seen[reset_step][3][2])
        later = [s[1][2] for s in seen[reset_step + 1:]]
        np.testing.assert_array_equal(e["actions"], later[: len(e["actions"])])
    assert validate(path, deep=True) == []


def test_vector_recorder_learner_only_and_max_games(tmp_path):
    env = gym.make_vec(rpg_env.ENV_ID, num_envs=4, **SMALL)
    rec = HDF5VectorRecorder(env, tmp_path / "m.h5", policy_id="x", record_co_players=False, max_games=2)
    obs, _ = rec.reset(seed=0)
    assert rec.episode_start.all()
    while not rec.done:
        rec.step(np.zeros(4, dtype=np.int64))
        assert not rec.episode_start.any() or rec.done
    rec.close()
    with TrajectoryFile(tmp_path / "m.h5") as tf:
        assert len(tf) == 2 and (tf.episodes["agent_id"] == 0).all()
        assert tf.episodes["env_index"].tolist() == [0, 1]  # lowest world indices win


# --------------------------------------------------------------------------- SIGKILL
CHILD = textwrap.dedent("""
    import sys, numpy as np, gymnasium as gym, rpg_env
    from rpg_env.trajectories.recorders import HDF5Recorder
    env = HDF5Recorder(gym.make(rpg_env.ENV_ID, **{small!r}), sys.argv[1], policy_id="random")
    rng = np.random.default_rng(0)
    env.reset(seed=3)
    while True:  # records forever, until killed
        _, _, terminated, truncated, _ = env.step(int(rng.integers(4)))
        if terminated or truncated:
            env.reset()
""")


def _record_games(path, games: int) -> None:
    """What the child records, in-process: the same seed and actions, ``games`` games."""
    env = HDF5Recorder(gym.make(rpg_env.ENV_ID, **SMALL), path, policy_id="random")
    rng = np.random.default_rng(0)
    env.reset(seed=3)
    done_games = 0
    while done_games < games:
        _, _, terminated, truncated, _ = env.step(int(rng.integers(4)))
        if terminated or truncated:
            done_games += 1
            env.reset()
    env.close()


def test_sigkill_mid_recording_keeps_committed_games(tmp_path):
    path = tmp_path / "live.h5"
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(small=SMALL))
    child = subprocess.Popen([sys.executable, str(script), str(path)])
    want, seen_growth = 20, False
    try:
        deadline = time.monotonic() + 120
        tf = None
        while tf is None:  # the file appears once the child has set it up
            assert time.monotonic() < deadline and child.poll() is None
            try:
                tf = TrajectoryFile(path)
            except (FileNotFoundError, TrajectoryFormatError):
                time.sleep(0.05)
        with tf:  # a concurrent SWMR reader sees committed games arrive
            want = max(want, len(tf) + 10)  # growth past what the reader saw when it opened
            while len(tf) < want:
                assert time.monotonic() < deadline and child.poll() is None
                time.sleep(0.02)
                seen_growth |= tf.refresh() > 0
            tf.episode(len(tf) - 1)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert seen_growth
    with TrajectoryFile(path) as tf:
        committed = len(tf)
        assert committed >= want and committed % 2 == 0  # whole games only
        digest = tf.digest()
    reference = tmp_path / "reference.h5"
    _record_games(reference, committed // 2)
    with TrajectoryFile(reference) as ref:
        assert ref.digest() == digest  # every committed episode reads back exactly

    with pytest.raises(UncleanFileError, match="repair"):
        HDF5Recorder(gym.make(rpg_env.ENV_ID, **SMALL), path, policy_id="random")
    fixed = tmp_path / "fixed.h5"
    assert repair(path, fixed) == committed
    env = HDF5Recorder(gym.make(rpg_env.ENV_ID, **SMALL), fixed, policy_id="more")
    play(env, games=1, seed=99)
    env.close()
    with TrajectoryFile(fixed) as tf:
        assert len(tf) == committed + 2
        assert tf.episodes["policy_id"][-2:].tolist() == ["more", "random"]
        assert tf.episodes["game_id"][-1] == committed // 2
    assert validate(fixed, deep=True) == []


def test_three_agents_give_three_streams_per_game(tmp_path):
    env = gym.make_vec(rpg_env.ENV_ID, num_envs=2, **{**SMALL, "num_agents": 3}, co_policy="greedy")
    rec = HDF5VectorRecorder(env, tmp_path / "3.h5", policy_id="me", max_games=2)
    obs, infos = rec.reset(seed=4)
    first_co = infos["co_obs"][1, 1].copy()  # world 1, co-player 2
    while not rec.done:
        rec.step(np.ones(2, dtype=np.int64))
    rec.close()
    with TrajectoryFile(tmp_path / "3.h5") as tf:
        assert tf.episodes["agent_id"].tolist() == [0, 1, 2] * 2
        assert tf.episodes["policy_id"].tolist() == ["me", "greedy", "greedy"] * 2
        np.testing.assert_array_equal(tf.episode(5)["obs"][0], first_co)


# --------------------------------------------------------------------------- envs that hide the game
class HiddenGame(gym.Env):
    """Treasurehunt-v0 behind a plain `gym.Env`: no spec, no world, no params, only the spaces,
    the metadata of the env protocol and the Gymnasium methods."""

    def __init__(self, drop_rules: bool = False, **kwargs):
        self._inner = gym.make(rpg_env.ENV_ID, render_mode="rgb_array", **kwargs)
        self.observation_space = self._inner.observation_space
        self.action_space = self._inner.action_space
        self.metadata = {k: v for k, v in self._inner.metadata.items() if not (drop_rules and k == "rules")}
        self.render_mode = "rgb_array"

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._inner.reset(seed=seed, options=options)

    def step(self, action):
        return self._inner.step(action)

    def render(self):
        return self._inner.render()

    def close(self):
        self._inner.close()


class HiddenVectorGame(gym.vector.VectorEnv):
    """The native Treasurehunt vector env behind a plain `VectorEnv`, hiding the game likewise."""

    def __init__(self, num_envs: int, drop_rules: bool = False, **kwargs):
        self._inner = gym.make_vec(rpg_env.ENV_ID, num_envs=num_envs, render_mode="rgb_array", **kwargs)
        self.num_envs = num_envs
        self.observation_space = self._inner.observation_space
        self.action_space = self._inner.action_space
        self.single_observation_space = self._inner.single_observation_space
        self.single_action_space = self._inner.single_action_space
        self.metadata = {k: v for k, v in self._inner.metadata.items() if not (drop_rules and k == "rules")}
        self.render_mode = "rgb_array"

    def reset(self, *, seed=None, options=None):
        return self._inner.reset(seed=seed, options=options)

    def step(self, actions):
        return self._inner.step(actions)

    def render(self):
        return self._inner.render()

    def close(self, **kwargs):
        self._inner.close(**kwargs)


@pytest.mark.parametrize("drop_rules", [False, True])
def test_single_recorder_records_an_env_that_hides_the_game(tmp_path, drop_rules):
    settings = {**SMALL, "num_agents": 3, "co_policy": "greedy"}
    hidden = HiddenGame(drop_rules=drop_rules, **settings)
    assert hidden.spec is None and not hasattr(hidden.unwrapped, "params")
    digests, metas = [], []
    for name, env in (("real", gym.make(rpg_env.ENV_ID, **settings)), ("hidden", hidden)):
        rec = HDF5Recorder(env, tmp_path / f"{name}.h5", policy_id="me")
        play(rec, games=2, seed=21)
        assert rec.agents_recorded == 3 and rec.games_recorded == 2
        rec.close()
        with TrajectoryFile(tmp_path / f"{name}.h5") as tf:
            digests.append(tf.digest())
            metas.append(tf.meta)
            assert tf.episodes["policy_id"].tolist() == ["me", "greedy", "greedy"] * 2
    assert digests[0] == digests[1]
    assert metas[0]["env_id"] == rpg_env.ENV_ID and metas[1]["env_id"] == "HiddenGame"
    assert metas[1]["env_kwargs"] == ({} if drop_rules else metas[0]["env_kwargs"])
    assert metas[1]["obs_shape"] == metas[0]["obs_shape"]
    assert metas[1]["channel_names"] == metas[0]["channel_names"]


@pytest.mark.parametrize(("mode", "drop_rules"), [("NextStep", False), ("SameStep", False),
                                                  ("NextStep", True)])
def test_vector_recorder_records_a_vector_env_that_hides_the_game(tmp_path, mode, drop_rules):
    settings = {**SMALL, "autoreset_mode": mode, "co_policy": "greedy"}
    digests = []
    for name, env in (("real", gym.make_vec(rpg_env.ENV_ID, num_envs=3, **settings)),
                      ("hidden", HiddenVectorGame(3, drop_rules=drop_rules, **settings))):
        rec = HDF5VectorRecorder(env, tmp_path / f"{name}.h5", policy_id="me", max_games=5)
        rng = np.random.default_rng(1)
        rec.reset(seed=8)
        while not rec.done:
            rec.step(rng.integers(0, 4, size=3))
        assert rec.agents_recorded == 2
        rec.close()
        with TrajectoryFile(tmp_path / f"{name}.h5") as tf:
            digests.append(tf.digest())
            assert len(tf) == 10 and tf.episodes["policy_id"].tolist() == ["me", "greedy"] * 5
            if name == "hidden":
                assert tf.meta["env_id"] == "HiddenVectorGame"
    assert digests[0] == digests[1]


def test_recorder_needs_the_env_protocol_metadata(tmp_path):
    hidden = HiddenGame(**SMALL)
    hidden.metadata = {"render_modes": ["rgb_array"]}
    with pytest.raises(ValueError, match="channel_names"):
        HDF5Recorder(hidden, tmp_path / "p.h5")
    assert not (tmp_path / "p.h5").exists()
