"""One vocabulary table: a cell kind added to it reaches the rules, the encodings, the renderer,
the scripted policy and the trajectory file, with no other change."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rpg_env  # noqa: F401  (registers Treasurehunt-v0)
from rpg_env.game import constants
from rpg_env.game.constants import CellKind, Vocabulary, vocabulary
from rpg_env.game.world import WorldParams, parse_layout
from rpg_env.policies.scripted import GreedyPolicy
from rpg_env.render import game_legend, render_ansi

KEY = CellKind("key", "k", (230, 200, 40), "diamond", passable=True, pickup=True, spawns=True,
               value_param="key_value", default_value=3.0)
LAYOUT = [
    "#######",
    "#.....#",
    "#..k..#",
    "#.bA..#",
    "#.....#",
    "#....B#",
    "#######",
]


@pytest.fixture
def with_key(monkeypatch):
    """The reference vocabulary plus a 'key' worth 3 points that spawns like the other items."""
    monkeypatch.setattr(constants, "CELL_KINDS", (*constants.CELL_KINDS, KEY))
    yield vocabulary()


def make(**kwargs):
    settings = {"height": 7, "width": 7, "vision_radius": 2, "spawn_prob": 0.0, "max_turns": 10, **kwargs}
    return gym.make("Treasurehunt-v0", **settings)


def test_the_reference_table_gives_the_reference_game():
    vocab = vocabulary()
    assert vocab.cell_names == ("empty", "wall", "gem", "bone", "food", "agent")
    assert vocab.action_names == ("up", "down", "left", "right")
    assert vocab.values(WorldParams()).tolist() == [0.0, -1.0, 10.0, -10.0, 5.0, 0.0]
    assert vocab.spawn_codes.tolist() == [2, 3, 4]
    assert vocab.passable.tolist() == [True, False, True, True, True, False]
    assert vocab.good_pickups == (2, 4) and set(vocab.hazards) == {1, 3}
    assert vocab.deltas_for(["right", "up"]).tolist() == [[0, 1], [-1, 0]]


def test_a_new_kind_is_one_row_of_the_table(with_key):
    env = make(render_mode="rgb_array")
    assert env.observation_space.shape == (7, 5, 5)
    assert env.unwrapped.metadata["channel_names"][-1] == "key"
    obs, info = env.reset(seed=0, options={"layout": LAYOUT})
    assert info["pickups"] == {"gem": 0, "bone": 0, "food": 0, "key": 0}
    assert obs[6, 1, 2] == 1  # the key, one row above the learner, in its own channel
    obs, reward, *_, info = env.step(0)  # up: onto the key
    assert reward == 3.0 and info["pickups"]["key"] == 1 and obs[6].sum() == 0
    # Rendering: the key's colour is on the map where it was drawn, the text map shows 'k'.
    env.reset(seed=0, options={"layout": LAYOUT})
    frame = env.render()
    tile = frame.shape[0] // 7
    assert tuple(frame[2 * tile + tile // 2, 3 * tile + tile // 2]) == KEY.rgb
    text = make(render_mode="ansi")
    text.reset(seed=0, options={"layout": LAYOUT})
    assert text.render().splitlines()[3] == "#..k..#"
    assert any(label.startswith("key  +3") for _, label in game_legend())


def test_a_new_kind_spawns_and_is_sought(with_key):
    env = make(spawn_prob=1.0)
    env.reset(seed=1)
    env.step(0)  # every empty cell spawns one of the four item kinds, keys among them
    counts = np.bincount(env.unwrapped.world.grid[0].ravel(), minlength=7)
    assert counts[6] > 0
    alone = ["#######", "#.....#", "#.....#", "#..A.k#", "#.....#", "#....B#", "#######"]
    params = WorldParams(height=7, width=7, vision_radius=2)
    assert render_ansi(*parse_layout(alone, params), params, turn=0, score=0).splitlines()[4] == "#..A.k#"
    obs, _ = make().reset(seed=0, options={"layout": alone})
    assert GreedyPolicy().act(obs[None])[0] == 3  # right, toward the only item worth points


def test_a_new_kind_round_trips_through_a_trajectory_file(with_key, tmp_path):
    from rpg_env.record import record
    from rpg_env.trajectories.maintenance import validate
    from rpg_env.trajectories.reader import TrajectoryFile

    summary = record("greedy", tmp_path / "keys.h5", 4, seed=0, num_envs=4, progress=False,
                     env_kwargs={"height": 9, "width": 9, "vision_radius": 2, "spawn_prob": 0.05,
                                 "max_turns": 20})
    assert summary["games"] == 4
    with TrajectoryFile(tmp_path / "keys.h5") as tf:
        assert tf.meta["channel_names"][-1] == "key" and tf.meta["obs_shape"] == (7, 5, 5)
        seen = sum(int(tf.episode(i)["obs"][:, 6].sum()) for i in range(len(tf)))
    assert seen > 0  # keys spawned in view and were recorded in their channel
    assert validate(tmp_path / "keys.h5", deep=True) == []


@pytest.mark.parametrize(
    ("cells", "match"),
    [
        ((CellKind("empty", ".", (0, 0, 0), "floor", True),), "must include 'wall'"),
        ((*constants.CELL_KINDS, CellKind("grass", ",", (0, 99, 0), "floor", passable=True)),
         "vanish under an agent"),
        ((*constants.CELL_KINDS, CellKind("gem2", "g", (0, 0, 0), "disc", True, True)), "unique"),
        ((*constants.CELL_KINDS, CellKind("orb", "o", (0, 0, 0), "star", True, True)), "sprite"),
    ],
)
def test_the_table_refuses_kinds_the_rules_cannot_hold(cells, match):
    with pytest.raises(ValueError, match=match):
        Vocabulary(cells, constants.ACTIONS)
