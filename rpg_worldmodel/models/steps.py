"""What the world model's heads read of the steps besides their final tokens (`Steps`): the views'
cell kinds, what each move enters by the game's movement table, the frames the action head
stacks, and the memory map's bookkeeping; over a window of steps (`window_steps`, training and
`WorldModel.forward`), or one step at a time from imagination's cached state (`imagined_steps`),
with the same values. Nothing here has weights.

**The movement table.** Egocentric views make a move visible only as the whole view shifting; a
blocked move (into a wall or another agent) shifts nothing and costs the wall's penalty. An expert
almost never bumps (0.09% of the DQN expert's steps), so a model that has to learn blocking from
data never does, and an agent trained in its imagination learns to walk through walls. With the
table (`MoveRules`) the model is told, at every step, what the move enters: the motion prior
chooses by the move's outcome (a blocked move is a choice of its own), the reward head reads the
entered cell's kind, and the memory map follows the agent by dead reckoning. The table comes from
the training file's action and channel names (`model.move_deltas`, `model.blocking_kinds`).

**The memory map's canvas.** Over a window the map is re-drawn from the window's steps
(`rpg_worldmodel.models.heads.memory_canvas`); imagination keeps it instead on a canvas
(`canvas_step`): each step writes its view where dead reckoning puts the agent and reads the next
view's frame back, so turn 100 costs what turn 1 does. The canvas is a torus of
`rpg_worldmodel.config.MAP_SIZE` cells a side, a capacity, not a picture of any map.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import nn

from rpg_base.typed_config.values import ConfigError
from rpg_env.game.constants import ACTION_NAMES, vocabulary
from rpg_worldmodel.config import MAP_SIZE, ModelConfig
from rpg_worldmodel.models.state import Imagination

HIDDEN = -1  # a cell the step did not show (masked input, or padding before a start)

#: `MoveRules.outcome` or `moves_unknown`: kinds (B, T, V, V), actions (B, T) -> (entered, outcome)
MoveOutcome = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor | None, torch.Tensor]]


# ------------------------------------------------------------------ cell kinds and the movement table
def game_moves(action_names: Sequence[str] = ACTION_NAMES, channel_names: Sequence[str] | None = None
               ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The game's movement table for actions and channels so named: ``(move_deltas, blocking_kinds)``,
    each action's (row, col) move flattened and the channels of kinds a move cannot enter
    (defaults: the game's own action and channel order). ValueError for an unknown action."""
    vocab = vocabulary()
    names = vocab.cell_names if channel_names is None else channel_names
    deltas = vocab.deltas_for([str(a) for a in action_names])
    blocking = tuple(i for i, name in enumerate(names)
                     if name in vocab.cell_names and not vocab.cells[vocab.code(name)].passable)
    return tuple(int(x) for x in deltas.reshape(-1)), blocking


def view_codes(views: torch.Tensor) -> torch.Tensor:
    """One-hot views (..., C, V, V) -> entity codes (..., V, V) int64 (the channel that is set; 0
    where none is, as argmax gives)."""
    # A channel-weighted sum: exact for one-hot views, and ~40x faster on CPU than an argmax over
    # the strided channel axis (4 ms a training batch).
    c = views.shape[-3]
    weights = torch.arange(c, device=views.device).view(c, 1, 1)
    return (views * weights.to(views.dtype if views.is_floating_point() else torch.int64)).sum(-3).long()


def cell_kinds(views: torch.Tensor) -> torch.Tensor:
    """One-hot views (..., C, V, V) -> kinds (..., V, V) long: the set channel, ``HIDDEN`` where
    none is set, and ``C`` for the centre, where the agent itself stands (it has left that cell
    by the time the cell is seen again)."""
    c, v = views.shape[-3], views.shape[-1]
    kinds = torch.where(views.amax(-3) > 0.5, view_codes(views), HIDDEN)
    kinds[..., v // 2, v // 2] = c
    return kinds


def entered_kinds(kinds: torch.Tensor, actions: torch.Tensor, deltas: torch.Tensor) -> torch.Tensor:
    """The kind of the cell each move enters: ``kinds`` (B, S, V, V), ``actions`` (B, S), ``deltas``
    (A, 2) (row, col) per action -> (B, S) long (``HIDDEN`` where the view did not show it)."""
    v = kinds.shape[-1]
    move = deltas[actions]  # (B, S, 2)
    centre = v // 2
    entered = (centre + move[..., 0]) * v + centre + move[..., 1]
    return kinds.flatten(-2).gather(-1, entered[..., None])[..., 0]


class MoveRules(nn.Module):
    """The movement table as buffers: ``deltas`` (A, 2) long, ``blocking`` (K,) long channel indices.

    `outcome` gives what a model conditions on: the entered cell's kind (B, T) and the move's
    outcome (B, T): the action where the move goes through, ``num_actions`` where it is blocked.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_actions = cfg.num_actions
        moves, blocking = (cfg.move_deltas, cfg.blocking_kinds) if cfg.move_deltas else game_moves()
        if len(moves) != 2 * cfg.num_actions or any(k >= cfg.num_channels for k in blocking):
            raise ConfigError(f"the game's moves fit {len(moves) // 2} actions, not model.num_actions="
                              f"{cfg.num_actions}; give model.move_deltas and model.blocking_kinds (train "
                              f"fills them from the training file) or set model.memory_map=false "
                              f"model.move_rules=false")
        self.register_buffer("deltas", torch.tensor(moves, dtype=torch.long).view(-1, 2), persistent=False)
        self.register_buffer("blocking", torch.tensor(blocking, dtype=torch.long), persistent=False)

    def outcome(self, kinds: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``kinds`` (B, T, V, V) from `cell_kinds`, ``actions`` (B, T) -> (entered kind, outcome)."""
        entered = entered_kinds(kinds, actions, self.deltas)
        blocked = torch.isin(entered, self.blocking)
        return entered, torch.where(blocked, self.num_actions, actions)


def moves_unknown(kinds: torch.Tensor, actions: torch.Tensor) -> tuple[None, torch.Tensor]:
    """`MoveRules.outcome` of a model without the table: no entered kind, and every move goes through."""
    return None, actions


# ------------------------------------------------------------------ the memory map's canvas
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


def canvas_step(canvas: Canvas, kinds: torch.Tensor, actions: torch.Tensor, step: int,
                moves: MoveRules) -> tuple[tuple[torch.Tensor, torch.Tensor], Canvas]:
    """One step of the map on its canvas: view ``step`` (``kinds`` (N, V, V) from `cell_kinds`) is
    written where the agent is, the agent moves by its action (``actions`` (N,); not into a
    blocking kind), and the map is read in view ``step + 1``'s frame. Returns ``(kind, age)``,
    (N, V, V) long each, as `rpg_worldmodel.models.heads.memory_canvas` gives them (``age``: steps
    before ``step``; a cell never seen has kind ``HIDDEN``), and the new canvas. A hidden cell of
    the view leaves the canvas as it was."""
    grid, seen, position = canvas
    v, size = kinds.shape[-1], grid.shape[-1]
    here, shown = _around(position, v, size), kinds.flatten(1)
    grid_flat, seen_flat = grid.flatten(1), seen.flatten(1)
    keep = shown == HIDDEN
    grid = grid_flat.scatter(1, here, torch.where(keep, grid_flat.gather(1, here), shown)).view_as(grid)
    seen = seen_flat.scatter(1, here, torch.where(keep, seen_flat.gather(1, here), step)).view_as(seen)
    _, after = dead_reckoning(kinds[:, None], actions[:, None], moves.deltas, moves.blocking)
    position = position + after[:, 0]
    there = _around(position, v, size)
    kind = grid.flatten(1).gather(1, there).view(len(grid), v, v)
    age = step - seen.flatten(1).gather(1, there).view(len(grid), v, v)
    return (kind, age), (grid, seen, position)


# ------------------------------------------------------------------ what the heads read
class Steps(NamedTuple):
    """What the heads read of the steps besides their final tokens, at each step t of (B, T):
    ``views`` (B, T, C, V, V) and ``actions`` (B, T); ``kinds`` (B, T, V, V) the views' cell kinds
    (`cell_kinds`); ``entered`` (B, T) the kind of the cell the move enters and ``moves`` (B, T) its
    outcome (`MoveRules.outcome`; without the movement table ``entered`` is None and ``moves`` the
    actions); ``frames`` (B, T, k-1, C, V, V) the views the action head stacks with its predicted
    one (None: no stack); ``history`` the kinds (B, S, V, V) and actions (B, S) of the steps the
    memory map re-draws, the last T of them these steps; ``map`` the memory map's kind and age
    (N, V, V) in view t+1's frame where imagination kept it on its canvas (T = 1; `canvas_step`),
    else None."""

    views: torch.Tensor
    actions: torch.Tensor
    kinds: torch.Tensor
    entered: torch.Tensor | None
    moves: torch.Tensor
    frames: torch.Tensor | None
    history: tuple[torch.Tensor, torch.Tensor]
    map: tuple[torch.Tensor, torch.Tensor] | None = None


def window_steps(views: torch.Tensor, actions: torch.Tensor, move_outcome: MoveOutcome,
                 cfg: ModelConfig) -> Steps:
    """What the heads read of a window's steps (views (B, T, C, V, V), actions (B, T))."""
    kinds = cell_kinds(views)
    entered, moves = move_outcome(kinds, actions)
    frames = frames_before(views, cfg.action_frames)
    return Steps(views, actions, kinds, entered, moves, frames, (kinds, actions))


def imagined_steps(view: torch.Tensor, action: torch.Tensor, state: Imagination, move_outcome: MoveOutcome,
                   cfg: ModelConfig, rules: MoveRules | None
                   ) -> tuple[Steps, torch.Tensor | None, Canvas | None]:
    """What the heads read of one imagined step (``view`` (N, C, V, V), ``action`` (N,); T = 1),
    from ``state`` where they read earlier steps, and what to keep of it for the next: the action
    head's recent views and the memory map's canvas (`Imagination`; None without a map, whose
    movement table is ``rules``)."""
    views, actions = view[:, None], action[:, None]
    frames, recent = imagined_frames(view, state.recent_views, cfg.action_frames)
    kinds = cell_kinds(views)
    entered, moves = move_outcome(kinds, actions)
    memory, canvas = None, None
    if cfg.memory_map:
        canvas = state.canvas if state.canvas is not None else empty_canvas(len(view), view.device)
        memory, canvas = canvas_step(canvas, kinds[:, 0], action, state.step, rules)
    steps = Steps(views, actions, kinds, entered, moves, frames, (kinds, actions), memory)
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
