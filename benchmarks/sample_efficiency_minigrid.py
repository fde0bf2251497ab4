"""Sample efficiency on a MiniGrid task: the IRIS loop beside SB3 PPO at RL Zoo's hyperparameters,
success rate against real steps, to where each first solves the task.

    python benchmarks/sample_efficiency_minigrid.py --seeds 0 1 2
    python benchmarks/sample_efficiency_minigrid.py --methods ppo --seeds 0 1 2 --out ppo.json
    python benchmarks/sample_efficiency_minigrid.py --methods --merge ppo.json \\
        --learn-from runs/learn_dk_s0 runs/learn_dk_s1 runs/learn_dk_s2
    python benchmarks/sample_efficiency_minigrid.py --quick        # seconds: a smoke check

Methods, each from nothing per seed, judged on the same ``--episodes`` real games (seeds from
``EVAL_SEED``, which no training or collection uses):

- ``learn``: `rpg_worldmodel.learn` with ``--learn-config`` (DoorKey-5x5's by default), one run per
  seed; each iteration's agent is one point (its real steps, the share of games it wins).
- ``ppo``: ``python -m rpg_env.experts train`` with ``--ppo-config`` (RL Zoo's published
  hyperparameters for the task), one run per seed to ``--ppo-steps``, a checkpoint every
  ``--every`` steps, each checkpoint one point.

Success is the share of games with a positive return (MiniGrid pays only for reaching the goal). A
method *solves* the task at the first point whose success is at least ``--target``; the table gives
those steps per seed and their mean (95% t-interval; a seed that never solves it within its budget
is counted at its budget and marked), and PPO's steps over the loop's. Each method's CPU minutes
are reported too.

Writes ``benchmarks/results/sample_efficiency_minigrid.json`` and ``.png`` (``--out``).
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from rpg_base.cli import (
    ArgumentParser,
    existing_file,
    non_negative_int,
    output_file,
    output_folder,
    positive_int,
    run_command,
)
from rpg_base.errors import InputError
from rpg_base.provenance import portable_path, provenance
from rpg_base.results import pyplot, save_figure, write_results
from rpg_env.experts.evaluate import mean_t_interval

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "sample_efficiency_minigrid.json"
LEARN_CONFIG = REPO / "rpg_worldmodel" / "configs" / "learn_doorkey.yaml"
PPO_CONFIG = REPO / "rpg_env" / "experts" / "configs" / "minigrid-doorkey-ppo.yaml"
METHODS = ("learn", "ppo")
#: First seed of the evaluation games, as the loop's (``eval_seed``) and `sample_efficiency`'s.
EVAL_SEED = 900_000
#: A loop and PPO run of seconds, for --quick.
QUICK_LEARN = ["real_steps=2000", "collect_steps=1000", "world_model_steps=6", "world_model_steps_later=4",
               "agent_steps=256", "world_model=[model.width=24,model.num_heads=2,model.num_layers=1,"
               "train.batch_size=8,model.train_window=8,'model.reward_values=[0.0,0.5,1.0]']",
               "agent=[n_envs=4,hyperparams.n_steps=32,hyperparams.batch_size=64,eval.episodes=2]"]


# ------------------------------------------------------------------------------------- methods
def run_learn(seed: int, episodes: int, config: Path, overrides: list[str], root: Path) -> Path:
    """One loop run of ``config`` from nothing; its folder."""
    from rpg_worldmodel.learn import learn
    from rpg_worldmodel.learn_config import load_learn_config

    cfg = load_learn_config(config, [*overrides, f"seed={seed}", f"eval_episodes={episodes}",
                                     f"eval_seed={EVAL_SEED}"])
    return learn(cfg, root / f"learn-s{seed}")


def learn_points(run: Path) -> dict[str, Any]:
    """A loop run's curve: each iteration's real steps, success and return, and its CPU minutes."""
    path = run / "curve.json"
    if not path.is_file():
        raise InputError(f"--learn-from {run}: no curve.json there (a learn run folder, finished or not, "
                         "holds one after its first iteration)")
    curve = json.loads(path.read_text())
    if curve["config"].get("eval_seed") != EVAL_SEED:
        raise InputError(f"--learn-from {run}: evaluated from seed {curve['config'].get('eval_seed')}, not "
                         f"{EVAL_SEED}: its games are not the other methods'")
    points = [{"steps": p["real_steps"], "success": p["success"], "return": p["return"]}
              for p in curve["points"]]
    cpu = sum(p["seconds"].get("cpu", 0.0) for p in curve["points"]) / 60
    return {"seed": curve["config"]["seed"], "env_id": curve["config"]["env_id"], "points": points,
            "cpu_minutes": round(cpu, 2), "budget": curve["config"]["real_steps"]}


def run_ppo(seed: int, episodes: int, config: Path, steps: int, every: int, root: Path) -> dict[str, Any]:
    """PPO from ``config`` to ``steps``, a checkpoint every ``every`` steps; each checkpoint and the
    final model evaluated on the games."""
    from rpg_env.experts.config import load_expert_config
    from rpg_env.experts.evaluate import compare
    from rpg_env.experts.train import train

    base = load_expert_config(path=config)
    cfg = replace(base, seed=seed, total_timesteps=steps, checkpoint_freq=every, progress_bar=False,
                  eval=replace(base.eval, final_episodes=episodes, seed=EVAL_SEED)).validate()
    cpu = time.process_time()
    run_dir = train(cfg, out=root / f"ppo-s{seed}")
    cpu = time.process_time() - cpu
    zips = {int(re.search(r"_(\d+)_steps", z.name).group(1)): z
            for z in (run_dir / "checkpoints").glob("*.zip")}
    points = []
    for at, model in sorted(zips.items()):
        results = compare(model, episodes=episodes, seed=EVAL_SEED)["model"]
        points.append({"steps": at, "success": results["positive"], "return": results["mean"]})
    final = json.loads((run_dir / "eval.json").read_text())["model"]
    if not points or points[-1]["steps"] < cfg.total_timesteps:
        points.append({"steps": cfg.total_timesteps, "success": final["positive"], "return": final["mean"]})
    return {"env_id": cfg.env.get("task", cfg.env_id), "points": points, "cpu_minutes": round(cpu / 60, 2),
            "budget": cfg.total_timesteps}


# ------------------------------------------------------------------------------------- figures
def solved_at(points: list[dict[str, Any]], target: float) -> int | None:
    """Real steps of the first point whose success is at least ``target`` (None: never)."""
    return next((p["steps"] for p in points if p["success"] >= target), None)


def held(points: list[dict[str, Any]], target: float) -> float | None:
    """The share of points from the first at ``target`` on that are still at it (None: never
    reached): a greedy MiniGrid policy can fall back into a loop of turns and win nothing."""
    at = solved_at(points, target)
    later = [p["success"] >= target for p in points if at is not None and p["steps"] >= at]
    return round(sum(later) / len(later), 3) if later else None


def summarize(runs: list[dict[str, Any]], target: float) -> dict[str, Any]:
    """Per method: steps to ``target`` per seed (a seed that never reached it counts at its budget,
    ``censored``), their mean and interval, how well each seed held the target after (`held`),
    final success; and PPO's steps over the loop's."""
    summary: dict[str, Any] = {}
    for method in METHODS:
        rows = [r for r in runs if r["method"] == method]
        if not rows:
            continue
        reached = [solved_at(r["points"], target) for r in rows]
        counted = [at if at is not None else r["budget"] for at, r in zip(reached, rows, strict=True)]
        summary[method] = {
            "seeds": [r["seed"] for r in rows], "solved_at": reached,
            "steps_to_target": mean_t_interval(counted), "censored": sum(at is None for at in reached),
            "held": [held(r["points"], target) for r in rows],
            "final_success": mean_t_interval([r["points"][-1]["success"] for r in rows]),
            "cpu_minutes": mean_t_interval([r["cpu_minutes"] for r in rows])}
    if {"learn", "ppo"} <= set(summary) and not summary["learn"]["censored"]:
        # a PPO seed counted at its budget makes the ratio a lower bound
        learn, ppo = (summary[m]["steps_to_target"]["mean"] for m in ("learn", "ppo"))
        summary["ppo_over_learn"] = {"ratio": round(ppo / learn, 3),
                                     "at_least": bool(summary["ppo"]["censored"])}
    return summary


def print_table(summary: dict[str, Any], target: float) -> None:
    print(f"\n| method | seeds | real steps to success >= {target} (per seed) | mean [95% CI] | "
          "share of later points still there (per seed) | final success | CPU min |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for method in METHODS:
        if method not in summary:
            continue
        s = summary[method]
        per_seed = ", ".join(f"{at:,}" if at is not None else "not reached" for at in s["solved_at"])
        steps, ci = s["steps_to_target"]["mean"], s["steps_to_target"]["ci95"]
        shown = f"{steps:,.0f}" + (f" [{ci[0]:,.0f}, {ci[1]:,.0f}]" if ci else "") + \
            (f" ({s['censored']} at budget)" if s["censored"] else "")
        kept = ", ".join("-" if h is None else f"{h:.2f}" for h in s["held"])
        print(f"| {method} | {len(s['seeds'])} | {per_seed} | {shown} | {kept} | "
              f"{s['final_success']['mean']:.2f} | {s['cpu_minutes']['mean']:.1f} |")
    if (ratio := summary.get("ppo_over_learn")) is not None:
        bound = "at least " if ratio["at_least"] else ""
        print(f"\nPPO needs {bound}{ratio['ratio']:.2f}x the loop's real steps")
    elif "learn" in summary:
        print("\nthe loop did not reach the target on every seed within its budget: no ratio")


def plot(runs: list[dict[str, Any]], target: float, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for method, color in zip(METHODS, ("C0", "C1"), strict=True):
        for i, run in enumerate(r for r in runs if r["method"] == method):
            steps = np.array([p["steps"] for p in run["points"]])
            ax.plot(steps, [p["success"] for p in run["points"]], "o-", color=color, alpha=0.7, markersize=3,
                    label=method if i == 0 else None)
    ax.axhline(target, ls=":", color="gray")
    ax.set_xscale("log")
    ax.set_xlabel("real steps")
    ax.set_ylabel("success (share of games won)")
    ax.set_title(f"{runs[0]['env_id']}: one line per seed")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


# ------------------------------------------------------------------------------------- command
def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="*", choices=METHODS, default=list(METHODS),
                        help="methods to run here (none: only read --learn-from and --merge)")
    parser.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=positive_int, default=32, help="evaluation games per point")
    parser.add_argument("--target", type=float, default=0.9, help="success that counts as solved")
    parser.add_argument("--learn-config", type=existing_file, default=LEARN_CONFIG)
    parser.add_argument("--learn", nargs="*", default=[], metavar="key=value", help="loop config overrides")
    parser.add_argument("--learn-from", type=Path, nargs="*", default=[], metavar="RUN",
                        help="read these loop runs instead of running the loop")
    parser.add_argument("--ppo-config", type=existing_file, default=PPO_CONFIG)
    parser.add_argument("--ppo-steps", type=positive_int, default=100_000)
    parser.add_argument("--every", type=positive_int, default=5_000, help="PPO steps between checkpoints")
    parser.add_argument("--merge", type=existing_file, nargs="*", default=[], metavar="JSON",
                        help="take the runs of these earlier results of this script too")
    parser.add_argument("--keep", type=output_folder, default=None, help="keep the run folders here")
    parser.add_argument("--quick", action="store_true",
                        help="1 seed, tiny runs: a smoke check (writes nothing)")
    parser.add_argument("--out", type=output_file, default=RESULTS, help="JSON output path (.png beside it)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if not 0 < args.target <= 1:
        raise InputError(f"--target is a share of games won, in (0, 1], got {args.target}")
    given = [learn_points(run) for run in args.learn_from]  # a wrong folder fails before any work
    if args.quick:
        args.seeds, args.episodes, args.ppo_steps, args.every = args.seeds[:1], 4, 2048, 1024
        args.learn = [*QUICK_LEARN, *args.learn]
    started = time.perf_counter()
    runs: list[dict[str, Any]] = [{"method": "learn", "run": portable_path(run), **points}
                                  for run, points in zip(args.learn_from, given, strict=True)]
    runs += [row for earlier in args.merge for row in json.loads(earlier.read_text())["runs"]]
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for method in args.methods:
            for seed in args.seeds:
                if method == "learn" and not args.learn_from:
                    row = learn_points(run_learn(seed, args.episodes, args.learn_config, args.learn, root))
                elif method == "ppo":
                    row = run_ppo(seed, args.episodes, args.ppo_config, args.ppo_steps, args.every, root)
                else:
                    continue
                runs.append({"method": method, "seed": seed, **row})  # the loop's row names its seed too
                print(f"{method} seed {seed}: solved at {solved_at(row['points'], args.target)} real steps, "
                      f"final success {row['points'][-1]['success']:.2f}", flush=True)
    if len(tasks := {r["env_id"] for r in runs}) > 1:
        raise InputError(f"the runs are of different tasks ({sorted(tasks)}): compare one task at a time")
    summary = summarize(runs, args.target)
    print_table(summary, args.target)
    if args.quick:
        return
    record = provenance(seed=args.seeds, methods=args.methods, episodes=args.episodes, target=args.target,
                        eval_seed=EVAL_SEED, learn_config=portable_path(args.learn_config),
                        learn_overrides=args.learn, ppo_config=portable_path(args.ppo_config),
                        merged=[portable_path(m) for m in args.merge],
                        ppo_steps=args.ppo_steps, every=args.every,
                        wall_seconds=round(time.perf_counter() - started, 1), summary=summary, runs=runs)
    write_results(args.out, record, lambda png: plot(runs, args.target, png))


if __name__ == "__main__":
    run_command(main)
