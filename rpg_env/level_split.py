"""Seed 003's train/test split of generated levels for the command line, and its two recorded files.

The benchmarks that ask whether an agent or a world model generalises to unseen levels share one
set of options and one check (`add_level_split_arguments`, `level_split`); the world-model ones
record a policy on each side into its own file (`record_level_split`: unseen levels live in their
own file, the split rule of docs/trajectory-format.md, "Levels").
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rpg_base.cli import positive_int
from rpg_env.game.levels import DISTRIBUTION_MODES, UNSEEN_LEVEL_COUNT, held_out_levels
from rpg_env.record import record

#: The two sides of the split, in the order they are recorded and reported.
LEVEL_SETS = ("training levels", "unseen levels")


def add_level_split_arguments(parser: argparse.ArgumentParser) -> None:
    """``--train-levels`` (ids 0 .. N-1), ``--test-start`` (the first unseen id) and ``--mode``."""
    parser.add_argument("--train-levels", type=positive_int, default=200,
                        help="levels trained on (ids 0 .. N-1)")
    parser.add_argument("--test-start", type=positive_int, default=1_000_000,
                        help=f"first unseen level id (>= --train-levels; {UNSEEN_LEVEL_COUNT:,} ids "
                             "from there)")
    parser.add_argument("--mode", choices=DISTRIBUTION_MODES, default="easy",
                        help="rooms (easy) or maze (hard)")


def level_split(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The env keyword arguments of each side of the split (`LEVEL_SETS` order); a parser error (one
    line, exit 2) where the unseen levels meet the training ones or run past the last level seed."""
    try:
        train, unseen = held_out_levels(args.train_levels, args.test_start, args.mode)
    except ValueError as err:
        parser.error(f"--test-start {err}")
    return dict(zip(LEVEL_SETS, (train, unseen), strict=True))


def record_level_split(policy: str, folder: Path, levels: dict[str, dict[str, Any]],
                       games: dict[str, int]) -> tuple[dict[str, Path], dict[str, dict[str, Any]]]:
    """``games[side]`` games of ``policy`` on each side's levels, the learner's streams only, into
    ``folder/0.h5`` and ``folder/1.h5`` (recording seeds 0 and 1); the files and what `record` said."""
    files = {side: folder / f"{i}.h5" for i, side in enumerate(levels)}
    recorded = {side: record(policy, files[side], games[side], seed=i, num_envs=64, mode="w",
                             env_kwargs=levels[side], policy_id=policy, record_co_players=False,
                             progress=False)
                for i, side in enumerate(levels)}
    return files, recorded
