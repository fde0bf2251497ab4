"""The one windowing of episodes, shared by training and evaluation.

A window of ``T = num_frames`` steps starting at step ``s`` of an episode holds the views
``s .. s+T`` and the actions ``s .. s+T``: the model sees ``views[:T], actions[:T]`` (action t
is the one taken in view t) and is scored on ``views[1:]`` (the next view), ``actions[1:]``
(the next action) and the rewards of its T steps, as in the reference (Sorrel's
``sample_transformer``). An episode of ``L`` steps has ``L + 1`` views, so ``L - T + 1`` windows
(starts ``0 .. L-T``): the last ends on the game's final view, where no action is taken
(`rpg_worldmodel.data.stores.NO_ACTION`, not scored), so the last step's view and reward (in a
game that pays only at its goal, the only reward) are targets like every other step's.

- `rpg_worldmodel.data.stores`: where the steps come from (memory or the files, one or several).
- `window_plan` / `plan_windows`: which windows to cut and which of their positions to score.
  Training takes every window (``context="full"``); evaluation scores each transition once,
  from the same windows (``full``) or from non-overlapping ones (``stride``).
- `TrajectoryWindows`: the training dataset; `EpochBatchSampler`: its batch order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from rpg_env.trajectories.format import TrajectoryFormatError
from rpg_worldmodel.data.stores import EpisodeStore, Store, window_ends

CONTEXTS = ("full", "stride")


def window_plan(length: int, num_frames: int, context: str = "full") -> tuple[np.ndarray, np.ndarray]:
    """Window starts ``(W,)`` and scored positions ``(W, T)`` for an episode of ``length`` steps.

    Position ``p`` of the window starting at ``s`` predicts step ``s + p + 1`` from steps
    ``s .. s + p``; targets run over ``1 .. length`` (view ``length`` is the final one), each
    exactly once.

    ``full``: one window per start ``0 .. L-T`` (every window, as training uses them); all
    positions of the first scored, the last position of the others (every prediction but the
    first T-1 has T steps of history).
    ``stride``: windows at ``0, T, 2T, ...`` with all positions scored (history 1..T steps,
    as in the training loss; about T times cheaper), plus one last window for the tail.
    """
    t = num_frames
    num = length - t + 1
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
    if num < 1:
        return np.zeros(0, np.int64), np.zeros((0, t), bool)
    if context == "full":
        starts = np.arange(num)
        score = np.zeros((num, t), dtype=bool)
        score[0, :] = True
        score[1:, -1] = True
        return starts, score
    starts = np.arange(0, num, t)
    score = np.ones((len(starts), t), dtype=bool)
    covered = int(starts[-1]) + t  # last target step scored so far
    if covered < length:
        tail = num - 1
        targets = tail + np.arange(t) + 1
        starts = np.append(starts, tail)
        score = np.vstack([score, targets > covered])
    return starts, score


@dataclass(frozen=True)
class WindowPlan:
    """Windows over a store's rows, in row order then start order: ``rows`` ``(W,)``, ``starts``
    ``(W,)`` and ``score`` ``(W, T)`` (the positions to score, see `window_plan`)."""

    rows: np.ndarray
    starts: np.ndarray
    score: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)


def plan_windows(lengths: np.ndarray, num_frames: int, context: str = "full") -> WindowPlan:
    """`window_plan` of every episode of ``lengths`` ``(E,)``, concatenated in row order."""
    plans = [window_plan(int(n), num_frames, context) for n in lengths]
    rows = np.repeat(np.arange(len(plans), dtype=np.int64), [len(s) for s, _ in plans])
    if not plans:
        return WindowPlan(rows, np.zeros(0, np.int64), np.zeros((0, num_frames), bool))
    starts = np.concatenate([s for s, _ in plans]).astype(np.int64)
    return WindowPlan(rows, starts, np.concatenate([sc for _, sc in plans]))


class TrajectoryWindows(Dataset):
    """Every ``num_frames + 1``-step window inside the given episodes of trajectory files.

    ``TrajectoryWindows(path, episodes, num_frames)`` holds the episodes (file ids) of one file
    in memory; `TrajectoryWindows.of` takes any store (several files, streamed or in memory).
    ``dataset[i]`` -> ``{"views": uint8 (T+1, C, V, V), "actions": int64 (T+1,), "rewards":
    float32 (T+1,), "ends": bool (T+1,) (`rpg_worldmodel.data.stores.window_ends`), "agent_id": int64,
    "episode": int64, "start": int64}`` (``episode``: the
    store's id of the window's episode); ``dataset.get_batch(indices)`` returns the same keys
    stacked along a leading batch axis, as torch tensors (the DataLoader path uses it).

    ``extents_before``, when set (one (L, K, 4) array per row, indexed by the window's start: what
    the game's views before each start showed, `rpg_worldmodel.models.steps.store_extents`), adds
    the key ``extents_before`` (K, 4) int64 to every window. ``actions_modelled``, when set ((E,)
    bool, one per row: `rpg_worldmodel.data.shards.training_windows` from ``data.unmodelled_policies``),
    adds the key ``actions_modelled`` (bool): whether the window's actions are the action head's
    targets (they are the model's inputs either way).
    """

    def __init__(self, path: str | Path, episodes: np.ndarray, num_frames: int):
        self._use(EpisodeStore.load(path, episodes), num_frames)

    @classmethod
    def of(cls, store: Store, num_frames: int) -> TrajectoryWindows:
        """The windows of every row of ``store`` (an `EpisodeStore`, `StreamedEpisodes` or
        `EpisodeShards`): the same windows, in the same order, whichever store it is."""
        windows = cls.__new__(cls)
        windows._use(store, num_frames)
        return windows

    def _use(self, store: Store, num_frames: int) -> None:
        if num_frames < 1:
            raise ValueError(f"num_frames must be >= 1, got {num_frames}")
        self.num_frames = int(num_frames)
        self.store = store
        self.meta, self.episodes, self.agent_ids = store.meta, store.episodes, store.agent_ids
        self.plan = plan_windows(store.lengths, self.num_frames, "full")
        self.window_episode = self.episodes[self.plan.rows]
        self.window_start = self.plan.starts
        self.extents_before: list[np.ndarray] | None = None
        self.actions_modelled: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.plan)

    def end_repeats(self, extra: int) -> np.ndarray:
        """``(W,)`` how often each window appears in an epoch: ``1 + extra`` for a window that holds
        its game's end (the terminated flag), once for every other window. Where a game pays only
        as it ends (a goal reached), those few windows are all a reward or end head learns from."""
        steps = self.num_frames + 1
        holds_end = window_ends(self.store, self.plan.rows, self.plan.starts, steps).any(axis=1)
        return 1 + int(extra) * holds_end.astype(np.int64)

    def __getitem__(self, i: int) -> dict[str, np.ndarray | np.int64]:
        n = len(self)
        if not -n <= int(i) < n:
            raise IndexError(f"window {i} out of range ({n} windows)")
        batch = self.get_batch([int(i) % n])
        return {k: v[0].numpy() if v.dim() > 1 else np.int64(v[0].item()) for k, v in batch.items()}

    def get_batch(self, indices: np.ndarray | list[int]) -> dict[str, torch.Tensor]:
        """Stacked windows for ``indices`` (one gather per array instead of one slice per item)."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (idx.min() < -len(self) or idx.max() >= len(self)):
            raise IndexError(f"window indices out of range ({len(self)} windows)")
        idx = idx % max(len(self), 1)
        rows = self.plan.rows[idx]
        starts = self.window_start[idx]
        views, actions, rewards = self.store.gather(rows, starts, self.num_frames + 1)
        batch = {
            "views": torch.from_numpy(views),
            "actions": torch.from_numpy(actions),
            "rewards": torch.from_numpy(rewards),
            "ends": torch.from_numpy(window_ends(self.store, rows, starts, self.num_frames + 1)),
            "agent_id": torch.from_numpy(self.agent_ids[rows]),
            "episode": torch.from_numpy(self.window_episode[idx]),
            "start": torch.from_numpy(starts),
        }
        if self.extents_before is not None:
            batch["extents_before"] = torch.from_numpy(extents_at(self.extents_before, rows, starts))
        if self.actions_modelled is not None:
            batch["actions_modelled"] = torch.from_numpy(self.actions_modelled[rows])
        return batch

    # DataLoader's fetcher calls __getitems__ with a whole batch of indices when it exists.
    __getitems__ = get_batch


def extents_at(tables: list[np.ndarray], rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The extents before each window's start, ``(B, K, 4)`` int64: ``tables`` holds one ``(L, K, 4)``
    array per row (`rpg_worldmodel.models.steps.store_extents`), ``rows`` and ``starts`` ``(B,)``."""
    ends = [tables[r][s] for r, s in zip(rows.tolist(), starts.tolist(), strict=True)]
    empty = np.zeros((0, *tables[0].shape[1:]) if tables else (0, 0, 4), np.int32)
    return (np.stack(ends) if ends else empty).astype(np.int64)


def collate_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """DataLoader ``collate_fn`` for `TrajectoryWindows.__getitems__`: batches arrive stacked."""
    return batch


class EpochBatchSampler(Sampler[list[int]]):
    """Batches of window indices: a fresh permutation per epoch, seeded by ``(seed, epoch)``.

    The order is a pure function of ``(seed, step)``, so a run resumed at ``start_step``
    draws exactly the batches an uninterrupted run would have drawn. ``batch_size`` is the
    global batch; with ``world_size`` processes, rank ``rank`` gets its contiguous
    ``batch_size // world_size`` slice of it, so the ranks' slices in rank order are the
    single-process batch. ``repeats`` ``(num_windows,)``, optional: how often each window appears in
    an epoch (`TrajectoryWindows.end_repeats`); an epoch is then a permutation of that many draws.
    """

    def __init__(self, num_windows: int, batch_size: int, seed: int, start_step: int, num_steps: int,
                 rank: int = 0, world_size: int = 1, repeats: np.ndarray | None = None):
        if num_windows < 1:
            raise TrajectoryFormatError(
                "no training windows: the training episodes are all shorter than "
                "num_frames + 1 steps; record longer episodes or lower model.num_frames"
            )
        if world_size < 1 or not 0 <= rank < world_size or batch_size % world_size:
            raise ValueError(
                f"rank {rank} of world_size {world_size}: need 0 <= rank < world_size and a batch "
                f"size ({batch_size}) divisible by world_size"
            )
        self.num_windows, self.batch_size = int(num_windows), int(batch_size)
        self.seed, self.start_step, self.num_steps = int(seed), int(start_step), int(num_steps)
        self.rank, self.world_size = int(rank), int(world_size)
        self.draws = None if repeats is None else np.repeat(np.arange(self.num_windows), repeats)
        if self.draws is not None:
            self.num_windows = len(self.draws)  # an epoch's length in draws

    def _permutation(self, epoch: int) -> np.ndarray:
        order = np.random.default_rng([self.seed, epoch]).permutation(self.num_windows)
        return order if self.draws is None else self.draws[order]

    def __iter__(self) -> Iterator[list[int]]:
        per_rank = self.batch_size // self.world_size
        mine = slice(self.rank * per_rank, (self.rank + 1) * per_rank)
        cached_epoch, perm = -1, None
        for step in range(self.start_step, self.start_step + self.num_steps):
            first = step * self.batch_size
            batch: list[int] = []
            while len(batch) < self.batch_size:
                epoch, offset = divmod(first + len(batch), self.num_windows)
                if epoch != cached_epoch:
                    cached_epoch, perm = epoch, self._permutation(epoch)
                batch.extend(perm[offset : offset + self.batch_size - len(batch)].tolist())
            yield batch[mine]

    def __len__(self) -> int:
        return self.num_steps
