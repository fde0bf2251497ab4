"""The world model's earlier variants, kept for old checkpoints and the "reference" row
(rpg_worldmodel/configs/reference.yaml): parts the model composes in place of its default ones,
chosen once at construction.

* Learned absolute step positions (``model.position="learned"``, checkpoints of schema 1): a
  table of ``num_frames`` step embeddings (`StepEmbedding.temporal`) added to each step's global
  token and to every layer's step summaries. Positions are absolute, so imagination cannot cache
  past keys: it recomputes its window of the last steps (`slide_window`).
* A linear action head on the global token alone (``model.action_frames=0``, checkpoints of
  schema <= 3), in place of the frame-stack head a policy reads.
* A two-step memory convolution (``model.memory_conv``): a 5x5 convolution of view t-1 per pair
  (action t-1, action t), added to the view t+1 logits. After a turn-round (up, down) view t+1 is
  view t-1 again, so this is where cells that just left the view come back from. The memory map
  (`rpg_worldmodel.models.memory`) subsumes it.
"""

from __future__ import annotations

import torch
from torch import nn

from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.models.blocks import band_attention
from rpg_worldmodel.models.embedding import RotaryPositions
from rpg_worldmodel.models.fast_weights import RecurrentOrder
from rpg_worldmodel.models.heads import FrameStackActionHead, conv_for_choice
from rpg_worldmodel.models.steps import Steps


class LearnedPositions:
    """Steps ordered by the learned table alone: no rotary tables, and a prediction depends on
    the window (``context_steps``), which imagination recomputes (``caches_past`` False)."""

    caches_past = False

    def __init__(self, cfg: ModelConfig):
        self.context_steps = cfg.num_frames

    def rope(self, positions: torch.Tensor) -> None:
        return None

    def window_attention(self, num_steps: int, device: torch.device) -> dict:
        """The global blocks' keywords over a window of ``num_steps`` steps (`band_attention`)."""
        return band_attention(num_steps, self.context_steps, None, device)


def step_positions(cfg: ModelConfig) -> RotaryPositions | LearnedPositions | RecurrentOrder:
    """How the model's steps know their order (``model.position``; the SRWM's own recurrence with
    ``model.layer="srwm"``)."""
    if cfg.layer == "srwm":
        return RecurrentOrder()
    return RotaryPositions(cfg) if cfg.position == "rope" else LearnedPositions(cfg)


def slide_window(window: tuple[torch.Tensor, torch.Tensor] | None, view: torch.Tensor,
                 action: torch.Tensor, num_frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Imagination with learned positions: the views (N, W, C, V, V) and actions (N, W) of the last
    W <= ``num_frames`` steps, the kept ``window`` (None: a start) and this step's ``view`` (N, C,
    V, V) and ``action`` (N,); the model recomputes them every step (`WorldModel.imagine_step`)."""
    views, actions = view[:, None], action[:, None]
    if window is not None:
        views = torch.cat([window[0], views], 1)[:, -num_frames:]
        actions = torch.cat([window[1], actions], 1)[:, -num_frames:]
    return views, actions


class LinearActionHead(nn.Linear):
    """The next action from the step's global token alone: (B, T, D) -> logits (B, T, A)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg.width, cfg.num_actions)

    def predict(self, global_: torch.Tensor, view_logits: torch.Tensor, steps: Steps) -> torch.Tensor:
        return self(global_)


def action_head(cfg: ModelConfig) -> FrameStackActionHead | LinearActionHead:
    """The frame-stack head a policy reads (``model.action_frames`` >= 1) or the linear one (0)."""
    return FrameStackActionHead(cfg) if cfg.action_frames else LinearActionHead(cfg)


class TwoStepConv(nn.Conv2d):
    """The two-step memory convolution as a view prior (``add_to``, see
    `rpg_worldmodel.models.heads`): nothing at a step without a step before it."""

    def __init__(self, cfg: ModelConfig):
        pairs = cfg.num_actions * cfg.num_actions
        super().__init__(cfg.num_channels, pairs * cfg.num_channels, 5, padding=2)
        self.num_actions = cfg.num_actions

    def add_to(self, view_logits: torch.Tensor, steps: Steps) -> torch.Tensor:
        prev_views, prev_actions, has_prev = steps.previous
        if not bool(has_prev.any()):
            return view_logits
        b, t = steps.actions.shape
        pair = (prev_actions * self.num_actions + steps.actions).reshape(-1)
        chosen = conv_for_choice(self, prev_views.reshape(b * t, *prev_views.shape[2:]), pair)
        return view_logits + chosen.view_as(view_logits) * has_prev.view(1, t, 1, 1, 1)


def two_step_conv(cfg: ModelConfig) -> TwoStepConv | None:
    """The two-step memory convolution of a model with one (``model.memory_conv``)."""
    return TwoStepConv(cfg) if cfg.memory_conv else None
