"""A short seeded game played by the scripted greedy agent, saved as a GIF and a PNG.

``python -m rpg_env.demo [--out DIR] [--seed S] [--turns N]`` plays one episode with
`rpg_env.policies.scripted.GreedyPolicy` as the learner, writes ``DIR/demo.gif`` (the whole game),
``DIR/last_frame.png`` and ``DIR/demo.json`` (scores, seed, versions), prints the greedy score
next to a random learner's score on the same seed, and prints the GIF path last.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np

import rpg_env
from rpg_base.cli import (
    ArgumentParser,
    non_negative_int,
    output_folder,
    positive_float,
    positive_int,
    run_command,
)
from rpg_base.provenance import provenance
from rpg_env.policies.base import BatchPolicy
from rpg_env.policies.scripted import GreedyPolicy, RandomPolicy
from rpg_env.render import annotate, save_animation, save_png
from rpg_env.rollout import rollout

DEFAULT_OUT = Path("out/demo")


@dataclass
class EpisodeResult:
    """One played episode: the learner's return (points), turns played, and its frames."""

    policy_id: str
    score: float
    turns: int
    frames: list[np.ndarray]  # (H', W, 3) uint8 each, annotated with turn and score; [] if not kept


def play_episode(learner: BatchPolicy, *, seed: int, turns: int, co_policy: str = "random",
                 keep_frames: bool = True, env_kwargs: dict | None = None) -> EpisodeResult:
    """Play one seeded episode of ``turns`` turns with ``learner`` choosing agent A's moves.

    The learner draws its randomness from its own generator seeded with ``seed``, apart from the
    env's, so the same seed replays the same game.
    """
    env = gym.make(rpg_env.ENV_ID, max_turns=turns, co_policy=co_policy, render_mode="rgb_array",
                   **(env_kwargs or {}))
    frames: list[np.ndarray] = []
    last: dict = {}

    def snap(infos: dict) -> None:
        last.update(turn=int(infos["turn"][0]), score=float(infos["episode_return"][0]))
        if keep_frames:
            text = (f"turn {last['turn']}/{turns}  score {last['score']:+g}  "
                    f"{learner.policy_id} vs {co_policy}")
            frames.append(annotate(env.render(), text))

    try:
        rollout(env, learner, seed=seed, policy_rng=np.random.default_rng(seed),
                on_reset=lambda _obs, infos: snap(infos), on_step=lambda step: snap(step.infos))
    finally:
        env.close()
    return EpisodeResult(learner.policy_id, last["score"], last["turn"], frames)


@dataclass
class DemoResult:
    greedy: EpisodeResult
    random: EpisodeResult
    gif: Path
    png: Path
    json: Path


def run_demo(out: str | Path = DEFAULT_OUT, *, seed: int = 0, turns: int = 100,
             co_policy: str = "random", fps: float = 8) -> DemoResult:
    """Play the greedy game and the random baseline on ``seed``; write GIF, PNG and JSON to ``out``."""
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        raise ValueError(f"turns must be a positive integer, got {turns!r}")
    out = Path(out)
    greedy = play_episode(GreedyPolicy(), seed=seed, turns=turns, co_policy=co_policy)
    baseline = play_episode(RandomPolicy(), seed=seed, turns=turns, co_policy=co_policy,
                            keep_frames=False)
    gif = save_animation(greedy.frames, out / "demo.gif", fps=fps)
    png = save_png(greedy.frames[-1], out / "last_frame.png")
    record = provenance(seed=seed, turns=turns, co_policy=co_policy, fps=fps,
                        scores={"greedy": greedy.score, "random": baseline.score},
                        files={"gif": gif.name, "png": png.name})
    json_path = out / "demo.json"
    json_path.write_text(json.dumps(record, indent=2) + "\n")
    return DemoResult(greedy, baseline, gif, png, json_path)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m rpg_env.demo",
        description="Play a short seeded game with the scripted greedy agent; write a GIF and a PNG.")
    parser.add_argument("--out", type=output_folder, default=DEFAULT_OUT,
                        help="output folder (default out/demo)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the game (default 0)")
    parser.add_argument("--turns", type=positive_int, default=100, help="turns in the game (default 100)")
    parser.add_argument("--co-policy", choices=("random", "greedy"), default="random",
                        help="policy of the co-player B (default random)")
    parser.add_argument("--fps", type=positive_float, default=8, help="GIF frames per second (default 8)")
    return parser


def main(argv: Sequence[str] | None = None) -> DemoResult:
    args = build_parser().parse_args(argv)
    result = run_demo(args.out, seed=args.seed, turns=args.turns, co_policy=args.co_policy,
                      fps=args.fps)
    print(f"greedy agent: score {result.greedy.score:+g} in {result.greedy.turns} turns "
          f"(seed {args.seed}, co-player {args.co_policy})")
    print(f"random agent: score {result.random.score:+g} on the same seed")
    print(f"last frame: {result.png}")
    print(f"provenance: {result.json}")
    print(f"GIF: {len(result.greedy.frames)} frames at {args.fps:g} fps")
    print(result.gif)
    return result


if __name__ == "__main__":
    run_command(main)
