"""What the world model's heads read of the steps besides their final tokens (`Steps`): the views'
cell kinds, the shift each step causes (the motion head's arg-max, `rpg_worldmodel.models.motion`),
the frames the action head stacks, and the memory map's bookkeeping; over a window of steps
(`window_steps`, training and `WorldModel.forward`), or one step at a time from imagination's
cached state (`imagined_steps`), with the same values. Nothing here has weights.

**The motion.** Egocentric views make a move visible only as the whole view shifting, or turning
about the viewer where a game's views turn (``model.turns``, read off the files). The model is not
told which action moves where or what blocks a move: its motion head learns, from the motions read
off consecutive training views, which one an action causes in the view it is taken in (none, where
the move is blocked). The motion prior chooses by that motion and the memory map and the extents
follow the agent by it (dead reckoning: where each view's centre is and which way it faces).

**The memory map's canvas.** Over a window the map is re-drawn from the window's steps
(`memory_canvas`); imagination keeps it instead on a canvas
(`canvas_step`): each step writes its view where dead reckoning puts the agent and reads the next
view's frame back, so turn 100 costs what turn 1 does. The canvas is a torus of
`rpg_worldmodel.config.MAP_SIZE` cells a side, a capacity, not a picture of any map.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import NamedTuple, Protocol

import numpy as np
import torch

from rpg_worldmodel.config import MAP_SIZE, ModelConfig
from rpg_worldmodel.models.extents import empty_extents, extents_step, games_extents, window_extents
from rpg_worldmodel.models.motion import (
    Motion,
    MotionHead,
    dead_reckoning,
    in_frame,
    moved,
    read_turns,
    view_cells,
)
from rpg_worldmodel.models.state import Imagination

HIDDEN = -1  # a cell the step did not show (masked input, or padding before a start)


# ------------------------------------------------------------------ cell kinds
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


def map_reach(cfg: ModelConfig) -> int:
    """How many steps the memory map keeps a cell (``model.memory_steps``; 0: the attention's
    ``num_frames``): an older sighting counts as not seen."""
    return cfg.memory_steps or cfg.num_frames


def fixed_mask(cfg: ModelConfig) -> torch.Tensor:
    """``model.fixed_cells`` as a (V, V) bool mask."""
    mask = torch.zeros(cfg.view_size**2, dtype=torch.bool)
    mask[list(cfg.fixed_cells)] = True
    return mask.view(cfg.view_size, cfg.view_size)


# ------------------------------------------------------------------ the memory map's canvas
#: The memory map on imagination's canvas: what each cell last showed (N, M, M) long (``HIDDEN``:
#: never), the step that showed it (N, M, M) long, and the agent's pose (N, 3) long (row, col,
#: quarter turns: `rpg_worldmodel.models.motion.dead_reckoning`).
Canvas = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def empty_canvas(n: int, device: torch.device) -> Canvas:
    """A canvas of ``n`` worlds that has seen nothing, the agent at (0, 0) facing as it starts."""
    kinds = torch.full((n, MAP_SIZE, MAP_SIZE), HIDDEN, dtype=torch.long, device=device)
    return kinds, torch.zeros_like(kinds), torch.zeros(n, 3, dtype=torch.long, device=device)


def _around(pose: torch.Tensor, v: int, size: int) -> torch.Tensor:
    """The flat canvas indices (N, V*V) of the V x V cells of a view at ``pose`` (N, 3)."""
    origin = torch.zeros(3, dtype=torch.long, device=pose.device)
    cells = in_frame(view_cells(v, pose.device), pose[:, None, None], origin) % size
    return (cells[..., 0] * size + cells[..., 1]).flatten(1)


def memory_canvas(kinds: torch.Tensor, shifts: torch.Tensor, reach: int, queries: int,
                  turns: tuple[Motion, ...] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """The map of the last ``queries`` steps of a history.

    ``kinds`` (B, S, V, V) from `cell_kinds`, ``shifts`` (B, S) long (each step's motion, an index
    into ``rpg_worldmodel.models.motion.motion_family(turns)``). For each query step t (the
    last ``queries`` of the S) and each cell of view t+1's frame: the kind it had in the latest step
    s in ``[t - reach + 1, t]`` that showed it, and ``t - s``. Returns ``kind`` (B, Q, V, V) long
    (``HIDDEN``: not seen in reach) and ``age`` of the same shape (``reach`` where not seen).
    """
    b, s_len, v, _ = kinds.shape
    before, after = dead_reckoning(shifts, turns)
    first = s_len - queries
    cells = view_cells(v, kinds.device)
    kind = kinds.new_full((b, queries, v, v), HIDDEN)
    age = torch.full_like(kind, reach)
    flat_kinds = kinds.flatten(-2)
    for lag in range(min(reach, s_len)):  # latest first: a cell keeps the first (newest) sighting
        query = torch.arange(max(first, lag), s_len, device=kinds.device)
        if not len(query):
            break
        # view t+1's cells in view s's frame, (B, n, V, V, 2) from its corner
        where = in_frame(cells, after[:, query, None, None], before[:, query - lag, None, None]) + v // 2
        inside = ((where >= 0) & (where < v)).all(-1)
        index = where[..., 0].clamp(0, v - 1) * v + where[..., 1].clamp(0, v - 1)
        seen = flat_kinds[:, query - lag].gather(-1, index.flatten(-2)).view_as(index)
        slot = query - first
        fill = inside & (seen != HIDDEN) & (kind[:, slot] == HIDDEN)
        kind[:, slot] = torch.where(fill, seen, kind[:, slot])
        age[:, slot] = torch.where(fill, lag, age[:, slot])
    return kind, age


def canvas_step(canvas: Canvas, kinds: torch.Tensor, shifts: torch.Tensor, step: int,
                turns: tuple[Motion, ...] = ()) -> tuple[tuple[torch.Tensor, torch.Tensor], Canvas]:
    """One step of the map on its canvas: view ``step`` (``kinds`` (N, V, V) from `cell_kinds`) is
    written where the agent is, the agent moves by the step's motion (``shifts`` (N,), an index into
    ``rpg_worldmodel.models.motion.motion_family(turns)``), and the map is read in view ``step + 1``'s
    frame.
    Returns ``(kind, age)``, (N, V, V) long each, as `memory_canvas`
    gives them (``age``: steps before ``step``; a cell never seen has kind ``HIDDEN``), and the new
    canvas. A hidden cell of the view leaves the canvas as it was."""
    grid, seen, pose = canvas
    v, size = kinds.shape[-1], grid.shape[-1]
    here, shown = _around(pose, v, size), kinds.flatten(1)
    grid_flat, seen_flat = grid.flatten(1), seen.flatten(1)
    keep = shown == HIDDEN
    grid = grid_flat.scatter(1, here, torch.where(keep, grid_flat.gather(1, here), shown)).view_as(grid)
    seen = seen_flat.scatter(1, here, torch.where(keep, seen_flat.gather(1, here), step)).view_as(seen)
    pose = moved(pose, shifts, turns)
    there = _around(pose, v, size)
    kind = grid.flatten(1).gather(1, there).view(len(grid), v, v)
    age = step - seen.flatten(1).gather(1, there).view(len(grid), v, v)
    return (kind, age), (grid, seen, pose)


# ------------------------------------------------------------------ what the heads read
class Steps(NamedTuple):
    """What the heads read of the steps besides their final tokens, at each step t of (B, T):
    ``views`` (B, T, C, V, V) and ``actions`` (B, T); ``kinds`` (B, T, V, V) the views' cell kinds
    (`cell_kinds`); ``shifts`` (B, T) the motion each step causes by the motion head (an index into
    `rpg_worldmodel.models.motion.motion_family`); ``frames`` (B, T, k-1, C, V, V) the views the action
    head stacks with its predicted one (None: no stack); ``map`` the memory map's kind and age
    (B, T, V, V) in view t+1's frame, re-drawn over a window (`memory_canvas`) or kept on
    imagination's canvas (`canvas_step`; None without a map);
    ``extents`` (B, T, K, 4) each kind's extents since the start in view t+1's frame
    (`rpg_worldmodel.models.extents.window_extents`; None without an extent prior)."""

    views: torch.Tensor
    actions: torch.Tensor
    kinds: torch.Tensor
    shifts: torch.Tensor
    frames: torch.Tensor | None
    map: tuple[torch.Tensor, torch.Tensor] | None = None
    extents: torch.Tensor | None = None


def window_steps(views: torch.Tensor, actions: torch.Tensor, motion: MotionHead, cfg: ModelConfig,
                 fixed: torch.Tensor, extents_before: torch.Tensor | None = None) -> Steps:
    """What the heads read of a window's steps (views (B, T, C, V, V), actions (B, T); ``fixed``:
    `fixed_mask`; ``extents_before`` (B, K, 4): what the game's views before the window left, in
    view 0's frame, `store_extents`; None: the window is all there was)."""
    kinds = cell_kinds(views, fixed)
    shifts = motion.shifts(views, actions)
    frames = frames_before(views, cfg.action_frames)
    extents = None
    if cfg.extent_prior:
        extents = window_extents(kinds, shifts, cfg.num_channels + 1, extents_before, cfg.turns)
    memory = None
    if cfg.memory_map:
        memory = memory_canvas(kinds, shifts, map_reach(cfg), kinds.shape[1], cfg.turns)
    return Steps(views, actions, kinds, shifts, frames, memory, extents)


def imagined_steps(view: torch.Tensor, action: torch.Tensor, state: Imagination, motion: MotionHead,
                   cfg: ModelConfig, fixed: torch.Tensor) -> tuple[Steps, Imagination]:
    """What the heads read of one imagined step (``view`` (N, C, V, V), ``action`` (N,); T = 1),
    from ``state`` where they read earlier steps, and ``state`` with what to keep of it for the
    next: the action head's recent views, the memory map's canvas and the extents (None without a
    map, without an extent prior)."""
    views, actions = view[:, None], action[:, None]
    frames, recent = imagined_frames(view, state.recent_views, cfg.action_frames)
    kinds = cell_kinds(views, fixed)
    shifts = motion.shifts(views, actions)
    memory, canvas, extents, kept_extents = None, None, None, None
    if cfg.memory_map:
        canvas = state.canvas if state.canvas is not None else empty_canvas(len(view), view.device)
        (kind, age), canvas = canvas_step(canvas, kinds[:, 0], shifts[:, 0], state.step, cfg.turns)
        memory = kind[:, None], age[:, None]
    if cfg.extent_prior:
        count = cfg.num_channels + 1
        kept = state.extents if state.extents is not None else empty_extents(len(view), count, view.device)
        extents, kept_extents = extents_step(kept, kinds[:, 0], shifts[:, 0], count, cfg.turns)
        extents = extents[:, None]
    steps = Steps(views, actions, kinds, shifts, frames, memory, extents)
    return steps, replace(state, recent_views=recent, canvas=canvas, extents=kept_extents)


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


# ------------------------------------------------------------------ extents of recorded games
class EpisodeRows(Protocol):
    """What `store_extents` reads of a store of recorded games (`rpg_worldmodel.data.stores`)."""

    lengths: np.ndarray

    def gather(self, rows: np.ndarray, starts: np.ndarray, steps: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


def store_turns(store: EpisodeRows, cfg: ModelConfig) -> tuple[Motion, ...]:
    """The turns of the view the games of ``store`` show (``model.turns``), read off their first
    `rpg_worldmodel.models.motion.TURN_STEPS` steps by `rpg_worldmodel.models.motion.read_turns`
    (the view's fixed cells, ``model.fixed_cells``, tell nothing: they move with the view)."""
    fixed = cfg.num_channels  # the fixed cells' kind (`cell_kinds`)
    games = ((kinds.masked_fill(kinds == fixed, HIDDEN), actions) for kinds, actions in _games(store, cfg))
    return read_turns(games, cfg.num_actions)


def store_extents(store: EpisodeRows, cfg: ModelConfig) -> list[np.ndarray]:
    """For each row (game) of ``store``: the extents its views 0 .. s-1 left in view s's frame, for
    every view s but the last, (L, K, 4) int32 each (`rpg_worldmodel.models.extents.games_extents`):
    the ``extents_before`` of a window starting at s."""
    return list(games_extents(list(_games(store, cfg)), cfg.num_channels + 1, cfg.num_actions, cfg.turns))


def _games(store: EpisodeRows, cfg: ModelConfig) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Each game (row) of ``store`` in order, read when asked for: its views' kinds (L+1, V, V)
    (`cell_kinds`, the fixed cells as a kind of their own) and its actions (L,)."""
    fixed = fixed_mask(cfg)
    for row, length in enumerate(store.lengths.tolist()):
        views, actions, _ = store.gather(np.array([row]), np.zeros(1, dtype=np.int64), int(length))
        yield cell_kinds(torch.from_numpy(views[0]), fixed), torch.from_numpy(actions[0, :-1])
