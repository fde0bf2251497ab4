"""The trajectory file schema (version 1) and the checks every reader and writer share.

Schema constants, the ``/episodes`` row dtype and its ``FLAG_*`` bits, the error classes, the
in-memory `Stream`, policy-id encoding, and the checks of a file's container (HDF5 signature,
superblock, truncation) and attributes. The layout is documented in
``docs/trajectory-format.md``; the short version:

- ``/episodes``: one row per *stream* (one agent's view of one game), dtype `EPISODE_DTYPE`.
  A row is the commit record of its stream: step data is written and flushed first, the row
  after it. Readers trust only rows whose ``flags`` carry `FLAG_COMMITTED`.
- ``/obs``: ``(sum(L + 1), C, V, V)`` uint8 one-hot views; a stream of ``L`` steps owns
  ``L + 1`` rows starting at its ``obs_start`` (row ``t + 1`` is the view after step ``t``).
- ``/actions`` ``(S,)`` uint8, ``/rewards`` ``(S,)`` float32, ``/terminated`` and
  ``/truncated`` ``(S,)`` bool: per step, a stream's ``L`` rows start at its ``step_start``.
- ``/runs``: one JSON provenance record per writing session (seed, command, versions).
- ``/levels`` (optional, files of levelled games only): ``(E,)`` int64 level id of each table
  row, written before the row that commits it; absent: every game is the open room (level -1).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from rpg_base.errors import InputError

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
#: The optional per-stream level ids (created for envs with ``num_levels`` > 0).
LEVELS_DATASET = "levels"

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
    level: int = -1  # the generated level played, -1 for the open room (or unknown)
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


# --------------------------------------------------------------------------- container checks
def superblock(path: Path) -> tuple[int | None, int | None]:
    """(file consistency flags, stored end-of-file address in bytes) of the v2/v3 HDF5
    superblock at offset 0 of ``path``; ``(None, None)`` for other files. Non-zero flags mean
    a writer has the file open, or was killed before closing it."""
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


def check_container(path: Path, *, for_writing: bool) -> None:
    """Raise a clear `TrajectoryFormatError` for non-HDF5, truncated or (``for_writing``)
    unclean files, before h5py sees them."""
    if not path.exists():
        raise FileNotFoundError(f"trajectory file {path} does not exist")
    if path.is_dir():
        raise TrajectoryFormatError(f"{path} is a directory, not a trajectory file")
    if path.stat().st_size == 0:
        raise TrajectoryFormatError(f"{path} is empty (0 bytes): not a trajectory file")
    if not h5py.is_hdf5(path):
        raise TrajectoryFormatError(
            f"{path} is not an HDF5 file (no HDF5 signature): trajectory files are written by "
            f"the rpg_env.trajectories recorders / `python -m rpg_env.record`")
    flags, stored_eof = superblock(path)
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


def open_h5(path: Path, mode: str, **kwargs: Any) -> h5py.File:
    """``h5py.File(path, mode, **kwargs)``, with h5py's OS errors turned into
    `TrajectoryFormatError` / `UncleanFileError` messages that say what to do."""
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


# --------------------------------------------------------------------------- metadata
def _check_format_version(f: h5py.File, path: Path) -> tuple[str, int]:
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
    return fmt, version


def read_meta(f: h5py.File, path: Path) -> dict[str, Any]:
    """The decoded file attributes of an open trajectory file (``env_kwargs`` a dict, names
    lists, ``obs_shape`` a tuple, ``versions`` a dict), after checking format, schema version
    and the datasets' presence and types. Raises `TrajectoryFormatError` naming ``path``."""
    fmt, version = _check_format_version(f, path)
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


def committed_count(rows: np.ndarray) -> int:
    """How many leading ``rows`` (`EPISODE_DTYPE`) are committed. Rows are committed in order,
    so the first row without the commit bit ends the valid table."""
    bad = np.flatnonzero((rows["flags"] & FLAG_COMMITTED) == 0)
    return int(bad[0]) if bad.size else len(rows)


def data_ends(rows: np.ndarray) -> tuple[int, int]:
    """(end of the step rows, end of the ``/obs`` rows) that committed ``rows`` reference."""
    if not len(rows):
        return 0, 0
    return (int((rows["step_start"] + rows["length"]).max()),
            int((rows["obs_start"] + rows["length"] + 1).max()))


def check_extents(f: h5py.File, rows: np.ndarray, path: Path) -> None:
    """Raise `TrajectoryFormatError` when a dataset ends before the data ``rows`` reference."""
    steps_end, obs_end = data_ends(rows)
    short = [name for name in STEP_DATASETS if f[name].shape[0] < steps_end]
    if f["obs"].shape[0] < obs_end:
        short.append("obs")
    if short:
        raise TrajectoryFormatError(f"{path}: datasets {short} end before the committed episodes "
                                    f"that the table lists; the file is truncated or corrupt")


def meta_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``"key (file: a, new: b)"`` for every `COMPATIBILITY_KEYS` entry (and every
    ``env_kwargs`` entry) that differs between a file's ``old`` and a recording's ``new`` meta."""
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
