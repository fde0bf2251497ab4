"""Play Treasurehunt with the keyboard: ``python -m rpg_env.play``.

Arrow keys or WASD move the learner (agent ``A``), R restarts the episode, Esc or closing the
window quits. The game is turn-based: nothing moves until you press a move key; co-players
(``B``..) move once per turn after you, driven by ``--co-policy``. ``--record FILE.h5`` saves
your games as trajectories (policy id ``human``) through `rpg_env.recorder.HDF5Recorder`.

The loop is `play`, which reads pygame's event queue, so tests drive it headless by posting
``KEYDOWN`` events (``SDL_VIDEODRIVER=dummy``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

import rpg_env
from rpg_env.core import ACTION_NAMES

DEFAULT_FPS = 30.0


def key_actions() -> dict[int, int]:
    """pygame key code -> action (0 up, 1 down, 2 left, 3 right) for arrows and WASD."""
    import pygame

    return {pygame.K_UP: 0, pygame.K_w: 0, pygame.K_DOWN: 1, pygame.K_s: 1,
            pygame.K_LEFT: 2, pygame.K_a: 2, pygame.K_RIGHT: 3, pygame.K_d: 3}


@dataclass
class PlaySummary:
    """What happened in one `play` session (scores in points, the learner's episode return)."""

    episode_returns: list[float] = field(default_factory=list)  # finished or restarted episodes
    score: float = 0.0  # return of the episode on screen when the session ended
    turn: int = 0  # its turn
    steps: int = 0  # moves made, all episodes
    restarts: int = 0
    frames: int = 0  # loop iterations (at most fps per second), each handling all pending events
    quit: bool = False  # the player quit (Esc or closing the window), not max_frames

    @property
    def final_score(self) -> float:
        return self.score


def _describe_step(reward: float, info: dict[str, Any]) -> str:
    picked = [name for name, n in info.get("pickups", {}).items() if n]
    if picked:
        return f"last move: {reward:+g} ({picked[0]})"
    if info.get("bumped"):
        return f"last move: {reward:+g} (bumped a wall)"
    return f"last move: {reward:+g}"


def play(env: gym.Env, *, seed: int | None = None, options: dict | None = None,
         fps: float = DEFAULT_FPS, max_frames: int | None = None, window=None,
         log: Callable[[str], None] | None = print) -> PlaySummary:
    """Run the keyboard loop on ``env`` until the player quits (or ``max_frames`` frames).

    Args:
        env: a Treasurehunt env (``gymnasium.make("Treasurehunt-v0")``, possibly wrapped, e.g. by
            the HDF5 recorder) made without ``render_mode="human"``: this loop draws its own window.
        seed, options: passed to the first ``env.reset``; R restarts with the same ``options``
            (e.g. a fixed ``layout``) and the env's continuing random stream.
        fps: at most this many loop iterations per second; each handles every pending event
            and redraws the window if anything happened (the game itself waits for keys).
        max_frames: stop after this many iterations; None plays until the player quits.
        window: a `rpg_env.render.PygameWindow` to draw in (made, and closed, here if None).
        log: where the episode scores are reported (None: silent).
    """
    import pygame

    from rpg_env.render import PLAY_HELP, PygameWindow

    base = env.unwrapped
    if not hasattr(base, "world") or not hasattr(base, "params"):
        raise TypeError(f"play needs a Treasurehunt env, got {type(base).__name__}")
    if getattr(base, "render_mode", None) == "human":
        raise ValueError("play draws its own window: make the env without render_mode='human'")
    if max_frames is not None and max_frames < 1:
        raise ValueError(f"max_frames must be >= 1 or None, got {max_frames}")
    say = log or (lambda _msg: None)
    keys = key_actions()
    own_window = window is None
    if own_window:
        window = PygameWindow(base.params, fps, help_text=PLAY_HELP, close_on_quit=False)

    pygame.key.set_repeat(300, 110)  # holding a key keeps moving, one turn per repeat
    summary = PlaySummary()
    _, info = env.reset(seed=seed, options=options)
    over = False
    status = ["your move"]

    def finish_episode(reason: str) -> None:
        summary.episode_returns.append(float(info["episode_return"]))
        say(f"episode {len(summary.episode_returns)} {reason} after {info['turn']} turns: "
            f"score {info['episode_return']:+g}")

    dirty = True  # redraw only when something happened: an idle window costs no CPU
    try:
        while not summary.quit:
            for event in pygame.event.get():
                dirty = True  # key presses, but also exposes and resizes of the window
                if event.type == pygame.QUIT or (event.type == pygame.KEYDOWN
                                                 and event.key == pygame.K_ESCAPE):
                    summary.quit = True
                    break
                if event.type != pygame.KEYDOWN:
                    continue
                if event.key == pygame.K_r:
                    if not over and info["turn"] > 0:
                        finish_episode("restarted")
                    _, info = env.reset(options=options)
                    summary.restarts += 1
                    over = False
                    status = ["new episode: your move"]
                elif event.key in keys and not over:
                    action = keys[event.key]
                    _, reward, terminated, truncated, info = env.step(action)
                    summary.steps += 1
                    status = [f"moved {ACTION_NAMES[action]}", _describe_step(reward, info)]
                    if terminated or truncated:
                        over = True
                        finish_episode("over")
                        status += ["episode over:", "R plays again, Esc quits"]
            if dirty:
                window.draw(base.world.grid[0], info["positions"], turn=info["turn"],
                            score=info["episode_return"], status=status)
                dirty = False
            else:
                window.tick()
            summary.frames += 1
            if max_frames is not None and summary.frames >= max_frames:
                break
    finally:
        if own_window:
            window.close()
    summary.score = float(info["episode_return"])
    summary.turn = int(info["turn"])
    return summary


def _co_policy_arg(value: str) -> str:
    if value in ("random", "greedy"):
        return value
    if value.endswith(".zip"):
        if not Path(value).is_file():
            raise argparse.ArgumentTypeError(f"no such model file: {value}")
        return value
    raise argparse.ArgumentTypeError(
        f"{value!r} is not a co-player policy: use random, greedy or a path to an SB3 .zip")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m rpg_env.play",
        description="Play Treasurehunt with the keyboard: arrows/WASD move, R restarts, Esc quits.")
    parser.add_argument("--height", type=int, default=20, help="map rows, border walls included")
    parser.add_argument("--width", type=int, default=20, help="map columns, border walls included")
    parser.add_argument("--vision-radius", type=int, default=4, help="view is (2r+1) x (2r+1) cells")
    parser.add_argument("--seed", type=int, default=None, help="seed of the first episode")
    parser.add_argument("--max-turns", type=int, default=100, help="turns per episode")
    parser.add_argument("--num-agents", type=int, default=2, help="you plus co-players")
    parser.add_argument("--co-policy", type=_co_policy_arg, default="random",
                        help="random, greedy, or a path to an SB3 .zip (default: random)")
    parser.add_argument("--fps", type=float, default=DEFAULT_FPS, help="window redraws per second")
    parser.add_argument("--record", type=Path, default=None, metavar="FILE.h5",
                        help="record your games to this HDF5 trajectory file (policy id 'human')")
    parser.add_argument("--max-frames", type=int, default=None,
                        help="stop after this many frames (for scripted runs)")
    return parser


def make_env(args: argparse.Namespace) -> gym.Env:
    """The env the command plays: ``gymnasium.make`` with the CLI's sizes, wrapped by the
    recorder when ``--record`` is given."""
    try:
        env = gym.make(rpg_env.ENV_ID, height=args.height, width=args.width,
                       vision_radius=args.vision_radius, max_turns=args.max_turns,
                       num_agents=args.num_agents, co_policy=args.co_policy)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from exc
    if args.record is not None:
        try:
            from rpg_env.recorder import HDF5Recorder
        except ModuleNotFoundError as exc:
            env.close()
            raise SystemExit("error: --record needs rpg_env.recorder, which is not available in "
                             f"this install ({exc})") from exc
        # A human's games are scarce: keep the ones cut short by R or Esc too (flagged
        # FLAG_INTERRUPTED in the file, so a reader can leave them out).
        try:
            env = HDF5Recorder(env, args.record, policy_id="human", keep_interrupted=True,
                               run_info={"source": "rpg_env.play", "seed": args.seed})
        except (OSError, ValueError) as exc:
            env.close()
            raise SystemExit(f"error: cannot record to {args.record}: {exc}") from exc
    return env


def main(argv: Sequence[str] | None = None) -> PlaySummary:
    args = build_parser().parse_args(argv)
    env = make_env(args)
    try:
        summary = play(env, seed=args.seed, fps=args.fps, max_frames=args.max_frames)
    finally:
        env.close()
    finished = ", ".join(f"{r:+g}" for r in summary.episode_returns) or "none"
    print(f"episodes finished or restarted: {len(summary.episode_returns)} (scores: {finished})")
    if args.record is not None:
        print(f"recorded {env.games_recorded} game(s) to {args.record}")
    print(f"final score: {summary.score:+g} at turn {summary.turn}")
    return summary


if __name__ == "__main__":
    main()
