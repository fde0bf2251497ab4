"""Co-player policies: the BatchPolicy protocol, random and greedy behaviour, make_policy."""

from __future__ import annotations

import math
from collections import deque

import gymnasium as gym
import numpy as np
import pytest

from rpg_env.envs.treasurehunt import TreasurehuntEnv
from rpg_env.game.constants import AGENT, BONE, EMPTY, FOOD, GEM, NUM_CELL_KINDS, WALL
from rpg_env.policies.base import BatchPolicy, CallablePolicy, check_policy_actions
from rpg_env.policies.registry import make_policy
from rpg_env.policies.scripted import EpsilonGreedyPolicy, GreedyPolicy, RandomPolicy, WallFollowerPolicy

MOVES = [(-1, 0), (1, 0), (0, -1), (0, 1)]
Z_CRIT = 3.89  # two-sided p = 1e-4


def one_hot_views(codes: np.ndarray) -> np.ndarray:
    """``(B, V, V)`` codes -> ``(B, 6, V, V)`` uint8."""
    return (codes[:, None] == np.arange(NUM_CELL_KINDS)[None, :, None, None]).astype(np.uint8)


def random_views(rng: np.random.Generator, batch: int, side: int, probs) -> np.ndarray:
    codes = rng.choice(NUM_CELL_KINDS, size=(batch, side, side), p=probs)
    codes[:, side // 2, side // 2] = AGENT
    return codes


def bfs_keys(codes: np.ndarray) -> list[float]:
    """Oracle: for each move, 2 * (path length to the nearest gem) or 2 * (to food) + 1 over
    cells that are not wall, bone or agent; inf for unsafe or hopeless moves."""
    side = codes.shape[0]
    c = side // 2
    keys = []
    for dr, dc in MOVES:
        r, q = c + dr, c + dc
        if not (0 <= r < side and 0 <= q < side) or codes[r, q] in (WALL, BONE, AGENT):
            keys.append(math.inf)
            continue
        best = math.inf
        seen = {(r, q)}
        frontier = deque([(r, q, 0)])
        while frontier:
            i, j, d = frontier.popleft()
            if codes[i, j] == GEM:
                best = min(best, 2 * d)
            elif codes[i, j] == FOOD:
                best = min(best, 2 * d + 1)
            for di, dj in MOVES:
                ni, nj = i + di, j + dj
                if (0 <= ni < side and 0 <= nj < side and (ni, nj) not in seen
                        and codes[ni, nj] not in (WALL, BONE, AGENT)):
                    seen.add((ni, nj))
                    frontier.append((ni, nj, d + 1))
        keys.append(best)
    return keys


def safe_moves(codes: np.ndarray) -> list[bool]:
    c = codes.shape[0] // 2
    return [codes[c + dr, c + dc] not in (WALL, BONE) for dr, dc in MOVES]


# ---------------------------------------------------------------------------- greedy
@pytest.mark.parametrize("side", [3, 5, 9])
def test_greedy_never_steps_into_a_visible_wall_or_bone_when_a_safe_move_exists(side):
    rng = np.random.default_rng(side)
    # No targets in view: the explore branch. Lots of walls and bones.
    codes = random_views(rng, 3000, side, [0.3, 0.3, 0.0, 0.3, 0.0, 0.1])
    policy = GreedyPolicy()
    policy.seed(np.random.default_rng(0))
    actions = policy.act(one_hot_views(codes))
    assert actions.dtype == np.int64 and actions.shape == (3000,)
    checked = 0
    for view, action in zip(codes, actions, strict=True):
        safe = safe_moves(view)
        if any(safe):
            assert safe[action]
            checked += 1
    assert checked > 1000


@pytest.mark.parametrize("side", [5, 9])
def test_greedy_follows_a_shortest_safe_path_to_the_nearest_gem_or_food(side):
    rng = np.random.default_rng(100 + side)
    codes = random_views(rng, 1500, side, [0.45, 0.2, 0.04, 0.2, 0.06, 0.05])
    policy = GreedyPolicy()
    policy.seed(np.random.default_rng(1))
    actions = policy.act(one_hot_views(codes))
    seeking = 0
    for view, action in zip(codes, actions, strict=True):
        keys = bfs_keys(view)
        if min(keys) < math.inf:
            assert keys[action] == min(keys), (view, keys, action)
            seeking += 1
        elif any(safe_moves(view)):
            assert safe_moves(view)[action]
    assert seeking > 300


def test_greedy_goes_around_bones_to_the_gem_on_a_layout():
    layout = ["#########",
              "#.......#",
              "#.bbbbb.#",
              "#...A.g.#",
              "#.bbbbb.#",
              "#.......#",
              "#########"]
    env = TreasurehuntEnv(height=7, width=9, num_agents=1, spawn_prob=0.0, vision_radius=4)
    obs, _ = env.reset(seed=0, options={"layout": layout})
    policy = GreedyPolicy()
    policy.seed(np.random.default_rng(0))
    obs, reward, _, _, info = env.step(int(policy.act(obs[None])[0]))
    assert reward == 0.0
    obs, reward, _, _, info = env.step(int(policy.act(obs[None])[0]))
    assert reward == 10.0 and info["positions"].tolist() == [[3, 6]]


def test_greedy_detours_around_a_bone_wall():
    # The gem is straight right, but a bone wall makes the shortest safe path go up and around.
    layout = ["#######",
              "#.....#",
              "#A.b.g#",
              "#..b..#",
              "#######"]
    env = TreasurehuntEnv(height=5, width=7, num_agents=1, spawn_prob=0.0, vision_radius=4)
    obs, _ = env.reset(options={"layout": layout})
    policy = GreedyPolicy()
    policy.seed(np.random.default_rng(0))
    rewards = []
    for _ in range(6):
        obs, reward, _, _, info = env.step(int(policy.act(obs[None])[0]))
        rewards.append(reward)
    assert rewards == [0.0, 0.0, 0.0, 0.0, 0.0, 10.0]  # 6 = the shortest safe path length
    assert info["positions"].tolist() == [[2, 5]]


def test_greedy_prefers_gem_over_food_at_equal_distance_and_nearer_food_over_far_gem():
    near = np.full((1, 5, 5), EMPTY)
    near[0, 2, 2] = AGENT
    near[0, 2, 0], near[0, 2, 4] = FOOD, GEM  # both two steps away
    far = np.full((1, 5, 5), EMPTY)
    far[0, 2, 2] = AGENT
    far[0, 2, 1], far[0, 2, 4] = FOOD, GEM  # food one step, gem two
    policy = GreedyPolicy()
    policy.seed(np.random.default_rng(0))
    for _ in range(20):
        assert policy.act(one_hot_views(near))[0] == 3
        assert policy.act(one_hot_views(far))[0] == 2


def _mean_returns(learner: BatchPolicy, seed: int, num_envs: int = 128) -> np.ndarray:
    envs = gym.make_vec("Treasurehunt-v0", num_envs=num_envs, co_policy="random")
    learner.seed(np.random.default_rng(seed))
    obs, _ = envs.reset(seed=seed)
    returns = np.zeros(num_envs)
    start = np.ones(num_envs, dtype=bool)
    for _ in range(envs.params.max_turns):
        obs, rewards, _, truncated, _ = envs.step(learner.act(obs, start))
        start[:] = False
        returns += rewards
    assert truncated.all()
    return returns


def test_greedy_scores_clearly_above_random():
    greedy = _mean_returns(GreedyPolicy(), seed=1)
    random = _mean_returns(RandomPolicy(), seed=2)
    # Welch's t over 128 independent 100-turn episodes each.
    t = (greedy.mean() - random.mean()) / math.sqrt(greedy.var(ddof=1) / len(greedy)
                                                    + random.var(ddof=1) / len(random))
    assert t > 8, (greedy.mean(), random.mean())
    assert greedy.mean() > 20


def test_greedy_with_vision_radius_zero_still_acts():
    policy = GreedyPolicy()
    policy.seed(np.random.default_rng(0))
    obs = one_hot_views(np.full((50, 1, 1), AGENT))
    actions = policy.act(obs)
    assert set(actions.tolist()) <= {0, 1, 2, 3}


def test_greedy_is_deterministic_per_seed_and_reseeding_restarts_it():
    codes = random_views(np.random.default_rng(0), 64, 9, [0.7, 0.1, 0.0, 0.1, 0.0, 0.1])
    obs = one_hot_views(codes)

    def play(policy):
        return [policy.act(obs).tolist() for _ in range(5)]

    policy = GreedyPolicy()
    policy.seed(np.random.default_rng(3))
    first = play(policy)
    policy.seed(np.random.default_rng(3))
    assert play(policy) == first
    fresh = GreedyPolicy()
    fresh.seed(np.random.default_rng(3))
    assert play(fresh) == first
    with pytest.raises(ValueError, match="persistence"):
        GreedyPolicy(persistence=1.5)


# ---------------------------------------------------------------------------- random
def test_random_policy_is_uniform_independent_and_seeded():
    policy = RandomPolicy(block=1000)  # small blocks: requests cross block boundaries
    policy.seed(np.random.default_rng(0))
    obs = np.zeros((7, 6, 3, 3), dtype=np.uint8)
    draws = np.concatenate([policy.act(obs) for _ in range(6000)])
    assert draws.dtype == np.int64 and set(np.unique(draws)) == {0, 1, 2, 3}
    counts = np.bincount(draws, minlength=4)
    expected = len(draws) / 4
    assert ((counts - expected) ** 2 / expected).sum() < 21.11  # chi2, 3 dof, p = 1e-4
    pairs = np.bincount(draws[:-1] * 4 + draws[1:], minlength=16)
    expected = (len(draws) - 1) / 16
    assert ((pairs - expected) ** 2 / expected).sum() < 37.7  # chi2, 15 dof, p = 1e-4
    policy.seed(np.random.default_rng(0))
    again = np.concatenate([policy.act(obs) for _ in range(6000)])
    np.testing.assert_array_equal(draws, again)
    big = policy.act(np.zeros((2500, 6, 3, 3), dtype=np.uint8))  # larger than a block
    assert big.shape == (2500,)
    with pytest.raises(ValueError, match="block"):
        RandomPolicy(block=0)


def test_single_observation_call():
    policy = GreedyPolicy()
    policy.seed(np.random.default_rng(0))
    codes = np.full((1, 3, 3), WALL)
    codes[0, 1, 1], codes[0, 0, 1] = AGENT, GEM
    assert policy(one_hot_views(codes)[0]) == 0


# ---------------------------------------------------------------------------- make_policy
def test_make_policy_specs():
    assert isinstance(make_policy("random"), RandomPolicy)
    assert isinstance(make_policy("greedy"), GreedyPolicy)
    assert isinstance(make_policy("eps-greedy"), EpsilonGreedyPolicy)
    assert make_policy("eps-greedy").epsilon == 0.3
    assert isinstance(make_policy("wall-follower"), WallFollowerPolicy)
    policy = GreedyPolicy()
    assert make_policy(policy) is policy

    def fn(obs):
        return 0

    wrapped = make_policy(fn)
    assert isinstance(wrapped, CallablePolicy) and wrapped.policy_id == "fn"
    assert wrapped.act(np.zeros((3, 6, 9, 9), dtype=np.uint8)).tolist() == [0, 0, 0]
    for bad in ("smart", 3, None, ["random"]):
        with pytest.raises(ValueError, match="unknown policy"):
            make_policy(bad)


@pytest.mark.parametrize("actions, error, fragment", [
    (np.zeros(3, dtype=np.int64), ValueError, "shape"),
    (np.zeros((2, 1), dtype=np.int64), ValueError, "shape"),
    (np.zeros(2, dtype=np.float64), TypeError, "dtype"),
    (np.array([0, 4]), ValueError, "0..3"),
    (np.array([-1, 0]), ValueError, "0..3"),
])
def test_check_policy_actions(actions, error, fragment):
    with pytest.raises(error, match=fragment):
        check_policy_actions(actions, 2, "p")
    assert check_policy_actions(np.array([0, 3], dtype=np.int32), 2, "p").dtype == np.int64


# ---------------------------------------------------------------------------- eps-greedy, wall-follower
def _play(name: str, seed: int, **rules):
    """16 real games of ``name``: codes (N, T + 1, V, V), actions (N, T), rewards (N, T)."""
    import rpg_env

    venv = gym.make_vec(rpg_env.ENV_ID, num_envs=16, co_policy="random", **rules)
    obs, _ = venv.reset(seed=seed)
    policy = make_policy(name)
    policy.seed(np.random.default_rng(seed))
    codes, actions, rewards = [obs.argmax(1)], [], []
    for _ in range(100):
        action = policy.act(obs)
        obs, reward, *_ = venv.step(action)
        codes.append(obs.argmax(1))
        actions.append(action)
        rewards.append(reward)
    venv.close()
    return np.stack(codes, 1), np.stack(actions, 1), np.stack(rewards, 1)


@pytest.mark.parametrize("rules", [{}, {"num_levels": 20}, {"num_levels": 20, "distribution_mode": "hard"}])
def test_the_wall_follower_keeps_a_wall_at_hand_and_never_bumps(rules):
    codes, actions, _ = _play("wall-follower", 0, **rules)
    side = codes.shape[-1]
    c, moves = side // 2, np.array(MOVES)[actions]
    cells = (c + moves[..., 0]) * side + c + moves[..., 1]
    ahead = np.take_along_axis(codes[:, :-1].reshape(16, 100, -1), cells[..., None], -1)[..., 0]
    around = codes[:, :-1, c + np.array(MOVES)[:, 0], c + np.array(MOVES)[:, 1]]  # (N, T, 4)
    shut_in = np.isin(around, [WALL, AGENT]).all(-1)  # a dead end with an agent behind
    assert not (ahead == WALL)[~shut_in].any()  # it turns before a wall instead of bumping into it
    beside = (codes[:, 50:, c - 1 : c + 2, c - 1 : c + 2] == WALL).any((-1, -2))
    assert beside.mean() > 0.85  # by the second half of the game it walks beside walls
    again, again_actions, _ = _play("wall-follower", 0, **rules)
    np.testing.assert_array_equal(again_actions, actions)  # seeded


def test_eps_greedy_strays_from_greedy_by_its_epsilon():
    rng = np.random.default_rng(0)
    obs = one_hot_views(random_views(rng, 4000, 9, [0.8, 0.05, 0.05, 0.04, 0.05, 0.01]))
    greedy, eps = GreedyPolicy(), EpsilonGreedyPolicy(epsilon=0.3)
    greedy.seed(np.random.default_rng(1))
    eps.seed(np.random.default_rng(1))
    # the same generator draws the greedy part first: a stray that draws the greedy action agrees
    differ = (greedy.act(obs) != eps.act(obs)).mean()
    assert abs(differ - 0.3 * 0.75) < 0.03
    with pytest.raises(ValueError, match="epsilon"):
        EpsilonGreedyPolicy(epsilon=1.5)
