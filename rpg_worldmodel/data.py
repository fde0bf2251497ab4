"""Training windows from trajectory files, and the reference input masks.

The trajectory file (``rpg_env.trajectories``, schema in docs/trajectory-format.md) is the only
contract with the game: nothing here imports the environment.

A window of ``T = num_frames`` steps starting at step ``s`` of an episode holds the views
``s .. s+T`` and the actions ``s .. s+T``: the model sees ``views[:T], actions[:T]`` (action t
is the one taken in view t) and is scored on ``views[1:]`` (the next view) and ``actions[1:]``
(the next action), as in the reference (Sorrel's ``sample_transformer``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from rpg_env.trajectories import TrajectoryFile, TrajectoryFormatError
from rpg_worldmodel.config import MASK_KINDS, ConfigError, ModelConfig

__all__ = [
    "MASK_KINDS",
    "MASKED_CHANNELS",
    "apply_input_mask",
    "TrajectoryWindows",
    "EpochBatchSampler",
    "check_data_matches",
    "view_codes",
]

#: Channel hidden by each whole-channel mask (channel order: empty, wall, gem, bone, food, agent).
MASKED_CHANNELS = {"wall": 1, "gem": 2, "bone": 3, "food": 4}
EXPECTED_CHANNELS = ("empty", "wall", "gem", "bone", "food", "agent")


def apply_input_mask(
    views: torch.Tensor, kind: str, prob: float = 0.15, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Hide part of the input views, as the reference's masking probes do (returns a new tensor).

    ``views``: (B, T, C, V, V) float one-hot. ``kind``:

    - ``"none"``: unchanged;
    - ``"random_cells"``: every (b, t, y, x) cell independently hidden with probability ``prob``
      (all its channels zeroed, so a hidden cell reads as "unknown", not as some entity);
    - ``"gem" | "bone" | "food" | "wall"``: that entity's channel zeroed everywhere.

    ``generator`` makes the random mask reproducible (it must live on ``views``' device).
    """
    if kind not in MASK_KINDS:
        raise ValueError(f"unknown mask kind {kind!r}; choose one of {list(MASK_KINDS)}")
    if views.dim() != 5:
        raise ValueError(f"views must be (B, T, C, V, V), got shape {tuple(views.shape)}")
    if kind == "none":
        return views
    if kind == "random_cells":
        if not 0.0 <= prob <= 1.0:
            raise ValueError(f"prob must be in [0, 1], got {prob}")
        b, t, _, h, w = views.shape
        keep = torch.rand((b, t, 1, h, w), generator=generator, device=views.device) >= prob
        return views * keep.to(views.dtype)
    masked = views.clone()
    masked[:, :, MASKED_CHANNELS[kind]] = 0
    return masked


def view_codes(views: torch.Tensor) -> torch.Tensor:
    """One-hot views (..., C, V, V) -> entity codes (..., V, V) int64 (the channel that is set)."""
    return views.argmax(-3)


def check_data_matches(
    model_cfg: ModelConfig,
    data_meta: dict,
    *,
    data_path: str | Path = "the data file",
    model_source: str = "the model config",
) -> None:
    """Raise ``ConfigError`` naming both sides when a trajectory file does not fit a model config."""
    expected = (model_cfg.num_channels, model_cfg.view_size, model_cfg.view_size)
    got = tuple(int(x) for x in data_meta["obs_shape"])
    problems = []
    if got != expected:
        problems.append(f"views {got} in {data_path} but {expected} in {model_source}")
    n_actions = len(data_meta["action_names"])
    if n_actions != model_cfg.num_actions:
        problems.append(
            f"{n_actions} actions in {data_path} but model.num_actions={model_cfg.num_actions} in "
            f"{model_source}"
        )
    channels = tuple(data_meta.get("channel_names", EXPECTED_CHANNELS))
    if channels != EXPECTED_CHANNELS[: len(channels)] or len(channels) != model_cfg.num_channels:
        problems.append(
            f"channels {list(channels)} in {data_path}; the world model expects {list(EXPECTED_CHANNELS)}"
        )
    if problems:
        raise ConfigError(
            "trajectory file and model do not match: "
            + "; ".join(problems)
            + ". Record data with the same game settings, or set model.view_size / "
            "model.num_actions to the file's values for a new model."
        )


class TrajectoryWindows(Dataset):
    """Every ``num_frames + 1``-view window inside the given episodes of a trajectory file.

    The episodes' views and actions are read once and cached in memory (uint8; 100-step
    episodes of 6x9x9 views are ~50 KB each), so items cost a slice, not an HDF5 decompression.

    ``dataset[i]`` -> ``{"views": uint8 (T+1, C, V, V), "actions": int64 (T+1,), "agent_id": int64,
    "episode": int64, "start": int64}``; ``dataset.get_batch(indices)`` returns the same keys
    stacked along a leading batch axis, as torch tensors (the DataLoader path uses it).
    """

    def __init__(self, path: str | Path, episodes: np.ndarray, num_frames: int):
        if num_frames < 1:
            raise ValueError(f"num_frames must be >= 1, got {num_frames}")
        self.path = Path(path)
        self.num_frames = int(num_frames)
        episodes = np.asarray(episodes, dtype=np.int64).reshape(-1)
        with TrajectoryFile(self.path) as tf:
            self.meta = dict(tf.meta)
            if episodes.size and (episodes.min() < 0 or episodes.max() >= len(tf)):
                raise IndexError(
                    f"episode ids must be in 0..{len(tf) - 1} for {self.path}, "
                    f"got {episodes.min()}..{episodes.max()}"
                )
            self.episodes = episodes
            table = tf.episodes[episodes]
            # Windows need T+1 actions, i.e. T+1 steps: the reader's k = T+1 windows.
            index = tf.window_index(self.num_frames + 1, episodes)
            obs, actions = [], []
            for i in episodes:
                ep = tf.episode(int(i))
                obs.append(np.asarray(ep["obs"], dtype=np.uint8))
                actions.append(np.asarray(ep["actions"], dtype=np.int64))
        lengths = table["length"].astype(np.int64)
        self.agent_ids = table["agent_id"].astype(np.int64)
        obs_offset = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]]).astype(np.int64)
        act_offset = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        shape = tuple(self.meta["obs_shape"])
        self._obs = np.concatenate(obs) if obs else np.zeros((0, *shape), np.uint8)
        self._actions = np.concatenate(actions) if actions else np.zeros(0, np.int64)
        # Map file episode ids to their position among the cached episodes.
        position = {int(e): j for j, e in enumerate(episodes)}
        local = np.array([position[int(e)] for e in index[:, 0]], dtype=np.int64)
        self.window_episode = index[:, 0]
        self.window_start = index[:, 1]
        self._window_agent = self.agent_ids[local] if len(local) else np.zeros(0, np.int64)
        self._obs_start = obs_offset[local] + self.window_start if len(local) else np.zeros(0, np.int64)
        self._act_start = act_offset[local] + self.window_start if len(local) else np.zeros(0, np.int64)
        self._steps = np.arange(self.num_frames + 1)

    def __len__(self) -> int:
        return len(self.window_start)

    def _check(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"window {i} out of range ({n} windows)")
        return i % n

    def __getitem__(self, i: int) -> dict[str, np.ndarray | np.int64]:
        i = self._check(int(i))
        o, a = self._obs_start[i], self._act_start[i]
        return {
            "views": self._obs[o : o + self.num_frames + 1],
            "actions": self._actions[a : a + self.num_frames + 1],
            "agent_id": np.int64(self._window_agent[i]),
            "episode": np.int64(self.window_episode[i]),
            "start": np.int64(self.window_start[i]),
        }

    def get_batch(self, indices: np.ndarray | list[int]) -> dict[str, torch.Tensor]:
        """Stacked windows for ``indices`` (one gather per array instead of one slice per item)."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (idx.min() < -len(self) or idx.max() >= len(self)):
            raise IndexError(f"window indices out of range ({len(self)} windows)")
        idx = idx % max(len(self), 1)
        return {
            "views": torch.from_numpy(self._obs[self._obs_start[idx, None] + self._steps]),
            "actions": torch.from_numpy(self._actions[self._act_start[idx, None] + self._steps]),
            "agent_id": torch.from_numpy(self._window_agent[idx]),
            "episode": torch.from_numpy(self.window_episode[idx]),
            "start": torch.from_numpy(self.window_start[idx]),
        }

    # DataLoader's fetcher calls __getitems__ with a whole batch of indices when it exists.
    __getitems__ = get_batch


def collate_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """DataLoader ``collate_fn`` for `TrajectoryWindows.__getitems__`: batches arrive stacked."""
    return batch


class EpochBatchSampler(Sampler[list[int]]):
    """Batches of window indices: a fresh permutation per epoch, seeded by ``(seed, epoch)``.

    The order is a pure function of ``(seed, step)``, so a run resumed at ``start_step``
    draws exactly the batches an uninterrupted run would have drawn.
    """

    def __init__(self, num_windows: int, batch_size: int, seed: int, start_step: int, num_steps: int):
        if num_windows < 1:
            raise TrajectoryFormatError(
                "no training windows: the training episodes are all shorter than "
                "num_frames + 1 steps; record longer episodes or lower model.num_frames"
            )
        self.num_windows, self.batch_size = int(num_windows), int(batch_size)
        self.seed, self.start_step, self.num_steps = int(seed), int(start_step), int(num_steps)

    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_windows)

    def __iter__(self) -> Iterator[list[int]]:
        cached_epoch, perm = -1, None
        for step in range(self.start_step, self.start_step + self.num_steps):
            first = step * self.batch_size
            batch: list[int] = []
            while len(batch) < self.batch_size:
                epoch, offset = divmod(first + len(batch), self.num_windows)
                if epoch != cached_epoch:
                    cached_epoch, perm = epoch, self._permutation(epoch)
                batch.extend(perm[offset : offset + self.batch_size - len(batch)].tolist())
            yield batch

    def __len__(self) -> int:
        return self.num_steps
