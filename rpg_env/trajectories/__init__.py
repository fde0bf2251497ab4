"""Trajectory files: the HDF5 schema shared by `rpg_env` (writer) and `rpg_worldmodel` (reader).

Game-free on purpose: the package needs only NumPy, h5py, Gymnasium, the standard library
and the env protocol (`rpg_env.envs.protocol`), so a trainer can read trajectories without
importing the environment, and the recorders record any env shaped like Treasurehunt-v0.
The layout is documented in ``docs/trajectory-format.md``. One job per module:

- `format`: schema version, ``/episodes`` dtype and ``FLAG_*`` bits, errors, `Stream`,
  policy-id encoding, container and attribute checks;
- `writer`: `TrajectoryWriter`, crash-safe commits in SWMR mode;
- `reader`: `TrajectoryFile`, lazy reads (also while a file is recorded);
- `splits`: `split_episodes` by game;
- `maintenance`: `validate` and `repair`;
- `recorders`: `HDF5Recorder` and `HDF5VectorRecorder`, Gymnasium wrappers that record games;
- ``__main__``: ``python -m rpg_env.trajectories {info,validate,repair} ...``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rpg_env.trajectories.format import (
    COMPATIBILITY_KEYS,
    DEFAULT_COMPRESSION_LEVEL,
    DEFAULT_OBS_CHUNK_ROWS,
    DEFAULT_STEP_CHUNK,
    EPISODE_DTYPE,
    EPISODE_TABLE_DTYPE,
    FLAG_COMMITTED,
    FLAG_INTERRUPTED,
    FLAG_TERMINATED,
    FLAG_TRUNCATED,
    FORMAT_NAME,
    POLICY_ID_BYTES,
    REQUIRED_META,
    SCHEMA_VERSION,
    STEP_DATASETS,
    EnvMismatchError,
    Stream,
    TrajectoryFormatError,
    UncleanFileError,
    decode_policy_ids,
    encode_policy_id,
)
from rpg_env.trajectories.maintenance import repair, validate
from rpg_env.trajectories.reader import TrajectoryFile
from rpg_env.trajectories.recorders import HDF5Recorder, HDF5VectorRecorder, env_meta
from rpg_env.trajectories.splits import game_keys, split_episodes
from rpg_env.trajectories.writer import TrajectoryWriter

__all__ = [
    "COMPATIBILITY_KEYS",
    "DEFAULT_COMPRESSION_LEVEL",
    "DEFAULT_OBS_CHUNK_ROWS",
    "DEFAULT_STEP_CHUNK",
    "EPISODE_DTYPE",
    "EPISODE_TABLE_DTYPE",
    "FLAG_COMMITTED",
    "FLAG_INTERRUPTED",
    "FLAG_TERMINATED",
    "FLAG_TRUNCATED",
    "FORMAT_NAME",
    "POLICY_ID_BYTES",
    "REQUIRED_META",
    "SCHEMA_VERSION",
    "STEP_DATASETS",
    "EnvMismatchError",
    "HDF5Recorder",
    "HDF5VectorRecorder",
    "Stream",
    "TrajectoryFile",
    "TrajectoryFormatError",
    "TrajectoryWriter",
    "UncleanFileError",
    "decode_policy_ids",
    "encode_policy_id",
    "env_meta",
    "game_keys",
    "main",
    "repair",
    "split_episodes",
    "validate",
]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rpg_env.trajectories`` (see `rpg_env.trajectories.__main__`); returns its exit
    status and raises on bad input like it."""
    # Imported on call: importing ``__main__`` with the package would make ``python -m`` warn.
    from rpg_env.trajectories.__main__ import main as cli_main

    return cli_main(argv)
