"""The world model: a StARformer-style Vision Transformer over (view, action) steps.

Reference design (seed 000, Sorrel's ``sorrel.models.pytorch.transformer``), re-written small:

* each step t becomes *local* tokens: one per ``patch x patch`` patch of the one-hot view
  (linear patch embedding + patch-position embedding) plus one token for the action taken at t;
* each step also gets a *global* token: a small convolution over the whole view (and,
  optionally, an agent-identity embedding);
* every layer runs a **local** block (attention within one step over its patch and action
  tokens) and then a **global** block (causal attention across steps over the interleaved
  sequence ``[local summary_0, global_0, local summary_1, global_1, ...]``). Steps know their
  order through rotary positions (``position="rope"``, relative: imagination caches the keys of
  past steps while its window slides) or a learned absolute table (``"learned"``, checkpoints of
  schema 1). Attention reaches back ``num_frames`` steps: a window of that length in training,
  a sliding window of it over a longer history;
* heads, at step t: the next view, per cell, as logits over the C entity kinds (with a 3x3
  convolution of view t chosen by the move's outcome, a learned motion prior: the action, or
  "blocked" where the game's movement table says the move enters a wall or an agent,
  `rpg_worldmodel.models.moves`; a 5x5 convolution of view t-1 chosen by the last two actions;
  and the memory map's prior: the cells seen in the window re-drawn in view t+1's frame,
  `rpg_worldmodel.models.memory`); the next action (a small CNN over the last views and the
  predicted next one, the frame stack a policy acting at t+1 reads, beside the global token);
  and the reward of step t, as a class over the game's possible rewards.

Predictions at step t depend only on steps <= t (tested). The view head reads each patch's final
local token (at t and t-1) fused with the step's global token and predicts that patch's cells;
the reward head reads the global token, the token of the patch around the agent, which holds
the cells a move can enter, and the kind of the cell the move enters.

The model owns its training loss (`WorldModel.loss`), its optimizer parameter groups
(`WorldModel.param_groups`) and its one-step imagination (`WorldModel.imagine_step`, which
caches each step's local work and the global attention's keys and values). The file reads top to
bottom: step embedding, StARformer layer, the model, its loss, its imagination.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.models.blocks import Block, band_mask, rotary_tables
from rpg_worldmodel.models.heads import (
    FrameStackActionHead,
    conv_for_choice,
    frames_before,
    imagined_frames,
    rule_logits,
    rule_prior,
    start_rule_prior,
)
from rpg_worldmodel.models.memory import MemoryMap
from rpg_worldmodel.models.moves import MoveRules, cell_kinds, view_codes
from rpg_worldmodel.models.state import Imagination


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
        learned = cfg.position == "learned"
        self.temporal = nn.Parameter(torch.zeros(1, cfg.num_frames, d)) if learned else None
        self.agent = nn.Embedding(cfg.max_agents, d) if cfg.agent_embedding else None

    def forward(
        self, views: torch.Tensor, actions: torch.Tensor, agent_ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, c, v, _ = views.shape
        p, g = self.patch_size, self.grid
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

    def forward(self, local: torch.Tensor, global_: torch.Tensor, temporal: torch.Tensor | None,
                **attention) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``local`` (B, T, P+1, D), ``global_`` (B, T, D) -> the same, and the global block's keys
        and values (B, H, 2T, hd). ``attention``: the global block's mask/rope/past (`SelfAttention`)."""
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


class Outputs(NamedTuple):
    """What the model predicts at each step t: ``view`` (B, T, C, V, V) logits of view t+1,
    ``action`` (B, T, A) logits of action t+1, ``reward`` (B, T, K) logits of step t's reward
    class (None for a model without a reward head)."""

    view: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor | None


def _last(out: Outputs) -> Outputs:
    """The outputs of the last step only (T = 1)."""
    return Outputs(out.view[:, -1:], out.action[:, -1:], None if out.reward is None else out.reward[:, -1:])


@dataclass(frozen=True)
class LossWeights:
    """Weights of the training loss: ``view``, ``action`` and ``reward`` scale the three
    cross-entropies; cells whose true next kind is in ``item_codes`` weigh ``item`` times the
    others in the view loss (they are rare and are what the model is for; 1.0: unweighted)."""

    view: float = 1.0
    action: float = 0.5
    item: float = 1.0
    item_codes: Sequence[int] = ()
    reward: float = 1.0


class WorldModel(nn.Module):
    """Predicts the next view, the next action and the reward from a window of views and actions.

    ``forward(views (B,T,C,V,V) float in [0,1], actions (B,T) long, agent_ids (B,) long | None)``
    returns `Outputs`: at step t, given views and actions up to and including t (action t is the
    one taken in view t), logits of every cell of view t+1 (softmax over the C axis), of action
    t+1 and of the reward class of step t (``reward_values[k]`` points).
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
        self.action_head = FrameStackActionHead(cfg) if cfg.action_frames else nn.Linear(d, cfg.num_actions)
        # The reward of step t depends on the cell the action enters: the head reads the token of
        # the patch around the agent (holding that cell) beside the step's global token.
        centre = cfg.view_size // 2 // p
        self.centre_patch = centre * self.grid + centre
        num_rewards = len(cfg.reward_values) if cfg.reward_head else 0
        self.reward_head = nn.Sequential(
            nn.Linear(2 * d, d), nn.GELU(), nn.Linear(d, num_rewards)) if num_rewards else None
        # With the movement table: a prior of the reward class per kind of the entered cell, added to
        # the head's logits and started at the game's rule (`entered_rewards`). Learned from data
        # alone, the row of walls never learned the bump's penalty (the expert bumps on 0.09% of its
        # steps) and a dream paid a gem for 10% of bumps, which PPO found and exploited.
        self.reward_prior = rule_prior(cfg) if num_rewards and cfg.move_rules else None
        self.register_buffer("reward_values", torch.tensor(cfg.reward_values, dtype=torch.float32),
                             persistent=False)
        # A learned motion prior: one 3x3 convolution of view t per action, added to the view
        # t+1 logits. Moving shifts the whole egocentric view by one cell, which a 3x3 kernel
        # expresses exactly; the transformer then only has to learn what motion alone does not
        # explain (blocked moves, pick-ups, the co-player, cells entering the view).
        # With the movement table, a blocked move (the view stays) is a choice of its own.
        moves = cfg.num_actions + 1 if cfg.move_rules else cfg.num_actions
        self.action_conv = (
            nn.Conv2d(cfg.num_channels, moves * cfg.num_channels, 3, padding=1)
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
        # The game's movement table, and the cells seen in the last steps re-drawn in the next
        # view's frame by it (models/moves.py, models/memory.py).
        self.moves = MoveRules(cfg) if cfg.memory_map or cfg.move_rules else None
        self.memory_map = MemoryMap(cfg) if cfg.memory_map else None
        self.apply(self._init_weights)
        if self.reward_prior is not None:
            start_rule_prior(self.reward_prior, cfg)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self.cfg.position != "rope":
            return None
        return rotary_tables(positions, self.cfg.width // self.cfg.num_heads)

    # ------------------------------------------------------------------ a window of steps
    def forward(self, views: torch.Tensor, actions: torch.Tensor,
                agent_ids: torch.Tensor | None = None) -> Outputs:
        cfg = self.cfg
        b, t = actions.shape
        expected = (cfg.num_channels, cfg.view_size, cfg.view_size)
        if views.dim() != 5 or tuple(views.shape[2:]) != expected or views.shape[:2] != actions.shape:
            raise ValueError(
                f"views must be (B,T,{expected[0]},{expected[1]},{expected[2]}) and actions (B,T)"
                f" with the same B,T; got views {tuple(views.shape)}, actions {tuple(actions.shape)}"
            )
        if t > cfg.num_frames and cfg.position != "rope":
            raise ValueError(f"window of {t} steps is longer than model.num_frames={cfg.num_frames} "
                             f"(a model with learned positions reads at most that many)")
        local, global_ = self.embed(views, actions, agent_ids)
        local, global_ = self.embed_dropout(local), self.embed_dropout(global_)
        # Longer than the attention window (the reference path of imagination): a sliding band.
        mask = band_mask(t, cfg.num_frames, 2, views.device) if t > cfg.num_frames else None
        rope = self._rope(torch.arange(2 * t, device=views.device))
        attention = {"causal": True, "mask": mask, "rope": rope}
        for block in self.blocks:
            local, global_, _ = block(local, global_, self.embed.temporal, **attention)
        patches = self.norm_local(local[:, :, : self.grid * self.grid])
        previous = torch.cat([torch.zeros_like(patches[:, :1]), patches[:, :-1]], 1)  # causal
        prev_views = torch.cat([torch.zeros_like(views[:, :1]), views[:, :-1]], 1)
        prev_actions = torch.cat([actions[:, :1], actions[:, :-1]], 1)
        has_prev = torch.arange(t, device=views.device) > 0
        kinds = None if self.moves is None else cell_kinds(views)
        memory = None if self.memory_map is None else self.memory_map(kinds, actions, t, self.moves)
        return self._heads(patches, previous, self.norm_global(global_), views, actions, prev_views,
                           prev_actions, has_prev, frames_before(views, cfg.action_frames), memory, kinds)

    def _heads(self, patches: torch.Tensor, previous: torch.Tensor, global_: torch.Tensor,
               views: torch.Tensor, actions: torch.Tensor, prev_views: torch.Tensor,
               prev_actions: torch.Tensor, has_prev: torch.Tensor, frames: torch.Tensor | None,
               memory: torch.Tensor | None, kinds: torch.Tensor | None) -> Outputs:
        """The three heads from final tokens ``patches``/``previous`` (B, T, P, D) and ``global_``
        (B, T, D); ``prev_*`` are step t-1's view and action, used where ``has_prev`` (T,);
        ``frames`` (B, T, k-1, C, V, V) the views the action head stacks with its predicted one;
        ``memory`` (B, T, C, V, V) the memory map's logits; ``kinds`` (B, T, V, V) the views' cell
        kinds (`cell_kinds`; None without the movement table)."""
        cfg = self.cfg
        b, t = actions.shape
        g, p, c, v = self.grid, cfg.patch_size, cfg.num_channels, cfg.view_size
        hidden = self.patch_in(torch.cat([patches, previous], -1)) + self.global_to_patch(global_)[:, :, None]
        cells = self.view_head(F.gelu(hidden)).view(b, t, g, g, p, p, c)
        view_logits = cells.permute(0, 1, 6, 2, 4, 3, 5).reshape(b, t, c, v, v)
        flat_views = views.reshape(b * t, c, v, v)
        moves, entered = actions, None
        if cfg.move_rules:
            entered, moves = self.moves.outcome(kinds, actions)
        if self.action_conv is not None:
            view_logits = view_logits + conv_for_choice(self.action_conv, flat_views,
                                                         moves.reshape(-1)).view_as(view_logits)
        if self.memory_conv is not None and bool(has_prev.any()):
            pair = (prev_actions * cfg.num_actions + actions).reshape(-1)
            chosen = conv_for_choice(self.memory_conv, prev_views.reshape(b * t, c, v, v), pair)
            view_logits = view_logits + chosen.view_as(view_logits) * has_prev.view(1, t, 1, 1, 1)
        if memory is not None:
            view_logits = view_logits + memory
        reward = None
        if self.reward_head is not None:
            reward = self.reward_head(torch.cat([global_, patches[:, :, self.centre_patch]], -1))
            if self.reward_prior is not None:
                reward = reward + rule_logits(self.reward_prior, entered, cfg.num_channels)
        if isinstance(self.action_head, FrameStackActionHead):
            predicted = view_logits.detach().float().softmax(2).to(views.dtype)[:, :, None]
            stack = predicted if frames is None else torch.cat([frames, predicted], 2)
            action = self.action_head(stack.reshape(b * t, -1, v, v), global_.reshape(b * t, -1))
            action = action.view(b, t, -1)
        else:
            action = self.action_head(global_)
        return Outputs(view_logits, action, reward)

    # ------------------------------------------------------------------ training
    def reward_classes(self, rewards: torch.Tensor) -> torch.Tensor:
        """Rewards (points, any shape) -> their class index among ``reward_values`` (long).

        Raises ValueError naming the first reward no class holds (data of another game)."""
        match = torch.isclose(rewards[..., None].float(), self.reward_values, rtol=0.0, atol=1e-4)
        if not bool(match.any(-1).all()):
            unknown = rewards[~match.any(-1)][0].item()
            raise ValueError(f"reward {unknown:g} is not one of the model's reward classes "
                             f"{self.cfg.reward_values}; the data comes from a game with other values")
        return match.float().argmax(-1)

    def loss(
        self,
        batch: dict[str, torch.Tensor],
        weights: LossWeights = LossWeights(),
        input_mask: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training loss of one batch of windows, and detached per-batch statistics.

        ``batch`` (on the model's device): ``views`` (B, T+1, C, V, V) one-hot (any dtype),
        ``actions`` (B, T+1) long, ``rewards`` (B, T+1) float (needed with a reward head) and,
        for a model with an agent embedding, ``agent_id`` (B,). The model reads the first T steps
        (through ``input_mask`` when given: it hides part of the input, never of the targets)
        and is scored on the last T views and actions and the first T rewards.

        The view loss is the per-cell cross-entropy over entity kinds (nats), weighted as
        ``weights`` says; ``stats``: ``view_ce`` (plain, unweighted), ``action_ce`` and
        ``reward_ce`` (nats), ``action_acc``, ``cell_acc`` and ``reward_acc`` (fractions).
        """
        t = self.cfg.num_frames
        views = batch["views"].float()
        actions = batch["actions"]
        agent_ids = batch["agent_id"] if self.cfg.agent_embedding else None
        inputs = views[:, :t] if input_mask is None else input_mask(views[:, :t])
        out = self(inputs, actions[:, :t], agent_ids)
        view_logits, action_logits = out.view.float(), out.action.float()
        target_codes = view_codes(views[:, 1:])  # (B, T, V, V)
        cell_ce = F.cross_entropy(view_logits.transpose(1, 2), target_codes, reduction="none")
        cell_weights = torch.ones_like(cell_ce)
        if weights.item != 1.0:
            is_item = torch.isin(target_codes, torch.tensor(tuple(weights.item_codes), device=views.device))
            cell_weights = torch.where(is_item, weights.item, 1.0)
        view_loss = (cell_ce * cell_weights).sum() / cell_weights.sum()
        action_targets = actions[:, 1:]
        action_ce = F.cross_entropy(action_logits.reshape(-1, action_logits.shape[-1]),
                                    action_targets.reshape(-1))
        loss = weights.view * view_loss + weights.action * action_ce
        with torch.no_grad():
            # argmax over a contiguous last axis: ~7x faster on CPU than over the strided C axis
            predicted_codes = view_logits.movedim(2, -1).contiguous().argmax(-1)
            stats = {
                "view_ce": cell_ce.mean(),
                "action_ce": action_ce.detach(),
                "action_acc": (action_logits.argmax(-1) == action_targets).float().mean(),
                "cell_acc": (predicted_codes == target_codes).float().mean(),
            }
        if out.reward is not None:
            reward_logits = out.reward.float()
            reward_targets = self.reward_classes(batch["rewards"][:, :t])
            reward_ce = F.cross_entropy(reward_logits.reshape(-1, reward_logits.shape[-1]),
                                        reward_targets.reshape(-1))
            loss = loss + weights.reward * reward_ce
            stats["reward_ce"] = reward_ce.detach()
            stats["reward_acc"] = (reward_logits.argmax(-1) == reward_targets).float().mean().detach()
        return loss, stats

    def param_groups(self, weight_decay: float) -> list[dict]:
        """AdamW parameter groups: ``weight_decay`` on weight matrices and kernels, none elsewhere."""
        # By rank: matrices (2: Linear, Embedding) and conv kernels (4) scale their input, so decay
        # keeps them small; vectors (1: biases, LayerNorm) and the additive (1, L, D) position and
        # step tables (3) only shift activations, and decaying them just biases them to zero.
        # The reward prior is a table of logits started at the game's rule, not a map of its input:
        # decay would pull its rarely seen rows (walls) back to "no idea".
        prior = {id(self.reward_prior.weight)} if self.reward_prior is not None else set()
        decay = [p for p in self.parameters() if p.dim() in (2, 4) and id(p) not in prior]
        no_decay = [p for p in self.parameters() if p.dim() not in (2, 4) or id(p) in prior]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    # ------------------------------------------------------------------ imagination
    @torch.no_grad()
    def imagine_step(self, view: torch.Tensor, action: torch.Tensor, state: Imagination | None = None,
                     agent_ids: torch.Tensor | None = None) -> tuple[Outputs, Imagination]:
        """One step of N imagined (or replayed) worlds: the view they are in and the action taken.

        ``view`` (N, C, V, V) float one-hot, ``action`` (N,) long; ``state`` from the previous call
        (None: a fresh start). Returns `Outputs` with T = 1 (the next view, the next action and
        this step's reward) and the state for the next call. The cost is one step's work: each
        step's local computations and the global attention's keys and values are cached, and the
        cache keeps the last ``num_frames - 1`` steps, so predictions equal `forward` over the whole
        history (tested). Models with learned positions recompute their last steps instead.
        """
        state = Imagination(agent_ids=agent_ids) if state is None else state
        if self.cfg.position != "rope":
            return self._imagine_by_window(view, action, state)
        t_window = self.cfg.num_frames
        views, actions = view[:, None], action[:, None]
        local, global_ = self.embed(views, actions, state.agent_ids)
        positions = torch.arange(2 * state.step, 2 * state.step + 2, device=view.device)
        past_len = state.past[0][0].shape[2] if state.past else 0
        mask = torch.ones(2, past_len + 2, dtype=torch.bool, device=view.device)
        mask[0, -1] = False  # the step's summary does not see its global token
        past = []
        for layer, block in enumerate(self.blocks):
            previous_kv = state.past[layer] if state.past else None
            local, global_, kv = block(local, global_, None, mask=mask, rope=self._rope(positions),
                                       past=previous_kv)
            keys = kv if previous_kv is None else tuple(torch.cat([p, x], 2) for p, x in zip(previous_kv, kv,
                                                                                              strict=True))
            past.append(tuple(x[:, :, -2 * (t_window - 1):] if t_window > 1 else x[:, :, :0] for x in keys))
        patches = self.norm_local(local[:, :, : self.grid * self.grid])
        started = state.prev_view is not None
        has_prev = torch.tensor([started], device=view.device)
        previous = state.prev_patches[:, None] if started else torch.zeros_like(patches)
        prev_view = state.prev_view[:, None] if started else torch.zeros_like(views)
        prev_action = state.prev_action[:, None] if started else actions
        frames, recent = imagined_frames(view, state.recent_views, self.cfg.action_frames)
        memory, kept = None, None
        kinds = None if self.moves is None else cell_kinds(views)
        if self.memory_map is not None:
            history, acts = kinds, actions
            if state.memory is not None:
                history, acts = torch.cat([state.memory[0], kinds], 1), torch.cat([state.memory[1], acts], 1)
            memory = self.memory_map(history, acts, 1, self.moves)
            kept = (history[:, 1 - t_window:], acts[:, 1 - t_window:]) if t_window > 1 else None
        out = self._heads(patches, previous, self.norm_global(global_), views, actions, prev_view,
                          prev_action, has_prev, frames, memory, kinds)
        return out, replace(state, past=tuple(past), step=state.step + 1, prev_view=view, prev_action=action,
                            prev_patches=patches[:, 0], recent_views=recent, memory=kept)

    @property
    def context_steps(self) -> int:
        """Steps of history a prediction depends on: each layer's attention reaches ``num_frames - 1``
        steps further back, the view head reads the step before and the action head's frame stack
        ``action_frames - 1`` steps (learned positions: the window)."""
        if self.cfg.position != "rope":
            return self.cfg.num_frames
        return max(self.cfg.num_layers * (self.cfg.num_frames - 1) + 2, self.cfg.action_frames - 1)

    @torch.no_grad()
    def predict_last(self, views: torch.Tensor, actions: torch.Tensor,
                     agent_ids: torch.Tensor | None = None) -> Outputs:
        """The uncached reference of `imagine_step`: `forward` over the last `context_steps` steps of
        a history ``views`` (N, t, C, V, V), ``actions`` (N, t); outputs of the last step (T = 1)."""
        k = self.context_steps
        return _last(self(views[:, -k:], actions[:, -k:], agent_ids))

    def _imagine_by_window(self, view: torch.Tensor, action: torch.Tensor,
                           state: Imagination) -> tuple[Outputs, Imagination]:
        """`imagine_step` for absolute positions: recompute the window of the last steps."""
        views, actions = view[:, None], action[:, None]
        if state.window is not None:
            views = torch.cat([state.window[0], views], 1)[:, -self.cfg.num_frames:]
            actions = torch.cat([state.window[1], actions], 1)[:, -self.cfg.num_frames:]
        return _last(self(views, actions, state.agent_ids)), replace(state, step=state.step + 1,
                                                                      window=(views, actions))

    @torch.no_grad()
    def imagine_context(self, views: torch.Tensor, actions: torch.Tensor,
                        agent_ids: torch.Tensor | None = None, first_step: int = 0) -> Imagination:
        """The state of N worlds after real context: ``views`` (N, K, C, V, V) and the actions
        (N, K-1) taken in all but the last, whose action is still to come (the next
        `imagine_step` call). ``first_step``: the step index of the first view (a world joining
        others mid-run starts where they are, so their states can be spliced)."""
        state = Imagination(step=first_step, agent_ids=agent_ids)
        for i in range(actions.shape[1]):
            _, state = self.imagine_step(views[:, i], actions[:, i], state)
        return state
