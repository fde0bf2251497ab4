"""The world model: a StARformer-style Vision Transformer over (view, action) steps.

Reference design (seed 000, Sorrel's ``sorrel.models.pytorch.transformer``), re-written small:

* each step t becomes *local* tokens: one per ``patch x patch`` patch of the one-hot view
  (linear patch embedding + patch-position embedding) plus one token for the action taken at t;
* each step also gets a *global* token: a small convolution over the whole view, plus a
  learned temporal (step-index) embedding and, optionally, an agent-identity embedding;
* every layer runs a **local** block (attention within one step over its patch and action
  tokens) and then a **global** block (causal attention across steps over the interleaved
  sequence ``[local summary_0, global_0, local summary_1, global_1, ...]``);
* heads: the next view, per cell, as logits over the 6 entity kinds; the next action.
  Optionally (``action_conv``, on by default) an action-conditioned 3x3 convolution of the
  current view is added to the next-view logits: a learned motion prior; and (``memory_conv``)
  a 5x5 convolution of the view before, chosen by the last two actions.

Predictions at step t depend only on steps <= t (tested). One deliberate departure from the
reference: the view head reads each patch's final local token fused with the step's global
token and predicts that patch's cells, instead of decoding all 81 cells from the single
192-wide global token. The local tokens already saw the step's view and action (the motion),
so the head no longer has to squeeze the whole view through one vector; this is what lets the
model beat the motion oracle on items (docs/worldmodel.md).

The model owns its training loss (`WorldModel.loss`) and its optimizer parameter groups
(`WorldModel.param_groups`); the file reads top to bottom: attention, block, step embedding,
StARformer layer, the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rpg_worldmodel.config import ModelConfig


class SelfAttention(nn.Module):
    """Multi-head self-attention with a fused QKV projection, via ``scaled_dot_product_attention``."""

    def __init__(self, width: int, num_heads: int, dropout: float):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.dropout = dropout
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, causal: bool) -> torch.Tensor:
        """``x``: (N, L, D) -> (N, L, D); ``causal`` masks attention to later positions."""
        n, length, width = x.shape
        qkv = self.qkv(x)
        if qkv.device.type == "cpu" and qkv.dtype == torch.bfloat16:
            # CPU's bf16 flash-attention backward is ~15x slower than fp32 for these short
            # sequences (10 tokens), while bf16 pays off in the projections and MLPs.
            qkv = qkv.float()
        q, k, v = (t.transpose(1, 2) for t in qkv.view(n, length, 3, self.num_heads, -1).unbind(2))
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=causal
        )
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(n, length, width)))


class Block(nn.Module):
    """Pre-norm transformer block: attention + 4x GELU MLP, both residual."""

    def __init__(self, width: int, num_heads: int, dropout: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = SelfAttention(width, num_heads, dropout)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), causal)
        return x + self.mlp(self.norm2(x))


class StepEmbedding(nn.Module):
    """Views and actions -> local tokens (B, T, P+1, D) and global tokens (B, T, D)."""

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
        self.temporal = nn.Parameter(torch.zeros(1, cfg.num_frames, d))
        self.agent = nn.Embedding(cfg.max_agents, d) if cfg.agent_embedding else None

    def forward(
        self, views: torch.Tensor, actions: torch.Tensor, agent_ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, c, v, _ = views.shape
        p, g = self.patch_size, self.grid
        # (B,T,C,V,V) -> (B,T,g*g,p*p*C), patches in row-major order, cells (row, col, channel)
        patches = views.reshape(b, t, c, g, p, g, p).permute(0, 1, 3, 5, 4, 6, 2).reshape(b, t, g * g, -1)
        local = torch.cat([self.patch(patches) + self.patch_position, self.action(actions)[:, :, None]], 2)
        global_ = self.conv(views.reshape(b * t, c, v, v)).view(b, t, -1) + self.temporal[:, :t]
        if self.agent is not None:
            if agent_ids is None:
                raise ValueError("this model was built with agent_embedding=True: pass agent_ids (B,)")
            global_ = global_ + self.agent(agent_ids)[:, None]
        return local, global_


class StarBlock(nn.Module):
    """One layer: a local block within each step, then a causal global block across steps."""

    def __init__(self, cfg: ModelConfig, tokens_per_step: int):
        super().__init__()
        d = cfg.width
        self.local = Block(d, cfg.num_heads, cfg.dropout)
        self.global_ = Block(d, cfg.num_heads, cfg.dropout)
        self.summarise = nn.Sequential(
            nn.LayerNorm(d), nn.Flatten(2), nn.Linear(tokens_per_step * d, d), nn.LayerNorm(d)
        )

    def forward(
        self, local: torch.Tensor, global_: torch.Tensor, temporal: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, n, d = local.shape
        local = self.local(local.reshape(b * t, n, d)).view(b, t, n, d)
        summary = self.summarise(local) + temporal[:, :t]
        # Interleave [summary_0, global_0, summary_1, global_1, ...]: with a causal mask,
        # global_t sees steps <= t only (its own step's summary included).
        seq = torch.stack([summary, global_], 2).view(b, 2 * t, d)
        global_ = self.global_(seq, causal=True)[:, 1::2]
        return local, global_


def _conv_for_choice(conv: nn.Conv2d, x: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
    """``conv(x)`` restricted to output group ``choice[n]`` for each sample n: (N, C, V, V).

    ``conv`` holds one group of ``C`` output channels per choice (e.g. per action); computing
    only the chosen group (unfold + batched matmul) is ``num_choices`` times cheaper than
    running the whole convolution and selecting afterwards.
    """
    n, c, h, w = x.shape
    k = conv.kernel_size[0]
    cols = F.unfold(x, k, padding=k // 2)  # (N, C*k*k, H*W), ordered like conv.weight's (in, kh, kw)
    weight = conv.weight.view(-1, c, c * k * k)[choice]  # (N, C_out, C*k*k)
    bias = conv.bias.view(-1, c)[choice]
    return (torch.bmm(weight, cols) + bias[..., None]).view(n, c, h, w)


def view_codes(views: torch.Tensor) -> torch.Tensor:
    """One-hot views (..., C, V, V) -> entity codes (..., V, V) int64 (the channel that is set)."""
    return views.argmax(-3)


@dataclass(frozen=True)
class LossWeights:
    """Weights of the training loss: ``view`` and ``action`` scale the two cross-entropies;
    cells whose true next kind is in ``item_codes`` weigh ``item`` times the others in the view
    loss (they are rare and are what the model is for; 1.0 leaves the loss unweighted)."""

    view: float = 1.0
    action: float = 0.5
    item: float = 1.0
    item_codes: Sequence[int] = ()


class WorldModel(nn.Module):
    """Predicts the next view and next action from a window of views and actions.

    ``forward(views (B,T,C,V,V) float in [0,1], actions (B,T) long, agent_ids (B,) long | None)``
    returns ``(view_logits (B,T,C,V,V), action_logits (B,T,num_actions))``: at step t, logits of
    the entity kind of every cell of view t+1 (softmax over the C axis) and of action t+1, given
    views and actions up to and including t (action t is the one taken in view t).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        d, p = cfg.width, cfg.patch_size
        self.grid = cfg.view_size // p
        self.embed = StepEmbedding(cfg)
        self.embed_dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(StarBlock(cfg, self.grid * self.grid + 1) for _ in range(cfg.num_layers))
        self.norm_local = nn.LayerNorm(d)
        self.norm_global = nn.LayerNorm(d)
        # View head: a small MLP per patch over [its token at t, its token at t-1] plus the
        # step's global token. The t-1 token lets the head bring back what just left the view
        # when the agent turns round (the motion oracle cannot know those cells).
        self.patch_in = nn.Linear(2 * d, d)
        self.global_to_patch = nn.Linear(d, d)
        self.view_head = nn.Linear(d, p * p * cfg.num_channels)
        self.action_head = nn.Linear(d, cfg.num_actions)
        # A learned motion prior: one 3x3 convolution of view t per action, added to the view
        # t+1 logits. Moving shifts the whole egocentric view by one cell, which a 3x3 kernel
        # expresses exactly; the transformer then only has to learn what motion alone does not
        # explain (blocked moves, pick-ups, the co-player, cells entering the view).
        self.action_conv = (
            nn.Conv2d(cfg.num_channels, cfg.num_actions * cfg.num_channels, 3, padding=1)
            if cfg.action_conv
            else None
        )
        # The same over two steps: a 5x5 convolution of view t-1 per pair (action t-1, action t).
        # After a turn-round (up, down) view t+1 is view t-1 again, so this is where cells that
        # just left the view come back from.
        a2 = cfg.num_actions * cfg.num_actions
        self.memory_conv = (
            nn.Conv2d(cfg.num_channels, a2 * cfg.num_channels, 5, padding=2) if cfg.memory_conv else None
        )
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(
        self, views: torch.Tensor, actions: torch.Tensor, agent_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        b, t = actions.shape
        expected = (cfg.num_channels, cfg.view_size, cfg.view_size)
        if views.dim() != 5 or tuple(views.shape[2:]) != expected or views.shape[:2] != actions.shape:
            raise ValueError(
                f"views must be (B,T,{expected[0]},{expected[1]},{expected[2]}) and actions (B,T)"
                f" with the same B,T; got views {tuple(views.shape)}, actions {tuple(actions.shape)}"
            )
        if t > cfg.num_frames:
            raise ValueError(f"window of {t} steps is longer than model.num_frames={cfg.num_frames}")
        local, global_ = self.embed(views, actions, agent_ids)
        local, global_ = self.embed_dropout(local), self.embed_dropout(global_)
        temporal = self.embed.temporal
        for block in self.blocks:
            local, global_ = block(local, global_, temporal)
        global_ = self.norm_global(global_)
        # View head: each patch's token at t and t-1 plus its step's (causal) global context.
        g, p, c = self.grid, cfg.patch_size, cfg.num_channels
        patch_tokens = self.norm_local(local[:, :, : g * g])
        previous = torch.cat([torch.zeros_like(patch_tokens[:, :1]), patch_tokens[:, :-1]], 1)  # causal
        hidden = (
            self.patch_in(torch.cat([patch_tokens, previous], -1)) + self.global_to_patch(global_)[:, :, None]
        )
        cells = self.view_head(F.gelu(hidden)).view(b, t, g, g, p, p, c)
        view_logits = cells.permute(0, 1, 6, 2, 4, 3, 5).reshape(b, t, c, g * p, g * p)
        if self.action_conv is not None:
            chosen = _conv_for_choice(
                self.action_conv, views.reshape(b * t, c, *views.shape[-2:]), actions.reshape(-1)
            )
            view_logits = view_logits + chosen.view_as(view_logits)
        if self.memory_conv is not None and t > 1:
            n_act = cfg.num_actions
            pair = (actions[:, :-1] * n_act + actions[:, 1:]).reshape(-1)
            chosen = _conv_for_choice(
                self.memory_conv, views[:, :-1].reshape(b * (t - 1), c, *views.shape[-2:]), pair
            )
            first = torch.zeros_like(view_logits[:, :1])  # step 0 has no step before it in the window
            view_logits = view_logits + torch.cat([first, chosen.view(b, t - 1, *view_logits.shape[2:])], 1)
        return view_logits, self.action_head(global_)

    def loss(
        self,
        batch: dict[str, torch.Tensor],
        weights: LossWeights = LossWeights(),
        input_mask: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training loss of one batch of windows, and detached per-batch statistics.

        ``batch`` (on the model's device): ``views`` (B, T+1, C, V, V) one-hot (any dtype),
        ``actions`` (B, T+1) long and, for a model with an agent embedding, ``agent_id`` (B,).
        The model reads the first T steps (through ``input_mask`` when given: it hides part of
        the input, never of the targets) and is scored on the last T.

        The view loss is the per-cell cross-entropy over entity kinds (nats), weighted as
        ``weights`` says; ``stats``: ``view_ce`` (plain, unweighted), ``action_ce`` (nats),
        ``action_acc`` and ``cell_acc`` (fractions).
        """
        t = self.cfg.num_frames
        views = batch["views"].float()
        actions = batch["actions"]
        agent_ids = batch["agent_id"] if self.cfg.agent_embedding else None
        inputs = views[:, :t] if input_mask is None else input_mask(views[:, :t])
        view_logits, action_logits = self(inputs, actions[:, :t], agent_ids)
        view_logits, action_logits = view_logits.float(), action_logits.float()
        target_codes = view_codes(views[:, 1:])  # (B, T, V, V)
        cell_ce = F.cross_entropy(view_logits.transpose(1, 2), target_codes, reduction="none")
        cell_weights = torch.ones_like(cell_ce)
        if weights.item != 1.0:
            is_item = torch.isin(target_codes, torch.tensor(tuple(weights.item_codes), device=views.device))
            cell_weights = torch.where(is_item, weights.item, 1.0)
        view_loss = (cell_ce * cell_weights).sum() / cell_weights.sum()
        action_targets = actions[:, 1:]
        action_ce = F.cross_entropy(
            action_logits.reshape(-1, action_logits.shape[-1]), action_targets.reshape(-1)
        )
        loss = weights.view * view_loss + weights.action * action_ce
        with torch.no_grad():
            stats = {
                "view_ce": cell_ce.mean(),
                "action_ce": action_ce.detach(),
                "action_acc": (action_logits.argmax(-1) == action_targets).float().mean(),
                "cell_acc": (view_logits.argmax(2) == target_codes).float().mean(),
            }
        return loss, stats

    def param_groups(self, weight_decay: float) -> list[dict]:
        """AdamW parameter groups: ``weight_decay`` on weight matrices and kernels, none elsewhere."""
        # By rank: matrices (2: Linear, Embedding) and conv kernels (4) scale their input, so decay
        # keeps them small; vectors (1: biases, LayerNorm) and the additive (1, L, D) position and
        # step tables (3) only shift activations, and decaying them just biases them to zero.
        decay = [p for p in self.parameters() if p.dim() in (2, 4)]
        no_decay = [p for p in self.parameters() if p.dim() not in (2, 4)]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
