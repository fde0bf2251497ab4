"""The world model's heads beside the view head: the frame-stack action head, the reward head and
its prior started at the game's rule, and the motion prior (`MoveConv`) with the per-choice
convolution behind it. They read the steps as `rpg_worldmodel.models.steps.Steps` holds them.

A view prior is a part with ``add_to(view_logits, steps)``, which adds its logits of view t+1
(B, T, C, V, V) to the view head's: `MoveConv` here, the memory map
(`rpg_worldmodel.models.memory`) and the first version's two-step convolution
(`rpg_worldmodel.models.variants`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.models.steps import Steps


class FrameStackActionHead(nn.Module):
    """The next action read the way a policy reads it: from a stack of its latest views.

    A policy acting at t+1 sees views ..., t, t+1. The head stacks the last ``k - 1`` real views
    (t-k+2 .. t, zeros before the first) with the model's own predicted view t+1 (probabilities,
    detached: the action loss does not bend the view prediction) as ``k * C`` channels, runs a
    small full-resolution CNN over them (the shape of the shipped experts' networks, not their
    weights) and reads the result beside the step's global token, which carries the older past.
    ``stack`` (N, k*C, V, V), ``global_`` (N, D) -> logits (N, A).
    """

    channels = (16, 16)  # the two convolutions' widths (32, 16 learns no better: docs/worldmodel.md)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        c, v, d = cfg.num_channels, cfg.view_size, cfg.width
        self.num_frames = cfg.action_frames
        first, second = self.channels
        self.cnn = nn.Sequential(
            nn.Conv2d(self.num_frames * c, first, 3, padding=1), nn.GELU(),
            nn.Conv2d(first, second, 3, padding=1), nn.GELU(),
            nn.Flatten(), nn.Linear(second * v * v, d), nn.GELU(),
        )
        self.out = nn.Linear(2 * d, cfg.num_actions)

    def predict(self, global_: torch.Tensor, view_logits: torch.Tensor, steps: Steps) -> torch.Tensor:
        """Logits (B, T, A) of action t+1 from the global tokens (B, T, D), the predicted view t+1
        ``view_logits`` (B, T, C, V, V) and ``steps.frames``."""
        b, t, _, v, _ = view_logits.shape
        predicted = view_logits.detach().float().softmax(2).to(steps.views.dtype)[:, :, None]
        stack = predicted if steps.frames is None else torch.cat([steps.frames, predicted], 2)
        return self(stack.reshape(b * t, -1, v, v), global_.reshape(b * t, -1)).view(b, t, -1)

    def forward(self, stack: torch.Tensor, global_: torch.Tensor) -> torch.Tensor:
        if stack.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            # bf16 convolutions (and their backward) run ~15x slower than fp32 on CPUs without
            # bf16 units; the rest of the model keeps autocast, where bf16 pays off.
            with torch.autocast("cpu", enabled=False):
                return self.out(torch.cat([self.cnn(stack.float()), global_.float()], -1))
        return self.out(torch.cat([self.cnn(stack), global_], -1))


#: How strongly the reward prior starts on the game's rule (logits). The learned head leans ~3
#: logits towards "nothing" (most steps pay nothing) wherever it has no data, a bump included: at 6
#: a dream still paid nothing for 4% of bumps and a gem for 3%.
RULE_LOGIT = 10.0


def reward_head(cfg: ModelConfig) -> nn.Sequential | None:
    """The reward head: [global token, centre patch token] (B, T, 2D) -> logits (B, T, K) of the
    step's reward class; None without one (``model.reward_head=false``, or no reward values)."""
    num_rewards = len(cfg.reward_values) if cfg.reward_head else 0
    if not num_rewards:
        return None
    return nn.Sequential(nn.Linear(2 * cfg.width, cfg.width), nn.GELU(), nn.Linear(cfg.width, num_rewards))


def rule_prior(cfg: ModelConfig) -> nn.Embedding | None:
    """Logits of the reward class per kind of the entered cell: (C + 1, K), row 0 a hidden cell;
    None without the movement table or a reward head.

    Added to the reward head's logits and started at the game's rule (`start_rule_prior`). Learned
    from data alone, the row of walls never learned the bump's penalty (the expert bumps on 0.09%
    of its steps) and a dream paid a gem for 10% of bumps, which PPO found and exploited."""
    if not (cfg.reward_head and cfg.reward_values and cfg.move_rules):
        return None
    return nn.Embedding(cfg.num_channels + 1, len(cfg.reward_values))


def start_rule_prior(prior: nn.Embedding | None, cfg: ModelConfig) -> None:
    """Row k + 1 favours the class of ``cfg.entered_rewards[k]`` by `RULE_LOGIT`; row 0 (a hidden
    cell), and every row of a model without the values, start at zero."""
    if prior is None:
        return
    with torch.no_grad():
        prior.weight.zero_()
        for kind, points in enumerate(cfg.entered_rewards):
            prior.weight[kind + 1, list(cfg.reward_values).index(points)] = RULE_LOGIT


def rule_logits(prior: nn.Embedding, entered: torch.Tensor, num_channels: int) -> torch.Tensor:
    """The prior's reward logits (B, T, K) for the entered cells' kinds (B, T): row 0 for a hidden
    cell (-1). A move that stays enters the agent's own cell (kind ``num_channels``), which no rule
    prices: it shares the hidden cell's row, which starts at zero."""
    return prior(torch.where(entered >= num_channels, -1, entered) + 1)


def predict_reward(head: nn.Sequential | None, prior: nn.Embedding | None, global_: torch.Tensor,
                   centre: torch.Tensor, entered: torch.Tensor | None) -> torch.Tensor | None:
    """The reward head's logits (B, T, K) from the global tokens and the centre patch's tokens
    (B, T, D), plus the rule prior's for the ``entered`` kinds (B, T) where the model has one;
    None without a reward head."""
    if head is None:
        return None
    reward = head(torch.cat([global_, centre], -1))
    return reward if prior is None else reward + rule_logits(prior, entered, prior.num_embeddings - 1)


def unfold_same(x: torch.Tensor, k: int) -> torch.Tensor:
    """``F.unfold(x, k, padding=k // 2)`` (stride 1) as one strided copy: (N, C, H, W) ->
    (N, C*k*k, H*W). F.unfold takes 3-4x longer on CPU at these sizes (3 ms for a batch of 9x9
    views)."""
    n, c, h, w = x.shape
    windows = F.pad(x, (k // 2,) * 4).unfold(2, k, 1).unfold(3, k, 1)  # (N, C, H, W, k, k), a view
    return windows.permute(0, 1, 4, 5, 2, 3).reshape(n, c * k * k, h * w)


def conv_for_choice(conv: nn.Conv2d, x: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
    """``conv(x)`` restricted to output group ``choice[n]`` for each sample n: (N, C, V, V).

    ``conv`` holds one group of ``C`` output channels per choice (e.g. per action); computing
    only the chosen group (unfold + batched matmul) is ``num_choices`` times cheaper than
    running the whole convolution and selecting afterwards.
    """
    n, c, h, w = x.shape
    k = conv.kernel_size[0]
    cols = unfold_same(x, k)  # (N, C*k*k, H*W), ordered like conv.weight's (in, kh, kw)
    # Select each sample's group with a one-hot matmul rather than indexing: the backward of an
    # indexed gather accumulates repeated choices in a thread-dependent order (not bit-reproducible).
    pick = F.one_hot(choice, conv.out_channels // c).to(x.dtype)  # (N, choices)
    weight = (pick @ conv.weight.view(-1, c * c * k * k)).view(n, c, c * k * k)  # (N, C_out, C*k*k)
    bias = pick @ conv.bias.view(-1, c)
    return (torch.bmm(weight, cols) + bias[..., None]).view(n, c, h, w)


class MoveConv(nn.Conv2d):
    """The motion prior: a 3x3 convolution of view t per move outcome (``model.action_conv``).

    Moving shifts the whole egocentric view by one cell, which a 3x3 kernel expresses exactly;
    the transformer then only has to learn what motion alone does not explain (blocked moves,
    pick-ups, the co-player, cells entering the view). With the movement table a blocked move
    (the view stays) is a choice of its own beside the actions.
    """

    def __init__(self, cfg: ModelConfig):
        moves = cfg.num_actions + 1 if cfg.move_rules else cfg.num_actions
        super().__init__(cfg.num_channels, moves * cfg.num_channels, 3, padding=1)

    def add_to(self, view_logits: torch.Tensor, steps: Steps) -> torch.Tensor:
        flat = steps.views.reshape(-1, *steps.views.shape[2:])
        return view_logits + conv_for_choice(self, flat, steps.moves.reshape(-1)).view_as(view_logits)


def move_conv(cfg: ModelConfig) -> MoveConv | None:
    """The motion prior, or None without one (``model.action_conv=false``)."""
    return MoveConv(cfg) if cfg.action_conv else None
