"""The world model's next-action head as a policy: seed 000's theory-of-mind predictor, playing.

`WorldModelPolicy` is an `rpg_env.policies.base.BatchPolicy`, so it goes wherever `rpg_env` takes a
policy: ``co_policy=``, ``record --policy rpg_worldmodel.policy:pretrained``, the experts'
evaluator. Per row it keeps the last ``num_frames`` (view, action) pairs of its episode and acts
as the head predicts the agent will act next: the arg-max (``sample=False``) or a draw from the
head's distribution.

The head predicts the action at t from the views and actions *up to t-1* (it was trained to
say what the agent will do next before seeing where it lands), so the policy acts one view late;
its first move of an episode, with no history yet, is uniformly random.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from rpg_env.policies.base import BatchPolicy
from rpg_worldmodel.checkpoint import LoadedCheckpoint, load_checkpoint
from rpg_worldmodel.shipped import PRETRAINED_NAME


class WorldModelPolicy(BatchPolicy):
    """Acts with a world model's next-action head (see the module docstring).

    :param loaded: a loaded checkpoint (`rpg_worldmodel.checkpoint.load_checkpoint`).
    :param sample: draw from the head's distribution instead of taking its arg-max.
    """

    def __init__(self, loaded: LoadedCheckpoint, sample: bool = False) -> None:
        super().__init__()
        self.model = loaded.model.eval()
        cfg = loaded.config.model
        self.view_shape = (cfg.num_channels, cfg.view_size, cfg.view_size)
        self.num_frames, self.sample = cfg.num_frames, bool(sample)
        self.policy_id = f"worldmodel-{'sampled' if sample else 'argmax'}"
        self._views: np.ndarray | None = None  # (B, T, C, V, V) the last views of each row's episode
        self._actions: np.ndarray | None = None  # (B, T) the actions taken in them
        self._filled: np.ndarray | None = None  # (B,) how many of the T slots hold history

    @classmethod
    def load(cls, checkpoint: str | Path = PRETRAINED_NAME, sample: bool = False) -> WorldModelPolicy:
        """The policy of a checkpoint (a run folder gives its best; ``"pretrained"``: the shipped one)."""
        return cls(load_checkpoint(checkpoint), sample=sample)

    def check_view_shape(self, shape: tuple[int, ...]) -> None:
        from rpg_base.errors import InputError

        if tuple(shape) != self.view_shape:
            raise InputError(f"the world model reads views {self.view_shape} but the env gives "
                             f"{tuple(shape)}; use the game it was trained on")

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        obs = np.asarray(obs)
        self.check_view_shape(obs.shape[1:])
        batch = len(obs)
        if self._views is None or len(self._views) != batch:
            self._views = np.zeros((batch, self.num_frames, *self.view_shape), dtype=np.uint8)
            self._actions = np.zeros((batch, self.num_frames), dtype=np.int64)
            self._filled = np.zeros(batch, dtype=np.int64)
        if episode_start is not None:
            self._filled[np.asarray(episode_start, dtype=bool)] = 0
        actions = self.rng.integers(0, self.model.cfg.num_actions, size=batch)
        for length in np.unique(self._filled[self._filled > 0]):
            rows = np.flatnonzero(self._filled == length)
            logits = self._head(rows, int(length))
            if self.sample:
                probs = torch.softmax(logits, -1).numpy()
                draws = self.rng.random((len(rows), 1))
                actions[rows] = np.minimum((draws > probs.cumsum(1)).sum(1), probs.shape[1] - 1)
            else:
                actions[rows] = logits.argmax(-1).numpy()
        self._push(obs.astype(np.uint8), actions)
        return actions.astype(np.int64)

    def replace_last_actions(self, actions: np.ndarray) -> None:
        """Record ``actions`` ``(B,)`` as those taken in the last views instead of the policy's own
        (to follow another player's history, as when scoring agreement with an expert)."""
        self._actions[:, -1] = np.asarray(actions, dtype=np.int64)

    @torch.no_grad()
    def _head(self, rows: np.ndarray, length: int) -> torch.Tensor:
        """Action logits ``(len(rows), A)`` after the last ``length`` steps of history of ``rows``."""
        views = torch.as_tensor(self._views[rows, -length:]).float()
        actions = torch.as_tensor(self._actions[rows, -length:])
        return self.model(views, actions).action[:, -1].float()

    def _push(self, obs: np.ndarray, actions: np.ndarray) -> None:
        self._views = np.roll(self._views, -1, axis=1)
        self._actions = np.roll(self._actions, -1, axis=1)
        self._views[:, -1], self._actions[:, -1] = obs, actions
        self._filled = np.minimum(self._filled + 1, self.num_frames)


def pretrained() -> WorldModelPolicy:
    """The shipped world model's head, arg-max (the entry point ``rpg_worldmodel.policy:pretrained``)."""
    return WorldModelPolicy.load(PRETRAINED_NAME)


def pretrained_sampled() -> WorldModelPolicy:
    """The shipped world model's head, sampled (``rpg_worldmodel.policy:pretrained_sampled``)."""
    return WorldModelPolicy.load(PRETRAINED_NAME, sample=True)
