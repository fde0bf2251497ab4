"""The world model's transformer: each step's view and action as tokens, how steps know their
order, and the layers over them.

`StepEmbedding` turns a step into *local* tokens, one per ``patch x patch`` patch of the one-hot
view (linear patch embedding + patch-position embedding) plus one for the action taken, and one
*global* token, a small convolution over the whole view.

Steps know their order through rotary positions (`RotaryPositions`): they rotate queries and keys
by their position, so attention depends only on how far apart two tokens are. That is what lets
imagination keep the keys of past steps while its window of steps slides: a cached key never has
to be recomputed. (Schema 1's learned step table, `rpg_worldmodel.models.legacy.LearnedPositions`,
adds to the global tokens here and to each layer's step summaries; the SRWM orders steps by its
recurrence, `rpg_worldmodel.models.fast_weights.RecurrentOrder`.)

Each layer (`StarBlock`) runs a local block (attention within one step over its patch and action
tokens), then a global block across steps: causal attention (`Block`) or, with
``model.layer="srwm"``, a self-referential weight matrix.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.models.fast_weights import FastWeightBlock

ROPE_BASE = 10_000.0


class StepEmbedding(nn.Module):
    """Views (B, T, C, V, V) and actions (B, T) -> local tokens (B, T, P+1, D) and global tokens
    (B, T, D)."""

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
        # Schema 1's absolute step table (1, num_frames, D), added here and to every layer's step
        # summaries (`StarBlock`); None with rotary positions (`rpg_worldmodel.models.legacy`).
        learned = cfg.position == "learned"
        self.temporal = nn.Parameter(torch.zeros(1, cfg.num_frames, d)) if learned else None

    def forward(self, views: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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
        return local, global_


def rotary_tables(positions: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of shape ``(*positions.shape, head_dim // 2)`` for rotating heads of
    ``head_dim`` (even) channels at integer ``positions`` (any leading shape, e.g. ``(L,)`` or
    ``(N, L)`` for per-row positions)."""
    half = head_dim // 2
    freq = ROPE_BASE ** (-torch.arange(half, device=positions.device, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[..., None] * freq
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``(N, H, L, hd)`` by tables of shape ``(L, hd/2)`` or ``(N, L, hd/2)``."""
    if cos.dim() == 3:  # per-row positions: broadcast over heads
        cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


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


def band_attention(num_steps: int, window: int, rope: tuple[torch.Tensor, torch.Tensor] | None,
                   device: torch.device) -> dict:
    """The global attention's keywords (`SelfAttention`) over ``num_steps`` steps of two tokens:
    causal, a sliding band of ``window`` steps past that many (imagination's reference path), and
    the rotary tables ``rope`` of the tokens (None: learned positions)."""
    mask = band_mask(num_steps, window, 2, device) if num_steps > window else None
    return {"causal": True, "mask": mask, "rope": rope}


def band_mask(num_steps: int, window: int, tokens_per_step: int, device: torch.device) -> torch.Tensor:
    """``(L, L)`` bool, ``L = num_steps * tokens_per_step``: a token sees the tokens of its own step
    up to itself and those of the ``window - 1`` steps before (causal, sliding window of steps)."""
    index = torch.arange(num_steps * tokens_per_step, device=device)
    step = index // tokens_per_step
    return (index[None, :] <= index[:, None]) & (step[:, None] - step[None, :] < window)


class SelfAttention(nn.Module):
    """Multi-head self-attention with a fused QKV projection, via ``scaled_dot_product_attention``."""

    def __init__(self, width: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, *, causal: bool = False, mask: torch.Tensor | None = None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None,
                past: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Attend from ``x`` ``(N, L, D)`` to itself and to ``past``.

        Args:
            causal: each position sees itself and earlier ones (ignored when ``mask`` is given).
            mask: bool ``(L, Lp + L)`` or ``(N, 1, L, Lp + L)``, True where a query may attend.
            rope: ``rotary_tables`` of the L positions; queries and keys are rotated by them.
            past: keys and values ``(N, H, Lp, hd)`` of earlier positions (already rotated).

        Returns ``(N, L, D)`` and the keys and values ``(N, H, L, hd)`` of these L positions, which
        a caller may keep as the ``past`` of later ones.
        """
        n, length, width = x.shape
        qkv = self.qkv(x)
        if qkv.device.type == "cpu" and qkv.dtype == torch.bfloat16:
            # CPU's bf16 flash-attention backward is ~15x slower than fp32 for these short
            # sequences (10 tokens), while bf16 pays off in the projections and MLPs.
            qkv = qkv.float()
        q, k, v = (t.transpose(1, 2) for t in qkv.view(n, length, 3, self.num_heads, -1).unbind(2))
        if rope is not None:
            q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        keys, values = (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                           is_causal=causal and mask is None and past is None)
        return self.proj(y.transpose(1, 2).reshape(n, length, width)), (k, v)


class Block(nn.Module):
    """Pre-norm transformer block: attention + 4x GELU MLP, both residual."""

    def __init__(self, width: int, num_heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = SelfAttention(width, num_heads)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor, **attention) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``x`` ``(N, L, D)`` -> ``(N, L, D)`` and the attention's keys/values (see `SelfAttention`)."""
        attended, kv = self.attn(self.norm1(x), **attention)
        x = x + attended
        return x + self.mlp(self.norm2(x)), kv


class StarBlock(nn.Module):
    """One layer: a local block within each step, then a causal global block across steps: attention
    (`Block`) or, with ``model.layer="srwm"``, a self-referential weight matrix (`FastWeightBlock`)."""

    def __init__(self, cfg: ModelConfig, tokens_per_step: int):
        super().__init__()
        d = cfg.width
        self.local = Block(d, cfg.num_heads)
        self.global_ = FastWeightBlock(d, cfg.srwm_heads) if cfg.layer == "srwm" else Block(d, cfg.num_heads)
        self.summarise = nn.Sequential(
            nn.LayerNorm(d), nn.Flatten(2), nn.Linear(tokens_per_step * d, d), nn.LayerNorm(d)
        )

    def forward(self, local: torch.Tensor, global_: torch.Tensor, temporal: torch.Tensor | None,
                **attention) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``local`` (B, T, P+1, D), ``global_`` (B, T, D) -> the same, and the global block's keys
        and values (B, H, 2T, hd), or with the SRWM its matrices after the last token. ``temporal``:
        schema 1's learned step table (1, >= T, D) added to the step summaries
        (`StepEmbedding.temporal`; None with rotary positions). ``attention``: the global block's
        mask/rope/past (`SelfAttention`; the SRWM's: past)."""
        b, t, n, d = local.shape
        local = self.local(local.reshape(b * t, n, d))[0].view(b, t, n, d)
        summary = self.summarise(local)
        if temporal is not None:
            summary = summary + temporal[:, :t]
        # Interleave [summary_0, global_0, summary_1, global_1, ...]: with a causal mask,
        # global_t sees steps <= t only (its own step's summary included).
        seq = torch.stack([summary, global_], 2).view(b, 2 * t, d)
        out, kv = self.global_(seq, **attention)
        return local, out[:, 1::2], kv
