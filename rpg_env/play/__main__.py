"""Play Treasurehunt with the keyboard: ``python -m rpg_env.play``.

Arrow keys or WASD move the learner (agent ``A``), R restarts the episode, Esc or closing the
window quits. The game is turn-based: nothing moves until you press a move key; co-players
(``B``..) move once per turn after you, driven by ``--co-policy``. ``--record FILE.h5`` saves
your games as trajectories (policy id ``human``) through `rpg_env.trajectories.recorders.HDF5Recorder`.
``--item-visible-turns k`` plays the memory variant: the views (and recordings) hide each item k turns
after it appears, but the window, like every rendered frame, shows the whole truthful map.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym

import rpg_env
from rpg_base.cli import (
    ArgumentParser,
    non_negative_int,
    output_file,
    positive_float,
    positive_int,
    run_command,
)
from rpg_base.errors import InputError
from rpg_env.game.levels import DISTRIBUTION_MODES
from rpg_env.play.loop import DEFAULT_FPS, PlaySummary, play
from rpg_env.render import game_legend
from rpg_env.trajectories.recorders import HDF5Recorder


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
    # The game's sizes are checked by the game's own rules (`WorldParams`), in `make_env`.
    parser = ArgumentParser(
        prog="python -m rpg_env.play",
        description="Play Treasurehunt with the keyboard: arrows/WASD move, R restarts, Esc quits.")
    parser.add_argument("--height", type=int, default=20, help="map rows, border walls included")
    parser.add_argument("--width", type=int, default=20, help="map columns, border walls included")
    parser.add_argument("--vision-radius", type=int, default=4, help="view is (2r+1) x (2r+1) cells")
    parser.add_argument("--seed", type=non_negative_int, default=None, help="seed of the first episode")
    parser.add_argument("--max-turns", type=int, default=100, help="turns per episode")
    parser.add_argument("--num-agents", type=int, default=2, help="you plus co-players")
    # The upper end of the level range is checked by the game (`WorldParams`), in `make_env`.
    parser.add_argument("--num-levels", type=non_negative_int, default=0,
                        help="play generated levels: each episode one of this many (0: the open room)")
    parser.add_argument("--start-level", type=non_negative_int, default=0,
                        help="the first level id; levels are start-level .. start-level + num-levels - 1")
    parser.add_argument("--distribution-mode", choices=DISTRIBUTION_MODES, default="easy",
                        help="level walls: easy (rooms) or hard (a maze)")
    parser.add_argument("--item-visible-turns", type=non_negative_int, default=0,
                        help="the memory variant: items show in the agents' views only this many turns "
                             "after they appear (0: always; the window still shows every item)")
    parser.add_argument("--co-policy", type=_co_policy_arg, default="random",
                        help="random, greedy, or a path to an SB3 .zip (default: random)")
    parser.add_argument("--fps", type=positive_float, default=DEFAULT_FPS,
                        help="window redraws per second (> 0)")
    parser.add_argument("--record", type=output_file, default=None, metavar="FILE.h5",
                        help="record your games to this HDF5 trajectory file (policy id 'human')")
    parser.add_argument("--max-frames", type=positive_int, default=None,
                        help="stop after this many frames (for scripted runs)")
    return parser


def make_env(args: argparse.Namespace) -> gym.Env:
    """The env the command plays: ``gymnasium.make`` with the CLI's sizes (rendering RGB frames),
    wrapped by the recorder when ``--record`` is given."""
    try:
        env = gym.make(rpg_env.ENV_ID, height=args.height, width=args.width,
                       vision_radius=args.vision_radius, max_turns=args.max_turns,
                       num_agents=args.num_agents, co_policy=args.co_policy, render_mode="rgb_array",
                       num_levels=args.num_levels, start_level=args.start_level,
                       distribution_mode=args.distribution_mode,
                       item_visible_turns=args.item_visible_turns)
    except (TypeError, ValueError) as exc:
        raise InputError(str(exc)) from exc
    if args.record is not None:
        # A human's games are scarce: keep the ones cut short by R or Esc too (flagged
        # FLAG_INTERRUPTED in the file, so a reader can leave them out).
        try:
            env = HDF5Recorder(env, args.record, policy_id="human", keep_interrupted=True,
                               run_info={"source": "rpg_env.play", "seed": args.seed})
        except BaseException:
            env.close()
            raise
    return env


def main(argv: Sequence[str] | None = None) -> PlaySummary:
    args = build_parser().parse_args(argv)
    env = make_env(args)
    try:
        params = env.unwrapped.params  # the legend names as many co-players as the map draws
        summary = play(env, seed=args.seed, fps=args.fps, max_frames=args.max_frames,
                       legend=game_legend(params, params.num_agents))
    finally:
        env.close()
    finished = ", ".join(f"{r:+g}" for r in summary.episode_returns) or "none"
    print(f"episodes finished or restarted: {len(summary.episode_returns)} (scores: {finished})")
    if args.record is not None:
        print(f"recorded {env.games_recorded} game(s) to {args.record}")
    print(f"final score: {summary.score:+g} at turn {summary.turn}")
    return summary


if __name__ == "__main__":
    run_command(main)
