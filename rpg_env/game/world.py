"""The Treasurehunt rules, in NumPy, over a batch of N worlds at once.

This module is the single source of truth for the rules; what they act on (cell kinds, their
values, what blocks and what spawns, the moves) comes from the vocabulary in
`rpg_env.game.constants`. The single env (N = 1) and the vector env (N = num_envs) both step
`WorldBatch`. Every world in a batch is a flat row of
integer cell codes over the map *padded* by ``p = max(vision_radius, 1)`` cells of wall on
each side, so that an egocentric crop is one gather with precomputed offsets, "outside the
map reads as wall" needs no special case, and a move off the map bumps. Agent positions are
flat indices into that padded row.

Shapes (N worlds, A agents, map H x W, vision radius r, padding p, view V = 2r + 1):

- ``WorldBatch.cells``: ``(N, (H + 2p) * (W + 2p))`` int8 cell codes (padded, flat)
- ``WorldBatch.positions``: ``(N, A)`` int64 flat indices into each row of ``cells`` (read-only)
- ``WorldBatch.grid``: ``(N, H, W)`` int8 view of the map without padding
- ``WorldBatch.views()``: ``(N, A, V * V)`` int8 cell codes of each agent's window, as it sees
  it (with ``item_visible_turns`` > 0 old items read as empty: `rpg_env.game.visibility`)
- ``WorldBatch.agent_rc()``: ``(N, A, 2)`` int64 (row, column) map coordinates
"""

from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass, fields

import numpy as np

from rpg_env.game.constants import AGENT_LETTERS, CELL_KINDS, Vocabulary, vocabulary
from rpg_env.game.levels import check_levels, level_walls
from rpg_env.game.spawns import SpawnDraws
from rpg_env.game.visibility import ItemAges, check_item_visible_turns

MIN_SPAWN_PROB = 1e-12
LEVEL_FIELDS = ("num_levels", "start_level", "distribution_mode")


def _reference_points(param: str) -> float:
    """The reference game's points of the kind whose value is the `WorldParams` field ``param``:
    the vocabulary holds them (`rpg_env.game.constants.CellKind.default_value`)."""
    return next(kind.default_value for kind in CELL_KINDS if kind.value_param == param)


@dataclass(frozen=True)
class WorldParams:
    """Every number of the game, with the reference treasurehunt's defaults: the one place they
    are written (the points are the vocabulary's; the envs' keyword arguments default to these).

    Rewards are in points per step; ``spawn_prob`` is per empty cell per turn. Levels, as in
    ProcGen: ``num_levels`` > 0 plays, at each reset, a level drawn uniformly from
    ``start_level .. start_level + num_levels - 1`` whose walls are generated from its id
    (`rpg_env.game.levels`; ``distribution_mode`` ``"easy"`` rooms, ``"hard"`` a maze);
    ``num_levels=0`` is the open room, drawn exactly as before levels existed.
    ``item_visible_turns`` > 0 is the memory variant: an item shows in the agents' views only
    for that many turns after it appears (`rpg_env.game.visibility`); 0 shows items always.
    """

    height: int = 20
    width: int = 20
    vision_radius: int = 4
    num_agents: int = 2
    spawn_prob: float = 0.01
    max_turns: int = 100
    gem_value: float = _reference_points("gem_value")
    food_value: float = _reference_points("food_value")
    bone_value: float = _reference_points("bone_value")
    wall_penalty: float = _reference_points("wall_penalty")
    num_levels: int = 0
    start_level: int = 0
    distribution_mode: str = "easy"
    item_visible_turns: int = 0

    def __post_init__(self) -> None:
        self._check_sizes()
        self._check_numbers()
        check_levels(self.num_levels, self.start_level, self.distribution_mode)
        check_item_visible_turns(self.item_visible_turns)

    def _check_sizes(self) -> None:
        for name in ("height", "width", "vision_radius", "num_agents", "max_turns"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        if self.height < 3 or self.width < 3:
            raise ValueError(
                f"height and width must be >= 3 (a wall border around at least one free cell), "
                f"got {self.height} x {self.width}"
            )
        if self.vision_radius < 0:
            raise ValueError(f"vision_radius must be >= 0, got {self.vision_radius}")
        if not 1 <= self.num_agents <= len(AGENT_LETTERS):
            raise ValueError(f"num_agents must be in 1..{len(AGENT_LETTERS)}, got {self.num_agents}")
        free_cells = (self.height - 2) * (self.width - 2)
        if self.num_agents > free_cells:
            raise ValueError(
                f"num_agents={self.num_agents} does not fit in the {free_cells} free cells of a "
                f"{self.height} x {self.width} map; use a larger map or fewer agents"
            )
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")

    def _check_numbers(self) -> None:
        for name in ("spawn_prob", "gem_value", "food_value", "bone_value", "wall_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
            if not np.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value!r}")
        if not 0.0 <= self.spawn_prob <= 1.0:
            raise ValueError(f"spawn_prob must be a probability in [0, 1], got {self.spawn_prob}")
        if 0.0 < self.spawn_prob < MIN_SPAWN_PROB:
            # Geometric gaps of ~1/p cells would overflow int64 positions; such a rate never
            # spawns in practice anyway.
            raise ValueError(f"spawn_prob={self.spawn_prob} is below {MIN_SPAWN_PROB:g}, which never "
                             f"spawns in practice; pass spawn_prob=0 to disable spawning")

    @property
    def view_size(self) -> int:
        return 2 * self.vision_radius + 1

    def as_dict(self) -> dict:
        return asdict(self)

    def rules(self) -> dict:
        """The env keyword arguments of this game. The level fields are named only when
        ``num_levels`` > 0, and ``item_visible_turns`` only when > 0, so the default game's rules
        (and files recorded with them) read exactly as before either existed."""
        rules = asdict(self)
        if not self.num_levels:
            for name in LEVEL_FIELDS:
                del rules[name]
        if not self.item_visible_turns:
            del rules["item_visible_turns"]
        return rules

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


#: The reference game: each env's keyword arguments of the game default to its fields.
DEFAULT_WORLD = WorldParams()


def parse_layout(layout: str | list[str] | tuple[str, ...], params: WorldParams):
    """Parse a text map into ``(grid (H, W) int8, agent_rc (A, 2) int64)``.

    ``#`` wall, ``.`` empty, ``g`` gem, ``f`` food, ``b`` bone, ``A`` the learner and
    ``B``, ``C``, ... the co-players in agent order. Raises ValueError saying what is wrong.
    """
    if isinstance(layout, str):
        # A triple-quoted block may be indented and may use Windows line ends.
        rows = textwrap.dedent(layout).strip("\r\n").splitlines()
    elif isinstance(layout, (list, tuple)) and all(isinstance(r, str) for r in layout):
        rows = list(layout)
    else:
        raise ValueError(
            f"layout must be a string or a list of strings (one per map row), got {type(layout).__name__}"
        )
    if len(rows) != params.height:
        raise ValueError(f"layout has {len(rows)} rows but the env's height is {params.height}; "
                         f"pass height={len(rows)} to the env or fix the layout")
    bad_widths = [(i, len(r)) for i, r in enumerate(rows) if len(r) != params.width]
    if bad_widths:
        i, n = bad_widths[0]
        raise ValueError(f"layout row {i} has {n} characters but the env's width is {params.width}; "
                         f"every row must have exactly {params.width}")
    vocab = vocabulary()
    chars = vocab.layout_chars
    grid = np.empty((params.height, params.width), dtype=np.int8)
    agents: dict[str, tuple[int, int]] = {}
    for i, row in enumerate(rows):
        for j, ch in enumerate(row):
            if ch in chars:
                grid[i, j] = chars[ch]
            elif ch in AGENT_LETTERS:
                if ch in agents:
                    raise ValueError(f"layout places agent {ch!r} twice: at {agents[ch]} and {(i, j)}")
                agents[ch] = (i, j)
                grid[i, j] = vocab.agent
            else:
                known = ", ".join(f"{c!r} {vocab.cells[code].name}" for c, code in chars.items())
                raise ValueError(f"layout has unknown character {ch!r} at row {i}, column {j}; use "
                                 f"{known}, 'A'.. agents")
    expected = AGENT_LETTERS[: params.num_agents]
    if sorted(agents) != list(expected):
        raise ValueError(f"layout must place exactly the agents {', '.join(expected)} "
                         f"(num_agents={params.num_agents}), found {', '.join(sorted(agents)) or 'none'}")
    agent_rc = np.array([agents[ch] for ch in expected], dtype=np.int64)
    return grid, agent_rc


class WorldBatch:
    """N Treasurehunt worlds stepped together. All randomness comes from the ``rng`` given.

    The hot path (``step``) costs a fixed number of NumPy calls per agent, whatever N, so
    the same code serves one world (`TreasurehuntEnv`) and thousands (the vector env).
    Internally agent positions are kept agent-major, ``(A, N)``, as flat indices into
    ``cells.reshape(-1)`` (row offset included), so each agent's move is a handful of
    contiguous gathers and scatters.
    """

    #: Most spawn successes drawn per generator call (bounds the buffer's memory).
    max_spawn_block: int = 1 << 20

    def __init__(self, params: WorldParams, num_worlds: int):
        if isinstance(num_worlds, bool) or not isinstance(num_worlds, (int, np.integer)):
            raise TypeError(f"num_worlds must be an int, got {type(num_worlds).__name__} {num_worlds!r}")
        if num_worlds < 1:
            raise ValueError(f"num_worlds must be >= 1, got {num_worlds}")
        self.params = params
        self.vocab: Vocabulary = vocabulary()
        wall, empty = self.vocab.wall, self.vocab.empty
        self._empty, self._agent = empty, self.vocab.agent
        self.num_worlds = n = int(num_worlds)
        # At least one cell of wall padding, so that a move off the map (possible in a layout
        # without border walls) bumps instead of wrapping into the next row or world.
        r = params.vision_radius
        self.pad = pad = max(r, 1)
        self.padded_height, self.padded_width = params.height + 2 * pad, params.width + 2 * pad
        self.row_size = self.padded_height * self.padded_width
        self.cells = np.full((n, self.row_size), wall, dtype=np.int8)
        self._flat = self.cells.reshape(-1)
        self._row_base = np.arange(n, dtype=np.int64) * self.row_size
        # (A, N) flat indices into self._flat (row offset included).
        self._pos = np.repeat(self._row_base[None], params.num_agents, axis=0)
        self.turn = np.zeros(n, dtype=np.int64)

        pw = self.padded_width
        deltas = self.vocab.action_deltas
        self._moves = deltas[:, 0] * pw + deltas[:, 1]
        dr, dc = np.meshgrid(np.arange(-r, r + 1), np.arange(-r, r + 1), indexing="ij")
        self._view_offsets = (dr * pw + dc).reshape(-1).astype(np.int64)
        self._windows = self._window_view()
        self._window_corner = r * pw + r  # agent index - corner index
        self._reward_by_code = self.vocab.values(params)
        self._passable = self.vocab.passable
        # (row, col) in map coordinates of every padded flat index: agent_rc is one gather.
        prow, pcol = np.divmod(np.arange(self.row_size, dtype=np.int64), pw)
        self._rc_of_index = np.stack([prow - pad, pcol - pad], axis=-1)
        # Interior (non-border) map cells as flat padded indices: where agents may start.
        rows, cols = np.meshgrid(np.arange(1, params.height - 1), np.arange(1, params.width - 1),
                                 indexing="ij")
        self._interior = ((rows + pad) * pw + (cols + pad)).reshape(-1).astype(np.int64)
        self._empty_map = np.full((self.padded_height, self.padded_width), wall, dtype=np.int8)
        self._empty_map[pad + 1 : pad + params.height - 1, pad + 1 : pad + params.width - 1] = empty
        self._empty_map = self._empty_map.reshape(-1)
        self._item_codes = self.vocab.spawn_codes
        # Spawn trials run over every map cell of every world, in this order (world-major).
        rows, cols = np.meshgrid(np.arange(params.height), np.arange(params.width), indexing="ij")
        map_cells = ((rows + pad) * pw + (cols + pad)).reshape(-1)
        self._spawn_cells = (self._row_base[:, None] + map_cells).reshape(-1)
        self._draws = SpawnDraws(self._spawn_cells, self._item_codes, params.spawn_prob)
        #: When each cell's item appeared (`rpg_env.game.visibility`); None: items always visible.
        self.ages = (ItemAges(params.item_visible_turns, self.cells.shape, self.vocab)
                     if params.item_visible_turns else None)
        #: Set True to keep, after every ``step``, the flat indices (into ``cells.reshape(-1)``)
        #: of the cells where an item spawned that turn in ``spawned`` (replay and analysis;
        #: off in play, where nothing needs it).
        self.log_spawns = False
        self.spawned = np.zeros(0, dtype=np.int64)
        #: ``(N,)`` int64 level id of each world's map; -1 for the open room or a loaded layout.
        self.level = np.full(n, -1, dtype=np.int64)
        self.discard_buffered_draws()

    def _window_view(self) -> np.ndarray:
        """Every (V, V) window of the padded maps, keyed by the flat index of its top-left
        cell: a read-only strided view of ``cells``, so a crop is one gather of windows."""
        side, pw, step = self.params.view_size, self.padded_width, self._flat.strides[0]
        span = (side - 1) * pw + side - 1
        return np.lib.stride_tricks.as_strided(self._flat, shape=(self._flat.size - span, side, side),
                                               strides=(step, pw * step, step), writeable=False)

    # Views of ``cells`` must stay views after a copy or pickle: rebuild them.
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_flat"], state["_windows"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._flat = self.cells.reshape(-1)
        self._windows = self._window_view()

    # ----------------------------------------------------------------- state views
    @property
    def grid(self) -> np.ndarray:
        """``(N, H, W)`` view of the maps without the padding (writes go through)."""
        r, p = self.pad, self.params
        return self.cells.reshape(self.num_worlds, self.padded_height, self.padded_width)[
            :, r : r + p.height, r : r + p.width
        ]

    @property
    def positions(self) -> np.ndarray:
        """``(N, A)`` int64 flat indices of the agents into each world's padded row of ``cells``.

        A read-only snapshot: move agents through ``reset``, ``load_layout`` or ``step``.
        """
        local = self._pos.T - self._row_base[:, None]
        local.flags.writeable = False
        return local

    def agent_rc(self) -> np.ndarray:
        """``(N, A, 2)`` agent (row, column) positions in map coordinates."""
        return self._rc_of_index[self._pos.T - self._row_base[:, None]]

    def world_agent_rc(self, world: int) -> np.ndarray:
        """``(A, 2)`` agent (row, column) positions of one world (cheaper than ``agent_rc``)."""
        local = self._pos[:, world]
        return self._rc_of_index[local - self._row_base[world] if world else local]

    def views(self) -> np.ndarray:
        """``(N, A, V * V)`` int8 cell codes of each agent's egocentric window, row-major, as the
        agents see them (items hidden by ``item_visible_turns`` read as empty)."""
        if self.ages is not None:
            return self.ages.hide(self._flat, self._pos.T[:, :, None] + self._view_offsets,
                                  self.turn[:, None, None])
        if self.num_worlds <= 4:  # few windows: a per-cell gather has less overhead
            return self._flat[self._pos.T[:, :, None] + self._view_offsets]
        side = self.params.view_size
        return self._windows[self._pos.T - self._window_corner].reshape(
            self.num_worlds, self.params.num_agents, side * side)

    def views_of(self, values: np.ndarray) -> np.ndarray:
        """``(N, A, V * V)`` of any per-cell array ``values`` (shaped like ``cells``, e.g. a mask
        of them) in each agent's egocentric window, row-major, as `views` crops ``cells``."""
        values = np.asarray(values)
        if values.shape != self.cells.shape:
            raise ValueError(f"values must be shaped like cells {self.cells.shape}, got {values.shape}")
        return values.reshape(-1)[self._pos.T[:, :, None] + self._view_offsets]

    def world_views(self, world: int) -> np.ndarray:
        """``(A, V * V)`` int8 cell codes of the agents' windows in one world, as they see them."""
        index = self._pos[:, world, None] + self._view_offsets
        if self.ages is not None:
            return self.ages.hide(self._flat, index, self.turn[world])
        return self._flat[index]

    def truncated(self) -> np.ndarray:
        return self.turn >= self.params.max_turns

    # ----------------------------------------------------------------- transitions
    def reset(self, rng: np.random.Generator, mask: np.ndarray | None = None) -> None:
        """Start new episodes: empty map, border walls, agents on distinct random free cells.

        With ``num_levels`` > 0 each world first draws its level id (one ``rng.integers`` call
        for all of them; see ``level``) and starts from that level's walls; the open room
        draws nothing more than it did before levels existed.

        ``mask`` ``(N,)`` bool selects the worlds to reset (all when None). A full reset also
        discards the buffered spawn draws, so what follows depends only on ``rng``'s state.
        """
        if mask is None:
            idx = np.arange(self.num_worlds)
            self.discard_buffered_draws()
        else:
            idx = np.flatnonzero(mask)
        if idx.size == 0:
            return
        if self.params.num_levels:
            keys = self._reset_levels(rng, idx)
        else:
            self.cells[idx] = self._empty_map
            keys = rng.random((idx.size, self._interior.size))
        picks = np.argpartition(keys, self.params.num_agents - 1, axis=1)[:, : self.params.num_agents]
        starts = self._interior[picks] + self._row_base[idx, None]  # (k, A) flat
        self._pos[:, idx] = starts.T
        self._flat[starts] = self._agent
        self.turn[idx] = 0
        if self.ages is not None:
            self.ages.restart(idx)

    def _reset_levels(self, rng: np.random.Generator, idx: np.ndarray) -> np.ndarray:
        """Draw a level for each world of ``idx`` and lay out its map; return the ``(k, cells)``
        start keys over ``_interior``, walls keyed past every draw so that agents start open."""
        p = self.params
        levels = rng.integers(p.start_level, p.start_level + p.num_levels, size=idx.size)
        self.level[idx] = levels
        maps = np.stack([self.level_map(int(level)) for level in levels])
        self.cells[idx] = maps
        keys = rng.random((idx.size, self._interior.size))
        keys[maps[:, self._interior] != self._empty] = 2.0
        return keys

    def level_map(self, level: int) -> np.ndarray:
        """``(row_size,)`` int8 padded flat map of level ``level`` at turn 0 (no agents, no items)."""
        p, pad = self.params, self.pad
        walls = level_walls(level, p.height, p.width, p.distribution_mode)
        open_cells = int((~walls).sum())
        if open_cells < p.num_agents:
            raise ValueError(f"level {level} of a {p.height} x {p.width} map has {open_cells} open "
                             f"cells, too few for num_agents={p.num_agents}; use a larger map")
        padded = np.full((self.padded_height, self.padded_width), self.vocab.wall, dtype=np.int8)
        padded[pad : pad + p.height, pad : pad + p.width] = np.where(walls, self.vocab.wall, self._empty)
        return padded.reshape(-1)

    def load_layout(self, world: int, grid: np.ndarray, agent_rc: np.ndarray) -> None:
        """Put a parsed layout (see ``parse_layout``) into world ``world`` at turn 0."""
        r = self.pad
        padded = self.cells[world].reshape(self.padded_height, self.padded_width)
        padded[:] = self.vocab.wall
        padded[r : r + self.params.height, r : r + self.params.width] = grid
        local = (agent_rc[:, 0] + r) * self.padded_width + (agent_rc[:, 1] + r)
        self._pos[:, world] = local + self._row_base[world]
        self.turn[world] = 0
        self.level[world] = -1
        if self.ages is not None:
            self.ages.restart(world)

    def discard_buffered_draws(self) -> None:
        """Forget pre-drawn spawn trials (the next ``step`` draws afresh from its ``rng``)."""
        self._draws.discard()

    def step(self, actions: np.ndarray, rng: np.random.Generator,
             active: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Advance every active world by one turn.

        Agents move one after another in index order (agent 0, the learner, first), so an
        agent may step into the cell another agent left earlier in the same turn. Then every
        empty cell spawns an item with probability ``spawn_prob``.

        Args:
            actions: ``(N, A)`` integer actions in ``0..3`` (validated by the caller).
            rng: the generator that draws the spawns. They are drawn ahead in blocks, so
                pass the same generator every turn; another one takes over only after a
                full ``reset`` or ``discard_buffered_draws``.
            active: optional ``(N,)`` bool; inactive worlds do not change at all.

        Returns:
            rewards: ``(N, A)`` float32 points earned this turn.
            target_codes: ``(N, A)`` int8 code of the cell each agent tried to enter (the item
            when picked up, the wall when bumped, the agent when blocked, empty otherwise).
            Both are fresh arrays (transposed views of agent-major storage).
        """
        flat, pos, num_agents = self._flat, self._pos, self.params.num_agents
        delta = self._moves.take(actions.T)  # (A, N) flat offsets of the moves
        if active is not None:
            delta[:, ~active] = 0  # an inactive agent "moves" onto itself: blocked, no change
        codes = np.empty((num_agents, self.num_worlds), dtype=np.int8)
        for a in range(num_agents):
            here = pos[a]  # a view: updated in place below
            target = here + delta[a]
            code = flat.take(target, out=codes[a])
            flat[here] = self._empty
            np.copyto(here, target, where=self._passable.take(code))
            flat[here] = self._agent
        rewards = self._reward_by_code.take(codes)
        if active is not None:
            inactive = ~active
            rewards[:, inactive] = 0.0
            codes[:, inactive] = self._empty
            self.turn += active
        else:
            self.turn += 1
        self._spawn(rng, active)
        return rewards.T, codes.T

    def _spawn(self, rng: np.random.Generator, active: np.ndarray | None) -> None:
        """Each empty map cell of each active world becomes a uniform random item with prob. p
        (the trials drawn ahead by `rpg_env.game.spawns.SpawnDraws`)."""
        p = self.params.spawn_prob
        if self.log_spawns:
            self.spawned = np.zeros(0, dtype=np.int64)
        if p <= 0.0 or not len(self._item_codes):
            return
        flat = self._flat
        if p >= 1.0:
            cells = self._spawn_cells
            if active is not None:
                cells = cells.reshape(self.num_worlds, -1)[active].reshape(-1)
            cells = cells[flat[cells] == self._empty]
            flat[cells] = self._item_codes[rng.integers(0, len(self._item_codes), size=cells.size)]
            self._spawned(cells)
            return
        cells, kinds = self._draws.next_turn(rng, self.max_spawn_block)
        if not cells.size:
            return
        current = flat[cells]
        hit = current == self._empty
        if active is not None:
            hit &= active.take(cells // self.row_size)
        # Rewriting the non-hits with their own codes is cheaper than compressing twice.
        flat[cells] = np.where(hit, kinds, current)
        if self.log_spawns or self.ages is not None:
            self._spawned(cells[hit])

    def _spawned(self, cells: np.ndarray) -> None:
        """Items spawned this turn at flat indices ``cells``: log them, and date them."""
        if self.log_spawns:
            self.spawned = cells
        if self.ages is not None:
            self.ages.spawned(cells, self.turn.take(cells // self.row_size))
