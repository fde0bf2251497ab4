"""Train an agent entirely inside the world model, then evaluate it in the real game.

    python -m rpg_worldmodel.dream --algo ppo [--checkpoint pretrained] [--out DIR] [key=value ...]

The agent is an SB3 DQN or PPO built, trained and saved by `rpg_env.experts.train` (its typed
config, features extractor, callbacks and run-folder layout), in the checkpoint's imagined game
instead of the real one: ``TreasurehuntImagined-v0`` for a treasurehunt checkpoint,
``rpg_worldmodel/Imagined-v0`` for one of any other game its files recorded.
Every training step and every EvalCallback evaluation happens in imagination (worlds start from
``num_frames - 1`` real turns of an opening, greedy in the treasurehunt game and random elsewhere, as
IRIS and DIAMOND start theirs from real context; the agent never acts in the real game while it
learns). Then it is evaluated **in the real game** with the experts' evaluator, on the same seeds
as random (and, in the treasurehunt game, greedy and the shipped DQN expert; 95% intervals), and in
imagination on as many episodes, so the run folder says how much of what it believed it earned was
real. The config's env section is the treasurehunt game's; for another game the env id and its
arguments are the checkpoint's files' (`dream_config`).

Run folder: what ``python -m rpg_env.experts train`` writes (``model.zip`` with its expert
record, ``config.yaml``, ``provenance.json``, ``eval.json``, ``best/``, ``checkpoints/``, ``tb/``)
plus ``dream.json``: the world model used, the imagined and real returns and their gap. The
agent is an expert like any other: ``rpg_env.experts watch``, ``co_policy=`` and
``record --policy`` take its ``model.zip``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rpg_base.cli import ArgumentParser, output_folder, positive_float, positive_int, run_command
from rpg_base.provenance import portable_command
from rpg_worldmodel import ANY_IMAGINED_ENV_ID, IMAGINED_ENV_ID
from rpg_worldmodel.config import CONFIG_DIR
from rpg_worldmodel.envs.real_game import RealGame
from rpg_worldmodel.shipped import PRETRAINED_NAME

#: The shipped expert the dream agent is compared with in the real game (the world model's data).
DREAM_EXPERT = "dqn"


@dataclass
class World:
    """The imagined game the agent trains in: the imagined env's arguments. What is left None is
    the checkpoint's game's (`settled`)."""

    checkpoint: str = PRETRAINED_NAME
    sample: bool = True  # sample next views and rewards (True) or take the arg-max
    temperature: float = 1.0
    # who plays the real opening (None: the game's own, greedy in treasurehunt and random elsewhere)
    burn_in_policy: str | None = None
    reset_from: str | None = None  # a trajectory file to start worlds from instead of a burn-in
    reset_split: str = "auto"  # its games to start from: "auto" (held-out ones) or "all"
    horizon: int | None = None  # most imagined turns of an episode (None: to the game's last turn)
    device: str = "cpu"
    # torch threads of an imagined step (restored after each): one keeps its speed beside other load,
    # where two fall to a tenth; on idle cores two are 1.1x faster at one world and 1.7x at 64 or more
    # (docs/imagination.md, "Threads"). The learner's own threads are the config's torch_threads.
    torch_threads: int = 1
    # the imagined env (None: TreasurehuntImagined-v0 for a treasurehunt checkpoint, else the any-game id)
    env_id: str | None = None

    def settled(self) -> World:
        """This world with ``env_id`` and ``burn_in_policy`` filled in from the checkpoint's game
        (`checkpoint_game`), where they were left None."""
        if self.env_id is not None and self.burn_in_policy is not None:
            return self
        game = checkpoint_game(self.checkpoint)
        imagined = IMAGINED_ENV_ID if game.treasurehunt else ANY_IMAGINED_ENV_ID
        return replace(self, env_id=self.env_id or imagined,
                       burn_in_policy=self.burn_in_policy or game.default_opener())

    @property
    def treasurehunt(self) -> bool:
        """Whether the imagined game is the treasurehunt game's (its co-players, greedy, DQN expert)."""
        return self.settled().env_id == IMAGINED_ENV_ID

    def make_vec(self, num_envs: int, **kwargs: Any) -> gym.vector.VectorEnv:
        """``num_envs`` worlds of this imagined game in one batched env (``kwargs``: its other
        arguments, e.g. ``co_policy`` or ``autoreset_mode``)."""
        world = self.settled()
        return gym.make_vec(world.env_id, num_envs=num_envs, checkpoint=world.checkpoint,
                            burn_in_policy=world.burn_in_policy, reset_from=world.reset_from,
                            reset_split=world.reset_split, horizon=world.horizon, sample=world.sample,
                            temperature=world.temperature, device=world.device,
                            torch_threads=world.torch_threads, **kwargs)


def checkpoint_game(checkpoint: str | Path) -> RealGame:
    """The real game whose files ``checkpoint`` learned (read off its record; no weights loaded).
    A missing checkpoint is refused here, before anything is made."""
    from rpg_worldmodel.checkpoint import read_checkpoint_record

    return RealGame.of(read_checkpoint_record(checkpoint).data)


def dream_config_path(algo: str) -> Path:
    """The shipped dream config of ``algo``: ``rpg_worldmodel/configs/dream_<algo>.yaml``."""
    return CONFIG_DIR / f"dream_{algo}.yaml"


def dream_config(algo: str, path: str | Path | None, overrides: Sequence[str], game: RealGame):
    """The agent's `rpg_env.experts.config.ExpertConfig`: ``path`` (default: the shipped dream
    config of ``algo``), whose env section is the treasurehunt game's; for another ``game`` the env
    its files recorded instead (`rpg_env.envs.any_env.expert_env`: the agent is judged in it); then
    the ``overrides``."""
    from rpg_env.envs.any_env import expert_env
    from rpg_env.experts.config import load_expert_config

    path = path or dream_config_path(algo)
    if game.treasurehunt:
        return load_expert_config(algo, path, overrides)
    env_id, env_kwargs, wrappers = expert_env(game.env_id, dict(game.env_kwargs))
    return load_expert_config(algo, path, overrides, env_id=env_id, env_kwargs=env_kwargs, wrappers=wrappers)


def imagined_envs(world: World):
    """An `rpg_env.experts.train.EnvFactory` of imagined worlds: ``n_envs`` worlds in one batched
    imagined env (SAME_STEP autoreset; the treasurehunt game's with the config's co-player),
    monitored and frame-stacked as the experts' real envs are."""
    from stable_baselines3.common.vec_env import VecFrameStack, VecMonitor

    from rpg_env.experts.sb3_vec import SB3VectorEnv

    def make(cfg, n_envs: int, seed: int):
        co_player = {"co_policy": cfg.env.get("co_policy", "random")} if world.treasurehunt else {}
        env = SB3VectorEnv(world.make_vec(n_envs, autoreset_mode="same_step", **co_player))
        env.seed(seed)
        return VecFrameStack(VecMonitor(env), n_stack=cfg.frame_stack, channels_order="first")

    return make


def imagined_returns(model_zip: Path, world: World, episodes: int, seed: int) -> np.ndarray:
    """Returns ``(episodes,)`` of the agent in imagination (greedy actions), from fresh contexts."""
    from rpg_env.policies.sb3 import SB3Policy
    from rpg_env.rollout import rollout

    policy = SB3Policy.load(model_zip)
    venv = world.make_vec(episodes)
    try:
        return rollout(venv, policy, seed=seed, policy_rng=np.random.default_rng(seed)).returns
    finally:
        venv.close()


def real_and_imagined(model_zip: Path, cfg, world: World) -> dict[str, dict[str, Any]]:
    """``eval.json``: the agent and random in the real game on the same seeds
    (`rpg_env.experts.evaluate.compare`), and the agent in imagination (``"imagined"``). In the
    treasurehunt game also greedy and the shipped DQN expert, beside the co-player the agent dreamed
    with (the config's ``env.co_policy``, random by default), and, as ``*_greedy_co_player``, beside
    a greedy one."""
    from rpg_env.experts.evaluate import compare, summarize

    episodes, seed = cfg.eval.final_episodes, cfg.eval.seed
    results = compare(model_zip, episodes=episodes, seed=seed)
    if world.treasurehunt:
        results.update(_treasurehunt_rows(model_zip, episodes, seed))
    results["imagined"] = summarize(imagined_returns(model_zip, world, episodes, seed))
    return results


def _treasurehunt_rows(model_zip: Path, episodes: int, seed: int) -> dict[str, dict[str, Any]]:
    """The shipped DQN expert on the same seeds, and every row again beside a greedy co-player."""
    from rpg_env.experts import pretrained_path
    from rpg_env.experts.evaluate import GREEDY_CO_PLAYER, compare, run_episodes, summarize
    from rpg_env.policies.sb3 import SB3Policy

    expert = SB3Policy.load(pretrained_path(DREAM_EXPERT))
    expert_env = dict(expert.model.rpg_expert["env"])
    rows = {DREAM_EXPERT: summarize(run_episodes(expert, expert_env, episodes, seed))}
    agent_env = dict(SB3Policy.load(model_zip).model.rpg_expert["env"])
    beside_greedy = compare(model_zip, episodes=episodes, seed=seed,
                            env_kwargs={**agent_env, "co_policy": "greedy"})
    rows.update({name + GREEDY_CO_PLAYER: summary for name, summary in beside_greedy.items()})
    return rows


def dream_record(results: dict[str, dict[str, Any]], world: World) -> dict[str, Any]:
    """``dream.json``: the world model, how it drew the views (``draw``: its joint draw's rounds,
    doubt and floor), and the imagination-to-reality gap. Imagined episodes are at most
    ``max_turns - (num_frames - 1)`` turns long (the opening is real), real ones at most
    ``max_turns``. The treasurehunt game's always last that long, so its gap compares points per
    turn, scaled to a full episode; another game's end when they end, so its gap is per episode
    (the opening's real turns are then counted in the real return only). ``real_vs_greedy`` is None
    in a game without a greedy baseline."""
    from rpg_env.experts.evaluate import GREEDY_CO_PLAYER
    from rpg_worldmodel.checkpoint import choose_checkpoint, load_checkpoint
    from rpg_worldmodel.models.refiner import SAMPLE_DOUBT

    loaded = load_checkpoint(world.checkpoint)
    turns = RealGame.of(loaded.record.data).max_turns
    imagined_turns = turns - (loaded.config.model.num_frames - 1)
    imagined, real = results["imagined"]["mean"], results["model"]["mean"]
    scale = turns / imagined_turns if world.treasurehunt else 1.0
    choice = choose_checkpoint(world.checkpoint).describe(portable=True)  # no machine paths in the record
    model = loaded.config.model
    draw = {"sample_rounds": model.sample_rounds, "sample_doubt": SAMPLE_DOUBT,
            "sample_floor": model.sample_floor}
    return {"world_model": choice, "world": asdict(world), "draw": draw, "imagined_turns": imagined_turns,
            "real_turns": turns, "imagined_return": imagined, "real_return": real,
            "gap_per_episode": round(imagined * scale - real, 4),
            "real_vs_greedy": _ratio(results, ""),
            "real_vs_greedy_with_greedy_co_player": _ratio(results, GREEDY_CO_PLAYER)}


def _ratio(results: dict[str, dict[str, Any]], suffix: str) -> float | None:
    """The agent's real return over greedy's, both beside the co-player that ``suffix`` names."""
    greedy = results.get(f"greedy{suffix}", {}).get("mean")
    return round(results[f"model{suffix}"]["mean"] / greedy, 4) if greedy else None


def dream(cfg, world: World, out: str | Path | None = None, command: str | None = None) -> Path:
    """Train ``cfg`` (an `rpg_env.experts.config.ExpertConfig`) in ``world``; the run folder."""
    from rpg_env.experts.train import train
    from rpg_worldmodel.checkpoint import choose_checkpoint

    choice = choose_checkpoint(world.checkpoint)  # a missing checkpoint fails before anything is made
    world = world.settled()
    results: dict[str, dict[str, Any]] = {}

    def final_eval(model_zip: Path) -> dict[str, dict[str, Any]]:
        results.update(real_and_imagined(model_zip, cfg, world))
        return results

    provenance = {"trained_in": world.env_id, "world_model": choice.describe(portable=True)}
    run_dir = train(cfg, out, command=command, make_env=imagined_envs(world), final_eval=final_eval,
                    extra_provenance=provenance)
    record = dream_record(results, world)
    (run_dir / "dream.json").write_text(json.dumps(record, indent=2) + "\n")
    of_greedy = f" ({record['real_vs_greedy']:.0%} of greedy)" if record["real_vs_greedy"] is not None else ""
    print(f"imagined return {record['imagined_return']:.1f} over at most {record['imagined_turns']} turns, "
          f"real return {record['real_return']:.1f} over at most {record['real_turns']}{of_greedy}; "
          f"imagination minus reality per episode {record['gap_per_episode']:+.1f}")
    return run_dir


def build_parser() -> argparse.ArgumentParser:
    from rpg_base.typed_config.config import format_keys
    from rpg_env.experts.config import TRAINABLE_ALGOS, ExpertConfig

    parser = ArgumentParser(prog="python -m rpg_worldmodel.dream", description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="config keys (as python -m rpg_env.experts train):\n\n"
                                   + format_keys(ExpertConfig))
    parser.add_argument("--algo", choices=TRAINABLE_ALGOS, default="ppo")
    parser.add_argument("--checkpoint", default=PRETRAINED_NAME,
                        help="world model of any game: a run folder, a checkpoint, or 'pretrained' "
                             "(the shipped one)")
    parser.add_argument("--config", default=None, help="YAML config (default: configs/dream_<algo>.yaml)")
    parser.add_argument("--out", type=output_folder, default=None,
                        help="run folder (default: runs/dream/<algo>-<time>-s<seed>)")
    parser.add_argument("--argmax", action="store_true", help="imagine the most likely views, not samples")
    parser.add_argument("--temperature", type=positive_float, default=1.0)
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="torch threads of the imagined steps (the agent's: config key torch_threads)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="config overrides, e.g. timesteps=100000")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = dream_config(args.algo, args.config, args.overrides, checkpoint_game(args.checkpoint))
    world = World(args.checkpoint, sample=not args.argmax, temperature=args.temperature,
                  torch_threads=args.threads)
    out = str(args.out) if args.out else str(Path("runs") / "dream" / f"{cfg.algo}-{_stamp()}-s{cfg.seed}")
    words = list(argv) if argv is not None else sys.argv[1:]
    command = "python -m rpg_worldmodel.dream " + portable_command(words)
    print(f"run folder: {dream(cfg, world, out, command)}")
    return 0


def _stamp() -> str:
    import time

    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


if __name__ == "__main__":
    run_command(main)
