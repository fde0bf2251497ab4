"""Agents that remember against agents that do not, at equal real steps (seed 002).

Six tasks, each agent trained with the project's configs from ``rpg_env/experts/configs``:

- ``proof``: the memory proof task ``MemoryCue-v0`` (a cue at the first turn says which end of a
  corridor pays; ``memorycue-<algo>.yaml``). Figure: the share of ``--episodes`` unseen games won
  (acting greedily). A memoryless agent is at chance (0.5).
- ``variant``: Treasurehunt-v0's memory variant, ``item_visible_turns=K`` (an item shows for K
  turns after it appears, then reads as floor while it stays; ``<algo>.yaml`` with that setting
  and ``--steps`` steps). Figure: return per game on ``--episodes`` games, greedy and random beside.
- ``cartpole``: ``CartPoleMasked-v1``, CartPole-v1 without its velocities
  (``cartpolemasked-<algo>.yaml``). Figure: return per game (500 at most).
- ``minigrid``: ``MiniGrid-MemoryS9-v0`` with seed 002's 3x3 view as an 84x84 image and three
  actions (``minigrid-memory-<algo>.yaml``; the [minigrid] extra). Figure: share of games won.
- ``minigrid-cells``: the same task and view, read as one-hot cells (``OneHotViews``) instead of
  pixels (``minigrid-memory-onehot-<algo>.yaml``): what the agent sees is the same, the encoder a
  small grid CNN, about ten times faster on a CPU. Figure: share of games won.
- ``mysterypath``: Memory Gym's ``MysteryPath-Grid-v0``, origin and goal hidden
  (``mysterypath-grid-<algo>.yaml``; ``pip install --no-deps memory-gym``). Figure: share of
  games won.

Agents: ``trxl-ppo`` (TransformerXL memory, this project), ``recurrent-ppo`` (sb3-contrib's LSTM),
and the memoryless ``ppo`` and ``dqn`` (one frame a step, or their configs' frame stacks on the
project's games); a task runs the agents it has a config for. Each seed is one trained agent and its
own evaluation games (env seeds from ``300,000 + 1,000 * seed``, disjoint from training's and the
in-training evaluation's), acting greedily (the mode of its policy); on every task but the variant
(which has greedy and random beside it instead) also with actions sampled from its policy (seeded:
the same games and draws each time), as seed 002's own evaluation (``enjoy.py``) plays and its
training curves count (``figure_sampled``). On the MiniGrid tasks each agent's greedy games are also
split by whether its first view shows the cue (``by_first_view``, `wins_by_first_view`): one that
reads its memory wins every game of the first kind without looking back. Figures are means over
``--seeds`` with 95% t-intervals, and, as seed 002 reports them, the interquartile mean with a
stratified bootstrap interval (rliable, the [rliable] extra; left out without it). CPU time is the
training process's (all its threads), beside wall time and env steps per wall second. ``--task-steps
TASK=N`` trains a task for N steps instead of its configs' budget (the variant: ``--steps``).
``--merge EARLIER.json`` summarises the agents of an earlier result of this script beside this
command's (a row added to a table whose run folders are gone, say); its agents must have been judged
on as many games (``--episodes``), and an agent this command trains may not be in it.

    python benchmarks/memory_agents.py                    # proof and variant, 4 agents, 3 seeds (~1 h)
    python benchmarks/memory_agents.py --tasks cartpole --algos trxl-ppo recurrent-ppo ppo --seeds 0 1 2 3 4
    python benchmarks/memory_agents.py --quick            # 1 seed, a few thousand steps: a smoke check
    python benchmarks/memory_agents.py --tasks cartpole --algos recurrent-ppo --seeds 0 1 2 \
        --episodes 50 --merge benchmarks/results/memory_agents_cartpole.json --out ...  # one more agent

Writes ``benchmarks/results/memory_agents.json`` and ``.png`` (``--out``); the run folders stay in
``--runs`` (default ``runs/memory_agents``; ``--quick`` writes no results, and its agents go to
``--runs`` if given, else to a temporary folder it removes). Killed, or its caller killed, it stops
within seconds (`rpg_base.cli.end_with_caller`). Goals: TrXL-PPO >= 0.95 on the proof task and on
MiniGrid Memory, memoryless PPO at chance (MiniGrid: <= 0.6); masked CartPole: TrXL-PPO >= 475,
memoryless PPO below 200; on the variant TrXL-PPO >= 1.2x the best memoryless agent; TrXL-PPO >=
1,500 env steps/s while training (benchmarks/trxl_speed.py measures it beside the earlier code).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from rpg_base.cli import (
    ArgumentParser,
    device_name,
    end_with_caller,
    existing_file,
    non_negative_int,
    output_file,
    output_folder,
    positive_int,
    run_command,
)
from rpg_base.errors import InputError
from rpg_base.provenance import device_description, portable_path, provenance
from rpg_base.results import earlier_result, pyplot, save_figure, write_results
from rpg_env.experts.config import EXPERT_CONFIG_DIR, TRAINABLE_ALGOS, ExpertConfig, load_expert_config
from rpg_env.experts.evaluate import mean_t_interval, run_episodes
from rpg_env.experts.train import train
from rpg_env.policies.registry import load_expert_policy

RESULTS = Path(__file__).resolve().parent / "results" / "memory_agents.json"
DEFAULT_RUNS = Path("runs") / "memory_agents"
#: Each task's shipped config of an agent (``{algo}``) in rpg_env/experts/configs.
TASK_CONFIGS = {"proof": "memorycue-{algo}.yaml", "variant": "{algo}.yaml",
                "cartpole": "cartpolemasked-{algo}.yaml", "minigrid": "minigrid-memory-{algo}.yaml",
                "minigrid-cells": "minigrid-memory-onehot-{algo}.yaml",
                "mysterypath": "mysterypath-grid-{algo}.yaml"}
TASKS = tuple(TASK_CONFIGS)
#: Tasks whose figure is the share of games won (a positive return); the others report the return.
SUCCESS_TASKS = ("proof", "minigrid", "minigrid-cells", "mysterypath")
MINIGRID_TASKS = ("minigrid", "minigrid-cells")
TITLES = {"proof": "MemoryCue-v0 (memory proof task)",
          "variant": "Treasurehunt-v0, items visible for a few turns",
          "cartpole": "CartPoleMasked-v1 (no velocities)", "minigrid": "MiniGrid-MemoryS9-v0 (3x3 view)",
          "minigrid-cells": "MiniGrid-MemoryS9-v0 (3x3 view as cells)",
          "mysterypath": "MysteryPath-Grid-v0 (Memory Gym)"}
MEMORYLESS = ("ppo", "dqn")
#: What every row of ``runs`` holds, so a merged file's rows join the summary like this run's own.
MERGED_KEYS = frozenset({"task", "algo", "seed", "steps", "figure", "steps_per_second",
                         "cpu_seconds_with_eval"})
EVAL_SEED_BASE, EVAL_SEED_STRIDE = 300_000, 1_000


def run_config(task: str, algo: str, seed: int, steps: int | None, visible_turns: int,
               episodes: int, device: str = "cpu") -> ExpertConfig:
    """``algo``'s config for ``task`` (its shipped file), with this benchmark's settings, training on
    ``device``."""
    base = load_expert_config(None, EXPERT_CONFIG_DIR / TASK_CONFIGS[task].format(algo=algo))
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
    if task == "variant":
        row["eval"] = json.loads((run_dir / "eval.json").read_text())  # model, greedy, random
        row["figure"] = row["eval"]["model"]["mean"]
        return row
    for key, greedy in (("figure", True), ("figure_sampled", False)):
        policy = load_expert_policy(run_dir / "model.zip", deterministic=greedy)
        returns = run_episodes(policy, dict(cfg.env), episodes, cfg.eval.seed, cfg.env_id, cfg.wrappers)
        row[key] = float((returns > 0).mean()) if task in SUCCESS_TASKS else float(returns.mean())
    if task in MINIGRID_TASKS:
        greedy_policy = load_expert_policy(run_dir / "model.zip", deterministic=True)
        row["by_first_view"] = wins_by_first_view(greedy_policy, cfg, episodes, cfg.eval.seed)
    return row


def wins_by_first_view(policy: Any, cfg: ExpertConfig, games: int, seed: int) -> dict[str, dict[str, Any]]:
    """MiniGrid Memory: the share of games ``policy`` wins where its first view shows the cue and
    where it does not (``games`` games, env seeds ``seed``, ``seed + 1``, ...; one world at a time:
    the games `run_episodes` plays for the figure, up to its batch of 100).
    An agent that reads its memory wins the first kind without looking back; at chance there, it
    does not use the cue at all, whatever it does in the others."""
    from rpg_env.envs.any_env import make_vector

    won: dict[str, list[bool]] = {"cue_shown": [], "cue_hidden": []}
    env = make_vector(cfg.env_id, 1, dict(cfg.env), cfg.wrappers)
    try:
        for game in range(games):
            obs, _ = env.reset(seed=seed + game)
            shown = cue_in_view(env.envs[0].unwrapped.gen_obs()["image"])
            start, total, ended = np.ones(1, dtype=bool), 0.0, False
            while not ended:
                obs, reward, terminated, truncated, _ = env.step(policy.act(obs, start))
                start[:] = False
                total += float(reward[0])
                ended = bool(terminated[0] or truncated[0])
            won["cue_shown" if shown else "cue_hidden"].append(total > 0)
    finally:
        env.close()
    return {kind: {"games": len(w), "won": float(np.mean(w)) if w else None} for kind, w in won.items()}


def merged_runs(path: Path, episodes: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The ``runs`` of an earlier result of this script given to ``--merge``, and where they come from
    (the file, its command, revision and date); an `InputError` where the file is not one (not JSON,
    empty, or without a list of runs this table can hold), or judged its agents on another number of
    games than ``episodes``."""
    record = earlier_result(path, "benchmarks/memory_agents.py", MERGED_KEYS)
    if record.get("episodes") != episodes:
        raise InputError(f"--merge {path} judged its agents on {record.get('episodes')} games each, this "
                         f"command on {episodes}: give --episodes {record.get('episodes')}")
    source = {"file": portable_path(path),
              **{key: record.get(key) for key in ("command", "git_revision", "created")}}
    return record["runs"], source


def planned_agents(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """``(task, algo, seed)`` of every agent ``args`` asks for: a task runs the agents it has a
    config for."""
    return [(task, algo, seed) for task in args.tasks for algo in args.algos
            if (EXPERT_CONFIG_DIR / TASK_CONFIGS[task].format(algo=algo)).is_file() for seed in args.seeds]


def interquartile_mean(figures: list[float]) -> dict[str, Any] | None:
    """rliable's interquartile mean of per-seed ``figures`` with its 95% stratified bootstrap interval
    (2,000 resamples, seeded), as seed 002 reports its results; None without rliable installed."""
    try:
        from rliable import library as rly
        from rliable import metrics
    except ImportError:
        return None
    scores = {"agent": np.asarray(figures, dtype=np.float64)[:, None]}  # (seeds, one task)
    with warnings.catch_warnings():  # rliable hands arch a RandomState, which arch now deprecates
        warnings.simplefilter("ignore", FutureWarning)
        point, interval = rly.get_interval_estimates(
            scores, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=2000,
            random_state=np.random.RandomState(0))
    return {"mean": float(point["agent"][0]), "ci95": [float(v) for v in interval["agent"][:, 0]],
            "n": len(figures)}


def cue_in_view(image: np.ndarray) -> bool:
    """Whether MiniGrid Memory's symbolic view ``image`` (V, V, 3) shows the cue (a key or a ball:
    the start room's object, and the two at the hallway's end, which no first view reaches)."""
    from minigrid.core.constants import OBJECT_TO_IDX

    return bool(np.isin(image[..., 0], [OBJECT_TO_IDX["key"], OBJECT_TO_IDX["ball"]]).any())


def first_view_memory(games: int = 1000) -> dict[str, Any]:
    """MiniGrid Memory (S9, the 3x3 view): the share of starts whose first view shows the cue (the
    agent starts facing away from it, anywhere from the cue's column to the hallway's end), and the
    success of an agent that remembers the cue only when that first view shows it and picks a side
    at random otherwise: what memory buys without looking back."""
    import gymnasium as gym

    env = gym.make("minigrid:MiniGrid-MemoryS9-v0", agent_view_size=3)  # "minigrid:" registers its ids
    shown = float(np.mean([cue_in_view(env.reset(seed=s)[0]["image"]) for s in range(games)]))
    env.close()
    return {"cue_in_first_view": shown, "figure": {"mean": shown + (1 - shown) / 2, "ci95": None},
            "games": games}


def summarize_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per task and agent: the figure, speed and CPU time as means over seeds with 95% intervals, and
    the env steps its seeds trained (a merged file's agents show their own budget); on the variant
    greedy and random too, and each agent's ratio to the best memoryless one."""
    summary: dict[str, Any] = {}
    for task in dict.fromkeys(r["task"] for r in runs):
        mine = [r for r in runs if r["task"] == task]
        rows: dict[str, Any] = {}
        for algo in dict.fromkeys(r["algo"] for r in mine):
            agent = [r for r in mine if r["algo"] == algo]
            figure = [r["figure"] for r in agent]
            sampled = [r.get("figure_sampled") for r in agent]  # rows of older results have none
            rows[algo] = {"figure": mean_t_interval(figure), "iqm": interquartile_mean(figure),
                          "figure_sampled": None if None in sampled else mean_t_interval(sampled),
                          "steps_per_second": mean_t_interval([r["steps_per_second"] for r in agent]),
                          "cpu_minutes": mean_t_interval([
                              None if r["cpu_seconds_with_eval"] is None else r["cpu_seconds_with_eval"] / 60
                              for r in agent]),
                          "seeds": [r["seed"] for r in agent],
                          **_by_first_view(agent),
                          "env_steps": sorted({r["steps"] for r in agent})}
        if task == "variant":
            first = [r for r in mine if r["algo"] == mine[0]["algo"]]
            for who in ("greedy", "random"):
                rows[who] = {"figure": mean_t_interval([r["eval"][who]["mean"] for r in first])}
        if task in MINIGRID_TASKS:
            rows["first-view memory"] = first_view_memory()
        if task in ("variant", "cartpole"):
            memoryless = [rows[a]["figure"]["mean"] for a in MEMORYLESS if a in rows]
            best = max(memoryless) if memoryless else None
            for algo in rows:
                mean = rows[algo]["figure"]["mean"]
                rows[algo]["vs_best_memoryless"] = mean / best if best and mean is not None else None
        summary[task] = rows
    return summary


def _by_first_view(agent: list[dict[str, Any]]) -> dict[str, Any]:
    """MiniGrid Memory: each seed's `wins_by_first_view` shares as means over seeds (where every seed
    has them: rows of older results have none)."""
    splits = [r.get("by_first_view") for r in agent]
    if not splits or None in splits:
        return {}
    return {f"won_{kind}": mean_t_interval([s[kind]["won"] for s in splits])
            for kind in ("cue_shown", "cue_hidden")}


def _cell(cell: dict[str, Any] | None, fmt: str) -> str:
    if not cell or cell.get("mean") is None:
        return "-"
    ci = cell["ci95"]
    return format(cell["mean"], fmt) + (f" [{format(ci[0], fmt)}, {format(ci[1], fmt)}]" if ci else "")


def print_table(summary: dict[str, Any]) -> None:
    for task, rows in summary.items():
        what = "share of games won" if task in SUCCESS_TASKS else "return per game"
        print(f"\n{task}: {what}, mean over seeds [95% t-interval], IQM [95% stratified bootstrap]")
        print(f"{'agent':<18} {'mean':<26} {'IQM':<26} {'sampled actions':<26} {'env steps/s':<22} "
              f"{'CPU min':<18} vs best memoryless")
        for name, row in rows.items():
            ratio = row.get("vs_best_memoryless")
            fig_fmt = ".3f" if task in SUCCESS_TASKS else ".1f"
            speed, cpu = _cell(row.get("steps_per_second"), ".0f"), _cell(row.get("cpu_minutes"), ".1f")
            print(f"{name:<18} {_cell(row['figure'], fig_fmt):<26} {_cell(row.get('iqm'), fig_fmt):<26} "
                  f"{_cell(row.get('figure_sampled'), fig_fmt):<26} {speed:<22} {cpu:<18} "
                  f"{'' if ratio is None else f'{ratio:.2f}x'}")
        split = {name: row for name, row in rows.items() if "won_cue_shown" in row}
        if split:
            print("won, greedy, where the first view shows the cue / where it does not:")
            for name, row in split.items():
                shown, hidden = _cell(row["won_cue_shown"], ".3f"), _cell(row["won_cue_hidden"], ".3f")
                print(f"  {name:<16} {shown} / {hidden}")


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
        ax.set_ylabel("share of games won" if task in SUCCESS_TASKS else "return per game")
        ax.set_title(TITLES[task])
        if task == "proof":
            ax.axhline(0.5, color="black", linestyle=":", label="chance")
            ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/memory_agents.py", description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=["proof", "variant"],
                        help="which tasks to run (default: the project's two; cartpole, minigrid, "
                             "minigrid-cells and mysterypath are seed 002's)")
    parser.add_argument("--algos", nargs="+", choices=TRAINABLE_ALGOS,
                        default=["trxl-ppo", "recurrent-ppo", "ppo", "dqn"],
                        help="agents to train (dqn has no memory-task config and is skipped there)")
    parser.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2],
                        help="one trained agent per seed, task and algorithm (distinct)")
    parser.add_argument("--steps", type=positive_int, default=150_000,
                        help="learner env steps per agent on the variant (other tasks: their configs' own)")
    parser.add_argument("--task-steps", nargs="+", default=[], metavar="TASK=STEPS",
                        help="learner env steps per agent on these tasks instead of their configs' own, "
                             "e.g. cartpole=200000")
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
    parser.add_argument("--finished-only", action="store_true",
                        help="with --resume: summarise the agents already finished in --runs and train none "
                             "(agents trained apart, e.g. by several processes at once)")
    parser.add_argument("--device", type=device_name, default="cpu",
                        help="torch device the agents train on (the config's device): cpu or cuda[:N]")
    parser.add_argument("--merge", type=existing_file, nargs="*", default=[], metavar="JSON",
                        help="earlier results of this script whose agents join this command's summary (same "
                             "--episodes; none of the agents this command trains)")
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
    args.task_steps = task_steps(parser, args.task_steps)
    if args.finished_only and not args.resume:
        parser.error("--finished-only reads finished agents: give it with --resume and their --runs")
    if args.quick:
        args.seeds, args.steps, args.episodes = args.seeds[:1], 4_096, 10
    merged, sources = [], []
    for path in args.merge:
        rows, source = merged_runs(path, args.episodes)
        merged, sources = merged + rows, sources + [source]
    ours = {(r["task"], r["algo"], r["seed"]) for r in merged} & set(planned_agents(args))
    if ours:
        parser.error(f"--merge already holds {', '.join(f'{t} {a} seed {s}' for t, a, s in sorted(ours))}; "
                     "leave those out of --tasks/--algos/--seeds or of --merge")
    started = time.perf_counter()
    with runs_folder(parser, args.quick, args.runs, args.resume) as args.runs:
        runs = merged + train_all(args)
    summary = summarize_runs(runs)
    print_table(summary)
    if args.quick:
        return
    record = provenance(seed=args.seeds, tasks=args.tasks, algos=args.algos, steps=args.steps,
                        visible_turns=args.visible_turns, episodes=args.episodes, device=args.device,
                        device_name=device_description(args.device),
                        eval_seeds={s: EVAL_SEED_BASE + EVAL_SEED_STRIDE * s for s in args.seeds},
                        wall_seconds=round(time.perf_counter() - started, 1),
                        task_steps=args.task_steps,
                        goals={"proof": "TrXL-PPO >= 0.95, memoryless PPO at chance (0.5)",
                               "variant": "TrXL-PPO >= 1.2x the best memoryless agent",
                               "cartpole": "TrXL-PPO >= 475, memoryless PPO below 200",
                               "minigrid": "TrXL-PPO >= 0.95, memoryless PPO <= 0.6",
                               "minigrid-cells": "TrXL-PPO >= 0.95, memoryless PPO <= 0.6",
                               "speed": "TrXL-PPO >= 1,500 env steps/s on 2 CPU cores"},
                        merged=sources, summary=summary, runs=runs)
    write_results(args.out, record, lambda png: plot(summary, png))


def task_steps(parser: ArgumentParser, words: list[str]) -> dict[str, int]:
    """``--task-steps`` as ``{task: steps}``; a parser error names a malformed word."""
    steps: dict[str, int] = {}
    for word in words:
        task, _, number = word.partition("=")
        if task not in TASKS or not number.isdigit() or int(number) < 1:
            parser.error(f"--task-steps {word!r}: give TASK=STEPS with a task of {', '.join(TASKS)} and "
                         "STEPS >= 1")
        steps[task] = int(number)
    return steps


def train_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every agent ``args`` asks for, trained (or read, with ``--resume``) in ``args.runs`` and scored:
    a row each, printed as it comes. A task runs the agents it has a config for."""
    runs = []
    for task, algo, seed in planned_agents(args):
        if args.finished_only and not (args.runs / task / f"{algo}-s{seed}" / "eval.json").is_file():
            print(f"{task} {algo} seed {seed}: not finished in {args.runs}, left out", flush=True)
            continue
        steps = args.steps if task == "variant" or args.quick else args.task_steps.get(task)
        runs.append(run_one(task, algo, seed, steps, args.visible_turns, args.episodes, args.runs,
                            args.device))
        last = runs[-1]
        cpu = last["cpu_seconds_with_eval"]
        print(f"{task} {algo} seed {seed}: {last['figure']:.3f} "
              f"({last['steps_per_second']:.0f} steps/s, {'-' if cpu is None else f'{cpu / 60:.1f}'} "
              "CPU min)", flush=True)
    return runs


if __name__ == "__main__":
    end_with_caller()  # killed, or its caller killed: it stops, its temporary folder removed
    run_command(main)
