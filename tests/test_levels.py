"""Generated levels (`rpg_env.game.levels`) and the envs' ``num_levels``/``start_level``/
``distribution_mode``: same seed same layout everywhere, every open cell reachable, the open room
unchanged bit for bit, level ranges respected, and levelled recordings that replay."""

from __future__ import annotations

import hashlib

import gymnasium as gym
import numpy as np
import pytest

import rpg_env  # noqa: F401  (registers Treasurehunt-v0)
from rpg_base.cli import command_status
from rpg_env.envs.treasurehunt import TreasurehuntEnv
from rpg_env.envs.vector import TreasurehuntVectorEnv
from rpg_env.game.constants import vocabulary
from rpg_env.game.levels import DISTRIBUTION_MODES, MAX_LEVEL_SEED, held_out_levels, level_walls, reachable
from rpg_env.play.__main__ import build_parser, make_env
from rpg_env.record import main as record_main
from rpg_env.record import record
from rpg_env.replay import replay_streams
from rpg_env.trajectories.__main__ import info
from rpg_env.trajectories.maintenance import repair
from rpg_env.trajectories.reader import TrajectoryFile
from rpg_env.trajectories.recorders import HDF5Recorder, HDF5VectorRecorder

WALL = vocabulary().wall

# sha256 of ``level_walls(seed, 20, 20, mode).tobytes()``: a change of the generator, or of
# NumPy's integer streams, changes every level; it must show up here, not in a study's results.
PINNED_LAYOUTS = {
    (0, "easy"): "0ce413531410e53b2be54abbad3eb4f0b2c8c801890f4847197d9b6e5e03d83c",
    (1, "easy"): "6fffcdb6a5316a3b990eca6a7c16c8074a9a41624d095edd0e894c1d922c4ca9",
    (12345, "easy"): "6c97773360b045653f5d14de5e02f82a3c35b8a195f98ad0cb72f24b13d9b3d9",
    (0, "hard"): "9d9e50633e7888b64a8b72db194914862268cf719c2fe7523944c78374c4f2d5",
    (7, "hard"): "a2cff90cd093fcc97020059cb92660f43214edf7f64bb276006194795ed77cad",
}
# sha256 of `_episode_digest` for the default (open room) game, computed before levels existed.
PINNED_OPEN_ROOM = "dc4e3e7b1cb9f268365de52069dc4dea19b44dfbdc3270f5e96453a1189fdcc1"


def _digest(walls: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(walls).tobytes()).hexdigest()


def _episode_digest(**kwargs) -> str:
    """Two seeded single-env games and 150 steps of a 4-world vector env, hashed."""
    h = hashlib.sha256()
    env = TreasurehuntEnv(**kwargs)
    for seed in (0, 1):
        obs, info = env.reset(seed=seed)
        h.update(obs.tobytes() + info["positions"].tobytes())
        for t in range(env.params.max_turns):
            obs, reward, _, _, info = env.step((t * 7 + seed) % 4)
            h.update(obs.tobytes() + np.float64(reward).tobytes() + info["positions"].tobytes())
    venv = TreasurehuntVectorEnv(4, **kwargs)
    obs, _ = venv.reset(seed=3)
    for t in range(150):
        obs, rewards, _, _, _ = venv.step(np.arange(4) * t % 4)
        h.update(obs.tobytes() + rewards.tobytes() + venv.world.cells.tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------- the generator
@pytest.mark.parametrize("key", sorted(PINNED_LAYOUTS))
def test_a_level_is_a_function_of_its_seed_alone(key):
    seed, mode = key
    first = level_walls.__wrapped__(seed, 20, 20, mode)
    again = level_walls.__wrapped__(seed, 20, 20, mode)
    np.testing.assert_array_equal(first, again)
    assert _digest(first) == PINNED_LAYOUTS[key]
    assert not np.array_equal(first, level_walls.__wrapped__(seed + 1, 20, 20, mode))


@pytest.mark.parametrize("mode", DISTRIBUTION_MODES)
@pytest.mark.parametrize("shape", [(20, 20), (9, 13), (7, 7), (16, 31)])
def test_every_open_cell_is_reachable(mode, shape):
    for seed in range(200):
        walls = level_walls(seed, *shape, mode)
        assert walls.shape == shape and not walls.flags.writeable
        assert walls[[0, -1]].all() and walls[:, [0, -1]].all()
        open_cells = ~walls
        assert open_cells.sum() >= 9
        np.testing.assert_array_equal(reachable(walls), open_cells)


def test_levels_have_interior_walls_and_hard_is_denser():
    interior = {mode: np.array([level_walls(s, 20, 20, mode)[1:-1, 1:-1].mean() for s in range(100)])
                for mode in DISTRIBUTION_MODES}
    assert (interior["easy"] > 0.1).all()
    assert interior["hard"].mean() > interior["easy"].mean() + 0.1


# ---------------------------------------------------------------------------- the envs
def test_num_levels_zero_is_the_open_room_bit_for_bit():
    assert _episode_digest() == PINNED_OPEN_ROOM
    # start_level and distribution_mode mean nothing without levels: no draw, no wall.
    assert _episode_digest(num_levels=0, start_level=9, distribution_mode="hard") == PINNED_OPEN_ROOM
    assert TreasurehuntEnv(start_level=9).metadata["rules"] == TreasurehuntEnv().metadata["rules"]
    _, info = TreasurehuntEnv().reset(seed=0)
    assert info["level"] == -1


def _layouts(env: TreasurehuntEnv, resets: int) -> dict[int, bytes]:
    seen: dict[int, bytes] = {}
    env.reset(seed=0)
    for _ in range(resets):
        _, info = env.reset()
        walls = (env.world.grid[0] == WALL).tobytes()
        assert seen.setdefault(info["level"], walls) == walls  # one level, one layout
    return seen


@pytest.mark.parametrize("mode", DISTRIBUTION_MODES)
def test_an_env_only_plays_its_levels(mode):
    train = _layouts(TreasurehuntEnv(num_levels=5, start_level=10, distribution_mode=mode), 80)
    assert sorted(train) == [10, 11, 12, 13, 14]
    for level, walls in train.items():
        expected = level_walls(level, 20, 20, mode)
        assert walls == expected.tobytes()
    test = _layouts(TreasurehuntEnv(num_levels=5, start_level=1000, distribution_mode=mode), 80)
    assert sorted(test) == [1000, 1001, 1002, 1003, 1004]
    assert not set(train.values()) & set(test.values())


def test_held_out_levels_never_meet_the_training_levels():
    train, unseen = held_out_levels(200, 1_000_000, "hard", unseen=50)
    assert train == {"num_levels": 200, "start_level": 0, "distribution_mode": "hard"}
    assert unseen == {"num_levels": 50, "start_level": 1_000_000, "distribution_mode": "hard"}
    seen = _layouts(TreasurehuntEnv(**held_out_levels(3, 3, "easy", unseen=3)[1]), 40)
    assert sorted(seen) == [3, 4, 5]  # right after the training levels 0..2, none of them
    with pytest.raises(ValueError, match="199 lies inside the training levels 0..199; give a value >= 200"):
        held_out_levels(200, 199, "easy")
    with pytest.raises(ValueError, match=f"must be <= {MAX_LEVEL_SEED - 9}"):
        held_out_levels(200, MAX_LEVEL_SEED - 8, "easy", unseen=10)
    with pytest.raises(ValueError, match="distribution_mode"):
        held_out_levels(200, 1_000, "medium")


def test_levels_change_only_the_level_draw():
    """Agents start on open cells; items spawn only on open cells; a seed fixes the levels."""
    env = TreasurehuntEnv(num_levels=50, spawn_prob=1.0, num_agents=4, max_turns=3)
    levels = []
    for seed in range(30):
        _, info = env.reset(seed=seed)
        walls = level_walls(info["level"], 20, 20, "easy")
        rows, cols = info["positions"].T
        assert not walls[rows, cols].any()
        env.step(0)
        np.testing.assert_array_equal(env.world.grid[0] == WALL, walls)  # spawns fill only open cells
        levels.append(info["level"])
    again = [TreasurehuntEnv(num_levels=50).reset(seed=seed)[1]["level"] for seed in range(30)]
    assert levels == again and len(set(levels)) > 10


def test_vector_env_levels_and_autoreset():
    venv = gym.make_vec("Treasurehunt-v0", num_envs=6, num_levels=3, start_level=40,
                        distribution_mode="hard", max_turns=5)
    _, infos = venv.reset(seed=0)
    seen = set()
    for t in range(30):
        world = venv.unwrapped.world
        for i, level in enumerate(infos["level"]):
            assert 40 <= level < 43
            np.testing.assert_array_equal(world.grid[i] == WALL, level_walls(int(level), 20, 20, "hard"))
        seen.update(infos["level"].tolist())
        _, _, _, _, infos = venv.step(np.full(6, t % 4))
    assert seen == {40, 41, 42}


def test_bad_level_keywords_are_refused_by_the_vector_env_too():
    with pytest.raises(ValueError, match="distribution_mode must be one of 'easy', 'hard'"):
        gym.make_vec("Treasurehunt-v0", num_envs=2, num_levels=3, distribution_mode="Hard")
    with pytest.raises(ValueError, match="num_levels must be >= 0"):
        TreasurehuntVectorEnv(2, num_levels=-5)


# ---------------------------------------------------------------------------- play, record, replay
def test_play_options_make_a_levelled_env():
    env = make_env(build_parser().parse_args(["--num-levels", "200", "--distribution-mode", "hard"]))
    _, info = env.reset(seed=0)
    assert 0 <= info["level"] < 200 and env.unwrapped.params.distribution_mode == "hard"
    env.close()
    assert command_status(lambda argv: build_parser().parse_args(argv), ["--num-levels", "-1"]) == 2
    assert command_status(lambda argv: build_parser().parse_args(argv), ["--distribution-mode", "x"]) == 2


def test_a_levelled_recording_replays_with_its_levels(tmp_path):
    out = tmp_path / "levels.h5"
    record("greedy", out, 6, seed=5, num_envs=3, progress=False,
           env_kwargs={"num_levels": 4, "start_level": 70, "distribution_mode": "hard"})
    with TrajectoryFile(out) as tf:
        kwargs, n = tf.meta["env_kwargs"], len(tf.episodes)
        levels, games = tf.levels, tf.episodes["game_id"]
    assert (kwargs["num_levels"], kwargs["start_level"], kwargs["distribution_mode"]) == (4, 70, "hard")
    replayed = replay_streams(out, range(n))  # every view and reward checked bit for bit
    assert [replayed[e].level for e in range(n)] == levels.tolist()  # the file holds the levels
    assert set(levels.tolist()) <= {70, 71, 72, 73} and len(set(levels.tolist())) > 1
    for game in np.unique(games):  # a game's streams share its level
        assert len(set(levels[games == game].tolist())) == 1
    # Appending, and repair's copy, keep each stream's level.
    record("random", out, 3, seed=6, num_envs=3, progress=False,
           env_kwargs={"num_levels": 4, "start_level": 70, "distribution_mode": "hard"})
    repair(out, tmp_path / "copy.h5")
    with TrajectoryFile(out) as tf, TrajectoryFile(tmp_path / "copy.h5") as copy:
        assert tf.levels[:n].tolist() == levels.tolist() and len(tf.levels) == len(tf) > n
        assert copy.levels.tolist() == tf.levels.tolist()


@pytest.mark.parametrize("autoreset_mode", ["next_step", "same_step"])
def test_recorders_keep_the_level_of_every_game(tmp_path, autoreset_mode):
    venv = gym.make_vec("Treasurehunt-v0", num_envs=3, num_levels=20, max_turns=4,
                        autoreset_mode=autoreset_mode)
    shown = {}  # (world, game start in that world) -> level
    rec = HDF5VectorRecorder(venv, tmp_path / "v.h5", record_co_players=False)
    _, infos = rec.reset(seed=1)
    for _ in range(20):
        for w in np.flatnonzero(rec.episode_start):
            shown.setdefault(int(w), []).append(int(infos["level"][w]))
        _, _, _, _, infos = rec.step(np.zeros(3, dtype=np.int64))
    rec.close()
    with TrajectoryFile(tmp_path / "v.h5") as tf:
        for w in range(3):
            rows = np.flatnonzero(tf.episodes["env_index"] == w)
            assert len(rows) >= 3
            assert tf.levels[rows].tolist() == shown[w][: len(rows)]
    env = HDF5Recorder(TreasurehuntEnv(num_levels=9, max_turns=2), tmp_path / "s.h5")
    expected = []
    for seed in range(4):
        expected.append(env.reset(seed=seed)[1]["level"])
        env.step(0), env.step(1)
    env.close()
    with TrajectoryFile(tmp_path / "s.h5") as tf:
        assert tf.levels[tf.episodes["agent_id"] == 0].tolist() == expected


def test_open_room_files_have_no_levels_dataset(tmp_path):
    out = tmp_path / "open.h5"
    record("greedy", out, 2, num_envs=2, progress=False)
    with TrajectoryFile(out) as tf:
        assert "levels" not in tf._file and (tf.levels == -1).all() and len(tf.levels) == len(tf)


def test_record_cli_forwards_the_level_options(tmp_path):
    out = tmp_path / "cli.h5"
    assert record_main(["--policy", "random", "--episodes", "2", "--out", str(out), "--no-progress",
                        "--num-levels", "3", "--distribution-mode", "hard"]) == 0
    with TrajectoryFile(out) as tf:
        assert tf.meta["env_kwargs"]["num_levels"] == 3
        low, high = int(tf.levels.min()), int(tf.levels.max())
    assert 0 <= low <= high < 3 and f"..{high}" in info(str(out)).splitlines()[3]
    assert command_status(record_main, ["--policy", "random", "--episodes", "1", "--out",
                                        str(tmp_path / "bad.h5"), "--distribution-mode", "medium"]) == 2
    assert not (tmp_path / "bad.h5").exists()
