"""How far each kind of cell was seen: the extent prior's bookkeeping (no weights).

For each kind (the channels and the view's fixed cells) the extents are its lowest and highest row
and column seen since the start of the game, placed by dead reckoning (`dead_reckoning`) and read in
the frame of the next view, so a prior can say how far inside or outside them each cell of that view
lies (`rpg_worldmodel.models.heads.ExtentPrior`). They are kept three ways, with the same values:

* over a window of steps (`window_extents`), starting from the extents the game's earlier views left
  (``before``; none: the window is the game's start);
* one step at a time in imagination (`extents_step`, 4 numbers a kind, whatever the turn);
* for every view of whole recorded games (`game_extents`), read off the views themselves: the shift
  of each step is the one two consecutive views tell (`rpg_worldmodel.models.motion.infer_shifts`),
  or, where they tell none, the shift the same action most often causes in the file
  (`usual_shifts`). Training windows start from these, so the prior learns from what a game carried
  since its first turn, as imagination reads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import torch

from rpg_worldmodel.models.motion import (
    STAY,
    UNKNOWN,
    Motion,
    dead_reckoning,
    infer_shifts,
    motion_family,
    moved,
)

#: The extents of a kind never seen: its lowest row/column above every cell, its highest below.
UNSEEN = 10**6

#: The extents of N worlds in imagination: each kind's lowest and highest row and column seen since
#: the start (N, K, 4) long, in dead-reckoned cells from the first view, and the agent's pose (N, 3)
#: (row, col, quarter turns: `rpg_worldmodel.models.motion.dead_reckoning`).
Extents = tuple[torch.Tensor, torch.Tensor]


def view_extents(kinds: torch.Tensor, num_kinds: int) -> torch.Tensor:
    """Where each kind shows in each view: ``kinds`` (..., V, V) from
    `rpg_worldmodel.models.steps.cell_kinds` -> (..., K, 4) long, the lowest row, highest row,
    lowest column and highest column (cells from the view's centre) of the cells of each kind
    ``0 .. num_kinds - 1``; ``UNSEEN``, ``-UNSEEN`` for a kind the view does not show (a hidden cell
    shows none)."""
    v = kinds.shape[-1]
    shown = kinds[..., None, :, :] == torch.arange(num_kinds, device=kinds.device)[:, None, None]
    cells = torch.arange(v, device=kinds.device) - v // 2
    ends = []
    for present in (shown.any(-1), shown.any(-2)):  # (..., K, V): rows, then columns, holding the kind
        ends.append(torch.where(present, cells, UNSEEN).amin(-1))
        ends.append(torch.where(present, cells, -UNSEEN).amax(-1))
    return torch.stack(ends, -1)


def _by_end(position: torch.Tensor) -> torch.Tensor:
    """A position (..., 2) (row, col) as (..., 1, 4): the offset of each of `view_extents`' ends."""
    return position[..., None, [0, 0, 1, 1]]


def _turned(extents: torch.Tensor, quarter_turns: torch.Tensor) -> torch.Tensor:
    """Extents (..., K, 4) of cells x as the extents of cells ``R^q x`` (``quarter_turns`` (...);
    `rpg_worldmodel.models.motion.rotate`): R takes rows (lo, hi) and columns (lo', hi') to rows
    (lo', hi') and columns (-hi, -lo). An empty extent (lowest above highest) stays empty."""
    turns = (quarter_turns % 4)[..., None, None]
    once = extents
    for q in range(1, 4):
        once = once[..., [2, 3, 1, 0]] * torch.tensor([1, 1, -1, -1], device=extents.device)
        extents = torch.where(turns == q, once, extents)
    return extents


def placed(extents: torch.Tensor, pose: torch.Tensor) -> torch.Tensor:
    """Extents (..., K, 4) of a view at ``pose`` (..., 3) as extents in the first view's frame."""
    return _turned(extents, pose[..., 2]) + _by_end(pose[..., :2])


def seen_from(extents: torch.Tensor, pose: torch.Tensor) -> torch.Tensor:
    """Extents (..., K, 4) in the first view's frame as seen from a view at ``pose`` (..., 3)."""
    return _turned(extents - _by_end(pose[..., :2]), -pose[..., 2])


def _joined(low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """Lowest ends (..., 2) and highest ends (..., 2) as extents (..., 4)."""
    return torch.stack([low, high], -1).flatten(-2)


def window_extents(kinds: torch.Tensor, shifts: torch.Tensor, num_kinds: int,
                   before: torch.Tensor | None = None, turns: tuple[Motion, ...] = ()) -> torch.Tensor:
    """For each step t of a window (``kinds`` (B, S, V, V), ``shifts`` (B, S), indices into
    ``motion_family(turns)``): each kind's extents over the views before the window (``before``
    (B, K, 4) in view 0's frame; None: none) and views 0 .. t, in cells from the centre of view
    t+1's frame (dead reckoning by the motions), (B, S, K, 4) long; a kind not seen keeps
    ``UNSEEN`` / ``-UNSEEN`` (far off)."""
    first, after = dead_reckoning(shifts, turns)
    ends = placed(view_extents(kinds, num_kinds), first)
    if before is not None:
        ends = torch.cat([before[:, None].to(ends.dtype), ends], 1)
    low, high = ends[..., 0::2].cummin(1).values, ends[..., 1::2].cummax(1).values
    seen = _joined(low, high)[:, 0 if before is None else 1:]
    return seen_from(seen, after)


def empty_extents(n: int, num_kinds: int, device: torch.device) -> Extents:
    """The extents of ``n`` worlds that have seen nothing, the agent at (0, 0) facing as it starts."""
    ends = torch.tensor([UNSEEN, -UNSEEN] * 2, device=device)
    return ends.repeat(n, num_kinds, 1), torch.zeros(n, 3, dtype=torch.long, device=device)


def extents_step(extents: Extents, kinds: torch.Tensor, shifts: torch.Tensor, num_kinds: int,
                 turns: tuple[Motion, ...] = ()) -> tuple[torch.Tensor, Extents]:
    """`window_extents` one step at a time: view ``kinds`` (N, V, V) joins the extents where the
    agent is, the agent moves by ``shifts`` (N,); returns the extents in the next view's frame
    (N, K, 4) and the new state."""
    seen, pose = extents
    ends = placed(view_extents(kinds, num_kinds), pose)
    seen = _joined(torch.minimum(seen[..., 0::2], ends[..., 0::2]),
                   torch.maximum(seen[..., 1::2], ends[..., 1::2]))
    pose = moved(pose, shifts, turns)
    return seen_from(seen, pose), (seen, pose)


# ------------------------------------------------------------------ whole recorded games
def usual_shifts(told: Iterable[tuple[torch.Tensor, torch.Tensor]], num_actions: int,
                 num_motions: int = len(motion_family())) -> torch.Tensor:
    """The motion each action most often causes where the views tell it: ``told`` yields each game's
    motions (L,) (`UNKNOWN` where untold) and actions (L,); returns (A,) long (`STAY` for an action
    never told)."""
    counts = torch.zeros(num_actions, num_motions, dtype=torch.long)
    for shifts, actions in told:
        known = shifts != UNKNOWN
        counts.index_put_((actions[known], shifts[known]), torch.ones_like(shifts[known]), accumulate=True)
    return torch.where(counts.sum(1) > 0, counts.argmax(1), STAY)


def game_extents(kinds: torch.Tensor, shifts: torch.Tensor, num_kinds: int, turns: tuple[Motion, ...] = ()
                 ) -> torch.Tensor:
    """For each view s of one game (``kinds`` (L+1, V, V), ``shifts`` (L,) of its steps): each kind's
    extents over views 0 .. s-1 in view s's frame, (L+1, K, 4) long (view 0: none seen)."""
    nothing = empty_extents(1, num_kinds, kinds.device)[0]
    return torch.cat([nothing, window_extents(kinds[None, :-1], shifts[None], num_kinds, turns=turns)[0]])


def games_extents(games: Iterable[tuple[torch.Tensor, torch.Tensor]], num_kinds: int, num_actions: int,
                  turns: tuple[Motion, ...] = ()) -> Iterator[np.ndarray]:
    """`game_extents` of recorded games, the untold shifts filled by `usual_shifts` over them all:
    ``games`` yields each game's kinds (L+1, V, V) (the last kind, ``num_kinds - 1``, the view's
    fixed cells) and actions (L,) and must be iterable twice (a list); yields each game's (L+1, K, 4)
    int32 in order."""
    fixed = num_kinds - 1  # the view's fixed cells move with it: they tell nothing of a shift
    motions = told_motions([(kinds.masked_fill(kinds == fixed, -1), actions) for kinds, actions in games],
                           num_actions, turns)
    for (kinds, _), filled in zip(games, motions, strict=True):
        yield game_extents(kinds, filled, num_kinds, turns).clamp(-UNSEEN, UNSEEN).numpy().astype(np.int32)


def told_motions(games: list[tuple[torch.Tensor, torch.Tensor]], num_actions: int,
                 turns: tuple[Motion, ...] = ()) -> list[torch.Tensor]:
    """Each step's motion as recorded games' views tell it: ``games`` holds each game's codes
    (L+1, V, V) (negative: not shown) and actions (L,); returns each game's motions (L,) long, an
    index into ``motion_family(turns)``: the one `infer_shifts` reads off the two views, or, where
    they tell none, the one the same action most often causes in these games (`usual_shifts`)."""
    told = [(infer_shifts(codes[None], turns)[0], actions) for codes, actions in games]
    usual = usual_shifts(told, num_actions, len(motion_family(turns)))
    return [torch.where(shifts == UNKNOWN, usual[actions], shifts) for shifts, actions in told]
