"""How a step moves the egocentric view, learned: a generic family of rigid motions of the view, the
motion inferred from two consecutive views, and `MotionHead`, which learns which motion an action
causes.

An egocentric view makes a move visible only as the whole view moving: shifting by a cell, or
turning about the viewer. A move that does not happen (into something that blocks it) moves
nothing. Nothing here knows which action moves where, or what blocks a move:

* the family is every shift of at most one cell along each axis (`SHIFTS`, whichever game it is),
  plus the turns the training files show (`read_turns`: quarter turns of the view about any cell,
  kept where one explains an action's steps best; a game whose views never turn has none).
  Neither names an action;
* `infer_shifts` reads the motion that took each view to the next off the two views (the one under
  which they agree best, where it stands out from the others);
* `MotionHead` learns from those labels which motion an action causes in the view it is taken in:
  where a move goes through, and when it causes none.

The model conditions its motion prior and its memory map on the head's arg-max motion
(`rpg_worldmodel.models.steps`), a function of the view and the action only, the same in training
and in imagination. Dead reckoning (`dead_reckoning`) composes the motions into each view's pose:
where its centre is and which way it faces, relative to the first view.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

#: The egocentric shifts a step may cause, as the (row, col) offset of the new view's centre in the
#: old view's frame: every offset of at most one cell along each axis. `STAY` is no shift.
SHIFTS = tuple((row, col) for row in (-1, 0, 1) for col in (-1, 0, 1))
STAY = SHIFTS.index((0, 0))
#: A motion of the view, ``(quarter_turns, row, col)``: cell x' of the new view (row and column from
#: its centre) shows what cell ``R^quarter_turns x' + (row, col)`` of the old view showed, R the
#: quarter turn ``(row, col) -> (col, -row)``. A shift is a motion of no turn.
Motion = tuple[int, int, int]
#: `infer_shifts` labels a step only where its best motion explains at least this many more cells
#: than the runner-up: a view of bare floor looks the same under every shift, and a label there
#: would be a guess.
MARGIN_CELLS = 3
UNKNOWN = -1  # a step whose motion the two views do not tell (ignored by the loss)
#: `read_turns` scores a motion by the cells it explains, a cell it contradicts costing this many
#: that agree: a sparse view agrees with itself under many motions by chance (a view half hidden
#: agrees with itself turned half round on the few cells both show), and a step that changes the
#: world (something opened, taken or moved) contradicts its true motion in a few cells.
DISAGREEMENT_COST = 2
#: `read_turns` reads at most this many steps (the first games, in order).
TURN_STEPS = 5_000

_QUARTER = torch.tensor([[[1, 0], [0, 1]], [[0, 1], [-1, 0]], [[-1, 0], [0, -1]], [[0, -1], [1, 0]]])


def motion_family(turns: Iterable[Motion] = ()) -> tuple[Motion, ...]:
    """Every motion a step may cause: the `SHIFTS` (indices 0 .. 8, as they always were), then
    ``turns`` (``model.turns``, read off the files by `read_turns`)."""
    return tuple((0, row, col) for row, col in SHIFTS) + tuple(tuple(t) for t in turns)


def motion_offsets(device: torch.device | None = None, turns: Iterable[Motion] = ()) -> torch.Tensor:
    """`motion_family` as a (F, 3) long tensor (quarter turns, row, col)."""
    return torch.tensor(motion_family(turns), dtype=torch.long, device=device)


def rotate(x: torch.Tensor, quarter_turns: torch.Tensor | int) -> torch.Tensor:
    """``R^quarter_turns x`` for cells ``x`` (..., 2) long, the turns broadcasting against x[..., 0]."""
    turns = torch.as_tensor(quarter_turns, device=x.device) % 4
    return (_QUARTER.to(x.device)[turns] * x[..., None, :]).sum(-1)


def view_cells(v: int, device: torch.device | None = None) -> torch.Tensor:
    """Each cell of a V x V view as (row, col) from its centre, (V, V, 2) long."""
    cells = torch.arange(v, device=device) - v // 2
    return torch.stack(torch.meshgrid(cells, cells, indexing="ij"), -1)


def moved_cells(motion: Motion, v: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each cell of the new view was in the old one under ``motion``: flat old indices (V*V,)
    long (clamped into the view) and whether that cell is in the old view (V*V,) bool."""
    old = rotate(view_cells(v), motion[0]) + torch.tensor(motion[1:])
    inside = ((old >= -(v // 2)) & (old <= v // 2)).all(-1)
    index = (old[..., 0] + v // 2).clamp(0, v - 1) * v + (old[..., 1] + v // 2).clamp(0, v - 1)
    return index.flatten(), inside.flatten()


def _mismatches(before: torch.Tensor, after: torch.Tensor, motion: Motion
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Cells (...,) that disagree and cells both views show, of views ``before`` and ``after``
    (..., V, V) under ``motion``."""
    v = before.shape[-1]
    q, dr, dc = motion
    if q == 0:  # a shift: slices (the same sums as the gather, faster)
        old = before[..., max(dr, 0):v + min(dr, 0), max(dc, 0):v + min(dc, 0)].flatten(-2)
        new = after[..., max(-dr, 0):v + min(-dr, 0), max(-dc, 0):v + min(-dc, 0)].flatten(-2)
    else:
        index, inside = moved_cells(motion, v)
        index, inside = index.to(before.device), inside.to(before.device)
        old = before.flatten(-2)[..., index[inside]]
        new = after.flatten(-2)[..., inside]
    shown = (old >= 0) & (new >= 0)
    return ((old != new) & shown).sum(-1), shown.sum(-1)


def infer_shifts(codes: torch.Tensor, turns: Iterable[Motion] = ()) -> torch.Tensor:
    """The motion that took each view to the next: ``codes`` (B, T, V, V) long (a cell's kind; any
    negative value for a cell not shown) -> (B, T-1) long, an index into ``motion_family(turns)``,
    or `UNKNOWN` where no motion stands out by `MARGIN_CELLS` cells.

    Under a shift (dr, dc) cell (i, j) of view t+1 shows what cell (i+dr, j+dc) of view t showed
    (a turn: `Motion`); the motion's mismatch is the share of the cells both views show that
    disagree (things that moved or appeared disagree under every motion, so only the static part
    of the world decides). Every cell counts alike, the viewer's own too: a viewer that moves with
    its view agrees only under no shift, which in a sparse view with something else moving
    alongside can outvote the real move (22 of 101,376 steps of random and greedy play, 0.02%;
    tests/test_wm_motion.py)."""
    before, after = codes[:, :-1], codes[:, 1:]
    counted = [_mismatches(before, after, motion) for motion in motion_family(turns)]
    mismatch = torch.stack([m for m, _ in counted], -1).float()  # (B, T-1, F)
    overlap = torch.stack([o for _, o in counted], -1).float().clamp_min(1)
    rate = mismatch / overlap
    best_two = rate.topk(2, dim=-1, largest=False)
    best = best_two.indices[..., 0]
    cells = overlap.amin(-1)
    clear = (best_two.values[..., 1] - best_two.values[..., 0]) * cells >= MARGIN_CELLS
    return torch.where(clear, best, UNKNOWN)


def read_turns(games: Iterable[tuple[torch.Tensor, torch.Tensor]], num_actions: int) -> tuple[Motion, ...]:
    """The turns recorded games show: ``games`` yields each game's codes (L+1, V, V) long (negative:
    a cell not shown, the view's fixed cells included) and actions (L,) long; at most `TURN_STEPS`
    steps are read.

    The candidates are the `SHIFTS` and every quarter turn of the view composed with a shift under
    which at least V cells of the new view were in the old one. A candidate's score for an action
    is how many cells it explains in the action's steps, on average: the cells both views show that
    agree under it, less `DISAGREEMENT_COST` for each that disagrees. Each action's motion is its
    best-scoring candidate; where that is a turn explaining at least V cells a step, the turn is
    kept. Returns the distinct turns, sorted; none for views that never turn (the treasurehunt
    game's: each move's own shift scores best)."""
    pairs, acts, steps = [], [], 0
    for codes, actions in games:
        take = min(len(actions), TURN_STEPS - steps)
        pairs.append(torch.stack([codes[:take], codes[1:take + 1]], 1))
        acts.append(actions[:take].long())
        steps += take
        if steps >= TURN_STEPS:
            break
    if not steps:
        return ()
    pair, actions = torch.cat(pairs), torch.cat(acts)
    v = pair.shape[-1]
    reach = range(-(v - 1), v)
    candidates = [*motion_family(), *(m for q in (1, 2, 3) for dr in reach for dc in reach
                                      if int(moved_cells(m := (q, dr, dc), v)[1].sum()) >= v)]
    score = torch.zeros(num_actions, len(candidates))
    for k, motion in enumerate(candidates):
        mismatch, shown = _mismatches(pair[:, 0], pair[:, 1], motion)
        explained = (shown - (1 + DISAGREEMENT_COST) * mismatch).float()
        score[:, k] = torch.bincount(actions, explained, num_actions)
    score /= torch.bincount(actions, minlength=num_actions).clamp_min(1)[:, None]
    best = score.argmax(1)
    kept = {candidates[k] for a, k in enumerate(best.tolist()) if candidates[k][0] and score[a, k] >= v}
    return tuple(sorted(kept))


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
    """Which motion an action causes in the view it is taken in: per action, a linear map of the
    one-hot view to logits over ``motion_family(turns)`` (`ViewMapPerAction`).
    ``forward(views (B, T, C, V, V), actions (B, T))`` -> logits (B, T, S).

    Linear in the view is enough to learn a game's movement: each action's own shift, and no shift
    where the cell it would enter holds something that blocks it. The head reads neither the
    tokens nor the past, so its arg-max (`shifts`) is a function of the step alone."""

    def __init__(self, num_channels: int, view_size: int, num_actions: int, turns: Iterable[Motion] = ()):
        super().__init__(num_channels, view_size, num_actions, len(motion_family(turns)))

    @torch.no_grad()
    def shifts(self, views: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The likeliest motion of each step, (B, T) long (an index into `motion_family`)."""
        return self(views, actions).argmax(-1)


def dead_reckoning(shifts: torch.Tensor, turns: Iterable[Motion] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the agent was at each step, relative to the first, from each step's motion ``shifts``
    (B, S) long (an index into ``motion_family(turns)``). Returns ``before`` and ``after`` (B, S, 3)
    long: the pose of view s and of view s+1, (row, col, quarter turns) of its centre and facing in
    view 0's frame (a cell x of a view at pose (p, h) is cell ``R^h x + p`` of view 0)."""
    motion = motion_offsets(shifts.device, turns)[shifts]  # (B, S, 3)
    heading_after = motion[..., 0].cumsum(1) % 4
    heading_before = (heading_after - motion[..., 0]) % 4
    step = rotate(motion[..., 1:], heading_before)
    after = step.cumsum(1)
    return (torch.cat([after - step, heading_before[..., None]], -1),
            torch.cat([after, heading_after[..., None]], -1))


def moved(pose: torch.Tensor, shifts: torch.Tensor, turns: Iterable[Motion] = ()) -> torch.Tensor:
    """Poses (N, 3) after one motion each, ``shifts`` (N,) long (an index into
    ``motion_family(turns)``), as `dead_reckoning` composes them."""
    motion = motion_offsets(shifts.device, turns)[shifts]
    position = pose[:, :2] + rotate(motion[:, 1:], pose[:, 2])
    return torch.cat([position, ((pose[:, 2] + motion[:, 0]) % 4)[:, None]], 1)


def in_frame(cells: torch.Tensor, pose: torch.Tensor, frame: torch.Tensor) -> torch.Tensor:
    """Cells ``cells`` (..., 2) of a view at ``pose`` (..., 3) as cells of the view at ``frame``
    (..., 3) (poses from `dead_reckoning`, broadcasting)."""
    world = rotate(cells, pose[..., 2]) + pose[..., :2]
    return rotate(world - frame[..., :2], -frame[..., 2])
