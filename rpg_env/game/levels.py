"""Generated levels: the wall layout of level ``level_seed``, after ProcGen's ``num_levels``.

A level is an ``(H, W)`` bool wall mask: the border is wall and the interior is divided into
rooms (``easy``) or a maze of one-cell corridors (``hard``) by recursive division. Walls lie on
even rows/columns and doors on odd ones, so a later wall never closes an earlier door and every
open cell is reachable from every other; a flood fill checks it anyway and walls up any cell it
cannot reach (none, with this construction).

The layout is a function of ``(level_seed, height, width, mode)`` alone: it is drawn from
``np.random.default_rng(level_seed)`` with integer draws only (no floats, no platform
dependent arithmetic), never from an env's generator, so the same seed gives the same layout on
every machine. ``tests/test_levels.py`` pins hashes of a few layouts to catch any change.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

DISTRIBUTION_MODES = ("easy", "hard")
#: Level seeds are ProcGen's 32-bit unsigned ints: ``start_level + num_levels`` may not pass it.
MAX_LEVEL_SEED = 2**31 - 1

# Per mode: least room side a wall may leave on either side of it, largest chamber side left
# undivided (0: divide while a wall fits) and door width in cells.
_DIVISION = {"easy": (3, 7, 2), "hard": (1, 0, 1)}


def check_levels(num_levels: int, start_level: int, distribution_mode: str) -> None:
    """Raise TypeError/ValueError saying what to change unless the level settings are valid."""
    for name, value in (("num_levels", num_levels), ("start_level", start_level)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value} (num_levels=0 is the open room)")
    last = start_level + max(num_levels, 1) - 1
    if last > MAX_LEVEL_SEED:
        raise ValueError(f"levels {start_level}..{last} (start_level .. start_level + num_levels - 1) "
                         f"pass the largest level seed {MAX_LEVEL_SEED}; lower start_level or num_levels")
    if distribution_mode not in DISTRIBUTION_MODES:
        raise ValueError(f"distribution_mode must be one of {', '.join(map(repr, DISTRIBUTION_MODES))}, "
                         f"got {distribution_mode!r}")


#: How many level ids from ``test_start`` on `held_out_levels` draws unseen levels from.
UNSEEN_LEVEL_COUNT = 100_000


def held_out_levels(train_levels: int, test_start: int, distribution_mode: str,
                    unseen: int = UNSEEN_LEVEL_COUNT) -> tuple[dict[str, Any], dict[str, Any]]:
    """ProcGen's train/test split of levels: the env keyword arguments of the training levels
    ``0 .. train_levels - 1`` and of ``unseen`` levels from ``test_start`` on, a range the first
    never meets. Raises ValueError, worded to follow the name of the option that set
    ``test_start``, when the ranges meet or the unseen one passes the largest level seed."""
    if test_start < train_levels:
        raise ValueError(f"{test_start} lies inside the training levels 0..{train_levels - 1}; "
                         f"give a value >= {train_levels}")
    if test_start + unseen - 1 > MAX_LEVEL_SEED:
        raise ValueError(f"must be <= {MAX_LEVEL_SEED - unseen + 1} ({unseen:,} unseen level ids follow it)")
    train = {"num_levels": train_levels, "start_level": 0, "distribution_mode": distribution_mode}
    check_levels(**train)
    return train, {**train, "num_levels": unseen, "start_level": test_start}


def _wall_lines(lo: int, hi: int, min_side: int) -> np.ndarray:
    """Even positions in ``[lo, hi]`` that leave at least ``min_side`` cells on either side."""
    first = lo + min_side
    first += first % 2
    return np.arange(first, hi - min_side + 1, 2, dtype=np.int64)


def _divide(walls: np.ndarray, rng: np.random.Generator, mode: str) -> None:
    """Recursive division of the interior of ``walls`` (in place), chambers in stack order."""
    min_side, max_room, door_width = _DIVISION[mode]
    height, width = walls.shape
    stack = [(1, height - 2, 1, width - 2)]  # inclusive open bounds r0, r1, c0, c1
    while stack:
        r0, r1, c0, c1 = stack.pop()
        rows, cols = _wall_lines(r0, r1, min_side), _wall_lines(c0, c1, min_side)
        tall, wide = r1 - r0 + 1, c1 - c0 + 1
        if max(tall, wide) <= max_room or (rows.size == 0 and cols.size == 0):
            continue
        if rows.size and cols.size:
            horizontal = tall > wide or (tall == wide and int(rng.integers(2)) == 0)
        else:
            horizontal = rows.size > 0
        if horizontal:
            at = int(rows[rng.integers(rows.size)])
            door = c0 + 2 * int(rng.integers((c1 - c0) // 2 + 1))  # odd, like c0
            walls[at, c0 : c1 + 1] = True
            walls[at, door : min(door + door_width, c1 + 1)] = False
            stack += [(r0, at - 1, c0, c1), (at + 1, r1, c0, c1)]
        else:
            at = int(cols[rng.integers(cols.size)])
            door = r0 + 2 * int(rng.integers((r1 - r0) // 2 + 1))
            walls[r0 : r1 + 1, at] = True
            walls[door : min(door + door_width, r1 + 1), at] = False
            stack += [(r0, r1, c0, at - 1), (r0, r1, at + 1, c1)]


def reachable(walls: np.ndarray) -> np.ndarray:
    """``(H, W)`` bool: the open cells 4-connected to the first open cell (row-major)."""
    open_cells = ~walls
    seen = np.zeros_like(open_cells)
    if not open_cells.any():
        return seen
    seen.flat[int(np.argmax(open_cells))] = True
    while True:
        grown = seen.copy()
        grown[1:] |= seen[:-1]
        grown[:-1] |= seen[1:]
        grown[:, 1:] |= seen[:, :-1]
        grown[:, :-1] |= seen[:, 1:]
        grown &= open_cells
        if np.array_equal(grown, seen):
            return seen
        seen = grown


@lru_cache(maxsize=4096)
def level_walls(level_seed: int, height: int, width: int, mode: str) -> np.ndarray:
    """``(H, W)`` read-only bool wall mask of level ``level_seed`` (True = wall).

    Every open cell is reachable from every other; the border is wall.
    """
    if mode not in DISTRIBUTION_MODES:
        raise ValueError(f"distribution_mode must be one of {DISTRIBUTION_MODES}, got {mode!r}")
    if not 0 <= level_seed <= MAX_LEVEL_SEED:
        raise ValueError(f"level seed must be in 0..{MAX_LEVEL_SEED}, got {level_seed}")
    walls = np.zeros((height, width), dtype=bool)
    walls[[0, -1], :] = True
    walls[:, [0, -1]] = True
    _divide(walls, np.random.default_rng(level_seed), mode)
    walls |= ~reachable(walls)  # a safety net: the division never leaves a cell cut off
    walls.flags.writeable = False
    return walls
