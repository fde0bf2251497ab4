"""SB3 experts (dqn, ppo, recurrent-ppo) on envs other than the project's games: vectors
(CartPoleMasked-v1), a flat MultiDiscrete action space and byte images, trained, saved, loaded
without unpickling and evaluated as `rpg_env.experts.train` and `rpg_env.policies.sb3` do it."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.torch_layers import FlattenExtractor

import rpg_env
from rpg_base.typed_config.values import ConfigError
from rpg_env.experts.config import load_expert_config
from rpg_env.experts.evaluate import compare
from rpg_env.experts.train import build_model, make_training_env, train
from rpg_env.policies.features import GridCNN, GridMLP
from rpg_env.policies.registry import load_expert_policy
from rpg_env.policies.sb3 import ExpertLoadError, SB3Policy, policy_kwargs_from_net, stacked_space

DIALS_ID = "RpgTestDials-v0"
PIXELS_ID = "RpgTestPixels-v0"
#: Small runs: a few hundred steps, two envs, a tiny network, a short evaluation.
TINY = ["n_envs=2", "progress_bar=false", "net.features_dim=16", "eval.freq=512", "eval.episodes=2",
        "eval.final_episodes=4", "checkpoint_freq=100000", "seed=3"]
ON_POLICY = ["hyperparams.n_steps=128", "hyperparams.batch_size=64", "hyperparams.n_epochs=2"]
SETTINGS = {"ppo": ON_POLICY, "recurrent-ppo": [*ON_POLICY, "memory.lstm_hidden_size=8"],
            "dqn": ["hyperparams.learning_starts=64", "hyperparams.buffer_size=1000"]}


class Dials(gym.Env):
    """Set two dials to the targets the observation shows: obs ``Box((2,), float32)`` (target / 2,
    target), actions ``MultiDiscrete([3, 2])``; reward 1 for each dial set right, 8 steps."""

    observation_space = spaces.Box(0.0, 1.0, (2,), dtype=np.float32)
    action_space = spaces.MultiDiscrete([3, 2])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.turn = 0
        return self._draw(), {}

    def _draw(self) -> np.ndarray:
        self.target = self.np_random.integers(0, (3, 2))
        return (self.target / np.array([2.0, 1.0])).astype(np.float32)

    def step(self, action):
        reward = float(np.sum(np.asarray(action) == self.target))
        self.turn += 1
        return self._draw(), reward, False, self.turn >= 8, {}


class Pixels(gym.Env):
    """A bright stripe on the left or the right of an RGB image ``(side, side, 3)`` uint8; action 0
    or 1 names the side (reward 1 when right), 8 steps."""

    action_space = spaces.Discrete(2)

    def __init__(self, side: int = 8) -> None:
        self.side = side
        self.observation_space = spaces.Box(0, 255, (side, side, 3), dtype=np.uint8)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.turn = 0
        return self._draw(), {}

    def _draw(self) -> np.ndarray:
        self.target = int(self.np_random.integers(0, 2))
        image = np.zeros((self.side, self.side, 3), np.uint8)
        image[:, self.target * (self.side - 1), :] = 255
        return image

    def step(self, action):
        reward = float(int(action) == self.target)
        self.turn += 1
        return self._draw(), reward, False, self.turn >= 8, {}


for env_id, entry in ((DIALS_ID, Dials), (PIXELS_ID, Pixels)):
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=entry, disable_env_checker=True)


def _config(algo: str, env_id: str, *extra: str, env_kwargs: dict | None = None):
    return load_expert_config(algo, env_id=env_id, env_kwargs=env_kwargs,
                              overrides=[*TINY, *SETTINGS[algo], *extra])


def _in_memory_and_loaded(cfg, tmp_path, steps: int = 256):
    """A model trained ``steps`` steps in memory, and the same model saved and loaded safely."""
    venv = make_training_env(cfg, cfg.n_envs, cfg.seed)
    model = build_model(cfg, venv, tensorboard_log=None)
    model.learn(steps)
    model.save(tmp_path / "model.zip")
    return model, venv, load_expert_policy(tmp_path / "model.zip")


def _check_same_actions(model, venv, loaded: SB3Policy, frame: tuple[int, ...], steps: int = 40) -> None:
    """Step ``venv`` (frame-stacked by training) with the in-memory model's greedy actions and check
    that ``loaded``, fed only the newest observation of each env and the episode starts, takes the
    same ones: its own stacks match VecFrameStack's, resets included."""
    stacked = venv.reset()
    starts, state, ends = np.ones(venv.num_envs, bool), None, 0
    for _ in range(steps):
        expected, state = model.predict(stacked, state=state, episode_start=starts, deterministic=True)
        newest = stacked[:, -frame[0]:]  # the newest frame closes the stack: (B, D) or (B, C, H, W)
        np.testing.assert_array_equal(loaded.act(_as_env_obs(newest, loaded), starts), expected)
        stacked, _, starts, _ = venv.step(expected)
        ends += int(starts.sum())
    assert ends > 0  # episodes ended on the way, so the per-row resets were checked too


def _extractor(model):
    """The features extractor of an SB3 model (DQN's sits in its Q-network)."""
    return getattr(model.policy, "q_net", model.policy).features_extractor


def _as_env_obs(newest: np.ndarray, policy: SB3Policy) -> np.ndarray:
    """The newest network frames back as the env gave them (an image channels last again)."""
    return np.moveaxis(newest, 1, -1) if policy.view_shape != newest.shape[1:] else newest


@pytest.mark.parametrize("algo", ["ppo", "recurrent-ppo", "dqn"])
def test_loaded_expert_acts_as_the_model_in_memory_on_masked_cartpole(algo, tmp_path):
    cfg = _config(algo, rpg_env.CARTPOLE_MASKED_ID, "frame_stack=3")
    model, venv, loaded = _in_memory_and_loaded(cfg, tmp_path)
    try:
        assert isinstance(loaded, SB3Policy) and type(loaded.model) is type(model)
        assert loaded.view_shape == (2,)
        assert loaded.model.observation_space.shape == model.observation_space.shape == (6,)  # 3 frames of 2
        assert isinstance(_extractor(loaded.model), GridMLP)  # auto: mlp for a vector
        assert not loaded.model.policy.normalize_images
        _check_same_actions(model, venv, loaded, (2,))
    finally:
        venv.close()


@pytest.mark.parametrize("algo", ["ppo", "recurrent-ppo"])
def test_rl_zoo_settings_train_with_linear_schedules_and_sb3s_own_mlp_policy(algo, tmp_path):
    # RL Zoo's CartPoleNoVel-v1 entries as published: lin_ schedules, FlattenExtractor, 64-64 heads
    cfg = _config(algo, rpg_env.CARTPOLE_MASKED_ID, "frame_stack=1", "net.extractor=flatten",
                  "net.net_arch=[64,64]", "hyperparams.learning_rate=lin_0.001",
                  "hyperparams.clip_range=lin_0.2")
    assert cfg.hyperparams["learning_rate"] == "lin_0.001"
    model, venv, loaded = _in_memory_and_loaded(cfg, tmp_path)
    try:
        # SB3 calls a schedule with the progress remaining: the Zoo's start at 1, 0 at the end
        assert model.lr_schedule(1.0) == pytest.approx(0.001) and model.lr_schedule(0.0) == 0.0
        assert model.lr_schedule(0.25) == pytest.approx(0.00025)
        assert model.clip_range(1.0) == pytest.approx(0.2) and model.clip_range(0.5) == pytest.approx(0.1)
        # the one update came after all 256 steps were collected: at the schedule's end
        assert model.policy.optimizer.param_groups[0]["lr"] == 0.0
        assert isinstance(_extractor(model), FlattenExtractor)
        assert isinstance(_extractor(loaded.model), FlattenExtractor)
        assert _extractor(model).features_dim == 2  # the observation as it is
        assert [m.out_features for m in model.policy.mlp_extractor.policy_net if hasattr(m, "out_features")] \
            == [64, 64]
        _check_same_actions(model, venv, loaded, (2,))
    finally:
        venv.close()


@pytest.mark.parametrize("value, message", [
    ("lin_fast", "RL Zoo's linear schedule 'lin_<start>'"), ("lin_0", "start > 0"),
    ("cos_0.1", "lin_<start>")])
def test_a_schedule_other_than_lin_is_refused_with_what_to_write(value, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        _config("ppo", rpg_env.CARTPOLE_MASKED_ID, f"hyperparams.learning_rate={value}")


def test_trxl_ppo_takes_numbers_for_its_rates():
    with pytest.raises(ConfigError, match="trxl-ppo takes a number"):
        load_expert_config("trxl-ppo", env_id=rpg_env.CARTPOLE_MASKED_ID,
                           overrides=["hyperparams.learning_rate=lin_0.001"])


@pytest.mark.parametrize("algo", ["ppo", "recurrent-ppo"])
def test_training_on_masked_cartpole_writes_a_run_folder_without_greedy(algo, tmp_path):
    # The "package:Id" form reaches SubprocVecEnv workers, which import the package first.
    cfg = _config(algo, f"rpg_env:{rpg_env.CARTPOLE_MASKED_ID}", "timesteps=1024", "vec_env=subproc",
                  "frame_stack=1")
    run = train(cfg, tmp_path / "run")
    results = json.loads((run / "eval.json").read_text())
    assert set(results) == {"model", "random"} and all(row["episodes"] == 4 for row in results.values())
    policy = load_expert_policy(run / "model.zip")
    record = policy.rpg_expert
    assert "view_shape" not in record and record["env_id"] == "rpg_env:CartPoleMasked-v1"
    assert record["observation_space"]["shape"] == [2] and record["action_space"] == {
        "type": "Discrete", "n": 2, "start": 0}
    actions = policy.act(np.zeros((5, 2), np.float32))
    assert actions.shape == (5,) and actions.dtype == np.int64 and set(actions) <= {0, 1}
    # The recorded env is evaluated again the same way: the same seeds give the same numbers.
    assert compare(run / "model.zip", episodes=4)["model"] == results["model"]


def test_an_expert_refuses_observations_of_another_env(tmp_path):
    cfg = _config("ppo", rpg_env.CARTPOLE_MASKED_ID, "timesteps=128")
    run = train(cfg, tmp_path / "run")
    policy = load_expert_policy(run / "model.zip")
    both = r"trained on observations of shape \(2,\) \(CartPoleMasked-v1\) but the environment gives \(4,\)"
    with pytest.raises(ExpertLoadError, match=both):
        policy.act(np.zeros((1, 4), np.float32))
    with pytest.raises(ExpertLoadError, match=both):
        compare(run / "model.zip", episodes=2, env_id="CartPole-v1")
    with pytest.raises(ValueError, match=r"needs a batch \(B, 2\)"):
        policy.act(np.zeros(2, np.float32))


def test_dqn_is_refused_on_multidiscrete_actions_and_ppo_learns_them(tmp_path):
    with pytest.raises(ConfigError, match="dqn takes Discrete actions"):
        _config("dqn", DIALS_ID)
    cfg = _config("ppo", DIALS_ID, "frame_stack=1", "timesteps=4096", "hyperparams.learning_rate=3e-3",
                  "eval.final_episodes=20", "eval.freq=4096")
    run = train(cfg, tmp_path / "run")
    results = json.loads((run / "eval.json").read_text())
    # Reading the targets off the observation beats drawing both dials at random (8 * 5/6 expected).
    assert results["model"]["ci95"][0] > results["random"]["ci95"][1], results
    sampler = SB3Policy.load(run / "model.zip", deterministic=False)
    obs = np.random.default_rng(0).random((60, 2)).astype(np.float32)
    draws = []
    for seed in (5, 5, 6):
        sampler.seed(np.random.default_rng(seed))
        draws.append(sampler.act(obs))
    assert draws[0].shape == (60, 2) and draws[0].dtype == np.int64
    assert (draws[0] >= 0).all() and (draws[0] < [3, 2]).all()
    assert np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[0], draws[2])  # seeded draws


def test_multidiscrete_actions_come_back_one_column_per_dimension(tmp_path):
    cfg = _config("ppo", DIALS_ID, "frame_stack=2")
    model, venv, loaded = _in_memory_and_loaded(cfg, tmp_path)
    try:
        assert loaded.action_dims == (3, 2) and loaded.num_actions is None
        assert loaded.act(np.zeros((4, 2), np.float32)).shape == (4, 2)
        _check_same_actions(model, venv, loaded, (2,))
    finally:
        venv.close()


def test_byte_images_are_scaled_and_stacked_channels_first_however_many_frames(tmp_path):
    # 4 frames of 3 channels: 12 channels on an 8x8 image, more than its side, which SB3's guess of
    # the channel axis gets wrong on the stack; the stack here is channels first by construction.
    cfg = _config("ppo", PIXELS_ID, "frame_stack=4", "net.channels=[4]")
    model, venv, loaded = _in_memory_and_loaded(cfg, tmp_path)
    try:
        assert loaded.view_shape == (8, 8, 3)  # net.extractor auto: a CNN for an image
        assert model.observation_space.shape == loaded.model.observation_space.shape == (12, 8, 8)
        assert loaded.model.policy.normalize_images and isinstance(_extractor(loaded.model), GridCNN)
        _check_same_actions(model, venv, loaded, (3, 8, 8))
    finally:
        venv.close()


def test_wide_images_go_through_nature_cnn_and_grids_stay_unscaled():
    from stable_baselines3.common.torch_layers import NatureCNN

    wide = stacked_space(spaces.Box(0, 255, (36, 40, 3), np.uint8), 2)
    assert wide.shape == (6, 36, 40)
    kwargs = policy_kwargs_from_net({"extractor": "cnn", "features_dim": 32}, observation_space=wide)
    assert kwargs["features_extractor_class"] is NatureCNN and kwargs["normalize_images"]
    small = policy_kwargs_from_net({"extractor": "auto"}, observation_space=stacked_space(
        spaces.Box(0, 255, (35, 35, 3), np.uint8), 1))
    assert small["features_extractor_class"] is GridCNN and small["normalize_images"]
    grid = stacked_space(spaces.MultiBinary((6, 9, 9)), 2)
    assert (grid.shape, grid.dtype) == ((12, 9, 9), np.uint8)
    kwargs = policy_kwargs_from_net({"extractor": "auto"}, observation_space=grid)
    assert kwargs["features_extractor_class"] is GridCNN and not kwargs["normalize_images"]
    vector = policy_kwargs_from_net({"extractor": "auto"}, observation_space=spaces.Box(-1, 1, (4,)))
    assert vector["features_extractor_class"] is GridMLP and not vector["normalize_images"]
