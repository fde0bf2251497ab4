"""Agents that remember against agents that do not, at equal real steps (seed 002).

Two tasks, each agent trained with the project's configs from ``rpg_env/experts/configs``:

- ``proof``: the memory proof task ``MemoryCue-v0`` (a cue at the first turn says which end of a
  corridor pays; ``memorycue-<algo>.yaml``). Figure: the share of ``--episodes`` unseen games won
  (acting greedily). A memoryless agent is at chance (0.5).
- ``variant``: Treasurehunt-v0's memory variant, ``item_visible_turns=K`` (an item shows for K
  turns after it appears, then reads as floor while it stays; ``<algo>.yaml`` with that setting
  and ``--steps`` steps). Figure: return per game on ``--episodes`` games, greedy and random beside.

Agents: ``trxl-ppo`` (TransformerXL memory, this project), ``recurrent-ppo`` (sb3-contrib's LSTM),
and the memoryless ``ppo`` and ``dqn`` on their configs' frame stacks (2 and 5 frames). Each seed
is one trained agent and its own evaluation games (env seeds from ``300,000 + 1,000 * seed``,
disjoint from training's and the in-training evaluation's); figures are means over ``--seeds``
with 95% t-intervals. CPU time is the training process's (all its threads), beside wall time and
env steps per wall second.

    python benchmarks/memory_agents.py                    # both tasks, 4 agents, 3 seeds (~1 h on 2 cores)
    python benchmarks/memory_agents.py --tasks proof --algos trxl-ppo ppo
    python benchmarks/memory_agents.py --quick            # 1 seed, a few thousand steps: a smoke check

Writes ``benchmarks/results/memory_agents.json`` and ``.png`` (``--out``); the run folders stay in
``--runs`` (default ``runs/memory_agents``; ``--quick`` writes no results, and its agents go to
``--runs`` if given, else to a temporary folder it removes). Killed, or its caller killed, it stops
within seconds (`rpg_base.cli.end_with_caller`). Goals: TrXL-PPO >= 0.95 on the proof task, memoryless
PPO at chance; on the variant TrXL-PPO >= 1.2x the best memoryless agent; TrXL-PPO >= 1,500 env
steps/s while training.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import rpg_env
from rpg_base.cli import (
    ArgumentParser,
    device_name,
    end_with_caller,
    non_negative_int,
    output_file,
    output_folder,
    positive_int,
    run_command,
)
from rpg_base.errors import InputError
from rpg_base.provenance import device_description, provenance
from rpg_base.results import pyplot, save_figure, write_results
from rpg_env.experts.config import EXPERT_CONFIG_DIR, TRAINABLE_ALGOS, ExpertConfig, load_expert_config
from rpg_env.experts.evaluate import mean_t_interval, run_episodes
from rpg_env.experts.train import train
from rpg_env.policies.registry import load_expert_policy

RESULTS = Path(__file__).resolve().parent / "results" / "memory_agents.json"
DEFAULT_RUNS = Path("runs") / "memory_agents"
TASKS = ("proof", "variant")
MEMORYLESS = ("ppo", "dqn")
EVAL_SEED_BASE, EVAL_SEED_STRIDE = 300_000, 1_000


def run_config(task: str, algo: str, seed: int, steps: int | None, visible_turns: int,
               episodes: int, device: str = "cpu") -> ExpertConfig:
    """``algo``'s config for ``task`` (its shipped file), with this benchmark's settings, training on
    ``device``."""
    base = load_expert_config(None, EXPERT_CONFIG_DIR / (f"memorycue-{algo}.yaml" if task == "proof"
                                                         else f"{algo}.yaml"))
    env = {**base.env, "item_visible_turns": visible_turns} if task == "variant" else base.env
    return replace(base, seed=seed, progress_bar=False, env=env, device=device,
                   total_timesteps=base.total_timesteps if steps is None else steps,
                   eval=replace(base.eval, final_episodes=episodes,
                                seed=EVAL_SEED_BASE + EVAL_SEED_STRIDE * seed)).validate()


def run_one(task: str, algo: str, seed: int, steps: int | None, visible_turns: int, episodes: int,
            root: Path, device: str = "cpu") -> dict[str, Any]:
    """Train one agent on ``task`` and score it (and, on the variant, greedy and random beside it)."""
    cfg = run_config(task, algo, seed, steps, visible_turns, episodes, device)
    run_dir = root / task / f"{algo}-s{seed}"
    times = run_dir / "benchmark_times.json"  # this script's CPU and wall time of the run
    if not (run_dir / "eval.json").is_file():  # finished runs (--resume) are read, not trained again
        started_cpu, started = time.process_time(), time.perf_counter()
        train(cfg, out=run_dir)
        times.write_text(json.dumps({"cpu_seconds": time.process_time() - started_cpu,
                                     "wall_seconds": time.perf_counter() - started}) + "\n")
    measured = json.loads(times.read_text()) if times.is_file() else {}
    cpu_seconds, wall_seconds = measured.get("cpu_seconds"), measured.get("wall_seconds")
    record = json.loads((run_dir / "provenance.json").read_text())
    if load_expert_config(path=run_dir / "config.yaml").to_dict() != cfg.to_dict():
        raise InputError(f"{run_dir} was trained with other settings than this command asks for; "
                         f"use another --runs folder")
    row = {"task": task, "algo": algo, "seed": seed, "steps": record["total_timesteps"],
           "train_seconds": record["train_seconds"],
           "cpu_seconds_with_eval": None if cpu_seconds is None else round(cpu_seconds, 1),
           "wall_seconds_with_eval": None if wall_seconds is None else round(wall_seconds, 1),
           "steps_per_second": record["total_timesteps"] / record["train_seconds"],
           "run": str(run_dir)}
    if task == "proof":
        returns = run_episodes(load_expert_policy(run_dir / "model.zip"), dict(cfg.env), episodes,
                               cfg.eval.seed, rpg_env.MEMORY_ENV_ID)
        row["success"] = float((returns > 0).mean())
    else:
        row["eval"] = json.loads((run_dir / "eval.json").read_text())  # model, greedy, random
    return row


def summarize_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per task and agent: the figure, speed and CPU time as means over seeds with 95% intervals;
    on the variant greedy and random too, and each agent's ratio to the best memoryless one."""
    summary: dict[str, Any] = {}
    for task in dict.fromkeys(r["task"] for r in runs):
        mine = [r for r in runs if r["task"] == task]
        rows: dict[str, Any] = {}
        for algo in dict.fromkeys(r["algo"] for r in mine):
            agent = [r for r in mine if r["algo"] == algo]
            figure = [r["success"] if task == "proof" else r["eval"]["model"]["mean"] for r in agent]
            rows[algo] = {"figure": mean_t_interval(figure),
                          "steps_per_second": mean_t_interval([r["steps_per_second"] for r in agent]),
                          "cpu_minutes": mean_t_interval([
                              None if r["cpu_seconds_with_eval"] is None else r["cpu_seconds_with_eval"] / 60
                              for r in agent]),
                          "seeds": [r["seed"] for r in agent]}
        if task == "variant":
            first = [r for r in mine if r["algo"] == mine[0]["algo"]]
            for who in ("greedy", "random"):
                rows[who] = {"figure": mean_t_interval([r["eval"][who]["mean"] for r in first])}
            memoryless = [rows[a]["figure"]["mean"] for a in MEMORYLESS if a in rows]
            best = max(memoryless) if memoryless else None
            for algo in rows:
                mean = rows[algo]["figure"]["mean"]
                rows[algo]["vs_best_memoryless"] = mean / best if best and mean is not None else None
        summary[task] = rows
    return summary


def _cell(cell: dict[str, Any] | None, fmt: str) -> str:
    if not cell or cell.get("mean") is None:
        return "-"
    ci = cell["ci95"]
    return format(cell["mean"], fmt) + (f" [{format(ci[0], fmt)}, {format(ci[1], fmt)}]" if ci else "")


def print_table(summary: dict[str, Any]) -> None:
    for task, rows in summary.items():
        what = "success (share of games won)" if task == "proof" else "return per game"
        print(f"\n{task}: {what}, mean over seeds [95% t-interval]")
        print(f"{'agent':<15} {what:<30} {'env steps/s':<26} {'CPU min':<20} vs best memoryless")
        for name, row in rows.items():
            ratio = row.get("vs_best_memoryless")
            fig_fmt = ".3f" if task == "proof" else ".1f"
            speed, cpu = _cell(row.get("steps_per_second"), ".0f"), _cell(row.get("cpu_minutes"), ".1f")
            print(f"{name:<15} {_cell(row['figure'], fig_fmt):<30} {speed:<26} {cpu:<20} "
                  f"{'' if ratio is None else f'{ratio:.2f}x'}")


def plot(summary: dict[str, Any], path: Path) -> None:
    """One panel per task: each agent's figure with its interval."""
    plt = pyplot()

    fig, axes = plt.subplots(1, len(summary), figsize=(5.5 * len(summary), 4), squeeze=False)
    for ax, (task, rows) in zip(axes[0], summary.items(), strict=True):
        names = list(rows)
        means = [rows[n]["figure"]["mean"] for n in names]
        errors = [[m - (rows[n]["figure"]["ci95"] or [m, m])[0] for n, m in zip(names, means, strict=True)],
                  [(rows[n]["figure"]["ci95"] or [m, m])[1] - m for n, m in zip(names, means, strict=True)]]
        colours = ["tab:green" if n in ("trxl-ppo", "recurrent-ppo") else "tab:grey" for n in names]
        ax.bar(range(len(names)), means, yerr=errors, color=colours, capsize=4)
        ax.set_xticks(range(len(names)), names, rotation=20)
        if task == "proof":
            ax.axhline(0.5, color="black", linestyle=":", label="chance")
            ax.set_ylabel("share of games won")
            ax.set_title("MemoryCue-v0 (memory proof task)")
            ax.legend()
        else:
            ax.set_ylabel("return per game")
            ax.set_title("Treasurehunt-v0, items visible for a few turns")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/memory_agents.py", description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS), help="which tasks to run")
    parser.add_argument("--algos", nargs="+", choices=TRAINABLE_ALGOS,
                        default=["trxl-ppo", "recurrent-ppo", "ppo", "dqn"],
                        help="agents to train (dqn has no memory-task config and is skipped there)")
    parser.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2],
                        help="one trained agent per seed, task and algorithm (distinct)")
    parser.add_argument("--steps", type=positive_int, default=150_000,
                        help="learner env steps per agent on the variant (the proof task: its configs' own)")
    parser.add_argument("--visible-turns", type=positive_int, default=2,
                        help="the variant's item_visible_turns: turns an item shows after it appears")
    parser.add_argument("--episodes", type=positive_int, default=100,
                        help="evaluation games per agent (>= 2)")
    parser.add_argument("--quick", action="store_true",
                        help="1 seed, 4,096 steps, 10 games: a smoke check (writes no results; its agents go "
                             "to --runs if given, else to a temporary folder removed at the end)")
    parser.add_argument("--runs", type=output_folder, default=None,
                        help=f"where the agents' run folders go (must not hold them already; default "
                             f"{DEFAULT_RUNS}, or a temporary folder with --quick)")
    parser.add_argument("--resume", action="store_true",
                        help="read the agents already finished in --runs (same settings) and train the rest; "
                             "their CPU time is not known again (their training seconds are)")
    parser.add_argument("--device", type=device_name, default="cpu",
                        help="torch device the agents train on (the config's device): cpu or cuda[:N]")
    parser.add_argument("--out", type=output_file, default=RESULTS, help="JSON output path (.png beside it)")
    return parser


@contextlib.contextmanager
def runs_folder(parser: ArgumentParser, quick: bool, runs: Path | None, resume: bool) -> Iterator[Path]:
    """Where the agents' run folders go: ``--runs``, with or without ``--quick`` (a researcher who
    names a folder means to look in it), else the default, or with ``--quick`` a temporary folder
    removed at the end, also when the benchmark is killed (`end_with_caller`). A used folder needs
    ``--resume``; ``--resume`` with ``--quick`` needs the folder of the quick run it resumes."""
    if runs is None and quick:
        if resume:
            parser.error("--resume reads the agents already finished in --runs: with --quick, give the "
                         "--runs folder of the quick run to resume (without --runs a quick run trains in "
                         "a temporary folder, removed at the end)")
        with tempfile.TemporaryDirectory(prefix="memory_agents_") as tmp:
            yield Path(tmp)
        return
    runs = runs or DEFAULT_RUNS
    if runs.exists() and any(runs.iterdir()) and not resume:
        parser.error(f"--runs {runs} already holds run folders; choose another, or --resume to read "
                     f"the finished ones and train the rest (runs are never overwritten)")
    yield runs


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.episodes < 2:
        parser.error("--episodes must be >= 2 (a 95% interval needs two games)")
    parser.refuse_repeats(args, "seeds", "algos", "tasks")
    if args.quick:
        args.seeds, args.steps, args.episodes = args.seeds[:1], 4_096, 10
    started = time.perf_counter()
    with runs_folder(parser, args.quick, args.runs, args.resume) as args.runs:
        runs = train_all(args)
    summary = summarize_runs(runs)
    print_table(summary)
    if args.quick:
        return
    record = provenance(seed=args.seeds, tasks=args.tasks, algos=args.algos, steps=args.steps,
                        visible_turns=args.visible_turns, episodes=args.episodes, device=args.device,
                        device_name=device_description(args.device),
                        eval_seeds={s: EVAL_SEED_BASE + EVAL_SEED_STRIDE * s for s in args.seeds},
                        wall_seconds=round(time.perf_counter() - started, 1),
                        goals={"proof": "TrXL-PPO >= 0.95, memoryless PPO at chance (0.5)",
                               "variant": "TrXL-PPO >= 1.2x the best memoryless agent",
                               "speed": "TrXL-PPO >= 1,500 env steps/s on 2 CPU cores"},
                        summary=summary, runs=runs)
    write_results(args.out, record, lambda png: plot(summary, png))


def train_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every agent ``args`` asks for, trained (or read, with ``--resume``) in ``args.runs`` and scored:
    a row each, printed as it comes."""
    runs = []
    for task in args.tasks:
        for algo in args.algos:
            if task == "proof" and not (EXPERT_CONFIG_DIR / f"memorycue-{algo}.yaml").is_file():
                continue
            for seed in args.seeds:
                steps = args.steps if task == "variant" or args.quick else None
                runs.append(run_one(task, algo, seed, steps, args.visible_turns, args.episodes, args.runs,
                                    args.device))
                last = runs[-1]
                figure = last["success"] if task == "proof" else last["eval"]["model"]["mean"]
                cpu = last["cpu_seconds_with_eval"]
                print(f"{task} {algo} seed {seed}: {figure:.3f} ({last['steps_per_second']:.0f} steps/s, "
                      f"{'-' if cpu is None else f'{cpu / 60:.1f}'} CPU min)", flush=True)
    return runs


if __name__ == "__main__":
    end_with_caller()  # killed, or its caller killed: it stops, its temporary folder removed
    run_command(main)
