"""Parts only checkpoints of older schemas are built with; the default model runs through none of
them. `WorldModel` takes them in place of its own where the checkpoint's config says so.

* Learned absolute step positions (``model.position="learned"``, checkpoints of schema 1): a
  table of ``num_frames`` step embeddings (`rpg_worldmodel.models.transformer.StepEmbedding`'s
  ``temporal``) added to each step's global token and to every layer's step summaries. Positions
  are absolute, so imagination cannot cache past keys: it recomputes its window of the last steps
  (`slide_window`).
* A linear action head on the global token alone (``model.action_frames=0``, checkpoints of
  schema <= 3), in place of the frame-stack head a policy reads.
"""

from __future__ import annotations

import torch
from torch import nn

from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.models.steps import Steps
from rpg_worldmodel.models.transformer import band_attention


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
