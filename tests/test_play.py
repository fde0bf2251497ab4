"""The keyboard loop of ``python -m rpg_env.play``, driven headless by posted pygame key events."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pygame
import pytest

import rpg_env  # noqa: F401  (registers Treasurehunt-v0)
from rpg_base.cli import command_status
from rpg_env.play.__main__ import main
from rpg_env.play.loop import play
from rpg_env.render import PLAY_HELP, PygameWindow

LAYOUT = [
    "#######",
    "#.....#",
    "#..g..#",
    "#.fA..#",
    "#.....#",
    "#....B#",
    "#######",
]
START = (3, 3)


@pytest.fixture
def env():
    env = gym.make("Treasurehunt-v0", height=7, width=7, vision_radius=2, spawn_prob=0.0,
                   max_turns=5, co_policy="random", render_mode="rgb_array")
    yield env
    env.close()


@pytest.fixture
def window(env):
    window = PygameWindow(fps=0, help_text=PLAY_HELP, close_on_quit=False)
    pygame.event.clear()
    yield window
    window.close()


def key_event(kind: int, key: int) -> pygame.event.Event:
    return pygame.event.Event(kind, key=key, mod=0, unicode="")


def press(*keys: int) -> None:
    """Each key pressed and released, as a player's taps arrive."""
    for key in keys:
        pygame.event.post(key_event(pygame.KEYDOWN, key))
        pygame.event.post(key_event(pygame.KEYUP, key))


def run(env, window, max_frames=1, **kwargs):
    return play(env, options={"layout": LAYOUT}, seed=0, window=window, fps=0,
                max_frames=max_frames, **kwargs)


def learner(env) -> tuple[int, int]:
    return tuple(int(v) for v in env.unwrapped.world.agent_rc()[0, 0])


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (pygame.K_UP, (2, 3)), (pygame.K_w, (2, 3)),
        (pygame.K_DOWN, (4, 3)), (pygame.K_s, (4, 3)),
        (pygame.K_LEFT, (3, 2)), (pygame.K_a, (3, 2)),
        (pygame.K_RIGHT, (3, 4)), (pygame.K_d, (3, 4)),
    ],
)
def test_arrows_and_wasd_move_the_learner(env, window, key, expected):
    press(key)
    summary = run(env, window)
    assert learner(env) == expected
    assert summary.steps == 1 and summary.turn == 1 and not summary.quit


def test_pickups_count_in_the_score(env, window):
    press(pygame.K_UP, pygame.K_DOWN, pygame.K_LEFT)  # gem (+10), back, food (+5)
    summary = run(env, window)
    assert summary.score == 15.0 and summary.turn == 3
    assert learner(env) == (3, 2)


def test_the_game_waits_for_a_key(env, window):
    # Frames pass, key releases and unbound keys arrive: the turn does not advance.
    pygame.event.post(pygame.event.Event(pygame.KEYUP, key=pygame.K_RIGHT, mod=0, unicode=""))
    press(pygame.K_x, pygame.K_SPACE)
    summary = run(env, window, max_frames=5)
    assert summary.frames == 5 and summary.steps == 0 and summary.turn == 0
    assert learner(env) == START
    np.testing.assert_array_equal(env.unwrapped.world.agent_rc()[0, 1], (5, 5))  # B did not move
    assert window.frames_drawn == 1  # idle frames do not redraw


def test_r_restarts_the_episode_on_the_same_layout(env, window):
    press(pygame.K_UP, pygame.K_RIGHT, pygame.K_r)
    logged: list[str] = []
    summary = run(env, window, log=logged.append)
    assert summary.turn == 0 and summary.restarts == 1 and summary.score == 0.0
    assert learner(env) == START
    assert summary.episode_returns == [10.0]
    assert logged == ["episode 1 restarted after 2 turns: score +10"]


def test_escape_quits_before_later_keys(env, window):
    press(pygame.K_RIGHT, pygame.K_ESCAPE, pygame.K_LEFT)
    summary = run(env, window, max_frames=50)
    assert summary.quit and summary.frames == 1
    assert summary.steps == 1 and learner(env) == (3, 4)


def test_closing_the_window_quits(env, window):
    pygame.event.post(pygame.event.Event(pygame.QUIT))
    summary = run(env, window, max_frames=50)
    assert summary.quit and summary.frames == 1 and summary.steps == 0


def test_episode_end_ignores_moves_until_restart(env, window):
    # max_turns=5: the sixth and seventh presses find the episode over.
    press(*[pygame.K_RIGHT] * 7)
    logged: list[str] = []
    summary = run(env, window, log=logged.append)
    assert summary.steps == 5 and summary.turn == 5
    assert summary.episode_returns == [summary.score]
    assert logged == [f"episode 1 over after 5 turns: score {summary.score:+g}"]
    press(pygame.K_r, pygame.K_DOWN)
    summary = play(env, window=window, fps=0, max_frames=1, options={"layout": LAYOUT}, log=None)
    assert summary.turn == 1 and learner(env) == (4, 3)


def test_play_rejects_an_env_without_rgb_frames_and_bad_max_frames(env):
    human = gym.make("Treasurehunt-v0", render_mode="human")
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        play(human, max_frames=1)
    human.close()
    with pytest.raises(ValueError, match="max_frames"):
        play(env, max_frames=0)
    with pytest.raises(ValueError, match="one-hot egocentric views"):
        play(gym.make("CartPole-v1", render_mode="rgb_array"), max_frames=1)


class HiddenGame(gym.Env):
    """An env with Treasurehunt-v0's spaces and frames that hides the game (no world, no params):
    what an imagined env or a remote game looks like to the play loop, recorder and evaluator."""

    def __init__(self, **kwargs):
        self._inner = gym.make("Treasurehunt-v0", render_mode="rgb_array", **kwargs)
        self.observation_space = self._inner.observation_space
        self.action_space = self._inner.action_space
        self.metadata = dict(self._inner.metadata)
        self.render_mode = "rgb_array"

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._inner.reset(seed=seed, options=options)

    def step(self, action):
        return self._inner.step(action)

    def render(self):
        return self._inner.render()[::2, ::2]  # not the real game's frame size

    def close(self):
        self._inner.close()


def test_play_drives_an_env_that_hides_the_game(window):
    hidden = HiddenGame(height=7, width=7, vision_radius=2, spawn_prob=0.0, max_turns=5)
    assert not hasattr(hidden, "world") and not hasattr(hidden.unwrapped, "params")
    press(pygame.K_UP, pygame.K_DOWN, pygame.K_LEFT)
    summary = play(hidden, options={"layout": LAYOUT}, seed=0, window=window, fps=0, max_frames=1, log=None)
    assert summary.score == 15.0 and summary.turn == 3
    assert window.snapshot().shape[1] == window.size[0]
    hidden.close()


def test_tab_switches_the_env_that_gets_the_keys(window, env):
    other = gym.make("Treasurehunt-v0", height=7, width=7, vision_radius=2, spawn_prob=0.0, max_turns=5,
                     render_mode="rgb_array")
    press(pygame.K_UP, pygame.K_TAB, pygame.K_LEFT, pygame.K_LEFT)
    summary = play({"first": env, "second": other}, options={"layout": LAYOUT}, seed=0, window=window,
                   fps=0, max_frames=1, log=None)
    assert summary.switches == 1 and summary.steps == 3
    assert learner(env) == (2, 3)  # one move up, then the keys went to the other env
    assert learner(other) == (3, 1) and summary.turn == 2
    other.close()


def test_side_by_side_sends_every_key_to_both_envs(window, env):
    other = gym.make("Treasurehunt-v0", height=7, width=7, vision_radius=2, spawn_prob=0.0, max_turns=5,
                     render_mode="rgb_array")
    press(pygame.K_UP, pygame.K_TAB, pygame.K_RIGHT)
    summary = play({"real": env, "copy": other}, options={"layout": LAYOUT}, seed=0, window=window, fps=0,
                   max_frames=1, side_by_side=True, log=None)
    assert summary.switches == 0 and learner(env) == learner(other) == (2, 4)
    frame = env.render()
    assert window.size[0] > 2 * frame.shape[1] * window.scale  # both frames on screen
    other.close()


def test_extra_keys_and_status_lines_reach_the_panel(window, env):
    toggled = []
    press(pygame.K_SPACE, pygame.K_UP)
    play(env, options={"layout": LAYOUT}, seed=0, window=window, fps=0, max_frames=1, log=None,
         extra_keys={pygame.K_SPACE: lambda: toggled.append(1) or "toggled"},
         status=lambda e, info: [f"turn seen {info['turn']}"])
    assert toggled == [1] and learner(env) == (2, 3)


class SlowStep(gym.Wrapper):
    """A step slower than pygame's key-repeat delay while the key that asked for it is held: when it
    returns, the queue holds the repeats pygame's timer made meanwhile, then the release (SDL reads
    the release only when the loop next pumps events)."""

    def __init__(self, env, key: int, repeats: int) -> None:
        super().__init__(env)
        self.key, self.repeats = key, repeats

    def step(self, action):
        for _ in range(self.repeats):
            pygame.event.post(key_event(pygame.KEYDOWN, self.key))
        pygame.event.post(key_event(pygame.KEYUP, self.key))
        return self.env.step(action)


def test_repeats_queued_during_a_slow_step_do_not_move(env, window):
    slow = SlowStep(env, pygame.K_DOWN, repeats=3)
    pygame.event.post(key_event(pygame.KEYDOWN, pygame.K_DOWN))  # pressed; released during the step
    summary = run(slow, window, max_frames=4)
    assert summary.steps == 1 and learner(env) == (4, 3)


def test_five_taps_make_five_moves_and_a_held_key_one_per_iteration(env, window):
    press(*[pygame.K_RIGHT] * 2, pygame.K_LEFT, pygame.K_LEFT, pygame.K_UP)
    summary = run(env, window, max_frames=1)
    assert summary.steps == 5 and learner(env) == (2, 3)
    # Held: the press, then three repeats in one batch (one counts), then two more in the next.
    window.frames_drawn = 0
    pygame.event.clear()
    for _ in range(4):
        pygame.event.post(key_event(pygame.KEYDOWN, pygame.K_DOWN))
    session_frames = []

    def more_repeats(e, info):
        if len(session_frames) == 0:
            for _ in range(2):
                pygame.event.post(key_event(pygame.KEYDOWN, pygame.K_DOWN))
        session_frames.append(info["turn"])
        return []

    summary = play(env, options={"layout": LAYOUT}, seed=0, window=window, fps=0, max_frames=3, log=None,
                   status=more_repeats)
    pygame.event.post(key_event(pygame.KEYUP, pygame.K_DOWN))
    assert summary.steps == 3 and session_frames == [2, 3]


def test_status_lines_and_scores_come_from_every_env_side_by_side(window, env):
    other = gym.make("Treasurehunt-v0", height=7, width=7, vision_radius=2, spawn_prob=0.0, max_turns=5,
                     render_mode="rgb_array")
    shown = []
    show = window.show
    window.show = lambda frames, **kw: shown.append(kw["status"]) or show(frames, **kw)
    press(pygame.K_UP, pygame.K_r, pygame.K_LEFT)  # gem (+10) in both, restart, food (+5)
    summary = play({"real": env, "copy": other}, options={"layout": LAYOUT}, seed=0, window=window, fps=0,
                   max_frames=1, side_by_side=True, log=None,
                   status=lambda e, info: ["from copy"] if e is other else [])
    assert "from copy" in shown[-1]
    assert summary.returns_by_env == {"real": [10.0], "copy": [10.0]}
    assert summary.score_by_env == {"real": 5.0, "copy": 5.0}
    other.close()


def test_main_plays_from_the_command_line_and_prints_the_score(capsys):
    pygame.display.init()
    pygame.event.clear()
    press(pygame.K_RIGHT, pygame.K_d, pygame.K_ESCAPE)
    summary = main(["--height", "9", "--width", "11", "--vision-radius", "3", "--seed", "4",
                    "--max-turns", "20", "--co-policy", "greedy", "--fps", "1000", "--max-frames", "100"])
    out = capsys.readouterr().out
    assert summary.quit and summary.turn == 2
    assert re.search(r"^final score: [+-]\d+ at turn 2$", out, re.MULTILINE)
    assert out.strip().splitlines()[-1] == f"final score: {summary.score:+g} at turn 2"


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--co-policy", "sneaky"], "not a co-player policy"),
        (["--co-policy", "missing_model.zip"], "no such model file"),
        (["--fps", "fast"], "is not a number"),
    ],
)
def test_main_rejects_bad_arguments(argv, match, capsys):
    assert command_status(main, argv) == 2
    err = capsys.readouterr().err
    assert match in err and err.startswith("error: ") and err.count("\n") == 1


def test_main_reports_a_bad_map_size(capsys):
    assert command_status(main, ["--height", "2", "--max-frames", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: height and width must be >= 3") and err.count("\n") == 1


def test_record_writes_the_human_games_to_a_trajectory_file(tmp_path, capsys):
    from rpg_env.trajectories.format import FLAG_INTERRUPTED, FLAG_TRUNCATED
    from rpg_env.trajectories.reader import TrajectoryFile

    path = tmp_path / "human.h5"
    pygame.display.init()
    pygame.event.clear()
    # Game 1: three moves end it (max 3 turns). Game 2: R, one move, then Esc cuts it short.
    press(pygame.K_RIGHT, pygame.K_DOWN, pygame.K_LEFT, pygame.K_r, pygame.K_UP, pygame.K_ESCAPE)
    summary = main(["--height", "8", "--width", "8", "--seed", "5", "--max-turns", "3",
                    "--fps", "1000", "--record", str(path), "--max-frames", "100"])
    assert summary.quit and summary.episode_returns and summary.turn == 1
    assert f"recorded 2 game(s) to {path}" in capsys.readouterr().out
    with TrajectoryFile(path) as tf:
        learner = [i for i in range(len(tf)) if tf.episodes["agent_id"][i] == 0]
        assert len(tf) == 4 and len(learner) == 2  # 2 games x (learner + co-player)
        assert {tf.policy_id(i) for i in learner} == {"human"}
        first, second = (tf.episode(i) for i in learner)
        np.testing.assert_array_equal(first["actions"], [3, 1, 2])
        np.testing.assert_array_equal(second["actions"], [0])
        assert first["obs"].shape == (4, 6, 9, 9)
        flags = tf.episodes["flags"][learner]
        assert flags[0] & FLAG_TRUNCATED and not flags[0] & FLAG_INTERRUPTED
        assert flags[1] & FLAG_INTERRUPTED
        assert tf.episodes["seed"][learner[0]] == 5
        assert float(first["rewards"].sum()) == summary.episode_returns[0]


def test_record_refuses_a_file_of_another_game(tmp_path):
    path = tmp_path / "human.h5"
    pygame.display.init()
    pygame.event.clear()
    press(pygame.K_RIGHT, pygame.K_RIGHT, pygame.K_ESCAPE)
    main(["--height", "8", "--width", "8", "--max-turns", "2", "--fps", "1000", "--record", str(path),
          "--max-frames", "100"])
    before = path.read_bytes()
    argv = ["--height", "9", "--width", "8", "--record", str(path), "--max-frames", "1"]
    assert command_status(main, argv) == 2
    assert path.read_bytes() == before


# ----------------------------------------------------------------------------- inside the world model
def test_the_dream_has_its_say_beside_the_real_game(tiny_world_model, window):
    from rpg_worldmodel import play as P

    worlds = P.build_worlds(str(tiny_world_model[0]), side_by_side=True)
    shown = []
    show = window.show
    window.show = lambda frames, **kw: shown.append(list(kw["status"])) or show(frames, **kw)
    press(pygame.K_RIGHT, pygame.K_SPACE)
    summary = P.play_by_keys(worlds, seed=3, max_frames=1, window=window)
    lines = shown[-1]
    entropy = float(worlds.dream.env.unwrapped.worlds.entropy[0])
    assert f"uncertainty {entropy:.3f} nats/cell" in lines  # the dream's, though the real game is first
    assert lines[-1] == "Space: now arg-max"
    assert any(line.startswith("arg-max: ") and "frame" in line for line in lines)
    press(pygame.K_SPACE)
    P.play_by_keys(worlds, seed=None, max_frames=1, window=window)
    assert shown[-1][-1] == "Space: now sampled" and worlds.dream.env.unwrapped.worlds.sample
    assert set(summary.score_by_env) == {"real game", "imagined"}


def test_the_validity_mark_tells_a_game_frame_from_an_impossible_one(tiny_world_model):
    from rpg_worldmodel import play as P

    worlds = P.build_worlds(str(tiny_world_model[0]), side_by_side=True)
    worlds.real.reset(seed=0)
    dream = worlds.dream
    dream.reset(seed=0)
    dream.view = worlds.real.view.copy()  # a frame the game did show
    assert dream.failed_conditions() == []
    assert dream.status({"entropy": 0.5})[1] == "sampled: valid frame"
    assert not np.all(dream.frame()[0, :] == P.INVALID_FRAME_RGB)
    impossible = np.zeros_like(dream.view)
    impossible[1] = 1  # walls everywhere, no learner at the centre
    dream.view = impossible
    assert dream.failed_conditions() == ["walls", "centre"]
    assert dream.status({"entropy": 0.5})[1] == "sampled: invalid frame (walls, centre)"
    frame = dream.frame()
    assert np.all(frame[:3, :] == P.INVALID_FRAME_RGB) and np.all(frame[:, -3:] == P.INVALID_FRAME_RGB)


def test_both_worlds_score_the_turns_after_the_opening(tiny_world_model):
    from rpg_worldmodel import play as P

    worlds = P.build_worlds(str(tiny_world_model[0]), side_by_side=True)
    for seed in range(100):  # greedy openings: some pick something up
        _, info = worlds.real.reset(seed=seed)
        if worlds.real.opening_return:
            break
    assert worlds.real.opening_return != 0 and info["episode_return"] == 0.0
    steps = [worlds.real.step(a) for a in (0, 1, 2, 3, 0, 1, 2)]
    assert steps[-1][4]["episode_return"] == sum(step[1] for step in steps)  # only the turns played since


def test_the_exit_summary_gives_both_worlds_scores(tiny_world_model, capsys):
    from rpg_worldmodel import play as P

    pygame.display.init()
    pygame.event.clear()
    press(pygame.K_RIGHT, pygame.K_UP, pygame.K_ESCAPE)
    summary = P.main(["--checkpoint", str(tiny_world_model[0]), "--side-by-side"])
    out = capsys.readouterr().out.strip().splitlines()
    assert summary.steps == 2
    assert out[-3:] == ["played 2 moves"] + [
        f"{name}: finished episode returns []; episode on screen: {summary.score_by_env[name]:+g}"
        for name in ("real game", "imagined")]


@pytest.mark.parametrize("sees", ["real", "dream"])
def test_one_agent_acts_in_both_worlds(tiny_world_model, monkeypatch, sees):
    from rpg_env.policies import registry
    from rpg_worldmodel import play as P

    worlds = P.build_worlds(str(tiny_world_model[0]), side_by_side=True)
    looked_at, taken = [], {"real game": [], "imagined": []}
    make_policy = registry.make_policy

    def spying_policy(spec, action_space=None):
        policy = make_policy(spec, action_space)
        act = policy.act

        def spy(obs, start):
            looked_at.append({name: np.array_equal(obs[0], world.view)
                              for name, world in worlds.screens().items()})
            return act(obs, start)

        policy.act = spy
        return policy

    monkeypatch.setattr(registry, "make_policy", spying_policy)
    for name, world in worlds.screens().items():
        step = world.step
        monkeypatch.setattr(world, "step",
                            lambda a, step=step, name=name: taken[name].append(int(a)) or step(a))
    result = P.play_by_agent(worlds, "greedy", steps=100, seed=0, out=None, fps=0, sees=sees)
    eyes, other = ("real game", "imagined") if sees == "real" else ("imagined", "real game")
    assert taken["real game"] == taken["imagined"] and len(taken["imagined"]) == 100
    assert all(seen[eyes] for seen in looked_at)  # it acted on that world's view, every step,
    assert not all(seen[other] for seen in looked_at)  # where the other's differed
    # Both opened on the same 2 real turns: the 98 imagined ones end both episodes together.
    assert {name: len(r) for name, r in result["returns"].items()} == {"real game": 1, "imagined": 1}
    assert result["sees"] == sees


def test_agent_sees_and_threads_are_checked(tiny_world_model, capsys):
    from rpg_worldmodel import play as P

    run_dir = str(tiny_world_model[0])
    for argv, match in [(["--agent", "greedy", "--agent-sees", "real"], "add --side-by-side"),
                        (["--agent-sees", "dream"], "add --agent"),
                        (["--threads", "0"], "--threads must be >= 1")]:
        assert command_status(P.main, ["--checkpoint", run_dir, *argv]) == 2
        err = capsys.readouterr().err
        assert match in err and err.startswith("error: ")
    help_text = P.build_parser().format_help()
    assert "--agent-sees {real,dream}" in help_text and "--threads" in help_text


def test_each_window_has_the_legend_of_what_it_draws(tiny_world_model, monkeypatch, capsys):
    """rpg_env.play draws the map (a colour per co-player), rpg_worldmodel.play the agent's views
    (every agent in the agent kind's colour): each window's legend is the one of its frames, whose
    icons are checked against the drawn pixels in test_render.py."""
    import rpg_env.render as render
    from rpg_env.game.world import WorldParams
    from rpg_worldmodel import play as P

    legends = []

    class Spy(PygameWindow):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            legends.append(self.legend)

    def same(legend, expected) -> bool:
        return [label for _, label in legend] == [label for _, label in expected] and all(
            np.array_equal(a, b) for (a, _), (b, _) in zip(legend, expected, strict=True))

    monkeypatch.setattr(render, "PygameWindow", Spy)
    main(["--num-agents", "3", "--height", "9", "--width", "9", "--max-frames", "1"])
    assert same(legends[-1], render.game_legend(WorldParams(num_agents=3), 3))
    worlds = P.build_worlds(str(tiny_world_model[0]), side_by_side=False)
    P.play_by_keys(worlds, seed=0, max_frames=1)
    P.play_by_agent(worlds, "greedy", 1, 0, None, 1000, sees="dream")
    assert len(legends) == 3 and all(same(legend, render.game_legend(WorldParams(), 2, views=True))
                                     for legend in legends[1:])
