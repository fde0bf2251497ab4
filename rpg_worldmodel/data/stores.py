"""Where the windows' steps come from: chosen episodes of trajectory files, in memory or streamed.

Every store has the same rows interface: ``episodes``, ``lengths``, ``agent_ids``, ``game_ids``
``(E,)`` per row, the file's ``meta``, and ``gather(rows, starts, steps)``, which cuts windows
(`rpg_worldmodel.data.windows` plans which). The windows are the same whichever store serves them.

- `EpisodeStore`: one file's episodes decoded into memory (a window is a gather).
- `StreamedEpisodes`: one file's episodes left on disk; a window's views are read through h5py's
  chunk cache when asked for (actions and rewards, 12 bytes a step, are held in memory).
- `EpisodeShards`: the stores of several files as one row space (rows of the first file first).

`views_nbytes` is the memory estimate that chooses between them (`data.max_memory_mb`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from rpg_env.trajectories.format import FLAG_TERMINATED
from rpg_env.trajectories.reader import TrajectoryFile

#: The action and reward a window holds after its episode's last step: a window may end on the
#: game's final view (the last step's outcome is a target), and nothing is taken in that view.
NO_ACTION = -1

#: Bytes of h5py chunk cache per streamed file and process: a batch's windows hit random chunks
#: (32 views, 15.5 KiB each), so a larger cache buys little; it bounds the memory per file.
STREAM_CACHE_BYTES = 16 << 20


def views_nbytes(lengths: np.ndarray, obs_shape: Sequence[int]) -> int:
    """Bytes that the uint8 views of episodes of ``lengths`` steps ``(E,)`` take in memory:
    ``sum(L + 1) * C * V * V`` (an episode of L steps has L + 1 views)."""
    return int((np.asarray(lengths, dtype=np.int64) + 1).sum()) * int(np.prod(obs_shape))


class Store(Protocol):
    """What `rpg_worldmodel.data.windows.TrajectoryWindows` needs of a store."""

    meta: dict
    episodes: np.ndarray
    lengths: np.ndarray
    agent_ids: np.ndarray
    game_ids: np.ndarray
    ended: np.ndarray

    def __len__(self) -> int: ...

    def gather(self, rows: np.ndarray, starts: np.ndarray, steps: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


def _steps_of(act_offset: np.ndarray, lengths: np.ndarray, rows: np.ndarray, starts: np.ndarray, steps: int,
              actions: np.ndarray, rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Actions ``(B, steps)`` and rewards of windows of ``steps`` steps from ``starts`` in ``rows``;
    the position after an episode's last step (its final view) holds `NO_ACTION` and 0 points."""
    at = starts[:, None] + np.arange(steps)
    last = lengths[rows][:, None] - 1
    index = act_offset[rows][:, None] + np.minimum(at, last)
    after = at > last
    return np.where(after, NO_ACTION, actions[index]), np.where(after, np.float32(0), rewards[index])


def window_ends(store: Store, rows: np.ndarray, starts: np.ndarray, steps: int) -> np.ndarray:
    """``(B, steps)`` bool: whether each window position is its game's last step and the game ended
    there (its terminated flag; a game cut at a time limit never ends)."""
    at = starts[:, None] + np.arange(steps)
    return (at == store.lengths[rows][:, None] - 1) & store.ended[rows][:, None]


def pays_only_at_ends(store: EpisodeShards) -> bool:
    """Whether ``store``'s games pay at all, and every step that pays (a reward other than 0) is its
    game's last, the game ending there by its rules (terminated): a game that pays only as it ends,
    as a goal reached."""
    ends = (np.cumsum(store.lengths) - 1)[store.ended]  # the index of each ended game's last step
    paying = np.flatnonzero(store.rewards != 0)
    return bool(paying.size) and bool(np.isin(paying, ends).all())


def _ended(table: np.ndarray) -> np.ndarray:
    return (table["flags"] & FLAG_TERMINATED).astype(bool)


def _table_rows(tf: TrajectoryFile, episodes: np.ndarray) -> np.ndarray:
    if episodes.size and (episodes.min() < 0 or episodes.max() >= len(tf)):
        raise IndexError(f"episode ids must be in 0..{len(tf) - 1} for {tf.path}, "
                         f"got {episodes.min()}..{episodes.max()}")
    return tf.episodes[episodes]


def _offsets(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


@dataclass(frozen=True)
class EpisodeStore:
    """Episodes of one trajectory file held in memory (uint8 views: a 100-step episode of 6x9x9
    views is ~50 KB), so a window costs a gather, not an HDF5 decompression.

    Rows ``0 .. E-1`` follow ``episodes`` (the file's episode ids, in the order asked for).
    ``obs`` ``(sum(L+1), C, V, V)`` uint8, ``actions`` ``(sum(L),)`` int64 and ``rewards``
    ``(sum(L),)`` float32 (points of each step) are the episodes concatenated; ``obs_offset`` /
    ``act_offset`` ``(E,)`` are where each row starts in them (rewards align with actions).
    """

    path: Path
    meta: dict
    episodes: np.ndarray  # (E,) file episode ids
    lengths: np.ndarray  # (E,) steps
    agent_ids: np.ndarray  # (E,)
    game_ids: np.ndarray  # (E,)
    policy_ids: tuple[str, ...]  # (E,)
    ended: np.ndarray  # (E,) bool: the game ended by its rules (terminated), not by a time limit
    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    obs_offset: np.ndarray
    act_offset: np.ndarray

    @classmethod
    def load(cls, path: str | Path, episodes: Sequence[int] | np.ndarray) -> EpisodeStore:
        """Read ``episodes`` (file ids) of the trajectory file at ``path``."""
        episodes = np.asarray(episodes, dtype=np.int64).reshape(-1)
        with TrajectoryFile(path) as tf:
            meta = dict(tf.meta)
            table = _table_rows(tf, episodes)
            read = tf.read_episodes(episodes) if episodes.size else []
        lengths = table["length"].astype(np.int64)
        shape = tuple(meta["obs_shape"])
        obs = [np.asarray(ep["obs"], dtype=np.uint8) for ep in read]
        actions = [np.asarray(ep["actions"], dtype=np.int64) for ep in read]
        rewards = [np.asarray(ep["rewards"], dtype=np.float32) for ep in read]
        return cls(
            path=Path(path),
            meta=meta,
            episodes=episodes,
            lengths=lengths,
            agent_ids=table["agent_id"].astype(np.int64),
            game_ids=table["game_id"].astype(np.int64),
            policy_ids=tuple(str(p) for p in table["policy_id"]),
            ended=_ended(table),
            obs=np.concatenate(obs) if obs else np.zeros((0, *shape), np.uint8),
            actions=np.concatenate(actions) if actions else np.zeros(0, np.int64),
            rewards=np.concatenate(rewards) if rewards else np.zeros(0, np.float32),
            obs_offset=_offsets(lengths + 1),
            act_offset=_offsets(lengths),
        )

    def __len__(self) -> int:
        return len(self.episodes)

    @property
    def channel_names(self) -> list[str]:
        return [str(c) for c in self.meta["channel_names"]]

    def episode(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """Row ``row``'s views ``(L+1, C, V, V)`` and actions ``(L,)`` (views of the store)."""
        o, a, length = self.obs_offset[row], self.act_offset[row], self.lengths[row]
        return self.obs[o : o + length + 1], self.actions[a : a + length]

    def episode_rewards(self, row: int) -> np.ndarray:
        """Row ``row``'s rewards ``(L,)`` float32 (points of each step)."""
        a, length = self.act_offset[row], self.lengths[row]
        return self.rewards[a : a + length]

    def gather(self, rows: np.ndarray, starts: np.ndarray, steps: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Windows of ``steps`` steps of rows ``rows`` ``(B,)`` from steps ``starts`` ``(B,)`` on:
        views ``(B, steps, C, V, V)`` uint8, actions ``(B, steps)`` int64, rewards ``(B, steps)``
        float32. A window may reach its episode's final view (``start + steps - 1 <= L``), whose
        action is `NO_ACTION` and reward 0."""
        views = self.obs[(self.obs_offset[rows] + starts)[:, None] + np.arange(steps)]
        return (views, *_steps_of(self.act_offset, self.lengths, rows, starts, steps, self.actions,
                                  self.rewards))


class StreamedEpisodes:
    """Episodes of one trajectory file left on disk: `gather` reads each window's views from the
    file through h5py's chunk cache (`STREAM_CACHE_BYTES`); actions and rewards are in memory.

    Same rows and windows as `EpisodeStore.load(path, episodes)`. The file is opened on first use
    in each process (a DataLoader worker opens its own: HDF5 handles must not cross a fork).
    """

    def __init__(self, path: str | Path, episodes: Sequence[int] | np.ndarray):
        self.path = Path(path)
        self.episodes = np.asarray(episodes, dtype=np.int64).reshape(-1)
        with TrajectoryFile(self.path) as tf:
            self.meta = dict(tf.meta)
            table = _table_rows(tf, self.episodes)
            self.actions, self.rewards = self._read_steps(tf, table)
        self.lengths = table["length"].astype(np.int64)
        self.agent_ids = table["agent_id"].astype(np.int64)
        self.game_ids = table["game_id"].astype(np.int64)
        self.ended = _ended(table)
        self.obs_start = table["obs_start"].astype(np.int64)  # row of each episode's first view in /obs
        self.act_offset = _offsets(self.lengths)
        self._file: TrajectoryFile | None = None
        self._pid = -1

    @staticmethod
    def _read_steps(tf: TrajectoryFile, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Actions (int64) and rewards (float32) of the table's rows, concatenated in row order."""
        actions, rewards = [], []
        for row in table:
            s, length = int(row["step_start"]), int(row["length"])
            actions.append(tf.read_dataset("actions", s, s + length).astype(np.int64))
            rewards.append(tf.read_dataset("rewards", s, s + length).astype(np.float32))
        return (np.concatenate(actions) if actions else np.zeros(0, np.int64),
                np.concatenate(rewards) if rewards else np.zeros(0, np.float32))

    def __len__(self) -> int:
        return len(self.episodes)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_file": None, "_pid": -1}

    def _open(self) -> TrajectoryFile:
        if self._file is None or self._pid != os.getpid():
            self._file = TrajectoryFile(self.path, cache_bytes=STREAM_CACHE_BYTES)
            self._pid = os.getpid()
        return self._file

    def gather(self, rows: np.ndarray, starts: np.ndarray, steps: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As `EpisodeStore.gather`; one read of ``steps`` views per window."""
        tf = self._open()
        first = self.obs_start[rows] + starts
        views = np.empty((len(first), steps, *self.meta["obs_shape"]), dtype=np.uint8)
        for i, o in enumerate(first.tolist()):
            views[i] = tf.read_dataset("obs", o, o + steps)
        return (views, *_steps_of(self.act_offset, self.lengths, rows, starts, steps, self.actions,
                                  self.rewards))


class EpisodeShards:
    """The stores of several files as one store: rows of ``parts[0]`` first, then ``parts[1]``...;
    ``episodes`` ``(E,)`` are the ids the caller gives the rows (e.g. ids over all files)."""

    def __init__(self, parts: Sequence[Store], episodes: np.ndarray):
        if not parts:
            raise ValueError("EpisodeShards needs at least one store")
        self.parts = list(parts)
        self.meta = self.parts[0].meta
        self.episodes = np.asarray(episodes, dtype=np.int64)
        self.lengths = np.concatenate([p.lengths for p in self.parts])
        self.agent_ids = np.concatenate([p.agent_ids for p in self.parts])
        self.game_ids = np.concatenate([p.game_ids for p in self.parts])
        self.ended = np.concatenate([p.ended for p in self.parts])
        if len(self.episodes) != len(self.lengths):
            raise ValueError(f"{len(self.episodes)} episode ids for {len(self.lengths)} rows")
        self.first_row = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def rewards(self) -> np.ndarray:
        """Every step's rewards ``(S,)`` float32 (points), rows in order: each part holds its steps in
        memory, streamed or not."""
        return np.concatenate([np.zeros(0, dtype=np.float32), *(part.rewards for part in self.parts)])

    @property
    def channel_names(self) -> list[str]:
        return [str(c) for c in self.meta["channel_names"]]

    @property
    def streamed(self) -> bool:
        return any(isinstance(p, StreamedEpisodes) for p in self.parts)

    def gather(self, rows: np.ndarray, starts: np.ndarray, steps: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As `EpisodeStore.gather`: each part cuts its own windows, put back in batch order."""
        if len(self.parts) == 1:
            return self.parts[0].gather(rows, starts, steps)
        part = np.searchsorted(self.first_row, rows, side="right") - 1
        views = np.empty((len(rows), steps, *self.meta["obs_shape"]), dtype=np.uint8)
        actions = np.empty((len(rows), steps), dtype=np.int64)
        rewards = np.empty((len(rows), steps), dtype=np.float32)
        for k in np.unique(part).tolist():
            mine = part == k
            views[mine], actions[mine], rewards[mine] = self.parts[k].gather(
                rows[mine] - self.first_row[k], starts[mine], steps)
        return views, actions, rewards
