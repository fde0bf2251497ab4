"""Does one world explain a whole game? Self-consistency from the first frame to the last, and the
world's inhabitants, real or imagined.

`rpg_worldmodel.envs.fidelity` judges frames: a frame can be one the game could show while the game
is not (a dream that walks 40 steps to the right in a 20 x 20 room and never meets the wall shows
only possible frames). These measures judge the whole game, the way a player sees it, on the same
episodes: cell codes ``views`` (N, T, V, V) and the learner's ``actions`` (N, T) or (N, T - 1).

- `room_consistency` (the open room, or any one map known in advance, the reference's): is there a
  start position on the map from which the moves give exactly the wall plane of every frame? A
  move is blocked by the map (the border, a wall) and, where the frame before shows an agent in
  the cell entered, may be blocked by it or not (that agent may have stepped away): both kept.
- `map_consistency` (generated levels, or any map not known in advance): following the moves by
  dead reckoning in the frames themselves (blocked where the frame before shows a wall ahead; an
  agent ahead keeps both outcomes, at most `HYPOTHESES` walks at once), no frame contradicts a wall
  or a floor cell shown before at the same cell, and the floor seen never spans more rows or
  columns than the map's inside (its height and width less the border).
- `inhabitants`: co-players in view per frame and items in view per frame in each turn bin
  (`TURN_BINS`), to set beside the real game's under the same policy.

Each consistency measure gives a `WholeGame`: the share of whole games explained and the share of
frames before the first break, both as `Share` (per-episode hits and totals, so a caller can
bootstrap over games). Real games score exactly 1 on both (tests/test_wm_consistency.py). The
measures read the frames; they never change one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rpg_env.game.constants import vocabulary
from rpg_worldmodel.envs.fidelity import FidelityReference, Share, check_episodes, follow_moves

#: Turn bins of `inhabitants`: ``lo <= turn < hi``, the last one with its end (the game's last turn).
TURN_BINS = ((0, 10), (10, 40), (40, 70), (70, 100))
#: Most dead-reckoned walks `map_consistency` keeps at once (an agent ahead splits a walk in two).
HYPOTHESES = 8


@dataclass(frozen=True, eq=False)
class WholeGame:
    """A whole-game consistency measure: ``games``, 1 of 1 per episode explained in every frame;
    ``frames``, the frames before the first break of all frames; ``broken_at`` (N,) int64, the
    index of each episode's first break (-1: none)."""

    games: Share
    frames: Share
    broken_at: np.ndarray


def whole_game(explained: np.ndarray) -> WholeGame:
    """The `WholeGame` of ``explained`` (N, T) bool: frame t is explained, with every frame before it."""
    n, t_len = explained.shape
    broke = ~explained.all(1)
    broken_at = np.where(broke, (~explained).argmax(1), -1).astype(np.int64)
    before = np.where(broke, broken_at, t_len).astype(np.int64)
    return WholeGame(Share((~broke).astype(np.int64), np.ones(n, dtype=np.int64)),
                     Share(before, np.full(n, t_len, dtype=np.int64)), broken_at)


def one_map(ref: FidelityReference) -> bool:
    """Whether every game of ``ref``'s settings is played on its one map (not on generated levels),
    so `room_consistency` applies."""
    return ref.params.num_levels == 0


def room_consistency(views: np.ndarray, actions: np.ndarray, ref: FidelityReference) -> WholeGame:
    """Whether some start position on ``ref``'s map explains the walls of every frame under the moves
    (`follow_moves` from every cell the learner can stand on, an agent ahead blocking or not): the
    first break is the first frame no position left explains."""
    views, actions = check_episodes(views, actions, ref)
    anywhere = np.tile(ref.standable.reshape(1, -1), (len(views), 1))
    consistent, _, _ = follow_moves(views, actions, ref, anywhere, agent_may_leave=True)
    return whole_game(np.logical_and.accumulate(consistent, axis=1))


def map_consistency(views: np.ndarray, actions: np.ndarray, ref: FidelityReference,
                    hypotheses: int = HYPOTHESES) -> WholeGame:
    """Whether the frames keep one map of their own, of the map's size: a frame breaks when every
    dead-reckoned walk (blocked by a wall the frame before shows ahead; an agent ahead blocks or
    not, both walks kept, at most ``hypotheses``) shows a wall where it showed floor before, or floor
    where it showed a wall, or floor spanning more rows or columns than the map's inside holds.
    ValueError for one-cell views, which show nothing ahead."""
    views, actions = check_episodes(views, actions, ref)
    if ref.radius == 0:
        raise ValueError("map_consistency follows the moves by what each frame shows ahead: it needs "
                         "vision_radius >= 1")
    vocab, r, n = vocabulary(), ref.radius, len(views)
    acts = actions[:, : views.shape[1] - 1]
    deltas = ref.deltas[acts]
    frames = np.arange(acts.shape[1])[None]
    ahead = views[np.arange(n)[:, None], frames, r + deltas[..., 0], r + deltas[..., 1]]
    explained = np.zeros(views.shape[:2], dtype=bool)
    for i in range(n):
        first = _first_contradiction(views[i] == vocab.wall, deltas[i], ahead[i], ref, hypotheses)
        explained[i, :first] = True
    return whole_game(explained)


def _first_contradiction(walls: np.ndarray, deltas: np.ndarray, ahead: np.ndarray, ref: FidelityReference,
                         hypotheses: int) -> int:
    """`map_consistency` of one episode: the first frame of ``walls`` (T, V, V) bool that every walk
    contradicts (T: none). A walk is (row, column of its view's corner on a canvas, the canvas's
    cells seen: -1 never, 1 wall, 0 floor, the floor's bounds); its stay-branch comes first, so a
    real game's walk is always the first and never dropped."""
    vocab = vocabulary()
    t_len, side = walls.shape[:2]
    size = 2 * t_len + side
    inside = np.array([ref.params.height - 2, ref.params.width - 2])
    big = np.iinfo(np.int64).max // 4
    walks = [(t_len, t_len, np.full((size, size), -1, dtype=np.int8), np.array([big, -big, big, -big]))]
    for t in range(t_len):
        if t:
            kind, step = ahead[t - 1], deltas[t - 1]
            outcomes = [(0, 0)] if kind == vocab.wall else [(0, 0), step] if kind == vocab.agent else [step]
            walks = [(row + dr, col + dc, seen if k == 0 else seen.copy(), bounds)
                     for row, col, seen, bounds in walks for k, (dr, dc) in enumerate(outcomes)]
        frame = walls[t].astype(np.int8)
        floor_rows, floor_cols = np.flatnonzero(~walls[t].all(1)), np.flatnonzero(~walls[t].all(0))
        kept = []
        for row, col, seen, bounds in walks:
            window = seen[row : row + side, col : col + side]
            if ((window >= 0) & (window != frame)).any():
                continue
            if floor_rows.size:
                bounds = np.array([min(bounds[0], row + floor_rows[0]), max(bounds[1], row + floor_rows[-1]),
                                   min(bounds[2], col + floor_cols[0]), max(bounds[3], col + floor_cols[-1])])
                if (bounds[1::2] - bounds[::2] + 1 > inside).any():
                    continue
            window[...] = frame
            kept.append((row, col, seen, bounds))
            if len(kept) == hypotheses:
                break
        if not kept:
            return t
        walks = kept
    return t_len


def inhabitants(views: np.ndarray, ref: FidelityReference, first_turn: int = 0) -> dict[str, Share]:
    """Who and what is in view: ``co_players``, the other agents in view per frame (hits: agents
    seen, total: frames), and ``items_turns_LO_HI`` per bin of `TURN_BINS`, the items (pick-up kinds)
    in view per frame of that bin's turns; view t of ``views`` (N, T, V, V) is turn ``first_turn + t``."""
    views, _ = check_episodes(views, None, ref)
    vocab, r = vocabulary(), ref.radius
    n, t_len = views.shape[:2]
    agents = (views == vocab.agent).sum((-1, -2)) - (views[..., r, r] == vocab.agent)
    out = {"co_players": Share(agents.sum(1).astype(np.int64), np.full(n, t_len, dtype=np.int64))}
    items = np.isin(views, ref.items).sum((-1, -2))
    turns = first_turn + np.arange(t_len)
    for lo, hi in TURN_BINS:
        inside = (turns >= lo) & ((turns <= hi) if (lo, hi) == TURN_BINS[-1] else (turns < hi))
        out[f"items_turns_{lo}_{hi}"] = Share(items[:, inside].sum(1).astype(np.int64),
                                              np.full(n, int(inside.sum()), dtype=np.int64))
    return out


#: What `whole_game_shares` gives, in order (the room measures only where `one_map`).
WHOLE_GAME_MEASURES = ("room_games", "room_frames", "map_games", "map_frames")
INHABITANT_MEASURES = ("co_players", *(f"items_turns_{lo}_{hi}" for lo, hi in TURN_BINS))


def whole_game_shares(views: np.ndarray, actions: np.ndarray, ref: FidelityReference,
                      first_turn: int = 0) -> dict[str, Share]:
    """`WHOLE_GAME_MEASURES` (``room_*`` only where `one_map`; ``map_*`` only with views wider than a
    cell) and `INHABITANT_MEASURES` of a batch of episodes, each a `Share`."""
    out: dict[str, Share] = {}
    if one_map(ref):
        room = room_consistency(views, actions, ref)
        out |= {"room_games": room.games, "room_frames": room.frames}
    if ref.radius:
        kept = map_consistency(views, actions, ref)
        out |= {"map_games": kept.games, "map_frames": kept.frames}
    return out | inhabitants(views, ref, first_turn)


def whole_game_status(views: np.ndarray, actions: np.ndarray, ref: FidelityReference,
                      first_turn: int = 0) -> str:
    """One episode's consistency so far as a status line: ``room ok`` or ``room broken at turn k``
    (`room_consistency`, where `one_map`), else ``map ok`` / ``map broken at turn k``
    (`map_consistency`); ``views`` (T, V, V), ``actions`` (T - 1,), view 0 at turn ``first_turn``."""
    views, actions = np.asarray(views)[None], np.asarray(actions, dtype=np.int64).reshape(1, -1)
    name, measure = ("room", room_consistency) if one_map(ref) else ("map", map_consistency)
    if not one_map(ref) and ref.radius == 0:
        return "map not judged (one-cell views)"
    broken = int(measure(views, actions, ref).broken_at[0])
    return f"{name} ok" if broken < 0 else f"{name} broken at turn {first_turn + broken}"
