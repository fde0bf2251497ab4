"""How a step moves the egocentric view, learned: a generic family of shifts, the shift inferred
from two consecutive views, and `MotionHead`, which learns which shift an action causes.

An egocentric view makes a move visible only as the whole view shifting by one cell; a move that
does not happen (into something that blocks it) shifts nothing. Nothing here knows which action
moves where, or what blocks a move: the family (`SHIFTS`) is every shift of at most one cell along
each axis, whichever game it is, and names no action. `infer_shifts` reads the shift that took
each view to the next off the two views (the one under which they agree best, where it stands out
from the others), and `MotionHead` learns from those labels which shift an action causes in the
view it is taken in: where a move goes through, and when it causes none. The model conditions its
motion prior and its memory map on the head's arg-max shift (`rpg_worldmodel.models.steps`), a
function of the view and the action only, the same in training and in imagination.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: The egocentric shifts a step may cause, as the (row, col) offset of the new view's centre in the
#: old view's frame: every offset of at most one cell along each axis. `STAY` is no shift.
SHIFTS = tuple((row, col) for row in (-1, 0, 1) for col in (-1, 0, 1))
STAY = SHIFTS.index((0, 0))
#: `infer_shifts` labels a step only where its best shift explains at least this many more cells
#: than the runner-up: a view of bare floor looks the same under every shift, and a label there
#: would be a guess.
MARGIN_CELLS = 3
UNKNOWN = -1  # a step whose shift the two views do not tell (ignored by the loss)


def shift_offsets(device: torch.device | None = None) -> torch.Tensor:
    """`SHIFTS` as a (S, 2) long tensor (row, col)."""
    return torch.tensor(SHIFTS, dtype=torch.long, device=device)


def infer_shifts(codes: torch.Tensor) -> torch.Tensor:
    """The shift that took each view to the next: ``codes`` (B, T, V, V) long (a cell's kind; any
    negative value for a cell not shown) -> (B, T-1) long, an index into `SHIFTS`, or `UNKNOWN`
    where no shift stands out by `MARGIN_CELLS` cells.

    Under shift (dr, dc) cell (i, j) of view t+1 shows what cell (i+dr, j+dc) of view t showed; the
    shift's mismatch is the share of the cells both views show that disagree (things that moved or
    appeared disagree under every shift, so only the static part of the world decides). Every
    cell counts alike, the viewer's own too: a viewer that moves with its view agrees only under
    no shift, which in a sparse view with something else moving alongside can outvote the real
    move (22 of 101,376 steps of random and greedy play, 0.02%; tests/test_wm_motion.py)."""
    v = codes.shape[-1]
    before, after = codes[:, :-1], codes[:, 1:]
    mismatches, overlaps = [], []
    for dr, dc in SHIFTS:
        old = before[..., max(dr, 0):v + min(dr, 0), max(dc, 0):v + min(dc, 0)]
        new = after[..., max(-dr, 0):v + min(-dr, 0), max(-dc, 0):v + min(-dc, 0)]
        shown = (old >= 0) & (new >= 0)
        mismatches.append(((old != new) & shown).flatten(-2).sum(-1))
        overlaps.append(shown.flatten(-2).sum(-1))
    mismatch = torch.stack(mismatches, -1).float()  # (B, T-1, S)
    overlap = torch.stack(overlaps, -1).float().clamp_min(1)
    rate = mismatch / overlap
    best_two = rate.topk(2, dim=-1, largest=False)
    best = best_two.indices[..., 0]
    cells = overlap.amin(-1)
    clear = (best_two.values[..., 1] - best_two.values[..., 0]) * cells >= MARGIN_CELLS
    return torch.where(clear, best, UNKNOWN)


class ViewMapPerAction(nn.Module):
    """Per action, a linear map of the one-hot view the action is taken in: ``forward(views (B, T, C,
    V, V), actions (B, T))`` -> (B, T, ``outputs``). What a step does often depends on one cell of
    the view for each action (the cell a move enters); a map per action learns it as one weight."""

    def __init__(self, num_channels: int, view_size: int, num_actions: int, outputs: int):
        super().__init__()
        self.num_actions = num_actions
        self.linear = nn.Linear(num_channels * view_size * view_size, num_actions * outputs)

    def forward(self, views: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        b, t = actions.shape
        flat = views.reshape(b, t, -1).to(self.linear.weight.dtype)
        every = self.linear(flat).view(b, t, self.num_actions, -1)
        # a one-hot product rather than a gather: the same sum in every thread order (reproducible)
        pick = F.one_hot(actions, self.num_actions).to(every.dtype)
        return (pick[..., None] * every).sum(-2)


class MotionHead(ViewMapPerAction):
    """Which shift an action causes in the view it is taken in: per action, a linear map of the
    one-hot view to logits over `SHIFTS` (`ViewMapPerAction`). ``forward(views (B, T, C, V, V),
    actions (B, T))`` -> logits (B, T, S).

    Linear in the view is enough to learn a game's movement: each action's own shift, and no shift
    where the cell it would enter holds something that blocks it. The head reads neither the
    tokens nor the past, so its arg-max (`shifts`) is a function of the step alone."""

    def __init__(self, num_channels: int, view_size: int, num_actions: int):
        super().__init__(num_channels, view_size, num_actions, len(SHIFTS))

    @torch.no_grad()
    def shifts(self, views: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The likeliest shift of each step, (B, T) long (an index into `SHIFTS`)."""
        return self(views, actions).argmax(-1)


def dead_reckoning(shifts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the agent was at each step, relative to the first, from each step's shift ``shifts``
    (B, S) long (an index into `rpg_worldmodel.models.motion.SHIFTS`). Returns ``before`` and
    ``after`` (B, S, 2) long: the frame of view s and of view s+1."""
    step = shift_offsets(shifts.device)[shifts]  # (B, S, 2)
    after = step.cumsum(1)
    return after - step, after
