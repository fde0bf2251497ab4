"""An egocentric memory map: what the agent saw in its last steps, re-drawn where it is now.

The view is egocentric, so a cell seen a few steps ago sits at another place of every later view,
and a cell that left the view is in none of them. Attention over past steps can in principle learn
to follow the agent's moves back to it; in practice (docs/worldmodel.md, "Longer context") a
transformer trained for minutes does not. The map does that bookkeeping by dead reckoning, as the
memory oracle does (`rpg_worldmodel.evaluation.oracles`): each step moves the agent by its action's
delta unless the target cell holds a blocking kind (a wall, an agent), and every cell of the steps
in reach is placed at its offset from the frame of the *next* view. For each cell of view t+1 the
map holds the kind it had when last seen and how many steps before t that was (or that it was not
seen in reach). The model learns what that is worth: `MemoryMap` turns each (age, kind) into a
logit per kind of the next view, added to the view head's (zero at the centre, where the agent
itself always is).

The bookkeeping is exact for the agent that moves first (the learner); the co-player's view is
re-drawn with the same rule, which can be wrong when the learner has just moved into its way.

How long a cell is kept is ``model.memory_steps`` (0: the attention window, ``num_frames``
steps). Over a window the map is re-drawn from the window's steps (`memory_canvas`); imagination
keeps it instead on a canvas (`rpg_worldmodel.models.canvas`): each step writes its view where dead reckoning
puts the agent and reads the next view's frame back, so turn 100 costs what turn 1 does and a
wall seen at turn 3 is still there at turn 100. The canvas is a torus of ``model.map_size``
cells a side, a capacity, not a picture of any map. The prior tells ages below ``num_frames``
apart one by one and older ones in doubling bins up to the longest a training window shows
(``model.train_window``): there attention no longer sees the cell, and the prior learns what the
map alone is worth. An older sighting still reads as the last bin.
Nothing of a particular game is written here: kinds and moves come from the training file.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.models.canvas import dead_reckoning, frame_and_bands
from rpg_worldmodel.models.moves import HIDDEN, MoveRules
from rpg_worldmodel.models.steps import Steps


def memory_canvas(kinds: torch.Tensor, actions: torch.Tensor, deltas: torch.Tensor, blocking: torch.Tensor,
                  reach: int, queries: int, margin: tuple[int, int] = (0, 0)
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The map of the last ``queries`` steps of a history.

    ``kinds`` (B, S, V, V) from `cell_kinds`, ``actions`` (B, S) long. For each query step t (the
    last ``queries`` of the S) and each cell of view t+1's frame, widened by ``margin`` (rows,
    columns) cells on each side: the kind it had in the latest step s in ``[t - reach + 1, t]``
    that showed it, and ``t - s``. Returns ``kind`` (B, Q, V + 2 rows, V + 2 columns) long
    (``HIDDEN``: not seen in reach) and ``age`` of the same shape (``reach`` where not seen).
    """
    b, s_len, v, _ = kinds.shape
    before, after = dead_reckoning(kinds, actions, deltas, blocking)
    first = s_len - queries
    row_cells = torch.arange(-margin[0], v + margin[0], device=kinds.device)
    col_cells = torch.arange(-margin[1], v + margin[1], device=kinds.device)
    kind = kinds.new_full((b, queries, len(row_cells), len(col_cells)), HIDDEN)
    age = torch.full_like(kind, reach)
    flat_kinds = kinds.flatten(-2)
    for lag in range(min(reach, s_len)):  # latest first: a cell keeps the first (newest) sighting
        query = torch.arange(max(first, lag), s_len, device=kinds.device)
        if not len(query):
            break
        offset = after[:, query] - before[:, query - lag]  # (B, n, 2): view t+1's frame in view s's
        rows = row_cells + offset[..., :1]  # (B, n, rows of the frame)
        cols = col_cells + offset[..., 1:]
        index = rows.clamp(0, v - 1)[..., :, None] * v + cols.clamp(0, v - 1)[..., None, :]
        seen = flat_kinds[:, query - lag].gather(-1, index.flatten(-2)).view_as(index)
        inside = ((rows >= 0) & (rows < v))[..., :, None] & ((cols >= 0) & (cols < v))[..., None, :]
        slot = query - first
        fill = inside & (seen != HIDDEN) & (kind[:, slot] == HIDDEN)
        kind[:, slot] = torch.where(fill, seen, kind[:, slot])
        age[:, slot] = torch.where(fill, lag, age[:, slot])
    return kind, age


#: The map's bands through view t+1's rows and through its columns, ``reach`` cells wider on each
#: side, for `MapLines`: the kinds (B, Q, V, V + 2 reach) and their ages, then the kinds
#: (B, Q, V + 2 reach, V) and their ages (as `memory_canvas` gives them).
Bands = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


class MapLines(nn.Module):
    """A prior from the map along each cell's row and column, ``reach`` cells either side.

    The per-cell prior reads only the cell itself; whether a cell scrolling into view is like one
    seen far off in the same line (the other side of a room, a corridor's far end) is out of its
    sight. This is a cross-shaped convolution over the one-hot kinds last seen (a cell not seen
    reads as zeros), whose output is then shared along the view's rows and columns:
    ``forward(rows (B, Q, V, V + 2 reach), columns (B, Q, V + 2 reach, V))``, the map's bands through
    view t+1's rows and columns, -> logits (B, Q, C, V, V). It knows no kind or distance in
    particular; its weights start at zero, so a model starts as one without it.
    """

    def __init__(self, num_kinds: int, num_channels: int, reach: int, view_size: int):
        super().__init__()
        self.num_kinds = num_kinds
        self.along_rows = nn.Conv2d(num_kinds, num_channels, (1, 2 * reach + 1))
        self.along_columns = nn.Conv2d(num_kinds, num_channels, (2 * reach + 1, 1))
        # What one cell's line says is shared along the view's rows and columns: the cells of a
        # row scrolling in read different lines, and a row that comes out wall here and open there
        # is no row the map holds.
        v = view_size
        self.share_rows = nn.Conv2d(num_channels, num_channels, (1, 2 * v - 1), padding=(0, v - 1))
        self.share_columns = nn.Conv2d(num_channels, num_channels, (2 * v - 1, 1), padding=(v - 1, 0))
        for conv in (self.along_rows, self.along_columns, self.share_rows, self.share_columns):
            nn.init.zeros_(conv.weight)
            nn.init.zeros_(conv.bias)

    def _one_hot(self, kind: torch.Tensor) -> torch.Tensor:
        """(B, Q, H, W) long -> (B * Q, K, H, W) float; ``HIDDEN`` reads as zeros."""
        codes = torch.where(kind == HIDDEN, self.num_kinds, kind)
        one_hot = F.one_hot(codes.flatten(0, 1), self.num_kinds + 1)[..., : self.num_kinds]
        return one_hot.permute(0, 3, 1, 2).float()

    def forward(self, rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        b, q, v = rows.shape[:3]
        own = self.along_rows(self._one_hot(rows)) + self.along_columns(self._one_hot(columns))
        return (own + self.share_rows(own) + self.share_columns(own)).view(b, q, -1, v, v)


class MemoryMap(nn.Module):
    """The memory map as a view prior: (age, kind last seen) -> logits of the cell's next kind,
    plus, with ``model.map_reach``, the kinds along each cell's row and column (`MapLines`).

    ``forward(kinds (B, S, V, V), actions (B, S), queries, moves)`` -> logits (B, Q, C, V, V) for
    the last ``queries`` steps, reaching back ``model.num_frames`` steps (the attention's window),
    placed by the movement table ``moves`` (`rpg_worldmodel.models.moves.MoveRules`). As a view
    prior, ``add_to(view_logits, steps)`` re-draws ``steps.history`` with the model's own table
    ``rules`` (shared with the model, it holds no weights).
    """

    def __init__(self, cfg: ModelConfig, rules: MoveRules):
        super().__init__()
        self.keep = cfg.memory_steps or cfg.num_frames  # steps a cell is kept
        self.exact = cfg.num_frames  # ages told apart one by one
        self.reach = age_bins(cfg)  # ages the prior tells apart: those, then doubling bins
        self.num_kinds = cfg.num_channels + 1  # the channels and the agent's own cell
        self.prior = nn.Embedding(self.reach * self.num_kinds + 1, cfg.num_channels)
        self.line_reach = cfg.map_reach
        # The bands read only what a training window can show them: summed over a whole episode's
        # map, a convolution trained on windows meets counts of known cells it never saw.
        self.line_keep = min(self.keep, cfg.window)
        self.lines = (MapLines(self.num_kinds, cfg.num_channels, cfg.map_reach, cfg.view_size)
                      if cfg.map_reach else None)
        # The next view's centre is the agent itself, whatever the map holds there (the cell it
        # entered, or its own cell after a blocked move): the map says nothing about it. A prior
        # there taught a rule that fails exactly where imagination drifts (docs/imagination.md).
        v = cfg.view_size
        not_centre = torch.ones(v, v)
        not_centre[v // 2, v // 2] = 0
        self.register_buffer("not_centre", not_centre, persistent=False)
        self.rules = rules

    def forward(self, kinds: torch.Tensor, actions: torch.Tensor, queries: int,
                moves: MoveRules) -> torch.Tensor:
        def drawn(margin: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
            return memory_canvas(kinds, actions, moves.deltas, moves.blocking, self.keep, queries, margin)

        return self.logits(*frame_and_bands(drawn, self.line_reach, kinds.shape[-1]))

    def logits(self, kind: torch.Tensor, age: torch.Tensor, lines: Bands | None = None) -> torch.Tensor:
        """The prior of the map's ``kind`` and ``age`` (B, Q, V, V) each, and of its bands along the
        rows and columns (`Bands`; with ``model.map_reach``) -> logits (B, Q, C, V, V)."""
        kept = (kind != HIDDEN) & (age < self.keep)
        index = torch.where(kept, self.age_bin(age) * self.num_kinds + kind, self.reach * self.num_kinds)
        logits = self.prior(index).permute(0, 1, 4, 2, 3)
        if self.lines is not None:
            rows, row_ages, columns, column_ages = lines
            along = self.lines(torch.where(row_ages < self.line_keep, rows, HIDDEN),
                               torch.where(column_ages < self.line_keep, columns, HIDDEN))
            # only where the map has not seen the cell itself: what it saw there stays as seen
            logits = logits + along * (~kept)[:, :, None]
        return logits * self.not_centre

    def age_bin(self, age: torch.Tensor) -> torch.Tensor:
        """Ages below ``num_frames`` as themselves; older ones in doubling bins (``num_frames`` ..
        ``2 num_frames - 1`` the first), the last bin taking every age after it."""
        doubling = self.exact + torch.log2(age.clamp_min(1).float() / self.exact).floor().long()
        return torch.where(age < self.exact, age, doubling).clamp(0, self.reach - 1)

    def add_to(self, view_logits: torch.Tensor, steps: Steps) -> torch.Tensor:
        """``view_logits`` (B, T, C, V, V) plus the map's logits: of ``steps.map`` where imagination
        kept it on its canvas, else re-drawn from the last T steps of ``steps.history``."""
        if steps.map is not None:
            kind, age, lines = steps.map
            lines = None if lines is None else tuple(x[:, None] for x in lines)
            return view_logits + self.logits(kind[:, None], age[:, None], lines)
        kinds, actions = steps.history
        return view_logits + self(kinds, actions, view_logits.shape[1], self.rules)


def age_bins(cfg: ModelConfig) -> int:
    """How many ages the map's prior tells apart: ``num_frames`` one by one, then doubling bins up
    to the oldest age a training window shows (``model.train_window - 1``; none for windows of
    ``num_frames`` steps, whose older sightings read as ``num_frames - 1`` steps old)."""
    oldest = cfg.window - 1
    if oldest < cfg.num_frames:
        return cfg.num_frames
    return cfg.num_frames + math.floor(math.log2(oldest / cfg.num_frames)) + 1


def memory_map(cfg: ModelConfig, rules: MoveRules | None) -> MemoryMap | None:
    """The memory map of a model with one (``model.memory_map``), placed by the table ``rules``."""
    return MemoryMap(cfg, rules) if cfg.memory_map else None
