"""MemoryCue-v0: a corridor whose goal end is shown only by a cue at the start."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env

from rpg_env import MEMORY_ENV_ID
from rpg_env.envs.memory_cue import MemoryCueEnv
from rpg_env.envs.protocol import describe
from rpg_env.game.constants import vocabulary

VOCAB = vocabulary()
UP, DOWN, LEFT, RIGHT = (VOCAB.action_names.index(n) for n in ("up", "down", "left", "right"))
GEM = VOCAB.code("gem")


def cue_side(obs: np.ndarray) -> str | None:
    """"left"/"right" where the view shows the cue next to the agent, None when it shows none."""
    gems = obs[GEM]
    if gems.sum() == 0:
        return None
    assert gems.sum() == 1
    r = obs.shape[-1] // 2
    assert gems[r, r - 1] or gems[r, r + 1], "the cue must sit right beside the agent"
    return "left" if gems[r, r - 1] else "right"


def play(env: gym.Env, policy, seed: int) -> dict:
    obs, info = env.reset(seed=seed)
    memory = cue_side(obs)
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(memory))
        if terminated or truncated:
            return info


# ---------------------------------------------------------------------------- API
@pytest.mark.parametrize("render_mode", [None, "rgb_array", "ansi"])
def test_gymnasium_checker_passes_without_warnings(render_mode):
    env = gym.make(MEMORY_ENV_ID, render_mode=render_mode).unwrapped
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=False)
    assert [str(w.message) for w in caught] == []


def test_checker_through_make_warns_only_about_the_wrappers():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(gym.make(MEMORY_ENV_ID, length=4, vision_radius=1))
    assert [str(w.message) for w in caught if "different from the unwrapped" not in str(w.message)] == []


def test_spaces_metadata_and_protocol():
    env = gym.make(MEMORY_ENV_ID, length=5, vision_radius=3, cue_turns=2)
    desc = describe(env)
    assert env.observation_space == gym.spaces.MultiBinary((VOCAB.num_kinds, 7, 7))
    assert env.action_space == gym.spaces.Discrete(VOCAB.num_actions)
    assert desc.channel_names == VOCAB.cell_names and desc.action_names == VOCAB.action_names
    assert desc.max_turns == 20
    assert desc.rules == {"length": 5, "vision_radius": 3, "cue_turns": 2, "max_turns": 20}
    assert MemoryCueEnv.metadata.get("rules") is None  # per instance, not on the class
    again = gym.make(MEMORY_ENV_ID, **desc.rules)
    assert describe(again).rules == desc.rules


def test_views_pad_outside_the_map_with_wall():
    env = MemoryCueEnv(length=4, vision_radius=3, cue_turns=1)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.int8 and set(np.unique(obs)) == {0, 1}
    assert (obs.sum(axis=0) == 1).all()  # one kind per cell
    codes = obs.argmax(axis=0)
    assert (codes[[0, 1, 2, 4, 5, 6]] == VOCAB.wall).all()  # wall rows and beyond the map
    assert codes[3, 3] == VOCAB.agent


@pytest.mark.parametrize("mode", [gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.SAME_STEP])
def test_make_vec_sync_autoresets(mode):
    envs = gym.make_vec(MEMORY_ENV_ID, num_envs=3, vectorization_mode="sync", length=3,
                        vision_radius=1, vector_kwargs={"autoreset_mode": mode})
    obs, info = envs.reset(seed=7)
    assert obs.shape == (3, VOCAB.num_kinds, 3, 3)
    assert all(cue_side(o) == side for o, side in zip(obs, info["goal_side"], strict=True))
    goal_left = np.array(info["goal_side"]) == "left"
    for _ in range(3):
        obs, rewards, terminated, truncated, info = envs.step(np.full(3, LEFT))
    assert terminated.all() and not truncated.any()
    assert rewards.tolist() == goal_left.astype(float).tolist()
    if mode == gym.vector.AutoresetMode.SAME_STEP:
        assert all(cue_side(o) is not None for o in obs)  # already the next episode's first view
        assert all(cue_side(o) is None for o in info["final_obs"])
    else:
        assert all(cue_side(o) is None for o in obs)
        obs, rewards, terminated, _, info = envs.step(np.full(3, LEFT))
        assert (rewards == 0).all() and not terminated.any()
        assert all(cue_side(o) == side for o, side in zip(obs, info["goal_side"], strict=True))
    envs.close()


# ---------------------------------------------------------------------------- seeding
def test_same_seed_same_episode():
    runs = []
    for _ in range(2):
        env = MemoryCueEnv()
        obs, info = env.reset(seed=123)
        views = [obs]
        for action in (LEFT, UP, RIGHT, RIGHT, RIGHT):
            views.append(env.step(action)[0])
        runs.append((info["goal_side"], np.stack(views)))
    assert runs[0][0] == runs[1][0]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


def test_goal_side_is_drawn_about_evenly():
    env = MemoryCueEnv()
    sides = [env.reset(seed=s)[1]["goal_side"] for s in range(400)]
    assert set(sides) == {"left", "right"}
    assert 0.4 < sides.count("left") / len(sides) < 0.6


# ---------------------------------------------------------------------------- the cue
@pytest.mark.parametrize("cue_turns", [1, 3])
def test_cue_shown_exactly_during_the_first_cue_turns_on_the_goal_side(cue_turns):
    env = MemoryCueEnv(length=6, vision_radius=2, cue_turns=cue_turns)
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        seen = [cue_side(obs)]
        for action in (LEFT, UP, RIGHT, DOWN, RIGHT):
            obs, _, _, _, info = env.step(action)
            seen.append(cue_side(obs))
        assert seen == [info["goal_side"]] * cue_turns + [None] * (6 - cue_turns)


def test_after_the_cue_both_directions_look_the_same():
    env = MemoryCueEnv(length=6, vision_radius=2)
    views = {}
    for first, second in ((LEFT, RIGHT), (RIGHT, LEFT)):
        env.reset(seed=0)
        views[first] = [env.step(first)[0], env.step(second)[0]]
    np.testing.assert_array_equal(views[LEFT][0], views[RIGHT][0])
    np.testing.assert_array_equal(views[LEFT][1], views[RIGHT][1])
    # Walking one way, the view stays the same until the end wall (length + 1 cells away) enters it.
    for action in (LEFT, RIGHT):
        env.reset(seed=0)
        walk = [env.step(action)[0] for _ in range(6 - 2 + 1)]
        for view in walk[1:-1]:
            np.testing.assert_array_equal(view, walk[0])
        assert walk[-1][VOCAB.wall].sum() > walk[0][VOCAB.wall].sum()


def test_cue_driven_position_is_invisible_once_the_cue_is_gone():
    # The tightest allowed length: walking towards the cue while it shows leaves the views of
    # both goals identical, so the position does not carry the cue for a memoryless agent.
    env = MemoryCueEnv(length=4, vision_radius=2, cue_turns=2)
    after = {}
    for seed in range(20):
        obs, info = env.reset(seed=seed)
        for _ in range(2):
            obs = env.step(LEFT if cue_side(obs) == "left" else RIGHT)[0]
        after.setdefault(info["goal_side"], obs)
        np.testing.assert_array_equal(obs, after[info["goal_side"]])
    np.testing.assert_array_equal(after["left"], after["right"])


# ---------------------------------------------------------------------------- rules
def test_goal_end_pays_one_and_the_other_end_nothing():
    env = MemoryCueEnv(length=3, vision_radius=1)
    for seed in range(10):
        for towards_goal in (True, False):
            obs, info = env.reset(seed=seed)
            goal = LEFT if info["goal_side"] == "left" else RIGHT
            action = goal if towards_goal else (RIGHT if goal == LEFT else LEFT)
            steps = [env.step(action) for _ in range(3)]
            assert [s[1] for s in steps[:2]] == [0.0, 0.0] and not any(s[2] or s[3] for s in steps[:2])
            _, reward, terminated, truncated, info = steps[-1]
            assert terminated and not truncated
            assert reward == (1.0 if towards_goal else 0.0) and info["success"] is towards_goal
            assert info["episode_return"] == reward and info["turn"] == 3
            with pytest.raises(ResetNeeded):
                env.step(action)


def test_walls_do_not_move_the_agent_and_cost_nothing():
    env = MemoryCueEnv(length=3, vision_radius=1, cue_turns=1)
    env.reset(seed=0)
    before = env.step(UP)[0]
    for action in (UP, DOWN, DOWN, UP):
        obs, reward, terminated, truncated, info = env.step(action)
        np.testing.assert_array_equal(obs, before)
        assert reward == 0.0 and not terminated and not truncated and not info["success"]
    assert info["turn"] == 5


def test_truncation_at_max_turns():
    env = MemoryCueEnv(length=4, vision_radius=2, max_turns=5)
    env.reset(seed=1)
    results = [env.step(action) for action in (LEFT, RIGHT, LEFT, RIGHT, UP)]
    assert [r[3] for r in results] == [False] * 4 + [True]
    assert not any(r[2] for r in results) and all(r[1] == 0.0 for r in results)
    assert results[-1][4]["turn"] == 5 and results[-1][4]["success"] is False
    assert MemoryCueEnv(length=4).max_turns == 16
    with pytest.raises(ResetNeeded):
        env.step(LEFT)


def test_step_before_reset_raises():
    with pytest.raises(ResetNeeded):
        MemoryCueEnv().step(LEFT)


def test_renders_the_corridor_and_the_cue():
    env = MemoryCueEnv(length=3, vision_radius=1, render_mode="ansi")
    _, info = env.reset(seed=0)
    text = env.render()
    row = text.splitlines()[2]
    assert row == ("#..gA...#" if info["goal_side"] == "left" else "#...Ag..#")
    env.step(UP)
    assert env.render().splitlines()[2] == "#...A...#"
    frame = MemoryCueEnv(length=3, vision_radius=1, render_mode="rgb_array")
    frame.reset(seed=0)
    image = frame.render()
    assert image.shape == (3 * 16, 9 * 16, 3) and image.dtype == np.uint8


# ---------------------------------------------------------------------------- memory matters
def test_remembering_the_cue_always_wins_and_memoryless_policies_are_at_chance():
    env = MemoryCueEnv()
    remember = [play(env, lambda m: LEFT if m == "left" else RIGHT, seed)["success"] for seed in range(200)]
    assert all(remember)
    for fixed in (LEFT, RIGHT):
        wins = [play(env, lambda m, a=fixed: a, seed)["success"] for seed in range(200)]
        assert 0.35 <= np.mean(wins) <= 0.65


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize("kwargs, error, name", [
    ({"length": 1}, ValueError, "length"),
    ({"length": 2.5}, TypeError, "length"),
    ({"vision_radius": 0}, ValueError, "vision_radius"),
    ({"vision_radius": True}, TypeError, "vision_radius"),
    ({"cue_turns": 0}, ValueError, "cue_turns"),
    ({"max_turns": 0}, ValueError, "max_turns"),
    ({"render_mode": "video"}, ValueError, "render_mode"),
    ({"length": 3, "vision_radius": 2, "cue_turns": 2}, ValueError, "length"),
])
def test_bad_kwargs_name_the_argument(kwargs, error, name):
    with pytest.raises(error, match=name):
        MemoryCueEnv(**kwargs)


@pytest.mark.parametrize("action, error", [(4, ValueError), (-1, ValueError), ("left", TypeError),
                                           (np.array([1, 2]), ValueError), (1.0, TypeError)])
def test_bad_actions_raise(action, error):
    env = MemoryCueEnv()
    env.reset(seed=0)
    with pytest.raises(error, match="action"):
        env.step(action)
