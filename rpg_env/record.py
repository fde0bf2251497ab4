"""Record games of a policy to a trajectory file (by default with the native vector env).

    python -m rpg_env.record --policy greedy --episodes 1024 --out data/greedy.h5 --seed 0
    python -m rpg_env.record --policy rpg_env/experts/pretrained/dqn/model.zip --episodes 1024 \\
        --out data/dqn.h5 --co-policy random --num-envs 64

``--episodes`` counts games; each game is written as one stream per agent (the learner,
labelled with the policy id, and every co-player, labelled with the co-policy id).

Determinism: games are played in *waves* of ``--num-envs`` worlds that start together. Wave
``w`` resets the vector env with the seed ``wave_seed(seed, w)`` and seeds the learner's
policy from it too; every stream records that seed and its world index (``env_index``), so
the same ``--seed`` (and ``--num-envs``) gives a bit-identical dataset and any wave can be
replayed alone. Per-wave seeds are hashed from ``(seed, w)`` so runs with nearby seeds never
share games.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import rpg_env
from rpg_base.cli import (
    ArgumentParser,
    int_in,
    non_negative_int,
    output_file,
    positive_int,
    run_command,
    yaml_mapping,
)
from rpg_base.errors import InputError
from rpg_base.provenance import pinned_torch_threads, portable_command
from rpg_env.envs.any_env import recorded_env
from rpg_env.envs.protocol import describe
from rpg_env.game.levels import DISTRIBUTION_MODES
from rpg_env.game.world import WorldParams
from rpg_env.policies.base import BatchPolicy
from rpg_env.policies.registry import make_policy
from rpg_env.rollout import Step, rollout
from rpg_env.trajectories.recorders import HDF5VectorRecorder

DEFAULT_NUM_ENVS = 64


def wave_seed(seed: int, wave: int) -> int:
    """The env seed of wave ``wave`` of a recording seeded with ``seed`` (a 63-bit hash)."""
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(seed) >> 32, int(wave)]).generate_state(
        1, np.uint64)[0]
    return int(state >> np.uint64(1))


def record(
    policy: Any,
    out: str | Path,
    episodes: int,
    *,
    seed: int = 0,
    num_envs: int = DEFAULT_NUM_ENVS,
    env_kwargs: dict[str, Any] | None = None,
    env_id: str = rpg_env.ENV_ID,
    mode: str = "a",
    policy_id: str | None = None,
    record_co_players: bool = True,
    progress: bool = True,
    torch_threads: int | None = 1,
    **writer_kwargs: Any,
) -> dict[str, Any]:
    """Record ``episodes`` games of ``policy`` (anything `make_policy` takes) into ``out``.

    Returns a summary: ``games``, ``streams``, ``agent_steps`` (steps summed over streams),
    ``seconds``, ``policy_seconds`` (time inside the learner policy's ``act``), ``file_bytes``,
    ``mean_return`` (learner), ``policy_id``. ``torch_threads`` sets torch's intra-op threads
    while recording when the policies use torch (None: leave torch's default); the caller's
    setting is restored afterwards.
    """
    if int(episodes) < 1:
        raise InputError(f"episodes must be >= 1, got {episodes}")
    if int(num_envs) < 1:
        raise InputError(f"num_envs must be >= 1, got {num_envs}")
    learner, env = _make(policy, env_id, min(int(num_envs), int(episodes)), env_kwargs)
    pid = policy_id or learner.policy_id  # an expert zip is "sb3-<name>" (SB3Policy.load)
    run_info = {"seed": int(seed), "num_envs": env.num_envs, "games": int(episodes),
                "command": portable_command([Path(sys.argv[0]).name, *sys.argv[1:]])}
    try:
        rec = HDF5VectorRecorder(env, out, policy_id=pid, mode=mode, max_games=int(episodes),
                                 record_co_players=record_co_players, run_info=run_info, **writer_kwargs)
    except BaseException:
        env.close()
        raise
    start, steps_before = time.perf_counter(), rec.writer.num_steps
    timed = _TimedPolicy(learner)
    # Small CNN batches run fastest on one thread; on a busy 2-core machine torch's default
    # of one thread per core made DQN inference about 7x slower per sample.
    with pinned_torch_threads(torch_threads, import_torch=False):
        returns = _play_waves(rec, timed, seed, progress)
    return {
        "games": rec.games_recorded,
        "streams": rec.games_recorded * rec.agents_recorded,
        "agent_steps": rec.writer.num_steps - steps_before,
        "seconds": time.perf_counter() - start,
        "policy_seconds": timed.seconds,
        "file_bytes": Path(out).stat().st_size,
        "mean_return": float(np.mean(returns[: rec.games_recorded])) if returns else float("nan"),
        "policy_id": pid,
    }


def _make(policy: Any, env_id: str, num_envs: int, env_kwargs: dict[str, Any] | None):
    """The learner's policy and the vector env, or `InputError` naming what cannot be built."""
    try:
        env = gym.make_vec(env_id, num_envs=num_envs, **(env_kwargs or {}))
    except (TypeError, ValueError, gym.error.Error) as err:
        if isinstance(err, InputError):
            raise
        raise InputError(f"cannot make {env_id} with {env_kwargs or {}}: {err}") from err
    try:  # checked before the recorder opens the file, so a refusal writes nothing
        describe(env)
        learner: BatchPolicy = make_policy(policy, action_space=env.single_action_space)
        learner.check_view_shape(tuple(env.single_observation_space.shape))
    except ValueError as err:
        env.close()
        if isinstance(err, InputError):
            raise
        raise InputError(f"{env_id} cannot be recorded: {err} (the trajectory format holds one-hot views "
                         "with named channels; evaluate and watch take any env)") from None
    return learner, env


def _play_waves(rec: HDF5VectorRecorder, policy: BatchPolicy, seed: int, progress: bool) -> list[float]:
    """Play waves of games until the recorder has its games; returns the learners' returns.

    Wave ``w`` resets every world with `wave_seed` and seeds the policy from that seed too, so
    any wave can be replayed alone.
    """
    bar = None
    if progress:
        from rpg_base.progress import progress_bar

        bar = progress_bar(total=rec.max_games, desc=f"record {rec.policy_id}", unit="game")
    returns: list[float] = []
    running = np.zeros(0)  # each world's return so far (the protocol's info keys are optional)

    def progress_and_returns(step: Step) -> None:
        nonlocal running
        if step.index == 0:
            running = np.zeros(len(step.rewards))
        running += np.where(step.counted, step.rewards, 0.0)
        ended = (step.terminated | step.truncated) & step.counted
        if ended.any():
            returns.extend(running[ended].tolist())
        if bar is not None and rec.games_recorded > bar.n:
            bar.update(rec.games_recorded - bar.n)

    try:
        wave = 0
        while not rec.done:
            s = wave_seed(seed, wave)
            rng = np.random.default_rng(np.random.SeedSequence([s & 0xFFFFFFFF, s >> 32, 1]))
            rollout(rec, policy, seed=s, policy_rng=rng, on_step=progress_and_returns)
            wave += 1
    finally:
        rec.close()
        if bar is not None:
            bar.close()
    return returns


class _TimedPolicy(BatchPolicy):
    """``policy`` with the seconds spent in its ``act`` counted (the rest is the env and the file)."""

    def __init__(self, policy: BatchPolicy) -> None:
        super().__init__()
        self.policy, self.policy_id, self.seconds = policy, policy.policy_id, 0.0

    def seed(self, rng: np.random.Generator) -> None:
        self.policy.seed(rng)

    def check_view_shape(self, shape: tuple[int, ...]) -> None:
        self.policy.check_view_shape(shape)

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        tick = time.perf_counter()
        actions = self.policy.act(obs, episode_start)
        self.seconds += time.perf_counter() - tick
        return actions


def _add_env_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("game settings (defaults: the reference treasurehunt)")
    for f in fields(WorldParams):
        type_name = f.type if isinstance(f.type, str) else f.type.__name__
        kind = {"int": int, "float": float, "str": str}[type_name]
        choices = DISTRIBUTION_MODES if f.name == "distribution_mode" else None
        group.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=None, choices=choices,
                           help=f"(default {f.default})")
    group.add_argument("--co-policy", default=None,
                       help="co-players' policy: random (default), greedy, or an SB3 .zip")


class _DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help, where it has one (not for required options, flags or
    the game settings, whose help names the game's own default)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m rpg_env.record", description=__doc__.split("\n\n")[0],
                            formatter_class=_DefaultsShown)
    parser.add_argument("--policy", required=True,
                        help="learner policy: random, greedy, or a path to an SB3 .zip")
    parser.add_argument("--episodes", type=positive_int, required=True, help="games to record")
    parser.add_argument("--out", type=output_file, required=True, help="trajectory file (.h5)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="recording seed")
    parser.add_argument("--num-envs", type=positive_int, default=DEFAULT_NUM_ENVS,
                        help="worlds played at once")
    parser.add_argument("--policy-id", default=None, help="label for the learner's streams "
                        "(default: the policy's own id)")
    parser.add_argument("--learner-only", action="store_true", help="do not write co-player streams")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace OUT instead of appending to it")
    parser.add_argument("--compression-level", type=int_in(0, 9), default=4, help="gzip level 0-9")
    parser.add_argument("--torch-threads", type=non_negative_int, default=1,
                        help="torch threads for SB3 policies (0: torch's default)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--env-id", default=rpg_env.ENV_ID,
                        help="any registered env with one-hot views and named channels and actions "
                             "(rpg_env.envs.protocol); a MiniGrid id (MiniGrid-DoorKey-5x5-v0) is recorded "
                             f"as {rpg_env.MINIGRID_ID} with that task")
    parser.add_argument("--env-kwargs", default=None, metavar="YAML",
                        help="the env's keyword arguments as a YAML mapping, for envs other than the "
                             "treasurehunt games (whose settings are the options below), e.g. "
                             "'{colors: true}' for a MiniGrid task")
    _add_env_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    env_kwargs = {f.name: getattr(args, f.name) for f in fields(WorldParams)
                  if getattr(args, f.name) is not None}
    if args.co_policy is not None:
        env_kwargs["co_policy"] = args.co_policy
    env_id = args.env_id
    if env_kwargs and env_id != rpg_env.ENV_ID:
        raise InputError(f"the game settings ({', '.join(sorted(env_kwargs))}) are Treasurehunt-v0's; "
                         f"give {env_id}'s keyword arguments with --env-kwargs")
    if args.env_kwargs is not None:
        env_kwargs.update(yaml_mapping(args.env_kwargs, "--env-kwargs"))
    env_id, env_kwargs = recorded_env(env_id, env_kwargs)
    policy = args.policy
    if policy not in ("random", "greedy") and not policy.endswith(".zip"):
        raise InputError(f"--policy must be random, greedy, or a path to an SB3 .zip, got {policy!r}")
    if policy.endswith(".zip") and not Path(policy).is_file():
        raise FileNotFoundError(f"policy file {policy} does not exist")
    existing = args.out.exists() and not args.overwrite
    summary = record(policy, args.out, args.episodes, seed=args.seed, num_envs=args.num_envs,
                     env_kwargs=env_kwargs, env_id=env_id, mode="w" if args.overwrite else "a",
                     policy_id=args.policy_id, record_co_players=not args.learner_only,
                     progress=not args.no_progress, compression_level=args.compression_level,
                     torch_threads=args.torch_threads or None)
    print(f"{'appended' if existing else 'wrote'} {summary['games']} games ({summary['streams']} "
          f"streams, policy {summary['policy_id']}) to {args.out} in {summary['seconds']:.1f} s; "
          f"file {summary['file_bytes'] / 1e6:.2f} MB; learner mean return "
          f"{summary['mean_return']:.2f}")
    return 0


if __name__ == "__main__":
    run_command(main)
