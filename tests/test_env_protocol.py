"""Environments are interchangeable: anything with Treasurehunt-v0's spaces, frames and protocol
metadata is recorded, evaluated and described the same way, even when it hides the game."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import VectorEnv

import rpg_env
from rpg_env.envs.protocol import describe
from rpg_env.experts import pretrained_path
from rpg_env.experts.evaluate import compare
from rpg_env.record import record
from rpg_env.trajectories.reader import TrajectoryFile

HIDDEN_ID = "HiddenTreasurehunt-v0"


class HiddenGame(gym.Env):
    """Treasurehunt-v0 behind a wall: no world, no params, only spaces, metadata and frames."""

    def __init__(self, **kwargs):
        self._inner = gym.make(rpg_env.ENV_ID, render_mode="rgb_array", **kwargs)
        self.observation_space, self.action_space = self._inner.observation_space, self._inner.action_space
        self.metadata, self.render_mode = dict(self._inner.metadata), "rgb_array"

    def reset(self, *, seed=None, options=None):
        return self._inner.reset(seed=seed, options=options)

    def step(self, action):
        return self._inner.step(action)

    def render(self):
        return self._inner.render()

    def close(self):
        self._inner.close()


class HiddenVectorGame(VectorEnv):
    """The native vector env behind the same wall."""

    def __init__(self, num_envs: int = 1, **kwargs):
        self._inner = gym.make_vec(rpg_env.ENV_ID, num_envs=num_envs, **kwargs)
        self.num_envs = num_envs
        for name in ("observation_space", "action_space", "single_observation_space", "single_action_space"):
            setattr(self, name, getattr(self._inner, name))
        self.metadata = dict(self._inner.metadata)

    def reset(self, *, seed=None, options=None):
        return self._inner.reset(seed=seed, options=options)

    def step(self, actions):
        return self._inner.step(actions)

    def close(self, **kwargs):
        self._inner.close()


@pytest.fixture(scope="module", autouse=True)
def hidden_registered():
    gym.register(HIDDEN_ID, entry_point=HiddenGame, vector_entry_point=HiddenVectorGame)
    yield
    gym.registry.pop(HIDDEN_ID)


def test_the_protocol_describes_a_hidden_env():
    hidden = gym.make(HIDDEN_ID, max_turns=7)
    assert not hasattr(hidden.unwrapped, "params") and not hasattr(hidden.unwrapped, "world")
    d = describe(hidden)
    assert (d.env_id, d.obs_shape, d.num_actions, d.max_turns) == (HIDDEN_ID, (6, 9, 9), 4, 7)
    assert d.rules["max_turns"] == 7 and d.co_policy_id == "random"
    assert describe(gym.make_vec(HIDDEN_ID, num_envs=3)).obs_shape == (6, 9, 9)


def test_the_experts_evaluator_gives_the_same_figures_on_a_hidden_env():
    policy = pretrained_path("dqn")
    assert compare(policy, episodes=6, seed=3, env_id=HIDDEN_ID) == compare(policy, episodes=6, seed=3)


def test_record_writes_the_same_games_from_a_hidden_env(tmp_path):
    kwargs = {"max_turns": 12, "spawn_prob": 0.05}
    record("greedy", tmp_path / "real.h5", 5, seed=2, num_envs=3, env_kwargs=kwargs, progress=False)
    record("greedy", tmp_path / "hidden.h5", 5, seed=2, num_envs=3, env_kwargs=kwargs, env_id=HIDDEN_ID,
           progress=False)
    with TrajectoryFile(tmp_path / "real.h5") as real, TrajectoryFile(tmp_path / "hidden.h5") as hidden:
        assert hidden.digest() == real.digest()
        assert hidden.meta["env_id"] == HIDDEN_ID and hidden.meta["env_kwargs"] == real.meta["env_kwargs"]


def test_an_env_without_the_protocol_metadata_is_refused_clearly():
    class Bare(HiddenGame):
        def __init__(self):
            super().__init__()
            self.metadata = {"render_modes": ["rgb_array"]}

    with pytest.raises(ValueError, match=r"does not declare metadata \['channel_names', 'action_names'\]"):
        describe(Bare())
    with pytest.raises(ValueError, match="one-hot egocentric views"):
        describe(gym.make(rpg_env.ENV_ID, obs_mode="rgb"))
    misdrawn = HiddenGame()
    misdrawn.metadata = {**misdrawn.metadata, "channel_colors": [(0, 0, 0)]}
    with pytest.raises(ValueError, match=r"declares 1 channel colours for \d+ channels"):
        describe(misdrawn)
    np.testing.assert_array_equal(describe(gym.make(rpg_env.ENV_ID)).action_names, ["up", "down", "left",
                                                                                   "right"])
