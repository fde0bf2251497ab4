"""TreasurehuntEnv as a Gymnasium environment: registration, checkers, keywords and their
errors, seeding, the layout option, info contents, invalid actions, co-player specs."""

from __future__ import annotations

import inspect
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env as gym_check_env

from rpg_env.envs.treasurehunt import TreasurehuntEnv
from rpg_env.game.constants import AGENT, EMPTY, GEM, WALL
from rpg_env.game.world import WorldParams
from rpg_env.policies.base import BatchPolicy
from rpg_env.policies.scripted import GreedyPolicy, RandomPolicy

REFERENCE_DEFAULTS = {
    "height": 20, "width": 20, "vision_radius": 4, "num_agents": 2, "spawn_prob": 0.01,
    "max_turns": 100, "gem_value": 10.0, "food_value": 5.0, "bone_value": -10.0,
    "wall_penalty": -1.0, "num_levels": 0, "start_level": 0, "distribution_mode": "easy",
    "item_visible_turns": 0, "co_policy": "random", "obs_mode": "onehot", "render_mode": None,
}


# ---------------------------------------------------------------------------- registration
@pytest.mark.parametrize("env_id", ["Treasurehunt-v0", "rpg_env:Treasurehunt-v0"])
def test_gymnasium_make(env_id):
    env = gym.make(env_id)
    assert isinstance(env.unwrapped, TreasurehuntEnv)
    assert env.spec.id == "Treasurehunt-v0"
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert env.observation_space.contains(obs) and isinstance(reward, float)
    env.close()


def test_make_passes_keywords_through():
    env = gym.make("Treasurehunt-v0", height=8, width=11, vision_radius=2, num_agents=3,
                   obs_mode="full", co_policy="greedy")
    assert env.unwrapped.params == WorldParams(height=8, width=11, vision_radius=2, num_agents=3)
    assert env.observation_space.shape == (7, 8, 11)
    assert env.unwrapped.co_policy_id == "greedy"


# ---------------------------------------------------------------------------- checkers
@pytest.mark.parametrize("obs_mode", ["onehot", "rgb", "full"])
def test_gymnasium_env_checker_without_warnings(obs_mode):
    env = gym.make("Treasurehunt-v0", height=9, width=8, obs_mode=obs_mode).unwrapped
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gym_check_env(env, skip_render_check=False)
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("render_mode", ["rgb_array", "ansi"])
def test_gymnasium_env_checker_with_render_modes(render_mode):
    env = gym.make("Treasurehunt-v0", height=7, width=7, render_mode=render_mode).unwrapped
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gym_check_env(env, skip_render_check=False)
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("obs_mode", ["onehot", "rgb", "full"])
def test_stable_baselines3_env_checker_has_no_warnings(obs_mode):
    # One-hot views are declared MultiBinary, so SB3 does not take them for undersized images.
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = TreasurehuntEnv(height=9, width=9, obs_mode=obs_mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb3_check_env(env, warn=True)
    assert [str(w.message) for w in caught] == []


# ---------------------------------------------------------------------------- keywords
def test_every_keyword_has_the_reference_default():
    signature = inspect.signature(TreasurehuntEnv.__init__)
    defaults = {name: p.default for name, p in signature.parameters.items() if name != "self"}
    for name, value in REFERENCE_DEFAULTS.items():
        assert defaults[name] == value, name
    env = TreasurehuntEnv()
    assert env.params == WorldParams()
    assert env.params.as_dict() == {k: REFERENCE_DEFAULTS[k] for k in WorldParams.field_names()}
    assert env.observation_space == gym.spaces.MultiBinary((6, 9, 9))
    assert env.action_space == gym.spaces.Discrete(4)
    assert env.co_policy_id == "random" and env.render_mode is None


BAD_KEYWORDS = [
    ("height", 2, ValueError, "height and width"),
    ("width", 0, ValueError, "height and width"),
    ("height", 5.0, TypeError, "height must be an int"),
    ("width", "20", TypeError, "width must be an int"),
    ("vision_radius", -1, ValueError, "vision_radius"),
    ("vision_radius", 1.5, TypeError, "vision_radius"),
    ("num_agents", 0, ValueError, "num_agents"),
    ("num_agents", 27, ValueError, "num_agents"),
    ("num_agents", True, TypeError, "num_agents"),
    ("spawn_prob", -0.1, ValueError, "spawn_prob"),
    ("spawn_prob", 1.5, ValueError, "spawn_prob"),
    ("spawn_prob", float("nan"), ValueError, "spawn_prob"),
    ("spawn_prob", 1e-20, ValueError, "spawn_prob=0"),
    ("spawn_prob", "0.01", TypeError, "spawn_prob"),
    ("max_turns", 0, ValueError, "max_turns"),
    ("max_turns", 10.0, TypeError, "max_turns"),
    ("gem_value", "10", TypeError, "gem_value"),
    ("food_value", None, TypeError, "food_value"),
    ("bone_value", float("inf"), ValueError, "bone_value"),
    ("wall_penalty", True, TypeError, "wall_penalty"),
    ("num_levels", -1, ValueError, "num_levels must be >= 0"),
    ("num_levels", 2.0, TypeError, "num_levels must be an int"),
    ("start_level", -3, ValueError, "start_level must be >= 0"),
    ("start_level", "7", TypeError, "start_level must be an int"),
    ("start_level", 2**31, ValueError, "largest level seed"),
    ("distribution_mode", "medium", ValueError, "distribution_mode must be one of 'easy', 'hard'"),
    ("item_visible_turns", -1, ValueError, "item_visible_turns must be >= 0"),
    ("item_visible_turns", 2.5, TypeError, "item_visible_turns must be an int"),
    ("co_policy", "smart", ValueError, "unknown policy"),
    ("co_policy", 42, ValueError, "unknown policy"),
    ("obs_mode", "pixels", ValueError, "obs_mode"),
    ("render_mode", "video", ValueError, "render_mode"),
    ("tile_size", 0, ValueError, "tile_size"),
]


@pytest.mark.parametrize("name, value, error, fragment", BAD_KEYWORDS)
def test_bad_keyword_values_raise_clear_errors(name, value, error, fragment):
    with pytest.raises(error, match=fragment):
        TreasurehuntEnv(**{name: value})


def test_too_many_agents_for_the_map():
    with pytest.raises(ValueError, match="does not fit"):
        TreasurehuntEnv(height=3, width=4, num_agents=3)


def test_bad_co_policy_is_rejected_even_without_co_players():
    with pytest.raises(ValueError, match="unknown policy"):
        TreasurehuntEnv(num_agents=1, co_policy="smart")


@pytest.mark.parametrize("num_agents", [1, 3, 5])
def test_num_agents(num_agents):
    env = TreasurehuntEnv(height=8, width=8, num_agents=num_agents)
    obs, info = env.reset(seed=1)
    assert info["positions"].shape == (num_agents, 2)
    assert len({tuple(p) for p in info["positions"]}) == num_agents
    if num_agents == 1:
        assert env.co_policy is None and env.co_policy_id is None
        assert not {"co_obs", "co_returns", "co_actions", "co_rewards"} & set(info)
    for _ in range(20):
        obs, _, _, _, info = env.step(int(env.np_random.integers(4)))
        assert (env.world.grid[0] == AGENT).sum() == num_agents
        if num_agents > 1:
            assert info["co_obs"].shape == (num_agents - 1, 6, 9, 9)
            assert info["co_actions"].shape == info["co_rewards"].shape == (num_agents - 1,)
            assert info["co_returns"].shape == (num_agents - 1,)


# ---------------------------------------------------------------------------- determinism
def rollout(env: gym.Env, seed: int, actions: list[int], options=None) -> list:
    obs, info = env.reset(seed=seed, options=options)
    out = [(obs.copy(), None, info)]
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(a)
        out.append((obs.copy(), reward, info))
        if terminated or truncated:
            obs, info = env.reset()
            out.append((obs.copy(), None, info))
    return out


def assert_same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b and type(a) is type(b)


@pytest.mark.parametrize("co_policy", ["random", "greedy"])
def test_same_seed_and_actions_give_identical_trajectories(co_policy):
    actions = np.random.default_rng(0).integers(0, 4, size=130).tolist()  # crosses an episode end
    kwargs = dict(height=10, width=10, max_turns=60, spawn_prob=0.05, co_policy=co_policy)
    env = gym.make("Treasurehunt-v0", **kwargs)
    first = rollout(env, 11, actions)
    again = rollout(env, 11, actions)  # the same env, re-seeded
    fresh = rollout(gym.make("Treasurehunt-v0", **kwargs), 11, actions)  # a new env
    assert_same(first, again)
    assert_same(first, fresh)
    # The co-player really acts (and differently under another seed).
    co_actions = [step[2]["co_actions"].tolist() for step in first if "co_actions" in step[2]]
    assert len({a[0] for a in co_actions}) > 1
    other = rollout(gym.make("Treasurehunt-v0", **kwargs), 12, actions)
    assert not all(np.array_equal(x[0], y[0]) for x, y in zip(first, other, strict=True))


def test_seeded_layout_episodes_are_identical():
    layout = ["#######", "#A...##", "#..g..#", "#.b.B.#", "#######"]
    kwargs = dict(height=5, width=7, spawn_prob=0.3, co_policy="greedy")
    actions = [3, 3, 1, 2, 0, 3, 1, 1, 2, 2] * 3
    a = rollout(TreasurehuntEnv(**kwargs), 3, actions, {"layout": layout})
    b = rollout(TreasurehuntEnv(**kwargs), 3, actions, {"layout": layout})
    assert_same(a, b)


def test_returned_observations_are_not_overwritten_later():
    env = TreasurehuntEnv(spawn_prob=0.2)
    obs0, info0 = env.reset(seed=0)
    snapshot, co_snapshot = obs0.copy(), info0["co_obs"].copy()
    for _ in range(10):
        env.step(0)
    np.testing.assert_array_equal(obs0, snapshot)
    np.testing.assert_array_equal(info0["co_obs"], co_snapshot)


# ---------------------------------------------------------------------------- layouts
def test_layout_option_places_everything_exactly():
    layout = ["#####",
              "#Ag.#",
              "#fbB#",
              "#####"]
    env = TreasurehuntEnv(height=4, width=5, spawn_prob=0.0, vision_radius=1)
    obs, info = env.reset(options={"layout": "\n".join(layout)})  # one string works too
    assert info["positions"].tolist() == [[1, 1], [2, 3]]
    assert info["turn"] == 0
    expected = [[1, 1, 1, 1, 1], [1, 5, 2, 0, 1], [1, 4, 3, 5, 1], [1, 1, 1, 1, 1]]
    assert env.world.grid[0].tolist() == expected
    assert obs.argmax(axis=0).tolist() == [[1, 1, 1], [1, 5, 2], [1, 4, 3]]


def test_layout_strings_may_be_indented_or_use_windows_line_ends():
    env = TreasurehuntEnv(height=3, width=4)
    _, info = env.reset(options={"layout": """
        ####
        #AB#
        ####
    """})
    assert info["positions"].tolist() == [[1, 1], [1, 2]]
    _, info = env.reset(options={"layout": "####\r\n#BA#\r\n####\r\n"})
    assert info["positions"].tolist() == [[1, 2], [1, 1]]


MALFORMED_LAYOUTS = [
    (["#####", "#A.B#"], "rows"),  # wrong height
    (["#####", "#A.B#", "####"], "row 2 has 4 characters"),
    (["#####", "#A.B#", "#..x#"], "unknown character 'x'"),
    (["#####", "#A.A#", "#...#"], "twice"),
    (["#####", "#A..#", "#...#"], "exactly the agents A, B"),
    (["#####", "#ABC#", "#...#"], "exactly the agents A, B"),
    (["#####", "#B..#", "#C..#"], "exactly the agents A, B"),
    (12345, "string or a list"),
    ([1, 2, 3], "string or a list"),
]


@pytest.mark.parametrize("layout, fragment", MALFORMED_LAYOUTS)
def test_malformed_layouts_raise_value_errors(layout, fragment):
    env = TreasurehuntEnv(height=3, width=5)
    with pytest.raises(ValueError, match=fragment):
        env.reset(options={"layout": layout})


def test_bad_reset_options_leave_a_running_episode_intact():
    env = TreasurehuntEnv(height=6, width=6)
    env.reset(seed=0)
    env.step(1)
    grid = env.world.grid.copy()
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"layuot": []})
    with pytest.raises(ValueError, match="rows"):
        env.reset(options={"layout": ["#"]})
    with pytest.raises(TypeError, match="options must be a dict"):
        env.reset(options=["layout"])
    np.testing.assert_array_equal(env.world.grid, grid)
    assert env.step(1)[4]["turn"] == 2  # still the same episode


# ---------------------------------------------------------------------------- info
def test_info_contents():
    layout = ["######", "#Ag.B#", "######"]
    env = TreasurehuntEnv(height=3, width=6, spawn_prob=0.0, co_policy=lambda obs: 2)
    obs, info = env.reset(seed=0, options={"layout": layout})
    assert set(info) == {"turn", "positions", "pickups", "bumped", "episode_return", "level",
                         "co_obs", "co_returns"}
    assert info["level"] == -1  # a layout, not a generated level
    assert info["turn"] == 0 and info["episode_return"] == 0.0 and info["bumped"] is False
    assert info["pickups"] == {"gem": 0, "food": 0, "bone": 0}
    assert info["positions"].dtype == np.int64 and info["positions"].shape == (2, 2)
    assert info["co_obs"].shape == (1, 6, 9, 9) and info["co_obs"].dtype == np.int8
    assert info["co_obs"][0, AGENT, 4, 4] == 1 and info["co_obs"][0, AGENT, 4, 1] == 1  # sees A
    obs, reward, _, _, info = env.step(3)
    assert set(info) == {"turn", "positions", "pickups", "bumped", "episode_return", "level",
                         "co_obs", "co_returns", "co_actions", "co_rewards"}
    assert isinstance(info["turn"], int) and info["turn"] == 1
    assert info["pickups"] == {"gem": 1, "food": 0, "bone": 0}
    assert isinstance(info["episode_return"], float) and info["episode_return"] == 10.0
    assert info["co_actions"].tolist() == [2] and info["co_actions"].dtype == np.int64
    assert info["co_rewards"].tolist() == [0.0]  # B moved left onto the empty cell
    assert info["positions"].tolist() == [[1, 2], [1, 3]]
    # co_obs is what the co-player acts on next: B's view, A right beside it.
    assert info["co_obs"][0, AGENT, 4, 3] == 1 and info["co_obs"][0, GEM].sum() == 0
    _, _, _, _, info = env.step(3)  # A bumps into B; B bumps into A
    assert info["co_rewards"].tolist() == [0.0] and info["co_returns"].tolist() == [0.0]
    assert env.last_pickups == info["pickups"]


# ---------------------------------------------------------------------------- actions
@pytest.mark.parametrize("action", [0, 3, np.int64(1), np.int8(2), np.uint8(3), np.array(2)])
def test_valid_action_types(action):
    env = TreasurehuntEnv()
    env.reset(seed=0)
    env.step(action)


@pytest.mark.parametrize("action, error, fragment", [
    (4, ValueError, "out of range"),
    (-1, ValueError, "out of range"),
    (np.int64(7), ValueError, "out of range"),
    (1.0, TypeError, "integer"),
    (np.float32(1), TypeError, "integer"),
    (True, TypeError, "integer"),
    (np.bool_(False), TypeError, "integer"),
    ("up", TypeError, "integer"),
    (None, TypeError, "integer"),
    (np.array([1]), ValueError, "shape"),
    (np.array([[1, 2]]), ValueError, "shape"),
    (np.array(1.5), TypeError, "integer"),
])
def test_invalid_actions_raise_clear_errors(action, error, fragment):
    env = TreasurehuntEnv()
    env.reset(seed=0)
    with pytest.raises(error, match=fragment):
        env.step(action)
    env.step(0)  # the env is still usable


def test_step_order_errors_through_gymnasium_make():
    env = gym.make("Treasurehunt-v0", max_turns=2)
    with pytest.raises(ResetNeeded):
        env.step(0)
    env.reset(seed=0)
    env.step(0)
    assert env.step(0)[3] is True
    with pytest.raises(ResetNeeded):
        env.step(0)


# ---------------------------------------------------------------------------- co-players
class FixedPolicy(BatchPolicy):
    policy_id = "always-left"

    def __init__(self):
        super().__init__()
        self.starts = []

    def act(self, obs, episode_start=None):
        self.starts.append(np.asarray(episode_start).copy())
        return np.full(len(obs), 2, dtype=np.int64)


def test_co_policy_specs():
    assert isinstance(TreasurehuntEnv(co_policy="random").co_policy, RandomPolicy)
    assert isinstance(TreasurehuntEnv(co_policy="greedy").co_policy, GreedyPolicy)
    policy = FixedPolicy()
    env = TreasurehuntEnv(num_agents=3, co_policy=policy)
    assert env.co_policy is policy and env.co_policy_id == "always-left"
    env.reset(seed=0)
    for _ in range(3):
        info = env.step(0)[4]
        assert info["co_actions"].tolist() == [2, 2]
    assert [s.tolist() for s in policy.starts] == [[True, True], [False, False], [False, False]]
    env.reset()
    env.step(0)
    assert policy.starts[-1].tolist() == [True, True]

    def always_down(obs: np.ndarray) -> int:
        assert obs.shape == (6, 9, 9)
        return 1

    env = TreasurehuntEnv(co_policy=always_down)
    assert env.co_policy_id == "always_down"
    env.reset(seed=0)
    assert env.step(0)[4]["co_actions"].tolist() == [1]


@pytest.mark.parametrize("output, error, fragment", [
    (7, ValueError, "0..3"),
    (1.5, TypeError, "int action"),
    ("left", TypeError, "int action"),
])
def test_callable_co_policy_bad_output(output, error, fragment):
    env = TreasurehuntEnv(co_policy=lambda obs: output)
    env.reset(seed=0)
    with pytest.raises(error, match=fragment):
        env.step(0)


def test_batch_policy_bad_output_is_caught():
    class Broken(BatchPolicy):
        policy_id = "broken"

        def act(self, obs, episode_start=None):
            return np.zeros((len(obs), 2), dtype=np.int64)

    env = TreasurehuntEnv(co_policy=Broken())
    env.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        env.step(0)


# ---------------------------------------------------------------------------- obs modes, render
def test_observation_modes_agree():
    layout = ["#####", "#Ag.#", "#.bB#", "#####"]
    kwargs = dict(height=4, width=5, vision_radius=1, spawn_prob=0.0)
    onehot, _ = TreasurehuntEnv(**kwargs).reset(options={"layout": layout})
    full, _ = TreasurehuntEnv(obs_mode="full", **kwargs).reset(options={"layout": layout})
    rgb_env = TreasurehuntEnv(obs_mode="rgb", tile_size=4, **kwargs)
    rgb, _ = rgb_env.reset(options={"layout": layout})
    assert full.shape == (7, 4, 5) and full.dtype == np.int8
    assert full[:6].argmax(axis=0).tolist() == rgb_env.world.grid[0].tolist()
    assert full[6].sum() == 1 and full[6, 1, 1] == 1  # the learner's plane
    assert rgb.shape == (12, 12, 3) and rgb.dtype == np.uint8
    assert rgb_env.observation_space.contains(rgb)
    # Each 4x4 tile of the RGB view is the tile of the code in the one-hot view.
    from rpg_env.game.observation import tile_atlas

    atlas = tile_atlas(4)
    codes = onehot.argmax(axis=0)
    for i in range(3):
        for j in range(3):
            np.testing.assert_array_equal(rgb[4 * i : 4 * i + 4, 4 * j : 4 * j + 4], atlas[codes[i, j]])
    assert codes[0].tolist() == [WALL, WALL, WALL] and codes[1, 2] == GEM and codes[2, 1] == EMPTY


def test_render_modes_shapes():
    env = TreasurehuntEnv(height=6, width=7, render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    env = TreasurehuntEnv(height=6, width=7, render_mode="ansi")
    env.reset(seed=0)
    text = env.render()
    assert isinstance(text, str) and "A" in text and "B" in text
