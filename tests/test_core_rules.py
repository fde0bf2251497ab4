"""The game's rules (DESIGN.md), checked on exact layouts and, for spawning, statistically.

Rules under test: gem +10 / food +5 / bone -10 are picked up and consumed; a wall bump costs
-1 and the agent stays; another agent blocks (0); agents move in index order; items spawn
only after the moves, only on empty cells, at rate ``spawn_prob`` per empty cell per turn,
kinds uniform over gem/bone/food; the world starts empty; truncation at ``max_turns``; the
egocentric crop reads outside the map as wall.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from gymnasium.error import ResetNeeded

from rpg_env.envs.treasurehunt import TreasurehuntEnv
from rpg_env.game.constants import AGENT, BONE, EMPTY, FOOD, GEM, ITEM_CODES, WALL
from rpg_env.game.world import WorldBatch, WorldParams, parse_layout

UP, DOWN, LEFT, RIGHT = range(4)
MOVES = {UP: (-1, 0), DOWN: (1, 0), LEFT: (0, -1), RIGHT: (0, 1)}


def scripted(actions):
    """A co-player callable that plays ``actions`` in order."""
    queue = iter(actions)
    return lambda obs: next(queue)


def make_env(layout: list[str], co_actions=(), **kwargs) -> tuple[TreasurehuntEnv, np.ndarray, dict]:
    num_agents = sum(ch.isupper() for row in layout for ch in row)
    kwargs.setdefault("spawn_prob", 0.0)
    env = TreasurehuntEnv(height=len(layout), width=len(layout[0]), num_agents=num_agents,
                          co_policy=scripted(co_actions), **kwargs)
    obs, info = env.reset(seed=0, options={"layout": layout})
    return env, obs, info


# ---------------------------------------------------------------------------- items, walls
@pytest.mark.parametrize("char, code, key, value", [("g", GEM, "gem", 10.0), ("f", FOOD, "food", 5.0),
                                                    ("b", BONE, "bone", -10.0)])
def test_item_is_picked_up_scored_and_consumed(char, code, key, value):
    env, _, _ = make_env(["#####", f"#A{char}.#", "#####"])
    assert env.world.grid[0, 1, 2] == code
    _, reward, terminated, truncated, info = env.step(RIGHT)
    assert reward == value
    assert info["pickups"] == {"gem": 0, "food": 0, "bone": 0, key: 1}
    assert not info["bumped"] and not terminated and not truncated
    assert info["positions"].tolist() == [[1, 2]]
    assert info["episode_return"] == value
    # Consumed: the agent stands where the item was, and leaving shows an empty cell.
    assert env.world.grid[0, 1, 2] == AGENT
    _, reward, _, _, info = env.step(RIGHT)
    assert reward == 0.0 and info["pickups"] == {"gem": 0, "food": 0, "bone": 0}
    assert env.world.grid[0, 1, 2] == EMPTY and env.world.grid[0, 1, 1] == EMPTY
    assert info["episode_return"] == value


def test_item_values_are_keyword_arguments():
    env, _, _ = make_env(["#######", "#Agfb.#", "#######"], gem_value=3, food_value=2.5,
                         bone_value=-7, wall_penalty=-0.25)
    rewards = [env.step(RIGHT)[1] for _ in range(5)]
    assert rewards == [3.0, 2.5, -7.0, 0.0, -0.25]


def test_wall_bump_costs_penalty_and_agent_stays():
    env, obs0, _ = make_env(["###", "#A#", "###"])
    for action in (UP, DOWN, LEFT, RIGHT):
        obs, reward, _, _, info = env.step(action)
        assert reward == -1.0
        assert info["bumped"] is True
        assert info["pickups"] == {"gem": 0, "food": 0, "bone": 0}
        assert info["positions"].tolist() == [[1, 1]]
        np.testing.assert_array_equal(obs, obs0)  # nothing changed in the view
    assert info["episode_return"] == -4.0


def test_moving_off_a_map_without_border_walls_bumps():
    # A layout may omit the border: outside the map acts as wall for moves too (no wrapping),
    # even with vision_radius 0 (no view padding).
    for radius in (0, 2):
        env, _, _ = make_env(["A..", "...", "..."], vision_radius=radius)
        for action in (UP, LEFT):
            _, reward, _, _, info = env.step(action)
            assert reward == -1.0 and info["bumped"] and info["positions"].tolist() == [[0, 0]]
        env, _, _ = make_env(["...", "...", "..A"], vision_radius=radius)
        for action in (DOWN, RIGHT):
            _, reward, _, _, info = env.step(action)
            assert reward == -1.0 and info["positions"].tolist() == [[2, 2]]


def test_another_agent_blocks_with_zero_reward():
    # A tries to enter B's cell: blocked, 0 points; B (stepping into a wall) stays too.
    env, _, _ = make_env(["####", "#AB#", "####"], co_actions=[RIGHT])
    _, reward, _, _, info = env.step(RIGHT)
    assert reward == 0.0 and not info["bumped"]
    assert info["positions"].tolist() == [[1, 1], [1, 2]]
    assert info["co_actions"].tolist() == [RIGHT]
    assert info["co_rewards"].tolist() == [-1.0]


def test_agents_move_in_index_order():
    # B is behind A: A (agent 0) moves first and frees its cell, so B may follow.
    env, _, _ = make_env(["#####", "#BA.#", "#####"], co_actions=[RIGHT])
    env.step(RIGHT)
    assert env.world.world_agent_rc(0).tolist() == [[1, 3], [1, 2]]
    # A is behind B: A moves first into B's (still occupied) cell and is blocked; B moves.
    env, _, _ = make_env(["#####", "#AB.#", "#####"], co_actions=[RIGHT])
    _, reward, _, _, info = env.step(RIGHT)
    assert reward == 0.0 and info["positions"].tolist() == [[1, 1], [1, 3]]
    # Both aim at the same free cell: the first mover gets it, the second is blocked.
    env, _, _ = make_env(["#####", "#A.B#", "#####"], co_actions=[LEFT])
    _, _, _, _, info = env.step(RIGHT)
    assert info["positions"].tolist() == [[1, 2], [1, 3]]
    assert info["co_rewards"].tolist() == [0.0]


def test_co_player_pickups_score_for_the_co_player():
    env, _, _ = make_env(["######", "#A.gB#", "######"], co_actions=[LEFT, LEFT])
    _, reward, _, _, info = env.step(DOWN)
    assert reward == -1.0
    assert info["co_rewards"].tolist() == [10.0] and info["co_returns"].tolist() == [10.0]
    _, reward, _, _, info = env.step(RIGHT)  # A enters (1,2) first; B, then at (1,3), is blocked
    assert reward == 0.0 and info["co_rewards"].tolist() == [0.0]
    assert info["co_returns"].tolist() == [10.0] and info["episode_return"] == -1.0


def test_three_agents_move_in_order_and_block_each_other():
    env, _, _ = make_env(["######", "#ABC.#", "######"], co_actions=[RIGHT, RIGHT])
    env.step(RIGHT)  # A blocked by B; B blocked by C; C moves
    assert env.world.world_agent_rc(0).tolist() == [[1, 1], [1, 2], [1, 4]]


# ---------------------------------------------------------------------------- spawning
def test_world_starts_without_items():
    params = WorldParams()
    world = WorldBatch(params, 500)
    world.reset(np.random.default_rng(1))
    codes, counts = np.unique(world.grid, return_counts=True)
    assert set(codes.tolist()) == {EMPTY, WALL, AGENT}
    assert counts[codes.tolist().index(AGENT)] == 500 * params.num_agents
    assert (world.grid[:, 0] == WALL).all() and (world.grid[:, -1] == WALL).all()
    assert (world.grid[:, :, 0] == WALL).all() and (world.grid[:, :, -1] == WALL).all()
    # Agents start on distinct interior cells, spread over the whole interior.
    rc = world.agent_rc().reshape(-1, 2)
    assert rc.min() == 1 and rc.max() == params.height - 2
    assert len({tuple(p) for p in world.agent_rc()[0]}) == params.num_agents


def _boxed_worlds(num_worlds: int, spawn_prob: float) -> tuple[WorldBatch, np.ndarray]:
    """Worlds whose agents are walled in (they only bump), with a fixed mix of items."""
    layout = [
        "##########",
        "#A#.g..b.#",
        "###..f...#",
        "#B#......#",
        "###.#.#..#",
        "#........#",
        "##########",
    ]
    params = WorldParams(height=7, width=10, spawn_prob=spawn_prob, vision_radius=2)
    world = WorldBatch(params, num_worlds)
    grid, agent_rc = parse_layout(layout, params)
    for w in range(num_worlds):
        world.load_layout(w, grid, agent_rc)
    return world, np.zeros((num_worlds, 2), dtype=np.int64)  # "up" bumps for both agents


def test_spawns_only_on_empty_cells_and_everywhere_at_p1():
    world, actions = _boxed_worlds(3, spawn_prob=1.0)
    before = world.grid.copy()
    rewards, codes = world.step(actions, np.random.default_rng(0))
    after = world.grid
    empty = before == EMPTY
    assert np.isin(after[empty], ITEM_CODES).all()  # every empty cell got an item
    np.testing.assert_array_equal(after[~empty], before[~empty])  # nothing else changed
    np.testing.assert_array_equal(rewards, np.full((3, 2), -1.0, dtype=np.float32))
    np.testing.assert_array_equal(codes, np.full((3, 2), WALL))


def test_spawn_prob_zero_never_spawns():
    params = WorldParams(spawn_prob=0.0)
    world = WorldBatch(params, 64)
    rng = np.random.default_rng(3)
    world.reset(rng)
    for _ in range(params.max_turns):
        world.step(rng.integers(0, 4, size=(64, params.num_agents)), rng)
    assert not np.isin(world.grid, ITEM_CODES).any()


def _binomial_z(successes: int, trials: int, p: float) -> float:
    return (successes - trials * p) / math.sqrt(trials * p * (1 - p))


# Critical values for p = 1e-4 (two-sided normal 3.89; chi-square), so a correct
# implementation fails these statistical checks about once in ten thousand runs.
Z_CRIT = 3.89
CHI2_CRIT = {2: 18.42, 3: 21.11, 4: 23.51, 9: 33.72}


@pytest.mark.parametrize("spawn_prob, max_block", [(0.01, None), (0.2, None), (0.2, 50)])
def test_spawn_rate_kinds_and_positions_are_right(spawn_prob, max_block):
    """Over many worlds and turns: per-cell rate p, kinds uniform, no positional bias.

    ``max_block`` forces several small draws per turn (the path huge batches take)."""
    num_worlds, turns = 2000, 25
    world, actions = _boxed_worlds(num_worlds, spawn_prob)
    if max_block:
        world.max_spawn_block = max_block
    rng = np.random.default_rng(12345)
    empty_cells_tried = spawned = 0
    kinds = np.zeros(3, dtype=np.int64)
    by_column = np.zeros(10, dtype=np.int64)
    by_column_trials = np.zeros(10, dtype=np.int64)
    by_world_half = np.zeros(2, dtype=np.int64)
    for _ in range(turns):
        before = world.grid.copy()
        world.step(actions, rng)
        after = world.grid
        empty = before == EMPTY
        new = empty & (after != EMPTY)
        assert (after[~empty] == before[~empty]).all()
        empty_cells_tried += int(empty.sum())
        spawned += int(new.sum())
        kinds += np.array([(after[new] == c).sum() for c in ITEM_CODES])
        by_column += new.sum(axis=(0, 1))
        by_column_trials += empty.sum(axis=(0, 1))
        by_world_half += [new[: num_worlds // 2].sum(), new[num_worlds // 2 :].sum()]
        if spawn_prob > 0.1:  # keep trials coming: clear the items again
            world.grid[new] = EMPTY
    assert abs(_binomial_z(spawned, empty_cells_tried, spawn_prob)) < Z_CRIT
    expected = spawned / 3
    assert ((kinds - expected) ** 2 / expected).sum() < CHI2_CRIT[2]
    # Every column (1..8 hold empty cells) spawns at the same rate as the others.
    cols = by_column_trials > 0
    exp_col = by_column_trials[cols] * spawned / empty_cells_tried
    dof = int(cols.sum()) - 1
    assert ((by_column[cols] - exp_col) ** 2 / exp_col).sum() < CHI2_CRIT.get(dof, 40.0)
    half = by_world_half / by_world_half.sum()
    assert abs(half[0] - 0.5) < Z_CRIT * 0.5 / math.sqrt(by_world_half.sum())


@pytest.mark.parametrize("max_block", [None, 7])
def test_spawn_counts_per_turn_have_binomial_spread(max_block):
    """Trials are independent: per-turn counts over one world have binomial variance."""
    world, actions = _boxed_worlds(1, spawn_prob=0.3)
    if max_block:
        world.max_spawn_block = max_block
    rng = np.random.default_rng(7)
    counts, trials = [], None
    for _ in range(2000):
        before = world.grid.copy()
        world.step(actions, rng)
        new = (before == EMPTY) & (world.grid != EMPTY)
        counts.append(int(new.sum()))
        trials = int((before == EMPTY).sum())
        world.grid[new] = EMPTY
    counts = np.array(counts)
    p = 0.3
    assert abs(counts.mean() - trials * p) < Z_CRIT * math.sqrt(trials * p * (1 - p) / len(counts))
    var_ratio = counts.var(ddof=1) / (trials * p * (1 - p))
    assert 0.85 < var_ratio < 1.15  # sd of this ratio is about sqrt(2 / 2000) = 0.032
    # Consecutive turns are uncorrelated.
    c = counts - counts.mean()
    assert abs((c[1:] * c[:-1]).mean() / c.var()) < Z_CRIT / math.sqrt(len(counts))


def test_spawning_is_deterministic_per_generator_state():
    def run(seed):
        params = WorldParams(spawn_prob=0.05)
        world = WorldBatch(params, 8)
        rng = np.random.default_rng(seed)
        world.reset(rng)
        for _ in range(40):
            world.step(rng.integers(0, 4, size=(8, 2)), rng)
        return world.cells.copy()

    np.testing.assert_array_equal(run(5), run(5))
    assert not np.array_equal(run(5), run(6))


def test_inactive_worlds_do_not_change():
    params = WorldParams(spawn_prob=0.5)
    world = WorldBatch(params, 6)
    rng = np.random.default_rng(0)
    world.reset(rng)
    active = np.array([True, False, True, False, False, True])
    before = world.cells.copy()
    turn_before = world.turn.copy()
    rewards, codes = world.step(rng.integers(0, 4, size=(6, 2)), rng, active)
    np.testing.assert_array_equal(world.cells[~active], before[~active])
    assert not np.array_equal(world.cells[active], before[active])
    np.testing.assert_array_equal(world.turn, turn_before + active)
    assert (rewards[~active] == 0).all() and (codes[~active] == EMPTY).all()


# ---------------------------------------------------------------------------- episode end
def test_truncation_at_max_turns_never_termination():
    env = TreasurehuntEnv(max_turns=7)
    env.reset(seed=0)
    for t in range(1, 8):
        _, _, terminated, truncated, info = env.step(t % 4)
        assert terminated is False
        assert truncated is (t == 7)
        assert info["turn"] == t
    with pytest.raises(ResetNeeded, match="reset"):
        env.step(0)
    env.reset()
    assert env.step(0)[3] is False


def test_step_before_reset_raises():
    with pytest.raises(ResetNeeded):
        TreasurehuntEnv().step(0)


# ---------------------------------------------------------------------------- egocentric crop
def reference_crop(grid: np.ndarray, row: int, col: int, radius: int) -> np.ndarray:
    """The (2r+1, 2r+1) window around (row, col) with outside-the-map cells as wall."""
    padded = np.pad(grid, radius, constant_values=WALL)
    return padded[row : row + 2 * radius + 1, col : col + 2 * radius + 1]


@pytest.mark.parametrize("radius", [0, 1, 2, 4, 6])
def test_egocentric_crop_at_every_cell_including_corners(radius):
    # No border walls, so the agent can stand on the map's edges and corners.
    base = ["g.b.f.",
            "..#...",
            "f...gb",
            ".b..#.",
            "...g.."]
    height, width = len(base), len(base[0])
    env = TreasurehuntEnv(height=height, width=width, vision_radius=radius, num_agents=1,
                          spawn_prob=0.0)
    side = 2 * radius + 1
    assert env.observation_space.shape == (6, side, side)
    for row in range(height):
        for col in range(width):
            layout = [list(r) for r in base]
            layout[row][col] = "A"
            obs, _ = env.reset(options={"layout": ["".join(r) for r in layout]})
            grid = env.world.grid[0]
            expected = reference_crop(grid, row, col, radius)
            assert obs.dtype == np.int8 and obs.shape == (6, side, side)
            assert (obs.sum(axis=0) == 1).all()  # exactly one kind per cell
            np.testing.assert_array_equal(obs.argmax(axis=0), expected)
            assert obs[AGENT, radius, radius] == 1  # the agent sits at the centre


def test_crop_follows_the_agent_and_matches_the_full_map():
    env = TreasurehuntEnv(height=12, width=9, vision_radius=3, num_agents=3, spawn_prob=0.2,
                          co_policy="random", obs_mode="onehot")
    obs, info = env.reset(seed=4)
    for _ in range(30):
        obs, _, _, _, info = env.step(int(env.np_random.integers(4)))
        grid = env.world.grid[0]
        for k, (row, col) in enumerate(info["positions"]):
            view = obs if k == 0 else info["co_obs"][k - 1]
            np.testing.assert_array_equal(view.argmax(axis=0), reference_crop(grid, row, col, 3))


@pytest.mark.parametrize("radius", [0, 1, 3, 5])
def test_batched_crops_match_the_reference_in_every_world(radius):
    # Many worlds (the batched gather path), agents at corners, edges and inside, no border.
    base = ["g.b.f.",
            "..#...",
            "f...gb",
            ".b..#.",
            "...g.."]
    params = WorldParams(height=5, width=6, vision_radius=radius, num_agents=2)
    spots = [(0, 0), (0, 5), (4, 0), (4, 5), (2, 0), (0, 3), (2, 2), (4, 3), (3, 5), (1, 1)]
    world = WorldBatch(params, len(spots))
    for w, (row, col) in enumerate(spots):
        layout = [list(r) for r in base]
        layout[row][col] = "A"
        other = spots[(w + 3) % len(spots)]
        layout[other[0]][other[1]] = "B"
        world.load_layout(w, *parse_layout(["".join(r) for r in layout], params))
    views = world.views()
    side = 2 * radius + 1
    assert views.shape == (len(spots), 2, side * side) and views.dtype == np.int8
    rc = world.agent_rc()
    for w in range(len(spots)):
        for k in range(2):
            expected = reference_crop(world.grid[w], *rc[w, k], radius)
            np.testing.assert_array_equal(views[w, k].reshape(side, side), expected)
        np.testing.assert_array_equal(world.world_views(w), views[w])


def test_copies_and_pickles_are_independent_working_worlds():
    import copy
    import pickle

    params = WorldParams(height=9, width=9, spawn_prob=0.2)
    world = WorldBatch(params, 8)  # 8 worlds: the batched crop path
    rng = np.random.default_rng(0)
    world.reset(rng)
    world.step(rng.integers(0, 4, size=(8, 2)), rng)
    for clone in (copy.deepcopy(world), pickle.loads(pickle.dumps(world))):
        before = world.cells.copy()
        clone_rng, world_rng = np.random.default_rng(1), np.random.default_rng(1)
        actions = rng.integers(0, 4, size=(8, 2))
        clone.step(actions, clone_rng)
        np.testing.assert_array_equal(world.cells, before)  # the original did not move
        world_copy = copy.deepcopy(world)
        world_copy.step(actions, world_rng)
        np.testing.assert_array_equal(clone.cells, world_copy.cells)
        np.testing.assert_array_equal(clone.views(), world_copy.views())
        views = clone.views().reshape(8, 2, 9, 9)
        rc = clone.agent_rc()
        np.testing.assert_array_equal(views[0, 0], reference_crop(clone.grid[0], *rc[0, 0], 4))
