"""`TrajectoryFile`: read-only, lazy access to a trajectory file, also while it is recorded."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from rpg_env.trajectories.format import (
    EPISODE_DTYPE,
    EPISODE_TABLE_DTYPE,
    LEVELS_DATASET,
    STEP_DATASETS,
    TrajectoryFormatError,
    check_container,
    check_extents,
    committed_count,
    decode_policy_ids,
    open_h5,
    read_meta,
)

#: Datasets `TrajectoryFile.read_dataset` reads: ``/obs`` and the per-step ones.
DATA_DATASETS = ("obs", *STEP_DATASETS)


class TrajectoryFile:
    """Read-only, lazy access to a trajectory file (works while another process records into it).

    Only the episode table is held in memory; ``episode``/``window`` read the rows they need
    through h5py's chunk cache (``cache_bytes`` per open file). ``len(tf)`` counts committed
    streams; `refresh` picks up streams committed since opening.

    Pickling reopens the file by path, so a `TrajectoryFile` can be handed to DataLoader workers.
    """

    def __init__(self, path: str | os.PathLike, *, cache_bytes: int = 16 << 20) -> None:
        self.path = Path(path)
        self._cache_bytes = int(cache_bytes)
        check_container(self.path, for_writing=False)
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
        self._file = open_h5(self.path, "r", swmr=True, rdcc_nbytes=self._cache_bytes,
                             rdcc_nslots=10007)
        self.meta: dict[str, Any] = read_meta(self._file, self.path)
        # Looking a dataset up by name costs more than a small read: keep the handles.
        self._datasets = {name: self._file[name] for name in DATA_DATASETS}
        self._obs = self._datasets["obs"]
        self._actions = self._datasets["actions"]
        self._rewards = self._datasets["rewards"]

    # ----------------------------------------------------------------- table
    def _load_table(self) -> None:
        raw = self._file["episodes"][()]
        raw = raw[:committed_count(raw)]
        check_extents(self._file, raw, self.path)
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

    def _swmr_read(self, read: Callable[[], Any], what: str = "the episode table") -> Any:
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
    def levels(self) -> np.ndarray:
        """``(E,)`` int64 level id of each committed stream (`rpg_env.game.levels`), -1 for the
        open room: all -1 in files without ``/levels`` (open-room games, or files written
        before levels existed)."""
        if LEVELS_DATASET not in self._file:
            return np.full(len(self), -1, dtype=np.int64)
        levels = self._file[LEVELS_DATASET][: len(self)]
        if len(levels) < len(self):
            raise TrajectoryFormatError(f"{self.path}: /levels has {len(levels)} rows for {len(self)} "
                                        f"committed streams: the file was damaged after writing")
        return levels

    @property
    def num_steps(self) -> int:
        """Committed steps over all streams."""
        return int(self.episodes["length"].sum())

    @property
    def uncommitted_rows(self) -> int:
        """Table rows after the committed ones (as of opening or the last `refresh`): rows a
        writer began but did not commit; readers ignore them."""
        return int(self._file["episodes"].shape[0]) - len(self)

    @property
    def uncommitted_steps(self) -> int:
        """Step rows stored past the committed steps (as of opening or the last `refresh`): the
        data of a game whose writer was killed before its commit; negative when the step data
        is shorter than the table says (which opening already refuses)."""
        return int(self._actions.shape[0]) - self.num_steps

    def __len__(self) -> int:
        return len(self.episodes)

    def _row(self, i: int) -> np.void:
        n = len(self)
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"episode index must be an int, got {type(i).__name__}")
        if not -n <= i < n:
            raise IndexError(f"episode {i} out of range: {self.path} has {n} committed episodes")
        return self.episodes[i]

    # ----------------------------------------------------------------- raw access
    def raw_episodes(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Committed table rows ``start .. stop-1`` as stored (`EPISODE_DTYPE`, ``policy_id`` as
        NUL-padded bytes), a writable copy."""
        stop = len(self) if stop is None else min(int(stop), len(self))
        return np.array(self._file["episodes"][int(start):stop], dtype=EPISODE_DTYPE)

    def read_dataset(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start .. stop-1`` of dataset ``/name`` as stored: ``"obs"`` ``(n, C, V, V)``
        uint8, or a per-step dataset (`STEP_DATASETS`) ``(n,)``."""
        if name not in DATA_DATASETS:
            raise KeyError(f"no dataset {name!r}: choose one of {DATA_DATASETS}")
        return self._datasets[name][int(start):int(stop)]

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
        raw = self.raw_episodes()
        raw["run"] = 0  # which session wrote a stream is not part of its content
        h.update(raw.tobytes())
        steps = self.num_steps
        obs_rows = steps + len(self)
        block = 1 << 16
        for name in STEP_DATASETS:
            for a in range(0, steps, block):
                h.update(self.read_dataset(name, a, min(a + block, steps)).tobytes())
        for a in range(0, obs_rows, block // 8):
            h.update(self.read_dataset("obs", a, min(a + block // 8, obs_rows)).tobytes())
        return h.hexdigest()

    # ----------------------------------------------------------------- lifecycle
    def close(self) -> None:
        if getattr(self, "_file", None) is not None and self._file.id.valid:
            self._file.close()

    def __enter__(self) -> TrajectoryFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict:
        return {"path": str(self.path), "cache_bytes": self._cache_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], cache_bytes=state["cache_bytes"])

    def __repr__(self) -> str:
        return (f"TrajectoryFile({str(self.path)!r}: {len(self)} episodes, {self.num_steps} steps, "
                f"env {self.meta['env_id']}, schema v{self.schema_version})")
