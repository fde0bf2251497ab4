"""Sample efficiency: real return after 5k, 10k and 25k real learner steps, the IRIS loop beside
SB3's DQN and PPO, greedy, random and (optionally) DreamerV3 through sheeprl.

    python benchmarks/sample_efficiency.py --seeds 0 1 2                     # the issue's table
    python benchmarks/sample_efficiency.py --methods dqn ppo --seeds 0 1 2   # the model-free anchors only
    python benchmarks/sample_efficiency.py --dreamer-python /path/to/sheeprl-venv/bin/python --methods dreamer
    python benchmarks/sample_efficiency.py --methods dreamer --dreamer-eval EVAL.json --budgets 2000 5000
    python benchmarks/sample_efficiency.py --quick                           # seconds: a smoke check

Methods, each trained from nothing per seed:

- ``learn``: `rpg_worldmodel.learn` on its defaults (world models told nothing of the game), one
  run per seed to the largest budget; at each budget, the agent of the last iteration that ended
  within it (the loop collects ``collect_steps`` at a time: a 5,000 budget gets the 4,000-step
  agent, its row's ``steps_used``). Runs of schema 11 and before (``--learn-from``) are named by
  what their world models were told: ``learn, rules on (schema 11)`` or ``learn, rules off (schema 11)``.
- ``dqn``, ``ppo``: ``python -m rpg_env.experts train`` with the shipped configs, one run per
  budget and seed (``total_timesteps`` = the budget, so each schedule fits its budget, as the
  ANCHORS table was measured).
- ``dreamer``: DreamerV3 (sheeprl 0.8.4) in its own virtualenv (``--dreamer-python``), started by
  ``benchmarks/sheeprl_dreamer.py``; kept out of the project's install and tests.
- ``dreamer-rr1-onehot-greedy`` (its name from the run's settings): a DreamerV3 run's checkpoints
  played greedily on the evaluation games by ``benchmarks/sheeprl_dreamer_eval.py`` in sheeprl's
  virtualenv, read from its JSON (``--dreamer-eval``): the fair row, on the loop's input and games.

Every agent of the project is evaluated in the real game on the same ``--episodes`` games (seeds
from ``EVAL_SEED``, which no training or collection uses), beside greedy and random on those
games. A DreamerV3 run trained here (``dreamer``) is judged by sheeprl's own logs: the mean return
of the training episodes that ended in the budget's last fifth (the policy as it acted then, its
actions sampled), plus its final test episode, marked in the table with the run's settings
(``settings``). ``--dreamer-eval`` rows are judged as the project's agents are: greedy, on the same
games (its JSON's ``eval_seed`` must be ``EVAL_SEED``), each checkpoint's return the mean over the
games (``games_ci95`` its interval over games, one seed). Figures are means over seeds with 95%
t-intervals; each method's CPU minutes (this process's, or the sheeprl process's, all threads) are
reported too.

Writes ``benchmarks/results/sample_efficiency.json`` and ``.png`` (``--out``).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import tempfile
import time
from dataclasses import replace
from itertools import accumulate
from pathlib import Path
from typing import Any

from rpg_base.cli import (
    ArgumentParser,
    end_with_caller,
    existing_file,
    non_negative_int,
    output_file,
    output_folder,
    positive_int,
    run_command,
)
from rpg_base.errors import InputError
from rpg_base.provenance import portable_path, provenance
from rpg_base.results import earlier_result, pyplot, read_json_input, save_figure, write_results
from rpg_env.experts.evaluate import mean_t_interval

RESULTS = Path(__file__).resolve().parent / "results" / "sample_efficiency.json"
REPO = Path(__file__).resolve().parents[1]
METHODS = ("learn", "dqn", "ppo", "dreamer")
#: What every row of ``runs`` holds, so a merged file's rows join the summary like this run's own.
MERGED_KEYS = frozenset({"method", "seed", "steps", "return", "cpu_minutes"})
#: First seed of the evaluation games: far from training envs (seed + i), the experts' in-training
#: evaluation (seed + 1,000,003) and collection (hashed wave seeds).
EVAL_SEED = 900_000


# ------------------------------------------------------------------------------------- methods
def run_learn(seed: int, budgets: list[int], episodes: int, root: Path,
              overrides: list[str]) -> list[dict[str, Any]]:
    """One `rpg_worldmodel.learn` run to the largest budget; a row per budget."""
    from rpg_base.typed_config.config import with_overrides
    from rpg_worldmodel.learn import learn
    from rpg_worldmodel.learn_config import LearnConfig

    cfg = with_overrides(LearnConfig(seed=seed, real_steps=max(budgets), eval_episodes=episodes,
                                     eval_seed=EVAL_SEED), overrides).validate()
    out = learn(cfg, root / f"learn-s{seed}")
    return learn_rows(out, budgets)


def learn_rows(run: Path, budgets: list[int]) -> list[dict[str, Any]]:
    """A learn run's curve at each budget it covers: the last point within the budget (its
    ``steps_used``), with return, greedy and random on the same games and the minutes spent up to that
    point (wall; CPU where the run recorded it) and the processor they were spent on (``processor``,
    where the run's ``provenance.json`` names it: minutes compare only on one). A budget that a
    further iteration of the run would have ended within has no row."""
    curve = read_curve(run)
    made = run / "provenance.json"
    recorded = json.loads(made.read_text()) if made.is_file() else {}
    points, collect_steps = curve["points"], curve["config"]["collect_steps"]
    wall = list(accumulate(sum(v for k, v in p["seconds"].items() if k != "cpu") for p in points))
    # CPU seconds up to each point; unknown from the first point that did not record them
    cpu = list(accumulate((p["seconds"].get("cpu") for p in points),
                          lambda total, s: None if total is None or s is None else total + s))
    rows = []
    for budget in budgets:
        within = [i for i, p in enumerate(points) if p["real_steps"] <= budget]
        if not within or points[-1]["real_steps"] + collect_steps <= budget:
            continue  # the run stopped before an iteration that would have ended within the budget
        i = within[-1]
        point = points[i]
        rows.append({"steps": budget, "steps_used": point["real_steps"], "return": point["return"],
                     "greedy": point["greedy"], "random": point["random"],
                     "cpu_minutes": None if cpu[i] is None else cpu[i] / 60, "wall_minutes": wall[i] / 60,
                     "processor": recorded.get("cpu"), "run": run.name})
    return rows


def learn_method(run: Path) -> tuple[str, int]:
    """Which method a finished learn run measured, and its seed: ``learn``, or for a run of schema
    11 and before what its world models were told (the ``rules`` switch it recorded), with its
    agent's imagined worlds and steps an iteration where they differ from today's defaults."""
    from rpg_worldmodel.learn_config import LearnConfig, run_config

    recorded = dict(read_curve(run)["config"])
    told = [recorded.pop(key) for key in ("move_rules", "rules") if key in recorded]
    cfg = run_config(recorded, str(run / "curve.json"))
    agent, default = cfg.agent_config(0), LearnConfig().agent_config(0)
    method = "learn" if not told else f"learn, rules {'on' if told[0] else 'off'} (schema 11)"
    if (agent.n_envs, agent.total_timesteps) != (default.n_envs, default.total_timesteps):
        method += f" ({agent.n_envs} worlds, {agent.total_timesteps // 1000}k)"
    return method, cfg.seed


def read_curve(run: Path) -> dict[str, Any]:
    """The ``curve.json`` of a learn run given to ``--learn-from``; an `InputError` naming the option
    where the folder holds none (a missing folder, a file, a run with no finished iteration)."""
    fix = "give the --out folder of a python -m rpg_worldmodel.learn run"
    if not (run / "curve.json").is_file():
        raise InputError(f"--learn-from {run} is not a learn run with a finished iteration (no curve.json); "
                         f"{fix}")
    curve = read_json_input(run / "curve.json", f"--learn-from {run}: its curve.json", fix)
    if not isinstance(curve, dict) or not isinstance(curve.get("config"), dict) or not isinstance(
            curve.get("points"), list):
        raise InputError(f"--learn-from {run}: its curve.json is not a learn run's (no config and points); "
                         f"{fix}")
    return curve


def merged_runs(path: Path) -> list[dict[str, Any]]:
    """The ``runs`` of an earlier result of this script given to ``--merge``; an `InputError` where
    the file is not one (not JSON, empty, or JSON without a list of runs this table can hold)."""
    return earlier_result(path, "benchmarks/sample_efficiency.py", MERGED_KEYS)["runs"]


def run_expert(algo: str, seed: int, budget: int, episodes: int, root: Path) -> dict[str, Any]:
    """SB3 ``algo`` with the project's config for ``budget`` real steps, evaluated on the games."""
    from rpg_env.experts.config import load_expert_config
    from rpg_env.experts.train import train

    base = load_expert_config(algo)
    cfg = replace(base, seed=seed, total_timesteps=budget, progress_bar=False,
                  eval=replace(base.eval, final_episodes=episodes, seed=EVAL_SEED)).validate()
    cpu = time.process_time()
    run_dir = train(cfg, out=root / f"{algo}-{budget}-s{seed}")
    cpu = time.process_time() - cpu
    results = json.loads((run_dir / "eval.json").read_text())
    return {"steps": budget, "return": results["model"]["mean"], "greedy": results["greedy"]["mean"],
            "random": results["random"]["mean"], "cpu_minutes": cpu / 60}


def run_dreamer(python: Path, seed: int, budgets: list[int], root: Path,
                settings: list[str]) -> list[dict[str, Any]]:
    """DreamerV3 in sheeprl's own virtualenv to the largest budget; a row per budget from its logs."""
    log_dir = root / f"dreamer-s{seed}"
    command = [str(python), str(REPO / "benchmarks" / "sheeprl_dreamer.py"), "--steps", str(max(budgets)),
               "--seed", str(seed), "--out", str(log_dir), *settings]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=root)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"sheeprl's DreamerV3 failed ({' '.join(command)}):\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / 60
    return [{"settings": dreamer_settings(log_dir), **row} for row in dreamer_rows(log_dir, budgets, cpu)]


def dreamer_rows(log_dir: Path, budgets: list[int], cpu_minutes: float | None = None) -> list[dict[str, Any]]:
    """A row per budget the DreamerV3 run in ``log_dir`` reached (its ``episodes.json``): the mean
    return of the training episodes logged in the budget's last fifth, the wall minutes to the
    budget from its logs, and ``cpu_minutes`` of the whole run shared out by steps if known."""
    episodes = json.loads((log_dir / "episodes.json").read_text())
    reached = max((e["step"] for e in episodes["train"]), default=0)
    rows = []
    for budget in (b for b in budgets if b <= reached):
        last_fifth = [e for e in episodes["train"] if 0.8 * budget < e["step"] <= budget]
        mean = statistics.fmean(e["return"] for e in last_fifth) if last_fifth else None
        row = {"steps": budget, "return": mean, "episodes_averaged": len(last_fifth),
               "test_return": episodes.get("test") if budget == max(budgets) else None,
               "cpu_minutes": None if cpu_minutes is None else cpu_minutes * min(1.0, budget / max(budgets)),
               "evaluation": "sheeprl's own"}
        if last_fifth and "seconds" in last_fifth[-1]:
            row["wall_minutes"] = last_fifth[-1]["seconds"] / 60
        rows.append(row)
    return rows


def dreamer_eval_rows(path: Path, budgets: list[int]) -> tuple[str, int, list[dict[str, Any]]]:
    """The method name, seed and rows of a ``benchmarks/sheeprl_dreamer_eval.py`` JSON: a row per
    checkpoint at one of ``budgets``, its mean greedy return on the evaluation games and the training's
    CPU (and wall) minutes to it; an `InputError` where the file is not one, or played other games."""
    fix = "give the --out JSON of benchmarks/sheeprl_dreamer_eval.py"
    record = read_json_input(path, f"--dreamer-eval {path}", fix)
    if not isinstance(record, dict) or not isinstance(record.get("points"), list) or not isinstance(
            record.get("run"), dict):
        raise InputError(f"--dreamer-eval {path} is not a result of sheeprl_dreamer_eval.py (no run and "
                         f"points); {fix}")
    if record.get("eval_seed") != EVAL_SEED:
        raise InputError(f"--dreamer-eval {path} played games from seed {record.get('eval_seed')}, not the "
                         f"evaluation games (seeds from {EVAL_SEED}); play them again with --seed "
                         f"{EVAL_SEED}")
    run = record["run"]
    obs = "onehot" if run.get("mlp_keys") and not run.get("cnn_keys") else "rgb"
    actions = "greedy" if record.get("actions", "").startswith("greedy") else "sampled"
    method = f"dreamer-rr{run['replay_ratio']:g}-{obs}-{actions}"
    settings = (f"XS, replay ratio {run['replay_ratio']:g}, learning starts {run['learning_starts']}, "
                f"{'one-hot vector (MLP)' if obs == 'onehot' else 'RGB (CNN)'}, trained on "
                f"{record.get('device_name') or run.get('accelerator', 'cpu')}")
    rows = []
    for point in sorted(record["points"], key=lambda p: p["step"]):
        if point["step"] not in budgets:
            continue
        row = {"steps": point["step"], "return": point["mean"], "games_ci95": point["ci95"],
               "episodes": point["episodes"], "cpu_minutes": point.get("train_cpu_minutes"),
               "evaluation": f"{actions} on the {point['episodes']} evaluation games",
               "settings": settings}
        if point.get("train_wall_minutes") is not None:
            row["wall_minutes"] = point["train_wall_minutes"]
        rows.append(row)
    return method, int(run["seed"]), rows


def dreamer_settings(log_dir: Path) -> str:
    """How the DreamerV3 run in ``log_dir`` was set (its ``config.yaml``): replay ratio and input."""
    import yaml

    config = yaml.safe_load(sorted(log_dir.rglob("config.yaml"))[0].read_text())
    algo = config.get("algo") or {}
    cnn = (algo.get("cnn_keys") or {}).get("encoder")
    ratio = algo.get("replay_ratio")
    return (f"replay ratio {ratio:g}, " if isinstance(ratio, (int, float)) else "") + (
        "RGB (CNN)" if cnn else "one-hot vector (MLP)" if cnn is not None else "input unrecorded") + (
        ", sheeprl's own training episodes")


def dreamer_seed(log_dir: Path) -> int:
    """The seed of the DreamerV3 run in ``log_dir`` (sheeprl's own ``config.yaml``)."""
    import yaml

    configs = sorted(log_dir.rglob("config.yaml"))
    if not configs or not (log_dir / "episodes.json").is_file():
        raise InputError(f"{log_dir} is not a DreamerV3 log folder of benchmarks/sheeprl_dreamer.py (it "
                         f"needs sheeprl's config.yaml and episodes.json; write the latter for a stopped run "
                         f"with `sheeprl_dreamer.py --episodes-only --out {log_dir}`)")
    return int(yaml.safe_load(configs[0].read_text())["seed"])


# ------------------------------------------------------------------------------------- summary
def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per method and budget: return and CPU minutes over seeds; greedy and random on the same games."""
    summary: dict[str, dict[str, Any]] = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method]
        summary[method] = {}
        for budget in sorted({r["steps"] for r in mine}):
            at = [r for r in mine if r["steps"] == budget and r["return"] is not None]
            if not at:
                continue
            cpu = [r["cpu_minutes"] for r in at]
            cell = {"return": mean_t_interval([r["return"] for r in at]),
                    "cpu_minutes": None if None in cpu else statistics.fmean(cpu)}
            if len(at) == 1 and at[0].get("games_ci95"):
                cell["games_ci95"] = at[0]["games_ci95"]  # one seed: its interval over the games
            if all("wall_minutes" in r for r in at):
                cell["wall_minutes"] = statistics.fmean(r["wall_minutes"] for r in at)
            used = sorted({r.get("steps_used", budget) for r in at})
            if used != [budget]:
                cell["steps_used"] = used
            greedy = [r["greedy"] for r in at if "greedy" in r]
            if greedy:
                cell["vs_greedy"] = cell["return"]["mean"] / statistics.fmean(greedy)
            summary[method][str(budget)] = cell
    baselines = [r for r in runs if "greedy" in r]
    for who in ("greedy", "random"):
        if baselines:
            summary[who] = {"any": {"return": mean_t_interval([r[who] for r in baselines])}}
    return summary


def print_table(summary: dict[str, dict[str, Any]], budgets: list[int]) -> None:
    print("\nreal return after N real learner steps, mean over seeds [95% t-interval], its share of "
          "greedy's; CPU minutes (and wall minutes where measured)")
    width = max(16, *(len(method) + 2 for method in summary))
    print(f"{'method':<{width}}" + "".join(f"{f'{b:,}':<44}" for b in budgets))
    for method, cells in summary.items():
        if method in ("greedy", "random"):
            cell = cells["any"]["return"]
            print(f"{method:<{width}}{_text(cell)} (the same games)")
            continue
        line = f"{method:<{width}}"
        for budget in budgets:
            cell = cells.get(str(budget))
            text = (_text(cell["return"]) + _games(cell) + _ratio(cell) + _used(cell) + _minutes(cell)
                    if cell else "-")
            line += f"{text:<44}"
        print(line)


def _text(cell: dict[str, Any]) -> str:
    ci = cell["ci95"]
    return f"{cell['mean']:.1f}" + (f" [{ci[0]:.0f}, {ci[1]:.0f}]" if ci else "")


def _games(cell: dict[str, Any]) -> str:
    ci = cell.get("games_ci95")
    return f" [{ci[0]:.0f}, {ci[1]:.0f}] over games" if ci else ""


def _minutes(cell: dict[str, Any]) -> str:
    cpu = "" if cell["cpu_minutes"] is None else f" {cell['cpu_minutes']:.1f}m"
    return cpu + (f" ({cell['wall_minutes']:.0f}m wall)" if "wall_minutes" in cell else "")


def _used(cell: dict[str, Any]) -> str:
    return f" (at {'/'.join(f'{u:,}' for u in cell['steps_used'])})" if "steps_used" in cell else ""


def _ratio(cell: dict[str, Any]) -> str:
    return f" {cell['vs_greedy']:.2f}x" if "vs_greedy" in cell else ""


def plot(summary: dict[str, dict[str, Any]], path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method, cells in summary.items():
        if method in ("greedy", "random"):
            ax.axhline(cells["any"]["return"]["mean"], ls="--" if method == "greedy" else ":", color="gray",
                       label=method)
            continue
        steps = sorted(int(b) for b in cells)
        means = [cells[str(b)]["return"]["mean"] for b in steps]
        line, = ax.plot(steps, means, "o-", label=method)
        lows = [(cells[str(b)]["return"]["ci95"] or [m, m])[0] for b, m in zip(steps, means, strict=True)]
        highs = [(cells[str(b)]["return"]["ci95"] or [m, m])[1] for b, m in zip(steps, means, strict=True)]
        ax.fill_between(steps, lows, highs, alpha=0.15, color=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("real learner steps")
    ax.set_ylabel("real return per episode")
    ax.set_title("Sample efficiency on Treasurehunt-v0")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


# ------------------------------------------------------------------------------------- command
def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/sample_efficiency.py", description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="+", choices=METHODS,
                        default=["learn", "dqn", "ppo"],
                        help="what to train (dreamer needs --dreamer-python)")
    parser.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budgets", type=positive_int, nargs="+", default=[5_000, 10_000, 25_000],
                        help="real learner steps")
    parser.add_argument("--episodes", type=positive_int, default=100,
                        help="real games of each evaluation (>= 2)")
    parser.add_argument("--learn", nargs="*", default=[], metavar="key=value",
                        help="overrides of the loop's config (rpg_worldmodel.learn's keys)")
    parser.add_argument("--dreamer-python", type=existing_file, default=None,
                        help="python of a virtualenv with sheeprl==0.8.4 (ANCHORS.md)")
    parser.add_argument("--dreamer", nargs="*", default=[], metavar="key=value",
                        help="more sheeprl overrides (sizes, replay ratio), passed to sheeprl_dreamer.py")
    parser.add_argument("--learn-from", type=Path, nargs="*", default=[], metavar="RUN",
                        help="finished rpg_worldmodel.learn run folders to read instead of training the "
                             "loop (their config names the method and seed)")
    parser.add_argument("--dreamer-from", type=Path, nargs="*", default=[], metavar="LOGS",
                        help="DreamerV3 log folders of sheeprl_dreamer.py to read instead of training it (a "
                             "stopped run counts to the budgets it reached; no CPU minutes)")
    parser.add_argument("--dreamer-eval", type=existing_file, nargs="*", default=[], metavar="JSON",
                        help="results of benchmarks/sheeprl_dreamer_eval.py (DreamerV3 checkpoints, greedy "
                             "on the evaluation games): a row per checkpoint at a budget")
    parser.add_argument("--merge", type=existing_file, nargs="*", default=[], metavar="JSON",
                        help="earlier results of this script whose runs join this table (e.g. DreamerV3's)")
    parser.add_argument("--keep", type=output_folder, default=None,
                        help="keep every run folder here (default: a temp folder)")
    parser.add_argument("--quick", action="store_true", help="1 seed, tiny budgets and models: a smoke check "
                                                             "(writes nothing)")
    parser.add_argument("--out", type=output_file, default=RESULTS, help="JSON output path (.png beside it)")
    return parser


QUICK_LEARN = ["collect_steps=1000", "collect_envs=5", "world_model_steps=6", "world_model_steps_later=4",
               "agent_steps=256", "world_model=[model.width=24,model.num_heads=2,model.num_layers=1]",
               "agent=[n_envs=4,hyperparams.n_steps=32,hyperparams.batch_size=64,eval.episodes=2]"]


def given_runs(args: Any, learned: list, dreamer_seeds: list, evaluated: list, budgets: list[int]) -> list:
    """The rows read from runs made before: ``--learn-from``, ``--dreamer-from``, ``--dreamer-eval``."""
    runs = [{"method": method, "seed": seed, **row} for run, (method, seed) in
            zip(args.learn_from, learned, strict=True) for row in learn_rows(run, budgets)]
    for logs, seed in zip(args.dreamer_from, dreamer_seeds, strict=True):
        runs += [{"method": "dreamer", "seed": seed, "settings": dreamer_settings(logs), **row}
                 for row in dreamer_rows(logs, budgets)]
    return runs + [{"method": m, "seed": seed, **row} for m, seed, rows in evaluated for row in rows]


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.episodes < 2:
        parser.error("--episodes must be >= 2 (a 95% interval needs two games)")
    parser.refuse_repeats(args, "seeds", "budgets", "methods")
    # A wrong folder or file fails before any work.
    dreamer_seeds = [dreamer_seed(logs) for logs in args.dreamer_from]
    learned = [learn_method(run) for run in args.learn_from]
    merged = [row for earlier in args.merge for row in merged_runs(earlier)]
    evaluated = [dreamer_eval_rows(path, sorted(args.budgets)) for path in args.dreamer_eval]
    if "dreamer" in args.methods and args.dreamer_python is None and not dreamer_seeds and not evaluated:
        parser.error("--methods dreamer needs --dreamer-python (a virtualenv with sheeprl==0.8.4, "
                     "ANCHORS.md)")
    if args.quick:
        args.seeds, args.budgets, args.episodes = args.seeds[:1], [1000, 2000], 4
        args.learn = [*QUICK_LEARN, *args.learn]
    budgets = sorted(args.budgets)
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        runs += given_runs(args, learned, dreamer_seeds, evaluated, budgets) + merged
        read_from = {"learn": args.learn_from,
                     "dreamer": [*args.dreamer_from, *args.dreamer_eval]}
        for method in args.methods:
            for seed in args.seeds:
                if read_from.get(method):
                    continue  # read from the given runs
                if method == "learn":
                    rows = run_learn(seed, budgets, args.episodes, root, args.learn)
                elif method == "dreamer":
                    rows = run_dreamer(args.dreamer_python, seed, budgets, root.resolve(), args.dreamer)
                else:
                    rows = [run_expert(method, seed, b, args.episodes, root) for b in budgets]
                for row in rows:
                    runs.append({"method": method, "seed": seed, **row})
                    shown = "n/a" if row["return"] is None else f"{row['return']:.1f}"
                    print(f"{method} seed {seed} at {row['steps']:,} steps: {shown}{_minutes(row)}",
                          flush=True)
    summary = summarize(runs)
    print_table(summary, budgets)
    if args.quick:
        return
    record = provenance(seed=args.seeds, methods=args.methods, budgets=budgets, episodes=args.episodes,
                        learn_from=[portable_path(r) for r in args.learn_from],
                        dreamer_from=[portable_path(r) for r in args.dreamer_from],
                        dreamer_eval=[portable_path(r) for r in args.dreamer_eval],
                        merged=[portable_path(m) for m in args.merge],
                        eval_seed=EVAL_SEED, learn_overrides=args.learn, dreamer_overrides=args.dreamer,
                        wall_seconds=round(time.perf_counter() - started, 1),
                        summary=summary, runs=runs)
    write_results(args.out, record, lambda png: plot(summary, png))


if __name__ == "__main__":
    end_with_caller()  # killed, or its caller killed: sheeprl's DreamerV3 process and the run folders go too
    run_command(main)
