"""Could the game have shown these episodes? Four measurements of a game's frames, real or imagined.

An imagined game (``TreasurehuntImagined-v0``) can drift from the game it learned in ways that a
check of single cells cannot see: a wall in the open field, a border that is gone when the agent
walks back, an item that vanishes while out of view. Each function here takes whole episodes as
egocentric cell codes ``views`` (N, T, V, V) int (a code is the channel index of the one-hot view,
the game's vocabulary order, `rpg_env.game.constants`) and the learner's ``actions`` (N, T) int
(action t is taken in view t and leads to view t + 1; a last column is ignored, so (N, T - 1) works
too), and measures against a `FidelityReference`, what is known of the game, derived from the game
itself (its map, its view function, its moves):

- `frame_validity`: the share of frames the game could show at all: the walls are the game's view
  of the map at some position, the centre is the learner, at most ``num_agents - 1`` other agents,
  and only kinds the game can show.
- `geometric_consistency`: the share of frames whose walls are the map's at the position the moves
  imply since the episode began (bumps into walls and into agents included).
- `item_persistence`: of the items seen that come back into view after their cell left it, the share
  still there (only a co-player can take an item out of view).
- `spawn_rate`: new items per empty cell per turn over cells in view on both turns (the game's
  ``spawn_prob``).
- `walls_kept`: the share of frames whose walls agree with what the episode showed before at the
  same cells (the map it keeps, in its own geometry).

What an ideal dream reaches from the real start is measured beside a dream and the real game
(`rpg_worldmodel.envs.whole_games.consistency_ceiling`).

Every figure is a `Share`: hits and totals per episode, so a caller can bootstrap over episodes;
`fidelity` computes all four. The same functions run on real games, where validity and consistency
are exactly 1 and the spawn rate is the game's, which is what makes an imagined game's figures mean
something.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rpg_env.envs.treasurehunt import TreasurehuntEnv
from rpg_env.game.constants import vocabulary
from rpg_env.game.world import WorldBatch, WorldParams

#: The conditions of `frame_validity`, in the order they are checked.
CONDITIONS = ("walls", "centre", "agents", "kinds")


@dataclass(frozen=True, eq=False)  # arrays: compared by identity
class Share:
    """``hits`` of ``total`` per episode, both ``(N,)`` int64 (frames, returns or cells)."""

    hits: np.ndarray
    total: np.ndarray

    @property
    def value(self) -> float:
        """The pooled share over all episodes (NaN when nothing was counted)."""
        total = int(self.total.sum())
        return float(self.hits.sum() / total) if total else float("nan")

    @property
    def per_episode(self) -> np.ndarray:
        """``(N,)`` float64 share of each episode (NaN where it counted nothing)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.hits / np.where(self.total > 0, self.total, np.nan)

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "hits": int(self.hits.sum()), "total": int(self.total.sum())}


@dataclass(frozen=True, eq=False)
class FidelityReference:
    """What is known of one game, built once from its settings (`for_game`).

    Map cells are flat indices ``p = row * W + col`` of the ``H x W`` map.

    Attributes:
        params: the game's rules.
        grid: ``(H, W)`` int8 the map at reset (walls never change; items and agents do).
        standable: ``(H, W)`` bool, cells the learner can stand on (passable kinds and agents).
        mask_ids: ``(H * W,)`` int64, the id of the game's egocentric wall mask at each cell
            (ids index ``masks``); -2 where the learner cannot stand.
        masks: ``(M, V * V)`` bool, the distinct wall masks the game shows, row-major.
        mask_keys: packed bits of each mask (bytes) -> its id.
        moves: ``(A, H * W)`` int64, the cell an action leads to from each cell on the bare map
            (itself when the target is off the map or cannot be stood on: a bump).
        deltas: ``(A, 2)`` int64 (row, column) move of each action.
        shown: ``(K,)`` bool, the kinds a frame of this game can hold.
        items: the pick-up kinds' codes.
    """

    params: WorldParams
    grid: np.ndarray
    standable: np.ndarray
    mask_ids: np.ndarray
    masks: np.ndarray
    mask_keys: dict[bytes, int]
    moves: np.ndarray
    deltas: np.ndarray
    shown: np.ndarray
    items: tuple[int, ...]

    @classmethod
    def for_game(cls, env_kwargs: dict[str, Any], layout: str | list[str] | None = None,
                 channel_names: tuple[str, ...] | list[str] | None = None,
                 seed: int = 0) -> FidelityReference:
        """The reference of the game ``TreasurehuntEnv(**env_kwargs)`` (e.g. a checkpoint's or a
        trajectory file's ``env_kwargs``): its map after ``reset(seed=seed)``, or from ``layout`` (a
        text map) when given. One map per reference: a game whose map changes between episodes needs
        one per map. ``channel_names``: the frames' channel order, which must be the vocabulary's."""
        vocab = vocabulary()
        if channel_names is not None and tuple(channel_names) != vocab.cell_names:
            raise ValueError(f"frames with channels {tuple(channel_names)} do not follow the game's "
                             f"vocabulary {vocab.cell_names}; reorder their codes first")
        # Who the co-players are and how frames are drawn do not change the map.
        env = TreasurehuntEnv(**{**env_kwargs, "obs_mode": "full", "co_policy": "random",
                                 "render_mode": None})
        full, _ = env.reset(seed=seed, options=None if layout is None else {"layout": layout})
        env.close()
        grid = full[: vocab.num_kinds].argmax(0).astype(np.int8)
        standable = vocab.passable[grid] | (grid == vocab.agent)
        masks_at = _wall_masks(env.params, grid, np.flatnonzero(standable))
        masks, inverse = np.unique(masks_at, axis=0, return_inverse=True)
        mask_ids = np.full(grid.size, -2, dtype=np.int64)
        mask_ids[np.flatnonzero(standable)] = inverse.reshape(-1)
        keys = {key: i for i, key in enumerate(_keys(masks))}
        shown = np.zeros(vocab.num_kinds, dtype=bool)
        shown[[vocab.empty, vocab.wall, vocab.agent, *vocab.spawn_codes, *np.unique(grid)]] = True
        return cls(env.params, grid, standable, mask_ids, masks, keys,
                   _bare_moves(standable, vocab.action_deltas), vocab.action_deltas, shown,
                   tuple(vocab.pickup_codes))

    @property
    def radius(self) -> int:
        return self.params.vision_radius

    def mask_id(self, views: np.ndarray) -> np.ndarray:
        """``(..., V, V)`` codes -> ``(...)`` int64 id of each frame's wall mask (-1: none the game shows)."""
        walls = views.reshape(*views.shape[:-2], -1) == vocabulary().wall
        lookup = self.mask_keys.get
        return np.array([lookup(k, -1) for k in _keys(walls.reshape(-1, walls.shape[-1]))],
                        dtype=np.int64).reshape(views.shape[:-2])

    def bare_frames(self, cells: np.ndarray) -> np.ndarray:
        """Codes (..., V, V) int64 of the bare map seen from flat ``cells`` (...): walls, the learner."""
        vocab, side = vocabulary(), self.params.view_size
        walls = self.masks[self.mask_ids[np.asarray(cells)]].reshape(*np.shape(cells), side, side)
        frames = np.where(walls, vocab.wall, vocab.empty).astype(np.int64)
        frames[..., self.radius, self.radius] = vocab.agent
        return frames


def _wall_masks(params: WorldParams, grid: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """``(P, V * V)`` bool: walls in the game's own view (`WorldBatch.views`, with its padding)
    of the learner standing on each map cell of ``cells`` (flat), one world per cell."""
    vocab = vocabulary()
    bare = np.where(grid == vocab.wall, vocab.wall, vocab.empty).astype(np.int8)
    world = WorldBatch(params, max(len(cells), 1))
    for i, (row, col) in enumerate(zip(*np.divmod(cells, params.width), strict=True)):
        world.load_layout(i, bare, np.tile([row, col], (params.num_agents, 1)))
    return world.views()[: len(cells), 0] == vocab.wall


def _keys(masks: np.ndarray) -> list[bytes]:
    """``(M, B)`` bool -> M hashable keys (the packed bits' bytes)."""
    packed = np.ascontiguousarray(np.packbits(masks, axis=-1))
    return [row.tobytes() for row in packed]


def _bare_moves(standable: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """``(A, H * W)``: where each action leads from each cell when only the map can block it."""
    height, width = standable.shape
    rows, cols = np.divmod(np.arange(height * width), width)
    to_row, to_col = rows + deltas[:, :1], cols + deltas[:, 1:]
    inside = (to_row >= 0) & (to_row < height) & (to_col >= 0) & (to_col < width)
    target = np.where(inside, to_row * width + to_col, 0)
    return np.where(inside & standable.reshape(-1)[target], target, np.arange(height * width))


def check_episodes(views: np.ndarray, actions: np.ndarray | None, ref: FidelityReference) -> tuple:
    """``views`` as cell codes (N, T, V, V) and ``actions`` (N, T) or (N, T - 1) int64 in the game's
    range (None: views only), or ValueError saying what is wrong."""
    views = np.asarray(views)
    side = ref.params.view_size
    if views.ndim != 4 or views.shape[-2:] != (side, side):
        raise ValueError(f"views must be cell codes (N, T, {side}, {side}), got shape {views.shape}")
    if actions is None:
        return views, None
    actions = np.asarray(actions)
    n, t = views.shape[:2]
    if actions.shape not in ((n, t), (n, t - 1)):
        raise ValueError(f"actions must be (N, T) = {(n, t)} or (N, T - 1), got {actions.shape}")
    if actions.size and (actions.min() < 0 or actions.max() >= len(ref.deltas)):
        raise ValueError(f"actions must be in 0..{len(ref.deltas) - 1}")
    return views, actions.astype(np.int64)


# ----------------------------------------------------------------------------- single frames
@dataclass(frozen=True, eq=False)
class Validity:
    """`frame_validity`: ``share`` of valid frames, ``valid`` ``(N, T)`` bool and ``failed``: the
    number of frames failing each condition of `CONDITIONS` (a frame may fail several)."""

    share: Share
    valid: np.ndarray
    failed: dict[str, int]


def frame_validity(views: np.ndarray, ref: FidelityReference) -> Validity:
    """The share of frames ``views`` (N, T, V, V) the game could show. A frame is valid iff

    - ``walls``: its wall cells are exactly the game's view of the walls at some cell of the map
      where the learner can stand (outside the map reads as wall, as the game pads it);
    - ``centre``: the centre cell is an agent (the learner);
    - ``agents``: at most ``num_agents - 1`` other cells hold an agent;
    - ``kinds``: every cell holds a kind the game can show (on its map at reset, spawned, empty,
      wall or agent).
    """
    views, _ = check_episodes(views, None, ref)
    vocab, r = vocabulary(), ref.radius
    known = (views >= 0) & (views < len(ref.shown))
    is_agent = views == vocab.agent
    passed = {
        "walls": ref.mask_id(views) >= 0,
        "centre": is_agent[..., r, r],
        "agents": is_agent.sum((-1, -2)) - is_agent[..., r, r] <= ref.params.num_agents - 1,
        "kinds": (known & ref.shown[np.where(known, views, 0)]).all((-1, -2)),
    }
    valid = np.logical_and.reduce([passed[c] for c in CONDITIONS])
    return Validity(Share(valid.sum(1), np.full(len(views), views.shape[1], dtype=np.int64)), valid,
                    {c: int((~passed[c]).sum()) for c in CONDITIONS})


def wall_breaks(views: np.ndarray, actions: np.ndarray, ref: FidelityReference) -> dict[str, int]:
    """Where impossible wall layouts begin. A break is a frame whose walls the game could not show
    after one whose walls it could. ``"carried"`` counts the breaks whose walls differ from the frame
    before in a cell both frames show (the frame before moved by the action, unless the cell it
    enters cannot be entered); ``"entered"`` the breaks whose walls went wrong only in the cells
    the move brought into view."""
    views, actions = check_episodes(views, actions, ref)
    wall = vocabulary().wall
    ok = ref.mask_id(views) >= 0
    breaks = ok[:, :-1] & ~ok[:, 1:]
    # the frames' own moves; a one-cell view cannot see what would block one, and its only cell
    # is compared with the frame before's, as if the learner stayed
    shift = np.diff(frame_positions(views, actions, ref), axis=1) * (ref.radius > 0)
    before, after, both = _carried_cells(views, shift)
    changed = (both & ((before == wall) != (after == wall))).any(-1)
    return {"entered": int((breaks & ~changed).sum()), "carried": int((breaks & changed).sum())}


# ----------------------------------------------------------------------------- positions
@dataclass(frozen=True, eq=False)
class Track:
    """`geometric_consistency`: ``share`` of consistent frames, ``consistent`` ``(N, T)`` bool and
    ``positions`` ``(N, T, 2)`` int64 (row, column) of the learner the moves imply (-1 where
    several cells remain possible: only without a known start)."""

    share: Share
    consistent: np.ndarray
    positions: np.ndarray


def geometric_consistency(views: np.ndarray, actions: np.ndarray, ref: FidelityReference,
                          start: np.ndarray | None = None) -> Track:
    """The share of frames whose walls are the map's at the position the moves imply.

    From ``start`` ``(N, 2)`` (row, column of the learner in view 0; e.g. the real position where
    an imagined episode begins) or, without it, from every cell whose walls match view 0, each
    action moves every possible position by the game's delta; a move is blocked (the learner
    stays) when the map cannot be stood on there (wall, off the map) or when the view before the
    move shows an agent in the target cell (the learner moves first: that agent is still there).
    A frame is consistent when its wall mask is the map's at some possible position; those that
    match then remain possible (a singleton with a start). Inconsistent frames leave the possible
    positions as the moves put them, so a dream that lost a bump stays wrong from then on.
    """
    views, actions = check_episodes(views, actions, ref)
    n, t_len = views.shape[:2]
    possible = np.zeros((n, ref.mask_ids.size), dtype=bool)
    if start is not None:
        possible[np.arange(n), _start_cells(start, n, ref)] = True
    else:
        possible[:] = ref.standable.reshape(1, -1)
    consistent, flat, _ = follow_moves(views, actions, ref, possible)
    rc = np.stack(np.divmod(flat, ref.params.width), -1)
    positions = np.where(flat[..., None] >= 0, rc, -1)
    return Track(Share(consistent.sum(1), np.full(n, t_len, dtype=np.int64)), consistent, positions)


def follow_moves(views: np.ndarray, actions: np.ndarray, ref: FidelityReference, possible: np.ndarray,
                 agent_may_leave: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`geometric_consistency`'s walk from the ``possible`` (N, H * W) bool positions of view 0
    (views (N, T, V, V) and actions checked): ``consistent`` (N, T) bool, the flat cell (N, T)
    where one position remains (else -1), and the positions still possible after the last view
    (N, H * W) bool. Up to the first inconsistent frame the possible positions are exactly those
    that explain every frame so far. ``agent_may_leave``: a move into an agent the view shows may
    also succeed (that agent stepped away first), both outcomes kept."""
    n, t_len = views.shape[:2]
    ids, cells = ref.mask_id(views), ref.mask_ids[None]
    blocked = agent_ahead(views, actions, ref)
    consistent = np.zeros((n, t_len), dtype=bool)
    flat = np.full((n, t_len), -1, dtype=np.int64)
    stay = np.arange(ref.mask_ids.size)
    for t in range(t_len):
        if t:
            dest = np.where(blocked[:, t - 1, None], stay, ref.moves[actions[:, t - 1]])
            rows, cols = np.nonzero(possible)
            possible = np.zeros_like(possible)
            possible[rows, dest[rows, cols]] = True
            if agent_may_leave:
                possible[rows, ref.moves[actions[rows, t - 1], cols]] = True
        matching = possible & (cells == ids[:, t, None]) & (ids[:, t, None] >= 0)
        consistent[:, t] = matching.any(1)
        possible = np.where(consistent[:, t, None], matching, possible)
        flat[:, t] = np.where(possible.sum(1) == 1, possible.argmax(1), -1)
    return consistent, flat, possible


def _start_cells(start: np.ndarray, n: int, ref: FidelityReference) -> np.ndarray:
    """``(N, 2)`` (row, column) -> ``(N,)`` flat map cells, or ValueError."""
    start = np.asarray(start)
    height, width = ref.standable.shape
    inside = (start.shape == (n, 2) and start.dtype.kind in "iu" and (start >= 0).all()
              and (start < [height, width]).all())
    if not inside or not ref.standable[start[:, 0], start[:, 1]].all():
        raise ValueError(f"start must be ({n}, 2) int (row, column) of map cells the learner can stand "
                         f"on, one per episode; got {start.tolist()}")
    return start[:, 0].astype(np.int64) * width + start[:, 1]


def _kind_ahead(views: np.ndarray, actions: np.ndarray, ref: FidelityReference) -> np.ndarray | None:
    """``(N, T - 1)``: the kind view t shows in the cell action t moves into; None for a one-cell
    view, which shows no neighbour (nothing seen can block)."""
    r, n, t_len = ref.radius, *views.shape[:2]
    if r == 0:
        return None
    acts = actions[:, : t_len - 1]
    dr, dc = ref.deltas[acts, 0] + r, ref.deltas[acts, 1] + r
    return views[np.arange(n)[:, None], np.arange(t_len - 1)[None], dr, dc]


def agent_ahead(views: np.ndarray, actions: np.ndarray, ref: FidelityReference) -> np.ndarray:
    """``(N, T - 1)`` bool: view t shows an agent in the cell action t moves into."""
    ahead = _kind_ahead(views, actions, ref)
    if ahead is None:
        return np.zeros((len(views), views.shape[1] - 1), dtype=bool)
    return ahead == vocabulary().agent


def frame_positions(views: np.ndarray, actions: np.ndarray, ref: FidelityReference) -> np.ndarray:
    """``(N, T, 2)`` int64 (row, column) of the learner by dead reckoning in the frames themselves:
    each action moves it by the game's delta unless the frame before the move shows, in the cell
    it enters, a kind that cannot be entered (a wall, an agent). The first frame is at
    ``(T, T)``, so no position is negative. In a real game these are its true moves; an imagined
    game is followed by its own geometry, so its items are compared with the cells it showed,
    whatever map it keeps (by the real map's moves, a dream that walked where the real map has a
    wall would be compared with the wrong cells)."""
    views, actions = check_episodes(views, actions, ref)
    n, t_len = views.shape[:2]
    delta = ref.deltas[actions[:, : t_len - 1]]  # (N, T - 1, 2)
    ahead = _kind_ahead(views, actions, ref)
    if ahead is not None:
        delta = delta * vocabulary().passable[ahead][..., None]
    moves = np.concatenate([np.zeros((n, 1, 2), dtype=np.int64), delta.astype(np.int64)], 1)
    return t_len + moves.cumsum(1)


# ----------------------------------------------------------------------------- items
@dataclass(frozen=True, eq=False)
class Persistence:
    """`item_persistence`: ``share`` of returns where the item is still there, and every return
    as ``returns`` ``(R, 6)`` int64 rows (episode, last turn seen, turn back, row, column, kind)
    with ``persisted`` ``(R,)`` bool."""

    share: Share
    returns: np.ndarray
    persisted: np.ndarray


def _world_cells(positions: np.ndarray, ref: FidelityReference) -> tuple[np.ndarray, int, int]:
    """``(N, T, V * V)`` int64 cell of each view cell on a canvas that holds every view (row-major:
    the map padded by ``r`` cells, or larger where the positions go further), -1 for frames without
    a known position; the canvas's size and width."""
    r, side = ref.radius, ref.params.view_size
    known = positions[..., 0] >= 0
    height = max(ref.params.height, int(positions[..., 0][known].max(initial=0)) + 1) + 2 * r
    width = max(ref.params.width, int(positions[..., 1][known].max(initial=0)) + 1) + 2 * r
    dr, dc = np.divmod(np.arange(side * side), side)  # offsets from the view's corner
    rows = positions[..., :1] + dr  # padded row = map row - r + dr + r
    cols = positions[..., 1:] + dc
    return np.where(positions[..., :1] >= 0, rows * width + cols, -1), height * width, width


def item_persistence(views: np.ndarray, positions: np.ndarray, ref: FidelityReference) -> Persistence:
    """Of the items seen that come back into view after their cell left it, the share still there.

    ``positions`` ``(N, T, 2)``: the learner's (row, column) in each view (`frame_positions`, the
    frames' own moves; `Track.positions`, the real map's; or the real ones; -1 rows are frames
    skipped). A return is a view where a
    cell is seen that was not seen in the view before but was seen earlier holding a pick-up kind;
    it persisted when the cell holds the same kind again. The learner cannot take what it does not
    see, so a real game loses an item only to a co-player (or never, played alone).
    """
    views, _ = check_episodes(views, None, ref)
    n, t_len = views.shape[:2]
    cells, size, width = _world_cells(np.asarray(positions, dtype=np.int64), ref)
    last_kind = np.full((n, size), -1, dtype=np.int64)
    last_seen = np.full((n, size), -1, dtype=np.int64)
    codes = views.reshape(n, t_len, -1).astype(np.int64)
    found = []
    for t in range(t_len):
        rows = np.flatnonzero(cells[:, t, 0] >= 0)
        idx, kind = cells[rows, t], codes[rows, t]
        seen, before = last_seen[rows[:, None], idx], last_kind[rows[:, None], idx]
        back = (seen >= 0) & (seen < t - 1) & np.isin(before, ref.items)
        ep, cell = np.nonzero(back)
        found.append(np.stack([rows[ep], seen[ep, cell], np.full(len(ep), t), idx[ep, cell],
                               before[ep, cell], kind[ep, cell]], 1))
        last_seen[rows[:, None], idx], last_kind[rows[:, None], idx] = t, kind
    found = np.concatenate(found) if found else np.zeros((0, 6), dtype=np.int64)
    persisted = found[:, 5] == found[:, 4]
    row, col = np.divmod(found[:, 3], width)
    returns = np.stack([found[:, 0], found[:, 1], found[:, 2], row - ref.radius, col - ref.radius,
                        found[:, 4]], 1)
    share = Share(np.bincount(found[persisted, 0], minlength=n), np.bincount(found[:, 0], minlength=n))
    return Persistence(share, returns, persisted)


def spawn_rate(views: np.ndarray, positions: np.ndarray, ref: FidelityReference) -> Share:
    """New items per empty cell per turn, the game's ``spawn_prob`` in a real game.

    Over the cells in view in both views t - 1 and t (map cells from ``positions`` ``(N, T, 2)``,
    frames with -1 skipped): a trial is a cell empty in view t - 1 that holds no agent in view t
    (an agent that entered it left no empty cell for the spawn, which comes after the moves); a hit
    is a trial that holds a pick-up kind in view t.
    """
    views, _ = check_episodes(views, None, ref)
    positions = np.asarray(positions, dtype=np.int64)
    vocab = vocabulary()
    known = (positions[:, 1:, 0] >= 0) & (positions[:, :-1, 0] >= 0)
    before, after, both = _carried_cells(views, positions[:, 1:] - positions[:, :-1])
    both &= known[..., None]
    trials = both & (before == vocab.empty) & (after != vocab.agent)
    hits = trials & np.isin(after, ref.items)
    return Share(hits.sum((1, 2)), trials.sum((1, 2)))


def walls_kept(views: np.ndarray, positions: np.ndarray, ref: FidelityReference) -> Share:
    """Of the frames that show a cell seen before, the share whose walls all agree with the last
    sighting of their cells in the same episode: a cell seen as wall is still wall, one seen open is
    still open (the game never moves a wall).

    ``positions`` ``(N, T, 2)`` as for `item_persistence`: with the frames' own moves
    (`frame_positions`) this judges the map a dream keeps in its own geometry, whatever that is;
    `geometric_consistency` judges the geometry against the game's map. A real game scores 1.
    """
    views, _ = check_episodes(views, None, ref)
    n, t_len = views.shape[:2]
    cells, size, _ = _world_cells(np.asarray(positions, dtype=np.int64), ref)
    walls = (views == vocabulary().wall).reshape(n, t_len, -1).astype(np.int8)
    last = np.full((n, size), -1, dtype=np.int8)  # -1: not seen, else 1 wall, 0 open
    counted, broken = np.zeros((n, t_len), dtype=bool), np.zeros((n, t_len), dtype=bool)
    for t in range(t_len):
        rows = np.flatnonzero(cells[:, t, 0] >= 0)
        idx, now = cells[rows, t], walls[rows, t]
        before = last[rows[:, None], idx]
        counted[rows, t] = (before >= 0).any(1)
        broken[rows, t] = ((before >= 0) & (before != now)).any(1)
        last[rows[:, None], idx] = now
    return Share((counted & ~broken).sum(1), counted.sum(1))


def _carried_cells(views: np.ndarray, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each view t + 1 beside what view t showed of the same cells, the learner having moved by
    ``shift`` (N, T - 1, 2) between them: ``before``, ``after`` (N, T - 1, V * V) codes (cell (i, j)
    of view t + 1 and cell (i, j) + shift of view t) and ``both`` (N, T - 1, V * V) bool, where
    view t showed that cell too."""
    n, side = len(views), views.shape[-1]
    i, j = np.divmod(np.arange(side * side), side)
    pi, pj = i + shift[..., :1], j + shift[..., 1:]  # (N, T - 1, V * V)
    both = (pi >= 0) & (pi < side) & (pj >= 0) & (pj < side)
    before = views[:, :-1].reshape(n, -1, side * side)
    before = np.take_along_axis(before, np.clip(pi, 0, side - 1) * side + np.clip(pj, 0, side - 1), -1)
    return before, views[:, 1:].reshape(n, -1, side * side), both


# ----------------------------------------------------------------------------- all four
def fidelity(views: np.ndarray, actions: np.ndarray, ref: FidelityReference,
             start: np.ndarray | None = None, positions: np.ndarray | None = None) -> dict[str, Any]:
    """All four measurements of a batch of episodes, and `walls_kept`: ``{name: Share}`` (per-episode
    hits and totals) and ``"failed"``: frames failing each validity condition. The item and
    walls-kept measurements use the ``positions`` given (N, T, 2), else the frames' own moves
    (`frame_positions`)."""
    validity = frame_validity(views, ref)
    track = geometric_consistency(views, actions, ref, start)
    where = frame_positions(views, actions, ref) if positions is None else np.asarray(positions)
    return {"frame_validity": validity.share, "geometric_consistency": track.share,
            "item_persistence": item_persistence(views, where, ref).share,
            "spawn_rate": spawn_rate(views, where, ref), "walls_kept": walls_kept(views, where, ref),
            "failed": validity.failed}
