"""The spawn trials of a `rpg_env.game.world.WorldBatch`, drawn ahead as geometric gaps.

Each turn every map cell of every world is one Bernoulli trial with probability ``spawn_prob``
(an item spawns there if the cell is empty). The trials of all turns form one endless sequence,
turn after turn, each turn every map cell of every world in order; `SpawnDraws` draws its
successes ("hits") in blocks as cumulative geometric gaps (with the item each places), so a turn
costs O(N * cells * p) work and no generator call most turns. Blocks come from the generator in
order, so the same generator state gives the same spawns.
"""

from __future__ import annotations

import numpy as np


class SpawnDraws:
    """The buffered hits of the spawn trials over ``spawn_cells`` (flat cell indices, in trial
    order within a turn), each placing one of ``item_codes`` uniformly."""

    def __init__(self, spawn_cells: np.ndarray, item_codes: np.ndarray, spawn_prob: float) -> None:
        self.spawn_cells, self.item_codes, self.spawn_prob = spawn_cells, item_codes, spawn_prob
        self.trials_per_turn = spawn_cells.size
        self.discard()

    def discard(self) -> None:
        """Forget pre-drawn trials (the next turn draws afresh from its generator)."""
        # Per hit: its trial index (counted from the buffer's first turn), its flat cell and
        # the item it places. ``_turn_ends[t]`` is the index of the first hit after turn t.
        # -1 is a sentinel "last hit" so the first geometric gap g lands on trial g - 1.
        self._hit_pos = np.array([-1], dtype=np.int64)
        self._hit_cell = np.zeros(1, dtype=np.int64)
        self._hit_kind = np.zeros(1, dtype=np.int8)
        self._hit_next = 1  # index of the first unconsumed hit
        self._turn_ends: list[int] = []
        self._buffer_turn = 0  # the next turn to play, counted from the buffer's first turn

    def next_turn(self, rng: np.random.Generator, max_block: int) -> tuple[np.ndarray, np.ndarray]:
        """The hits of the next turn: their flat cells (distinct: one trial per cell per turn) and
        the items they place. ``max_block``: most hits drawn per generator call."""
        if self._buffer_turn >= len(self._turn_ends):
            self._draw_hits(rng, max_block)
        first, last = self._hit_next, self._turn_ends[self._buffer_turn]
        self._hit_next = last
        self._buffer_turn += 1
        return self._hit_cell[first:last], self._hit_kind[first:last]

    def _draw_hits(self, rng: np.random.Generator, max_block: int) -> None:
        """Draw hits until at least the next turn is fully known; rebase to that turn."""
        p, per_turn = self.spawn_prob, self.trials_per_turn
        base = self._buffer_turn * per_turn
        # Unconsumed hits all lie in the next turn (later turns would have been complete).
        positions = [self._hit_pos[self._hit_next :] - base]
        cells = [self._hit_cell[self._hit_next :]]
        kinds = [self._hit_kind[self._hit_next :]]
        last = int(self._hit_pos[-1]) - base  # the last drawn hit, maybe already consumed
        # About 32 turns' worth of hits per draw: few generator calls, bounded memory.
        block = int(min(max(256.0, 32.0 * per_turn * p), max_block))
        while last < per_turn:
            drawn = last + np.cumsum(rng.geometric(p, size=block))
            positions.append(drawn)
            cells.append(self.spawn_cells.take(drawn % per_turn))
            kinds.append(self.item_codes.take(rng.integers(0, len(self.item_codes), size=block)))
            last = int(drawn[-1])
        self._hit_pos = np.concatenate(positions)
        self._hit_cell = np.concatenate(cells)
        self._hit_kind = np.concatenate(kinds)
        self._hit_next = 0
        self._buffer_turn = 0
        complete_turns = last // per_turn  # turns whose every trial is decided
        ends = np.arange(1, complete_turns + 1, dtype=np.int64) * per_turn
        self._turn_ends = self._hit_pos.searchsorted(ends).tolist()
