"""The world model's heads beside the view head, and the view priors added to the view head's logits.

* `FrameStackActionHead`: the next action, read the way a policy reads it;
* the reward head (`RewardHead`): the step's reward class from the tokens and, per action, the view
  the action is taken in;
* the view priors, each a part with ``add_to(view_logits, steps)`` that adds its logits of view t+1
  (B, T, C, V, V) to the view head's, reading the steps as `rpg_worldmodel.models.steps.Steps`
  holds them: the motion prior (`MoveConv`, with the per-choice convolution behind it), the
  memory map (`MemoryMap`) and the extent prior (`ExtentPrior`).

**The memory map**: what the agent saw in its last steps, re-drawn where it is now. The view is
egocentric, so a cell seen a few steps ago sits at another place of every later view, and a cell
that left the view is in none of them. Attention over past steps can in principle learn to follow
the agent's moves back to it; in practice (docs/worldmodel.md, "Longer context") a transformer
trained for minutes does not. The map does that bookkeeping by dead reckoning: each step moves the
agent by the motion the motion head gives it (a shift, or a turn where the files' views turn:
`rpg_worldmodel.models.motion`, learned from the data), and every cell of the steps in reach is
placed at its offset from the frame of the *next* view. For each cell of view t+1 the map holds the
kind it had when last seen and how many steps before t that was (or that it was not seen in reach).
The model learns what that is worth: `MemoryMap` turns each (age, kind) into a logit per kind of the
next view, added to the view head's through a learned gate per cell of the view (where a view always
shows the same thing whatever the map holds, as an egocentric view's own agent, the gate learns to
close).

How long a cell is kept is ``model.memory_steps`` (0: the attention window, ``num_frames`` steps).
Over a window the map is re-drawn from the window's steps (`memory_canvas`); imagination keeps it
on a canvas (`rpg_worldmodel.models.steps.canvas_step`), so a wall seen at turn 3 is still there at
turn 100. The prior tells ages below ``num_frames`` apart one by one and older ones in doubling bins
up to the longest a training window shows (``model.train_window``): there attention no longer sees
the cell, and the prior learns what the map alone is worth. An older sighting still reads as the
last bin. Nothing of a particular game is written here: the kinds come from the training file, the
motions from the learned motion head.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rpg_worldmodel.config import MAP_SIZE, ModelConfig
from rpg_worldmodel.models.motion import SHIFTS, ViewMapPerAction, motion_family, moved_cells
from rpg_worldmodel.models.steps import HIDDEN, Steps, fixed_mask, map_reach, memory_canvas


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


class RewardHead(nn.Module):
    """The reward of step t as a class of ``model.reward_values``: an MLP over [global token, mean
    patch token] (B, T, 2D), plus a linear map of the one-hot view per action (`ViewMapPerAction`):
    a reward that depends on the cell a move enters (an item picked up, a bump) is learned from
    data without being told which cell that is, as one weight, not a pattern of tokens.
    ``forward(tokens (B, T, 2D), views (B, T, C, V, V), actions (B, T))`` -> logits (B, T, K);
    ``outputs``: K, the reward classes by default (`EndHead`: one)."""

    def __init__(self, cfg: ModelConfig, outputs: int | None = None):
        super().__init__()
        k, d = len(cfg.reward_values) if outputs is None else outputs, cfg.width
        self.mlp = nn.Sequential(nn.Linear(2 * d, d), nn.GELU(), nn.Linear(d, k))
        self.by_view = ViewMapPerAction(cfg.num_channels, cfg.view_size, cfg.num_actions, k)

    def forward(self, tokens: torch.Tensor, views: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.mlp(tokens) + self.by_view(views, actions)


#: The end head's starting logit: a probability of 0.007 that a step ends the game (one step in
#: 150), below the one half at which an imagined game ends.
END_PRIOR_LOGIT = -5.0


class EndHead(RewardHead):
    """Whether step t ended the game (the env's ``terminated``; a time limit is no end): the reward
    head's two parts with one output, so a game that ends where a move enters a cell of some kind
    learns which kind and which move from data. It starts at `END_PRIOR_LOGIT`: a game ends at one
    step of many, so an untrained head says no step ends one. ``forward(tokens (B, T, 2D), views
    (B, T, C, V, V), actions (B, T))`` -> logits (B, T)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, outputs=1)
        self.prior = nn.Parameter(torch.full((1,), END_PRIOR_LOGIT))  # one the Linear init leaves alone

    def forward(self, tokens: torch.Tensor, views: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return super().forward(tokens, views, actions)[..., 0] + self.prior


def action_targets(actions: torch.Tensor, modelled: torch.Tensor | None) -> torch.Tensor:
    """The next actions (B, T) long as the action head's targets: -1 (none) in the windows whose
    ``modelled`` (B,) bool is False; ``actions`` as they are where it is None."""
    return actions if modelled is None else actions.masked_fill(~modelled[:, None], -1)


def action_loss(logits: torch.Tensor, targets: torch.Tensor, modelled: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The next action's cross-entropy (nats) and accuracy: ``logits`` (B, T, A), ``targets`` (B, T)
    long, negative where no action follows (a window ending on the game's final view); ``modelled``
    (B,) bool, False for a window whose actions are inputs only (a policy of
    ``data.unmodelled_policies``: random play read for its views, not imitated). The mean is over
    every position, one with no action counting 0: a count every rank knows, so DDP's mean of
    ranks is the global one; where every action is taken it is the plain mean, bit for bit."""
    targets = action_targets(targets, modelled)
    taken = targets >= 0
    flat_logits, flat_targets = logits.flatten(0, 1), targets.flatten()
    if bool(taken.all()):
        ce = F.cross_entropy(flat_logits, flat_targets)
    else:
        each = F.cross_entropy(flat_logits, flat_targets.clamp_min(0), reduction="none")
        ce = each.where(taken.flatten(), 0.0).mean()
    with torch.no_grad():
        acc = (logits.argmax(-1) == targets)[taken].float().mean()
    return ce, acc


def reward_loss(logits: torch.Tensor, values: torch.Tensor, rewards: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The reward's cross-entropy (nats) over the classes ``values`` (K,) and accuracy: ``logits``
    (B, T, K), ``rewards`` (B, T) points as `reward_weights`; where every reward is a class, the
    classes' cross-entropy."""
    targets = reward_weights(values, rewards)
    flat_logits, flat_targets = logits.flatten(0, -2), targets.flatten(0, -2)
    if bool((flat_targets.amax(-1) == 1).all()):
        flat_targets = flat_targets.argmax(-1)
    with torch.no_grad():
        acc = (logits.argmax(-1) == targets.argmax(-1)).float().mean()
    return F.cross_entropy(flat_logits, flat_targets), acc


def end_loss(logits: torch.Tensor, ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Whether each step ended the game: binary cross-entropy (nats) of ``logits`` (B, T) against
    ``ends`` (B, T) bool, and the accuracy of ``logits > 0``."""
    targets = ends.float()
    with torch.no_grad():
        acc = ((logits > 0) == ends.bool()).float().mean()
    return F.binary_cross_entropy_with_logits(logits, targets), acc


def reward_weights(values: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """Rewards (points, any shape) as weights over the reward classes ``values`` (K,) ascending ->
    (..., K): all on the class a reward equals, else split between the two classes around it in
    proportion to nearness (DreamerV3's two-hot), all on the end class past either end. A game
    whose steps pay a few fixed amounts scores one class a step; one that pays, say, less the later
    its goal is reached scores a mix whose expected points are the reward's."""
    k = values.shape[0]
    r = rewards.float().clamp(values[0], values[-1])
    if k == 1:
        return torch.ones(*r.shape, 1, device=r.device)
    above = torch.searchsorted(values, r.contiguous()).clamp(1, k - 1)  # first class >= r
    below = above - 1
    share = ((r - values[below]) / (values[above] - values[below])).clamp(0, 1)
    weights = torch.zeros(*r.shape, k, device=r.device)
    weights.scatter_(-1, below[..., None], (1 - share)[..., None])
    return weights.scatter_add_(-1, above[..., None], share[..., None])


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
    """The motion prior: a convolution of view t per motion
    (`rpg_worldmodel.models.motion.motion_family`), its kernel ``2 * model.motion_reach + 1`` cells
    a side.

    Moving shifts the whole egocentric view by one cell, which a 3 x 3 kernel expresses exactly;
    the transformer then only has to learn what motion alone does not explain (pick-ups, the
    co-player, cells entering the view). Another inhabitant that steps one cell while the view
    shifts one cell the other way lands two cells from where it stood, out of a 3 x 3 kernel's
    reach; ``motion_reach=2`` holds both moves (what each motion does to each kind is still
    learned), measured in docs/imagination.md, "Co-players". A turn (``model.turns``) is no small
    kernel: its kernel reads view t turned as the turn moves it, cells from outside the view reading
    as none. The kernel is chosen by the motion the motion head gives the step (``steps.shifts``), so
    a blocked move uses the kernel of no shift. With ``model.motion_prior_skips_fixed`` the view's
    fixed cells (``model.fixed_cells``) read as empty: the viewer stays at the centre whatever the
    view does, and the kernel would otherwise learn from it, at every step, that an agent does not
    move with the world.
    """

    def __init__(self, cfg: ModelConfig):
        reach = cfg.motion_reach
        super().__init__(cfg.num_channels, len(motion_family(cfg.turns)) * cfg.num_channels, 2 * reach + 1,
                         padding=reach)
        self.turns = tuple(cfg.turns)
        # the cells read as empty: the view's fixed cells where model.motion_prior_skips_fixed
        self.register_buffer("skipped", fixed_mask(cfg) if cfg.motion_prior_skips_fixed else None,
                             persistent=False)
        moves = [moved_cells(turn, cfg.view_size) for turn in self.turns]
        self.register_buffer("turn_cells", torch.stack([i for i, _ in moves]) if moves else None,
                             persistent=False)
        self.register_buffer("turn_inside", torch.stack([k for _, k in moves]) if moves else None,
                             persistent=False)

    def add_to(self, view_logits: torch.Tensor, steps: Steps) -> torch.Tensor:
        flat = steps.views.reshape(-1, *steps.views.shape[2:])
        if self.skipped is not None:
            flat = flat.masked_fill(self.skipped, 0)
        choice = steps.shifts.reshape(-1)
        if self.turns:
            flat = self.turned(flat.to(view_logits.dtype), choice)
        return view_logits + conv_for_choice(self, flat, choice).view_as(view_logits)

    def turned(self, views: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
        """``views`` (N, C, V, V), each turned as its turn moves it where ``choice`` (N,) is a turn."""
        turn = (choice - len(SHIFTS)).clamp_min(0)
        cells, inside = self.turn_cells[turn], self.turn_inside[turn]  # (N, V*V)
        flat = views.flatten(2)
        moved = flat.gather(2, cells[:, None].expand(-1, flat.shape[1], -1)) * inside[:, None]
        return torch.where((choice >= len(SHIFTS))[:, None, None], moved, flat).view_as(views)


# ------------------------------------------------------------------ the memory map
class MemoryMap(nn.Module):
    """The memory map as a view prior: (age, kind last seen) -> logits of the cell's next kind.

    ``forward(kinds (B, S, V, V), shifts (B, S), queries)`` -> logits (B, Q, C, V, V) for the last
    ``queries`` steps, reaching back ``model.memory_steps`` steps, placed by the steps' shifts. As a
    view prior, ``add_to(view_logits, steps)`` reads ``steps.map``.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.keep = map_reach(cfg)  # steps a cell is kept
        self.turns = tuple(cfg.turns)
        self.exact = cfg.num_frames  # ages told apart one by one
        self.reach = age_bins(cfg)  # ages the prior tells apart: those, then doubling bins
        self.num_kinds = cfg.num_channels + 1  # the channels and the view's fixed cells
        self.prior = nn.Embedding(self.reach * self.num_kinds + 1, cfg.num_channels)
        # How much each cell of the next view takes from the map, learned: a cell a view always shows
        # the same way (an egocentric view's own agent) learns to ignore what the map held there. Five
        # dimensions keep it out of weight decay (models/world_model.py's param_groups: a scale).
        v = cfg.view_size
        self.gate = nn.Parameter(torch.ones(1, 1, 1, v, v))

    def forward(self, kinds: torch.Tensor, shifts: torch.Tensor, queries: int) -> torch.Tensor:
        return self.logits(*memory_canvas(kinds, shifts, self.keep, queries, self.turns))

    def logits(self, kind: torch.Tensor, age: torch.Tensor) -> torch.Tensor:
        """The prior of the map's ``kind`` and ``age`` (B, Q, V, V) each -> logits (B, Q, C, V, V)."""
        kept = (kind != HIDDEN) & (age < self.keep)
        index = torch.where(kept, self.age_bin(age) * self.num_kinds + kind, self.reach * self.num_kinds)
        return self.prior(index).permute(0, 1, 4, 2, 3) * self.gate

    def age_bin(self, age: torch.Tensor) -> torch.Tensor:
        """Ages below ``num_frames`` as themselves; older ones in doubling bins (``num_frames`` ..
        ``2 num_frames - 1`` the first), the last bin taking every age after it."""
        doubling = self.exact + torch.log2(age.clamp_min(1).float() / self.exact).floor().long()
        return torch.where(age < self.exact, age, doubling).clamp(0, self.reach - 1)

    def add_to(self, view_logits: torch.Tensor, steps: Steps) -> torch.Tensor:
        """``view_logits`` (B, T, C, V, V) plus the map's logits of ``steps.map`` (re-drawn over a
        window, kept on imagination's canvas)."""
        return view_logits + self.logits(*steps.map)


def age_bins(cfg: ModelConfig) -> int:
    """How many ages the map's prior tells apart: ``num_frames`` one by one, then doubling bins up
    to the oldest age a training window shows (``model.train_window - 1``; none for windows of
    ``num_frames`` steps, whose older sightings read as ``num_frames - 1`` steps old)."""
    oldest = cfg.window - 1
    if oldest < cfg.num_frames:
        return cfg.num_frames
    return cfg.num_frames + math.floor(math.log2(oldest / cfg.num_frames)) + 1


# ------------------------------------------------------------------ the extent prior
class ExtentPrior(nn.Module):
    """How far each cell of the next view lies from where each kind was seen, as a view prior.

    The memory map holds the cells seen; it cannot say what a cell never seen must be. A room's
    size can: a wall seen 19 cells to the left, or floor seen over 18 columns, says where the next
    wall stands. For each kind (the channels and the view's fixed cells) the steps keep its lowest
    and highest row and column seen since the start (`rpg_worldmodel.models.extents`);
    a row of view t+1 lies some number of cells inside or outside each row end, a column each
    column end. Each (axis, end, kind, cells inside) is a learned logit per kind of the cell,
    summed over the kinds and ends; rows and columns add (B, T, C, V, V). How many cells, up to
    `MAP_SIZE` / 2 either way, and what they mean are learned from the files; no size is given.
    A learned gate per cell of the view, as the memory map's, lets a cell that always shows the
    same kind ignore it. With a memory map the prior speaks only for the cells the map has not
    seen: the map says what a seen cell was, the extents what an unseen one can be.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.reach = MAP_SIZE // 2
        self.num_kinds = cfg.num_channels + 1
        self.table = nn.Embedding(4 * self.num_kinds * (2 * self.reach + 1), cfg.num_channels)
        v = cfg.view_size
        self.gate = nn.Parameter(torch.ones(1, 1, 1, v, v))  # 5 dimensions: no weight decay
        self.keep = map_reach(cfg)  # the map's: older sightings are not seen
        self.register_buffer("cells", torch.arange(v) - v // 2, persistent=False)
        self.register_buffer("sign", torch.tensor([1, -1, 1, -1]), persistent=False)

    def logits(self, extents: torch.Tensor) -> torch.Tensor:
        """``extents`` (B, T, K, 4) -> logits (B, T, C, V, V)."""
        k, width = self.num_kinds, 2 * self.reach + 1
        inside = (self.cells - extents[..., None]) * self.sign[:, None]  # (B, T, K, 4, V)
        low, high = extents[..., 0::2], extents[..., 1::2]
        seen = (low <= high).repeat_interleave(2, -1)[..., None]  # (B, T, K, 4, 1)
        slot = (torch.arange(4, device=extents.device)[:, None] * k
                + torch.arange(k, device=extents.device)).T[..., None]  # (K, 4, 1)
        index = slot * width + inside.clamp(-self.reach, self.reach) + self.reach
        by_end = (self.table(index) * seen[..., None]).sum(2)  # (B, T, 4, V, C)
        rows, cols = by_end[:, :, :2].sum(2), by_end[:, :, 2:].sum(2)  # (B, T, V, C)
        return (rows[:, :, :, None] + cols[:, :, None]).permute(0, 1, 4, 2, 3) * self.gate

    def add_to(self, view_logits: torch.Tensor, steps: Steps) -> torch.Tensor:
        logits = self.logits(steps.extents)
        if steps.map is not None:
            kind, age = steps.map
            logits = logits * ((kind == HIDDEN) | (age >= self.keep))[:, :, None]
        return view_logits + logits.to(view_logits.dtype)
