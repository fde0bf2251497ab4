"""Held-out evaluation of a trained world model, beside baselines, across agents and under masks.

    python -m rpg_worldmodel.evaluate --checkpoint CK --data F [--data G ...] [--out DIR]
        [--masks none random_cells gem bone food wall] [--masked-checkpoint CK2 ...]

The model runs in eval mode under ``torch.inference_mode`` (no gradient, no optimizer: the
weights cannot change). Only held-out episodes are scored: on the checkpoint's own training
files (one or several), their part of the test split recorded in the checkpoint; on any other
file, all of its episodes (or its own test split with ``--split test``). Asking for training
episodes is refused unless ``--allow-training-episodes`` is given, and then every output is
labelled as such.

Which predictions are scored: every transition ``t -> t+1`` of an episode exactly once, with
as much history as the model takes (up to ``num_frames`` steps): all positions of the window
that starts at step 0, and the last position of every later window. Baselines are scored on
exactly the same transitions (see `rpg_worldmodel.evaluation.baselines`) and fitted on the
checkpoint's training split only. Every figure carries a percentile bootstrap interval over
games (the learner's and co-player's episodes of one game form one cluster); model-minus-baseline
differences use a paired bootstrap.

Where the error lives: every view predictor is also scored per cell category (in view, seen
before, never seen, spawned, the other agent) and against the floor, the lowest cross-entropy
the game allows (`rpg_worldmodel.evaluation.cells`; ``--floor``), beside the memory oracle.

Outputs (``--out``): ``metrics.json`` (every figure with its interval, plus provenance) and
``examples.npz`` (a few held-out views: last input, predicted, true) for the report.

The work is done by `rpg_worldmodel.evaluation`; this module is its command line only.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from rpg_base.cli import (
    ArgumentParser,
    device_name,
    int_in,
    non_negative_int,
    output_folder,
    positive_int,
    run_command,
)
from rpg_worldmodel.data.windows import CONTEXTS
from rpg_worldmodel.evaluation.cells import FLOOR_MODES
from rpg_worldmodel.evaluation.episodes import (
    SPLITS,
)
from rpg_worldmodel.evaluation.run import run_evaluation
from rpg_worldmodel.report.text import evaluation_summary


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m rpg_worldmodel.evaluate",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="checkpoint written by rpg_worldmodel.train")
    parser.add_argument("--data", action="append", required=True,
                        help="trajectory file (repeat for transfer: the training file first)")
    parser.add_argument("--out", type=output_folder, default=None,
                        help="folder for metrics.json and examples.npz")
    parser.add_argument("--masks", nargs="*", default=[], metavar="MASK",
                        help="evaluation-time input masks: none, random_cells or channels of the data to "
                             "hide (its items and wall, e.g. none random_cells gem wall)")
    parser.add_argument("--masked-checkpoint", action="append", default=[],
                        help="a checkpoint trained with cfg.train.train_mask, for the masking table")
    parser.add_argument("--split", default="auto", choices=SPLITS)
    parser.add_argument("--allow-training-episodes", action="store_true",
                        help="score training episodes anyway (results are marked as not held out)")
    parser.add_argument("--bootstrap", type=int_in(2), default=1000,
                        help="bootstrap replicates (>= 2)")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--batch-size", type=positive_int, default=256)
    parser.add_argument("--device", type=device_name, default="cpu")
    parser.add_argument("--context", default="full", choices=CONTEXTS,
                        help="full: every prediction with T steps of history (T times the compute); "
                             "stride: non-overlapping windows, history 1..T as in training")
    parser.add_argument("--floor", default="auto", choices=FLOOR_MODES,
                        help="how the floor (the lowest next-view CE the game allows) is found: replay the "
                             "recorded games (exact; refused when a game does not replay bit for bit), an "
                             "analytic lower bound, or auto (replay when the file can be replayed)")
    parser.add_argument("--rollout-horizon", type=non_negative_int, default=0, metavar="H",
                        help="also roll the model open-loop H steps from held-out starts on the recorded "
                             "actions and score every step (0: off; the pipeline uses 15)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    results = run_evaluation(args.checkpoint, args.data, args.out, args.masks, args.masked_checkpoint,
                             args.split, args.allow_training_episodes, args.bootstrap, args.seed,
                             args.batch_size, args.device, context=args.context,
                             rollout_horizon=args.rollout_horizon, floor=args.floor)
    print(evaluation_summary(results))
    if args.out:
        print(Path(args.out) / "metrics.json")
    return 0


if __name__ == "__main__":
    run_command(main)
