"""An egocentric memory map: what the agent saw in its last steps, re-drawn where it is now.

The view is egocentric, so a cell seen a few steps ago sits at another place of every later view,
and a cell that left the view is in none of them. Attention over past steps can in principle learn
to follow the agent's moves back to it; in practice (docs/worldmodel.md, "Longer context") a
transformer trained for minutes does not. The map does that bookkeeping by dead reckoning, as the
memory oracle does (`rpg_worldmodel.evaluation.oracles`): each step moves the agent by its action's
delta unless the target cell holds a blocking kind (a wall, an agent), and every cell of the steps
in reach is placed at its offset from the frame of the *next* view. For each cell of view t+1 the
map holds the kind it had when last seen and how many steps before t that was (or that it was not
seen in reach). The model learns what that is worth: `MemoryMap` turns each (age, kind) into a
logit per kind of the next view, added to the view head's (zero where the map knows nothing new).

The bookkeeping is exact for the agent that moves first (the learner); the co-player's view is
re-drawn with the same rule, which can be wrong when the learner has just moved into its way.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from rpg_env.game.constants import ACTION_NAMES, vocabulary
from rpg_worldmodel.config import ConfigError, ModelConfig

HIDDEN = -1  # a cell the step did not show (masked input, or padding before a start)


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


def cell_kinds(views: torch.Tensor) -> torch.Tensor:
    """One-hot views (..., C, V, V) -> kinds (..., V, V) long: the set channel, ``HIDDEN`` where
    none is set, and ``C`` for the centre, where the agent itself stands (it has left that cell
    by the time the cell is seen again)."""
    c, v = views.shape[-3], views.shape[-1]
    kinds = views.argmax(-3)
    kinds = torch.where(views.amax(-3) > 0.5, kinds, HIDDEN)
    kinds[..., v // 2, v // 2] = c
    return kinds


def dead_reckoning(kinds: torch.Tensor, actions: torch.Tensor, deltas: torch.Tensor,
                   blocking: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the agent was at each step, relative to the first: ``kinds`` (B, S, V, V), ``actions``
    (B, S), ``deltas`` (A, 2) (row, col) per action, ``blocking`` (K,) kinds a move cannot enter.
    Returns ``before`` and ``after`` (B, S, 2) long: the frame of view s and of view s+1."""
    v = kinds.shape[-1]
    move = deltas[actions]  # (B, S, 2)
    centre = v // 2
    entered = (centre + move[..., 0]) * v + centre + move[..., 1]  # the cell each move enters
    target = kinds.flatten(-2).gather(-1, entered[..., None])[..., 0]
    step = move * (~torch.isin(target, blocking))[..., None]
    after = step.cumsum(1)
    return after - step, after


def memory_canvas(kinds: torch.Tensor, actions: torch.Tensor, deltas: torch.Tensor, blocking: torch.Tensor,
                  reach: int, queries: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The map of the last ``queries`` steps of a history.

    ``kinds`` (B, S, V, V) from `cell_kinds`, ``actions`` (B, S) long. For each query step t (the
    last ``queries`` of the S) and each cell of view t+1's frame: the kind it had in the latest
    step s in ``[t - reach + 1, t]`` that showed it, and ``t - s``. Returns ``kind`` (B, Q, V, V)
    long (``HIDDEN``: not seen in reach) and ``age`` (B, Q, V, V) long (``reach`` where not seen).
    """
    b, s_len, v, _ = kinds.shape
    before, after = dead_reckoning(kinds, actions, deltas, blocking)
    first = s_len - queries
    kind = kinds.new_full((b, queries, v, v), HIDDEN)
    age = kinds.new_full((b, queries, v, v), reach)
    cells = torch.arange(v, device=kinds.device)
    flat_kinds = kinds.flatten(-2)
    for lag in range(min(reach, s_len)):  # latest first: a cell keeps the first (newest) sighting
        query = torch.arange(max(first, lag), s_len, device=kinds.device)
        if not len(query):
            break
        offset = after[:, query] - before[:, query - lag]  # (B, n, 2): view t+1's frame in view s's
        rows = cells + offset[..., :1]  # (B, n, V)
        cols = cells + offset[..., 1:]
        index = rows.clamp(0, v - 1)[..., :, None] * v + cols.clamp(0, v - 1)[..., None, :]
        seen = flat_kinds[:, query - lag].gather(-1, index.flatten(-2)).view(b, -1, v, v)
        inside = ((rows >= 0) & (rows < v))[..., :, None] & ((cols >= 0) & (cols < v))[..., None, :]
        slot = query - first
        fill = inside & (seen != HIDDEN) & (kind[:, slot] == HIDDEN)
        kind[:, slot] = torch.where(fill, seen, kind[:, slot])
        age[:, slot] = torch.where(fill, lag, age[:, slot])
    return kind, age


class MemoryMap(nn.Module):
    """The memory map as a view prior: (age, kind last seen) -> logits of the cell's next kind.

    ``forward(kinds (B, S, V, V), actions (B, S), queries)`` -> logits (B, Q, C, V, V) for the last
    ``queries`` steps, reaching back ``model.num_frames`` steps (the attention's window).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.reach = cfg.num_frames
        self.num_kinds = cfg.num_channels + 1  # the channels and the agent's own cell
        moves, blocking = (cfg.move_deltas, cfg.blocking_kinds) if cfg.move_deltas else game_moves()
        if len(moves) != 2 * cfg.num_actions or any(k >= cfg.num_channels for k in blocking):
            raise ConfigError(f"model.memory_map: the game's moves fit {len(moves) // 2} actions, not "
                              f"model.num_actions={cfg.num_actions}; give model.move_deltas and "
                              f"model.blocking_kinds (train fills them from the training file)")
        self.register_buffer("deltas", torch.tensor(moves, dtype=torch.long).view(-1, 2), persistent=False)
        self.register_buffer("blocking", torch.tensor(blocking, dtype=torch.long), persistent=False)
        self.prior = nn.Embedding(self.reach * self.num_kinds + 1, cfg.num_channels)

    def forward(self, kinds: torch.Tensor, actions: torch.Tensor, queries: int) -> torch.Tensor:
        kind, age = memory_canvas(kinds, actions, self.deltas, self.blocking, self.reach, queries)
        unseen = self.reach * self.num_kinds
        index = torch.where(kind == HIDDEN, unseen, age * self.num_kinds + kind)
        return self.prior(index).permute(0, 1, 4, 2, 3)
