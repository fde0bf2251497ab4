"""Play inside the world model, or watch an agent play there, beside the real game if you like.

    python -m rpg_worldmodel.play [--checkpoint pretrained] [--side-by-side] [--agent dqn]
                                  [--out dream.gif --steps 60]

Keys: arrows/WASD move, R restarts from a fresh real opening, Space toggles sampled / arg-max
imagination, Esc quits. The header shows the turn and the imagined return; the panel the reward
of the last step and the model's uncertainty (mean entropy per cell of the view it just
imagined). Every episode opens with ``num_frames - 1`` real turns played by greedy (the model
needs real context); then the model takes over.

``--side-by-side`` shows the real game's view and the dream's next to each other, both
continuing from the same real opening and receiving the same keys; cells where they disagree
are outlined in red. ``--agent`` (``dqn``, ``ppo``, ``greedy``, ``random`` or an SB3 ``.zip``)
plays instead of the keyboard, in each world with its own copy. ``--out FILE.gif|.mp4 --steps
N`` records N agent steps of the same screens without opening a window.

The loop is `rpg_env.play`'s: this module only builds the two worlds and draws their views.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rpg_base.cli import (
    ArgumentParser,
    non_negative_int,
    output_file,
    positive_float,
    positive_int,
    run_command,
)
from rpg_base.errors import InputError
from rpg_worldmodel.shipped import PRETRAINED_NAME

KEYS_HELP = "arrows/WASD move  ·  R restart  ·  Space sampled/arg-max  ·  Esc quit"
MISMATCH_RGB = (230, 40, 40)
AGENTS = ("dqn", "ppo", "greedy", "random")


def mark_cells(frame: np.ndarray, mask: np.ndarray,
               colour: tuple[int, int, int] = MISMATCH_RGB) -> np.ndarray:
    """``frame`` (a `render_view` of a ``(V, V)`` view) with the cells of ``mask`` outlined."""
    frame = frame.copy()
    tile = frame.shape[0] // mask.shape[0]
    for r, c in zip(*np.nonzero(mask), strict=True):
        top, left = r * tile, c * tile
        frame[top:top + tile, [left, left + 1, left + tile - 2, left + tile - 1]] = colour
        frame[[top, top + 1, top + tile - 2, top + tile - 1], left:left + tile] = colour
    return frame


class ShownWorld(gym.Wrapper):
    """A world on screen: keeps the view it last returned, and the world shown beside it
    (``other``), so that `render` outlines the cells where the two differ."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.view: np.ndarray | None = None
        self.other: gym.Env | None = None

    def step(self, action):
        obs, *rest = self.env.step(action)
        self.view = obs
        return (obs, *rest)

    def frame(self) -> np.ndarray:
        """This world's own picture, ``(H, W, 3)`` uint8."""
        raise NotImplementedError

    def render(self) -> np.ndarray:
        frame = self.frame()
        return frame if self.other is None else mark_cells(frame, differences(self, self.other))


class RealOpening(ShownWorld):
    """The real game, shown as the agent's view: each reset plays the opening (``turns`` turns by
    ``opener``) and hands it to ``context`` (a `GivenContext`), so the dream starts from it."""

    def __init__(self, env: gym.Env, turns: int, opener: Any, context) -> None:
        from rpg_env.policies.registry import make_policy

        super().__init__(env)
        self.turns, self.opener, self.context = turns, make_policy(opener), context

    def reset(self, *, seed=None, options=None):
        from rpg_worldmodel.envs.imagination import Start

        obs, info = self.env.reset(seed=seed, options=options)
        views, actions = [obs], []
        for t in range(self.turns):
            action = int(self.opener.act(obs[None], np.array([t == 0]))[0])
            obs, *_, info = self.env.step(action)
            views.append(obs)
            actions.append(action)
        self.context.give(Start(np.stack(views)[None], np.array(actions, dtype=np.int64)[None],
                                np.array([int(info.get("turn", self.turns))])))
        self.view = obs
        return obs, info

    def frame(self) -> np.ndarray:
        from rpg_env.render import render_view

        return render_view(np.asarray(self.view).argmax(0))


class DreamView(ShownWorld):
    """The imagined game (`TreasurehuntImagined-v0`), its view outlined where it differs from the
    real one shown beside it."""

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.view = obs
        return obs, info

    def frame(self) -> np.ndarray:
        return self.env.render()

    def toggle_sampling(self) -> str:
        worlds = self.env.unwrapped.worlds
        worlds.sample = not worlds.sample
        return f"imagination: {'sampled' if worlds.sample else 'arg-max'}"


def differences(a: gym.Env, b: gym.Env) -> np.ndarray:
    """``(V, V)`` bool: cells where the two worlds' current views differ."""
    if a.view is None or b.view is None:
        return np.zeros((1, 1), dtype=bool)
    return np.asarray(a.view).argmax(0) != np.asarray(b.view).argmax(0)


@dataclass
class Worlds:
    """What a session shows: the dream, and the real game beside it (or None)."""

    dream: DreamView
    real: RealOpening | None

    def screens(self) -> dict[str, gym.Env]:
        return {"real game": self.real, "imagined": self.dream} if self.real else {"imagined": self.dream}


def build_worlds(checkpoint: str, side_by_side: bool, sample: bool = True, opener: Any = "greedy") -> Worlds:
    """The dream (and the real game, side by side) of ``checkpoint``, made to render rgb frames."""
    import rpg_env
    from rpg_worldmodel import IMAGINED_ENV_ID
    from rpg_worldmodel.envs.imagination import GivenContext

    dream = DreamView(gym.make(IMAGINED_ENV_ID, checkpoint=checkpoint, burn_in_policy=opener, sample=sample,
                               render_mode="rgb_array"))
    if not side_by_side:
        return Worlds(dream, None)
    worlds = dream.env.unwrapped.worlds
    context = GivenContext()
    worlds.context = context
    rules = dream.env.unwrapped.metadata["rules"]
    real = RealOpening(gym.make(rpg_env.ENV_ID, render_mode="rgb_array", **rules), worlds.num_frames - 1,
                       opener, context)
    real.other, dream.other = dream, real
    return Worlds(dream, real)


def status_lines(env: gym.Env, info: dict) -> list[str]:
    """The panel under the keys: the model's uncertainty (imagined worlds only)."""
    if "entropy" not in info:
        return []
    return [f"uncertainty {info['entropy']:.3f} nats/cell"]


def play_by_keys(worlds: Worlds, seed: int | None, max_frames: int | None = None, window=None):
    """The keyboard session (`rpg_env.play.play`) over the worlds; its `PlaySummary`."""
    import pygame

    from rpg_env.play.loop import play

    return play(worlds.screens(), seed=seed, side_by_side=worlds.real is not None,
                extra_keys={pygame.K_SPACE: worlds.dream.toggle_sampling}, status=status_lines,
                help_text=KEYS_HELP, max_frames=max_frames, window=window)


def play_by_agent(worlds: Worlds, agent: str, steps: int, seed: int, out: str | None, fps: float) -> dict:
    """``agent`` plays ``steps`` steps in every world (its own copy each), shown in a window or
    recorded to ``out``; returns ``{"returns": {world: [finished episode returns]}, "frames": n}``."""
    from rpg_env.play.loop import describe_step
    from rpg_env.policies.registry import make_policy
    from rpg_env.render import PygameWindow, save_animation

    screens = worlds.screens()
    policies = {name: make_policy(_agent_spec(agent)) for name in screens}
    for name, env in screens.items():
        policies[name].check_view_shape(env.observation_space.shape)
        policies[name].seed(np.random.default_rng(seed))
    window = PygameWindow(fps if out is None else 0,
                          help_text=f"watching {agent}  ·  close the window to stop")
    obs = {name: env.reset(seed=seed)[0] for name, env in screens.items()}
    starts = dict.fromkeys(screens, True)
    returns: dict[str, list[float]] = {name: [] for name in screens}
    frames, lines = [], [f"agent: {agent}"]
    try:
        for _ in range(steps):
            header = []
            for name, env in screens.items():
                action = int(policies[name].act(obs[name][None], np.array([starts[name]]))[0])
                obs[name], reward, terminated, truncated, info = env.step(action)
                starts[name] = False
                header.append(f"{name}: turn {info.get('turn')} return {info.get('episode_return', 0):+g}")
                if name == "imagined":
                    lines = [f"agent: {agent}", describe_step(float(reward), info), *status_lines(env, info)]
                if terminated or truncated:
                    returns[name].append(float(info.get("episode_return", 0.0)))
                    obs[name], starts[name] = env.reset()[0], True
            window.show([env.render() for env in screens.values()], captions=list(screens),
                        header="   |   ".join(header), status=lines)
            if out is not None:
                frames.append(window.snapshot())
            if window.quit_requested:
                break
    finally:
        window.close()
    if out is not None:
        save_animation(frames, out, fps)
    return {"returns": returns, "frames": len(frames)}


def _agent_spec(agent: str) -> str:
    if agent in ("dqn", "ppo"):
        from rpg_env.experts import pretrained_path

        return str(pretrained_path(agent))
    return agent


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m rpg_worldmodel.play", description=__doc__.split("\n\n")[0],
                            epilog=f"keys: {KEYS_HELP}")
    parser.add_argument("--checkpoint", default=PRETRAINED_NAME,
                        help="world model: a run folder, a checkpoint, or 'pretrained' (the shipped one)")
    parser.add_argument("--side-by-side", action="store_true",
                        help="the real game beside the dream, from the same opening, with the same keys")
    parser.add_argument("--agent", default=None,
                        help=f"let a policy play instead of the keyboard: {', '.join(AGENTS)} or an SB3 .zip")
    parser.add_argument("--out", type=output_file, default=None,
                        help="record the agent's screens to a .gif or .mp4 (no window)")
    parser.add_argument("--steps", type=positive_int, default=100, help="agent steps to show or record")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--fps", type=positive_float, default=8)
    parser.add_argument("--argmax", action="store_true",
                        help="start with arg-max imagination (Space toggles)")
    return parser


def main(argv: Sequence[str] | None = None):
    from rpg_env.render import VIDEO_SUFFIXES

    args = build_parser().parse_args(argv)
    if args.out is not None:
        if args.out.suffix.lower() not in VIDEO_SUFFIXES:
            raise InputError(f"--out must end in {' or '.join(VIDEO_SUFFIXES)}, got {str(args.out)!r}")
        if args.agent is None:
            raise InputError("--out records an agent's play: add --agent (e.g. --agent dqn)")
        os.environ["SDL_VIDEODRIVER"] = "dummy"  # the same screens, without a window
    if args.agent is not None and args.agent not in AGENTS and not args.agent.endswith(".zip"):
        raise InputError(f"--agent must be one of {', '.join(AGENTS)} or an SB3 .zip, got {args.agent!r}")
    worlds = build_worlds(args.checkpoint, args.side_by_side, sample=not args.argmax)
    if args.agent is None:
        summary = play_by_keys(worlds, args.seed)
        print(f"played {summary.steps} moves; scores {summary.episode_returns + [summary.score]}")
        return summary
    result = play_by_agent(worlds, args.agent, args.steps, args.seed, args.out, args.fps)
    for name, finished in result["returns"].items():
        print(f"{name}: finished episode returns {finished}")
    if args.out:
        print(args.out)
    return result


if __name__ == "__main__":
    run_command(main)
