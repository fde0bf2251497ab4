"""Baselines scored on the same windows as the model: copy, motion oracle, majority action.

`fit_baselines` fits them on the checkpoint's training split only (never on evaluated episodes).

Views are handled as integer cell codes ``(N, V, V)`` (the arg-max of the one-hot planes;
class order is the file's ``channel_names``). A baseline makes a hard prediction of the next
view; `CalibratedCells` turns it into calibrated probabilities (fitted on the *training*
split only) so its cross-entropy is finite and fair.

The motion oracle (`shift_view`) knows the action the agent took and the movement rule (the
game's one movement table, `rpg_env.game.constants`, looked up by the file's action names),
applied to what the agent saw at t: the view scrolls one cell opposite to the move, the agent
stays in the centre, the cell it left becomes empty; if the target cell at t holds a wall or
another agent, the move is predicted blocked and the view stays as it is. It does *not* know
the outcome (where the agent really ended up), the co-player's move, or the items that spawn.
Rows scrolled into view are unknown to it; their probabilities come from the training split,
conditioned on the class of their inward neighbour (a wall beyond a wall is likely).
For the co-player (agent 1, which moves after the learner) the blocking rule is an
approximation: the learner may leave or enter its target cell first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from rpg_env.errors import InputError
from rpg_env.game.constants import vocabulary
from rpg_worldmodel.data import EpisodeStore, kind_values


def views_to_codes(views: np.ndarray) -> np.ndarray:
    """``(..., C, V, V)`` one-hot planes -> ``(..., V, V)`` int64 class codes (arg-max)."""
    return np.asarray(views).argmax(axis=-3).astype(np.int64)


def action_deltas(action_names: Sequence[str]) -> np.ndarray:
    """``(A, 2)`` (row, col) moves of the file's action names, from the game's movement table."""
    try:
        return vocabulary().deltas_for(list(action_names))
    except ValueError as exc:
        raise InputError(f"the motion oracle cannot be used on this file: {exc}") from None


def shift_view(
    codes: np.ndarray,
    actions: np.ndarray,
    deltas: np.ndarray,
    *,
    empty: int,
    agent: int,
    blocking: Sequence[int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The motion oracle's next view.

    Args:
        codes: ``(N, V, V)`` int class codes of the view at t (odd ``V``, agent at the centre).
        actions: ``(N,)`` int action taken at t.
        deltas: ``(A, 2)`` displacement of each action (see `action_deltas`).
        empty, agent: the class codes of an empty cell and of an agent.
        blocking: class codes a move cannot enter (the agent stays; e.g. wall and agent).

    Returns:
        pred ``(N, V, V)`` int64 predicted codes, revealed ``(N, V, V)`` bool (cells scrolled
        into view: their value in ``pred`` is a placeholder, copied from the inward neighbour),
        blocked ``(N,)`` bool (moves predicted blocked).
    """
    codes = np.asarray(codes).astype(np.int64)
    actions = np.asarray(actions).astype(np.int64)
    n, side, side2 = codes.shape
    if side != side2 or side % 2 == 0 or side < 3:
        raise ValueError(f"views must be square with an odd side >= 3, got {side} x {side2}")
    if actions.shape != (n,):
        raise ValueError(f"actions must be ({n},), got {actions.shape}")
    if actions.size and (actions.min() < 0 or actions.max() >= len(deltas)):
        raise ValueError(f"actions must be in 0..{len(deltas) - 1}")
    r = side // 2
    d = deltas[actions]  # (N, 2)
    target = codes[np.arange(n), r + d[:, 0], r + d[:, 1]]
    blocked = np.isin(target, np.asarray(blocking, dtype=np.int64))
    moved = ~blocked
    # new[i, j] = old[i + dr, j + dc]; indices out of range are newly revealed cells.
    rows = np.arange(side)[None, :, None] + d[:, 0, None, None] * moved[:, None, None]
    cols = np.arange(side)[None, None, :] + d[:, 1, None, None] * moved[:, None, None]
    revealed = (rows < 0) | (rows >= side) | (cols < 0) | (cols >= side)
    pred = codes[np.arange(n)[:, None, None], np.clip(rows, 0, side - 1), np.clip(cols, 0, side - 1)]
    idx = np.flatnonzero(moved)
    pred[idx, r, r] = agent
    pred[idx, r - d[idx, 0], r - d[idx, 1]] = empty
    return pred, revealed, blocked


def copy_view(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The copy-last-view baseline: ``(pred, revealed)`` with nothing revealed."""
    codes = np.asarray(codes).astype(np.int64)
    return codes.copy(), np.zeros(codes.shape, dtype=bool)


class CalibratedCells:
    """Calibrated cell probabilities for a hard view predictor, fitted on training windows.

    Known cells: ``P(true | predicted class)``. Revealed cells: ``P(true | class of the
    predicted inward neighbour)`` (``pred`` holds the neighbour's class there, as
    `shift_view` leaves it). Both tables use add-``alpha`` (Dirichlet) smoothing, so every
    probability is positive and the cross-entropy finite.
    """

    def __init__(self, num_classes: int, alpha: float = 0.5) -> None:
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0 so every probability is positive, got {alpha}")
        self.num_classes = num_classes
        self.alpha = alpha
        self.counts = np.zeros((2, num_classes, num_classes), dtype=np.float64)

    def update(self, pred: np.ndarray, revealed: np.ndarray, target: np.ndarray) -> None:
        """Add training windows: ``pred``, ``revealed``, ``target`` all ``(N, V, V)``."""
        region = np.asarray(revealed, dtype=np.int64).reshape(-1)
        np.add.at(self.counts, (region, np.asarray(pred).reshape(-1), np.asarray(target).reshape(-1)), 1.0)

    @property
    def table(self) -> np.ndarray:
        """``(2, C, C)`` row-normalized probabilities ``[region, conditioning class, true class]``."""
        smoothed = self.counts + self.alpha
        return smoothed / smoothed.sum(-1, keepdims=True)

    def log_probs(self, pred: np.ndarray, revealed: np.ndarray) -> np.ndarray:
        """``(N, C, V, V)`` float32 log-probabilities of every cell's class."""
        log_table = np.log(self.table).astype(np.float32)
        out = log_table[np.asarray(revealed, dtype=np.int64), np.asarray(pred, dtype=np.int64)]
        return np.moveaxis(out, -1, 1)


class ActionFrequencies:
    """Majority-action baseline (``order=0``) or previous-action baseline (``order=1``).

    ``order=0``: ``P(a_{t+1})`` from the training split; its arg-max is the majority action.
    ``order=1``: ``P(a_{t+1} | a_t)`` (a first-order Markov chain over the agent's own actions).
    Both with add-``alpha`` smoothing.
    """

    def __init__(self, num_actions: int, order: int = 0, alpha: float = 0.5) -> None:
        if order not in (0, 1):
            raise ValueError(f"order must be 0 (majority) or 1 (previous action), got {order}")
        self.num_actions, self.order, self.alpha = num_actions, order, alpha
        self.counts = np.zeros((num_actions if order else 1, num_actions), dtype=np.float64)

    def update(self, previous: np.ndarray, target: np.ndarray) -> None:
        """Add training pairs (action at t, action at t+1), both ``(N,)``."""
        rows = np.asarray(previous, dtype=np.int64) if self.order else np.zeros(len(target), np.int64)
        np.add.at(self.counts, (rows, np.asarray(target, dtype=np.int64)), 1.0)

    def log_probs(self, previous: np.ndarray) -> np.ndarray:
        """``(N, A)`` float32 log-probabilities of the next action."""
        smoothed = self.counts + self.alpha
        log_table = np.log(smoothed / smoothed.sum(-1, keepdims=True)).astype(np.float32)
        rows = np.asarray(previous, dtype=np.int64) if self.order else np.zeros(len(previous), np.int64)
        return log_table[rows]

    @property
    def majority(self) -> int:
        return int(self.counts.sum(0).argmax())


# ---------------------------------------------------------------------------- fitted on training data
MOTION_ORACLE_TEXT = (
    "the last view shifted by the taken action (blocked when the target cell at t is a wall or an "
    "agent; the agent stays centred, the cell it left becomes empty); cells scrolled into view and "
    "all cell probabilities calibrated on the training split")
REWARD_RULE_TEXT = (
    "the points of the kind in the cell the action enters at t (empty or an agent: 0; a wall: its "
    "penalty); P(true class | rule class) calibrated on the training split")


class RewardRule:
    """The reward read off the view at t and the action: the points of the kind in the cell the
    move enters (`rpg_worldmodel.data.kind_values`: 0 for an empty cell or an agent, the penalty
    for a wall), as a class among ``values``. ``P(true class | rule class)`` is counted on the
    training split (add-``alpha`` smoothing), so its cross-entropy is finite and calibrated.

    For the learner, which moves first, the rule is the game's exact rule: spawns come after the
    moves, and the co-player has not moved yet. A co-player's stream breaks it when the learner
    entered or left the co-player's target cell first.
    """

    def __init__(self, meta: dict, values: Sequence[float], alpha: float = 0.5) -> None:
        self.value_by_code = kind_values(meta)
        self.deltas = action_deltas([str(a) for a in meta["action_names"]])
        self.values = np.asarray(values, dtype=np.float64)
        self.alpha = alpha
        self.counts = np.zeros((len(self.values), len(self.values)), dtype=np.float64)

    def classes(self, rewards: np.ndarray) -> np.ndarray:
        """Points -> class index among ``values`` (InputError naming an unknown reward)."""
        rewards = np.asarray(rewards, dtype=np.float64)
        match = np.isclose(rewards[..., None], self.values, rtol=0.0, atol=1e-4)
        if not match.any(-1).all():
            raise InputError(f"reward {rewards[~match.any(-1)].flat[0]:g} is not among the reward classes "
                             f"{self.values.tolist()}; the file comes from a game with other values")
        return match.argmax(-1)

    def predict(self, codes: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """``(N, V, V)`` codes at t and ``(N,)`` actions -> ``(N,)`` the rule's reward class."""
        r = codes.shape[-1] // 2
        d = self.deltas[np.asarray(actions, dtype=np.int64)]
        target = codes[np.arange(len(codes)), r + d[:, 0], r + d[:, 1]]
        return self.classes(self.value_by_code[target])

    def update(self, codes: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        np.add.at(self.counts, (self.predict(codes, actions), self.classes(rewards)), 1.0)

    def log_probs(self, codes: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """``(N, K)`` float32 log-probabilities of the reward classes."""
        smoothed = self.counts + self.alpha
        table = np.log(smoothed / smoothed.sum(-1, keepdims=True)).astype(np.float32)
        return table[self.predict(codes, actions)]


@dataclass
class FittedBaselines:
    """Baselines fitted on the checkpoint's training split (never on evaluated episodes)."""

    channel_names: list[str]
    action_names: list[str]
    copy_cal: CalibratedCells
    shift_cal: CalibratedCells
    majority: ActionFrequencies
    previous: ActionFrequencies
    train_episodes_used: int
    reward_rule: RewardRule | None = None  # with a model that predicts rewards

    @property
    def codes(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.channel_names)}

    def shift(self, codes: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`shift_view` with the file's vocabulary: walls and agents block a move."""
        c = self.codes
        return shift_view(codes, actions, action_deltas(self.action_names), empty=c["empty"],
                          agent=c["agent"], blocking=[c["wall"], c["agent"]])


def fit_baselines(train_path: str | Path, train_episodes: Sequence[int], max_episodes: int = 400,
                  seed: int = 0, reward_values: Sequence[float] = ()) -> FittedBaselines:
    """Fit the calibrated view baselines, the action frequencies and (given the model's
    ``reward_values``) the reward rule on training episodes.

    At most ``max_episodes`` training episodes (a seeded random subset) are read; counts of
    a few hundred episodes pin the tables down far below the evaluation's noise.
    """
    chosen = np.asarray(sorted(int(i) for i in train_episodes), dtype=np.int64)
    if len(chosen) > max_episodes:
        chosen = np.sort(np.random.default_rng(seed).choice(chosen, max_episodes, replace=False))
    store = EpisodeStore.load(train_path, chosen)
    channel_names = store.channel_names
    action_names = [str(a) for a in store.meta["action_names"]]
    missing = {"empty", "wall", "agent"} - set(channel_names)
    if missing:
        raise InputError(f"{train_path}: channel_names {channel_names} lack {sorted(missing)}; "
                         "the baselines need them")
    fb = FittedBaselines(channel_names, action_names, CalibratedCells(len(channel_names)),
                         CalibratedCells(len(channel_names)), ActionFrequencies(len(action_names), 0),
                         ActionFrequencies(len(action_names), 1), len(chosen),
                         RewardRule(store.meta, reward_values) if len(reward_values) else None)
    for row in tqdm(range(len(store)), desc="fit baselines (train split)", unit="episode", leave=False):
        obs, actions = store.episode(row)
        length = len(actions)
        if length < 1:
            continue
        codes = views_to_codes(obs)
        now, nxt = codes[:length], codes[1 : length + 1]
        fb.copy_cal.update(*copy_view(now), nxt)
        pred, revealed, _ = fb.shift(now, actions)
        fb.shift_cal.update(pred, revealed, nxt)
        if length > 1:
            fb.majority.update(actions[:-1], actions[1:])
            fb.previous.update(actions[:-1], actions[1:])
        if fb.reward_rule is not None:
            fb.reward_rule.update(now, actions, store.episode_rewards(row))
    return fb


def baselines_summary(fb: FittedBaselines, fitted_on: str | Path) -> dict:
    """JSON description of fitted baselines: what each knows and where it was fitted."""
    return {"fitted_on": str(fitted_on), "train_episodes_used": fb.train_episodes_used,
            "majority_action": fb.action_names[fb.majority.majority],
            "copy": "the last view, with probabilities calibrated on the training split",
            "motion_oracle": MOTION_ORACLE_TEXT,
            "previous_action": "P(a_t+1 | a_t) from the training split",
            "reward_rule": REWARD_RULE_TEXT if fb.reward_rule is not None else None}
