"""Where the error lives: every predicted cell's category, the floor, and the memory oracle's input.

**The floor.** Given everything the game knows at t (the whole map, both agents' actions), the
next view is fixed except for spawns: after the moves, every empty map cell becomes a uniformly
drawn item with probability p (``spawn_prob``). So the lowest cross-entropy any predictor can
reach on a cell is ``-log(1 - p)`` where a spawnable cell stayed empty, ``-log(p / k)`` where one
of the k item kinds spawned, and 0 everywhere else. Which cells were spawnable is exact from a
replay of the recorded game (`rpg_env.replay`: bit-for-bit checked, a file that does not replay
is refused). Without a replay (a file recorded without seeds) an analytic lower bound stands in:
a cell empty at t+1 was spawnable; an item at t+1 in a cell that was visible and empty (or held
the other agent) at t spawned; an item scrolling into view is taken as already there (0), which
can only lower the floor. ``floor_method`` says which was used.

**Categories** partition the cells of every predicted view (first match wins):

- ``other_agent``: the other agent is there at t+1, or was there at t;
- ``spawned``: an item spawned there this turn;
- ``in_view``: visible at t;
- ``seen_1_5``, ``seen_6_20``, ``seen_21_plus``: scrolling into view, last seen that many steps ago;
- ``never_seen``: scrolling into view, never seen in this episode.

Per category the evaluation reports cross-entropy, accuracy and excess over the floor of every
view predictor (`rpg_worldmodel.evaluation.metrics.category_counts`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rpg_env.game.constants import vocabulary
from rpg_worldmodel.evaluation.baselines import FittedBaselines
from rpg_worldmodel.evaluation.episodes import EvalSet
from rpg_worldmodel.evaluation.metrics import CELL_CATEGORIES
from rpg_worldmodel.evaluation.oracles import AGE_BUCKETS, REGION_IN_VIEW, REGION_NEVER_SEEN

FLOOR_MODES = ("auto", "replay", "bound")
_CATEGORY = {name: i for i, name in enumerate(CELL_CATEGORIES)}
_AGE_CATEGORY = np.array([_CATEGORY[n] for n in ("seen_1_5", "seen_6_20", "seen_21_plus")])  # AGE_BUCKETS


@dataclass(frozen=True)
class EpisodeCells:
    """Per step t of one episode (``L`` steps), of every cell of the view after it (``(L, V, V)``):
    the memory oracle's hard prediction and region, the cell's category (index into
    `CELL_CATEGORIES`) and the floor's cross-entropy (nats)."""

    memory_pred: np.ndarray
    memory_region: np.ndarray
    category: np.ndarray
    floor: np.ndarray


@dataclass
class CellAnnotations:
    """`EpisodeCells` of every episode of an `EvalSet`, concatenated in row order (episode row
    ``r`` owns steps ``offsets[r]`` onwards), and how the floor was found."""

    cells: EpisodeCells
    offsets: np.ndarray
    floor_method: str  # "replay (exact)" or "analytic lower bound (...)"

    def gather(self, rows: np.ndarray, steps: np.ndarray) -> EpisodeCells:
        """The annotations of predictions ``(rows[i], steps[i])``: ``(N, V, V)`` each."""
        index = self.offsets[np.asarray(rows, dtype=np.int64)] + np.asarray(steps, dtype=np.int64)
        c = self.cells
        return EpisodeCells(c.memory_pred[index], c.memory_region[index], c.category[index], c.floor[index])


def _spawn_rule(meta: dict) -> tuple[float, int]:
    """``(spawn_prob, number of item kinds that spawn)`` of a file's game."""
    return float(meta["env_kwargs"].get("spawn_prob", 0.0)), len(vocabulary().spawn_codes)


def floor_ce(spawnable: np.ndarray, spawned: np.ndarray, p: float, kinds: int) -> np.ndarray:
    """Per cell, the floor's cross-entropy (nats): ``-log(1-p)`` for a spawnable cell that stayed
    empty, ``-log(p/kinds)`` for one that spawned, 0 elsewhere."""
    out = np.zeros(spawnable.shape, dtype=np.float32)
    if p <= 0:
        return out
    out[spawnable & ~spawned] = -np.log1p(-p) if p < 1 else np.inf
    out[spawned] = -np.log(min(p, 1.0) / kinds)
    return out


def _bound(codes: np.ndarray, shifted: np.ndarray, region: np.ndarray, fb: FittedBaselines
           ) -> tuple[np.ndarray, np.ndarray]:
    """The analytic ``(spawnable, spawned)`` of one episode's next views (see the module docstring)."""
    c = fb.codes
    nxt = codes[1:]
    items = ~np.isin(nxt, [c["empty"], c["wall"], c["agent"]])
    was_open = (region == REGION_IN_VIEW) & np.isin(shifted, [c["empty"], c["agent"]])
    spawned = items & was_open
    return (nxt == c["empty"]) | spawned, spawned


def annotate_cells(es: EvalSet, fb: FittedBaselines, floor: str = "auto") -> CellAnnotations:
    """`CellAnnotations` of ``es`` with baselines ``fb`` (their vocabulary and memory oracle).

    ``floor``: ``"replay"`` (exact; `rpg_env.replay.ReplayError` when a stream cannot be replayed
    or does not replay bit for bit), ``"bound"`` (the analytic lower bound), or ``"auto"`` (replay
    when every stream can be replayed, else the bound; a replay that differs is still refused)."""
    from rpg_env.replay import replay_streams, replayable
    from rpg_env.trajectories.reader import TrajectoryFile

    if floor not in FLOOR_MODES:
        raise ValueError(f"floor must be one of {FLOOR_MODES}, got {floor!r}")
    store = es.store()
    p, kinds = _spawn_rule(store.meta)
    method = "analytic lower bound"
    replayed = None
    if floor != "bound":
        with TrajectoryFile(es.path) as tf:
            why = next((w for e in es.episodes if (w := replayable(tf, e)) is not None), None)
        if why is None or floor == "replay":
            replayed = replay_streams(es.path, es.episodes)
            method = "replay (exact)"
        else:
            method = f"analytic lower bound (no replay: {why})"
    c = fb.codes
    out = []
    for row in range(len(store)):
        obs, actions = store.episode(row)
        codes = obs.argmax(1).astype(np.int64)
        memory_pred, region = fb.remember(codes, actions)
        shifted, _, _ = fb.shift(codes[:-1], actions)
        if replayed is not None:
            stream = replayed[es.episodes[row]]
            spawnable, spawned = stream.spawnable, stream.spawned
        else:
            spawnable, spawned = _bound(codes, shifted, region, fb)
        category = np.where(region == REGION_IN_VIEW, _CATEGORY["in_view"],
                            np.where(region == REGION_NEVER_SEEN, _CATEGORY["never_seen"],
                                     _AGE_CATEGORY[np.clip(region - 2, 0, len(AGE_BUCKETS) - 1)]))
        category[spawned] = _CATEGORY["spawned"]
        side = codes.shape[-1]
        centre = np.zeros((side, side), dtype=bool)
        centre[side // 2, side // 2] = True
        other = ((codes[1:] == c["agent"]) | ((shifted == c["agent"]) & (region == REGION_IN_VIEW))) & ~centre
        category[other] = _CATEGORY["other_agent"]
        out.append(EpisodeCells(memory_pred.astype(np.int8), region.astype(np.int8), category.astype(np.int8),
                                floor_ce(spawnable, spawned, p, kinds)))
    lengths = [len(e.floor) for e in out]
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    joined = EpisodeCells(*(np.concatenate([getattr(e, f) for e in out]) for f in
                            ("memory_pred", "memory_region", "category", "floor")))
    return CellAnnotations(joined, offsets, method)
