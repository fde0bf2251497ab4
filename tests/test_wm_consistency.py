"""Whole-game self-consistency and inhabitants (`rpg_worldmodel.envs.consistency`): real games score
exactly 1, in the open room and on generated levels, under every scripted policy; a game a user would
see break (a room that never ends, a wall that moves) scores 0, broken where it broke."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rpg_env
from rpg_env.game.constants import vocabulary
from rpg_env.policies.registry import make_policy
from rpg_worldmodel.envs.consistency import (
    INHABITANT_MEASURES,
    WHOLE_GAME_MEASURES,
    inhabitants,
    map_consistency,
    room_consistency,
    whole_game,
    whole_game_shares,
    whole_game_status,
)
from rpg_worldmodel.envs.fidelity import FidelityReference, Share

RULES = {"height": 20, "width": 20, "vision_radius": 4, "num_agents": 2, "spawn_prob": 0.01, "max_turns": 100}
VOCAB = vocabulary()
SCRIPTS = ("random", "greedy", "eps-greedy", "wall-follower")
UP, DOWN, LEFT, RIGHT = (np.flatnonzero((VOCAB.action_deltas == d).all(1))[0]
                         for d in ((-1, 0), (1, 0), (0, -1), (0, 1)))


def play_real(learner: str, seed: int, num_envs: int = 8, co_policy: str = "random", **rules):
    """Whole real episodes: codes (N, T + 1, V, V) and actions (N, T)."""
    venv = gym.make_vec(rpg_env.ENV_ID, num_envs=num_envs, co_policy=co_policy, **{**RULES, **rules})
    obs, _ = venv.reset(seed=seed)
    policy = make_policy(learner)
    policy.seed(np.random.default_rng(seed))
    views, actions = [obs.argmax(1)], []
    for _ in range(venv.unwrapped.params.max_turns):
        action = policy.act(obs)
        obs, *_ = venv.step(action)
        views.append(obs.argmax(1))
        actions.append(action)
    venv.close()
    return np.stack(views, 1), np.stack(actions, 1)


@pytest.fixture(scope="module")
def reference():
    return FidelityReference.for_game(RULES, channel_names=VOCAB.cell_names)


def walk(reference, start, actions):
    """The real frames of a walk on the bare map (walls only, the learner at the centre): codes
    (1, T + 1, V, V) and actions (1, T)."""
    cells = [start[0] * reference.params.width + start[1]]
    for a in actions:
        cells.append(reference.moves[a, cells[-1]])
    return reference.bare_frames(np.array(cells))[None], np.asarray(actions, dtype=np.int64)[None]


@pytest.mark.parametrize("learner", SCRIPTS)
@pytest.mark.parametrize("co_policy", ["random", "greedy"])
def test_real_games_in_the_open_room_are_one_room_and_one_map_exactly(reference, learner, co_policy):
    for seed in range(3):
        views, actions = play_real(learner, seed, co_policy=co_policy)
        for measure in (room_consistency, map_consistency):
            whole = measure(views, actions, reference)
            assert whole.games.value == 1.0 and whole.frames.value == 1.0, (measure.__name__, seed)
            assert (whole.broken_at == -1).all()


@pytest.mark.parametrize("mode", ["easy", "hard"])
@pytest.mark.parametrize("learner", SCRIPTS)
def test_real_games_on_generated_levels_keep_one_map_of_the_maps_size(reference, learner, mode):
    for seed in range(3):
        views, actions = play_real(learner, seed, num_levels=50, distribution_mode=mode)
        whole = map_consistency(views, actions, reference)
        assert whole.games.value == 1.0 and whole.frames.value == 1.0, seed
    shares = whole_game_shares(views, actions, FidelityReference.for_game({**RULES, "num_levels": 50}))
    assert "room_games" not in shares and shares["map_games"].value == 1.0  # no one room to find


def test_random_play_bumps_and_is_still_explained(reference):
    views, actions = play_real("random", 7, num_envs=16)
    stayed = (views[:, 1:] == views[:, :-1]).all((-1, -2)) & (views[:, 1:] == VOCAB.wall).any((-1, -2))
    assert stayed.sum() > 16  # many bumps into the border
    assert room_consistency(views, actions, reference).games.value == 1.0
    assert map_consistency(views, actions, reference).games.value == 1.0


def test_a_room_that_never_ends_breaks_both_measures(reference):
    """Walking right 30 steps from the middle of the room, the right wall must come into view after
    at most 5 steps and block the learner; a dream that shows open field all the way is no room."""
    views, actions = walk(reference, (10, 10), [RIGHT] * 30)
    assert room_consistency(views, actions, reference).games.value == 1.0  # the real walk
    open_field = np.where(views == VOCAB.wall, VOCAB.empty, views)
    room = room_consistency(open_field, actions, reference)
    assert room.games.value == 0.0 and 1 <= room.broken_at[0] <= 10
    assert room.frames.hits[0] == room.broken_at[0] and room.frames.total[0] == 31
    kept = map_consistency(open_field, actions, reference)
    # nine columns of floor in view, one more a step: more than the room's 18 after 10 steps
    assert kept.games.value == 0.0 and kept.broken_at[0] == 10


def test_a_wall_that_moves_breaks_both_measures(reference):
    """Along the top wall to the right: at frame 6 the wall stands one row lower than before."""
    views, actions = walk(reference, (2, 3), [RIGHT] * 12)
    moved = views.copy()
    moved[0, 6] = np.roll(views[0, 6], 1, axis=0)
    moved[0, 6, 0] = VOCAB.wall  # the padding above stays wall
    moved[0, 6, 4, 4], moved[0, 6, 5, 4] = VOCAB.agent, VOCAB.empty
    for measure in (room_consistency, map_consistency):
        assert measure(views, actions, reference).games.value == 1.0
        whole = measure(moved, actions, reference)
        assert whole.games.value == 0.0 and whole.broken_at[0] == 6, measure.__name__
        assert whole.frames.value == pytest.approx(6 / 13)


def test_an_agent_ahead_may_block_or_have_stepped_away(reference):
    """Up along the top wall's rows with an agent shown ahead: the learner may stay (the agent blocked
    it) or move (it stepped away first); both walks explain the frames; staying with nothing ahead does
    not."""
    views, actions = walk(reference, (4, 10), [UP] * 4)  # rows 4, 3, 2, 1, 1 (the last move bumps)
    ahead = views.copy()
    ahead[0, 1, 3, 4] = VOCAB.agent  # frame 1 shows an agent in the cell the move enters; it moved on
    blocked, _ = walk(reference, (3, 10), [UP, UP, UP])
    stayed = np.concatenate([views[:, :2], blocked[:, :1], blocked[:, 1:3]], 1)  # rows 4, 3, 3, 2, 1
    stayed[0, 1, 3, 4] = VOCAB.agent
    for frames in (ahead, stayed):
        assert room_consistency(frames, actions, reference).games.value == 1.0
        assert map_consistency(frames, actions, reference).games.value == 1.0
    nothing_ahead = stayed.copy()
    nothing_ahead[0, 1, 3, 4] = VOCAB.empty  # an open way, and yet the learner stayed
    assert room_consistency(nothing_ahead, actions, reference).games.value == 0.0
    assert map_consistency(nothing_ahead, actions, reference).games.value == 0.0


def test_inhabitants_count_co_players_per_frame_and_items_per_turn_bin(reference):
    views = np.full((2, 6, 9, 9), VOCAB.empty, dtype=np.int64)
    views[..., 4, 4] = VOCAB.agent
    views[0, :, 0, 0] = VOCAB.agent  # one co-player in every frame of game 0
    views[1, 0, 1, 1] = VOCAB.pickup_codes[0]  # an item at turn 8 ...
    views[1, 3, 1:3, 1] = VOCAB.pickup_codes[1]  # ... two at turn 11
    out = inhabitants(views, reference, first_turn=8)
    assert tuple(out) == INHABITANT_MEASURES
    assert out["co_players"].value == pytest.approx(6 / 12)
    assert out["items_turns_0_10"].total.tolist() == [2, 2] and out["items_turns_0_10"].value == 0.25
    assert out["items_turns_10_40"].total.tolist() == [4, 4] and out["items_turns_10_40"].value == 0.25
    assert out["items_turns_70_100"].total.sum() == 0
    last = inhabitants(views, reference, first_turn=95)["items_turns_70_100"]
    assert last.total.tolist() == [6, 6]  # the game's last turn, 100, is in the last bin


def test_the_play_windows_line_says_where_the_room_broke(reference):
    views, actions = walk(reference, (10, 10), [RIGHT] * 30)
    assert whole_game_status(views[0], actions[0], reference, first_turn=4) == "room ok"
    open_field = np.where(views == VOCAB.wall, VOCAB.empty, views)
    broken = room_consistency(open_field, actions, reference).broken_at[0]
    assert whole_game_status(open_field[0], actions[0], reference, 4) == f"room broken at turn {4 + broken}"
    levels = FidelityReference.for_game({**RULES, "num_levels": 5})
    assert whole_game_status(open_field[0], actions[0], levels, 4) == "map broken at turn 14"
    assert whole_game_status(views[0, :1], actions[0, :0], reference) == "room ok"


def test_whole_game_shares_are_per_game():
    explained = np.array([[True, True, True], [True, False, False], [False, False, False]])
    whole = whole_game(explained)
    assert whole.games.hits.tolist() == [1, 0, 0] and whole.games.total.tolist() == [1, 1, 1]
    assert whole.frames.hits.tolist() == [3, 1, 0] and whole.frames.total.tolist() == [3, 3, 3]
    assert whole.broken_at.tolist() == [-1, 1, 0]
    assert set(WHOLE_GAME_MEASURES) == {"room_games", "room_frames", "map_games", "map_frames"}


def test_the_whole_game_figures_read_as_a_line_and_a_table():
    from rpg_worldmodel.envs.whole_games import inhabitants_vs_real, share_interval
    from rpg_worldmodel.report.text import whole_game_part, whole_game_table

    def iv(hits, total):
        return share_interval(Share(np.array(hits), np.array(total)), seed=0)

    real = {"room_games": iv([1, 1], [1, 1]), "room_frames": iv([9, 9], [9, 9]),
            "map_games": iv([1, 1], [1, 1]), "map_frames": iv([9, 9], [9, 9]),
            "co_players": iv([2, 2], [9, 9]), "items_turns_0_10": iv([4, 4], [2, 2]),
            "items_turns_10_40": iv([30, 30], [3, 3]),
            "item_persistence": iv([9, 10], [10, 10])}
    dream = {**real, "room_games": iv([0, 1], [1, 1]), "room_frames": iv([3, 9], [9, 9]),
             "co_players": iv([1, 1], [9, 9]), "item_persistence": iv([8, 10], [10, 10])}
    part = whole_game_part(dream, real)
    assert part.startswith("; one room: 0.500 of games, 0.667 of frames before the first break; own map: 1.0")
    assert "co-players in view 0.111 (real 0.222); items in view by turn bin 2.0/10.0 (real 2.0/10.0)" in part
    assert whole_game_part({"frame_validity": real["map_games"]}, real) == ""  # a row measured before them
    ratios = inhabitants_vs_real(dream, real)
    assert ratios["co_players"] == 0.5 and ratios["items_turns_0_10"] == 1.0
    assert ratios["item_persistence_points"] == pytest.approx(-5.0)
    table = whole_game_table({"sampled/greedy": {"imagined": dream, "real": real}})
    assert table[0].startswith("| dream | room_games | room_frames | map_games | map_frames | co_players |")
    assert table[2].startswith("| sampled/greedy | 0.500 (1.000) | 0.667 (1.000) | 1.000 (1.000)")
    assert whole_game_table({"old": {"imagined": {}, "real": {}}}) == []


def test_the_panel_says_whether_one_room_explains_the_dream_so_far(tiny_world_model):
    """The line under the frame's validity: ``room ok`` while some start position in the room explains
    every imagined frame's walls under the moves, else the turn it broke at."""
    from rpg_worldmodel import play as P

    worlds = P.build_worlds(str(tiny_world_model[0]), side_by_side=False)
    dream = worlds.dream
    _, info = dream.reset(seed=0)
    assert dream.first_turn == info["turn"] > 0 and len(dream.codes) == 1
    assert dream.status({"entropy": 0.5})[2] == "room ok"  # the real opening's last frame
    dream.step(3)
    assert len(dream.codes) == 2 and dream.actions == [3]
    line = dream.status({"entropy": 0.5})[2]
    assert line == "room ok" or line == f"room broken at turn {info['turn'] + 1}"
    open_field = np.full((9, 9), VOCAB.empty)
    open_field[4, 4] = VOCAB.agent
    dream.codes, dream.actions, dream.first_turn = [open_field] * 31, [int(RIGHT)] * 30, 4
    # 30 steps right in open field: no start in the 20 x 20 room explains more than ten of them
    assert dream.status({"entropy": 0.5})[2] == "room broken at turn 14"
