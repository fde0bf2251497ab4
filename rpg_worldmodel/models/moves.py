"""The game's movement table as the model knows it: where each action moves the agent, and which
kinds of cell a move cannot enter.

Egocentric views make a move visible only as the whole view shifting; a blocked move (into a wall
or another agent) shifts nothing and costs the wall's penalty. An expert almost never bumps (0.09%
of the DQN expert's steps), so a model that has to learn blocking from data never does, and an
agent trained in its imagination learns to walk through walls. With the table the model is told,
at every step, what the move enters: the action convolution chooses by the move's outcome (a
blocked move is a choice of its own), the reward head reads the entered cell's kind, and the
memory map (`rpg_worldmodel.models.memory`) follows the agent by dead reckoning. The table comes
from the training file's action and channel names (`model.move_deltas`, `model.blocking_kinds`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from rpg_base.typed_config.values import ConfigError
from rpg_env.game.constants import ACTION_NAMES, vocabulary
from rpg_worldmodel.config import ModelConfig

HIDDEN = -1  # a cell the step did not show (masked input, or padding before a start)

#: `MoveRules.outcome` or `moves_unknown`: kinds (B, T, V, V), actions (B, T) -> (entered, outcome)
MoveOutcome = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor | None, torch.Tensor]]


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


def movement_table(cfg: ModelConfig) -> MoveRules | None:
    """The movement table of a model that reads it (``model.move_rules`` or ``model.memory_map``)."""
    return MoveRules(cfg) if cfg.memory_map or cfg.move_rules else None


def moves_unknown(kinds: torch.Tensor, actions: torch.Tensor) -> tuple[None, torch.Tensor]:
    """`MoveRules.outcome` of a model without the table: no entered kind, and every move goes through."""
    return None, actions


def move_outcome(cfg: ModelConfig, rules: MoveRules | None) -> MoveOutcome:
    """What the model conditions its heads on: ``rules.outcome`` with ``model.move_rules``, else
    `moves_unknown` (a model may keep the table for its memory map alone)."""
    return rules.outcome if cfg.move_rules else moves_unknown
