"""The Treasurehunt rules, in NumPy, over a batch of N worlds at once.

This module is the single source of truth for the game. Every world in a batch is a flat
row of integer cell codes over the map *padded* by ``vision_radius`` cells of wall on each
side, so that an egocentric crop is one gather with precomputed offsets and "outside the map
reads as wall" needs no special case. Agent positions are flat indices into that padded row.

Shapes (N worlds, A agents, map H x W, vision radius r, view V = 2r + 1):

- ``WorldBatch.cells``: ``(N, (H + 2r) * (W + 2r))`` int8 cell codes (padded, flat)
- ``WorldBatch.positions``: ``(N, A)`` int64 flat indices into ``cells``
- ``WorldBatch.grid``: ``(N, H, W)`` int8 view of the map without padding
- ``WorldBatch.views()``: ``(N, A, V * V)`` int8 cell codes of each agent's window
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

EMPTY, WALL, GEM, BONE, FOOD, AGENT = range(6)
CELL_NAMES: tuple[str, ...] = ("empty", "wall", "gem", "bone", "food", "agent")
ITEM_CODES: tuple[int, ...] = (GEM, BONE, FOOD)
ACTION_NAMES: tuple[str, ...] = ("up", "down", "left", "right")
NUM_CELL_KINDS = len(CELL_NAMES)
NUM_ACTIONS = len(ACTION_NAMES)

LAYOUT_CHARS: dict[str, int] = {"#": WALL, ".": EMPTY, "g": GEM, "b": BONE, "f": FOOD}
AGENT_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

# Codes an agent may step onto; a wall bumps, another agent blocks.
_PASSABLE = np.array([True, False, True, True, True, False])


@dataclass(frozen=True)
class WorldParams:
    """Every number of the game, with the reference treasurehunt's defaults.

    Rewards are in points per step; ``spawn_prob`` is per empty cell per turn.
    """

    height: int = 20
    width: int = 20
    vision_radius: int = 4
    num_agents: int = 2
    spawn_prob: float = 0.01
    max_turns: int = 100
    gem_value: float = 10.0
    food_value: float = 5.0
    bone_value: float = -10.0
    wall_penalty: float = -1.0

    def __post_init__(self) -> None:
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
        if not 0.0 <= self.spawn_prob <= 1.0:
            raise ValueError(f"spawn_prob must be a probability in [0, 1], got {self.spawn_prob}")
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        for name in ("gem_value", "food_value", "bone_value", "wall_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")

    @property
    def view_size(self) -> int:
        return 2 * self.vision_radius + 1

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


def parse_layout(layout: str | list[str] | tuple[str, ...], params: WorldParams):
    """Parse a text map into ``(grid (H, W) int8, agent_rc (A, 2) int64)``.

    ``#`` wall, ``.`` empty, ``g`` gem, ``f`` food, ``b`` bone, ``A`` the learner and
    ``B``, ``C``, ... the co-players in agent order. Raises ValueError saying what is wrong.
    """
    if isinstance(layout, str):
        rows = [row for row in layout.strip("\n").split("\n")]
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
    grid = np.empty((params.height, params.width), dtype=np.int8)
    agents: dict[str, tuple[int, int]] = {}
    for i, row in enumerate(rows):
        for j, ch in enumerate(row):
            if ch in LAYOUT_CHARS:
                grid[i, j] = LAYOUT_CHARS[ch]
            elif ch in AGENT_LETTERS:
                if ch in agents:
                    raise ValueError(f"layout places agent {ch!r} twice: at {agents[ch]} and {(i, j)}")
                agents[ch] = (i, j)
                grid[i, j] = AGENT
            else:
                raise ValueError(
                    f"layout has unknown character {ch!r} at row {i}, column {j}; use '#' wall, "
                    f"'.' empty, 'g' gem, 'f' food, 'b' bone, 'A'.. agents"
                )
    expected = AGENT_LETTERS[: params.num_agents]
    if sorted(agents) != list(expected):
        raise ValueError(f"layout must place exactly the agents {', '.join(expected)} "
                         f"(num_agents={params.num_agents}), found {', '.join(sorted(agents)) or 'none'}")
    agent_rc = np.array([agents[ch] for ch in expected], dtype=np.int64)
    return grid, agent_rc


class WorldBatch:
    """N Treasurehunt worlds stepped together. All randomness comes from the ``rng`` given."""

    def __init__(self, params: WorldParams, num_worlds: int):
        if num_worlds < 1:
            raise ValueError(f"num_worlds must be >= 1, got {num_worlds}")
        self.params = params
        self.num_worlds = n = int(num_worlds)
        r = params.vision_radius
        self.pad = r
        self.padded_height, self.padded_width = params.height + 2 * r, params.width + 2 * r
        self.row_size = self.padded_height * self.padded_width
        self.cells = np.full((n, self.row_size), WALL, dtype=np.int8)
        self._flat = self.cells.reshape(-1)
        self._row_base = np.arange(n, dtype=np.int64) * self.row_size
        self.positions = np.zeros((n, params.num_agents), dtype=np.int64)
        self.turn = np.zeros(n, dtype=np.int64)

        pw = self.padded_width
        self._moves = np.array([-pw, pw, -1, 1], dtype=np.int64)
        dr, dc = np.meshgrid(np.arange(-r, r + 1), np.arange(-r, r + 1), indexing="ij")
        self._view_offsets = (dr * pw + dc).reshape(-1).astype(np.int64)
        self._reward_by_code = np.array(
            [0.0, params.wall_penalty, params.gem_value, params.bone_value, params.food_value, 0.0],
            dtype=np.float32,
        )
        # Interior (non-border) map cells as flat padded indices: where agents may start.
        rows, cols = np.meshgrid(np.arange(1, params.height - 1), np.arange(1, params.width - 1),
                                 indexing="ij")
        self._interior = ((rows + r) * pw + (cols + r)).reshape(-1).astype(np.int64)
        self._empty_map = np.full((self.padded_height, self.padded_width), WALL, dtype=np.int8)
        self._empty_map[r + 1 : r + params.height - 1, r + 1 : r + params.width - 1] = EMPTY
        self._empty_map = self._empty_map.reshape(-1)
        self._item_codes = np.array(ITEM_CODES, dtype=np.int8)

    # ----------------------------------------------------------------- state views
    @property
    def grid(self) -> np.ndarray:
        """``(N, H, W)`` view of the maps without the padding (writes go through)."""
        r, p = self.pad, self.params
        return self.cells.reshape(self.num_worlds, self.padded_height, self.padded_width)[
            :, r : r + p.height, r : r + p.width
        ]

    def agent_rc(self) -> np.ndarray:
        """``(N, A, 2)`` agent (row, column) positions in map coordinates."""
        rows, cols = np.divmod(self.positions, self.padded_width)
        return np.stack([rows - self.pad, cols - self.pad], axis=-1)

    def views(self) -> np.ndarray:
        """``(N, A, V * V)`` int8 cell codes of each agent's egocentric window, row-major."""
        index = (self._row_base[:, None, None] + self.positions[:, :, None]) + self._view_offsets
        return self._flat[index]

    def truncated(self) -> np.ndarray:
        return self.turn >= self.params.max_turns

    # ----------------------------------------------------------------- transitions
    def reset(self, rng: np.random.Generator, mask: np.ndarray | None = None) -> None:
        """Start new episodes: empty map, border walls, agents on distinct random free cells."""
        idx = np.arange(self.num_worlds) if mask is None else np.flatnonzero(mask)
        if idx.size == 0:
            return
        self.cells[idx] = self._empty_map
        keys = rng.random((idx.size, self._interior.size))
        picks = np.argpartition(keys, self.params.num_agents - 1, axis=1)[:, : self.params.num_agents]
        starts = self._interior[picks]
        self.positions[idx] = starts
        self.cells[idx[:, None], starts] = AGENT
        self.turn[idx] = 0

    def load_layout(self, world: int, grid: np.ndarray, agent_rc: np.ndarray) -> None:
        """Put a parsed layout (see ``parse_layout``) into world ``world`` at turn 0."""
        r = self.pad
        padded = self.cells[world].reshape(self.padded_height, self.padded_width)
        padded[:] = WALL
        padded[r : r + self.params.height, r : r + self.params.width] = grid
        self.positions[world] = (agent_rc[:, 0] + r) * self.padded_width + (agent_rc[:, 1] + r)
        self.turn[world] = 0

    def step(self, actions: np.ndarray, rng: np.random.Generator,
             active: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Advance every active world by one turn.

        Agents move one after another in index order (agent 0, the learner, first), then every
        empty cell spawns an item with probability ``spawn_prob``.

        Args:
            actions: ``(N, A)`` integer actions in ``0..3`` (validated by the caller).
            rng: the generator that draws the spawns.
            active: optional ``(N,)`` bool; inactive worlds do not change at all.

        Returns:
            rewards: ``(N, A)`` float32 points earned this turn.
            target_codes: ``(N, A)`` int8 code of the cell each agent tried to enter (GEM,
            FOOD, BONE when picked up, WALL when bumped, AGENT when blocked, EMPTY otherwise).
        """
        n, num_agents = self.num_worlds, self.params.num_agents
        flat, base = self._flat, self._row_base
        rewards = np.empty((n, num_agents), dtype=np.float32)
        target_codes = np.empty((n, num_agents), dtype=np.int8)
        for a in range(num_agents):
            here = self.positions[:, a]
            target = here + self._moves[actions[:, a]]
            if active is not None:
                target = np.where(active, target, here)
            code = flat[base + target]
            moved = _PASSABLE[code]
            new = np.where(moved, target, here)
            flat[base + here] = EMPTY
            flat[base + new] = AGENT
            self.positions[:, a] = new
            rewards[:, a] = self._reward_by_code[code]
            target_codes[:, a] = code
        if active is not None:
            rewards[~active] = 0.0
            target_codes[~active] = EMPTY
        self._spawn(rng, active)
        self.turn += 1 if active is None else active
        return rewards, target_codes

    def _spawn(self, rng: np.random.Generator, active: np.ndarray | None) -> None:
        """Each empty cell of each active world becomes a uniform random item with prob. p.

        The Bernoulli trials over all N * cells are drawn as geometric gaps between successes,
        which costs O(N * cells * p) random numbers instead of O(N * cells).
        """
        p = self.params.spawn_prob
        if p <= 0.0:
            return
        total = self._flat.size
        if p >= 1.0:
            hits = np.arange(total)
        else:
            expected = total * p
            hits = np.cumsum(rng.geometric(p, size=int(expected + 6.0 * np.sqrt(expected) + 8))) - 1
            while hits[-1] < total:  # rare: more successes than drawn; keep drawing gaps
                more = rng.geometric(p, size=int(expected) + 8)
                hits = np.concatenate([hits, hits[-1] + np.cumsum(more)])
            hits = hits[hits < total]
        hits = hits[self._flat[hits] == EMPTY]
        if active is not None:
            hits = hits[active[hits // self.row_size]]
        if hits.size:
            self._flat[hits] = self._item_codes[rng.integers(0, len(ITEM_CODES), size=hits.size)]
