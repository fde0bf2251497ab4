"""The fidelity measurements (`rpg_worldmodel.envs.fidelity`): exact on real games, and every kind of
corrupted frame is caught by the measurement it breaks, by exactly what it breaks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rpg_env
from rpg_env.envs.treasurehunt import TreasurehuntEnv
from rpg_env.game.constants import vocabulary
from rpg_env.policies.registry import make_policy
from rpg_worldmodel.envs.fidelity import (
    FidelityReference,
    fidelity,
    frame_positions,
    frame_validity,
    geometric_consistency,
    item_persistence,
    spawn_rate,
    wall_breaks,
    walls_kept,
)
from rpg_worldmodel.envs.whole_games import consistency_ceiling

RULES = {"height": 20, "width": 20, "vision_radius": 4, "num_agents": 2, "spawn_prob": 0.01, "max_turns": 100}
VOCAB = vocabulary()
LAYOUT = [  # an interior wall: a bar and a pillar that the border rule of a generated map never gives
    "############",
    "#..........#",
    "#..........#",
    "#...#####..#",
    "#..........#",
    "#.A........#",
    "#......#...#",
    "#......#...#",
    "#.......B..#",
    "#..........#",
    "#..........#",
    "############",
]


def play_real(learner: str, co_policy: str, seed: int, num_envs: int = 4, **rules):
    """Whole real episodes: codes (N, T + 1, V, V), actions (N, T), positions (N, T + 1, A, 2)."""
    venv = gym.make_vec(rpg_env.ENV_ID, num_envs=num_envs, co_policy=co_policy, **{**RULES, **rules})
    obs, info = venv.reset(seed=seed)
    policy = make_policy(learner)
    policy.seed(np.random.default_rng(seed))
    views, actions, positions = [obs.argmax(1)], [], [info["positions"]]
    for _ in range(venv.unwrapped.params.max_turns):
        action = policy.act(obs)
        obs, _, _, _, info = venv.step(action)
        views.append(obs.argmax(1))
        actions.append(action)
        positions.append(info["positions"])
    venv.close()
    return np.stack(views, 1), np.stack(actions, 1), np.stack(positions, 1)


@pytest.fixture(scope="module")
def reference():
    return FidelityReference.for_game(RULES, channel_names=VOCAB.cell_names)


@pytest.fixture(scope="module")
def games():
    """Greedy and random learners beside greedy and random co-players, 4 episodes each."""
    return {(learner, co): play_real(learner, co, seed)
            for seed, (learner, co) in enumerate([("greedy", "greedy"), ("greedy", "random"),
                                                  ("random", "greedy"), ("random", "random")])}


def test_the_reference_derives_every_wall_mask_from_the_games_own_view(reference):
    assert reference.standable.sum() == 18 * 18  # the generated map: a border of walls
    assert len(reference.masks) == 9 * 9  # 0..4 wall rows above or below (or none), same for columns
    assert reference.mask_id(np.zeros((1, 9, 9), dtype=np.int64))[0] >= 0  # the open field
    corner = reference.masks[reference.mask_ids[1 * 20 + 1]].reshape(9, 9)
    assert corner[:4].all() and corner[:, :4].all() and not corner[4:, 4:].any()  # padding reads as wall


@pytest.mark.parametrize("players", [("greedy", "greedy"), ("greedy", "random"),
                                     ("random", "greedy"), ("random", "random")])
def test_real_games_are_valid_and_consistent_exactly(games, reference, players):
    views, actions, positions = games[players]
    learner = positions[:, :, 0]
    validity = frame_validity(views, reference)
    assert validity.share.value == 1.0 and set(validity.failed.values()) == {0}
    known = geometric_consistency(views, actions, reference, start=learner[:, 0])
    assert known.share.value == 1.0
    np.testing.assert_array_equal(known.positions, learner)  # bumps into walls and agents included
    unknown = geometric_consistency(views, actions, reference)
    assert unknown.share.value == 1.0
    located = unknown.positions[..., 0] >= 0
    np.testing.assert_array_equal(unknown.positions[located], learner[located])
    assert located[:, -1].any()  # the walls seen pin the learner down


def test_real_spawn_rate_is_the_games_spawn_prob(games, reference):
    shares = [spawn_rate(views, positions[:, :, 0], reference) for views, _, positions in games.values()]
    hits, trials = sum(int(s.hits.sum()) for s in shares), sum(int(s.total.sum()) for s in shares)
    p = RULES["spawn_prob"]
    assert trials > 50_000
    assert abs(hits / trials - p) < 4 * np.sqrt(p * (1 - p) / trials)  # 4 binomial standard errors
    dense = FidelityReference.for_game({**RULES, "spawn_prob": 0.2})
    views, _, positions = play_real("random", "random", 7, num_envs=2, spawn_prob=0.2)
    rate = spawn_rate(views, positions[:, :, 0], dense)
    assert abs(rate.value - 0.2) < 4 * np.sqrt(0.2 * 0.8 / rate.total.sum())


def test_real_items_vanish_only_where_a_co_player_went(games, reference):
    lost_somewhere = False
    for views, _, positions in games.values():
        found = item_persistence(views, positions[:, :, 0], reference)
        assert found.share.total.sum() > 100 and found.share.value < 1.0
        for episode, seen, back, row, col, _ in found.returns[~found.persisted]:
            co_player = positions[episode, seen + 1 : back + 1, 1]
            assert ((co_player == [row, col]).all(-1)).any()  # it went there while the cell was out of view
            lost_somewhere = True
    assert lost_somewhere
    alone = FidelityReference.for_game({**RULES, "num_agents": 1})
    views, _, positions = play_real("random", "random", 3, num_agents=1)
    found = item_persistence(views, positions[:, :, 0], alone)
    assert found.share.total.sum() > 20 and found.share.value == 1.0  # nobody else takes items


def test_fidelity_returns_all_four_per_episode(games, reference):
    views, actions, positions = games[("greedy", "random")]
    implied = fidelity(views, actions, reference, start=positions[:, 0, 0])
    given = fidelity(views, actions, reference, start=positions[:, 0, 0], positions=positions[:, :, 0])
    for name in ("frame_validity", "geometric_consistency", "item_persistence", "spawn_rate", "walls_kept"):
        assert implied[name].per_episode.shape == (4,)
        np.testing.assert_array_equal(implied[name].hits, given[name].hits)  # implied == real positions
    assert implied["frame_validity"].as_dict() == {"value": 1.0, "hits": 4 * 101, "total": 4 * 101}
    # every view after the first shows cells seen before, and every wall where it was
    assert implied["walls_kept"].as_dict() == {"value": 1.0, "hits": 4 * 100, "total": 4 * 100}


def test_item_measures_follow_the_real_moves_in_real_games_and_a_dreams_own_in_a_dream(games, reference):
    """Item measures follow the frames' own moves: in every real game they are the learner's real
    moves (bumps into walls and agents included); in a dream that walks through a border the real
    map has, they go on with the dream, where the real map's moves stop and misplace every cell."""
    for views, actions, positions in games.values():
        learner = positions[:, :, 0].astype(np.int64)
        own = frame_positions(views, actions, reference)
        np.testing.assert_array_equal(np.diff(own, axis=1), np.diff(learner, axis=1))
        assert (own >= 0).all()
    views, actions, positions = games[("random", "random")]  # a random learner bumps the border
    # A dream with no walls: every move goes through but into an agent; the real map's track stops
    # at the border it bumped, and from then on it would compare the dream's cells with others.
    open_field = np.where(views == VOCAB.wall, VOCAB.empty, views)
    own = np.diff(frame_positions(open_field, actions, reference), axis=1)
    free = ~np.isin(_ahead(open_field, actions), [VOCAB.agent])[..., None]
    np.testing.assert_array_equal(own, reference.deltas[actions[:, : own.shape[1]]] * free)
    by_real_map = geometric_consistency(open_field, actions, reference, start=positions[:, 0, 0]).positions
    assert (np.diff(by_real_map, axis=1) != own).any()


def _ahead(views, actions):
    """The kind each frame shows in the cell its action enters, (N, T - 1)."""
    r = RULES["vision_radius"]
    d = vocabulary().action_deltas[actions[:, : views.shape[1] - 1]]
    n, t = np.arange(len(views))[:, None], np.arange(views.shape[1] - 1)[None]
    return views[n, t, d[..., 0] + r, d[..., 1] + r]


# ----------------------------------------------------------------------------- corrupted frames
def scores(views, actions, positions, reference):
    learner = positions[:, :, 0]
    return (frame_validity(views, reference),
            geometric_consistency(views, actions, reference, start=learner[:, 0]).share.hits.sum(),
            item_persistence(views, learner, reference).share)


def open_frame(views, positions):
    """(episode, turn) of a frame with no wall in view and its empty cells (row, col) off the centre."""
    episode, turn = np.argwhere(~(views == VOCAB.wall).any((-1, -2)))[5]
    empty = np.argwhere(views[episode, turn] == VOCAB.empty)
    return episode, turn, empty


def test_a_wall_in_the_open_field_and_a_gap_in_the_border_are_caught(games, reference):
    views, actions, positions = games[("greedy", "random")]
    base_valid, base_consistent, base_items = scores(views, actions, positions, reference)
    episode, turn, empty = open_frame(views, positions)
    lone_wall = views.copy()
    lone_wall[episode, turn, empty[0][0], empty[0][1]] = VOCAB.wall
    gap = views.copy()
    walls = np.argwhere(views == VOCAB.wall)[7]
    gap[tuple(walls)] = VOCAB.empty
    for corrupted in (lone_wall, gap):
        valid, consistent, items = scores(corrupted, actions, positions, reference)
        assert valid.share.hits.sum() == base_valid.share.hits.sum() - 1
        assert valid.failed == {"walls": 1, "centre": 0, "agents": 0, "kinds": 0}
        assert consistent == base_consistent - 1  # only that frame: the moves still say where it is
        np.testing.assert_array_equal(items.hits, base_items.hits)


def test_a_wall_break_is_placed_in_the_cells_the_move_brought_in_or_in_those_it_carried(games, reference):
    """A break (walls the game could not show after walls it could) is "entered" when only the
    cells that scrolled into view went wrong, "carried" when a cell both frames show changed."""
    views, actions, positions = games[("random", "random")]
    assert all(wall_breaks(v, a, reference) == {"entered": 0, "carried": 0} for v, a, _ in games.values())
    r = reference.radius
    learner = positions[:, :, 0]
    moved = (learner[:, 1:] != learner[:, :-1]).any(-1)
    open_field = ~(views == VOCAB.wall).any((-1, -2))
    episode, turn = np.argwhere(moved & open_field[:, :-1] & open_field[:, 1:])[0]
    dr, dc = reference.deltas[actions[episode, turn]]
    entered, carried = views.copy(), views.copy()
    entered[episode, turn + 1, r + r * dr, r + r * dc] = VOCAB.wall  # the middle of the strip that came in
    carried[episode, turn + 1, r - dr, r - dc] = VOCAB.wall  # beside the learner: shown in both frames
    assert wall_breaks(entered, actions, reference) == {"entered": 1, "carried": 0}
    assert wall_breaks(carried, actions, reference) == {"entered": 0, "carried": 1}


def test_a_border_gone_when_the_learner_walks_back_is_inconsistent(games, reference):
    views, actions, positions = games[("greedy", "random")]
    base_valid, base_consistent, _ = scores(views, actions, positions, reference)
    bordered = np.argwhere((views == VOCAB.wall).any((-1, -2)))
    no_border = views.copy()
    no_border[bordered[:, 0], bordered[:, 1]] = np.where(views[bordered[:, 0], bordered[:, 1]] == VOCAB.wall,
                                                         VOCAB.empty, views[bordered[:, 0], bordered[:, 1]])
    valid, consistent, _ = scores(no_border, actions, positions, reference)
    assert valid.share.value == 1.0  # an open field is a view the game shows (away from the border)
    assert consistent == base_consistent - len(bordered)  # but not where the moves put the learner
    learner = positions[:, :, 0]
    assert walls_kept(views, learner, reference).value == 1.0
    assert walls_kept(no_border, learner, reference).value == 1.0  # a map kept, just not the game's
    # the border shown once, then gone each time the learner comes back: the map is not kept
    first = {int(e): int(t) for e, t in reversed(bordered)}  # each episode's first bordered frame
    gone = views.copy()
    later = np.array([(e, t) for e, t in bordered if t > first[e]])
    gone[later[:, 0], later[:, 1]] = no_border[later[:, 0], later[:, 1]]
    kept = walls_kept(gone, learner, reference)
    assert 0 < kept.total.sum() - kept.hits.sum() <= len(later)


def test_a_frame_shifted_against_the_moves_is_valid_but_inconsistent(games, reference):
    views, actions, positions = games[("random", "random")]
    learner = positions[:, :, 0]
    moved = (learner[:, 1:] != learner[:, :-1]).any(-1)
    walls = views == VOCAB.wall
    changed = (walls[:, 1:] != walls[:, :-1]).any((-1, -2))
    alone = (views == VOCAB.agent).sum((-1, -2)) == 1
    episode, turn = np.argwhere(moved & changed & alone[:, 1:] & alone[:, :-1])[0]
    shifted = views.copy()
    shifted[episode, turn + 1] = views[episode, turn]  # the view one cell back: the move did not happen
    _, base_consistent, _ = scores(views, actions, positions, reference)
    valid, consistent, _ = scores(shifted, actions, positions, reference)
    assert valid.share.value == 1.0  # a frame the game shows, just not here
    assert consistent == base_consistent - 1


def test_an_extra_agent_breaks_validity_only(games, reference):
    views, actions, positions = games[("greedy", "greedy")]
    base_valid, base_consistent, base_items = scores(views, actions, positions, reference)
    with_co_player = np.argwhere((views == VOCAB.agent).sum((-1, -2)) == 2)
    episode, turn = with_co_player[with_co_player[:, 1] < 100][0]
    target = np.array([4, 4]) + reference.deltas[actions[episode, turn]]
    free = [rc for rc in np.argwhere(views[episode, turn] == VOCAB.empty) if (rc != target).any()]
    crowded = views.copy()
    crowded[episode, turn, free[0][0], free[0][1]] = VOCAB.agent
    valid, consistent, items = scores(crowded, actions, positions, reference)
    assert valid.share.hits.sum() == base_valid.share.hits.sum() - 1
    assert valid.failed == {"walls": 0, "centre": 0, "agents": 1, "kinds": 0}
    assert consistent == base_consistent
    np.testing.assert_array_equal(items.hits, base_items.hits)
    off_centre = views.copy()
    off_centre[0, 0, 4, 4], off_centre[0, 1, 0, 0] = VOCAB.empty, VOCAB.num_kinds  # no learner; no kind
    assert frame_validity(off_centre, reference).failed == {"walls": 0, "centre": 1, "agents": 0, "kinds": 1}


def test_an_item_that_vanishes_out_of_view_is_caught(games, reference):
    views, actions, positions = games[("random", "random")]
    learner = positions[:, :, 0]
    found = item_persistence(views, learner, reference)
    cells = [tuple(r[[0, 3, 4]]) for r in found.returns]
    last = [i for i, r in enumerate(found.returns) if found.persisted[i] and cells.count(cells[i]) == 1]
    episode, _, back, row, col, kind = found.returns[last[0]]
    vanished = views.copy()
    for t in range(back, views.shape[1]):  # gone from its return on, while the cell stays in view
        i, j = row - learner[episode, t, 0] + 4, col - learner[episode, t, 1] + 4
        if not (0 <= i < 9 and 0 <= j < 9) or views[episode, t, i, j] != kind:
            break
        vanished[episode, t, i, j] = VOCAB.empty
    base_valid, base_consistent, base_items = scores(views, actions, positions, reference)
    valid, consistent, items = scores(vanished, actions, positions, reference)
    assert items.hits.sum() == base_items.hits.sum() - 1 and items.total.sum() == base_items.total.sum()
    assert valid.share.value == 1.0 and consistent == base_consistent


# ----------------------------------------------------------------------------- other maps
def test_a_map_with_an_interior_wall_is_measured_the_same_way():
    rules = {**RULES, "height": 12, "width": 12}
    ref = FidelityReference.for_game(rules, layout=LAYOUT)
    open_ref = FidelityReference.for_game(rules)
    assert ref.standable.sum() == 10 * 10 - 7
    env = TreasurehuntEnv(**rules, co_policy="random")
    policy = make_policy("random")
    policy.seed(np.random.default_rng(0))
    episodes = []
    for seed in range(3):
        obs, info = env.reset(seed=seed, options={"layout": LAYOUT})
        views, actions, positions = [obs.argmax(0)], [], [info["positions"][0]]
        for _ in range(rules["max_turns"]):
            action = int(policy.act(obs[None])[0])
            obs, _, _, _, info = env.step(action)
            views.append(obs.argmax(0))
            actions.append(action)
            positions.append(info["positions"][0])
        episodes.append((np.stack(views), np.array(actions), np.stack(positions)))
    views, actions, learner = (np.stack(x) for x in zip(*episodes, strict=True))
    assert (views == VOCAB.wall)[:, :, 2:7, 2:7].any()  # the interior walls were in view
    assert frame_validity(views, ref).share.value == 1.0
    track = geometric_consistency(views, actions, ref, start=learner[:, 0])
    assert track.share.value == 1.0
    np.testing.assert_array_equal(track.positions, learner)
    assert geometric_consistency(views, actions, ref).share.value == 1.0
    assert frame_validity(views, open_ref).share.value < 1.0  # the open map never shows these walls
    open_field = np.where(views == VOCAB.wall, VOCAB.empty, views)
    assert frame_validity(open_field, ref).share.value < frame_validity(open_field, open_ref).share.value


def _walk_frames(reference, start, moves):
    """The real frames of a walk on the bare map (walls only, the learner at the centre): codes
    (T + 1, V, V), the cells (T + 1,) and the actions (T,) of ``moves``, (row, column) steps."""
    actions = np.array([np.flatnonzero((reference.deltas == m).all(1))[0] for m in moves], dtype=np.int64)
    cells = [start[0] * reference.params.width + start[1]]
    for a in actions:
        cells.append(reference.moves[a, cells[-1]])
    return reference.bare_frames(np.array(cells)), np.array(cells), actions


@pytest.mark.parametrize("start, pinned", [((10, 10), False), ((1, 1), True)])
def test_an_ideal_dream_is_as_consistent_as_its_opening_lets_it_be(reference, start, pinned):
    """The ceiling of consistency from the real start: an opening in the open field leaves the
    column unknown, so a dream that keeps the game's map exactly still meets the right border at
    the wrong turn (unless it guessed the column); an opening in a corner pins the map."""
    up, down, right = (-1, 0), (1, 0), (0, 1)
    frames, cells, actions = _walk_frames(reference, start, [up, down, up, down] + [right] * 8)
    worlds = 16
    opening, opening_actions = np.tile(frames[:5], (worlds, 1, 1, 1)), np.tile(actions[:4], (worlds, 1))
    views, walk = np.tile(frames[4:], (worlds, 1, 1, 1)), np.tile(actions[4:], (worlds, 1))
    first = np.tile(np.divmod(cells[4], reference.params.width), (worlds, 1))
    ceiling = consistency_ceiling(opening, opening_actions, views, walk, reference, first,
                                  np.random.default_rng(0))
    assert geometric_consistency(views, walk, reference, first).share.value == 1.0  # the real walk itself
    if pinned:
        assert ceiling.value == 1.0
    else:
        assert ceiling.per_episode.min() < 1.0 and ceiling.value < 0.9  # most guesses of the column are wrong
        assert ceiling.per_episode.max() == 1.0  # one in ten guesses it


def test_bad_input_says_what_to_change(reference):
    with pytest.raises(ValueError, match=r"views must be cell codes \(N, T, 9, 9\)"):
        frame_validity(np.zeros((2, 9, 9), dtype=np.int64), reference)
    with pytest.raises(ValueError, match="actions must be"):
        geometric_consistency(np.zeros((2, 5, 9, 9), dtype=np.int64), np.zeros((2, 7)), reference)
    with pytest.raises(ValueError, match="start must be"):
        geometric_consistency(np.zeros((2, 5, 9, 9), dtype=np.int64), np.zeros((2, 4), dtype=np.int64),
                              reference, start=np.zeros((2, 2), dtype=np.int64))  # a border wall
    with pytest.raises(ValueError, match="reorder"):
        FidelityReference.for_game(RULES, channel_names=tuple(reversed(VOCAB.cell_names)))


def test_whole_game_shares_carry_the_evaluations_bootstrap_and_read_as_a_line():
    from rpg_worldmodel.envs.fidelity import Share
    from rpg_worldmodel.envs.whole_games import mean_bootstrap_interval, share_interval
    from rpg_worldmodel.report.text import dream_line

    share = Share(np.array([9, 1, 5]), np.array([10, 10, 10]))
    iv = share_interval(share, seed=0)
    assert iv["value"] == pytest.approx(0.5) and iv["lo"] < 0.5 < iv["hi"]
    assert (iv["hits"], iv["total"]) == (15, 30)
    assert share_interval(share, seed=0) == iv  # seeded
    nothing = share_interval(Share(np.zeros(3, np.int64), np.zeros(3, np.int64)), seed=0)
    assert nothing["value"] is None and nothing["total"] == 0  # no returns counted: undefined, not 0
    gap = mean_bootstrap_interval(np.array([-10.0, 0.0, 10.0]), seed=0)
    row = {"imagined": {"frame_validity": iv, "geometric_consistency": iv, "item_persistence": nothing,
                        "spawn_rate": iv},
           "real": {"item_persistence": iv, "spawn_rate": iv},
           "return": {"imagined_minus_real": gap, "gap_share_of_real": None}}
    line = dream_line(row)
    assert line.startswith("valid frames 0.500 [") and "items kept - (real 0.500)" in line
    assert f"return gap +0.0 [{gap['lo']:+.1f}, {gap['hi']:+.1f}]" in line and "of real" not in line
    assert "ideal dream" not in line and "map of its own" not in line  # rows measured before either
    assert "whole games" not in line and "breaks" not in line
    row["ideal_dream"] = {"geometric_consistency": iv}
    row["imagined"]["consistency_any_start"] = row["imagined"]["walls_kept"] = iv
    row["imagined"]["whole_games_valid"] = share_interval(Share(np.array([1, 0, 0]), np.ones(3, np.int64)), 0)
    row["imagined"]["wall_breaks"] = {"entered": 3, "carried": 1}
    line = dream_line(row)
    assert "] (an ideal dream 0.500), to a map of its own 0.500, walls kept 0.500, items kept" in line
    assert "] (whole games valid 0.333; breaks: 3 entered, 1 carried), consistent" in line


def test_the_shipped_dream_draws_whole_frames_and_keeps_its_items():
    """The shipped model over whole 100-turn games, greedy play, temperature 1: drawn jointly (its
    default: the doubtful cells one at a time) most frames are ones the game could show, and some
    whole games show no impossible frame at all; drawn as independent cells (one round) most frames
    are impossible and no game is whole; items seen stay, as the episode map keeps them, and new
    ones come at the game's rate. Here, 8 worlds: 0.768 valid jointly (2 games whole, 2 kept in one
    room), 0.476 in one round (1 game whole; the two-layer refiner's marginals alone already keep
    more rows whole than one layer's, 0.153). The extent prior gives each cell of an incoming row
    that may be the room's border a few per cent of wall; drawn jointly the row comes whole more
    often (docs/imagination.md, "Fidelity"). The goal, 99% of a game's frames valid, is not
    reached."""
    from rpg_worldmodel.checkpoint import load_checkpoint
    from rpg_worldmodel.envs.whole_games import dream_and_real, reference_of

    loaded = load_checkpoint("pretrained")
    ref = reference_of(loaded)
    rows = {rounds: dream_and_real(loaded, ref, lambda: make_policy("greedy"), sample=True,
                                   worlds=8, seed=0, sample_rounds=rounds) for rounds in (None, 1)}
    joint, independent = (rows[r]["imagined"] for r in (None, 1))
    assert joint["frame_validity"]["value"] > 0.75 > 0.6 > independent["frame_validity"]["value"]
    assert joint["whole_games_valid"]["hits"] >= 2 > independent["whole_games_valid"]["hits"]
    assert joint["room_games"]["hits"] >= 2  # one room explains every frame of a quarter of the dreams
    assert rows[None]["real"]["whole_games_valid"]["value"] == 1.0
    assert joint["item_persistence"]["value"] > 0.9
    assert 0.007 < joint["spawn_rate"]["value"] < 0.014  # the game's 0.01, within its noise over 8 games
    assert joint["wall_breaks"]["carried"] <= joint["wall_breaks"]["entered"]
    assert rows[None]["real"]["frame_validity"]["value"] == 1.0
    assert rows[None]["real"]["wall_breaks"] == {"entered": 0, "carried": 0}
