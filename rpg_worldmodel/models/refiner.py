"""Drawing a next view as one sample of a joint distribution over its cells.

The view head gives each cell of the next view its own distribution. Drawn one cell at a time,
a frame is 81 independent draws: a cell the model is unsure about becomes a wall by chance, half
of a row that is either all wall or none comes out wall, and items appear wherever a cell gives
them a little probability. `CellRefiner` learns how the cells go together. It is a small
transformer over the cells of one next view that reads the view head's distribution of every
cell and the kinds of the cells drawn so far, and gives every cell's distribution given them.
It is trained as MaskGIT is (Chang et al., 2022): a random share of the true next view is shown,
and it predicts the rest (`refiner_loss`, on ``model.refiner_views`` next views a batch), each view
weighing the same however few cells it hides: the last cells of a draw are drawn beside nearly
all the others, and a loss summed over cells would weigh those views least. It reads the view
head's logits detached, so the view head and everything it is scored on train as they would
without it (but for the gradient-norm clip they share), and after the whole model it trains alone
on the final head (`rpg_worldmodel.refiner_stage`).

`joint_sample` draws a view in rounds: each round draws every cell still open from the refined
distributions and keeps the surest ones while their summed doubt (1 - the likeliest kind's
probability: the expected number of them not drawn as their likeliest kind) stays within ``doubt``,
at least one cell a round. So the cells the model is sure of go together in the first round, and the
doubtful ones one or a few at a time, each knowing the others: an incoming row that may be wall or
may be open is decided by its first cell, not by nine coin tosses at once. The number of rounds
follows from how doubtful a view is (``rounds`` caps it: the last takes every cell still open), and
a world whose view is complete takes no further pass. A cell drawn as other than its likeliest
kind (a surprise) ends its round: the cells after it were drawn without knowing it and are drawn
again, and a surprise that was not its round's first cell waits to be judged given the cells kept
before it, as speculative sampling judges a draft (`_kept_in_order`, `_drawn`). A cell is drawn
again for the values drawn before it, never for its own, and a judged surprise is a draw given
the cells before it wherever they made its likeliest kind no less likely; so a cell independent of
the others keeps its own distribution (tested), and with ``doubt`` = 0 and ``V * V`` rounds (one
cell at a time) a draw is an exact sample of the refiner's autoregressive distribution; one round
is the independent draw of the refined marginals. On a model whose refiner had trained alone for
1,200 steps, the rule took the whole dreams one room explains from 0.76-0.78 to 0.86 under random
play and from 0.72 to 0.77-0.81 under greedy play (two seeds of 256 worlds; a development script,
docs/imagination.md). ``floor`` leaves out of each cell the kinds the refiner gives less than it
(`truncated`, epsilon sampling): trained on the likelihood, it keeps a little probability on kinds
the cells it was given rule out (a wall after an open cell of the same incoming row, 3e-4 in a
traced dream), and a 100-turn dream draws those tails. (MaskGIT keeps the cells whose *drawn value*
was likeliest; measured on rows that are all wall or all empty at 50:50, that drew 99.5% walls.)
Measured against the schedule that came before (a fixed, geometric number of cells a round), the
budget drew about as few impossible views as one cell a round does, at the cost of that schedule's 8
rounds (docs/imagination.md, "Fidelity"). Nothing here knows a game: the refiner learns from the
data which cells agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rpg_worldmodel.config import ModelConfig

#: The refiner's token width and attention heads (schema 7's 2 x 64 refiner drew no better than a
#: 1 x 32 one: benchmarks/results/imagination_fidelity_refiner_1x32.json); its layers are
#: ``model.refiner_layers`` (2 since the extent prior, whose doubtful border rows one layer drew
#: cell by cell: docs/imagination.md, "Fidelity").
REFINER_WIDTH, REFINER_HEADS = 32, 2
#: The doubt a round of a joint draw takes on by default (`joint_sample`'s ``doubt``; the imagined
#: env's ``sample_doubt`` changes it).
SAMPLE_DOUBT = 0.2


class CellRefiner(nn.Module):
    """``forward(logits (M, L, C), drawn (M, L) long, cells (M, K) long | None)`` -> refined logits
    (M, L, C), or (M, K, C) of the ``cells`` asked for: L = V * V cells; ``drawn`` holds each drawn
    cell's kind and ``C`` where the cell is still open. Every cell reads every other in each layer;
    only the last layer's queries are narrowed to ``cells`` (a draw asks for its open cells alone),
    so a cell's refined logits do not depend on which others are asked for."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        c, w = cfg.num_channels, REFINER_WIDTH
        self.num_kinds = c
        self.marginal = nn.Linear(c, w)
        self.drawn = nn.Embedding(c + 1, w)
        # which cell a token is: random at the start, or the cells could not be told apart
        self.position = nn.Parameter(torch.randn(1, cfg.view_size * cfg.view_size, w))
        # nn.TransformerEncoder for its weights and their names in checkpoints; `forward` runs them
        # itself (`_attend`), which on a 2-core CPU took 0.63x the time of torch's fused layer
        layer = nn.TransformerEncoderLayer(w, nhead=REFINER_HEADS, dim_feedforward=2 * w, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, cfg.refiner_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(w)
        self.out = nn.Linear(w, c)

    def forward(self, logits: torch.Tensor, drawn: torch.Tensor, cells: torch.Tensor | None = None
                ) -> torch.Tensor:
        x = self.marginal(torch.log_softmax(logits, -1)) + self.drawn(drawn) + self.position
        layers = self.layers.layers
        for i, layer in enumerate(layers):
            x = _attend(layer, x, cells if i == len(layers) - 1 else None)
        return (logits if cells is None else _rows(logits, cells)) + self.out(self.norm(x))


def _rows(x: torch.Tensor, cells: torch.Tensor) -> torch.Tensor:
    """``x`` (M, L, D) at ``cells`` (M, K) long -> (M, K, D)."""
    return x.gather(1, cells[..., None].expand(-1, -1, x.shape[-1]))


def _attend(layer: nn.TransformerEncoderLayer, x: torch.Tensor, cells: torch.Tensor | None) -> torch.Tensor:
    """One pre-norm encoder ``layer`` on tokens ``x`` (M, L, W), as ``layer(x)`` computes it (dropout
    0), its queries only the tokens at ``cells`` (M, K) when given: (M, L, W) or (M, K, W)."""
    attention, heads = layer.self_attn, layer.self_attn.num_heads
    m, w = x.shape[0], x.shape[-1]
    h = layer.norm1(x)
    wq, wkv = attention.in_proj_weight.split([w, 2 * w])
    bq, bkv = attention.in_proj_bias.split([w, 2 * w])
    if cells is not None:
        x = _rows(x, cells)
    q = F.linear(h if cells is None else _rows(h, cells), wq, bq)
    k, v = F.linear(h, wkv, bkv).chunk(2, -1)
    q, k, v = (t.reshape(m, t.shape[1], heads, w // heads).transpose(1, 2) for t in (q, k, v))
    mixed = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(m, q.shape[2], w)
    x = x + attention.out_proj(mixed)
    return x + layer.linear2(F.gelu(layer.linear1(layer.norm2(x))))


@dataclass(frozen=True)
class BatchPart:
    """A batch that is rows ``first`` .. ``first + B - 1`` of a global batch of ``total`` (a
    process's slice under torchrun), and the ``generator`` the refiner's training draws come from,
    in the same state on every process (`rpg_worldmodel.distributed.shared_generator`)."""

    first: int
    total: int
    generator: torch.Generator


def refiner_loss(module: CellRefiner, view_logits: torch.Tensor, targets: torch.Tensor, first: int,
                 views: int = 256, part: BatchPart | None = None) -> torch.Tensor:
    """The refiner's cross-entropy (nats) on the cells it was not shown: ``view_logits`` (B, T, C,
    V, V) from the view head (read detached), ``targets`` (B, T, V, V) the true kinds. It is
    scored on ``views`` next views drawn at random among steps ``first`` .. T-1 (pass
    ``num_frames - 1``: those predicted with the attention's whole context, as imagination
    predicts), each showing a random share of its cells,
    ``1 - cos(pi u / 2)`` for u uniform in [0, 1). In training the draws come from torch's global
    generator; in eval mode from a fixed one, so a validation loss is a function of the weights
    alone. With ``part`` (training under torchrun) they are made for the whole global batch from
    ``part.generator``, every process the same, and each process scores the drawn views of its own
    rows, over the hidden cells of them all: the mean of the processes' losses (and of their
    gradients) is the loss one process gives the global batch."""
    first = min(first, view_logits.shape[1] - 1)
    g = None if module.training else torch.Generator(view_logits.device).manual_seed(0)
    if part is not None and module.training:
        g = part.generator
    b, t, c = view_logits.shape[:3]
    first_row, total = (0, b) if part is None else (part.first, part.total)
    span, device = t - first, targets.device
    pick = torch.randint(total * span, (min(views, total * span),), generator=g, device=device)
    # MaskGIT's cosine schedule: most views show few cells, where a draw starts and errs most
    share = 1 - torch.cos(torch.rand(len(pick), 1, generator=g, device=device) * (math.pi / 2))
    shown = torch.rand((len(pick), targets[0, 0].numel()), generator=g, device=device) < share
    rows, steps = pick // span - first_row, first + pick % span
    mine = (rows >= 0) & (rows < b)  # one process: every view; several: possibly none (it scores 0)
    ce = _hidden_ce(module, view_logits, targets, rows[mine], steps[mine], shown[mine])
    return ce * (total / b) / len(pick)


def _hidden_ce(module: CellRefiner, view_logits: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor,
               steps: torch.Tensor, shown: torch.Tensor) -> torch.Tensor:
    """The sum over the next views at ``(rows, steps)`` (M each) of the refiner's mean cross-entropy
    on each view's cells not ``shown`` (M, L)."""
    logits = view_logits[rows, steps].detach().movedim(1, -1).flatten(1, 2)  # (M, L, C)
    target = targets[rows, steps].flatten(1)  # (M, L)
    refined = module(logits, torch.where(shown, target, view_logits.shape[2]))
    ce = F.cross_entropy(refined.transpose(1, 2), target, reduction="none")
    hidden = (~shown).float()
    return ((ce * hidden).sum(1) / hidden.sum(1).clamp_min(1.0)).sum()


def truncated(probs: torch.Tensor, floor: float) -> torch.Tensor:
    """``probs`` (..., C) with every kind below ``floor`` set to 0 but each cell's likeliest, and the
    rest renormalised: epsilon sampling (Hewitt et al., 2022). A model trained on the likelihood
    leaves a little probability on every kind of every cell; over the nine or so cells that enter
    view each turn of a 100-turn dream those tails are drawn, and a map keeps what was drawn. A
    kind the data gives more often than ``floor`` is drawn as before."""
    if floor <= 0:
        return probs
    kept = probs.masked_fill((probs < floor) & (probs < probs.amax(-1, keepdim=True)), 0.0)
    return kept / kept.sum(-1, keepdim=True)


# A draw is never differentiated.
@torch.no_grad()
def joint_sample(module: CellRefiner, logits: torch.Tensor, generator: torch.Generator | None, rounds: int,
                 temperature: float = 1.0, fixed: torch.Tensor | None = None, doubt: float = 0.0,
                 floor: float = 0.0, limits: torch.Tensor | None = None, greedy: bool = False
                 ) -> torch.Tensor:
    """Kinds (N, V, V) long: one joint draw of the next views whose view-head ``logits`` are
    (N, V, V, C), each round taking the surest open cells whose summed doubt stays within ``doubt``
    (at least one; see the module's docstring) up to the first drawn as other than its likeliest
    kind (`_kept_in_order`), in at most ``rounds`` rounds, each distribution softened by
    ``temperature``. ``fixed`` (N, V, V) long: kinds given before the first round (``C``: open);
    ``floor``: a kind whose refined probability is below it is not drawn in a cell (the cell's
    likeliest kind always may be; see `truncated`); ``limits`` (C,) long: the most cells of each
    kind a view may hold (``model.kind_limits``, read off the training views): a kind a view holds
    that many of is drawn in no further cell, and of cells drawn together past a limit the surest
    keep it (the others are drawn again, after the last round if need be). ``greedy``: each round
    takes its cells' likeliest kinds instead of drawing them (no ``generator``): the likeliest view
    decided as the draw decides it, each doubtful cell given the ones before it, where each cell's
    own arg-max would decide every cell of a doubtful row alone."""
    n, v, _, c = logits.shape
    flat = logits.reshape(n, v * v, c)
    drawn = torch.full((n, v * v), c, dtype=torch.long, device=logits.device) if fixed is None \
        else fixed.reshape(n, v * v).clone()
    waiting = torch.full_like(drawn, c)  # a late surprise's kind, judged by the next round (C: none)
    drafted = torch.zeros_like(flat)  # the distribution it was drawn from
    for k in range(rounds + v * v):  # past `rounds` only to draw cells a limit left open
        uniform = None if greedy else torch.rand(n, v * v, 2, generator=generator, device=logits.device)
        active = (drawn == c).any(1).nonzero()[:, 0]
        if not len(active):
            break
        part = drawn[active]
        is_open = part == c
        cells = _open_cells(is_open)
        refined = module(flat[active], part, cells) / temperature
        room = None
        if limits is not None:
            room = limits - F.one_hot(part, c + 1)[..., :c].sum(1)  # (A, C) cells each kind has left
            refined = refined.masked_fill((room <= 0)[:, None, :], -torch.inf)
        probs = _placed(truncated(torch.softmax(refined, -1), floor), cells, v * v)
        judged = waiting[active]
        if greedy:
            pick = probs.argmax(-1)
        else:
            pick = _drawn(probs, uniform[active], judged, drafted[active])
        # surest first, a waiting cell before all; ranking by the probability of the value drawn
        # instead (MaskGIT's confidence) would favour likelier values and bias the draw
        doubts = (1 - probs.amax(-1)).masked_fill(~is_open, torch.inf).masked_fill(judged != c, -1.0)
        order = torch.argsort(doubts, dim=1, stable=True)
        within = doubts.gather(1, order).clamp_min(0).cumsum(1) <= doubt
        surprise = (pick != probs.argmax(-1)).gather(1, order)
        keep, wait = _kept_in_order(within, surprise, last=k >= rounds - 1)
        take = torch.zeros_like(is_open).scatter(1, order, keep) & is_open
        if room is not None:
            take = _within_limits(take, pick, order, room)
        late = torch.zeros_like(is_open).scatter(1, order, wait) & is_open
        drawn[active] = torch.where(take, pick, part)
        waiting[active] = torch.where(late, pick, c)
        drafted[active] = torch.where(late[..., None], probs, drafted[active])
    return drawn.view(n, v, v)


def _open_cells(is_open: torch.Tensor) -> torch.Tensor | None:
    """The open cells of each view of ``is_open`` (A, L) bool, first (A, K) long, K the most any
    view has (a view with fewer is padded with drawn cells); None where K is every cell. A round
    refines only these: the drawn cells' distributions are never read again."""
    most = int(is_open.sum(1).max())
    if most == is_open.shape[1]:
        return None
    return torch.argsort((~is_open).to(torch.uint8), dim=1, stable=True)[:, :most]


def _placed(probs: torch.Tensor, cells: torch.Tensor | None, length: int) -> torch.Tensor:
    """``probs`` (A, K, C) of ``cells`` (A, K) placed in (A, ``length``, C), every other cell sure
    of kind 0 (drawn cells: never kept again, and never a surprise)."""
    if cells is None:
        return probs
    placed = torch.zeros(probs.shape[0], length, probs.shape[2], dtype=probs.dtype, device=probs.device)
    placed[..., 0] = 1.0
    return placed.scatter(1, cells[..., None].expand(-1, -1, probs.shape[2]), probs)


def _inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One kind per cell of ``probs`` (A, L, C) for ``uniform`` (A, L) in [0, 1)."""
    return (uniform[..., None] > probs.cumsum(-1)).sum(-1).clamp_max(probs.shape[-1] - 1)


def _drawn(probs: torch.Tensor, uniform: torch.Tensor, waiting: torch.Tensor, drafted: torch.Tensor
           ) -> torch.Tensor:
    """One kind per cell (A, L) of ``probs`` (A, L, C), by ``uniform`` (A, L, 2): an open cell's is
    its draw; a waiting cell's kind (``waiting``, C: none), drawn from ``drafted`` (A, L, C)
    without the cells kept before it in its round, is judged now that they are given, as
    speculative sampling judges a draft (Leviathan et al., 2023): it stands with probability
    min(1, p / q), or the cell is drawn from the residual max(0, p - q). Either way the kind is a
    draw of ``probs``."""
    c = probs.shape[-1]
    has = waiting != c
    if not has.any():  # most rounds: no surprise waits
        return _inverse_cdf(probs, uniform[..., 0])
    kind = waiting.clamp_max(c - 1)[..., None]
    p, q = probs.gather(-1, kind)[..., 0], drafted.gather(-1, kind)[..., 0]
    stands = uniform[..., 1] * q < p
    residual = (probs - drafted).clamp_min(0)
    mass = residual.sum(-1, keepdim=True)
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-12), probs)
    fresh = _inverse_cdf(torch.where(has[..., None], residual, probs), uniform[..., 0])
    return torch.where(has & stands, waiting, fresh)


def _kept_in_order(within: torch.Tensor, surprise: torch.Tensor, last: bool
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Which cells of a round are kept and which wait, both (A, L) bool in draw order, from the
    cells ``within`` the doubt budget and the ``surprise`` ones (drawn as other than their likeliest
    kind). The first cell is always kept: it was drawn given every cell kept before the round. A
    later cell was drawn without knowing the cells before it in the round; while they took their
    likeliest kinds that costs little, but a surprise tells the cells after it something they did
    not know (a lone wall drawn in a row that is all wall or none, and the rest drawn open beside
    it): the cells after the first surprise are drawn again next round, for the values before them
    (never for their own), and a surprise that is not the first cell waits to be judged given the
    cells kept before it (`_drawn`). The ``last`` round keeps every cell."""
    if last:
        return torch.ones_like(within), torch.zeros_like(within)
    first = torch.zeros_like(within)
    first[:, 0] = True
    within = within | first
    clear = (surprise & within).long().cumsum(1) - (surprise & within).long() == 0  # no surprise before
    keep = within & clear & (~surprise | first)
    return keep, within & clear & surprise & ~first


def _within_limits(take: torch.Tensor, pick: torch.Tensor, order: torch.Tensor, room: torch.Tensor
                   ) -> torch.Tensor:
    """``take`` (A, L) bool without the cells that would put a kind past its ``room`` (A, C) left:
    of the cells taking one kind, the first in ``order`` (surest first) keep it."""
    picked, taken = pick.gather(1, order), take.gather(1, order)
    counts = (F.one_hot(picked, room.shape[1]) * taken[..., None]).cumsum(1)  # (A, L, C) in order
    rank = counts.gather(-1, picked[..., None])[..., 0]  # cells of this cell's kind up to it
    allowed = rank <= room.gather(1, picked)
    return take & torch.zeros_like(take).scatter(1, order, allowed)
