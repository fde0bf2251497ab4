"""``python -m rpg_env.trajectories {info,validate,repair}``: inspect, check and repair files.

``validate`` exits with status 1 when it finds problems; bad input (a missing, foreign or
damaged file, an existing destination) is one ``error:`` line and status 2.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import numpy as np

from rpg_base.cli import ArgumentParser, output_file, run_command
from rpg_env.trajectories.maintenance import repair, validate
from rpg_env.trajectories.reader import TrajectoryFile


def info(path: str) -> str:
    """A summary of a file: its repr, rules, games and runs, then per agent and policy the
    number of streams, steps and the mean return."""
    with TrajectoryFile(path) as tf:
        ep = tf.episodes
        lines = [repr(tf), f"  env_kwargs: {json.dumps(tf.meta['env_kwargs'], sort_keys=True)}",
                 f"  games: {len(np.unique(ep['game_id']))}, runs: {len(tf.runs)}, "
                 f"file size: {tf.path.stat().st_size / 1e6:.2f} MB"]
        levels = tf.levels
        if len(levels) and levels.max() >= 0:
            lines.append(f"  levels: {len(np.unique(levels))} distinct, "
                         f"{int(levels.min())}..{int(levels.max())}")
        if len(ep):
            lines.append(f"  {'agent':>5} {'policy':<24} {'streams':>8} {'steps':>9} {'mean return':>12}")
            keys = sorted(set(zip(ep["agent_id"].tolist(), ep["policy_id"].tolist(), strict=True)))
            for agent, pol in keys:
                sel = (ep["agent_id"] == agent) & (ep["policy_id"] == pol)
                lines.append(f"  {agent:>5} {pol:<24} {int(sel.sum()):>8} {int(ep['length'][sel].sum()):>9} "
                             f"{float(ep['return'][sel].mean()):>12.2f}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m rpg_env.trajectories",
                                     description="Inspect, check and repair trajectory files.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="summarize a file")
    p.add_argument("path")
    p = sub.add_parser("validate", help="check a file (exit status 1 when problems are found)")
    p.add_argument("path")
    p.add_argument("--deep", action="store_true", help="also read and check every step")
    p = sub.add_parser("repair", help="copy the committed episodes into a fresh, appendable file")
    p.add_argument("src")
    p.add_argument("dst", type=output_file)
    p.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (1: `validate` found problems). Bad input
    raises `rpg_base.errors.InputError` (e.g. `TrajectoryFormatError`) or a file-system error."""
    args = build_parser().parse_args(argv)
    if args.command == "info":
        print(info(args.path))
        return 0
    if args.command == "validate":
        problems = validate(args.path, deep=args.deep)
        for problem in problems:
            print(f"{args.path}: {problem}")
        if not problems:
            print(f"{args.path}: OK")
        return 1 if problems else 0
    n = repair(args.src, args.dst, overwrite=args.overwrite, progress=True)
    print(f"copied {n} committed episodes from {args.src} to {args.dst}")
    return 0


if __name__ == "__main__":
    run_command(main)
