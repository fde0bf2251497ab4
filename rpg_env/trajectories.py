"""Trajectory files: the HDF5 schema shared by `rpg_env` (writer) and `rpg_worldmodel` (reader).

Game-free on purpose: this module needs only NumPy, h5py and the standard library, so a
trainer can read trajectories without importing the environment. The layout is documented
in ``docs/trajectory-format.md``; the short version (schema version 1):

- ``/episodes``: one row per *stream* (one agent's view of one game), dtype `EPISODE_DTYPE`.
  A row is the commit record of its stream: step data is written and flushed first, the row
  after it. Readers trust only rows whose ``flags`` carry `FLAG_COMMITTED`.
- ``/obs``: ``(sum(L + 1), C, V, V)`` uint8 one-hot views; a stream of ``L`` steps owns
  ``L + 1`` rows starting at its ``obs_start`` (row ``t + 1`` is the view after step ``t``).
- ``/actions`` ``(S,)`` uint8, ``/rewards`` ``(S,)`` float32, ``/terminated`` and
  ``/truncated`` ``(S,)`` bool: per step, a stream's ``L`` rows start at its ``step_start``.
- ``/runs``: one JSON provenance record per writing session (seed, command, versions).

All step datasets are chunked, resizable and gzip-compressed. Files are written in SWMR
mode (single writer, multiple readers), so they stay readable while being recorded and after
the writer is killed; see `repair` for appending to a file whose writer died.

Command line: ``python -m rpg_env.trajectories {info,validate,repair} ...``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from rpg_env.errors import InputError

FORMAT_NAME = "rpg_env.trajectories"
SCHEMA_VERSION = 1
POLICY_ID_BYTES = 128

#: Bits of ``/episodes["flags"]``.
FLAG_TERMINATED = 1  # the last step ended the episode by termination
FLAG_TRUNCATED = 2  # the last step ended the episode by truncation (time limit)
FLAG_INTERRUPTED = 4  # cut short by reset()/close() before the env ended it (kept on request)
FLAG_COMMITTED = 128  # the row and all its step data are completely written

EPISODE_DTYPE = np.dtype([
    ("game_id", "<i8"),  # streams of one game share it; unique and increasing within a file
    ("agent_id", "<i2"),  # 0 = learner, k >= 1 = co-player k
    ("policy_id", f"S{POLICY_ID_BYTES}"),  # UTF-8, NUL-padded
    ("seed", "<i8"),  # seed of the reset that began this env's random stream, -1 if unknown
    ("reset_count", "<i8"),  # resets of this world since that seeded reset (0: the seeded one)
    ("env_index", "<i4"),  # world index in a vector env, 0 for a single env
    ("run", "<i4"),  # index into /runs: the writing session that recorded the stream
    ("length", "<i8"),  # L, number of steps
    ("return", "<f8"),  # sum of the stream's float32 rewards, in float64
    ("step_start", "<i8"),  # first row in /actions, /rewards, /terminated, /truncated
    ("obs_start", "<i8"),  # first of the L + 1 rows in /obs
    ("flags", "u1"),  # FLAG_* bits
])
#: ``TrajectoryFile.episodes`` dtype: `EPISODE_DTYPE` with ``policy_id`` decoded to ``str``.
EPISODE_TABLE_DTYPE = np.dtype([(name, f"<U{POLICY_ID_BYTES}" if name == "policy_id" else dt)
                                for name, (dt, _) in EPISODE_DTYPE.fields.items()])

STEP_DATASETS: dict[str, np.dtype] = {
    "actions": np.dtype("u1"),
    "rewards": np.dtype("<f4"),
    "terminated": np.dtype(bool),
    "truncated": np.dtype(bool),
}
#: Settings that must match for episodes to share a file.
COMPATIBILITY_KEYS = ("env_id", "env_kwargs", "obs_shape", "channel_names", "action_names")
REQUIRED_META = COMPATIBILITY_KEYS

DEFAULT_OBS_CHUNK_ROWS = 32  # 32 x 486 B = 15.5 KiB: a random 8-step window touches 1-2 chunks
DEFAULT_STEP_CHUNK = 4096
DEFAULT_COMPRESSION_LEVEL = 4


class TrajectoryFormatError(InputError):
    """A file is not a (readable, writable or compatible) trajectory file; the message says why."""


class EnvMismatchError(TrajectoryFormatError):
    """Appending episodes recorded with other env settings than the file's."""


class UncleanFileError(TrajectoryFormatError):
    """The file's writer did not close it (killed, or still running): read-only until repaired."""


# --------------------------------------------------------------------------- in-memory stream
@dataclass
class Stream:
    """One agent's complete episode, ready to be written.

    Shapes: ``obs`` ``(L + 1, C, V, V)`` uint8 (row ``t + 1`` follows step ``t``), ``actions``
    ``(L,)`` int, ``rewards`` ``(L,)`` float, ``terminated``/``truncated`` ``(L,)`` bool.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    agent_id: int = 0
    policy_id: str = "unknown"
    seed: int = -1
    reset_count: int = 0
    env_index: int = 0
    interrupted: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def length(self) -> int:
        return len(self.actions)


def encode_policy_id(policy_id: str) -> bytes:
    """``policy_id`` as the fixed-length bytes stored in the table; raises if it does not fit."""
    if not isinstance(policy_id, str) or not policy_id:
        raise ValueError(f"policy_id must be a non-empty str, got {policy_id!r}")
    raw = policy_id.encode("utf-8")
    if len(raw) > POLICY_ID_BYTES or b"\0" in raw:
        raise ValueError(f"policy_id {policy_id!r} is {len(raw)} bytes (UTF-8); use at most "
                         f"{POLICY_ID_BYTES} bytes and no NUL characters")
    return raw


def decode_policy_ids(values: np.ndarray) -> np.ndarray:
    """Stored fixed-length bytes -> ``str`` array (no-op for an already decoded array)."""
    values = np.asarray(values)
    if values.dtype.kind == "U":
        return values
    return np.char.decode(values, "utf-8").astype(f"<U{POLICY_ID_BYTES}")


# --------------------------------------------------------------------------- file checks
def _superblock(path: Path) -> tuple[int | None, int | None]:
    """(file consistency flags, stored end-of-file address) of a v2/v3 superblock at offset 0."""
    with open(path, "rb") as fh:
        head = fh.read(48)
    if len(head) < 12 or not head.startswith(b"\x89HDF\r\n\x1a\n") or head[8] not in (2, 3):
        return None, None
    size_of_offsets = head[9]
    flags = head[11]
    eof_at = 12 + 2 * size_of_offsets
    if len(head) < eof_at + size_of_offsets:
        return flags, None
    return flags, int.from_bytes(head[eof_at:eof_at + size_of_offsets], "little")


def _check_container(path: Path, *, for_writing: bool) -> None:
    """Raise a clear `TrajectoryFormatError` for non-HDF5, truncated or unclean files."""
    if not path.exists():
        raise FileNotFoundError(f"trajectory file {path} does not exist")
    if path.is_dir():
        raise TrajectoryFormatError(f"{path} is a directory, not a trajectory file")
    if path.stat().st_size == 0:
        raise TrajectoryFormatError(f"{path} is empty (0 bytes): not a trajectory file")
    if not h5py.is_hdf5(path):
        raise TrajectoryFormatError(
            f"{path} is not an HDF5 file (no HDF5 signature): trajectory files are written by "
            f"rpg_env.recorder / `python -m rpg_env.record`")
    flags, stored_eof = _superblock(path)
    size = path.stat().st_size
    if flags == 0 and stored_eof is not None and size < stored_eof:
        raise TrajectoryFormatError(
            f"{path} is truncated: it has {size} bytes but its HDF5 superblock says {stored_eof}; "
            f"the copy or download was cut short, fetch the file again")
    if for_writing and flags:
        raise UncleanFileError(
            f"{path} was not closed by its writer (flags {flags:#x}): either a process is recording "
            f"into it right now, or the recording process was killed. Its committed episodes are "
            f"readable (TrajectoryFile opens it). To append, first copy the committed episodes into "
            f"a fresh file: `python -m rpg_env.trajectories repair {path} NEW_FILE` (the original is "
            f"left untouched), then record into NEW_FILE")


def _open_h5(path: Path, mode: str, **kwargs) -> h5py.File:
    try:
        return h5py.File(path, mode, **kwargs)
    except OSError as err:
        text = str(err)
        if "already open for write" in text:
            raise UncleanFileError(
                f"{path} is open for writing by another process or its writer was killed "
                f"({text}); if no process is recording into it, run "
                f"`python -m rpg_env.trajectories repair {path} NEW_FILE` and append to NEW_FILE"
            ) from err
        if "lock" in text.lower():
            raise TrajectoryFormatError(f"{path} is locked by another process that writes it "
                                        f"({text}); wait for it to finish") from err
        raise TrajectoryFormatError(f"{path} cannot be opened as HDF5 ({text}): the file is "
                                    f"truncated or corrupt") from err


def _read_meta(f: h5py.File, path: Path) -> dict[str, Any]:
    fmt = f.attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if fmt != FORMAT_NAME:
        found = "has no 'format' attribute" if fmt is None else f"has format {fmt!r}"
        raise TrajectoryFormatError(
            f"{path} is an HDF5 file but not an rpg_env trajectory file (it {found}, expected "
            f"{FORMAT_NAME!r}); record one with `python -m rpg_env.record`")
    version = int(f.attrs.get("schema_version", -1))
    if version > SCHEMA_VERSION:
        raise TrajectoryFormatError(
            f"{path} uses trajectory schema version {version}, newer than this rpg_env supports "
            f"({SCHEMA_VERSION}); upgrade rpg_env to read it")
    if version < 1:
        raise TrajectoryFormatError(f"{path} has an invalid schema_version {version}; supported: "
                                    f"{SCHEMA_VERSION}")
    try:
        meta = {
            "format": fmt,
            "schema_version": version,
            "env_id": str(f.attrs["env_id"]),
            "env_kwargs": json.loads(f.attrs["env_kwargs"]),
            "channel_names": json.loads(f.attrs["channel_names"]),
            "action_names": json.loads(f.attrs["action_names"]),
            "obs_shape": tuple(int(x) for x in f.attrs["obs_shape"]),
            "versions": json.loads(f.attrs["versions"]),
            "created": str(f.attrs["created"]),
        }
    except (KeyError, ValueError) as err:
        raise TrajectoryFormatError(f"{path}: trajectory attributes are missing or malformed "
                                    f"({err}); the file is corrupt") from err
    for key in ("episodes", "obs", "runs", *STEP_DATASETS):
        if key not in f:
            raise TrajectoryFormatError(f"{path}: dataset /{key} is missing; the file is corrupt "
                                        f"or was not written by rpg_env")
    if f["episodes"].dtype != EPISODE_DTYPE:
        raise TrajectoryFormatError(f"{path}: /episodes has dtype {f['episodes'].dtype}, expected "
                                    f"{EPISODE_DTYPE} for schema version {version}")
    if f["obs"].shape[1:] != meta["obs_shape"] or f["obs"].dtype != np.uint8:
        raise TrajectoryFormatError(f"{path}: /obs is {f['obs'].dtype} {f['obs'].shape[1:]}, the "
                                    f"attributes say uint8 {meta['obs_shape']}")
    return meta


def _committed_count(rows: np.ndarray) -> int:
    """Rows are committed in order; the first row without the commit bit ends the valid table."""
    bad = np.flatnonzero((rows["flags"] & FLAG_COMMITTED) == 0)
    return int(bad[0]) if bad.size else len(rows)


def _check_extents(f: h5py.File, rows: np.ndarray, path: Path) -> None:
    if not len(rows):
        return
    steps_end = int((rows["step_start"] + rows["length"]).max())
    obs_end = int((rows["obs_start"] + rows["length"] + 1).max())
    short = [name for name in STEP_DATASETS if f[name].shape[0] < steps_end]
    if f["obs"].shape[0] < obs_end:
        short.append("obs")
    if short:
        raise TrajectoryFormatError(f"{path}: datasets {short} end before the committed episodes "
                                    f"that the table lists; the file is truncated or corrupt")


def _meta_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    diffs = []
    for key in COMPATIBILITY_KEYS:
        a, b = old.get(key), new.get(key)
        if key == "obs_shape":
            a, b = tuple(a or ()), tuple(b or ())
        if key == "env_kwargs" and isinstance(a, dict) and isinstance(b, dict):
            for sub in sorted(set(a) | set(b)):
                if a.get(sub, "<absent>") != b.get(sub, "<absent>"):
                    diffs.append(f"env_kwargs.{sub} (file: {a.get(sub, '<absent>')!r}, "
                                 f"new: {b.get(sub, '<absent>')!r})")
        elif (list(a) if isinstance(a, (list, tuple)) else a) != (
                list(b) if isinstance(b, (list, tuple)) else b):
            diffs.append(f"{key} (file: {a!r}, new: {b!r})")
    return diffs


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


# --------------------------------------------------------------------------- writer
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
        missing = [k for k in REQUIRED_META if k not in meta]
        if missing:
            raise ValueError(f"meta is missing {missing}; required: {list(REQUIRED_META)}")
        if not 0 <= int(compression_level) <= 9:
            raise ValueError(f"compression_level must be in 0..9, got {compression_level}")
        self.path = Path(path)
        self.meta = _json_ready(dict(meta))
        self.meta["obs_shape"] = tuple(int(x) for x in meta["obs_shape"])
        self.num_actions = len(self.meta["action_names"])
        if self.num_actions > 256:
            raise ValueError("actions are stored as uint8: at most 256 actions are supported")
        if len(self.meta["channel_names"]) != self.meta["obs_shape"][0]:
            raise ValueError(f"{len(self.meta['channel_names'])} channel_names for obs_shape "
                             f"{self.meta['obs_shape']}: give one name per channel")
        exists = self.path.exists()
        if mode == "x" and exists:
            raise FileExistsError(f"{self.path} exists; choose another path or append with mode='a'")
        if mode == "a" and exists:
            _check_container(self.path, for_writing=True)
            # Refuse foreign or mismatched files from a read-only open, so they are never
            # opened for writing at all.
            with _open_h5(self.path, "r") as probe:
                self._check_compatible(probe)
            self._file = _open_h5(self.path, "r+", libver="latest")
            try:
                self._attach(run_info)
            except BaseException:
                self._file.close()
                raise
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = _open_h5(self.path, "w", libver="latest")
            try:
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
        f.attrs["versions"] = json.dumps(meta.get("versions") or _package_versions(), sort_keys=True)
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

    def _check_compatible(self, f: h5py.File) -> None:
        diffs = _meta_differences(_read_meta(f, self.path), self.meta)
        if diffs:
            raise EnvMismatchError(
                f"cannot append to {self.path}: it was recorded with other settings: "
                f"{'; '.join(diffs)}. Record into a new file, or use the file's settings")

    def _attach(self, run_info: Mapping[str, Any] | None) -> None:
        f = self._file
        self._check_compatible(f)
        rows = f["episodes"][()]
        self._rows = _committed_count(rows)
        committed = rows[:self._rows]
        self._step_end = int((committed["step_start"] + committed["length"]).max()) if len(committed) else 0
        self._obs_end = int((committed["obs_start"] + committed["length"] + 1).max()) if len(committed) else 0
        self._next_game = int(committed["game_id"].max()) + 1 if len(committed) else 0
        from rpg_env.provenance import provenance  # game-free

        info = _json_ready(dict(run_info or {}))
        record = {**provenance(seed=info.pop("seed", None)), **info}
        runs = f["runs"]
        self.run = runs.shape[0]
        runs.resize((self.run + 1,))
        runs[self.run] = json.dumps(record, sort_keys=True)
        # Anything past the committed rows (a game cut off by an exception) is overwritten.
        f["episodes"].resize((self._rows,))
        f.flush()

    # ----------------------------------------------------------------- writing
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
        return self._next_game

    def write_game(self, streams: Sequence[Stream]) -> int:
        """Commit one game (its streams share a new game id); returns the game id."""
        return self.write_games([streams])[0]

    def write_games(self, games: Sequence[Sequence[Stream]]) -> list[int]:
        """Commit several games at once; returns their game ids (consecutive)."""
        if self._closed:
            raise ValueError(f"{self.path}: the writer is closed")
        games = [list(g) for g in games if len(g)]
        if not games:
            return []
        streams = [s for g in games for s in g]
        arrays = [self._check_stream(s) for s in streams]
        n_steps = sum(len(a["actions"]) for a in arrays)
        n_obs = n_steps + len(arrays)
        f = self._file
        # 1) step data, 2) flush, 3) table rows with the commit bit, 4) flush. A kill between
        # 2 and 4 leaves unreferenced step data that readers ignore and the next writer reuses.
        s0, o0 = self._step_end, self._obs_end
        for name in STEP_DATASETS:
            ds = f[name]
            if ds.shape[0] < s0 + n_steps:
                ds.resize((s0 + n_steps,))
            ds[s0:s0 + n_steps] = np.concatenate([a[name] for a in arrays])
        obs = f["obs"]
        if obs.shape[0] < o0 + n_obs:
            obs.resize((o0 + n_obs, *obs.shape[1:]))
        obs[o0:o0 + n_obs] = np.concatenate([a["obs"] for a in arrays])
        f.flush()

        rows = np.zeros(len(streams), dtype=EPISODE_DTYPE)
        game_ids, step, ob, r = [], s0, o0, 0
        for game in games:
            gid = self._next_game + len(game_ids)
            game_ids.append(gid)
            for stream in game:
                a = arrays[r]
                length = len(a["actions"])
                flags = FLAG_COMMITTED
                if length and a["terminated"][-1]:
                    flags |= FLAG_TERMINATED
                if length and a["truncated"][-1]:
                    flags |= FLAG_TRUNCATED
                if stream.interrupted:
                    flags |= FLAG_INTERRUPTED
                rows[r] = (gid, stream.agent_id, encode_policy_id(stream.policy_id), stream.seed,
                           stream.reset_count, stream.env_index, self.run, length,
                           float(a["rewards"].astype(np.float64).sum()), step, ob, flags)
                step += length
                ob += length + 1
                r += 1
        table = f["episodes"]
        table.resize((self._rows + len(rows),))
        table[self._rows:] = rows
        f.flush()
        self._rows += len(rows)
        self._step_end, self._obs_end = step, ob
        self._next_game += len(game_ids)
        return game_ids

    def _check_stream(self, s: Stream) -> dict[str, np.ndarray]:
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

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _package_versions() -> dict[str, str]:
    from rpg_env.provenance import package_versions  # game-free

    return package_versions()


# --------------------------------------------------------------------------- reader
class TrajectoryFile:
    """Read-only, lazy access to a trajectory file (works while another process records into it).

    Only the episode table is held in memory; ``episode``/``window`` read the rows they need
    through h5py's chunk cache. ``len(tf)`` counts committed streams; `refresh` picks up
    streams committed since opening.

    Pickling reopens the file by path, so a `TrajectoryFile` can be handed to DataLoader workers.
    """

    def __init__(self, path: str | os.PathLike, *, cache_bytes: int = 16 << 20) -> None:
        self.path = Path(path)
        self._cache_bytes = int(cache_bytes)
        _check_container(self.path, for_writing=False)
        self._file: h5py.File | None = None
        try:
            self._swmr_read(self._load_table)
            self._probe_tail()
        except BaseException:
            self.close()
            raise

    def _open_handles(self) -> None:
        """(Re)open the file. A fresh handle sees everything a SWMR writer has flushed; we
        reopen rather than call h5py's ``Dataset.refresh``, which in HDF5 2.0 can leave the
        reader's metadata cache inconsistent ("can't insert duplicate key") on later reads."""
        if self._file is not None:
            self._file.close()
        self._file = _open_h5(self.path, "r", swmr=True, rdcc_nbytes=self._cache_bytes,
                              rdcc_nslots=10007)
        self.meta = _read_meta(self._file, self.path)
        self._obs = self._file["obs"]
        self._actions = self._file["actions"]
        self._rewards = self._file["rewards"]

    # ----------------------------------------------------------------- table
    def _load_table(self) -> None:
        table = self._file["episodes"]
        raw = table[()]
        raw = raw[:_committed_count(raw)]
        _check_extents(self._file, raw, self.path)
        episodes = np.empty(len(raw), dtype=EPISODE_TABLE_DTYPE)
        for name in EPISODE_DTYPE.names:
            episodes[name] = decode_policy_ids(raw[name]) if name == "policy_id" else raw[name]
        episodes.flags.writeable = False
        self.episodes: np.ndarray = episodes
        self._runs: list[dict] | None = None

    def _probe_tail(self) -> None:
        """Read the last committed stream: catches files whose tail chunks were cut off."""
        if not len(self):
            return
        self._swmr_read(lambda: self.episode(len(self) - 1), what="the data of the last committed episode")

    def refresh(self) -> int:
        """Re-read the table (SWMR); returns how many new committed streams appeared."""
        before = len(self)
        self._swmr_read(self._load_table)
        return len(self) - before

    #: Attempts at a read that races a concurrent SWMR writer before the error is final.
    swmr_read_attempts: int = 5

    def _swmr_read(self, read, what: str = "the episode table"):
        """Run ``read()`` on a freshly opened file, retrying transient errors.

        A read can race a writer appending in another process; reading again through a fresh
        handle resolves it. An error that persists is a damaged file.
        """
        for attempt in range(self.swmr_read_attempts):
            try:
                self._open_handles()
                return read()
            except OSError as err:
                if attempt + 1 == self.swmr_read_attempts:
                    raise TrajectoryFormatError(
                        f"{self.path}: {what} cannot be read ({err}, {self.swmr_read_attempts} "
                        f"attempts); the file is truncated or corrupt") from err
                time.sleep(0.01 * 2**attempt)

    # ----------------------------------------------------------------- basic properties
    @property
    def schema_version(self) -> int:
        return int(self.meta["schema_version"])

    @property
    def runs(self) -> list[dict]:
        """Provenance of each writing session (``/runs``), indexed by ``episodes["run"]``."""
        if self._runs is None:
            self._runs = [json.loads(x) for x in self._file["runs"].asstr()[()]]
        return self._runs

    @property
    def num_steps(self) -> int:
        """Committed steps over all streams."""
        return int(self.episodes["length"].sum())

    def __len__(self) -> int:
        return len(self.episodes)

    def _row(self, i: int) -> np.void:
        n = len(self)
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"episode index must be an int, got {type(i).__name__}")
        if not -n <= i < n:
            raise IndexError(f"episode {i} out of range: {self.path} has {n} committed episodes")
        return self.episodes[i]

    # ----------------------------------------------------------------- data access
    def episode(self, i: int) -> dict[str, np.ndarray]:
        """Stream ``i``: ``obs`` ``(L+1, C, V, V)`` uint8, ``actions`` ``(L,)`` int64, ``rewards``
        ``(L,)`` float32, ``terminated``/``truncated`` ``(L,)`` bool."""
        row = self._row(i)
        s, o, length = int(row["step_start"]), int(row["obs_start"]), int(row["length"])
        return {
            "obs": self._obs[o:o + length + 1],
            "actions": self._actions[s:s + length].astype(np.int64),
            "rewards": self._rewards[s:s + length],
            "terminated": self._file["terminated"][s:s + length],
            "truncated": self._file["truncated"][s:s + length],
        }

    def read_episodes(self, episodes: Iterable[int] | np.ndarray | None = None
                      ) -> list[dict[str, np.ndarray]]:
        """Many streams at once (same dicts as `episode`, in the order asked): runs of
        consecutive indices are read with one h5py call per dataset, which is much faster
        than one `episode` call each. Loads the selected streams into memory."""
        idx = np.arange(len(self)) if episodes is None else np.asarray(
            episodes if isinstance(episodes, np.ndarray) else list(episodes), dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < -len(self) or idx.max() >= len(self)):
            raise IndexError(f"episode indices must be in 0..{len(self) - 1}")
        idx = idx % max(len(self), 1)
        order = np.unique(idx)
        out: dict[int, dict[str, np.ndarray]] = {}
        breaks = np.flatnonzero(np.diff(order) != 1) + 1
        for run in np.split(order, breaks) if order.size else []:
            rows = self.episodes[run]
            s0, o0 = int(rows["step_start"][0]), int(rows["obs_start"][0])
            s1 = int(rows["step_start"][-1] + rows["length"][-1])
            o1 = int(rows["obs_start"][-1] + rows["length"][-1] + 1)
            block = {"obs": self._obs[o0:o1], "actions": self._actions[s0:s1].astype(np.int64),
                     "rewards": self._rewards[s0:s1], "terminated": self._file["terminated"][s0:s1],
                     "truncated": self._file["truncated"][s0:s1]}
            for i, row in zip(run.tolist(), rows, strict=True):
                s, o, length = int(row["step_start"]) - s0, int(row["obs_start"]) - o0, int(row["length"])
                out[i] = {k: (v[o:o + length + 1] if k == "obs" else v[s:s + length])
                          for k, v in block.items()}
        return [out[int(i)] for i in idx]

    def window(self, i: int, start: int, k: int) -> dict[str, np.ndarray]:
        """Steps ``start .. start+k-1`` of stream ``i``: ``obs`` ``(k+1, C, V, V)`` (the views
        before each step plus the one after the last), ``actions`` ``(k,)`` int64, ``rewards``
        ``(k,)`` float32."""
        row = self._row(i)
        length = int(row["length"])
        if int(k) < 1 or start < 0 or start + k > length:
            raise IndexError(f"window start={start}, k={k} does not fit episode {i} of length "
                             f"{length}: need k >= 1 and 0 <= start <= length - k")
        s, o = int(row["step_start"]) + int(start), int(row["obs_start"]) + int(start)
        return {
            "obs": self._obs[o:o + k + 1],
            "actions": self._actions[s:s + k].astype(np.int64),
            "rewards": self._rewards[s:s + k],
        }

    def window_index(self, k: int, episodes: Iterable[int] | np.ndarray | None = None) -> np.ndarray:
        """``(M, 2)`` int64 rows ``(episode, start)`` of every ``k``-step window fully inside
        the given episodes (all committed episodes when ``None``)."""
        if int(k) < 1:
            raise ValueError(f"window length k must be >= 1, got {k}")
        if episodes is None:
            idx = np.arange(len(self), dtype=np.int64)
        else:
            idx = np.asarray(episodes if isinstance(episodes, np.ndarray) else list(episodes),
                             dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"episode indices must be in 0..{len(self) - 1}")
        counts = np.maximum(self.episodes["length"][idx] - int(k) + 1, 0)
        ep = np.repeat(idx.astype(np.int64), counts)
        # start = position within each episode's run of windows
        offsets = np.arange(counts.sum(), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        return np.stack([ep, offsets], axis=1).reshape(-1, 2)

    def policy_id(self, i: int) -> str:
        return str(self._row(i)["policy_id"])

    def digest(self) -> str:
        """SHA-256 of the committed table and step data (not of attributes or timestamps):
        equal digests mean bit-identical recordings."""
        h = hashlib.sha256()
        raw = self._file["episodes"][:len(self)]
        raw = raw.copy()
        raw["run"] = 0  # which session wrote a stream is not part of its content
        h.update(raw.tobytes())
        steps = self.num_steps
        obs_rows = steps + len(self)
        block = 1 << 16
        for name in STEP_DATASETS:
            for a in range(0, steps, block):
                h.update(self._file[name][a:min(a + block, steps)].tobytes())
        for a in range(0, obs_rows, block // 8):
            h.update(self._obs[a:min(a + block // 8, obs_rows)].tobytes())
        return h.hexdigest()

    # ----------------------------------------------------------------- lifecycle
    def close(self) -> None:
        if getattr(self, "_file", None) is not None and self._file.id.valid:
            self._file.close()

    def __enter__(self) -> TrajectoryFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        return {"path": str(self.path), "cache_bytes": self._cache_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], cache_bytes=state["cache_bytes"])

    def __repr__(self) -> str:
        return (f"TrajectoryFile({str(self.path)!r}: {len(self)} episodes, {self.num_steps} steps, "
                f"env {self.meta['env_id']}, schema v{self.schema_version})")


# --------------------------------------------------------------------------- splits
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
    return x ^ (x >> np.uint64(31))


def game_keys(game_ids: np.ndarray, seed: int = 0) -> np.ndarray:
    """A deterministic uniform number in [0, 1) per game id (a hash of ``(seed, game_id)``)."""
    with np.errstate(over="ignore"):
        mixed = _splitmix64(np.asarray(game_ids, dtype=np.int64).astype(np.uint64)
                            ^ _splitmix64(np.array([int(seed) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)))
    return (mixed >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def split_episodes(
    tf: TrajectoryFile | np.ndarray,
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    *,
    stable: bool = False,
) -> dict[str, np.ndarray]:
    """Split episodes into ``{"train", "val", "test"}`` index arrays, by game.

    All streams of a game go to the same split, so a model never sees the co-player's view of
    a test game during training. Games are ordered by a hash of ``(seed, game_id)``:

    - ``stable=False`` (default): exact counts, ``round(fraction * n_games)`` by largest
      remainder, with at least one game in every split whose fraction is > 0 (when there are
      enough games).
    - ``stable=True``: a game goes to the split its hash falls in (fractions as probability
      thresholds), so a game's split never changes when the file grows by appending; counts
      are then only approximately proportional.

    ``tf`` is a `TrajectoryFile` or its ``episodes`` table. Index arrays are sorted int64.
    """
    table = tf.episodes if hasattr(tf, "episodes") else np.asarray(tf)
    fr = np.asarray(fractions, dtype=np.float64)
    if fr.shape != (3,) or (fr < 0).any() or not math.isclose(fr.sum(), 1.0, abs_tol=1e-6):
        raise ValueError(f"fractions must be three non-negative numbers (train, val, test) summing "
                         f"to 1, got {tuple(fractions)}")
    games, inverse = np.unique(table["game_id"], return_inverse=True)
    keys = game_keys(games, seed)
    n = len(games)
    if stable:
        edges = np.cumsum(fr)
        edges[-1] = 1.0 + 1e-12
        assign = np.searchsorted(edges, keys, side="right")
    else:
        counts = np.floor(fr * n).astype(np.int64)
        order = np.argsort(-(fr * n - counts), kind="stable")
        for j in order[: n - counts.sum()]:
            counts[j] += 1
        # Give every split with a positive fraction at least one game, taken from the largest.
        for j in range(3):
            if fr[j] > 0 and counts[j] == 0 and n >= int((fr > 0).sum()):
                donor = int(np.argmax(counts))
                counts[donor] -= 1
                counts[j] += 1
        rank = np.empty(n, dtype=np.int64)
        rank[np.argsort(keys, kind="stable")] = np.arange(n)
        assign = np.searchsorted(np.cumsum(counts), rank, side="right")
    stream_split = assign[inverse]
    return {name: np.flatnonzero(stream_split == j).astype(np.int64)
            for j, name in enumerate(("train", "val", "test"))}


# --------------------------------------------------------------------------- maintenance
def validate(path: str | os.PathLike, *, deep: bool = False) -> list[str]:
    """Check a trajectory file; returns a list of problems (empty when it is sound).

    Structural checks always run (format, version, table order and extents, uncommitted
    tails). ``deep`` also reads every step: returns match the rewards, the last step's
    terminated/truncated match the flags, actions are in range, views are one-hot.
    Unreadable files raise `TrajectoryFormatError` instead.
    """
    problems: list[str] = []
    flags, _ = _superblock(Path(path))
    with TrajectoryFile(path) as tf:
        if flags:
            problems.append(f"not closed by its writer (superblock flags {flags:#x}): being recorded "
                            f"or the writer was killed; run `repair` before appending")
        table = tf._file["episodes"]
        uncommitted = table.shape[0] - len(tf)
        if uncommitted:
            problems.append(f"{uncommitted} table rows after the committed ones are ignored")
        ep = tf.episodes
        if len(ep):
            steps_expected = np.concatenate([[0], np.cumsum(ep["length"])[:-1]])
            if not np.array_equal(ep["step_start"], steps_expected):
                problems.append("step_start is not contiguous in table order")
            if not np.array_equal(ep["obs_start"], steps_expected + np.arange(len(ep))):
                problems.append("obs_start is not contiguous in table order (L + 1 rows each)")
            if (ep["length"] < 1).any():
                problems.append(f"{int((ep['length'] < 1).sum())} episodes have no steps")
            if (np.diff(ep["game_id"]) < 0).any():
                problems.append("game ids decrease in table order")
            if (ep["run"] >= len(tf.runs)).any() or (ep["run"] < 0).any():
                problems.append("some rows point to a /runs entry that does not exist")
        extra_steps = tf._actions.shape[0] - tf.num_steps
        if extra_steps > 0:
            problems.append(f"{extra_steps} steps after the last committed episode (a partial "
                            f"episode of a killed writer); readers ignore them")
        if deep:
            n_act = len(tf.meta["action_names"])
            for i in range(len(tf)):
                e, row = tf.episode(i), ep[i]
                if not math.isclose(float(e["rewards"].astype(np.float64).sum()), float(row["return"]),
                                    rel_tol=0, abs_tol=1e-6):
                    problems.append(f"episode {i}: return {row['return']} != sum of rewards")
                if bool(e["terminated"][-1]) != bool(row["flags"] & FLAG_TERMINATED) or bool(
                        e["truncated"][-1]) != bool(row["flags"] & FLAG_TRUNCATED):
                    problems.append(f"episode {i}: flags disagree with the last step's "
                                    f"terminated/truncated")
                if (e["actions"] >= n_act).any():
                    problems.append(f"episode {i}: actions out of range 0..{n_act - 1}")
                if not (e["obs"].sum(axis=1) == 1).all():
                    problems.append(f"episode {i}: observations are not one-hot")
    return problems


def repair(src: str | os.PathLike, dst: str | os.PathLike, *, overwrite: bool = False,
           batch_streams: int = 512, progress: bool = False) -> int:
    """Copy the committed episodes of ``src`` into a fresh file ``dst``; returns their number.

    For files whose writer was killed (they read fine but refuse appending): ``dst`` is a
    clean, appendable copy with the same attributes, game ids and ``/runs`` records. ``src`` is
    opened read-only and never modified. Copies ``batch_streams`` streams at a time, so memory
    stays bounded.
    """
    src, dst = Path(src), Path(dst)
    if dst.exists() and dst.resolve() == src.resolve():
        raise ValueError("repair writes a new file: dst must differ from src")
    if dst.exists() and not overwrite:
        raise FileExistsError(f"{dst} exists; choose a new path (or pass overwrite=True / --overwrite)")
    with TrajectoryFile(src) as tf:
        meta = dict(tf.meta)
        raw = tf._file["episodes"][:len(tf)]
        runs = tf.runs
        tmp = dst.with_name(dst.name + ".partial")
        writer = TrajectoryWriter(tmp, meta, mode="w", run_info={"repaired_from": str(src)})
        try:
            f = writer._file
            # Carry over the original sessions' provenance (SWMR allows growing datasets).
            runs_ds = f["runs"]
            runs_ds.resize((len(runs) + 1,))
            runs_ds[:len(runs)] = [json.dumps(r, sort_keys=True) for r in runs]
            runs_ds[len(runs)] = json.dumps({"repaired_from": str(src),
                                             "created": datetime.now(UTC).isoformat(
                                                 timespec="seconds")}, sort_keys=True)
            iterator = range(0, len(raw), batch_streams)
            if progress:
                from tqdm import tqdm

                iterator = tqdm(iterator, desc=f"repair {src.name}", unit="batch")
            for a in iterator:
                rows = raw[a:a + batch_streams].copy()
                s0, s1 = int(rows["step_start"][0]), int(rows["step_start"][-1] + rows["length"][-1])
                o0, o1 = int(rows["obs_start"][0]), int(rows["obs_start"][-1] + rows["length"][-1] + 1)
                contiguous = (s1 - s0 == rows["length"].sum()) and (o1 - o0 == rows["length"].sum()
                                                                   + len(rows))
                if not contiguous:
                    raise TrajectoryFormatError(f"{src}: episode data is not contiguous; cannot repair")
                for name in STEP_DATASETS:
                    ds = f[name]
                    ds.resize((writer._step_end + s1 - s0,))
                    ds[writer._step_end:] = tf._file[name][s0:s1]
                obs = f["obs"]
                obs.resize((writer._obs_end + o1 - o0, *obs.shape[1:]))
                obs[writer._obs_end:] = tf._obs[o0:o1]
                f.flush()
                rows["step_start"] += writer._step_end - s0
                rows["obs_start"] += writer._obs_end - o0
                table = f["episodes"]
                table.resize((writer._rows + len(rows),))
                table[writer._rows:] = rows
                f.flush()
                writer._rows += len(rows)
                writer._step_end += s1 - s0
                writer._obs_end += o1 - o0
            writer._next_game = int(raw["game_id"].max()) + 1 if len(raw) else 0
            writer.close()
        except BaseException:
            writer.close()
            tmp.unlink(missing_ok=True)
            raise
    os.replace(tmp, dst)
    return len(raw)


# --------------------------------------------------------------------------- command line
def _info(path: str) -> str:
    with TrajectoryFile(path) as tf:
        ep = tf.episodes
        lines = [repr(tf), f"  env_kwargs: {json.dumps(tf.meta['env_kwargs'], sort_keys=True)}",
                 f"  games: {len(np.unique(ep['game_id']))}, runs: {len(tf.runs)}, "
                 f"file size: {tf.path.stat().st_size / 1e6:.2f} MB"]
        if len(ep):
            lines.append(f"  {'agent':>5} {'policy':<24} {'streams':>8} {'steps':>9} {'mean return':>12}")
            keys = sorted(set(zip(ep["agent_id"].tolist(), ep["policy_id"].tolist(), strict=False)))
            for agent, pol in keys:
                sel = (ep["agent_id"] == agent) & (ep["policy_id"] == pol)
                lines.append(f"  {agent:>5} {pol:<24} {int(sel.sum()):>8} {int(ep['length'][sel].sum()):>9} "
                             f"{float(ep['return'][sel].mean()):>12.2f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rpg_env.trajectories",
                                     description="Inspect, check and repair trajectory files.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="summarize a file")
    p.add_argument("path")
    p = sub.add_parser("validate", help="check a file (exit status 1 when problems are found)")
    p.add_argument("path")
    p.add_argument("--deep", action="store_true", help="also read and check every step")
    p = sub.add_parser("repair", help="copy the committed episodes into a fresh, appendable file")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    args = parser.parse_args(argv)
    try:
        if args.command == "info":
            print(_info(args.path))
            return 0
        if args.command == "validate":
            problems = validate(args.path, deep=args.deep)
            for problem in problems:
                print(f"{args.path}: {problem}")
            if not problems:
                print(f"{args.path}: OK")
            return 1 if problems else 0
        n = repair(args.src, args.dst, overwrite=args.overwrite, progress=True)
        print(f"copied {n} committed episodes from {args.src} to {args.dst}")
        return 0
    except (ValueError, FileNotFoundError, FileExistsError) as err:  # incl. TrajectoryFormatError
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
