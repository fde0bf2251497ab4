"""``rpg_worldmodel/Imagined-v0``: the imagined env of a checkpoint of another game (MiniGrid through
`OneHotMiniGrid-v0`), its spaces, length and drawing taken from the checkpoint's files and their env;
its real openings; and `python -m rpg_worldmodel.play` side by side with the real game."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rpg_worldmodel
from rpg_base.errors import InputError
from rpg_env.policies.base import BatchPolicy
from rpg_env.policies.registry import make_policy
from rpg_worldmodel.config import load_world_model_config
from rpg_worldmodel.envs.imagination import OPENING_TRIES, RealGameContext
from rpg_worldmodel.envs.real_game import RealGame
from rpg_worldmodel.envs.world_model_env import ImaginedVectorEnv
from rpg_worldmodel.train import train

pytest.importorskip("minigrid")

ROOM = {"task": "MiniGrid-Empty-5x5-v0", "max_steps": 40}
TINY = ["model.width=24", "model.num_heads=2", "model.num_layers=1", "model.num_frames=3",
        "train.max_steps=3", "train.batch_size=8", "train.warmup_steps=1", "train.eval_every=3",
        "train.checkpoint_every=3", "train.progress=false", "data.max_val_windows=32",
        "train.num_threads=1", "model.refiner_views=16"]


@pytest.fixture(scope="module")
def room_model(tmp_path_factory):
    from rpg_env.record import record

    folder = tmp_path_factory.mktemp("minigrid_dream")
    record("random", folder / "empty.h5", 12, seed=0, num_envs=4, mode="w", progress=False,
           env_id="OneHotMiniGrid-v0", env_kwargs=ROOM)
    train(load_world_model_config(None, [*TINY, f"data.path={folder / 'empty.h5'}",
                                         f"out_dir={folder / 'run'}"]))
    return folder / "run"


def _room_game() -> RealGame:
    env = gym.make("OneHotMiniGrid-v0", **ROOM)
    game = RealGame("OneHotMiniGrid-v0", dict(env.metadata["rules"]), tuple(env.metadata["channel_names"]),
                    tuple(env.metadata["action_names"]))
    env.close()
    return game


def test_any_games_imagined_env_takes_its_spaces_length_and_colours_from_the_files(room_model):
    env = gym.make(rpg_worldmodel.ANY_IMAGINED_ENV_ID, checkpoint=room_model, render_mode="rgb_array")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped, skip_render_check=False)
    assert [str(w.message) for w in caught] == []
    real = gym.make("OneHotMiniGrid-v0", **ROOM)
    assert env.observation_space == real.observation_space and env.action_space == real.action_space
    meta = env.unwrapped.metadata
    assert meta["max_turns"] == 40 and meta["channel_names"] == real.metadata["channel_names"]
    assert meta["agent_cell"] == (6, 3) and len(meta["channel_colors"]) == 12
    obs, info = env.reset(seed=0)
    assert info["turn"] == 2 and obs.shape == (12, 7, 7)  # the random opening's real turns count
    frame = env.render()
    assert frame.shape == (7 * 16, 7 * 16, 3)
    wall = meta["channel_names"].index("wall")  # a wall cell is drawn in the env's wall colour
    r, c = np.argwhere(obs.argmax(0) == wall)[0]
    assert tuple(frame[r * 16 + 8, c * 16 + 8]) == tuple(meta["channel_colors"][wall])
    turns, ended = info["turn"], False
    while not ended:
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        turns, ended = turns + 1, terminated or truncated
        assert info["turn"] == turns and (obs.sum(0) == 1).all()
    assert turns <= 40 and (terminated or turns == 40)


def test_the_treasurehunt_id_refuses_another_games_checkpoint_and_co_players(room_model):
    with pytest.raises(InputError, match="not the treasurehunt game: make rpg_worldmodel/Imagined-v0"):
        gym.make(rpg_worldmodel.IMAGINED_ENV_ID, checkpoint=room_model)
    with pytest.raises(InputError, match="has none: leave co_policy out"):
        gym.make(rpg_worldmodel.ANY_IMAGINED_ENV_ID, checkpoint=room_model, co_policy="greedy")
    venv = gym.make_vec(rpg_worldmodel.ANY_IMAGINED_ENV_ID, num_envs=3, checkpoint=room_model)
    assert isinstance(venv.unwrapped, ImaginedVectorEnv) and venv.single_action_space.n == 7
    obs, info = venv.reset(seed=0)
    obs, *_ = venv.step(np.array([0, 1, 2]))
    assert obs.shape == (3, 12, 7, 7) and (obs.sum(1) == 1).all()


class _ToGoal(BatchPolicy):
    """Walks to the empty room's goal (forward, forward, turn right, forward, forward: its game ends
    at the 5th turn) in its first ``goal_openings`` openings (None: all), and only turns left in the
    openings after."""

    policy_id = "to-goal"
    path = (2, 2, 1, 2, 2)  # MiniGrid: 0 left, 1 right, 2 forward

    def __init__(self, goal_openings: int | None) -> None:
        super().__init__()
        self.goal_openings, self.openings, self.step = goal_openings, 0, 0

    def act(self, obs, episode_start=None):
        if episode_start is not None and episode_start.any():
            self.openings, self.step = self.openings + 1, 0
        walks = self.goal_openings is None or self.openings <= self.goal_openings
        action = self.path[self.step] if walks and self.step < len(self.path) else 0
        self.step += 1
        return np.full(len(obs), action, dtype=np.int64)


def test_an_opening_whose_game_ends_is_played_again_and_never_crosses_a_reset():
    game = _room_game()
    policy = _ToGoal(goal_openings=1)
    start = RealGameContext(7, game, policy).sample(4, np.random.default_rng(0))  # 6 opening turns
    assert policy.openings == 2 and start.views.shape == (4, 7, 12, 7, 7)
    assert (start.actions == 0).all() and (start.turns == 6).all()
    # spinning in place: after four left turns the agent faces its first way again
    np.testing.assert_array_equal(start.views[:, 4], start.views[:, 0])
    short = RealGameContext(5, game, _ToGoal(goal_openings=None)).sample(2, np.random.default_rng(0))
    assert short.actions.tolist() == [[2, 2, 1, 2]] * 2  # 4 turns: one short of the goal, kept
    with pytest.raises(InputError, match=f"ended within the 6 opening turns {OPENING_TRIES} times"):
        RealGameContext(7, game, _ToGoal(goal_openings=None)).sample(2, np.random.default_rng(0))


def test_play_shows_another_games_dream_beside_its_real_game(room_model, tmp_path):
    from rpg_worldmodel.play import build_worlds, main, views_legend

    worlds = build_worlds(str(room_model), side_by_side=True)
    real_obs, real_info = worlds.real.reset(seed=3)
    dream_obs, dream_info = worlds.dream.reset(seed=3)
    np.testing.assert_array_equal(real_obs, dream_obs)  # the dream continues from the real opening
    assert real_info["turn"] == dream_info["turn"] == 2
    assert [label for _, label in views_legend(worlds)] == list(worlds.dream.game.channel_names)
    assert worlds.dream.status(dream_info)[-1] == "one real game"  # the real opening, judged by replays
    _, reward, *_, info = worlds.real.step(2)
    assert info["turn"] == 3 and info["episode_return"] == reward
    out = tmp_path / "dream.gif"
    result = main(["--checkpoint", str(room_model), "--side-by-side", "--agent", "random", "--steps", "12",
                   "--out", str(out)])
    assert out.stat().st_size > 0 and result["frames"] == 12


def test_keys_follow_the_games_action_names():
    pygame = pytest.importorskip("pygame")
    from rpg_env.play.loop import key_actions, keys_help

    names = ("left", "right", "forward", "pickup", "drop", "toggle", "done")
    pygame.init()  # as the play window does before it reads keys
    keys = key_actions(names)
    assert keys[pygame.K_UP] == 2 and keys[pygame.K_LEFT] == 0 and keys[pygame.K_p] == 3
    assert keys[pygame.K_RETURN] == 6 and keys[pygame.K_t] == 5
    assert keys_help(names).startswith("left left  ·  right right  ·  up forward")
    assert keys_help(("up", "down", "left", "right")) == "arrows/WASD move"


def test_real_games_are_explained_whole_by_a_replay_and_a_changed_frame_end_or_reward_is_not():
    from rpg_worldmodel.envs.replay_consistency import SeedReplays, play_on, real_openings, replay_verdict

    game = _room_game()
    policy = lambda: make_policy("random", gym.spaces.Discrete(7))  # noqa: E731
    opening, env = real_openings(game, policy(), 3, 6, seed=500)
    played = play_on(lambda a: env.step(a)[:4], np.stack([v[-1] for v in opening.views]), policy(), opening,
                     40, seed=1)
    env.close()
    replays = SeedReplays(game, [])
    verdict = replay_verdict(replays, played, first=2)
    assert verdict.games.value == 1.0 and verdict.frames.value == 1.0 and (verdict.broken_at == -1).all()
    assert (verdict.broken_by == "").all()
    assert all(len(v) == len(a) + 1 == len(e) + 1
               for v, a, e in zip(played.views, played.actions, played.ends, strict=True))
    views, actions, ends, paid = played.views[0].copy(), played.actions[0], played.ends[0], played.paid[0]
    wall, empty = game.channel_names.index("wall"), game.channel_names.index("empty")
    assert views[4, wall, 6, 2] == 1  # the room's wall beside the agent ...
    views[4, :, 6, 2] = 0
    views[4, empty, 6, 2] = 1  # ... drawn as floor
    replay = replays.replay(views, actions, ends, paid, own_seed=500)
    assert replay.explained.tolist() == [True] * 4 + [False] * (len(views) - 4) and replay.broken_by == "view"
    assert replay.wrong == ("wall -> empty",)
    flipped = ends.copy()
    flipped[2] = ~flipped[2]  # a game that ends where the real one does not (or not where it does)
    replay = replays.replay(played.views[0], actions, flipped, paid, own_seed=500)
    assert replay.explained.tolist()[:4] == [True] * 3 + [False]
    assert replay.broken_by == "end" and not replay.wrong
    unpaid = paid.copy()
    unpaid[2] = ~unpaid[2]
    replay = replays.replay(played.views[0], actions, ends, unpaid, own_seed=500)
    assert replay.explained.tolist()[:4] == [True] * 3 + [False] and replay.broken_by == "pay"
    # no candidate at all (no own seed, none given): broken at the first frame, by the view
    replay = replays.replay(played.views[0], actions, ends, paid)
    assert not replay.explained.any() and replay.broken_by == "view" and not replay.wrong
    # the empty room is the same game whatever the seed: another seed explains it as its own does
    assert SeedReplays(game, [0]).explained(played.views[0], actions, ends, paid).all()
    # candidates are the seeds whose reset shows the first frame, the own seed first, each once
    many = SeedReplays(game, [3, 500, 1, 2])
    assert many.candidates(played.views[0][0], own_seed=500) == [500, 3, 1, 2]
    assert many.candidates(played.views[0][0]) == [3, 500, 1, 2]
    assert many.candidates(played.views[0][0].astype(np.int64)) == [3, 500, 1, 2]  # whatever its dtype
    assert many.candidates(views[4]) == [] and many.candidates(views[4], own_seed=500) == []


def test_a_dream_and_the_real_game_are_judged_by_the_same_replays(room_model):
    from rpg_worldmodel.checkpoint import load_checkpoint
    from rpg_worldmodel.envs.replay_consistency import SeedReplays, dream_replays

    loaded = load_checkpoint(room_model)
    game = RealGame.of(loaded.record.data)
    out = dream_replays(loaded, game, lambda: make_policy("random", gym.spaces.Discrete(7)), sample=True,
                        worlds=4, seed=77, replays=SeedReplays(game, range(3)))
    assert out["real"].games.value == 1.0 and out["real"].frames.value == 1.0
    dream = out["dream"]
    assert 0.0 <= dream.frames.value <= 1.0 and len(dream.broken_at) == 4
    broke = dream.broken_at >= 0
    assert (dream.action_before[broke] >= 0).all() and (dream.games.hits == ~broke).all()
    assert set(dream.broken_by[broke]) <= {"view", "end", "pay"} and (dream.broken_by[~broke] == "").all()
    assert all(bool(w) == (b == "view") for w, b in zip(dream.wrong, dream.broken_by, strict=True))


def test_the_replay_benchmark_counts_each_first_break_by_its_cause_and_its_wrong_cells(room_model):
    """`benchmarks/dream_replay.py`'s rows: real games whole; every broken dream counted once by what
    broke it, its view breaks' wrong cells named by kind, and the same seed the same row."""
    from benchmark_modules import load_benchmark

    measure = load_benchmark("dream_replay").measure
    rows = [measure(str(room_model), ["random"], ["sampled"], worlds=6, candidates=4, seed=11)["rows"][0]
            for _ in range(2)]
    dream, real = rows[0]["dream"], rows[0]["real"]
    assert real["games"]["value"] == 1.0 and real["broken_by"] == {} and real["wrong_cells"] == {}
    broken = dream["games"]["total"] - dream["games"]["hits"]
    assert sum(dream["broken_by"].values()) == broken == sum(dream["broken_after"].values())
    kinds = set(_room_game().channel_names)
    assert all(len(cell.split(" -> ")) == 2 and set(cell.split(" -> ")) <= kinds and cell.split(" -> ")[0]
               != cell.split(" -> ")[1] for cell in dream["wrong_cells"])
    assert dream["broken_by"].get("view", 0) > 0 and dream["wrong_cells"]  # the tiny model breaks
    assert {k: v for k, v in rows[0].items() if k != "seconds"} == \
        {k: v for k, v in rows[1].items() if k != "seconds"}


def test_the_play_window_says_from_which_turn_no_real_game_explains_the_dream(room_model):
    from rpg_worldmodel.envs.replay_consistency import ReplayStatus
    from rpg_worldmodel.play import build_worlds

    worlds = build_worlds(str(room_model), side_by_side=False)
    _, info = worlds.dream.reset(seed=5)
    opening = worlds.dream.env.unwrapped.worlds.opening
    assert opening.seeds is not None and opening.rewards.shape == (1, 2)
    assert worlds.dream.whole_game() == "one real game"
    # the real game itself, fed to the same line, stays one real game; a frame changed breaks it there
    game = worlds.dream.game
    status = ReplayStatus(game)
    status.begin(opening)
    env = game.make()
    env.reset(seed=int(opening.seeds[0]))
    for action in opening.actions[0]:
        env.step(int(action))
    for turn in range(3, 9):
        obs, reward, terminated, *_ = env.step(1)  # turning right, in place
        status.add(obs, 1, terminated, reward)
        assert status.line(turn) == "one real game"
    changed = obs.copy()
    changed[:, 6, 3] = np.roll(changed[:, 6, 3], 1)  # the agent's own cell holds another kind
    status.add(changed, 1, False, 0.0)
    assert status.line(9) == "no real game from turn 9: its view"


def test_an_agent_trains_in_another_games_dream_and_is_judged_in_its_real_env(room_model, tmp_path, capsys):
    """``python -m rpg_worldmodel.dream --checkpoint`` of a MiniGrid model: the agent trains in
    ``rpg_worldmodel/Imagined-v0`` and is judged in the env its files recorded, beside random only
    (no treasurehunt baseline, co-player or expert); its gap is per episode, unscaled."""
    import json

    import yaml

    from rpg_env.experts.evaluate import compare
    from rpg_worldmodel.dream import main

    out = tmp_path / "dream"
    assert main(["--checkpoint", str(room_model), "--out", str(out), "timesteps=128", "n_envs=4",
                 "hyperparams.n_steps=32", "hyperparams.batch_size=64", "eval.freq=128", "eval.episodes=2",
                 "eval.final_episodes=4", "progress_bar=false", "checkpoint_freq=1000"]) == 0
    evaluation = json.loads((out / "eval.json").read_text())
    assert set(evaluation) == {"model", "random", "imagined"}
    record = json.loads((out / "dream.json").read_text())
    assert record["real_vs_greedy"] is None and record["real_vs_greedy_with_greedy_co_player"] is None
    assert record["world"]["env_id"] == rpg_worldmodel.ANY_IMAGINED_ENV_ID
    assert record["world"]["burn_in_policy"] == "random"
    assert record["real_turns"] == ROOM["max_steps"] and record["imagined_turns"] == ROOM["max_steps"] - 2
    imagined, real = evaluation["imagined"]["mean"], evaluation["model"]["mean"]
    assert record["gap_per_episode"] == round(imagined - real, 4)
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["trained_in"] == rpg_worldmodel.ANY_IMAGINED_ENV_ID
    # the env its files recorded, named as an expert config names it: the task, one-hot
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["env_id"] == "minigrid:" + ROOM["task"] and config["env"]["max_steps"] == ROOM["max_steps"]
    assert config["wrappers"] == ["rpg_env.envs.minigrid_views:OneHotViews"]
    # judged in the real env of its files, on the evaluator's seeds: the same figure played again
    again = compare(out / "model.zip", episodes=4, seed=config["eval"]["seed"])
    assert again["model"]["mean"] == real
    assert "real return" in capsys.readouterr().out
