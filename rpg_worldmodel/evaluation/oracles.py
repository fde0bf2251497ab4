"""The hard predictors: the game's rules applied to what the agent saw, with no learning.

Views are integer cell codes ``(N, V, V)`` (the arg-max of the one-hot planes; class order is
the file's ``channel_names``).

* copy (`copy_view`): the last view.
* the motion oracle (`shift_view`) knows the action the agent took and the movement rule (the
  game's one movement table, `rpg_env.game.constants`, looked up by the file's action names),
  applied to what the agent saw at t: the view scrolls one cell opposite to the move, the agent
  stays in the centre, the cell it left becomes empty; if the target cell at t holds a wall or
  another agent, the move is predicted blocked and the view stays as it is. It does *not* know
  the outcome, the co-player's move, or the items that spawn; rows scrolled into view are
  unknown to it.
* the memory oracle (`memory_predictions`) is the motion oracle plus everything the agent has
  seen so far in the episode, placed in world coordinates by following the agent's own moves (a
  move happens unless the target cell at t holds a wall or an agent: exact for the learner,
  which moves first). A cell scrolling into view that was seen before is predicted as it was
  last seen; the agent's own cell is remembered as empty (the agent is always drawn in the
  centre and has left a cell by the time it scrolls back into view).

`rpg_worldmodel.evaluation.baselines` turns these hard predictions into calibrated
probabilities (fitted on the training split), per *region*: in view, never seen, and seen 1-5,
6-20 or 21+ steps before (`AGE_BUCKETS`), which is where the game's spawn and pick-up rules
show: an empty cell seen long ago has had more turns to spawn an item.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rpg_base.errors import InputError
from rpg_env.game.constants import vocabulary


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
    known: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The motion oracle's next view.

    Args:
        codes: ``(N, V, V)`` int class codes of the view at t (odd ``V``, agent at the centre).
        actions: ``(N,)`` int action taken at t.
        deltas: ``(A, 2)`` displacement of each action (see `action_deltas`).
        empty, agent: the class codes of an empty cell and of an agent.
        blocking: class codes a move cannot enter (the agent stays; e.g. wall and agent).
        known: ``(N, V, V)`` bool, False where ``codes`` holds a guess (a cell never seen, in a
            rolled-out view): a guessed cell never blocks a move. None: every cell is known.

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
    if known is not None:
        blocked &= known[np.arange(n), r + d[:, 0], r + d[:, 1]]
    pred, revealed = scroll(codes, d * ~blocked[:, None])
    idx = np.flatnonzero(~blocked)
    pred[idx, r, r] = agent
    pred[idx, r - d[idx, 0], r - d[idx, 1]] = empty
    return pred, revealed, blocked


def scroll(grids: np.ndarray, moves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``grids`` (N, V, V) as seen after the agent moved by ``moves`` (N, 2) (row, col): ``new[i, j]
    = old[i + dr, j + dc]``; ``revealed`` (N, V, V) marks the cells scrolled into view, whose value
    is a placeholder copied from the inward neighbour."""
    n, side = grids.shape[0], grids.shape[-1]
    rows = np.arange(side)[None, :, None] + moves[:, 0, None, None]
    cols = np.arange(side)[None, None, :] + moves[:, 1, None, None]
    revealed = (rows < 0) | (rows >= side) | (cols < 0) | (cols >= side)
    new = grids[np.arange(n)[:, None, None], np.clip(rows, 0, side - 1), np.clip(cols, 0, side - 1)]
    return new, revealed


def copy_view(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The copy-last-view baseline: ``(pred, revealed)`` with nothing revealed."""
    codes = np.asarray(codes).astype(np.int64)
    return codes.copy(), np.zeros(codes.shape, dtype=bool)


#: Steps since a cell was last seen, as buckets ``(first, last)`` (``None``: no upper end).
AGE_BUCKETS: tuple[tuple[int, int | None], ...] = ((1, 5), (6, 20), (21, None))
REGION_IN_VIEW, REGION_NEVER_SEEN = 0, 1
#: Regions of the memory oracle's calibration: in view, never seen, then one per age bucket.
NUM_REGIONS = 2 + len(AGE_BUCKETS)


def age_bucket(age: np.ndarray) -> np.ndarray:
    """Index into `AGE_BUCKETS` of each age (steps since last seen, >= 1)."""
    edges = np.array([last for _, last in AGE_BUCKETS[:-1]])
    return np.searchsorted(edges, np.asarray(age), side="left")


def memory_predictions(codes: np.ndarray, actions: np.ndarray, deltas: np.ndarray, *, empty: int, agent: int,
                       blocking: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The memory oracle's hard prediction of every next view of one episode.

    Args:
        codes: ``(L + 1, V, V)`` class codes of the episode's views.
        actions: ``(L,)`` the actions taken.
        deltas, empty, agent, blocking: as for `shift_view`.

    Returns ``pred`` ``(L, V, V)`` int64 (the predicted codes of views 1..L; a never-seen cell holds
    the motion oracle's placeholder, its inward neighbour) and ``region`` ``(L, V, V)`` int64
    (`REGION_IN_VIEW`, `REGION_NEVER_SEEN`, or ``2 + age bucket`` for a remembered cell).
    """
    codes = np.asarray(codes).astype(np.int64)
    length, side = len(actions), codes.shape[-1]
    r = side // 2
    pred, revealed, blocked = shift_view(codes[:length], actions, deltas, empty=empty, agent=agent,
                                         blocking=blocking)
    region = np.where(revealed, REGION_NEVER_SEEN, REGION_IN_VIEW).astype(np.int64)
    size = 2 * (length + 1) + side  # the agent moves at most one cell a step
    seen = np.full((size, size), -1, dtype=np.int64)
    when = np.zeros((size, size), dtype=np.int64)
    row = col = size // 2
    moves = np.asarray(deltas)[np.asarray(actions, dtype=np.int64)] * ~blocked[:, None]
    for t in range(length):
        window = (slice(row - r, row + r + 1), slice(col - r, col + r + 1))
        seen[window] = codes[t]
        seen[row, col] = empty
        when[window] = t
        row, col = row + int(moves[t, 0]), col + int(moves[t, 1])
        if not revealed[t].any():
            continue
        window = (slice(row - r, row + r + 1), slice(col - r, col + r + 1))
        known = revealed[t] & (seen[window] >= 0)
        pred[t][known] = seen[window][known]
        region[t][known] = 2 + age_bucket(t + 1 - when[window][known])
    return pred, region


class RolledMemory:
    """The memory oracle rolled out open loop (`rpg_worldmodel.evaluation.rollouts`): it reads the real
    opening, then predicts each next view from its own previous one, as `memory_predictions` does from
    the real one: the motion rule, and a cell scrolling into view that it has seen before (in the
    opening, or carried in its own view since) predicted as it was last seen. A placeholder for a
    cell it never saw stays unknown while it is carried in view (its region stays `REGION_NEVER_SEEN`),
    never blocks a move (it is a copy of its neighbour, not a sighting) and is never remembered, so
    the oracle only ever recalls what the real opening showed it. A remembered cell's age counts from
    the last view that showed it, its own views included (they carry it unchanged).

    ``opening`` (S, T, V, V) class codes of the real views, ``opening_actions`` (S, T - 1) the actions
    between them; `step` then takes the action at the last view held and returns ``(pred, region)``,
    both (S, V, V), for `CalibratedCells.log_probs`; at most ``horizon`` steps.
    """

    def __init__(self, opening: np.ndarray, opening_actions: np.ndarray, horizon: int, deltas: np.ndarray, *,
                 empty: int, agent: int, blocking: Sequence[int]):
        opening = np.asarray(opening).astype(np.int64)
        opening_actions = np.asarray(opening_actions)
        if opening.ndim != 4 or opening_actions.shape != (len(opening), opening.shape[1] - 1):
            raise ValueError(f"an opening is (S, T, V, V) views and (S, T - 1) actions between them, got "
                             f"{opening.shape} and {opening_actions.shape}")
        s, t, side = opening.shape[0], opening.shape[1], opening.shape[-1]
        self.deltas, self.empty, self.agent, self.blocking = np.asarray(deltas), empty, agent, blocking
        size = 2 * (t + horizon + 1) + side  # the agent moves at most one cell a step
        self.seen = np.full((s, size, size), -1, dtype=np.int32)
        self.when = np.zeros((s, size, size), dtype=np.int32)
        self.at = np.full((s, 2), size // 2, dtype=np.int64)
        self.offsets = np.arange(side) - side // 2
        self.step_index, self.last_step, self.horizon = 0, t + horizon, horizon
        for k in range(t):
            self.view, self.known = opening[:, k], np.ones(opening[:, k].shape, dtype=bool)
            self._write()
            if k < t - 1:
                _, _, blocked = shift_view(self.view, opening_actions[:, k], self.deltas, empty=empty,
                                           agent=agent, blocking=blocking)
                self._move(opening_actions[:, k], blocked)

    def _window(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = self.at[:, 0, None, None] + self.offsets[None, :, None]
        cols = self.at[:, 1, None, None] + self.offsets[None, None, :]
        return np.arange(len(self.at))[:, None, None], rows, cols

    def _write(self) -> None:
        index = self._window()
        self.seen[index] = np.where(self.known, self.view, self.seen[index])
        self.when[index] = np.where(self.known, self.step_index, self.when[index])
        centre = np.arange(len(self.at))
        self.seen[centre, self.at[:, 0], self.at[:, 1]] = self.empty  # left before it scrolls back
        self.step_index += 1

    def _move(self, actions: np.ndarray, blocked: np.ndarray) -> np.ndarray:
        moves = self.deltas[np.asarray(actions, dtype=np.int64)] * ~blocked[:, None]
        self.at += moves
        return moves

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.step_index >= self.last_step:
            raise ValueError(f"the memory was sized for {self.horizon} steps after the opening; give a "
                             "longer horizon")
        pred, revealed, blocked = shift_view(self.view, actions, self.deltas, empty=self.empty,
                                             agent=self.agent, blocking=self.blocking, known=self.known)
        known, _ = scroll(self.known, self._move(actions, blocked))
        known &= ~revealed
        known[:, self.view.shape[-1] // 2, self.view.shape[-1] // 2] = True  # the agent itself
        index = self._window()
        recalled = revealed & (self.seen[index] >= 0)
        pred = np.where(recalled, self.seen[index], pred)
        age = age_bucket(np.maximum(self.step_index - self.when[index], 1))
        region = np.where(recalled, 2 + age, np.where(known, REGION_IN_VIEW, REGION_NEVER_SEEN))
        self.view, self.known = pred, known | recalled
        self._write()
        return pred, region
