"""The memory map's canvas in imagination: where the agent is by dead reckoning, and the cells it
has seen, kept for a whole episode at one step's cost (`rpg_worldmodel.models.memory` says what
the map is and how the model reads it; over a window it is re-drawn from the window's steps)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rpg_worldmodel.models.moves import HIDDEN, MoveRules, entered_kinds


def dead_reckoning(kinds: torch.Tensor, actions: torch.Tensor, deltas: torch.Tensor,
                   blocking: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the agent was at each step, relative to the first: ``kinds`` (B, S, V, V), ``actions``
    (B, S), ``deltas`` (A, 2) (row, col) per action, ``blocking`` (K,) kinds a move cannot enter.
    Returns ``before`` and ``after`` (B, S, 2) long: the frame of view s and of view s+1."""
    move = deltas[actions]  # (B, S, 2)
    target = entered_kinds(kinds, actions, deltas)
    step = move * (~torch.isin(target, blocking))[..., None]
    after = step.cumsum(1)
    return after - step, after


def frame_and_bands(read: Callable[[tuple[int, int]], tuple[torch.Tensor, torch.Tensor]], reach: int, v: int
                    ) -> tuple[torch.Tensor, torch.Tensor, tuple | None]:
    """The map in the next view's frame, ``(kind, age)`` (..., V, V), and with ``reach`` its bands
    (`rpg_worldmodel.models.memory.Bands`: the frame's rows, then its columns, widened by ``reach``
    on each side; None without), from ``read(margin) -> (kind, age)``, the map read around the
    frame widened by ``margin`` (rows, columns). The frame is the middle of its rows' band, so one
    read gives both the frame and that band, on the canvas as over a window."""
    if not reach:
        return (*read((0, 0)), None)
    rows = read((0, reach))
    kind, age = (x[..., reach:reach + v] for x in rows)
    return kind, age, (*rows, *read((reach, 0)))


#: The memory map on imagination's canvas: what each cell last showed (N, M, M) long (``HIDDEN``:
#: never), the step that showed it (N, M, M) long, and where the agent is (N, 2) long (row, col).
Canvas = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def empty_canvas(n: int, size: int, device: torch.device) -> Canvas:
    """A canvas of ``n`` worlds, ``size`` cells a side, that has seen nothing, the agent at (0, 0)."""
    kinds = torch.full((n, size, size), HIDDEN, dtype=torch.long, device=device)
    return kinds, torch.zeros_like(kinds), torch.zeros(n, 2, dtype=torch.long, device=device)


def _around(position: torch.Tensor, v: int, size: int, margin: tuple[int, int] = (0, 0)) -> torch.Tensor:
    """The flat canvas indices (N, H*W) of the V x V cells centred on ``position`` (N, 2), widened
    by ``margin`` (rows, columns) on each side: H = V + 2 rows, W = V + 2 columns."""
    row_cells = torch.arange(-margin[0], v + margin[0], device=position.device) - v // 2
    col_cells = torch.arange(-margin[1], v + margin[1], device=position.device) - v // 2
    rows, cols = (position[:, :1] + row_cells) % size, (position[:, 1:] + col_cells) % size
    return (rows[:, :, None] * size + cols[:, None, :]).flatten(1)


def _read(grid: torch.Tensor, seen: torch.Tensor, position: torch.Tensor, v: int, step: int,
          margin: tuple[int, int] = (0, 0)) -> tuple[torch.Tensor, torch.Tensor]:
    """The kinds and ages (N, H, W) of the cells `_around` ``position`` names."""
    there = _around(position, v, grid.shape[-1], margin)
    shape = (len(grid), v + 2 * margin[0], v + 2 * margin[1])
    return grid.flatten(1).gather(1, there).view(shape), step - seen.flatten(1).gather(1, there).view(shape)


def canvas_step(canvas: Canvas, kinds: torch.Tensor, actions: torch.Tensor, step: int,
                moves: MoveRules, reach: int = 0) -> tuple[tuple, Canvas]:
    """One step of the map on its canvas: view ``step`` (``kinds`` (N, V, V) from `cell_kinds`) is
    written where the agent is, the agent moves by its action (``actions`` (N,); not into a
    blocking kind), and the map is read in view ``step + 1``'s frame. Returns ``(kind, age,
    bands)``: (N, V, V) long each, as `memory_canvas` gives them (``age``: steps before ``step``; a
    cell never seen has kind ``HIDDEN``), and with ``reach`` the frame's rows and columns widened
    by that many cells on each side (`rpg_worldmodel.models.memory.Bands`, T = 1 dropped; None
    without); and the new canvas. A hidden cell of the view leaves the canvas as it was."""
    grid, seen, position = canvas
    v, size = kinds.shape[-1], grid.shape[-1]
    here, shown = _around(position, v, size), kinds.flatten(1)
    grid_flat, seen_flat = grid.flatten(1), seen.flatten(1)
    keep = shown == HIDDEN
    grid = grid_flat.scatter(1, here, torch.where(keep, grid_flat.gather(1, here), shown)).view_as(grid)
    seen = seen_flat.scatter(1, here, torch.where(keep, seen_flat.gather(1, here), step)).view_as(seen)
    _, after = dead_reckoning(kinds[:, None], actions[:, None], moves.deltas, moves.blocking)
    position = position + after[:, 0]
    memory = frame_and_bands(lambda margin: _read(grid, seen, position, v, step, margin), reach, v)
    return memory, (grid, seen, position)
