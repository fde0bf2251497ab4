"""Does the world model generalise to levels it never saw? Seed 003's protocol for the predictor.

One policy (``--policy``, greedy by default: it plays every level, the shipped DQN knows only the
open room) is recorded on ``--train-levels`` generated levels (ids ``0 .. N-1``, ``--mode``) and,
into another file, on unseen levels (ids from ``--test-start`` on; the split rule of
docs/trajectory-format.md, "Levels": unseen levels live in their own file, so no split of the
training file can hold them). The default world model trains on the first file (its own
train/val/test split by game) and is scored by the pipeline's evaluation on the held-out games
of the training levels and on every game of the unseen ones: view CE, the floor (a replay of the
recorded games), the excess over it, the motion and memory oracles, the cells-seen-ago
categories and the next action.

The gap is ``excess on unseen levels / excess on held-out games of the training levels - 1``:
how much more the model errs, above what the game makes unpredictable, on a map it never saw.
Its interval is conservative: the ratio's range over the two files' own 95% bootstrap intervals
(the files' games are drawn independently), overall and per category of cell.

    python benchmarks/worldmodel_generalisation.py            # ~9 min on 2 cores
    python benchmarks/worldmodel_generalisation.py --quick    # a tiny model: a smoke check (no JSON)

Writes ``benchmarks/results/worldmodel_generalisation.json`` and ``.png``. Goal: excess over the
floor on unseen levels within 20% of the excess on the training levels.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from rpg_base.cli import ArgumentParser, output_file, positive_int, run_command
from rpg_base.errors import InputError
from rpg_base.provenance import pinned_torch_threads, provenance
from rpg_base.results import pyplot, save_figure, write_results
from rpg_env.level_split import LEVEL_SETS, add_level_split_arguments, level_split, record_level_split

RESULTS = Path(__file__).resolve().parent / "results" / "worldmodel_generalisation.json"
CATEGORIES = ("in_view", "seen_1_5", "seen_6_20", "seen_21_plus", "never_seen", "spawned", "other_agent")
PREDICTORS = ("model", "memory_oracle", "motion_oracle", "copy")


def train_model(data: Path, root: Path, quick: bool, extra: list[str]) -> tuple[Path, float]:
    """The default world model trained on ``data``: (best checkpoint, seconds)."""
    from rpg_worldmodel.config import load_world_model_config
    from rpg_worldmodel.train import train

    overrides = ["train.progress=false"]
    if quick:
        overrides += ["model.width=32", "model.num_heads=2", "model.num_layers=1", "model.refiner_layers=0",
                      "train.max_steps=20", "train.eval_every=10", "train.checkpoint_every=10",
                      "train.warmup_steps=2", "data.max_val_windows=64"]
    cfg = load_world_model_config(None, [*overrides, *extra])
    cfg.data.path, cfg.out_dir = str(data), str(root / "model")
    result = train(cfg)
    return result.best, result.wall_s


def score(checkpoint: Path, files: dict[str, Path], quick: bool) -> tuple[dict[str, dict[str, Any]], int]:
    """Each file's figures (the training file's held-out games, every game of the unseen file) and
    the model's parameter count."""
    from rpg_worldmodel.evaluation.run import EvalOptions, Evaluation

    ev = Evaluation(checkpoint, list(files.values()), EvalOptions(num_boot=200 if quick else 1000,
                                                                  theory_of_mind=False))
    keys = ["view_ce", "floor_view_ce", "excess_view_ce", *(f"excess_{c}" for c in CATEGORIES)]
    out = {}
    for name, path in files.items():
        table = ev.evaluate_file(path, num_examples=0)
        preds = table["predictors"]
        row: dict[str, Any] = {"episodes": table.get("episodes"), "floor_method": table["floor_method"]}
        for who in PREDICTORS:
            if who not in preds:
                continue
            row[who] = {k: preds[who][k] for k in keys if k in preds[who]}
        row["model"]["action_acc"] = preds["model"]["action_acc"]
        row["share"] = {c: preds["model"][f"share_{c}"]["value"] for c in CATEGORIES}
        out[name] = row
    return out, ev.model.num_parameters()


def gap_interval(train: dict[str, float], unseen: dict[str, float]) -> dict[str, float] | None:
    """``unseen / train - 1`` for two ``{"value", "lo", "hi"}`` figures, with the range it takes over
    their intervals; None where the training figure's interval reaches 0 (no ratio to take)."""
    if train["lo"] <= 0:
        return None
    return {"value": unseen["value"] / train["value"] - 1,
            "lo": unseen["lo"] / train["hi"] - 1, "hi": unseen["hi"] / train["lo"] - 1}


def summarise(scores: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The gap of the excess over the floor (unseen / training levels - 1), overall and per category."""
    train, unseen = scores["training levels"]["model"], scores["unseen levels"]["model"]
    return {"excess_gap": gap_interval(train["excess_view_ce"], unseen["excess_view_ce"]),
            "excess_gap_per_category": {c: gap_interval(train[f"excess_{c}"], unseen[f"excess_{c}"])
                                        for c in CATEGORIES},
            "action_acc_training_levels": train["action_acc"]["value"],
            "action_acc_unseen_levels": unseen["action_acc"]["value"],
            "goal": "excess over the floor on unseen levels within 20% of the training levels' "
                    "(excess_gap <= 0.2)"}


def print_table(scores: dict[str, dict[str, Any]], summary: dict[str, Any]) -> None:
    print(f"\n{'games':<16} {'view CE':>8} {'floor':>8} {'excess (model)':>22} {'motion oracle':>14} "
          f"{'memory oracle':>14} {'action acc':>10}")
    for name, row in scores.items():
        m = row["model"]
        ex = m["excess_view_ce"]
        print(f"{name:<16} {m['view_ce']['value']:>8.4f} {m['floor_view_ce']['value']:>8.4f} "
              f"{ex['value']:>8.4f} [{ex['lo']:.4f}, {ex['hi']:.4f}] "
              f"{row['motion_oracle']['excess_view_ce']['value']:>14.4f} "
              f"{row['memory_oracle']['excess_view_ce']['value']:>14.4f} {m['action_acc']['value']:>10.3f}")
    def text(gap: dict[str, float] | None) -> str:
        return "undefined" if gap is None else f"{gap['value']:+.1%} [{gap['lo']:+.1%}, {gap['hi']:+.1%}]"

    print(f"excess gap (unseen / training levels - 1): {text(summary['excess_gap'])}")
    for category, gap in summary["excess_gap_per_category"].items():
        print(f"  {category:<14} {text(gap)}")


def plot(scores: dict[str, dict[str, Any]], path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(8, 3.6))
    x = np.arange(len(CATEGORIES))
    for i, (name, row) in enumerate(scores.items()):
        values = [row["model"][f"excess_{c}"]["value"] for c in CATEGORIES]
        ax.bar(x + i * 0.4, values, 0.4, label=f"model, {name}")
    ax.set_xticks(x + 0.2, CATEGORIES, rotation=20, fontsize=8)
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_ylabel("view CE minus the floor (nats/cell)")
    ax.set_title("World model on training levels (held-out games) and unseen levels")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/worldmodel_generalisation.py",
                            description=__doc__.split("\n")[0])
    parser.add_argument("--policy", default="greedy",
                        help="the recorded policy (anything record --policy takes)")
    add_level_split_arguments(parser)
    parser.add_argument("--games", type=positive_int, default=1500,
                        help="games recorded on the training levels")
    parser.add_argument("--unseen-games", type=positive_int, default=150,
                        help="games recorded on unseen levels")
    parser.add_argument("--threads", type=positive_int, default=2, help="torch CPU threads")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="world model config overrides")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny model, 20 steps, 40 + 10 games (no JSON)")
    parser.add_argument("--out", type=output_file, default=RESULTS, help="JSON output path (.png beside it)")
    return parser


def main(argv: list[str] | None = None) -> None:
    from rpg_env.policies.registry import make_policy
    from rpg_worldmodel.config import load_world_model_config

    parser = build_parser()
    args = parser.parse_args(argv)
    levels = level_split(parser, args)
    try:  # an unknown policy fails before anything is recorded
        make_policy(args.policy)
    except (TypeError, ValueError) as err:
        raise InputError(f"--policy: {err}") from err
    load_world_model_config(None, args.set)  # as do unknown overrides
    games, unseen_games = (40, 10) if args.quick else (args.games, args.unseen_games)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, pinned_torch_threads(args.threads):
        root = Path(tmp)
        games_per_side = dict(zip(LEVEL_SETS, (games, unseen_games), strict=True))
        files, recorded = record_level_split(args.policy, root, levels, games_per_side)
        checkpoint, train_seconds = train_model(files["training levels"], root, args.quick, args.set)
        scores, parameters = score(checkpoint, files, args.quick)
    summary = summarise(scores)
    print_table(scores, summary)
    if args.quick:
        return
    record_ = provenance(seed=0, policy=args.policy, level_sets=levels, overrides=args.set,
                         recorded={k: {f: v[f] for f in ("games", "agent_steps", "mean_return")}
                                   for k, v in recorded.items()},
                         train_seconds=round(train_seconds, 1), parameters=parameters,
                         wall_seconds=round(time.perf_counter() - started, 1), summary=summary, scores=scores)
    write_results(args.out, record_, lambda png: plot(scores, png))


if __name__ == "__main__":
    run_command(main)
