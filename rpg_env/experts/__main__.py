"""``python -m rpg_env.experts {train,evaluate,profile,watch}``: see docs/experts.md."""

from __future__ import annotations

import argparse
import sys

from rpg_base.cli import (
    ArgumentParser,
    int_in,
    non_negative_int,
    output_file,
    output_folder,
    positive_int,
    run_command,
)
from rpg_base.provenance import portable_command
from rpg_base.typed_config.config import format_keys
from rpg_env.experts.config import TRAINABLE_ALGOS, ExpertConfig
from rpg_env.experts.evaluate import DEFAULT_EPISODES, DEFAULT_SEED


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m rpg_env.experts",
        description="Train, evaluate, profile and watch experts (SB3 DQN/PPO, RecurrentPPO, TrXL-PPO) on "
                    "Treasurehunt-v0, the memory task MemoryCue-v0, or any Gymnasium env (docs/experts.md).")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train an expert and write a run folder",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="config keys (env.* and hyperparams.* are TreasurehuntEnv and SB3 "
                                  "arguments, listed here for DQN):\n\n" + format_keys(ExpertConfig))
    train.add_argument("--algo", choices=TRAINABLE_ALGOS, default=None,
                       help="algorithm (default: the config's, else dqn)")
    train.add_argument("--config", default=None,
                       help="YAML config (default: rpg_env/experts/configs/<algo>.yaml; the memory task: "
                            "configs/memorycue-<algo>.yaml)")
    train.add_argument("--env-id", default=None,
                       help="train in this Gymnasium env instead of the config's ('package:Id' imports the "
                            "package first); the shipped config's env arguments (Treasurehunt's) are left "
                            "out, and a --config file that sets env or wrappers for another env is refused")
    train.add_argument("--env-kwargs", default=None, metavar="YAML",
                       help="the env's keyword arguments as a YAML mapping, e.g. '{agent_view_size: 3}' "
                            "(replaces the config's env section)")
    train.add_argument("--wrappers", nargs="+", default=None, metavar="MODULE:CLASS",
                       help="Gymnasium wrappers applied in order (replaces the config's), e.g. "
                            "minigrid.wrappers:ImgObsWrapper")
    train.add_argument("--out", type=output_folder, default=None,
                       help="run folder (default: runs/experts/<algo>-<time>-s<seed>)")
    train.add_argument("overrides", nargs="*", metavar="key=value",
                       help="config overrides, e.g. seed=1 timesteps=50000 env.vision_radius=3 "
                            "hyperparams.learning_rate=3e-4")

    evaluate = sub.add_parser("evaluate", help="model vs greedy vs random on fixed seeds")
    evaluate.add_argument("model", help="expert .zip")
    evaluate.add_argument("--episodes", type=int_in(2), default=DEFAULT_EPISODES,
                          help="games per policy (>= 2, for the 95%% interval)")
    evaluate.add_argument("--seed", type=non_negative_int, default=DEFAULT_SEED, help="first evaluation seed")
    evaluate.add_argument("--json", type=output_file, default=None,
                          help="also write the figures as JSON here")
    evaluate.add_argument("--sampled", action="store_true",
                          help="play the model with actions drawn from its policy (seeded), as seed 002 "
                               "plays its agents, instead of its likeliest actions")

    profile = sub.add_parser("profile", help="how experts play: pickups, bumps, actions, agreement")
    profile.add_argument("models", nargs="+", help="expert .zip files")
    profile.add_argument("--episodes", type=positive_int, default=DEFAULT_EPISODES)
    profile.add_argument("--seed", type=non_negative_int, default=DEFAULT_SEED, help="first evaluation seed")
    profile.add_argument("--json", type=output_file, default=None, help="also write the figures as JSON here")

    watch = sub.add_parser("watch", help="show the expert in a pygame window or write a GIF/MP4")
    watch.add_argument("model", help="expert .zip")
    watch.add_argument("--out", type=output_file, default=None,
                       help="write a .gif or .mp4 instead of opening a window")
    watch.add_argument("--seed", type=non_negative_int, default=0)
    watch.add_argument("--episodes", type=positive_int, default=1)
    watch.add_argument("--fps", type=positive_int, default=8)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "train":
        from rpg_env.experts.config import load_expert_config
        from rpg_env.experts.train import train

        cfg = load_expert_config(args.algo, args.config, args.overrides, env_id=args.env_id,
                                 env_kwargs=args.env_kwargs, wrappers=args.wrappers)
        words = list(argv) if argv is not None else sys.argv[1:]
        command = "python -m rpg_env.experts " + portable_command(words)
        run_dir = train(cfg, args.out, command=command)
        print(f"run folder: {run_dir}")
    elif args.command == "evaluate":
        from rpg_env.experts.evaluate import evaluate_cli

        evaluate_cli(args.model, episodes=args.episodes, seed=args.seed, json_path=args.json,
                     sampled=args.sampled)
    elif args.command == "profile":
        from rpg_env.experts.evaluate import profile_cli

        profile_cli(args.models, episodes=args.episodes, seed=args.seed, json_path=args.json)
    else:
        from rpg_env.experts.watch import watch

        result = watch(args.model, out=args.out, seed=args.seed, episodes=args.episodes, fps=args.fps)
        returns = ", ".join(f"{r:+g}" for r in result["returns"])
        wrote = f"; wrote {result['frames']} frames to {args.out}" if args.out else ""
        print(f"returns: {returns}{wrote}")
    return 0


if __name__ == "__main__":
    run_command(main)
