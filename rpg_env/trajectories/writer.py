"""`TrajectoryWriter`: appends complete games to a trajectory file, one crash-safe commit each.

A commit writes and flushes the streams' step data first and their ``/episodes`` rows (with
`FLAG_COMMITTED`) after it, so a writer killed in between leaves only unreferenced step data
that readers ignore and the next writer overwrites. Files are written in SWMR mode (single
writer, multiple readers): they stay readable while being recorded and after the writer is
killed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from rpg_base.provenance import json_ready, package_versions, provenance
from rpg_env.trajectories.format import (
    DEFAULT_COMPRESSION_LEVEL,
    DEFAULT_OBS_CHUNK_ROWS,
    DEFAULT_STEP_CHUNK,
    EPISODE_DTYPE,
    FLAG_COMMITTED,
    FLAG_INTERRUPTED,
    FLAG_TERMINATED,
    FLAG_TRUNCATED,
    FORMAT_NAME,
    LEVELS_DATASET,
    REQUIRED_META,
    SCHEMA_VERSION,
    STEP_DATASETS,
    EnvMismatchError,
    Stream,
    TrajectoryFormatError,
    check_container,
    committed_count,
    data_ends,
    encode_policy_id,
    meta_differences,
    open_h5,
    read_meta,
)

if TYPE_CHECKING:
    from rpg_env.trajectories.reader import TrajectoryFile


class TrajectoryWriter:
    """Appends complete games to a trajectory file, one crash-safe commit per `write_games` call.

    Args:
        path: the ``.h5`` file.
        meta: ``env_id`` (str), ``env_kwargs`` (JSON-ready dict), ``obs_shape`` ``(C, V, V)``,
            ``channel_names`` (C names), ``action_names``; optional ``versions`` (dict).
        mode: ``"a"`` append to the file or create it, ``"w"`` replace it, ``"x"`` create and
            fail if it exists. Appending checks that ``meta`` matches the file (`EnvMismatchError`
            naming the differing keys) and refuses files whose writer died (`UncleanFileError`).
        run_info: JSON-ready provenance of this writing session (seed, command, policy...),
            stored as one row of ``/runs``; every stream written gets that row's index.
        compression_level: gzip level 0-9 of the step datasets (0: uncompressed).
        obs_chunk_rows / step_chunk: chunk lengths of ``/obs`` and of the per-step datasets.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        meta: Mapping[str, Any],
        *,
        mode: str = "a",
        run_info: Mapping[str, Any] | None = None,
        compression_level: int = DEFAULT_COMPRESSION_LEVEL,
        obs_chunk_rows: int = DEFAULT_OBS_CHUNK_ROWS,
        step_chunk: int = DEFAULT_STEP_CHUNK,
    ) -> None:
        if mode not in ("a", "w", "x"):
            raise ValueError(f"mode must be 'a' (append or create), 'w' (replace) or 'x' (create new), "
                             f"got {mode!r}")
        self.meta = _checked_meta(meta)
        if not 0 <= int(compression_level) <= 9:
            raise ValueError(f"compression_level must be in 0..9, got {compression_level}")
        self.path = Path(path)
        self.num_actions = len(self.meta["action_names"])
        exists = self.path.exists()
        if mode == "x" and exists:
            raise FileExistsError(f"{self.path} exists; choose another path or append with mode='a'")
        if mode == "a" and exists:
            check_container(self.path, for_writing=True)
            # Refuse foreign or mismatched files from a read-only open, so they are never
            # opened for writing at all.
            with open_h5(self.path, "r") as probe:
                self._check_compatible(probe)
            self._file = open_h5(self.path, "r+", libver="latest")
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open_h5(self.path, "w", libver="latest")
        try:
            if mode != "a" or not exists:
                self._create(compression_level, obs_chunk_rows, step_chunk)
            self._attach(run_info)
        except BaseException:
            self._file.close()
            raise
        # SWMR from here on: readers may open the file while we append, and a killed writer
        # leaves a file whose committed part stays readable.
        self._file.swmr_mode = True
        self._closed = False

    # ----------------------------------------------------------------- setup
    def _create(self, level: int, obs_rows: int, step_chunk: int) -> None:
        f, meta = self._file, self.meta
        f.attrs["format"] = FORMAT_NAME
        f.attrs["schema_version"] = SCHEMA_VERSION
        f.attrs["env_id"] = str(meta["env_id"])
        f.attrs["env_kwargs"] = json.dumps(meta["env_kwargs"], sort_keys=True)
        f.attrs["channel_names"] = json.dumps(list(meta["channel_names"]))
        f.attrs["action_names"] = json.dumps(list(meta["action_names"]))
        f.attrs["obs_shape"] = np.asarray(meta["obs_shape"], dtype=np.int64)
        f.attrs["versions"] = json.dumps(meta.get("versions") or package_versions(), sort_keys=True)
        f.attrs["created"] = meta.get("created") or datetime.now(UTC).isoformat(
            timespec="seconds")
        gzip = {"compression": "gzip", "compression_opts": int(level)} if level else {}
        f.create_dataset("episodes", (0,), maxshape=(None,), dtype=EPISODE_DTYPE, chunks=(256,))
        f.create_dataset("obs", (0, *meta["obs_shape"]), maxshape=(None, *meta["obs_shape"]),
                         dtype=np.uint8, chunks=(int(obs_rows), *meta["obs_shape"]), **gzip)
        for name, dtype in STEP_DATASETS.items():
            # Byte-shuffling groups the float32 exponent bytes, which compress far better.
            f.create_dataset(name, (0,), maxshape=(None,), dtype=dtype, chunks=(int(step_chunk),),
                             shuffle=bool(level) and dtype.itemsize > 1, **gzip)
        f.create_dataset("runs", (0,), maxshape=(None,), dtype=h5py.string_dtype(), chunks=(64,))
        if meta["env_kwargs"].get("num_levels"):
            f.create_dataset(LEVELS_DATASET, (0,), maxshape=(None,), dtype=np.int64, chunks=(256,))

    def _check_compatible(self, f: h5py.File) -> None:
        diffs = meta_differences(read_meta(f, self.path), self.meta)
        if diffs:
            raise EnvMismatchError(
                f"cannot append to {self.path}: it was recorded with other settings: "
                f"{'; '.join(diffs)}. Record into a new file, or use the file's settings")

    def _attach(self, run_info: Mapping[str, Any] | None) -> None:
        f = self._file
        self._check_compatible(f)
        rows = f["episodes"][()]
        self._rows = committed_count(rows)
        committed = rows[:self._rows]
        self._step_end, self._obs_end = data_ends(committed)
        self._next_game = int(committed["game_id"].max()) + 1 if len(committed) else 0
        info = json_ready(dict(run_info or {}))
        self._run_record = json.dumps({**provenance(seed=info.pop("seed", None)), **info}, sort_keys=True)
        runs = f["runs"]
        self.run = runs.shape[0]
        runs.resize((self.run + 1,))
        runs[self.run] = self._run_record
        # Anything past the committed rows (a game cut off by an exception) is overwritten.
        f["episodes"].resize((self._rows,))
        if LEVELS_DATASET in f:
            f[LEVELS_DATASET].resize((self._rows,))
        f.flush()

    # ----------------------------------------------------------------- state
    @property
    def num_episodes(self) -> int:
        """Committed streams in the file."""
        return self._rows

    @property
    def num_steps(self) -> int:
        """Committed steps over all streams in the file."""
        return self._step_end

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def num_games(self) -> int:
        """The game id the next committed game gets (one more than the largest so far)."""
        return self._next_game

    # ----------------------------------------------------------------- writing
    def write_game(self, streams: Sequence[Stream]) -> int:
        """Commit one game (its streams share a new game id); returns the game id."""
        return self.write_games([streams])[0]

    def write_games(self, games: Sequence[Sequence[Stream]]) -> list[int]:
        """Commit several games at once; returns their game ids (consecutive)."""
        self._check_open()
        games = [list(g) for g in games if len(g)]
        if not games:
            return []
        arrays = [[self._check_stream(s) for s in game] for game in games]
        flat = [a for game in arrays for a in game]
        self._write_data({name: np.concatenate([a[name] for a in flat]) for name in STEP_DATASETS},
                         np.concatenate([a["obs"] for a in flat]))
        rows = np.zeros(len(flat), dtype=EPISODE_DTYPE)
        game_ids, step, ob, r = [], self._step_end, self._obs_end, 0
        for game, game_arrays in zip(games, arrays, strict=True):
            gid = self._next_game + len(game_ids)
            game_ids.append(gid)
            for stream, a in zip(game, game_arrays, strict=True):
                length = len(a["actions"])
                rows[r] = (gid, stream.agent_id, encode_policy_id(stream.policy_id), stream.seed,
                           stream.reset_count, stream.env_index, self.run, length,
                           float(a["rewards"].astype(np.float64).sum()), step, ob, _flags(a, stream))
                step += length
                ob += length + 1
                r += 1
        self._commit_rows(rows, step, ob, np.array([s.level for game in games for s in game]))
        self._next_game += len(game_ids)
        return game_ids

    def copy_from(self, source: TrajectoryFile, *, batch_streams: int = 512,
                  on_batch: Callable[[int], None] | None = None) -> int:
        """Fill this newly created file with every committed stream of ``source``; returns
        their number.

        The copy keeps each stream's table row (game id, policy id, ``run``...) and the source's
        ``/runs`` records, which come first; this session's record moves after them. Reads and
        commits ``batch_streams`` streams at a time, so memory stays bounded, and calls
        ``on_batch(number of streams)`` after each batch. ``source`` must have this writer's
        settings (`EnvMismatchError`) and store its streams back to back in table order
        (`TrajectoryFormatError`).
        """
        self._check_open()
        if self._rows or self.run:
            raise ValueError(f"{self.path}: copy_from fills a new file; this one already has "
                             f"{self._rows} streams and {self.run} earlier runs")
        if int(batch_streams) < 1:
            raise ValueError(f"batch_streams must be >= 1, got {batch_streams}")
        diffs = meta_differences(source.meta, self.meta)
        if diffs:
            raise EnvMismatchError(f"cannot copy {source.path} into {self.path}: other settings: "
                                   f"{'; '.join(diffs)}")
        self._adopt_runs(source.runs)
        for a in range(0, len(source), int(batch_streams)):
            rows = source.raw_episodes(a, a + int(batch_streams))
            (s0, s1), (o0, o1) = _contiguous_extents(rows, source.path)
            self._write_data({name: source.read_dataset(name, s0, s1) for name in STEP_DATASETS},
                             source.read_dataset("obs", o0, o1))
            rows["step_start"] += self._step_end - s0
            rows["obs_start"] += self._obs_end - o0
            self._commit_rows(rows, self._step_end + s1 - s0, self._obs_end + o1 - o0,
                              source.levels[a : a + len(rows)])
            self._next_game = max(self._next_game, int(rows["game_id"].max()) + 1)
            if on_batch is not None:
                on_batch(len(rows))
        return self._rows

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.path}: the writer is closed")

    def _adopt_runs(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Put ``records`` at the start of ``/runs`` and this session's record after them."""
        runs, n = self._file["runs"], len(records)
        runs.resize((n + 1,))
        runs[:n] = [json.dumps(r, sort_keys=True) for r in records]
        runs[n] = self._run_record
        self.run = n
        self._file.flush()

    def _write_data(self, steps: Mapping[str, np.ndarray], obs: np.ndarray) -> None:
        """Write step rows ``steps[name]`` ``(S,)`` and view rows ``obs`` ``(O, C, V, V)`` after
        the committed data, and flush; the table rows that commit them come after."""
        f, s0, o0 = self._file, self._step_end, self._obs_end
        for name in STEP_DATASETS:
            ds, values = f[name], steps[name]
            if ds.shape[0] < s0 + len(values):
                ds.resize((s0 + len(values),))
            ds[s0:s0 + len(values)] = values
        ds = f["obs"]
        if ds.shape[0] < o0 + len(obs):
            ds.resize((o0 + len(obs), *ds.shape[1:]))
        ds[o0:o0 + len(obs)] = obs
        f.flush()

    def _commit_rows(self, rows: np.ndarray, step_end: int, obs_end: int, levels: np.ndarray) -> None:
        """Append the commit records ``rows`` of data already written by `_write_data`, which
        now ends at ``step_end`` / ``obs_end``, and flush. ``levels`` ``(len(rows),)`` go to
        ``/levels`` first, in files that have it."""
        if LEVELS_DATASET in self._file:
            ds = self._file[LEVELS_DATASET]
            ds.resize((self._rows + len(rows),))
            ds[self._rows:] = levels
            self._file.flush()
        table = self._file["episodes"]
        table.resize((self._rows + len(rows),))
        table[self._rows:] = rows
        self._file.flush()
        self._rows += len(rows)
        self._step_end, self._obs_end = step_end, obs_end

    def _check_stream(self, s: Stream) -> dict[str, np.ndarray]:
        """The stream's arrays in the stored dtypes; ValueError naming what is malformed."""
        length = len(s.actions)
        obs = np.asarray(s.obs)
        if obs.shape != (length + 1, *self.meta["obs_shape"]):
            raise ValueError(f"stream of agent {s.agent_id} has {length} actions, so obs must have "
                             f"shape {(length + 1, *self.meta['obs_shape'])} (one more row than "
                             f"steps), got {obs.shape}")
        if obs.dtype != np.uint8:
            if obs.dtype.kind not in "biu" or (obs.size and obs.max() > 255):
                raise ValueError(f"obs must be uint8 one-hot views, got dtype {obs.dtype}")
            obs = obs.astype(np.uint8)
        actions = np.asarray(s.actions)
        if actions.dtype.kind not in "iu":
            raise ValueError(f"actions must be integers, got dtype {actions.dtype}")
        if length and (actions.min() < 0 or actions.max() >= self.num_actions):
            raise ValueError(f"actions must be in 0..{self.num_actions - 1}, got values "
                             f"{np.unique(actions[(actions < 0) | (actions >= self.num_actions)])[:8]}")
        out = {"obs": obs, "actions": actions.astype(np.uint8)}
        for name, dtype in (("rewards", np.float32), ("terminated", bool), ("truncated", bool)):
            arr = np.asarray(getattr(s, name))
            if arr.shape != (length,):
                raise ValueError(f"{name} must have shape ({length},) like actions, got {arr.shape}")
            out[name] = arr.astype(dtype)
        if length == 0:
            raise ValueError(f"stream of agent {s.agent_id} has no steps; only episodes with at least "
                             f"one step are recorded")
        encode_policy_id(s.policy_id)
        return out

    # ----------------------------------------------------------------- lifecycle
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        f = self._file
        # Drop any uncommitted tail so a cleanly closed file has no unreferenced bytes.
        for name in STEP_DATASETS:
            if f[name].shape[0] > self._step_end:
                f[name].resize((self._step_end,))
        if f["obs"].shape[0] > self._obs_end:
            f["obs"].resize((self._obs_end, *f["obs"].shape[1:]))
        f.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _checked_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``meta`` made JSON-ready, after checking it has what a file needs."""
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise ValueError(f"meta is missing {missing}; required: {list(REQUIRED_META)}")
    out = json_ready(dict(meta))
    out["obs_shape"] = tuple(int(x) for x in meta["obs_shape"])
    if len(out["action_names"]) > 256:
        raise ValueError("actions are stored as uint8: at most 256 actions are supported")
    if len(out["channel_names"]) != out["obs_shape"][0]:
        raise ValueError(f"{len(out['channel_names'])} channel_names for obs_shape "
                         f"{out['obs_shape']}: give one name per channel")
    return out


def _flags(arrays: Mapping[str, np.ndarray], stream: Stream) -> int:
    """The ``flags`` of a committed stream: how its last step ended, and whether it was cut short."""
    flags = FLAG_COMMITTED
    if arrays["terminated"][-1]:
        flags |= FLAG_TERMINATED
    if arrays["truncated"][-1]:
        flags |= FLAG_TRUNCATED
    if stream.interrupted:
        flags |= FLAG_INTERRUPTED
    return flags


def _contiguous_extents(rows: np.ndarray, path: Path) -> tuple[tuple[int, int], tuple[int, int]]:
    """((first, end) step rows, (first, end) ``/obs`` rows) of table ``rows`` stored back to back;
    `TrajectoryFormatError` when they are not."""
    s0, s1 = int(rows["step_start"][0]), int(rows["step_start"][-1] + rows["length"][-1])
    o0, o1 = int(rows["obs_start"][0]), int(rows["obs_start"][-1] + rows["length"][-1] + 1)
    steps = int(rows["length"].sum())
    if s1 - s0 != steps or o1 - o0 != steps + len(rows):
        raise TrajectoryFormatError(f"{path}: episode data is not contiguous; cannot copy it")
    return (s0, s1), (o0, o1)
