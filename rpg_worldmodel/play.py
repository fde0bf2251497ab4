"""Play inside the world model, or watch an agent play there, beside the real game if you like.

    python -m rpg_worldmodel.play [--checkpoint pretrained] [--side-by-side] [--agent dqn]
                                  [--out dream.gif --steps 60]

Any checkpoint plays: the treasurehunt game's or another gridworld's (the game its files recorded,
made again from their env id and arguments; `rpg_worldmodel/Imagined-v0`). Keys: arrows/WASD move; a
game with other actions gets the keys `rpg_env.play.loop.ACTION_KEYS` gives their names (forward:
up, pickup: P, drop: O, toggle: T, done: Enter; the window's help line lists them), R restarts from
a fresh real opening, Space toggles sampled / arg-max imagination, Esc quits. The header shows the
turn and the imagined return; the panel the reward of the last step and the model's uncertainty
(mean entropy per cell of the view it just imagined). Every episode opens with ``num_frames - 1``
real turns (the model needs real context), played by greedy in the treasurehunt game and at random
in another; then the model takes over.

``--side-by-side`` shows the real game's view and the dream's next to each other, both
continuing from the same real opening and receiving the same keys; cells where they disagree
are outlined in red. ``--agent`` (``dqn``, ``ppo``, ``greedy``, ``random`` or an SB3 ``.zip``;
another game: ``random`` or a ``.zip`` trained on it)
plays instead of the keyboard: one agent, whose action is applied in both worlds, so that they
stay comparable turn by turn. It chooses from the real game's view (``--agent-sees real``, the
default side by side: the dream is judged on the moves a real game would see) or the dream's
(``--agent-sees dream``: what the agent would do inside the model, replayed in the real game).
``--out FILE.gif|.mp4 --steps N`` records N agent steps of the same screens without opening a
window.

In the treasurehunt game the panel also says whether the imagined frame is one the game could show
(`rpg_worldmodel.envs.fidelity.frame_validity`: its walls, the learner at the centre, the number of
agents, the kinds); a frame that is not is outlined in magenta. Below it, whether one room still
explains the whole dream so far (`rpg_worldmodel.envs.consistency`): ``room ok``, or ``room broken
at turn k`` from the first turn whose walls no start position in the room explains under the moves
(on generated levels ``map ok`` / ``map broken at turn k``: a map of its own, of the map's size).
The model runs on ``--threads``
torch threads (1 by default: its steps are small, and more threads only wait on each other,
docs/imagination.md).

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
from rpg_base.provenance import pinned_torch_threads
from rpg_worldmodel.shipped import PRETRAINED_NAME

#: The keys besides the game's actions (`rpg_env.play.loop.keys_help`).
SESSION_KEYS = "R restart  ·  Space sampled/arg-max  ·  Esc quit"
KEYS_HELP = f"arrows/WASD move  ·  {SESSION_KEYS}"
MISMATCH_RGB = (230, 40, 40)
INVALID_FRAME_RGB = (220, 0, 220)
AGENTS = ("dqn", "ppo", "greedy", "random")
#: Which world's view the one agent chooses its actions from.
AGENT_SEES = ("real", "dream")


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
    """The real game, shown as the agent's view (drawn by ``game``, a `RealGame`): each reset plays the
    opening (``turns`` turns by ``opener``; a game that ends within it is played again) and hands it
    to ``context`` (a `GivenContext`), so the dream starts from it.

    Its ``episode_return`` counts from the end of the opening, as the dream's does (the dream is
    never told the opening's rewards, kept in ``opening_return``): the two scores compare the same
    turns. Its ``turn`` counts
    every turn played, the opening's too, for a game whose info has none.
    """

    def __init__(self, env: gym.Env, turns: int, opener: Any, context, game) -> None:
        from rpg_env.policies.registry import make_policy

        super().__init__(env)
        self.game, self.turns, self.context = game, turns, context
        self.opener = make_policy(game.default_opener() if opener is None else opener, env.action_space)
        self.turn, self.score, self.opening_return = 0, 0.0, 0.0
        self._seeds = np.random.default_rng()

    def reset(self, *, seed=None, options=None):
        from rpg_worldmodel.envs.imagination import OPENING_TRIES, Start

        for _ in range(OPENING_TRIES):
            seed = self._seed(seed)
            obs, info = self.env.reset(seed=seed, options=options)
            if seed is not None:  # the same seed, the same opening
                self.opener.seed(np.random.default_rng(seed))
            views, actions, rewards, ended = [obs], [], [], False
            for t in range(self.turns):
                action = int(self.opener.act(obs[None], np.array([t == 0]))[0])
                obs, reward, terminated, truncated, info = self.env.step(action)
                views.append(obs)
                actions.append(action)
                rewards.append(float(reward))
                ended = ended or terminated or truncated
            if not ended:
                break
            seed = None
        else:
            raise InputError(f"the real game ended within the {self.turns} opening turns "
                             f"{OPENING_TRIES} times")
        self.turn, self.score, self.opening_return = int(info.get("turn", self.turns)), 0.0, sum(rewards)
        self.context.give(Start(np.stack(views)[None], np.array(actions, dtype=np.int64)[None],
                                np.array([self.turn]), None if seed is None else np.array([seed]),
                                np.array(rewards)[None]))
        self.view = obs
        return obs, {**info, "turn": self.turn, "episode_return": 0.0}

    def _seed(self, seed: int | None) -> int | None:
        """The seed of the next real game: the one given; else, in a game judged by replays (whose
        real game is fixed by its seed), the next of a stream seeded by the first seed given; else
        None (the env's own stream goes on)."""
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
            return seed
        if self.game.treasurehunt:
            return None
        return int(self._seeds.integers(2**31))

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.turn, self.score = self.turn + 1, self.score + float(reward)
        return obs, reward, terminated, truncated, {**info, "turn": self.turn, "episode_return": self.score}

    def frame(self) -> np.ndarray:
        return self.game.render_view(np.asarray(self.view).argmax(0))


class DreamView(ShownWorld):
    """The imagined game (`rpg_worldmodel/Imagined-v0`), its view outlined where it differs from the
    real one shown beside it, and in magenta when it is no frame the game could show.

    ``reference``: the treasurehunt game's `FidelityReference` (its map, built once from the
    checkpoint's game settings), against which each imagined frame is checked; None for another game,
    whose whole dream is judged instead by replaying the real game (``replay``, a
    `rpg_worldmodel.envs.replay_consistency.ReplayStatus`: some real game shows every frame so far).
    """

    def __init__(self, env: gym.Env) -> None:
        from rpg_worldmodel.envs.fidelity import FidelityReference

        super().__init__(env)
        meta, self.game = env.unwrapped.metadata, env.unwrapped.game
        self.reference, self.replay = None, None
        if self.game.treasurehunt:
            self.reference = FidelityReference.for_game(meta["rules"], channel_names=meta["channel_names"])
        else:
            from rpg_worldmodel.envs.replay_consistency import ReplayStatus

            self.replay = ReplayStatus(self.game)
        self.codes: list[np.ndarray] = []  # the dream's frames since its reset, as cell codes
        self.actions: list[int] = []
        self.first_turn = 0
        self._judged: tuple[int, str] = (0, "")

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.view = obs
        self.codes, self.actions = [np.asarray(obs).argmax(0)], []
        self.first_turn = int(info.get("turn", 0))
        if self.replay is not None:
            self.replay.begin(self.env.unwrapped.worlds.opening)
        return obs, info

    def step(self, action):
        out = super().step(action)
        self.codes.append(np.asarray(self.view).argmax(0))
        self.actions.append(int(action))
        if self.replay is not None:
            self.replay.add(out[0], int(action), bool(out[2]), float(out[1]))
        return out

    def whole_game(self) -> str:
        """The dream so far as one game (`whole_game_status`): ``room ok`` or ``room broken at turn k``."""
        from rpg_worldmodel.envs.consistency import whole_game_status

        if self.replay is not None:
            return self.replay.line(self.first_turn + len(self.actions))
        if not self.codes or self.reference is None:
            return ""
        if self._judged[0] != len(self.codes):  # judged once a frame, however often the panel asks
            status = whole_game_status(np.stack(self.codes), np.array(self.actions, dtype=np.int64),
                                       self.reference, self.first_turn)
            self._judged = (len(self.codes), status)
        return self._judged[1]

    @property
    def mode(self) -> str:
        return "sampled" if self.env.unwrapped.worlds.sample else "arg-max"

    def failed_conditions(self) -> list[str]:
        """The conditions of `frame_validity` the current imagined frame fails (empty: a valid frame)."""
        from rpg_worldmodel.envs.fidelity import frame_validity

        if self.view is None or self.reference is None:
            return []
        failed = frame_validity(np.asarray(self.view).argmax(0)[None, None], self.reference).failed
        return [name for name, count in failed.items() if count]

    def frame(self) -> np.ndarray:
        frame = self.env.render()
        if self.failed_conditions():
            frame = frame.copy()
            frame[:, [0, 1, 2, -3, -2, -1]] = INVALID_FRAME_RGB
            frame[[0, 1, 2, -3, -2, -1], :] = INVALID_FRAME_RGB
        return frame

    def status(self, info: dict) -> list[str]:
        """The panel's lines about the dream: its uncertainty, the mode, the frame's validity and the
        whole game's consistency so far."""
        failed = self.failed_conditions()
        validity = f"invalid frame ({', '.join(failed)})" if failed else "valid frame"
        if self.reference is None:
            validity = "judged by replays"
        whole = self.whole_game()
        lines = [f"uncertainty {info['entropy']:.3f} nats/cell", f"{self.mode}: {validity}"]
        return [*lines, whole] if whole else lines

    def toggle_sampling(self) -> str:
        worlds = self.env.unwrapped.worlds
        worlds.sample = not worlds.sample
        return f"Space: now {self.mode}"  # short: the panel is narrow


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


def build_worlds(checkpoint: str, side_by_side: bool, sample: bool = True, opener: Any = None,
                 torch_threads: int | None = 1) -> Worlds:
    """The dream (and the real game, side by side) of ``checkpoint``, made to render rgb frames;
    ``opener`` plays the real opening (None: the game's default, `RealGame.default_opener`); the
    model runs on ``torch_threads`` threads (`rpg_worldmodel/Imagined-v0`'s keyword)."""
    from rpg_worldmodel import ANY_IMAGINED_ENV_ID
    from rpg_worldmodel.envs.imagination import GivenContext

    dream = DreamView(gym.make(ANY_IMAGINED_ENV_ID, checkpoint=checkpoint, burn_in_policy=opener,
                               sample=sample, render_mode="rgb_array", torch_threads=torch_threads))
    if not side_by_side:
        return Worlds(dream, None)
    worlds = dream.env.unwrapped.worlds
    context = GivenContext()
    worlds.context = context
    real = RealOpening(dream.game.make(render_mode="rgb_array"), worlds.num_frames - 1, opener, context,
                       dream.game)
    real.other, dream.other = dream, real
    return Worlds(dream, real)


def status_lines(env: gym.Env, info: dict) -> list[str]:
    """The panel under the keys: the dream's uncertainty, mode and frame validity (nothing for the
    real game)."""
    return env.status(info) if isinstance(env, DreamView) and "entropy" in info else []


def play_by_keys(worlds: Worlds, seed: int | None, max_frames: int | None = None, window=None):
    """The keyboard session (`rpg_env.play.loop.play`) over the worlds; its `PlaySummary`."""
    import pygame

    from rpg_env.play.loop import keys_help, play

    help_text = f"{keys_help(worlds.dream.game.action_names)}  ·  {SESSION_KEYS}"
    return play(worlds.screens(), seed=seed, side_by_side=worlds.real is not None,
                extra_keys={pygame.K_SPACE: worlds.dream.toggle_sampling}, status=status_lines,
                help_text=help_text, max_frames=max_frames, window=window, legend=views_legend(worlds))


def views_legend(worlds: Worlds) -> list[tuple[np.ndarray, str]]:
    """The window's legend for the views shown here (`render_view`: every agent in the agent kind's
    colour, the learner marked at the centre), with the points of the checkpoint's game; another
    game's: each kind's colour (`RealGame.legend`)."""
    import dataclasses

    from rpg_env.game.world import WorldParams
    from rpg_env.render import game_legend

    if not worlds.dream.game.treasurehunt:
        return worlds.dream.game.legend()
    rules = worlds.dream.env.unwrapped.metadata["rules"]
    names = {f.name for f in dataclasses.fields(WorldParams)}
    params = WorldParams(**{key: value for key, value in rules.items() if key in names})
    return game_legend(params, params.num_agents, views=True)


def play_by_agent(worlds: Worlds, agent: str, steps: int, seed: int, out: str | None, fps: float,
                  sees: str = "real") -> dict:
    """One ``agent`` plays ``steps`` steps, its action (chosen from the view of the world ``sees``
    names, ``"real"`` or ``"dream"``) applied in every world shown; a window shows them, or ``out``
    records them. Both worlds open on the same real turns and end on the same turn, so they restart
    together. Returns ``{"returns": {world: [finished episode returns]}, "score": {world: return of
    the episode on screen at the end}, "sees": sees, "frames": n}``."""
    from rpg_env.policies.registry import make_policy
    from rpg_env.render import PygameWindow, save_animation

    screens = worlds.screens()
    eyes = _eyes(worlds, sees)
    policy = make_policy(_agent_spec(agent), screens[eyes].action_space)
    policy.check_view_shape(screens[eyes].observation_space.shape)
    policy.seed(np.random.default_rng(seed))
    window = PygameWindow(fps if out is None else 0, legend=views_legend(worlds),
                          help_text=f"watching {agent} (sees the {sees} game)  ·  close the window to stop")
    obs = {name: env.reset(seed=seed)[0] for name, env in screens.items()}  # the real opening first
    start, frames = True, []
    returns: dict[str, list[float]] = {name: [] for name in screens}
    score = dict.fromkeys(screens, 0.0)  # both count from the end of the opening
    try:
        for _ in range(steps):
            action = int(policy.act(obs[eyes][None], np.array([start]))[0])
            infos, ended = _step_all(screens, obs, action)
            score = {name: float(info.get("episode_return", 0.0)) for name, info in infos.items()}
            _show_agent_step(window, screens, infos, f"agent: {agent} sees {sees}")
            if out is not None:
                frames.append(window.snapshot())
            start = ended
            if ended:
                for name in screens:
                    returns[name].append(score[name])
                obs = {name: env.reset()[0] for name, env in screens.items()}
                score = dict.fromkeys(screens, 0.0)
            if window.quit_requested:
                break
    finally:
        window.close()
    if out is not None:
        save_animation(frames, out, fps)
    return {"returns": returns, "score": score, "sees": sees, "frames": len(frames)}


def _eyes(worlds: Worlds, sees: str) -> str:
    """The caption of the world whose view the agent acts on."""
    if sees not in AGENT_SEES:
        raise InputError(f"--agent-sees must be one of {', '.join(AGENT_SEES)}, got {sees!r}")
    if sees == "real" and worlds.real is None:
        raise InputError("--agent-sees real needs the real game: add --side-by-side "
                         "(or use --agent-sees dream)")
    return "real game" if sees == "real" else "imagined"


def _step_all(screens: dict[str, gym.Env], obs: dict[str, np.ndarray], action: int) -> tuple[dict, bool]:
    """``action`` in every world (``obs`` updated in place); their infos, each with the step's
    ``reward``, and whether an episode ended."""
    infos, ended = {}, False
    for name, env in screens.items():
        obs[name], reward, terminated, truncated, info = env.step(action)
        infos[name] = {**info, "reward": float(reward)}
        ended = ended or bool(terminated or truncated)
    return infos, ended


def _show_agent_step(window, screens: dict[str, gym.Env], infos: dict[str, dict], title: str) -> None:
    from rpg_env.play.loop import describe_step

    header = [f"{name}: turn {info.get('turn')} return {info.get('episode_return', 0):+g}"
              for name, info in infos.items()]
    dream = infos["imagined"]
    lines = [title, describe_step(dream["reward"], dream), *status_lines(screens["imagined"], dream)]
    window.show([env.render() for env in screens.values()], captions=list(screens),
                header="   |   ".join(header), status=lines)


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
    parser.add_argument("--agent-sees", choices=AGENT_SEES, default=None,
                        help="the world whose view the agent acts on; its action is applied in both "
                             "(default: real with --side-by-side, so the two stay comparable; else dream)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads for the model and the agent (1 is fastest for these "
                             "small steps, above all on a busy machine)")
    return parser


def score_lines(returns: dict[str, list[float]], score: dict[str, float]) -> list[str]:
    """The exit summary: each world's finished episode returns and the return of its episode on
    screen at the end."""
    return [f"{name}: finished episode returns {returns.get(name, [])}; episode on screen: {score[name]:+g}"
            for name in score]


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
    if args.threads < 1:
        raise InputError(f"--threads must be >= 1, got {args.threads}")
    if args.agent is None and args.agent_sees is not None:
        raise InputError("--agent-sees chooses what an agent sees: add --agent (e.g. --agent dqn)")
    if args.agent_sees == "real" and not args.side_by_side:
        raise InputError("--agent-sees real needs the real game: add --side-by-side")
    worlds = build_worlds(args.checkpoint, args.side_by_side, sample=not args.argmax,
                          torch_threads=args.threads)
    with pinned_torch_threads(args.threads):  # the agent's network too
        if args.agent is None:
            summary = play_by_keys(worlds, args.seed)
            print(f"played {summary.steps} moves")
            print("\n".join(score_lines(summary.returns_by_env, summary.score_by_env)))
            return summary
        sees = args.agent_sees or ("real" if args.side_by_side else "dream")
        result = play_by_agent(worlds, args.agent, args.steps, args.seed, args.out, args.fps, sees)
    print("\n".join(score_lines(result["returns"], result["score"])))
    if args.out:
        print(args.out)
    return result


if __name__ == "__main__":
    run_command(main)
