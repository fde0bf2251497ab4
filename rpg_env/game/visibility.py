"""Items that fade from the agents' views: ``item_visible_turns``, the game's memory variant.

With ``item_visible_turns = k > 0`` an item (every kind of the vocabulary that is picked up and
spawns) shows in the agents' egocentric views only during the ``k`` turns after it appeared: the
turn it spawned is the first, and items on the map at a reset or in a loaded layout appeared at
turn 0. From turn ``appeared + k`` on its cell reads as empty floor in every agent's view (one-hot
and RGB, learner and co-players alike), but the item is still there: entering the cell collects
it and scores its value, and nothing spawns on it. The world's grid, the full-map observation and
rendered frames stay truthful. ``k = 0`` (the default) shows every item always and keeps no state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rpg_env.game.constants import Vocabulary


def check_item_visible_turns(value: Any) -> None:
    """Raise a clear error unless ``value`` is an int >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"item_visible_turns must be an int (turns an item stays in view; 0: "
                        f"always), got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"item_visible_turns must be >= 0 (0: items always visible; k > 0: an item "
                         f"shows for the k turns after it appears), got {value}")


class ItemAges:
    """When each cell's item appeared (``appeared``: the turn, int64, shaped like a
    `rpg_env.game.world.WorldBatch`'s ``cells``), and the views that hide the old ones."""

    def __init__(self, visible_turns: int, shape: tuple[int, int], vocab: Vocabulary) -> None:
        self.visible_turns = int(visible_turns)
        self.appeared = np.zeros(shape, dtype=np.int64)
        self._fades = np.zeros(vocab.num_kinds, dtype=bool)  # by cell code: an item that hides
        self._fades[[code for code in vocab.pickup_codes if vocab.cells[code].spawns]] = True
        self._empty = vocab.empty

    def restart(self, worlds: np.ndarray | int) -> None:
        """Worlds ``worlds`` start at turn 0: what their maps hold appeared now."""
        self.appeared[worlds] = 0

    def spawned(self, cells: np.ndarray, turns: np.ndarray) -> None:
        """Items appeared at flat indices ``cells`` (into ``cells.reshape(-1)``) at ``turns``."""
        self.appeared.reshape(-1)[cells] = turns

    def hide(self, flat: np.ndarray, index: np.ndarray, turn: np.ndarray | int) -> np.ndarray:
        """The codes ``flat[index]`` as the agents see them at ``turn`` (broadcast against
        ``index``): items that appeared ``visible_turns`` or more turns ago read as empty."""
        codes = flat[index]
        old = turn - self.appeared.reshape(-1)[index] >= self.visible_turns
        codes[old & self._fades[codes]] = self._empty
        return codes
