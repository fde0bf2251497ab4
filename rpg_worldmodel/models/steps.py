"""What the world model's heads read of the steps besides their final tokens (`Steps`): the views'
cell kinds, the shift each step causes (the motion head's arg-max, `rpg_worldmodel.models.motion`),
the frames the action head stacks, and the memory map's bookkeeping; over a window of steps
(`window_steps`, training and `WorldModel.forward`), or one step at a time from imagination's
cached state (`imagined_steps`), with the same values. Nothing here has weights.

**The shift.** Egocentric views make a move visible only as the whole view shifting. The model is
not told which action moves where or what blocks a move: its motion head learns, from the shifts
read off consecutive training views, which shift an action causes in the view it is taken in
(none, where the move is blocked). The motion prior chooses by that shift and the memory map
follows the agent by it (dead reckoning).

**The memory map's canvas.** Over a window the map is re-drawn from the window's steps
(`rpg_worldmodel.models.heads.memory_canvas`); imagination keeps it instead on a canvas
(`canvas_step`): each step writes its view where dead reckoning puts the agent and reads the next
view's frame back, so turn 100 costs what turn 1 does. The canvas is a torus of
`rpg_worldmodel.config.MAP_SIZE` cells a side, a capacity, not a picture of any map.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from rpg_worldmodel.config import MAP_SIZE, ModelConfig
from rpg_worldmodel.models.motion import MotionHead, shift_offsets
from rpg_worldmodel.models.state import Imagination

HIDDEN = -1  # a cell the step did not show (masked input, or padding before a start)


# ------------------------------------------------------------------ cell kinds and dead reckoning
def view_codes(views: torch.Tensor) -> torch.Tensor:
    """One-hot views (..., C, V, V) -> entity codes (..., V, V) int64 (the channel that is set; 0
    where none is, as argmax gives)."""
    # A channel-weighted sum: exact for one-hot views, and ~40x faster on CPU than an argmax over
    # the strided channel axis (4 ms a training batch).
    c = views.shape[-3]
    weights = torch.arange(c, device=views.device).view(c, 1, 1)
    return (views * weights.to(views.dtype if views.is_floating_point() else torch.int64)).sum(-3).long()


def cell_kinds(views: torch.Tensor, fixed: torch.Tensor | None = None) -> torch.Tensor:
    """One-hot views (..., C, V, V) -> kinds (..., V, V) long: the set channel, ``HIDDEN`` where
    none is set, and ``C`` in the ``fixed`` cells ((V, V) bool, ``model.fixed_cells``: cells that
    show one kind in every view of the training files, as an egocentric view's own viewer does)."""
    kinds = torch.where(views.amax(-3) > 0.5, view_codes(views), HIDDEN)
    return kinds if fixed is None else kinds.masked_fill(fixed, views.shape[-3])


def fixed_mask(cfg: ModelConfig) -> torch.Tensor:
    """``model.fixed_cells`` as a (V, V) bool mask."""
    mask = torch.zeros(cfg.view_size**2, dtype=torch.bool)
    mask[list(cfg.fixed_cells)] = True
    return mask.view(cfg.view_size, cfg.view_size)


def dead_reckoning(shifts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the agent was at each step, relative to the first, from each step's shift ``shifts``
    (B, S) long (an index into `rpg_worldmodel.models.motion.SHIFTS`). Returns ``before`` and
    ``after`` (B, S, 2) long: the frame of view s and of view s+1."""
    step = shift_offsets(shifts.device)[shifts]  # (B, S, 2)
    after = step.cumsum(1)
    return after - step, after


# ------------------------------------------------------------------ the memory map's canvas
#: The memory map on imagination's canvas: what each cell last showed (N, M, M) long (``HIDDEN``:
#: never), the step that showed it (N, M, M) long, and where the agent is (N, 2) long (row, col).
Canvas = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def empty_canvas(n: int, device: torch.device) -> Canvas:
    """A canvas of ``n`` worlds that has seen nothing, the agent at (0, 0)."""
    kinds = torch.full((n, MAP_SIZE, MAP_SIZE), HIDDEN, dtype=torch.long, device=device)
    return kinds, torch.zeros_like(kinds), torch.zeros(n, 2, dtype=torch.long, device=device)


def _around(position: torch.Tensor, v: int, size: int) -> torch.Tensor:
    """The flat canvas indices (N, V*V) of the V x V cells centred on ``position`` (N, 2)."""
    cells = torch.arange(v, device=position.device) - v // 2
    rows, cols = (position[:, :1] + cells) % size, (position[:, 1:] + cells) % size
    return (rows[:, :, None] * size + cols[:, None, :]).flatten(1)


def canvas_step(canvas: Canvas, kinds: torch.Tensor, shifts: torch.Tensor, step: int
                ) -> tuple[tuple[torch.Tensor, torch.Tensor], Canvas]:
    """One step of the map on its canvas: view ``step`` (``kinds`` (N, V, V) from `cell_kinds`) is
    written where the agent is, the agent moves by the step's shift (``shifts`` (N,), an index into
    `rpg_worldmodel.models.motion.SHIFTS`), and the map is read in view ``step + 1``'s frame.
    Returns ``(kind, age)``, (N, V, V) long each, as `rpg_worldmodel.models.heads.memory_canvas`
    gives them (``age``: steps before ``step``; a cell never seen has kind ``HIDDEN``), and the new
    canvas. A hidden cell of the view leaves the canvas as it was."""
    grid, seen, position = canvas
    v, size = kinds.shape[-1], grid.shape[-1]
    here, shown = _around(position, v, size), kinds.flatten(1)
    grid_flat, seen_flat = grid.flatten(1), seen.flatten(1)
    keep = shown == HIDDEN
    grid = grid_flat.scatter(1, here, torch.where(keep, grid_flat.gather(1, here), shown)).view_as(grid)
    seen = seen_flat.scatter(1, here, torch.where(keep, seen_flat.gather(1, here), step)).view_as(seen)
    position = position + shift_offsets(shifts.device)[shifts]
    there = _around(position, v, size)
    kind = grid.flatten(1).gather(1, there).view(len(grid), v, v)
    age = step - seen.flatten(1).gather(1, there).view(len(grid), v, v)
    return (kind, age), (grid, seen, position)


# ------------------------------------------------------------------ what the heads read
class Steps(NamedTuple):
    """What the heads read of the steps besides their final tokens, at each step t of (B, T):
    ``views`` (B, T, C, V, V) and ``actions`` (B, T); ``kinds`` (B, T, V, V) the views' cell kinds
    (`cell_kinds`); ``shifts`` (B, T) the shift each step causes by the motion head (an index into
    `rpg_worldmodel.models.motion.SHIFTS`); ``frames`` (B, T, k-1, C, V, V) the views the action
    head stacks with its predicted one (None: no stack); ``history`` the kinds (B, S, V, V) and
    shifts (B, S) of the steps the memory map re-draws, the last T of them these steps; ``map`` the
    memory map's kind and age (N, V, V) in view t+1's frame where imagination kept it on its
    canvas (T = 1; `canvas_step`), else None."""

    views: torch.Tensor
    actions: torch.Tensor
    kinds: torch.Tensor
    shifts: torch.Tensor
    frames: torch.Tensor | None
    history: tuple[torch.Tensor, torch.Tensor]
    map: tuple[torch.Tensor, torch.Tensor] | None = None


def window_steps(views: torch.Tensor, actions: torch.Tensor, motion: MotionHead, cfg: ModelConfig,
                 fixed: torch.Tensor) -> Steps:
    """What the heads read of a window's steps (views (B, T, C, V, V), actions (B, T); ``fixed``:
    `fixed_mask`)."""
    kinds = cell_kinds(views, fixed)
    shifts = motion.shifts(views, actions)
    frames = frames_before(views, cfg.action_frames)
    return Steps(views, actions, kinds, shifts, frames, (kinds, shifts))


def imagined_steps(view: torch.Tensor, action: torch.Tensor, state: Imagination, motion: MotionHead,
                   cfg: ModelConfig, fixed: torch.Tensor) -> tuple[Steps, torch.Tensor | None, Canvas | None]:
    """What the heads read of one imagined step (``view`` (N, C, V, V), ``action`` (N,); T = 1),
    from ``state`` where they read earlier steps, and what to keep of it for the next: the action
    head's recent views and the memory map's canvas (`Imagination`; None without a map)."""
    views, actions = view[:, None], action[:, None]
    frames, recent = imagined_frames(view, state.recent_views, cfg.action_frames)
    kinds = cell_kinds(views, fixed)
    shifts = motion.shifts(views, actions)
    memory, canvas = None, None
    if cfg.memory_map:
        canvas = state.canvas if state.canvas is not None else empty_canvas(len(view), view.device)
        memory, canvas = canvas_step(canvas, kinds[:, 0], shifts[:, 0], state.step)
    steps = Steps(views, actions, kinds, shifts, frames, (kinds, shifts), memory)
    return steps, recent, canvas


def frames_before(views: torch.Tensor, k: int) -> torch.Tensor | None:
    """For each step t of ``views`` (B, T, C, V, V): views t-k+2 .. t as a ``k``-frame action head
    stacks them, (B, T, k-1, C, V, V) with zeros before the window (None for k < 2: no stack)."""
    if k < 2:
        return None
    b = views.shape[0]
    padded = torch.cat([views.new_zeros(b, k - 2, *views.shape[2:]), views], 1)
    return padded.unfold(1, k - 1, 1).permute(0, 1, 5, 2, 3, 4)


def imagined_frames(view: torch.Tensor, recent: torch.Tensor | None, k: int
                    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """`frames_before` one step at a time: the stack at this step (N, 1, k-1, C, V, V) and the
    views to keep for the next (N, k-2, C, V, V), from the current ``view`` (N, C, V, V) and the
    kept ``recent`` ones (None: a start, zeros)."""
    if k < 2:
        return None, None
    if recent is None:
        recent = view.new_zeros(view.shape[0], k - 2, *view.shape[1:])
    frames = torch.cat([recent, view[:, None]], 1)
    return frames[:, None], frames[:, 1:]
