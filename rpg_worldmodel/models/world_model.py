"""The world model: a StARformer-style Vision Transformer over (view, action) steps.

Seed 000's design (Sorrel's ``sorrel.models.pytorch.transformer``), re-written small:
* each step t becomes *local* tokens, one per ``patch x patch`` patch of the one-hot view plus
  one for the action taken at t, and a *global* token, a small convolution over the whole view
  (`rpg_worldmodel.models.transformer`);
* every layer (`StarBlock`) runs a **local** block (attention within one step) and then a
  **global** block (causal attention across steps over ``[local summary_0, global_0, ...]``),
  steps ordered by rotary positions, reaching back ``num_frames`` steps (``model.layer="srwm"``:
  an SRWM instead);
* heads (`rpg_worldmodel.models.heads`), at step t, reading the final tokens and the steps
  (`rpg_worldmodel.models.steps`): the next view, per cell, as logits over the C kinds plus the
  view priors' (a 3x3 convolution of view t by the step's shift; the memory map; the extents); the next
  action (a small CNN over the frame stack a policy acting at t+1 reads, beside the global token);
  the reward of step t, a class of the file's rewards; the shift (`rpg_worldmodel.models.motion`).

Nothing of a particular game is written here: moves, blocking, rewards and where agents stand are
learned from the training files (docs/worldmodel.md). Predictions at t read only steps <= t (tested).

The default forward pass reads in six files: this one, `transformer`, `motion`, `steps`, `extents`
and `heads`; beside them `legacy`, `fast_weights` (the SRWM) and `refiner` (the cell refiner). This file
reads top to bottom: outputs, tokens, the model's parts, forward, heads, loss, optimizer groups,
one-step imagination.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.models.fast_weights import RecurrentOrder, step_layers
from rpg_worldmodel.models.heads import (
    EndHead,
    ExtentPrior,
    FrameStackActionHead,
    MemoryMap,
    MoveConv,
    RewardHead,
    action_loss,
    end_loss,
    reward_loss,
)
from rpg_worldmodel.models.legacy import LearnedPositions, LinearActionHead, slide_window
from rpg_worldmodel.models.motion import MotionHead, infer_shifts
from rpg_worldmodel.models.refiner import BatchPart, CellRefiner, refiner_loss
from rpg_worldmodel.models.state import Imagination
from rpg_worldmodel.models.steps import (
    HIDDEN,
    Steps,
    cell_kinds,
    fixed_mask,
    imagined_steps,
    view_codes,
    window_steps,
)
from rpg_worldmodel.models.transformer import RotaryPositions, StarBlock, StepEmbedding

#: The weight of the next-action cross-entropy in the training loss; the view's, the reward's, the
#: shift's and the cell refiner's weigh 1.
ACTION_LOSS_WEIGHT = 0.5


class Outputs(NamedTuple):
    """What the model predicts at each step t: ``view`` (B, T, C, V, V) logits of view t+1,
    ``action`` (B, T, A) logits of action t+1, ``reward`` (B, T, K) logits of step t's reward
    class, ``end`` (B, T) the logit that step t ended the game (each None without its head)."""

    view: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor | None
    end: torch.Tensor | None = None


def _last(out: Outputs) -> Outputs:
    """The outputs of the last step only (T = 1)."""
    return Outputs(*(None if x is None else x[:, -1:] for x in out))


class Tokens(NamedTuple):
    """The final tokens the heads read: ``patches`` (B, T, P, D) of each step, ``previous``
    (B, T, P, D) those of step t-1 (zeros before the first), ``global_`` (B, T, D)."""

    patches: torch.Tensor
    previous: torch.Tensor
    global_: torch.Tensor


class WorldModel(nn.Module):
    """Predicts the next view, the next action and the reward from a window of views and actions.

    ``forward(views (B,T,C,V,V) float in [0,1], actions (B,T) long, extents_before)`` returns
    `Outputs`: at step t, given views and actions up to and including t (action t is the one taken
    in view t), logits of every cell of view t+1 (softmax over the C axis), of action t+1 and of the
    reward class of step t (``reward_values[k]`` points). ``extents_before`` (B, K, 4), optional:
    what the game's views before the window left for the extent prior (`models/steps.py`).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        d, p = cfg.width, cfg.patch_size
        self.grid = cfg.view_size // p
        self.embed = StepEmbedding(cfg)
        # How steps know their order: rotary positions; the SRWM's own recurrence; schema 1's table.
        if cfg.layer == "srwm":
            self.positions = RecurrentOrder()
        else:
            self.positions = RotaryPositions(cfg) if cfg.position == "rope" else LearnedPositions(cfg)
        self.blocks = nn.ModuleList(StarBlock(cfg, self.grid * self.grid + 1) for _ in range(cfg.num_layers))
        self.norm_local = nn.LayerNorm(d)
        self.norm_global = nn.LayerNorm(d)
        # View head: a small MLP per patch over [its token at t, its token at t-1] plus the
        # step's global token. The t-1 token lets the head bring back what just left the view
        # when the agent turns round (the motion oracle cannot know those cells).
        self.patch_in = nn.Linear(2 * d, d)
        self.global_to_patch = nn.Linear(d, d)
        self.view_head = nn.Linear(d, p * p * cfg.num_channels)
        # The frame-stack head a policy reads; schema <= 3's linear one on the global token.
        self.action_head = FrameStackActionHead(cfg) if cfg.action_frames else LinearActionHead(cfg)
        # The reward of step t: a class of the file's rewards (models/heads.py).
        self.reward_head = RewardHead(cfg) if cfg.reward_head and cfg.reward_values else None
        self.register_buffer("reward_values", torch.tensor(cfg.reward_values, dtype=torch.float32),
                             persistent=False)
        self.end_head = EndHead(cfg) if cfg.end_head else None  # whether step t ended the game
        # Which shift each step causes, learned (models/motion.py); the view priors read it (heads.py).
        self.motion = MotionHead(cfg.num_channels, cfg.view_size, cfg.num_actions, cfg.turns)
        self.register_buffer("fixed_cells", fixed_mask(cfg), persistent=False)
        self.action_conv = MoveConv(cfg)
        self.memory_map = MemoryMap(cfg) if cfg.memory_map else None
        self.extent_prior = ExtentPrior(cfg) if cfg.extent_prior else None
        self.view_priors = tuple(x for x in (self.action_conv, self.memory_map, self.extent_prior)
                                 if x is not None)
        self.apply(self._init_weights)
        # How the cells of a next view are drawn together (models/refiner.py; schema <= 6: each
        # on its own); built last, so the other parts start from the same weights with it or without.
        self.refiner = CellRefiner(cfg).apply(self._init_weights) if cfg.refiner_layers else None
        # The most cells of each kind a training view held: what a joint draw of a view is held to.
        limits = torch.tensor(cfg.kind_limits, dtype=torch.long) if cfg.kind_limits else None
        self.register_buffer("kind_limits", limits, persistent=False)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # ------------------------------------------------------------------ a window of steps
    def forward(self, views: torch.Tensor, actions: torch.Tensor, extents_before: torch.Tensor | None = None
                ) -> Outputs:
        cfg = self.cfg
        c, v = cfg.num_channels, cfg.view_size
        if views.dim() != 5 or tuple(views.shape[2:]) != (c, v, v) or views.shape[:2] != actions.shape:
            raise ValueError(f"views must be (B,T,{c},{v},{v}) and actions (B,T) with the same B,T; "
                             f"got views {tuple(views.shape)}, actions {tuple(actions.shape)}")
        local, global_ = self.embed(views, actions)
        attention = self.positions.window_attention(actions.shape[1], views.device)
        for block in self.blocks:
            local, global_, _ = block(local, global_, self.embed.temporal, **attention)
        patches = self.norm_local(local[:, :, : self.grid * self.grid])
        previous = torch.cat([torch.zeros_like(patches[:, :1]), patches[:, :-1]], 1)  # causal
        tokens = Tokens(patches, previous, self.norm_global(global_))
        return self._heads(tokens, window_steps(views, actions, self.motion, cfg, self.fixed_cells,
                                                extents_before))

    def _heads(self, tokens: Tokens, steps: Steps) -> Outputs:
        """The three heads at each step of (B, T): the view head and its priors, the reward head
        and the action head, which reads the predicted view."""
        cfg = self.cfg
        b, t = steps.actions.shape
        g, p, c, v = self.grid, cfg.patch_size, cfg.num_channels, cfg.view_size
        patches, previous, global_ = tokens
        hidden = self.patch_in(torch.cat([patches, previous], -1)) + self.global_to_patch(global_)[:, :, None]
        cells = self.view_head(F.gelu(hidden)).view(b, t, g, g, p, p, c)
        view_logits = cells.permute(0, 1, 6, 2, 4, 3, 5).reshape(b, t, c, v, v)
        for prior in self.view_priors:
            view_logits = prior.add_to(view_logits, steps)
        summary = torch.cat([global_, patches.mean(2)], -1)
        reward, end = (None if head is None else head(summary, steps.views, steps.actions)
                       for head in (self.reward_head, self.end_head))
        return Outputs(view_logits, self.action_head.predict(global_, view_logits, steps), reward, end)

    # ------------------------------------------------------------------ training
    def loss(self, batch: dict[str, torch.Tensor],
             input_mask: Callable[[torch.Tensor], torch.Tensor] | None = None, part: BatchPart | None = None
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training loss of one batch of windows, and detached per-batch statistics.

        ``batch`` (on the model's device): ``views`` (B, T+1, C, V, V) one-hot (any dtype), ``actions``
        (B, T+1) long (negative after a game's last step), ``rewards`` (B, T+1) float (with a reward
        head), ``ends`` (B, T+1) bool (with an end head; a batch without it trains no end),
        ``extents_before`` (optional, `forward`; not read under a mask, which would not hide it),
        ``actions_modelled`` (optional, `action_loss`); T is the training window. The model reads the
        first T steps (through ``input_mask`` when given: it hides part of the input, never of the
        targets) and is scored on the last T views and actions and the first T rewards and ends.

        The loss is the sum of the view's per-cell cross-entropy over entity kinds (nats), the
        action's (weighing `ACTION_LOSS_WEIGHT`), the shift's (the motion head's, on the shifts the
        views tell: `rpg_worldmodel.models.motion.infer_shifts`), the refiner's, the reward's and the
        end's; ``stats``: ``view_ce``, ``action_ce``, ``motion_ce``, ``reward_ce``, ``end_ce`` (nats),
        ``action_acc``, ``cell_acc``, ``motion_acc``, ``reward_acc``, ``end_acc`` (fractions), and with a cell
        refiner ``refiner_ce`` (nats, on the cells it was not shown; ``part``: `refiner_loss`).
        """
        views = batch["views"].float()
        actions = batch["actions"]
        t = actions.shape[1] - 1
        inputs = views[:, :t] if input_mask is None else input_mask(views[:, :t])
        out = self(inputs, actions[:, :t], batch.get("extents_before") if input_mask is None else None)
        view_logits, action_logits = out.view.float(), out.action.float()
        target_codes = view_codes(views[:, 1:])  # (B, T, V, V)
        cell_ce = F.cross_entropy(view_logits.transpose(1, 2), target_codes, reduction="none")
        # the mean over cells, the count a tensor: CUDA multiplies by a number's reciprocal instead
        view_loss = cell_ce.sum() / cell_ce.new_tensor(cell_ce.numel())
        action_ce, action_acc = action_loss(action_logits, actions[:, 1:], batch.get("actions_modelled"))
        loss = view_loss + ACTION_LOSS_WEIGHT * action_ce
        with torch.no_grad():
            # argmax over a contiguous last axis: ~7x faster on CPU than over the strided C axis
            predicted_codes = view_logits.movedim(2, -1).contiguous().argmax(-1)
            stats = {"view_ce": cell_ce.mean(), "action_ce": action_ce.detach(), "action_acc": action_acc,
                     "cell_acc": (predicted_codes == target_codes).float().mean()}
        motion_ce, motion_acc = self._motion_loss(inputs, actions[:, :t], views, part)
        loss = loss + motion_ce
        stats["motion_ce"], stats["motion_acc"] = motion_ce.detach(), motion_acc
        if self.refiner is not None:
            refiner_ce = refiner_loss(self.refiner, view_logits, target_codes, self.cfg.num_frames - 1,
                                      self.cfg.refiner_views, part)
            loss = loss + refiner_ce
            stats["refiner_ce"] = refiner_ce.detach()
        if out.reward is not None:
            reward_ce, stats["reward_acc"] = reward_loss(out.reward.float(), self.reward_values,
                                                         batch["rewards"][:, :t])
            loss = loss + reward_ce
            stats["reward_ce"] = reward_ce.detach()
        if out.end is not None and "ends" in batch:
            end_ce, stats["end_acc"] = end_loss(out.end.float(), batch["ends"][:, :t])
            loss = loss + end_ce
            stats["end_ce"] = end_ce.detach()
        return loss, stats

    def _motion_loss(self, inputs: torch.Tensor, actions: torch.Tensor, views: torch.Tensor,
                     part: BatchPart | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The motion head's cross-entropy (nats) and accuracy on the shifts read off the unmasked
        ``views`` (B, T+1, C, V, V), over the steps whose shift the views tell (`infer_shifts`);
        ``inputs`` and ``actions`` (B, T) are what the model reads; under torchrun (``part``) the mean
        is over the told steps of the global batch."""
        kinds = cell_kinds(views, self.fixed_cells)  # the fixed cells move with the view: they tell nothing
        targets = infer_shifts(kinds.masked_fill(kinds == self.cfg.num_channels, HIDDEN), self.cfg.turns)
        logits = self.motion(inputs, actions).float()
        known = targets >= 0
        with torch.no_grad():
            acc = (logits[known].argmax(-1) == targets[known]).float().mean()
        if part is not None and torch.distributed.is_initialized():
            count = known.sum()
            torch.distributed.all_reduce(count)
            total = F.cross_entropy(logits[known], targets[known], reduction="sum")
            return total * (part.total / len(targets)) / count.clamp_min(1), acc
        if not bool(known.any()):
            return logits.sum() * 0.0, logits.new_tensor(float("nan"))
        return F.cross_entropy(logits[known], targets[known]), acc

    def param_groups(self, weight_decay: float) -> list[dict]:
        """AdamW parameter groups: ``weight_decay`` on weight matrices and kernels, none elsewhere."""
        # By rank: matrices (2) and conv kernels (4) scale their input, so decay keeps them small;
        # vectors (1), additive tables (3) and the map's gate (5) only shift or scale activations.
        decay = [p for p in self.parameters() if p.dim() in (2, 4)]
        no_decay = [p for p in self.parameters() if p.dim() not in (2, 4)]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    # ------------------------------------------------------------------ imagination
    @torch.no_grad()
    def imagine_step(self, view: torch.Tensor, action: torch.Tensor, state: Imagination | None = None
                     ) -> tuple[Outputs, Imagination]:
        """One step of N imagined (or replayed) worlds: the view they are in and the action taken.

        ``view`` (N, C, V, V) float one-hot, ``action`` (N,) long; ``state`` from the previous call
        (None: a fresh start). Returns `Outputs` with T = 1 (the next view, the next action and
        this step's reward) and the state for the next call. The cost is one step's work: each
        step's local computations and the global attention's keys and values are cached, and the
        cache keeps the last ``num_frames - 1`` steps, so predictions equal `forward` over the whole
        history (tested; the SRWM carries its matrices). Learned positions recompute their last steps.
        """
        state = Imagination() if state is None else state
        if not self.positions.caches_past:  # schema 1's learned positions (models/legacy.py)
            views, actions = slide_window(state.window, view, action, self.cfg.num_frames)
            return _last(self(views, actions)), replace(state, step=state.step + 1, window=(views, actions))
        views, actions = view[:, None], action[:, None]
        local, global_ = self.embed(views, actions)
        local, global_, past = self._attend_cached(local, global_, state)
        patches = self.norm_local(local[:, :, : self.grid * self.grid])
        previous = torch.zeros_like(patches) if state.prev_patches is None else state.prev_patches[:, None]
        steps, state = imagined_steps(view, action, state, self.motion, self.cfg, self.fixed_cells)
        out = self._heads(Tokens(patches, previous, self.norm_global(global_)), steps)
        return out, replace(state, past=past, step=state.step + 1, prev_patches=patches[:, 0])

    def _attend_cached(self, local: torch.Tensor, global_: torch.Tensor, state: Imagination
                       ) -> tuple[torch.Tensor, torch.Tensor, tuple[tuple[torch.Tensor, torch.Tensor], ...]]:
        """The layers over one step (T = 1) whose global attention also reads the cached keys and
        values of ``state.past`` (the SRWM: its matrices); returns the tokens and the new cache."""
        if self.cfg.layer == "srwm":
            return step_layers(self.blocks, local, global_, state.past)
        t_window = self.cfg.num_frames
        positions = torch.arange(2 * state.step, 2 * state.step + 2, device=local.device)
        past_len = state.past[0][0].shape[2] if state.past else 0
        mask = torch.ones(2, past_len + 2, dtype=torch.bool, device=local.device)
        mask[0, -1] = False  # the step's summary does not see its global token
        past = []
        for layer, block in enumerate(self.blocks):
            previous_kv = state.past[layer] if state.past else None
            local, global_, kv = block(local, global_, self.embed.temporal, mask=mask,
                                       rope=self.positions.rope(positions), past=previous_kv)
            if previous_kv is not None:
                kv = tuple(torch.cat([p, x], 2) for p, x in zip(previous_kv, kv, strict=True))
            past.append(tuple(x[:, :, -2 * (t_window - 1):] if t_window > 1 else x[:, :, :0] for x in kv))
        return local, global_, tuple(past)

    @property
    def context_steps(self) -> int:
        """Steps of history a prediction depends on: the attention's (learned positions: the window),
        the memory map's where it keeps cells longer, or all of them with an extent prior."""
        kept = self.memory_map.keep if self.memory_map is not None else 0
        return 10**9 if self.extent_prior is not None else max(self.positions.context_steps, kept)

    @torch.no_grad()
    def predict_last(self, views: torch.Tensor, actions: torch.Tensor) -> Outputs:
        """The uncached reference of `imagine_step`: `forward` over the last `context_steps` steps of
        a history ``views`` (N, t, C, V, V), ``actions`` (N, t); outputs of the last step (T = 1)."""
        k = self.context_steps
        return _last(self(views[:, -k:], actions[:, -k:]))

    @torch.no_grad()
    def imagine_context(self, views: torch.Tensor, actions: torch.Tensor, first_step: int = 0) -> Imagination:
        """The state of N worlds after real context: ``views`` (N, K, C, V, V) and the actions
        (N, K-1) taken in all but the last, whose action is still to come (the next
        `imagine_step` call). ``first_step``: the step index of the first view (a world joining
        others mid-run starts where they are, so their states can be spliced)."""
        state = Imagination(step=first_step)
        for i in range(actions.shape[1]):
            _, state = self.imagine_step(views[:, i], actions[:, i], state)
        return state
