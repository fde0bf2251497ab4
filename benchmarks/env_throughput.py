"""Treasurehunt-v0 throughput: single env, native vector env, and CartPole-v1 as a reference.

Measures, in one process and one run (so machine load affects all rows alike):

- single env: ``gymnasium.make("Treasurehunt-v0")`` with its default wrappers (9x9 one-hot
  view, 2 agents, random co-player), one ``step`` per Python call, resetting on truncation;
- ``CartPole-v1`` through ``gymnasium.make``, the same loop: the reference for the ratio;
- native vector env: ``gymnasium.make_vec("Treasurehunt-v0", num_envs=N)`` with autoreset,
  reported as worlds x agents per second ("agent-steps/s").

Actions are drawn up front so the loop times the environment, not the sampler. Each figure is
the best of ``--repeats`` timed runs (the least disturbed by other processes on a shared
machine); the median is kept in the JSON too.

Usage::

    python benchmarks/env_throughput.py            # full run, ~1-3 minutes
    python benchmarks/env_throughput.py --quick    # a few seconds, for a smoke check

Writes ``benchmarks/results/env_throughput.json``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import rpg_env  # noqa: F401  (registers Treasurehunt-v0)
from rpg_base.cli import ArgumentParser, non_negative_int, output_file, positive_int, run_command
from rpg_base.errors import InputError
from rpg_base.progress import progress_bar
from rpg_base.provenance import provenance
from rpg_base.results import write_results

RESULTS = Path(__file__).resolve().parent / "results" / "env_throughput.json"
VECTOR_SIZES = (1, 4, 16, 64, 256, 1024, 4096)
TARGET_SINGLE = 30_000  # steps/s, 9x9 one-hot, 2 agents, one core
TARGET_VECTOR_1024 = 1_000_000  # agent-steps/s at N=1024, one core


def _time_single(env_id: str, steps: int, repeats: int, seed: int,
                 **kwargs) -> list[tuple[float, float]]:
    """(wall, CPU) seconds per step of ``repeats`` timed loops of ``steps`` single-env steps."""
    env = gym.make(env_id, **kwargs)
    n_actions = int(env.action_space.n)
    actions = np.random.default_rng(seed).integers(0, n_actions, size=steps).tolist()
    env.reset(seed=seed)
    for a in actions[:1000]:  # warm-up: caches, the passive checker's first-step checks
        _, _, terminated, truncated, _ = env.step(a)
        if terminated or truncated:
            env.reset()
    per_step = []
    for _ in range(repeats):
        env.reset(seed=seed)
        step, reset = env.step, env.reset
        start, cpu_start = time.perf_counter(), time.process_time()
        for a in actions:
            _, _, terminated, truncated, _ = step(a)
            if terminated or truncated:
                reset()
        per_step.append(((time.perf_counter() - start) / steps,
                         (time.process_time() - cpu_start) / steps))
    env.close()
    return per_step


def _time_vector(num_envs: int, steps: int, repeats: int, seed: int,
                 **kwargs) -> list[tuple[float, float]]:
    """(wall, CPU) seconds per vector step of ``repeats`` loops of ``steps`` autoresetting steps."""
    envs = gym.make_vec("Treasurehunt-v0", num_envs=num_envs, **kwargs)
    rng = np.random.default_rng(seed)
    actions = [rng.integers(0, 4, size=num_envs) for _ in range(min(steps, 64))]
    envs.reset(seed=seed)
    for i in range(min(steps, 50)):
        envs.step(actions[i % len(actions)])
    per_step = []
    for _ in range(repeats):
        envs.reset(seed=seed)
        step = envs.step
        start, cpu_start = time.perf_counter(), time.process_time()
        for i in range(steps):
            step(actions[i % len(actions)])
        per_step.append(((time.perf_counter() - start) / steps,
                         (time.process_time() - cpu_start) / steps))
    envs.close()
    return per_step


def _row(name: str, per_step: list[tuple[float, float]], worlds: int, agents: int,
         ref_steps_per_s: float, ref_cpu_steps_per_s: float | None = None) -> dict:
    wall = [w for w, _ in per_step]
    cpu = [c for _, c in per_step]
    best, median, best_cpu = min(wall), statistics.median(wall), min(cpu)
    steps_per_s = 1.0 / best
    cpu_steps_per_s = 1.0 / best_cpu if best_cpu > 0 else float("nan")
    return {
        "name": name,
        "num_envs": worlds,
        "agents": agents,
        "steps_per_s": steps_per_s,
        "env_steps_per_s": steps_per_s * worlds,
        "agent_steps_per_s": steps_per_s * worlds * agents,
        "us_per_step": best * 1e6,
        "us_per_step_median": median * 1e6,
        "ratio_vs_cartpole": steps_per_s * worlds / ref_steps_per_s,
        # CPU time (time.process_time) excludes waiting for a core on a shared machine.
        "cpu_us_per_step": best_cpu * 1e6,
        "cpu_env_steps_per_s": cpu_steps_per_s * worlds,
        "cpu_agent_steps_per_s": cpu_steps_per_s * worlds * agents,
        "cpu_ratio_vs_cartpole": (cpu_steps_per_s * worlds / ref_cpu_steps_per_s
                                  if ref_cpu_steps_per_s else float("nan")),
    }


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/env_throughput.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few steps: a smoke check (noisy figures)")
    parser.add_argument("--repeats", type=positive_int, default=None,
                        help="timed runs per row (best is reported)")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--pin", type=non_negative_int, default=None, metavar="CPU",
                        help="pin the process to this CPU (Linux), so 'one core' is literal")
    parser.add_argument("--out", type=output_file, default=RESULTS, help="JSON output path")
    return parser


def measure(repeats: int, single_steps: int, vector_work: int, seed: int) -> list[dict]:
    """Every row: CartPole (the reference), the single env, the vector env at each size, and the
    greedy co-player's cost; ``vector_work`` world-steps per timed vector run."""
    jobs = ["CartPole-v1", "Treasurehunt-v0", *[f"vector N={n}" for n in VECTOR_SIZES],
            "greedy single", "greedy vector"]
    bar = progress_bar(total=len(jobs), desc="env throughput", file=sys.stderr)
    rows = []
    cart = _time_single("CartPole-v1", single_steps, repeats, seed)
    ref = (1.0 / min(w for w, _ in cart), 1.0 / min(c for _, c in cart))
    rows.append(_row("CartPole-v1 (gymnasium.make)", cart, 1, 1, *ref))
    bar.update()
    single = _time_single("Treasurehunt-v0", single_steps, repeats, seed)
    rows.append(_row("Treasurehunt-v0 (gymnasium.make)", single, 1, 2, *ref))
    bar.update()
    for n in VECTOR_SIZES:
        steps = max(20, min(20_000, vector_work // n))
        per = _time_vector(n, steps, repeats, seed)
        rows.append(_row(f"Treasurehunt-v0 make_vec N={n}", per, n, 2, *ref))
        bar.update()
    # Context, not targets: the scripted greedy co-player (a BFS per view) costs more.
    greedy = _time_single("Treasurehunt-v0", single_steps // 5, repeats, seed, co_policy="greedy")
    rows.append(_row("single env, greedy co-player", greedy, 1, 2, *ref))
    bar.update()
    per = _time_vector(1024, max(10, vector_work // 1024 // 5), repeats, seed, co_policy="greedy")
    rows.append(_row("make_vec N=1024, greedy co-player", per, 1024, 2, *ref))
    bar.update()
    bar.close()
    return rows


def summarize(rows: list[dict]) -> dict:
    """The headline figures against the targets (rows as `measure` orders them)."""
    single_row = rows[1]
    vec_1024 = next(r for r in rows if r["num_envs"] == 1024 and "make_vec" in r["name"])
    return {
        "single_env_steps_per_s": single_row["steps_per_s"],
        "single_env_target": TARGET_SINGLE,
        "single_env_meets_target": single_row["steps_per_s"] >= TARGET_SINGLE,
        "single_env_ratio_vs_cartpole": single_row["ratio_vs_cartpole"],
        "single_env_cpu_steps_per_s": single_row["cpu_env_steps_per_s"],
        "single_env_cpu_meets_target": single_row["cpu_env_steps_per_s"] >= TARGET_SINGLE,
        "vector_1024_agent_steps_per_s": vec_1024["agent_steps_per_s"],
        "vector_1024_target": TARGET_VECTOR_1024,
        "vector_1024_meets_target": vec_1024["agent_steps_per_s"] >= TARGET_VECTOR_1024,
        "vector_1024_cpu_agent_steps_per_s": vec_1024["cpu_agent_steps_per_s"],
        "vector_1024_cpu_meets_target": vec_1024["cpu_agent_steps_per_s"] >= TARGET_VECTOR_1024,
        "cartpole_steps_per_s": rows[0]["steps_per_s"],
    }


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.pin is not None:
        if args.pin not in os.sched_getaffinity(0):
            raise InputError(f"--pin {args.pin}: this process may run on CPUs "
                             f"{sorted(os.sched_getaffinity(0))}; pin one of them")
        os.sched_setaffinity(0, {args.pin})
    repeats = args.repeats or (2 if args.quick else 5)
    single_steps = 5_000 if args.quick else 50_000
    # Vector loops scale their step count so every row does a similar amount of work.
    vector_work = 200_000 if args.quick else 1_000_000  # world-steps per timed run
    load_before = os.getloadavg()
    rows = measure(repeats, single_steps, vector_work, args.seed)
    summary = summarize(rows)
    report = {
        "benchmark": "env_throughput",
        "config": {"map": "20x20", "view": "9x9 one-hot", "agents": 2,
                   "co_policy": "random unless the row says greedy",
                   "quick": args.quick, "repeats": repeats, "single_steps": single_steps,
                   "vector_world_steps_per_run": vector_work, "pinned_cpu": args.pin,
                   "cpu_count": os.cpu_count(), "load_average_before": load_before,
                   "load_average_after": os.getloadavg()},
        "summary": summary,
        "rows": rows,
        "provenance": provenance(seed=args.seed),
    }
    _print_table(rows, summary)
    write_results(args.out, report, indent=2)
    return report


def _print_table(rows: list[dict], summary: dict) -> None:
    header = (f"{'environment':<34} {'steps/s':>11} {'agent-steps/s':>14} {'us/step':>9} "
              f"{'x CartPole':>10} {'CPU us/step':>11} {'CPU x CartPole':>14}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['name']:<34} {r['env_steps_per_s']:>11,.0f} {r['agent_steps_per_s']:>14,.0f} "
              f"{r['us_per_step']:>9.1f} {r['ratio_vs_cartpole']:>10.2f} {r['cpu_us_per_step']:>11.1f} "
              f"{r['cpu_ratio_vs_cartpole']:>14.2f}")
    def verdict(value: float, target: float) -> str:
        return f"{value:,.0f} ({'meets' if value >= target else 'below'} {target:,})"

    print(f"single env steps/s: wall {verdict(summary['single_env_steps_per_s'], TARGET_SINGLE)}, "
          f"CPU time {verdict(summary['single_env_cpu_steps_per_s'], TARGET_SINGLE)}")
    print(f"vector N=1024 agent-steps/s: wall "
          f"{verdict(summary['vector_1024_agent_steps_per_s'], TARGET_VECTOR_1024)}, CPU time "
          f"{verdict(summary['vector_1024_cpu_agent_steps_per_s'], TARGET_VECTOR_1024)}")
    print(f"steps/s of vector rows count worlds; figures are the best of the repeats; CPU-time "
          f"columns leave out time spent waiting for a core (load average now "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs: wall figures are pessimistic "
          f"under load, ratios to CartPole much less so).")


if __name__ == "__main__":
    run_command(main)
