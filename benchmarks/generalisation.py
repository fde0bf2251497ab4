"""Do the experts generalise to levels they never saw? Seed 003's protocol, after ProcGen.

Each agent is trained with the project's expert config (``rpg_env/experts/configs/<algo>.yaml``)
on ``--train-levels`` generated levels (level ids ``0 .. N-1``, ``--mode`` rooms or maze; the
default open room is not among them), then plays ``--episodes`` games on those levels and as
many on unseen levels: ids from ``--test-start`` on, a range that training's never meets. Greedy
and random play the same games beside it: greedy's own gap says how much harder the unseen
levels drawn are to a player that learns nothing. Each seed plays its own games (evaluation env
seeds from ``200,000 + 1,000 * seed``, disjoint from training's ``seed .. seed + n_envs - 1`` and
the in-training evaluation's ``seed + 1,000,003``), so the spread over seeds holds both the
training's randomness and which levels and games were drawn.

The gap of a run is ``(train - unseen) / |train|``, its return on the training levels less that
on unseen ones as a share of the first, and ``gap_minus_greedy`` that less greedy's gap on the same
games. Every figure is a mean over ``--seeds`` with a 95% t-interval (a seed is the unit: one
trained agent and one draw of games).

    python benchmarks/generalisation.py                       # DQN, 3 seeds, ~10 min on 2 cores
    python benchmarks/generalisation.py --algos dqn ppo --steps 200000
    python benchmarks/generalisation.py --quick               # 1 seed, a few thousand steps: a smoke check

Writes ``benchmarks/results/generalisation.json`` and ``.png`` (``--out``). Goal: DQN's gap on 200
levels <= 10% of its training-level return.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rpg_base.cli import ArgumentParser, non_negative_int, output_file, positive_int, run_command
from rpg_base.provenance import provenance
from rpg_base.results import pyplot, save_figure, write_results
from rpg_env.experts.config import load_expert_config
from rpg_env.experts.evaluate import MAX_BATCH, compare, mean_t_interval
from rpg_env.experts.train import train
from rpg_env.level_split import add_level_split_arguments, level_split

RESULTS = Path(__file__).resolve().parent / "results" / "generalisation.json"
#: The agents this benchmark can train (the frame-stacked SB3 experts' algorithms).
GENERALISATION_ALGOS = ("dqn", "ppo")
#: Seed s plays its evaluation games on env seeds ``EVAL_SEED_BASE + EVAL_SEED_STRIDE * s`` on
#: (one per batch of `rpg_env.experts.evaluate.MAX_BATCH` games).
EVAL_SEED_BASE, EVAL_SEED_STRIDE = 200_000, 1_000
#: The largest seed whose evaluation seeds stay below the in-training evaluation's (seed + 1,000,003).
MAX_SEED = (1_000_000 - EVAL_SEED_BASE) // EVAL_SEED_STRIDE - 1


def gap(train_return: float, unseen_return: float) -> float | None:
    """``(train - unseen) / |train|``: the share of the training-level return lost on unseen levels
    (None where the training-level return is 0: no share of it can be lost)."""
    return (train_return - unseen_return) / abs(train_return) if train_return else None


def run_one(algo: str, seed: int, steps: int, sets: dict[str, dict[str, Any]], episodes: int,
            root: Path) -> dict[str, Any]:
    """Train one agent on the training levels, play it, greedy and random on both level sets."""
    base = load_expert_config(algo)
    cfg = replace(base, seed=seed, total_timesteps=steps, env={**base.env, **sets["train"]},
                  eval=replace(base.eval, final_episodes=episodes,
                               seed=EVAL_SEED_BASE + EVAL_SEED_STRIDE * seed)).validate()
    run_dir = train(cfg, out=root / f"{algo}-s{seed}")
    train_seconds = json.loads((run_dir / "provenance.json").read_text())["train_seconds"]
    on_train = json.loads((run_dir / "eval.json").read_text())  # `compare` on the training levels
    env = {**cfg.env, **sets["unseen"]}
    on_unseen = compare(run_dir / "model.zip", episodes=episodes, seed=cfg.eval.seed, env_kwargs=env)
    row = {"algo": algo, "seed": seed, "train_seconds": train_seconds,
           "train": on_train, "unseen": on_unseen}
    row["gap"] = {who: gap(on_train[who]["mean"], on_unseen[who]["mean"]) for who in on_train}
    model_gap, greedy_gap = row["gap"]["model"], row["gap"]["greedy"]
    row["gap_minus_greedy"] = None if model_gap is None or greedy_gap is None else model_gap - greedy_gap
    return row


def summarize_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per algorithm, and for greedy and random beside them (the games of the first algorithm's
    runs): returns on both level sets and the gap, each a mean over seeds with a 95% t-interval."""
    summary: dict[str, Any] = {}
    algos = list(dict.fromkeys(r["algo"] for r in runs))
    rows = [(algo, "model", [r for r in runs if r["algo"] == algo]) for algo in algos]
    rows += [(who, who, [r for r in runs if r["algo"] == algos[0]]) for who in ("greedy", "random")]
    for name, key, mine in rows:
        summary[name] = {f"{where}_return": mean_t_interval([r[where][key]["mean"] for r in mine])
                         for where in ("train", "unseen")}
        summary[name]["gap"] = mean_t_interval([r["gap"][key] for r in mine])
        if key == "model":
            summary[name]["gap_minus_greedy"] = mean_t_interval([r["gap_minus_greedy"] for r in mine])
            summary[name]["train_wall_minutes_per_agent"] = statistics.fmean(r["train_seconds"]
                                                                             for r in mine) / 60
    return summary


def _interval_text(cell: dict[str, Any], fmt: str) -> str:
    if cell["mean"] is None:
        return "undefined"
    ci = cell["ci95"]
    return format(cell["mean"], fmt) + (f" [{format(ci[0], fmt)}, {format(ci[1], fmt)}]" if ci else "")


def print_table(summary: dict[str, Any]) -> None:
    print(f"\nmean over seeds [95% t-interval]\n{'policy':<8} {'training levels':<24} {'unseen levels':<24} "
          f"{'gap (share of training return)':<32} gap minus greedy's")
    for who, row in summary.items():
        train = row["train_return"]
        near_zero = train["ci95"] is not None and train["ci95"][0] <= 0 <= train["ci95"][1]
        gap_text = "n/a (training return ~0)" if near_zero else _interval_text(row["gap"], "+.1%")
        minus = _interval_text(row["gap_minus_greedy"], "+.1%") if "gap_minus_greedy" in row else ""
        print(f"{who:<8} {_interval_text(train, '.1f'):<24} "
              f"{_interval_text(row['unseen_return'], '.1f'):<24} {gap_text:<32} {minus}")


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    """Return on training levels against unseen ones: a bar per policy, a dot per seed."""
    plt = pyplot()

    names = [*dict.fromkeys(r["algo"] for r in runs), "greedy", "random"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for offset, where, colour in ((-0.2, "train", "tab:blue"), (0.2, "unseen", "tab:orange")):
        for i, name in enumerate(names):
            key = "model" if name not in ("greedy", "random") else name
            first = runs[0]["algo"]
            mine = [r for r in runs if r["algo"] == (name if key == "model" else first)]
            values = [r[where][key]["mean"] for r in mine]
            ax.bar(i + offset, statistics.fmean(values), width=0.4, color=colour,
                   label=f"{where} levels" if i == 0 else None)
            ax.scatter([i + offset] * len(values), values, color="black", s=10, zorder=3)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("return per episode")
    ax.set_title("Generalisation to unseen levels")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/generalisation.py", description=__doc__.split("\n")[0])
    parser.add_argument("--algos", nargs="+", choices=GENERALISATION_ALGOS, default=["dqn"],
                        help="agents to train")
    parser.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2],
                        help=f"one trained agent per seed and algorithm (distinct, 0..{MAX_SEED})")
    parser.add_argument("--steps", type=positive_int, default=200_000,
                        help="learner env steps per agent (the DQN expert's default)")
    add_level_split_arguments(parser)
    parser.add_argument("--episodes", type=positive_int, default=100,
                        help=f"games per policy and level set (2..{EVAL_SEED_STRIDE * MAX_BATCH:,})")
    parser.add_argument("--quick", action="store_true",
                        help="1 seed, 3,000 steps, 10 games: a smoke check (writes nothing)")
    parser.add_argument("--out", type=output_file, default=RESULTS, help="JSON output path (.png beside it)")
    return parser


def checked(parser: ArgumentParser, args) -> dict[str, dict[str, Any]]:
    """The level sets (``train``, ``unseen``) of valid arguments; one error line otherwise."""
    train, unseen = level_split(parser, args).values()
    if not 2 <= args.episodes <= EVAL_SEED_STRIDE * MAX_BATCH:
        parser.error(f"--episodes must be in 2..{EVAL_SEED_STRIDE * MAX_BATCH:,} (a 95% interval needs "
                     f"two games; more would reach the next seed's evaluation games)")
    if max(args.seeds) > MAX_SEED:
        parser.error(f"--seeds must be in 0..{MAX_SEED} (larger ones' evaluation games would meet the "
                     f"in-training evaluation's), got {max(args.seeds)}")
    parser.refuse_repeats(args, "seeds", "algos")
    return {"train": train, "unseen": unseen}


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    sets = checked(parser, args)
    if args.quick:
        args.seeds, args.steps, args.episodes = args.seeds[:1], 3_000, 10
    started = time.perf_counter()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for algo in args.algos:
            for seed in args.seeds:
                runs.append(run_one(algo, seed, args.steps, sets, args.episodes, Path(tmp)))
                print(f"{algo} seed {seed}: train {runs[-1]['train']['model']['mean']:.1f}, unseen "
                      f"{runs[-1]['unseen']['model']['mean']:.1f} (greedy "
                      f"{runs[-1]['train']['greedy']['mean']:.1f}"
                      f" / {runs[-1]['unseen']['greedy']['mean']:.1f})", flush=True)
    summary = summarize_runs(runs)
    print_table(summary)
    if args.quick:
        return
    record = provenance(seed=args.seeds, algos=args.algos, steps=args.steps, episodes=args.episodes,
                        level_sets=sets,
                        eval_seeds={s: EVAL_SEED_BASE + EVAL_SEED_STRIDE * s for s in args.seeds},
                        wall_seconds=round(time.perf_counter() - started, 1),
                        goal="DQN's gap on 200 levels <= 10% of its training-level return",
                        summary=summary, runs=runs)
    write_results(args.out, record, lambda png: plot(runs, png))


if __name__ == "__main__":
    run_command(main)
