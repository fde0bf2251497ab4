"""How the world model reads its input: each step's view and action as tokens, and how steps
know their order.

`StepEmbedding` turns a step into *local* tokens, one per ``patch x patch`` patch of the one-hot
view (linear patch embedding + patch-position embedding) plus one for the action taken, and one
*global* token, a small convolution over the whole view. Two variants of the first version add to
the global token: an agent-identity embedding (``model.agent_embedding``) and a learned absolute
table of step positions (``model.position="learned"``, `rpg_worldmodel.models.variants`).

`RotaryPositions`: the default order of steps, rotary positions in the global attention. They
are relative, so imagination caches the keys of past steps while its window slides.
"""

from __future__ import annotations

import torch
from torch import nn

from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.models.blocks import band_attention, rotary_tables


class StepEmbedding(nn.Module):
    """Views (B, T, C, V, V) and actions (B, T) -> local tokens (B, T, P+1, D) and global tokens
    (B, T, D); ``agent_ids`` (B,) are read only by a model with an agent embedding."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        c, v, p, d = cfg.num_channels, cfg.view_size, cfg.patch_size, cfg.width
        self.patch_size = p
        self.grid = v // p  # patches per side
        self.patch = nn.Linear(p * p * c, d)
        self.patch_position = nn.Parameter(torch.randn(1, self.grid * self.grid, d) * 0.02)
        self.action = nn.Embedding(cfg.num_actions, d)
        # Whole-view token as in the reference: patch-strided conv, then a 2x2 conv that lets
        # neighbouring patches meet (1x1 when the grid is a single patch), then a linear map.
        mix = min(2, self.grid)
        out_side = self.grid - mix + 1
        self.conv = nn.Sequential(
            nn.Conv2d(c, 16, kernel_size=p, stride=p),
            nn.GELU(),
            nn.Conv2d(16, 32, kernel_size=mix),
            nn.GELU(),
            nn.Conv2d(32, 32, kernel_size=1),
            nn.GELU(),
            nn.Flatten(),
            nn.Linear(32 * out_side * out_side, d),
        )
        # The first version's absolute step table (1, num_frames, D): added here and to every layer's
        # step summaries (`StarBlock`); None with rotary positions.
        learned = cfg.position == "learned"
        self.temporal = nn.Parameter(torch.zeros(1, cfg.num_frames, d)) if learned else None
        self.agent = nn.Embedding(cfg.max_agents, d) if cfg.agent_embedding else None

    def forward(
        self, views: torch.Tensor, actions: torch.Tensor, agent_ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, c, v, _ = views.shape
        p, g = self.patch_size, self.grid
        if self.temporal is not None and t > self.temporal.shape[1]:
            raise ValueError(f"window of {t} steps is longer than model.num_frames={self.temporal.shape[1]} "
                             f"(a model with learned positions reads at most that many)")
        # (B,T,C,V,V) -> (B,T,g*g,p*p*C), patches in row-major order, cells (row, col, channel)
        patches = views.reshape(b, t, c, g, p, g, p).permute(0, 1, 3, 5, 4, 6, 2).reshape(b, t, g * g, -1)
        local = torch.cat([self.patch(patches) + self.patch_position, self.action(actions)[:, :, None]], 2)
        global_ = self.conv(views.reshape(b * t, c, v, v)).view(b, t, -1)
        if self.temporal is not None:
            global_ = global_ + self.temporal[:, :t]
        if self.agent is not None:
            if agent_ids is None:
                raise ValueError("this model was built with agent_embedding=True: pass agent_ids (B,)")
            global_ = global_ + self.agent(agent_ids)[:, None]
        return local, global_


class RotaryPositions:
    """Steps ordered by rotary positions in the global attention (``model.position="rope"``).

    ``rope(positions)``: the rotary tables of the global sequence's token ``positions`` (L,)
    (`rotary_tables`). ``caches_past``: relative positions let imagination keep past keys.
    ``context_steps``: steps of history a prediction depends on: each layer's attention reaches
    ``num_frames - 1`` steps further back, the view head reads the step before and the action
    head's frame stack ``action_frames - 1`` steps.
    """

    caches_past = True

    def __init__(self, cfg: ModelConfig):
        self.head_dim, self.num_frames = cfg.width // cfg.num_heads, cfg.num_frames
        self.context_steps = max(cfg.num_layers * (cfg.num_frames - 1) + 2, cfg.action_frames - 1)

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        return rotary_tables(positions, self.head_dim)

    def window_attention(self, num_steps: int, device: torch.device) -> dict:
        """The global blocks' keywords over a window of ``num_steps`` steps (`band_attention`)."""
        rope = self.rope(torch.arange(2 * num_steps, device=device))
        return band_attention(num_steps, self.num_frames, rope, device)
