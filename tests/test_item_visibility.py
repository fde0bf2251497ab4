"""``item_visible_turns``, the memory variant: items show in the agents' views only for the k turns
after they appear, stay on the map (collected, scored, blocking spawns), and the default game
(k = 0) is the game as it was, bit for bit."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rpg_env  # noqa: F401  (registers Treasurehunt-v0)
from rpg_base.cli import command_status
from rpg_env.envs.treasurehunt import TreasurehuntEnv
from rpg_env.envs.vector import TreasurehuntVectorEnv
from rpg_env.game.constants import GEM, vocabulary
from rpg_env.game.observation import codes_to_rgb
from rpg_env.game.world import WorldParams
from rpg_env.play.__main__ import build_parser, make_env
from rpg_env.record import main as record_main
from rpg_env.record import record
from rpg_env.replay import replay_streams
from rpg_env.trajectories.reader import TrajectoryFile

VOCAB = vocabulary()
EMPTY, WALL = VOCAB.empty, VOCAB.wall
#: The kinds that fade: every pick-up kind that spawns, read from the vocabulary.
FADING = [code for code in VOCAB.pickup_codes if VOCAB.cells[code].spawns]
K = 3
# 7 x 7: every interior cell is in every agent's 9 x 9 view, wherever the agent stands.
SMALL = {"height": 7, "width": 7, "spawn_prob": 0.05}
# The learner (A) in a corridor with a gem 3 cells away; the co-player (B) walled in, seeing it.
LAYOUT = ["#######",
          "#A..g.#",
          "#.....#",
          "#.....#",
          "#...###",
          "#...#B#",
          "#######"]
GEM_RC = (1, 4)


class Ages:
    """The turn each cell's item appeared, worked out from the truthful grids alone."""

    def __init__(self, grids: np.ndarray) -> None:
        self.grids = grids.copy()
        self.appeared = np.zeros(grids.shape, dtype=np.int64)

    def update(self, grids: np.ndarray, turns: np.ndarray) -> None:
        was, now = np.isin(self.grids, FADING), np.isin(grids, FADING)
        restarted = np.asarray(turns) == 0
        self.appeared[restarted] = 0
        new = now & ~was & ~restarted[:, None, None]
        self.appeared[new] = np.broadcast_to(np.asarray(turns)[:, None, None], grids.shape)[new]
        self.grids = grids.copy()


def expected_view(grid, appeared, rc, turn, radius=4, k=K):
    """The (V, V) codes an agent at ``rc`` should see: the map crop, old items read as empty."""
    codes = np.pad(grid, radius, constant_values=WALL)[rc[0] : rc[0] + 2 * radius + 1,
                                                        rc[1] : rc[1] + 2 * radius + 1].copy()
    age = turn - np.pad(appeared, radius)[rc[0] : rc[0] + 2 * radius + 1, rc[1] : rc[1] + 2 * radius + 1]
    codes[np.isin(codes, FADING) & (age >= k)] = EMPTY
    return codes


def _play(env, seed, steps, rng_seed=0):
    """Seeded random play; yields ``(obs, reward, info)`` after reset and every step."""
    rng = np.random.default_rng(rng_seed)
    obs, info = env.reset(seed=seed)
    yield obs, 0.0, info
    for _ in range(steps):
        obs, reward, _, truncated, info = env.step(int(rng.integers(4)))
        yield obs, reward, info
        if truncated:
            obs, info = env.reset()
            yield obs, 0.0, info


# ---------------------------------------------------------------------------- the default game
def test_zero_is_the_default_game_bit_for_bit():
    for kwargs in ({}, {"num_levels": 5}):
        plain = list(_play(TreasurehuntEnv(**kwargs), seed=4, steps=100))
        zero = list(_play(TreasurehuntEnv(item_visible_turns=0, **kwargs), seed=4, steps=100))
        for (obs, reward, info), (obs0, reward0, info0) in zip(plain, zero, strict=True):
            np.testing.assert_array_equal(obs0, obs)
            np.testing.assert_array_equal(info0["co_obs"], info["co_obs"])
            assert reward0 == reward
    venvs = [TreasurehuntVectorEnv(4, **kw) for kw in ({}, {"item_visible_turns": 0})]
    outs = [[v.reset(seed=2)[0]] for v in venvs]
    for t in range(120):
        for v, out in zip(venvs, outs, strict=True):
            out.append(v.step(np.arange(4) * t % 4)[0])
    np.testing.assert_array_equal(np.stack(outs[0]), np.stack(outs[1]))
    env = TreasurehuntEnv(item_visible_turns=0)
    assert env.metadata["rules"] == TreasurehuntEnv().metadata["rules"]  # files read as before
    assert "item_visible_turns" not in env.metadata["rules"] and env.world.ages is None
    assert TreasurehuntEnv(item_visible_turns=K).metadata["rules"]["item_visible_turns"] == K


# ---------------------------------------------------------------------------- the rule
def test_items_show_for_k_turns_then_read_as_empty_while_still_there():
    env = TreasurehuntEnv(item_visible_turns=K, max_turns=300, **SMALL)
    world, points = env.world, VOCAB.values(env.params)
    seen_at_age: dict[int, int] = {}
    hidden_pickups = 0
    ages = before = None
    for obs, reward, info in _play(env, seed=1, steps=300):
        turn = info["turn"]
        grid = world.grid[0].copy()
        if ages is None or turn == 0:
            ages = Ages(grid[None])
        ages.update(grid[None], np.array([turn]))
        views = [obs, *info["co_obs"]]
        for view, rc in zip(views, info["positions"], strict=True):
            np.testing.assert_array_equal(view.argmax(0), expected_view(grid, ages.appeared[0], rc, turn))
        # Every item of the map is in the learner's view here: follow each one's life.
        for r, c in zip(*np.nonzero(np.isin(grid, FADING)), strict=True):
            age = turn - int(ages.appeared[0, r, c])
            shown = obs[grid[r, c], r - info["positions"][0][0] + 4, c - info["positions"][0][1] + 4]
            assert shown == (age < K)
            seen_at_age[min(age, K)] = seen_at_age.get(min(age, K), 0) + 1
        if turn and any(info["pickups"].values()):  # the item entered, as it was a turn before
            last_grid, last_appeared, last_turn = before
            r, c = info["positions"][0]
            assert reward == points[last_grid[r, c]]
            hidden_pickups += int(last_turn - last_appeared[r, c] >= K)
        before = (grid, ages.appeared[0].copy(), turn)
    assert all(seen_at_age.get(age, 0) > 0 for age in range(K + 1))  # whole lives were followed
    assert hidden_pickups > 0  # the random learner walked onto hidden items, and scored them


def test_a_hidden_item_is_collected_and_scored_and_hidden_from_co_players():
    env = TreasurehuntEnv(item_visible_turns=K, spawn_prob=0.0, co_policy="greedy", height=7, width=7)
    obs, info = env.reset(seed=0, options={"layout": LAYOUT})
    up, right = 0, 3
    for turn, action in enumerate([None, up, up, up, right, right], start=0):
        if action is not None:
            obs, reward, _, _, info = env.step(action)
            assert reward == (-1.0 if action == up else 0.0)
        assert info["turn"] == turn and env.world.grid[0][GEM_RC] == GEM  # always on the map
        for view, rc in zip([obs, *info["co_obs"]], info["positions"], strict=True):
            cell = view[:, GEM_RC[0] - rc[0] + 4, GEM_RC[1] - rc[1] + 4]
            assert cell.argmax() == (GEM if turn < K else EMPTY), (turn, rc)
    obs, reward, _, _, info = env.step(right)
    assert reward == 10.0 and info["pickups"]["gem"] == 1 and info["episode_return"] == 7.0
    assert env.world.grid[0][GEM_RC] == VOCAB.agent
    # The full map and the rendered frame stay truthful.
    full = TreasurehuntEnv(item_visible_turns=K, spawn_prob=0.0, obs_mode="full", height=7, width=7,
                           render_mode="ansi")
    obs, _ = full.reset(seed=0, options={"layout": LAYOUT})
    for _ in range(K + 1):
        obs, *_ = full.step(up)
    assert obs[GEM][GEM_RC] == 1 and full.render().splitlines()[1 + GEM_RC[0]][GEM_RC[1]] == "g"


def test_rgb_views_hide_the_same_items():
    onehot = TreasurehuntEnv(item_visible_turns=K, **SMALL)
    rgb = TreasurehuntEnv(item_visible_turns=K, obs_mode="rgb", tile_size=4, **SMALL)
    hidden = 0
    for (obs, _, _), (pixels, _, _) in zip(_play(onehot, 3, 60), _play(rgb, 3, 60), strict=True):
        np.testing.assert_array_equal(pixels, codes_to_rgb(obs.argmax(0), 4))
        hidden += int(np.isin(onehot.world.grid, FADING).sum() - obs[FADING].sum())
    assert hidden > 0


def test_reset_forgets_the_ages():
    env = TreasurehuntEnv(item_visible_turns=K, max_turns=60, **SMALL)
    for _ in _play(env, seed=5, steps=50):
        pass
    assert env.world.ages.appeared.max() > K  # late items left ages behind
    layout = [row.replace(".", "g") for row in LAYOUT]  # items on every free cell, appeared at 0
    obs, _ = env.reset(options={"layout": layout})
    for turn in range(1, K + 1):
        obs, *_ = env.step(0)  # the learner bumps the wall
        assert obs[GEM].sum() == (0 if turn >= K else np.isin(env.world.grid, FADING).sum())
    assert (env.world.ages.appeared == 0).all()
    env.reset(seed=5)
    assert (env.world.ages.appeared == 0).all()


# ---------------------------------------------------------------------------- the vector env
def test_the_vector_env_gives_the_single_envs_views():
    kwargs = dict(item_visible_turns=K, **SMALL)
    env = gym.make("Treasurehunt-v0", **kwargs)
    venv = gym.make_vec("Treasurehunt-v0", num_envs=1, **kwargs)
    hidden = 0
    for seed in (8, 9):
        obs, info = env.reset(seed=seed)
        vobs, vinfo = venv.reset(seed=seed)
        for a in np.random.default_rng(seed).integers(0, 4, size=100):
            obs, reward, _, _, info = env.step(int(a))
            vobs, vreward, _, _, vinfo = venv.step(np.array([a]))
            np.testing.assert_array_equal(vobs[0], obs)
            np.testing.assert_array_equal(vinfo["co_obs"][0], info["co_obs"])
            assert vreward[0] == reward
            hidden += int(np.isin(env.unwrapped.world.grid, FADING).sum() - obs[FADING].sum())
    assert hidden > 0


@pytest.mark.parametrize("autoreset_mode, spawn_prob", [("next_step", 0.05), ("same_step", 0.05),
                                                        ("next_step", 1.0)])
def test_every_world_of_make_vec_hides_by_the_rule(autoreset_mode, spawn_prob):
    venv = gym.make_vec("Treasurehunt-v0", num_envs=4, item_visible_turns=K, max_turns=30,
                        autoreset_mode=autoreset_mode, **{**SMALL, "spawn_prob": spawn_prob})
    world = venv.unwrapped.world
    obs, infos = venv.reset(seed=3)
    ages = Ages(world.grid)
    rng = np.random.default_rng(1)
    hidden = 0
    for _ in range(80):
        turns = world.turn.copy()
        ages.update(world.grid, turns)
        for w in range(4):
            views = [obs[w], *infos["co_obs"][w]]
            for view, rc in zip(views, infos["positions"][w], strict=True):
                expected = expected_view(world.grid[w], ages.appeared[w], rc, int(turns[w]))
                np.testing.assert_array_equal(view.argmax(0), expected)
            hidden += int(np.isin(world.grid[w], FADING).sum() - obs[w][FADING].sum())
        obs, _, _, _, infos = venv.step(rng.integers(0, 4, size=4))
    assert hidden > 0
    assert (world.ages.appeared <= world.turn[:, None]).all()  # autoresets restarted the ages


# ---------------------------------------------------------------------------- checks, bad input
def test_gymnasium_env_checker_passes():
    for obs_mode in ("onehot", "rgb"):
        env = gym.make("Treasurehunt-v0", item_visible_turns=K, obs_mode=obs_mode,
                       render_mode="rgb_array").unwrapped
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env, skip_render_check=False)
        assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("value, error", [(-1, ValueError), (2.5, TypeError), ("3", TypeError),
                                          (True, TypeError), (None, TypeError)])
def test_bad_values_are_refused_naming_the_keyword(value, error):
    for make in (lambda: WorldParams(item_visible_turns=value),
                 lambda: gym.make("Treasurehunt-v0", item_visible_turns=value),
                 lambda: gym.make_vec("Treasurehunt-v0", num_envs=2, item_visible_turns=value)):
        with pytest.raises(error, match="item_visible_turns must be"):
            make()


# ---------------------------------------------------------------------------- play, record, replay
def test_play_and_record_take_the_option_and_recordings_replay(tmp_path):
    env = make_env(build_parser().parse_args(["--item-visible-turns", "4"]))
    assert env.unwrapped.params.item_visible_turns == 4
    env.close()
    assert command_status(lambda argv: build_parser().parse_args(argv), ["--item-visible-turns", "-2"]) == 2
    out = tmp_path / "memory.h5"
    record("greedy", out, 4, seed=2, num_envs=2, progress=False,
           env_kwargs={"item_visible_turns": K, "spawn_prob": 0.05})
    with TrajectoryFile(out) as tf:
        assert tf.meta["env_kwargs"]["item_visible_turns"] == K
        n = len(tf.episodes)
    replay_streams(out, range(n))  # every recorded (hidden) view checked bit for bit
    cli = tmp_path / "cli.h5"
    assert record_main(["--policy", "random", "--episodes", "1", "--out", str(cli), "--no-progress",
                        "--item-visible-turns", "2"]) == 0
    with TrajectoryFile(cli) as tf:
        assert tf.meta["env_kwargs"]["item_visible_turns"] == 2
