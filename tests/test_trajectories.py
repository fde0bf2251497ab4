"""Trajectory file format: writer/reader round trip, windows, splits, bad files, crash safety."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest

from rpg_base.cli import command_status
from rpg_env.trajectories.__main__ import main
from rpg_env.trajectories.format import (
    FLAG_COMMITTED,
    FLAG_TRUNCATED,
    SCHEMA_VERSION,
    EnvMismatchError,
    Stream,
    TrajectoryFormatError,
    UncleanFileError,
)
from rpg_env.trajectories.maintenance import repair, validate
from rpg_env.trajectories.reader import TrajectoryFile
from rpg_env.trajectories.splits import fewest_games, split_episodes
from rpg_env.trajectories.writer import TrajectoryWriter

C, V = 6, 5
META = {
    "env_id": "Treasurehunt-v0",
    "env_kwargs": {"height": 8, "width": 8, "vision_radius": 2, "max_turns": 9},
    "obs_shape": (C, V, V),
    "channel_names": ["empty", "wall", "gem", "bone", "food", "agent"],
    "action_names": ["up", "down", "left", "right"],
}


def make_stream(rng: np.random.Generator, length: int, agent: int = 0, policy: str = "p") -> Stream:
    codes = rng.integers(0, C, size=(length + 1, V, V))
    obs = (codes[:, None] == np.arange(C)[None, :, None, None]).astype(np.uint8)
    trunc = np.zeros(length, dtype=bool)
    trunc[-1] = True
    return Stream(obs=obs, actions=rng.integers(0, 4, size=length),
                  rewards=rng.normal(size=length).astype(np.float32),
                  terminated=np.zeros(length, dtype=bool), truncated=trunc, agent_id=agent,
                  policy_id=policy, seed=int(rng.integers(1000)))


def write_games(path: Path, games: list[list[Stream]], mode: str = "a", **kw) -> None:
    with TrajectoryWriter(path, META, mode=mode, **kw) as w:
        w.write_games(games)


@pytest.fixture()
def games() -> list[list[Stream]]:
    rng = np.random.default_rng(0)
    return [[make_stream(rng, int(rng.integers(3, 12)), agent=a, policy="learner" if a == 0 else "co")
             for a in range(2)] for _ in range(7)]


@pytest.fixture()
def written(tmp_path, games) -> Path:
    path = tmp_path / "t.h5"
    write_games(path, games[:4])
    write_games(path, games[4:])  # second session appends
    return path


def test_round_trip_episode_window_and_meta(written, games):
    streams = [s for g in games for s in g]
    with TrajectoryFile(written) as tf:
        assert len(tf) == len(streams) and tf.schema_version == SCHEMA_VERSION
        assert tf.meta["obs_shape"] == (C, V, V) and tf.meta["env_kwargs"] == META["env_kwargs"]
        assert tf.meta["channel_names"] == META["channel_names"] and "h5py" in tf.meta["versions"]
        assert tf.episodes["game_id"].tolist() == [g for g in range(7) for _ in range(2)]
        assert tf.episodes["policy_id"].tolist() == ["learner", "co"] * 7
        assert tf.episodes["run"].tolist() == [0] * 8 + [1] * 6 and len(tf.runs) == 2
        for i, s in enumerate(streams):
            e = tf.episode(i)
            np.testing.assert_array_equal(e["obs"], s.obs)
            assert e["obs"].dtype == np.uint8 and e["actions"].dtype == np.int64
            np.testing.assert_array_equal(e["actions"], s.actions)
            np.testing.assert_array_equal(e["rewards"], s.rewards)
            np.testing.assert_array_equal(e["truncated"], s.truncated)
            row = tf.episodes[i]
            assert row["length"] == s.length and row["seed"] == s.seed
            assert row["return"] == pytest.approx(float(s.rewards.astype(np.float64).sum()), abs=1e-9)
            assert row["flags"] == FLAG_COMMITTED | FLAG_TRUNCATED
        many = tf.read_episodes([5, 2, 3, 4, 13, 2])
        for i, e in zip([5, 2, 3, 4, 13, 2], many, strict=True):
            for key, value in tf.episode(i).items():
                np.testing.assert_array_equal(e[key], value)
        assert len(tf.read_episodes()) == len(tf) and tf.read_episodes([]) == []
        with pytest.raises(IndexError):
            tf.read_episodes([len(tf)])
        w = tf.window(3, 1, 2)
        np.testing.assert_array_equal(w["obs"], streams[3].obs[1:4])
        np.testing.assert_array_equal(w["actions"], streams[3].actions[1:3])
        np.testing.assert_array_equal(w["rewards"], streams[3].rewards[1:3])
    assert validate(written, deep=True) == []


def test_window_index_and_bounds(written, games):
    lengths = [s.length for g in games for s in g]
    with TrajectoryFile(written) as tf:
        k = 4
        idx = tf.window_index(k)
        assert idx.dtype == np.int64 and idx.shape == (sum(max(L - k + 1, 0) for L in lengths), 2)
        for ep, start in idx:
            assert 0 <= start <= lengths[ep] - k
        assert len({tuple(r) for r in idx.tolist()}) == len(idx)
        sub = tf.window_index(k, episodes=[1, 2])
        assert set(sub[:, 0].tolist()) <= {1, 2}
        assert len(tf.window_index(100)) == 0
        with pytest.raises(IndexError, match="does not fit"):
            tf.window(0, lengths[0] - 1, 2)
        with pytest.raises(IndexError, match="does not fit"):
            tf.window(0, -1, 2)
        with pytest.raises(IndexError, match="out of range"):
            tf.episode(len(tf))
        with pytest.raises(ValueError, match="k must be >= 1"):
            tf.window_index(0)
        with pytest.raises(IndexError):
            tf.window_index(2, episodes=[len(tf)])


def test_split_by_game_deterministic_and_stable(tmp_path, written):
    with TrajectoryFile(written) as tf:
        split = split_episodes(tf, (0.6, 0.2, 0.2), seed=3)
        again = split_episodes(tf, (0.6, 0.2, 0.2), seed=3)
        assert all(np.array_equal(split[k], again[k]) for k in split)
        allidx = np.concatenate(list(split.values()))
        assert sorted(allidx.tolist()) == list(range(len(tf)))
        games_of = {k: set(tf.episodes["game_id"][v].tolist()) for k, v in split.items()}
        assert not (games_of["train"] & games_of["val"]) and not (games_of["train"] & games_of["test"])
        counts = [len(games_of[k]) for k in ("train", "val", "test")]
        assert sum(counts) == 7
        assert all(abs(c - f * 7) < 1 for c, f in zip(counts, (0.6, 0.2, 0.2), strict=True))
        others = [split_episodes(tf, (0.6, 0.2, 0.2), seed=s)["train"] for s in range(4, 9)]
        assert any(not np.array_equal(o, split["train"]) for o in others)
        with pytest.raises(ValueError, match="summing to 1"):
            split_episodes(tf, (0.5, 0.2, 0.2))
        with pytest.raises(ValueError, match="non-negative"):
            split_episodes(tf, (1.2, -0.2, 0.0))
        stable_before = split_episodes(tf, seed=1, stable=True)
        before = {k: set(tf.episodes["game_id"][v].tolist()) for k, v in stable_before.items()}
    rng = np.random.default_rng(5)
    write_games(written, [[make_stream(rng, 4)] for _ in range(30)])
    with TrajectoryFile(written) as tf:
        after = split_episodes(tf, seed=1, stable=True)
        for k, v in after.items():  # old games keep their split when the file grows
            assert before[k] <= set(tf.episodes["game_id"][v].tolist())


@pytest.mark.parametrize(("fractions", "need"), [((0.8, 0.1, 0.1), 3), ((0.9, 0.1, 0.0), 2),
                                                 ((0.98, 0.01, 0.01), 3)])
def test_fewest_games_is_the_least_that_fills_the_train_and_validation_splits(fractions, need):
    assert fewest_games(fractions) == need
    for games in (need - 1, need):
        table = np.zeros(games, dtype=[("game_id", np.int64)])
        table["game_id"] = np.arange(games) * 7 + 3  # any ids: exact counts do not depend on them
        split = split_episodes(table, fractions)
        assert (len(split["train"]) > 0 and len(split["val"]) > 0) == (games == need)
    with pytest.raises(ValueError, match="validation share"):
        fewest_games((1.0, 0.0, 0.0))


def test_append_refuses_other_settings_and_keeps_file(written, games):
    digest = TrajectoryFile(written).digest()
    before = written.read_bytes()
    other = {**META, "env_kwargs": {**META["env_kwargs"], "max_turns": 50, "width": 9}}
    with pytest.raises(EnvMismatchError) as err:
        TrajectoryWriter(written, other)
    msg = str(err.value)
    assert str(written) in msg and "env_kwargs.max_turns" in msg and "env_kwargs.width" in msg
    assert "env_kwargs.height" not in msg
    with pytest.raises(EnvMismatchError, match="action_names"):
        TrajectoryWriter(written, {**META, "action_names": ["a", "b"]})
    assert written.read_bytes() == before
    with TrajectoryFile(written) as tf:
        assert tf.digest() == digest and len(tf.runs) == 2


def test_writer_rejects_bad_streams(tmp_path):
    rng = np.random.default_rng(1)
    with TrajectoryWriter(tmp_path / "b.h5", META) as w:
        s = make_stream(rng, 4)
        s.obs = s.obs[:-1]  # forgot the observation after the last step
        with pytest.raises(ValueError, match="one more row than steps"):
            w.write_game([s])
        s = make_stream(rng, 4)
        s.actions = np.array([0, 1, 7, 2])
        with pytest.raises(ValueError, match="0..3"):
            w.write_game([s])
        with pytest.raises(ValueError, match="policy_id"):
            w.write_game([make_stream(rng, 3, policy="x" * 300)])
        assert w.num_episodes == 0
    with pytest.raises(ValueError, match="missing"):
        TrajectoryWriter(tmp_path / "c.h5", {"env_id": "x"})
    with pytest.raises(FileExistsError):
        TrajectoryWriter(tmp_path / "b.h5", META, mode="x")


def test_copy_from_fills_a_new_file_in_batches(tmp_path, written):
    copy = tmp_path / "copy.h5"
    with TrajectoryFile(written) as tf, TrajectoryWriter(copy, META, mode="w", run_info={"note": "c"}) as w:
        batches: list[int] = []
        assert w.copy_from(tf, batch_streams=4, on_batch=batches.append) == len(tf) == 14
        assert batches == [4, 4, 4, 2] and w.num_games == 7 and w.num_steps == tf.num_steps
        assert w.run == len(tf.runs)  # the source's sessions first, this one after them
        with pytest.raises(ValueError, match="fills a new file"):
            w.copy_from(tf)
        w.write_game([make_stream(np.random.default_rng(2), 3)])
        original = tf.raw_episodes()
    with TrajectoryFile(copy) as c:
        np.testing.assert_array_equal(c.raw_episodes(0, len(original)), original)
        np.testing.assert_array_equal(c.read_dataset("obs", 0, 10), TrajectoryFile(written).read_dataset(
            "obs", 0, 10))
        assert c.runs[-1]["note"] == "c" and c.episodes["run"][-1] == 2 and c.episodes["game_id"][-1] == 7
    other = {**META, "env_kwargs": {**META["env_kwargs"], "max_turns": 5}}
    with TrajectoryFile(written) as tf, TrajectoryWriter(tmp_path / "o.h5", other) as w:
        with pytest.raises(EnvMismatchError, match="max_turns"):
            w.copy_from(tf)
        with pytest.raises(KeyError, match="episodes"):
            tf.read_dataset("episodes", 0, 1)


def test_bad_files_get_clear_errors(tmp_path, written):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not hdf5 at all" * 100)
    with pytest.raises(TrajectoryFormatError, match="not an HDF5 file") as err:
        TrajectoryFile(junk)
    assert str(junk) in str(err.value)
    empty = tmp_path / "empty.h5"
    empty.write_bytes(b"")
    with pytest.raises(TrajectoryFormatError, match="empty"):
        TrajectoryFile(empty)
    with pytest.raises(FileNotFoundError):
        TrajectoryFile(tmp_path / "missing.h5")

    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(TrajectoryFormatError, match="not an rpg_env trajectory file") as err:
        TrajectoryFile(foreign)
    assert str(foreign) in str(err.value)
    foreign_bytes = foreign.read_bytes()
    with pytest.raises(TrajectoryFormatError, match="not an rpg_env trajectory file"):
        TrajectoryWriter(foreign, META)  # appending to a foreign file is refused too
    assert foreign.read_bytes() == foreign_bytes

    newer = tmp_path / "newer.h5"
    newer.write_bytes(written.read_bytes())
    with h5py.File(newer, "r+") as f:
        f.attrs["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(TrajectoryFormatError, match="newer than this rpg_env supports") as err:
        TrajectoryFile(newer)
    assert str(newer) in str(err.value)

    data = written.read_bytes()
    for keep in (len(data) - 100, len(data) // 2, 200):
        cut = tmp_path / f"cut{keep}.h5"
        cut.write_bytes(data[:keep])
        with pytest.raises(TrajectoryFormatError, match="truncated") as err:
            TrajectoryFile(cut)
        assert str(cut) in str(err.value)


def test_pickle_reopens_by_path(written):
    with TrajectoryFile(written) as tf:
        clone = pickle.loads(pickle.dumps(tf))
        np.testing.assert_array_equal(clone.episode(2)["obs"], tf.episode(2)["obs"])
        clone.close()


def test_package_does_not_import_the_game():
    code = ("import sys, rpg_env.trajectories.reader, rpg_env.trajectories.recorders, "
            "rpg_env.trajectories.maintenance, rpg_env.trajectories.splits; "
            "game = ('rpg_env.game', 'rpg_env.envs.treasurehunt', 'rpg_env.envs.vector', 'rpg_env.policies', "
            "'rpg_env.render', 'torch');"
            "bad = [m for m in sys.modules if m.startswith(game)];"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_info_validate_repair(tmp_path, written, capsys):
    assert main(["info", str(written)]) == 0
    assert "learner" in capsys.readouterr().out
    assert main(["validate", "--deep", str(written)]) == 0
    assert command_status(main, ["repair", str(written), str(written)]) == 2
    assert capsys.readouterr().err.startswith("error: repair writes a new file")
    fixed = tmp_path / "fixed.h5"
    assert main(["repair", str(written), str(fixed)]) == 0
    assert command_status(main, ["repair", str(written), str(fixed)]) == 2
    assert "exists" in capsys.readouterr().err
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"x" * 64)
    assert command_status(main, ["validate", str(junk)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not an HDF5 file" in err and err.count("\n") == 1


def test_cli_exit_status_as_a_module(tmp_path, written):
    run = [sys.executable, "-m", "rpg_env.trajectories"]
    with h5py.File(written, "r+") as f:  # an uncommitted row: a problem validate reports
        table = f["episodes"]
        table.resize((table.shape[0] + 1,))
    proc = subprocess.run([*run, "validate", str(written)], capture_output=True, text=True)
    assert proc.returncode == 1 and "table rows after the committed ones" in proc.stdout
    proc = subprocess.run([*run, "info", str(tmp_path / "missing.h5")], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1


# --------------------------------------------------------------------------- crash safety
CHILD = textwrap.dedent("""
    import sys, time, h5py, numpy as np
    sys.path.insert(0, {tests!r})
    from test_trajectories import META, make_stream
    from rpg_env.trajectories.writer import TrajectoryWriter
    stop_after = int(sys.argv[2])
    original = h5py.Dataset.resize
    calls = {{"n": 0}}
    def resize(self, size, axis=None):
        # Freeze right before the table row of game `stop_after` is appended: its step data is
        # already written and flushed, its commit record is not.
        if self.name == "/episodes" and np.atleast_1d(size)[0] > self.shape[0]:
            calls["n"] += 1
            if calls["n"] == stop_after + 1:
                print("partial", flush=True)
                time.sleep(1000)
        return original(self, size, axis)
    h5py.Dataset.resize = resize
    rng = np.random.default_rng(0)
    with TrajectoryWriter(sys.argv[1], META) as w:
        while True:
            w.write_game([make_stream(rng, 6, agent=a) for a in range(2)])
""")


def test_sigkill_between_step_data_and_commit(tmp_path):
    path = tmp_path / "killed.h5"
    stop_after = 3
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=str(Path(__file__).parent)))
    child = subprocess.Popen([sys.executable, str(script), str(path), str(stop_after)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "partial"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    rng = np.random.default_rng(0)
    expected = [make_stream(rng, 6, agent=a) for _ in range(stop_after + 1) for a in range(2)]
    with TrajectoryFile(path) as tf:
        assert len(tf) == 2 * stop_after  # the partial game is not mixed in
        for i in range(len(tf)):
            np.testing.assert_array_equal(tf.episode(i)["obs"], expected[i].obs)
            np.testing.assert_array_equal(tf.episode(i)["actions"], expected[i].actions)
        # its step data is in the file but past the committed episodes
        assert tf.uncommitted_steps == 6 * 2 and tf.uncommitted_rows == 0
    problems = validate(path)
    assert any("not closed by its writer" in p for p in problems)
    assert any("after the last committed episode" in p for p in problems)
    before = path.read_bytes()
    with pytest.raises(UncleanFileError, match="repair"):
        TrajectoryWriter(path, META)
    fixed = tmp_path / "fixed.h5"
    assert repair(path, fixed) == 2 * stop_after
    assert path.read_bytes() == before  # the original is never touched
    with pytest.raises(FileExistsError):
        repair(path, fixed)
    more = [make_stream(np.random.default_rng(9), 5, agent=a) for a in range(2)]
    write_games(fixed, [more])
    with TrajectoryFile(fixed) as tf:
        assert len(tf) == 2 * stop_after + 2
        assert tf.episodes["game_id"].tolist()[-2:] == [stop_after, stop_after]
        np.testing.assert_array_equal(tf.episode(len(tf) - 1)["obs"], more[1].obs)
        np.testing.assert_array_equal(tf.episode(0)["obs"], expected[0].obs)
        assert "repaired_from" in json.dumps(tf.runs)
    assert validate(fixed, deep=True) == []
