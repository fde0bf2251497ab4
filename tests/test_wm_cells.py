"""Where the error lives: replays of recorded games, the floor, the memory oracle, cell categories
and the theory-of-mind ceiling, on real recordings with known answers."""

import math
import shutil

import gymnasium as gym
import h5py
import numpy as np
import pytest

import rpg_env
from rpg_env.record import record
from rpg_env.replay import ReplayError, replay_streams, replayable
from rpg_env.trajectories.reader import TrajectoryFile
from rpg_env.trajectories.recorders import HDF5Recorder
from rpg_worldmodel.evaluation.baselines import fit_baselines
from rpg_worldmodel.evaluation.cells import annotate_cells, floor_ce
from rpg_worldmodel.evaluation.episodes import EvalSet
from rpg_worldmodel.evaluation.metrics import CELL_CATEGORIES
from rpg_worldmodel.evaluation.oracles import (
    REGION_IN_VIEW,
    REGION_NEVER_SEEN,
    RolledMemory,
    action_deltas,
    age_bucket,
    memory_predictions,
)
from rpg_worldmodel.evaluation.theory_of_mind import shipped_expert

SMALL = {"max_turns": 40}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("cells")
    path = root / "greedy.h5"
    # Two waves of 3 worlds, co-players recorded too: every kind of stream replays.
    record("greedy", path, 6, seed=3, num_envs=3, mode="w", progress=False, env_kwargs=SMALL)
    return path


def _eval_set(path, episodes=None):
    with TrajectoryFile(path) as tf:
        ids = list(range(len(tf))) if episodes is None else list(episodes)
        table = tf.episodes[ids]
        return EvalSet(path, ids, "all", True, table["game_id"].astype(np.int64),
                       table["agent_id"].astype(np.int64), [str(p) for p in table["policy_id"]])


def test_a_recording_replays_bit_for_bit_and_tells_where_items_spawned(recorded):
    with TrajectoryFile(recorded) as tf:
        streams = tf.read_episodes()
        assert len(set(tf.episodes["seed"].tolist())) == 2 and tf.runs[0]["co_policy_id"] == "random"
    replayed = replay_streams(recorded, range(len(streams)))
    spawns = 0
    for e, data in enumerate(streams):
        after = data["obs"][1:].argmax(1)  # views after each step
        r = replayed[e]
        assert r.spawnable.shape == r.spawned.shape == after.shape
        assert (r.spawned <= r.spawnable).all()
        assert np.isin(after[r.spawned], [2, 3, 4]).all()  # a spawned cell holds an item
        assert (after[r.spawnable & ~r.spawned] == 0).all()  # a spawnable cell that did not spawn is empty
        spawns += int(r.spawned.sum())
    assert spawns > 0


def test_a_stream_whose_seed_was_altered_is_refused(recorded, tmp_path):
    edited = tmp_path / "edited.h5"
    shutil.copy(recorded, edited)
    with h5py.File(edited, "r+") as f:
        rows = f["episodes"][:]
        rows["seed"][rows["seed"] == rows["seed"][0]] += 1
        f["episodes"][:] = rows
    with pytest.raises(ReplayError, match=r"does not replay: .* differs from the recording .*--floor bound"):
        replay_streams(edited, [0])
    with pytest.raises(ReplayError, match="does not replay"):  # the evaluation refuses it too
        annotate_cells(_eval_set(edited, [0]), fit_baselines(recorded, [1, 2]), floor="auto")
    # Asked for the bound, nothing is replayed: the figures are marked as a bound.
    bound = annotate_cells(_eval_set(edited, [0]), fit_baselines(recorded, [1, 2]), floor="bound")
    assert bound.floor_method == "analytic lower bound"


def test_a_recording_without_waves_gets_the_analytic_bound(tmp_path, recorded):
    single = tmp_path / "single.h5"
    env = HDF5Recorder(gym.make(rpg_env.ENV_ID, **SMALL), single, policy_id="random")
    env.reset(seed=1)
    for _ in range(2 * SMALL["max_turns"]):
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
    env.close()
    with TrajectoryFile(single) as tf:
        assert "seeded reset" in replayable(tf, 1) or "num_envs" in replayable(tf, 1)
    cells = annotate_cells(_eval_set(single), fit_baselines(recorded, [0, 1]), floor="auto")
    assert cells.floor_method.startswith("analytic lower bound (no replay:")
    with pytest.raises(ReplayError, match="cannot be replayed"):
        annotate_cells(_eval_set(single), fit_baselines(recorded, [0, 1]), floor="replay")


def test_the_floor_and_the_categories(recorded):
    fb = fit_baselines(recorded, [0, 1, 2])
    es = _eval_set(recorded)
    exact = annotate_cells(es, fb, floor="replay")
    bound = annotate_cells(es, fb, floor="bound")
    assert exact.floor_method == "replay (exact)"
    p = SMALL.get("spawn_prob", 0.01)
    allowed = {0.0, np.float32(-math.log1p(-p)), np.float32(-math.log(p / 3))}
    assert set(np.unique(exact.cells.floor).tolist()) <= allowed
    assert bound.cells.floor.sum() <= exact.cells.floor.sum() + 1e-3  # the bound never exceeds the floor
    assert bound.cells.floor.sum() > 0.9 * exact.cells.floor.sum()  # and misses only spawns scrolling in
    cat = exact.cells.category
    assert cat.min() >= 0 and cat.max() < len(CELL_CATEGORIES)
    names = {CELL_CATEGORIES[k] for k in np.unique(cat)}
    assert {"in_view", "never_seen", "spawned", "other_agent"} <= names
    centre = cat[:, 4, 4]
    assert (centre == CELL_CATEGORIES.index("in_view")).all()  # the agent's own cell is always in view
    # A spawned cell's floor is the price of the spawn, in any category order.
    spawned = cat == CELL_CATEGORIES.index("spawned")
    assert np.allclose(exact.cells.floor[spawned], -math.log(p / 3))


def _walked(moves: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Class codes ``(len(moves) + 1, 5, 5)`` of the views of a walk by ``moves`` (up, down, left,
    right) on a small map with no spawns, and the moves as an array."""
    env = gym.make(rpg_env.ENV_ID, height=12, width=20, spawn_prob=0.0, vision_radius=2, co_policy="random")
    layout = ["####################",
              "#..................#",
              "#..g.....f.........#",
              "#..................#",
              "#.......A..........#",
              "#..................#",
              "#....b.............#",
              "#..................#",
              "#..................#",
              "#..................#",
              "#.................B#",
              "####################"]
    obs, _ = env.reset(seed=0, options={"layout": layout})
    views = [obs] + [env.step(a)[0] for a in moves]
    return np.stack(views).argmax(1), np.array(moves)


def test_the_memory_oracle_remembers_what_scrolled_out_of_view():
    codes, actions = _walked([3, 3, 3, 2, 2, 2, 2, 2])  # right x3, then back left past the start
    deltas = action_deltas(["up", "down", "left", "right"])
    pred, region = memory_predictions(codes, actions, deltas, empty=0, agent=5, blocking=[1, 5])
    nxt = codes[1:]
    remembered = region >= 2
    # Walking back, the columns that scroll in were seen before and come back exactly as they were.
    assert remembered[3:6].any() and (pred[remembered] == nxt[remembered]).all()
    assert not remembered[:3].any()  # going right, every new column is new
    assert (region[6:] == REGION_NEVER_SEEN).any()  # past the start, new columns again
    in_view = region == REGION_IN_VIEW
    assert (pred[in_view] == nxt[in_view]).mean() > 0.98  # only the co-player can surprise it
    assert age_bucket(np.array([1, 5, 6, 20, 21, 99])).tolist() == [0, 0, 1, 1, 2, 2]


def test_the_rolled_out_memory_oracle_recalls_only_what_the_real_opening_showed():
    # right x3 (the opening); open loop: back left, right, left
    codes, actions = _walked([3, 3, 3, 2, 2, 2, 2, 2, 3, 2])
    deltas = action_deltas(["up", "down", "left", "right"])
    vocab = {"empty": 0, "agent": 5, "blocking": [1, 5]}
    memory = RolledMemory(codes[None, :4], actions[None, :3], 7, deltas, **vocab)
    rolled = [memory.step(actions[None, k]) for k in range(3, 10)]
    pred, region = (np.concatenate(x) for x in zip(*rolled, strict=True))
    truth = codes[4:11]
    # One step after the opening it is the memory oracle given the real views.
    one_step, one_region = memory_predictions(codes[:5], actions[:4], deltas, **vocab)
    np.testing.assert_array_equal(pred[0], one_step[3])
    np.testing.assert_array_equal(region[0], one_region[3])
    # Walking back over the opening's cells it recalls them exactly, from its own views.
    recalled = region >= 2
    assert recalled[:3].sum() == 3 * 5 and (pred[recalled] == truth[recalled]).all()
    # Past the start the columns are new, and a placeholder stays unknown while carried in view; it is
    # never remembered: the column that scrolled out (one step right) comes back as never seen.
    assert (region[3:5, :, 0] == REGION_NEVER_SEEN).all() and (region[4, :, 1] == REGION_NEVER_SEEN).all()
    assert (region[6, :, 0] == REGION_NEVER_SEEN).all()
    with pytest.raises(ValueError, match="actions must be"):
        RolledMemory(codes[None, :4], actions[None, :3], 7, deltas, **vocab).step(np.array([7]))
    with pytest.raises(ValueError, match="sized for 7 steps"):
        memory.step(actions[None, 9])
    with pytest.raises(ValueError, match="an opening is"):
        RolledMemory(codes[None, :4], actions[None, :4], 7, deltas, **vocab)


def _view(grid: np.ndarray, at: np.ndarray, radius: int) -> np.ndarray:
    view = grid[at[0] - radius : at[0] + radius + 1, at[1] - radius : at[1] + radius + 1].copy()
    view[radius, radius] = 5
    return view


def test_the_rolled_out_memory_oracle_keeps_its_place_on_a_map_that_stands_still():
    """Random walks on a still map (no items, no co-player) whose walls the opening has all seen: where
    the oracle says a cell is known, its own view or its recall, it is the true cell, however long it
    walks; cells it never saw (copies of their neighbours, some of them walls) neither block it nor
    are remembered. It once took such a copy for a wall, stopped where the agent moved on, and from
    then on recalled cells in the wrong places."""
    rng = np.random.default_rng(0)
    deltas, radius = action_deltas(["up", "down", "left", "right"]), 2
    vocab = {"empty": 0, "agent": 5, "blocking": [1, 5]}
    checked = blocked_moves = 0
    for walk in range(20):
        grid = np.zeros((80, 80), dtype=np.int64)
        start = np.array([40, 40])
        cluster = rng.random((5, 8)) < 0.3  # walls only where the opening looks
        cluster[2, :] = False  # the opening's row: it walks it to the end and sees every wall
        grid[38:43, 38:46] = np.where(cluster, 1, 0)
        at, views, actions = start.copy(), [], []
        for action in [3, 3, 3, *rng.integers(0, 4, 40)]:
            views.append(_view(grid, at, radius))
            target = at + deltas[action]
            blocked = grid[target[0], target[1]] == 1
            blocked_moves += int(blocked and len(views) > 4)
            at = at if blocked else target
            actions.append(action)
        views.append(_view(grid, at, radius))
        codes, actions = np.stack(views), np.array(actions)
        memory = RolledMemory(codes[None, :4], actions[None, :3], 40, deltas, **vocab)
        for k in range(3, 43):
            pred, region = memory.step(actions[None, k])
            known = region[0] != REGION_NEVER_SEEN
            assert (pred[0][known] == codes[k + 1][known]).all(), (walk, k)
            checked += int(known.sum())
    # over ten of a view's 25 cells known on average, and walls were walked into
    assert checked > 20 * 40 * 10 and blocked_moves > 10


def test_floor_of_a_cell():
    spawnable = np.array([True, True, False])
    spawned = np.array([False, True, False])
    got = floor_ce(spawnable, spawned, 0.01, 3)
    assert got.tolist() == pytest.approx([-math.log(0.99), -math.log(0.01 / 3), 0.0])
    assert floor_ce(spawnable, spawned, 0.0, 3).sum() == 0


def test_theory_of_mind_ceiling_of_a_shipped_expert(tmp_path):
    from rpg_env.experts import pretrained_path
    from rpg_worldmodel.config import load_world_model_config
    from rpg_worldmodel.evaluation.run import EvalOptions, Evaluation
    from rpg_worldmodel.train import train

    data = tmp_path / "dqn.h5"
    record(str(pretrained_path("dqn")), data, 10, seed=0, num_envs=10, mode="w", progress=False,
           policy_id="dqn", record_co_players=False, env_kwargs=SMALL)
    cfg = load_world_model_config(None, [
        "model.width=24", "model.num_heads=2", "model.num_layers=1", "model.num_frames=3",
        "train.max_steps=3", "train.warmup_steps=1", "train.batch_size=8", "train.progress=false",
        "data.max_val_windows=16", "data.split_fractions=[0.6, 0.2, 0.2]"])
    cfg.data.path, cfg.out_dir = str(data), str(tmp_path / "run")
    ev = Evaluation(train(cfg).checkpoint, [data], EvalOptions(num_boot=50))
    result = ev.evaluate_file(data, num_examples=0)
    tom = result["theory_of_mind"]
    assert tom["expert"] == "dqn"
    # The expert's own network on the real next view reproduces every recorded action.
    assert tom["action_acc"]["expert_true_view"]["value"] == 1.0
    head = result["predictors"]["model"]["action_acc"]["value"]
    assert tom["action_acc"]["model_action_head"]["value"] == pytest.approx(head)
    for name in ("expert_motion_view", "expert_model_view"):
        diff = tom["model_minus"][name]
        assert diff["value"] == pytest.approx(head - tom["action_acc"][name]["value"])
    assert result["floor_method"] == "replay (exact)" and "memory_oracle" in result["predictors"]
    model = result["predictors"]["model"]
    shares = sum(model[f"share_{c}"]["value"] for c in CELL_CATEGORIES)
    assert shares == pytest.approx(1.0)
    assert model["excess_view_ce"]["value"] == pytest.approx(model["view_ce"]["value"]
                                                            - model["floor_view_ce"]["value"])


def test_shipped_experts_are_found_by_policy_id():
    found = shipped_expert(["dqn"])
    assert found is not None and found[0] == "dqn" and found[1].name == "model.zip"
    assert shipped_expert(["sb3-ppo"])[0] == "ppo"
    assert shipped_expert(["greedy"]) is None and shipped_expert(["dqn", "ppo"]) is None
