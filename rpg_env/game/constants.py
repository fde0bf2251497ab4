"""The game's vocabulary: every kind of cell and every action, one table each.

Everything else derives from these two tables (through `vocabulary()`): the rules (what an
agent may enter, what is picked up and what it is worth, what spawns), the observation
channels (one per cell kind, in table order), the layout and text characters, the colours and
sprites of the renderer, the scripted policies' targets and hazards, and the channel and
action names written into trajectory files. A new kind of cell is one more `CellKind` row;
a new move is one more `Action` row.

A grid cell holds exactly one kind, so an agent standing on a cell replaces what was there:
every passable kind other than ``empty`` must therefore be a pick-up (consumed on entry).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

#: Colour of an empty floor tile; sprites draw their shape over it.
FLOOR_RGB = (236, 232, 220)
#: Letters of the agents in layouts and text maps: ``A`` the learner, ``B``.. co-players.
AGENT_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
SPRITES = ("floor", "block", "diamond", "cross", "disc", "rounded")


@dataclass(frozen=True)
class CellKind:
    """One kind of cell. Its code (and observation channel) is its index in `CELL_KINDS`."""

    name: str
    char: str  # layout / text-map character; agents have none (they are lettered A, B, ...)
    rgb: tuple[int, int, int]  # colour of its tile and in plots
    sprite: str  # shape drawn on the tile, one of SPRITES
    passable: bool  # an agent may step onto it (otherwise the move bumps and the agent stays)
    pickup: bool = False  # entering consumes it and scores its value
    spawns: bool = False  # appears on empty cells, each turn with probability spawn_prob
    value_param: str | None = None  # WorldParams field with its points (entering, or bumping into it)
    default_value: float = 0.0  # the reference's points: the default of value_param


@dataclass(frozen=True)
class Action:
    """One action: its name and the (row, column) move it makes."""

    name: str
    delta: tuple[int, int]


CELL_KINDS: tuple[CellKind, ...] = (
    CellKind("empty", ".", FLOOR_RGB, "floor", passable=True),
    CellKind("wall", "#", (84, 84, 96), "block", passable=False,
             value_param="wall_penalty", default_value=-1.0),
    CellKind("gem", "g", (40, 160, 230), "diamond", passable=True, pickup=True, spawns=True,
             value_param="gem_value", default_value=10.0),
    CellKind("bone", "b", (200, 40, 40), "cross", passable=True, pickup=True, spawns=True,
             value_param="bone_value", default_value=-10.0),
    CellKind("food", "f", (60, 170, 70), "disc", passable=True, pickup=True, spawns=True,
             value_param="food_value", default_value=5.0),
    CellKind("agent", "", (240, 170, 30), "rounded", passable=False),
)

ACTIONS: tuple[Action, ...] = (
    Action("up", (-1, 0)),
    Action("down", (1, 0)),
    Action("left", (0, -1)),
    Action("right", (0, 1)),
)


class Vocabulary:
    """The two tables and everything derived from them (arrays are indexed by cell code).

    Built by `vocabulary()` from the module's current `CELL_KINDS` and `ACTIONS`; checks the
    invariants the rules rely on and raises ValueError naming the offending row.
    """

    def __init__(self, cells: tuple[CellKind, ...], actions: tuple[Action, ...]) -> None:
        self.cells, self.actions = tuple(cells), tuple(actions)
        names = [c.name for c in self.cells]
        for required in ("empty", "wall", "agent"):
            if required not in names:
                raise ValueError(f"CELL_KINDS must include {required!r}: the rules place agents, "
                                 f"pad the map with walls and leave empty cells behind")
        if len(set(names)) != len(names):
            raise ValueError(f"cell kind names must be unique, got {names}")
        chars = [c.char for c in self.cells if c.char]
        if len(set(chars)) != len(chars) or any(len(ch) != 1 or ch in AGENT_LETTERS for ch in chars):
            raise ValueError(f"layout characters must be single, unique and not agent letters, got {chars}")
        for cell in self.cells:
            if cell.sprite not in SPRITES:
                raise ValueError(f"cell kind {cell.name!r}: sprite must be one of {SPRITES}")
            if cell.passable and not cell.pickup and cell.name != "empty":
                raise ValueError(f"cell kind {cell.name!r} is passable but not a pick-up: a cell holds one "
                                 f"kind, so it would vanish under an agent; make it a pick-up or impassable")
            if cell.spawns and not cell.pickup:
                raise ValueError(f"cell kind {cell.name!r} spawns but is not a pick-up")
        if len(self.cells) > 127:
            raise ValueError("cells are stored as int8 codes: at most 127 kinds")
        action_names = [a.name for a in self.actions]
        if len(set(action_names)) != len(action_names) or not self.actions:
            raise ValueError(f"action names must be unique and non-empty, got {action_names}")

    # ----------------------------------------------------------------- cells
    @cached_property
    def cell_names(self) -> tuple[str, ...]:
        """Channel names of the one-hot view, in code order."""
        return tuple(c.name for c in self.cells)

    @property
    def num_kinds(self) -> int:
        return len(self.cells)

    def code(self, name: str) -> int:
        """The code of the cell kind called ``name``."""
        try:
            return self.cell_names.index(name)
        except ValueError:
            raise ValueError(f"unknown cell kind {name!r}; known: {', '.join(self.cell_names)}") from None

    @cached_property
    def empty(self) -> int:
        return self.code("empty")

    @cached_property
    def wall(self) -> int:
        return self.code("wall")

    @cached_property
    def agent(self) -> int:
        return self.code("agent")

    @cached_property
    def layout_chars(self) -> dict[str, int]:
        """Layout / text-map character -> code (agents are lettered, see `AGENT_LETTERS`)."""
        return {c.char: code for code, c in enumerate(self.cells) if c.char}

    @cached_property
    def passable(self) -> np.ndarray:
        """``(K,)`` bool: an agent may step onto the kind."""
        return np.array([c.passable for c in self.cells], dtype=bool)

    @cached_property
    def pickup_codes(self) -> tuple[int, ...]:
        return tuple(code for code, c in enumerate(self.cells) if c.pickup)

    @cached_property
    def spawn_codes(self) -> np.ndarray:
        """``(S,)`` int8 codes of the kinds that spawn; a spawn picks one uniformly, in this order."""
        return np.array([code for code, c in enumerate(self.cells) if c.spawns], dtype=np.int8)

    @cached_property
    def value_params(self) -> tuple[str, ...]:
        """The WorldParams fields that give points, in code order."""
        return tuple(c.value_param for c in self.cells if c.value_param)

    def values(self, params: object | None = None) -> np.ndarray:
        """``(K,)`` float32 points for entering (or bumping into) each kind under ``params``
        (a WorldParams or anything with the ``value_param`` attributes; None: the defaults)."""
        return np.array([float(getattr(params, c.value_param, c.default_value)) if c.value_param and
                         params is not None else c.default_value for c in self.cells], dtype=np.float32)

    @cached_property
    def palette(self) -> np.ndarray:
        """``(K, 3)`` uint8 tile colours by code."""
        return np.array([c.rgb for c in self.cells], dtype=np.uint8)

    @cached_property
    def good_pickups(self) -> tuple[int, ...]:
        """Pick-ups worth points by default, best first (what a scripted agent goes for)."""
        good = [code for code, c in enumerate(self.cells) if c.pickup and c.default_value > 0]
        return tuple(sorted(good, key=lambda code: -self.cells[code].default_value))

    @cached_property
    def hazards(self) -> tuple[int, ...]:
        """Kinds a scripted agent never steps into: walls and pick-ups that cost points."""
        return tuple(code for code, c in enumerate(self.cells)
                     if (not c.passable and c.name != "agent") or (c.pickup and c.default_value < 0))

    # ----------------------------------------------------------------- actions
    @cached_property
    def action_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.actions)

    @property
    def num_actions(self) -> int:
        return len(self.actions)

    @cached_property
    def action_deltas(self) -> np.ndarray:
        """``(A, 2)`` int64 (row, column) move of each action."""
        return np.array([a.delta for a in self.actions], dtype=np.int64).reshape(-1, 2)

    def deltas_for(self, action_names: list[str] | tuple[str, ...]) -> np.ndarray:
        """``(A, 2)`` moves of actions given by name (e.g. a trajectory file's ``action_names``)."""
        known = dict(zip(self.action_names, self.action_deltas, strict=True))
        unknown = [name for name in action_names if name not in known]
        if unknown:
            raise ValueError(f"actions {unknown} are not in the game's movement table "
                             f"({', '.join(self.action_names)})")
        return np.array([known[name] for name in action_names], dtype=np.int64).reshape(-1, 2)

    def action_help(self) -> str:
        """``"0 up, 1 down, 2 left, 3 right"``."""
        return ", ".join(f"{i} {name}" for i, name in enumerate(self.action_names))


_CACHE: dict[str, tuple[tuple, tuple, Vocabulary]] = {}


def vocabulary() -> Vocabulary:
    """The current vocabulary, derived from `CELL_KINDS` and `ACTIONS` (re-derived when a
    program or test replaces either table)."""
    cached = _CACHE.get("current")
    if cached is None or cached[0] is not CELL_KINDS or cached[1] is not ACTIONS:
        cached = (CELL_KINDS, ACTIONS, Vocabulary(CELL_KINDS, ACTIONS))
        _CACHE["current"] = cached
    return cached[2]


# Names of the reference vocabulary, for code that needs a particular kind by name. Derived
# code (rules, encodings, rendering) goes through `vocabulary()` so an extended table is seen.
EMPTY, WALL, GEM, BONE, FOOD, AGENT = (vocabulary().code(n) for n in ("empty", "wall", "gem", "bone",
                                                                    "food", "agent"))
CELL_NAMES: tuple[str, ...] = vocabulary().cell_names
ITEM_CODES: tuple[int, ...] = tuple(int(c) for c in vocabulary().spawn_codes)
ACTION_NAMES: tuple[str, ...] = vocabulary().action_names
NUM_CELL_KINDS = len(CELL_NAMES)
NUM_ACTIONS = len(ACTION_NAMES)
LAYOUT_CHARS: dict[str, int] = dict(vocabulary().layout_chars)
