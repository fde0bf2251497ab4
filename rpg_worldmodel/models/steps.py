"""What the world model's heads read of the steps besides their final tokens (`Steps`): over a
window of steps (`window_steps`, training and `WorldModel.forward`), or one step at a time from
imagination's cached state (`imagined_steps`), with the same values."""

from __future__ import annotations

from typing import NamedTuple

import torch

from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.models.canvas import Canvas, canvas_step, empty_canvas
from rpg_worldmodel.models.moves import MoveOutcome, MoveRules, cell_kinds
from rpg_worldmodel.models.state import Imagination


class Steps(NamedTuple):
    """What the heads read of the steps besides their final tokens, at each step t of (B, T):
    ``views`` (B, T, C, V, V) and ``actions`` (B, T); ``kinds`` (B, T, V, V) the views' cell kinds
    (`rpg_worldmodel.models.moves.cell_kinds`); ``entered`` (B, T) the kind of the cell the move
    enters and ``moves`` (B, T) its outcome (`MoveRules.outcome`; without the movement table
    ``entered`` is None and ``moves`` the actions); ``frames`` (B, T, k-1, C, V, V) the views the
    action head stacks with its predicted one (None: no stack); ``history`` the kinds (B, S, V, V)
    and actions (B, S) of the steps the memory map re-draws, the last T of them these steps;
    ``previous`` step t-1's view (B, T, C, V, V) and action (B, T), and (T,) where there is one;
    ``map`` the memory map's kind and age (N, V, V) in view t+1's frame and its bands along the
    frame's rows and columns (None without ``model.map_reach``) where imagination kept it on its
    canvas (T = 1; `rpg_worldmodel.models.canvas.canvas_step`), else None."""

    views: torch.Tensor
    actions: torch.Tensor
    kinds: torch.Tensor
    entered: torch.Tensor | None
    moves: torch.Tensor
    frames: torch.Tensor | None
    history: tuple[torch.Tensor, torch.Tensor]
    previous: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    map: tuple | None = None


def window_steps(views: torch.Tensor, actions: torch.Tensor, move_outcome: MoveOutcome,
                 cfg: ModelConfig) -> Steps:
    """What the heads read of a window's steps (views (B, T, C, V, V), actions (B, T)); the first
    step has no step before it."""
    kinds = cell_kinds(views)
    entered, moves = move_outcome(kinds, actions)
    prev_views = torch.cat([torch.zeros_like(views[:, :1]), views[:, :-1]], 1)
    prev_actions = torch.cat([actions[:, :1], actions[:, :-1]], 1)
    has_prev = torch.arange(actions.shape[1], device=views.device) > 0
    return Steps(views, actions, kinds, entered, moves, frames_before(views, cfg.action_frames),
                 (kinds, actions), (prev_views, prev_actions, has_prev))


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
    previous = state.step_before(view, action)
    memory, canvas = None, None
    if cfg.memory_map:
        canvas = state.canvas if state.canvas is not None else empty_canvas(len(view), cfg.map_size,
                                                                            view.device)
        memory, canvas = canvas_step(canvas, kinds[:, 0], action, state.step, rules, cfg.map_reach)
    steps = Steps(views, actions, kinds, entered, moves, frames, (kinds, actions), previous, memory)
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
