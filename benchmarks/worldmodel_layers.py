"""Attention or a self-referential weight matrix as the world model's global layer (seed 003's
SRWM, ``model.layer=srwm``), at equal parameters, on the same data and held-out games.

The data is seed 003's protocol (as ``benchmarks/worldmodel_generalisation.py``): ``--policy``
(greedy) recorded on ``--train-levels`` generated levels, and into another file on unseen levels.
Each row trains the default world model with one override set, the same seed, steps and batches:

- ``attention``: the default (causal attention over the last ``num_frames`` steps);
- ``srwm``: ``model.layer=srwm``, one head of the full width (parameters within 0.1% of attention's);
- with ``--no-map``, the same pair with ``model.memory_map=false``: no egocentric map of cells seen
  before, so what the model remembers past its window is what its global layer carries.

Measured per row:

- **quality**: the pipeline's evaluation (view CE, the floor, the excess over it, the cells-seen-ago
  categories, the next action; 95% bootstrap intervals) on the held-out games of the training levels
  and on every game of the unseen ones;
- **training**: wall seconds, the validation view CE against wall seconds, and the seconds to reach
  quality: the attention row's final validation view CE (+ ``--quality-margin``);
- **imagination**: steps/s of the model alone (``imagine_step``, ``--worlds`` worlds on the unseen
  file's games, one torch thread, the median of 3 games) at turns 1-10 and 91-100, and for
  attention also over the whole history (``predict_last``: what a memory of the whole episode
  costs attention), and of ``TreasurehuntImagined-v0`` (sampling included) at the same turns.

Goals: view CE within 3% of attention's; imagination at turn 100 >= 0.9x turn 1; ahead of
attention on cells seen 21+ steps ago.

    python benchmarks/worldmodel_layers.py             # ~30 min on 2 cores (~60 with --no-map)
    python benchmarks/worldmodel_layers.py --quick     # tiny models: a smoke check (no JSON)

Writes ``benchmarks/results/worldmodel_layers.json`` and ``.png``.
"""

from __future__ import annotations

import csv
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from rpg_base.cli import ArgumentParser, float_in, output_file, positive_int, run_command
from rpg_base.errors import InputError
from rpg_base.provenance import pinned_torch_threads, provenance
from rpg_base.results import pyplot, save_figure, write_results
from rpg_env.level_split import LEVEL_SETS as FILES
from rpg_env.level_split import add_level_split_arguments, level_split, record_level_split

RESULTS = Path(__file__).resolve().parent / "results" / "worldmodel_layers.json"
CATEGORIES = ("in_view", "seen_1_5", "seen_6_20", "seen_21_plus", "never_seen", "spawned", "other_agent")
QUICK = ["model.width=32", "model.num_heads=2", "model.num_layers=1", "model.refiner_layers=0",
         "train.max_steps=20", "train.eval_every=10", "train.checkpoint_every=10", "train.warmup_steps=2",
         "data.max_val_windows=64"]
EARLY, LATE = range(1, 11), range(91, 101)  # the turns timed
REPEATS = 3  # games timed per path


def rows_to_run(no_map: bool) -> dict[str, list[str]]:
    rows = {"attention": [], "srwm": ["model.layer=srwm"]}
    if no_map:
        rows |= {"attention, no map": ["model.memory_map=false"],
                 "srwm, no map": ["model.layer=srwm", "model.memory_map=false"]}
    return rows


def train_row(data: Path, folder: Path, overrides: list[str]) -> tuple[Path, float, list[dict[str, float]]]:
    """(best checkpoint, training seconds, validation curve: step, seconds, view CE)."""
    from rpg_worldmodel.config import load_world_model_config
    from rpg_worldmodel.train import train

    cfg = load_world_model_config(None, overrides)
    cfg.data.path, cfg.out_dir = str(data), str(folder)
    result = train(cfg)
    with open(folder / "metrics.csv", newline="") as f:
        curve = [{"step": int(r["step"]), "seconds": float(r["elapsed_s"]), "view_ce": float(r["view_ce"])}
                 for r in csv.DictReader(f) if r["split"] == "val"]
    return result.best, result.wall_s, curve


def score(checkpoint: Path, files: dict[str, Path], num_boot: int) -> tuple[dict[str, dict[str, Any]], int]:
    """Each file's model figures (held-out games of the training file, every unseen game) and the
    model's parameter count."""
    from rpg_worldmodel.evaluation.run import EvalOptions, Evaluation

    ev = Evaluation(checkpoint, list(files.values()), EvalOptions(num_boot=num_boot, theory_of_mind=False))
    keys = ["view_ce", "floor_view_ce", "excess_view_ce", "action_acc", *(f"excess_{c}" for c in CATEGORIES)]
    out = {}
    for name, path in files.items():
        model = ev.evaluate_file(path, num_examples=0)["predictors"]["model"]
        out[name] = {k: model[k] for k in keys if k in model}
    return out, ev.model.num_parameters()


def model_step_rates(checkpoint: Path, data: Path, worlds: int) -> dict[str, dict[str, float]]:
    """Steps/s of the model alone at the early and late turns, stepping ``worlds`` recorded games
    (their views and actions) through ``imagine_step``; attention also through ``predict_last`` over
    the whole history."""
    import torch

    from rpg_env.trajectories.reader import TrajectoryFile
    from rpg_worldmodel.checkpoint import load_checkpoint

    model = load_checkpoint(checkpoint).model
    with TrajectoryFile(data) as tf:
        games = [g for g in tf.read_episodes(range(min(len(tf), 4 * worlds)))
                 if len(g["actions"]) >= LATE[-1]]
    if len(games) < worlds:
        raise InputError(f"{data} has {len(games)} games of {LATE[-1]}+ steps; --worlds {worlds} "
                         f"needs as many")
    views = torch.from_numpy(np.stack([g["obs"][:LATE[-1]] for g in games[:worlds]])).float()
    actions = torch.from_numpy(np.stack([g["actions"][:LATE[-1]] for g in games[:worlds]]))
    paths = {"carried": lambda t, state: model.imagine_step(views[:, t], actions[:, t], state)[1]}
    if model.cfg.layer == "attention":
        paths["whole history"] = lambda t, state: model.predict_last(views[:, :t + 1], actions[:, :t + 1])
    rates = {}
    with torch.no_grad():
        for name, step in paths.items():
            runs = []
            for _ in range(REPEATS):
                seconds, state = [], None
                for t in range(LATE[-1]):
                    started = time.perf_counter()
                    state = step(t, state)
                    seconds.append(time.perf_counter() - started)
                runs.append(seconds)
            rates[name] = turn_rates(runs, worlds)
    return rates


def env_step_rates(checkpoint: Path, worlds: int) -> dict[str, float]:
    """Agent-steps/s of ``TreasurehuntImagined-v0`` (``worlds`` worlds, random actions, sampling
    included) at the early and late turns of one game."""
    import gymnasium as gym

    import rpg_worldmodel

    venv = gym.make_vec(rpg_worldmodel.IMAGINED_ENV_ID, num_envs=worlds, checkpoint=str(checkpoint),
                        torch_threads=1)
    rng = np.random.default_rng(0)
    runs = []
    for game in range(REPEATS):
        venv.reset(seed=game)
        seconds = []
        for _ in range(LATE[-1] - 1):  # the game's last turn truncates and restarts every world
            action = rng.integers(0, 4, worlds)
            started = time.perf_counter()
            venv.step(action)
            seconds.append(time.perf_counter() - started)
        runs.append(seconds)
    venv.close()
    return turn_rates(runs, worlds, late=range(LATE[0] - 1, LATE[-1] - 1))


def turn_rates(runs: list[list[float]], worlds: int, late: range = LATE) -> dict[str, float]:
    """Agent-steps/s from each run's per-turn seconds (index 0 = turn 1): the median over the runs
    and the turns of each range (timer noise on a shared CPU is larger than one turn's cost)."""
    early = worlds / statistics.median(s for run in runs for s in run[EARLY[0] - 1:EARLY[-1]])
    late_rate = worlds / statistics.median(s for run in runs for s in run[late[0] - 1:late[-1]])
    return {"turn_1_10": early, "turn_91_100": late_rate, "late_over_early": late_rate / early}


def seconds_to_reach(curve: list[dict[str, float]], target: float) -> float | None:
    """Wall seconds of the first validation at or below ``target`` view CE (None: never)."""
    return next((point["seconds"] for point in curve if point["view_ce"] <= target), None)


def summarise(rows: dict[str, dict[str, Any]], margin: float) -> dict[str, Any]:
    """The srwm rows against their attention rows: the ratio of view CE (goal <= 1.03), the late
    imagination rate over the early one (goal >= 0.9), cells seen 21+ steps ago, time to quality."""
    out = {}
    for name, row in rows.items():
        if not name.startswith("srwm"):
            continue
        base = rows[name.replace("srwm", "attention")]
        target = base["curve"][-1]["view_ce"] + margin
        out[name] = {
            "against": name.replace("srwm", "attention"),
            "parameters_ratio": row["parameters"] / base["parameters"],
            "view_ce_ratio": {f: row["scores"][f]["view_ce"]["value"] / base["scores"][f]["view_ce"]["value"]
                              for f in FILES},
            "excess_seen_21_plus": {f: {"srwm": row["scores"][f]["excess_seen_21_plus"],
                                        "attention": base["scores"][f]["excess_seen_21_plus"]}
                                    for f in FILES},
            "quality_target_view_ce": target,
            "seconds_to_quality": {"srwm": seconds_to_reach(row["curve"], target),
                                   "attention": seconds_to_reach(base["curve"], target)},
            "train_seconds_ratio": row["train_seconds"] / base["train_seconds"],
            "model_late_over_early": row["model_rates"]["carried"]["late_over_early"],
            "attention_whole_history_late_over_early":
                base["model_rates"]["whole history"]["late_over_early"],
        }
    return out


def interval(x: dict[str, float]) -> str:
    return f"{x['value']:.4f} [{x['lo']:.4f}, {x['hi']:.4f}]"


def print_tables(rows: dict[str, dict[str, Any]], summary: dict[str, Any]) -> None:
    print(f"\n{'row':<20} {'games':<16} {'view CE':>26} {'excess':>8} {'excess seen 21+':>26} "
          f"{'action acc':>10}")
    for name, row in rows.items():
        for f in FILES:
            s = row["scores"][f]
            print(f"{name:<20} {f:<16} {interval(s['view_ce']):>26} {s['excess_view_ce']['value']:>8.4f} "
                  f"{interval(s['excess_seen_21_plus']):>26} {s['action_acc']['value']:>10.3f}")
    print(f"\n{'row':<20} {'params':>9} {'train s':>8} {'model steps/s t1-10':>20} {'t91-100':>9} "
          f"{'env steps/s t1-10':>18} {'t91-100':>9}")
    for name, row in rows.items():
        m, e = row["model_rates"]["carried"], row["env_rates"]
        print(f"{name:<20} {row['parameters']:>9,} {row['train_seconds']:>8.0f} {m['turn_1_10']:>20,.0f} "
              f"{m['turn_91_100']:>9,.0f} {e['turn_1_10']:>18,.0f} {e['turn_91_100']:>9,.0f}")
        if "whole history" in row["model_rates"]:
            w = row["model_rates"]["whole history"]
            print(f"{'  (whole history)':<20} {'':>9} {'':>8} {w['turn_1_10']:>20,.0f} "
                  f"{w['turn_91_100']:>9,.0f}")
    for name, s in summary.items():
        ratio = ", ".join(f"{f} {v:.3f}" for f, v in s["view_ce_ratio"].items())
        reach = s["seconds_to_quality"]
        print(f"{name} / {s['against']}: view CE {ratio}; model turn 91-100 / 1-10 "
              f"{s['model_late_over_early']:.2f}; seconds to val view CE {s['quality_target_view_ce']:.4f}: "
              f"srwm {reach['srwm']}, attention {reach['attention']}")


def plot(rows: dict[str, dict[str, Any]], path: Path) -> None:
    plt = pyplot()

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    x = np.arange(len(CATEGORIES))
    width = 0.8 / len(rows)
    for i, (name, row) in enumerate(rows.items()):
        values = [row["scores"]["training levels"][f"excess_{c}"]["value"] for c in CATEGORIES]
        left.bar(x + i * width, values, width, label=name)
        curve = row["curve"]
        right.plot([p["seconds"] for p in curve], [p["view_ce"] for p in curve], marker="o", label=name)
    left.set_xticks(x + 0.4 - width / 2, CATEGORIES, rotation=20, fontsize=8)
    left.set_yscale("symlog", linthresh=0.01)
    left.set_ylabel("view CE minus the floor (nats/cell)")
    left.set_title("Held-out games, training levels")
    left.legend(fontsize=8)
    right.set_xlabel("training wall seconds (2 threads)")
    right.set_ylabel("validation view CE")
    right.set_title("Time to quality")
    right.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/worldmodel_layers.py", description=__doc__.split("\n")[0])
    parser.add_argument("--policy", default="greedy",
                        help="the recorded policy (anything record --policy takes)")
    add_level_split_arguments(parser)
    parser.add_argument("--games", type=positive_int, default=1500,
                        help="games recorded on the training levels")
    parser.add_argument("--unseen-games", type=positive_int, default=150,
                        help="games recorded on unseen levels")
    parser.add_argument("--no-map", action="store_true",
                        help="also the pair without the memory map (the layer alone remembers)")
    parser.add_argument("--worlds", type=positive_int, default=64, help="worlds stepped together when timing")
    parser.add_argument("--quality-margin", type=float_in(0.0, 1.0), default=0.002,
                        help="time to quality: to the attention row's final validation view CE plus this")
    parser.add_argument("--threads", type=positive_int, default=2, help="torch CPU threads for training")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for every row")
    parser.add_argument("--quick", action="store_true", help="tiny models, 20 steps, 40 + 10 games (no JSON)")
    parser.add_argument("--out", type=output_file, default=RESULTS, help="JSON output path (.png beside it)")
    return parser


def main(argv: list[str] | None = None) -> None:
    from rpg_env.policies.registry import make_policy
    from rpg_worldmodel.config import load_world_model_config

    parser = build_parser()
    args = parser.parse_args(argv)
    levels = level_split(parser, args)
    try:  # an unknown policy or override fails before anything is recorded
        make_policy(args.policy)
    except (TypeError, ValueError) as err:
        raise InputError(f"--policy: {err}") from err
    plan = {name: [*(QUICK if args.quick else []), "train.progress=false", "train.eval_every=200",
                   *args.set, *extra] for name, extra in rows_to_run(args.no_map).items()}
    for overrides in plan.values():
        load_world_model_config(None, overrides)
    games, unseen_games = (40, 10) if args.quick else (args.games, args.unseen_games)
    worlds = min(args.worlds, unseen_games)
    started = time.perf_counter()
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        games_per_side = dict(zip(FILES, (games, unseen_games), strict=True))
        files, recorded = record_level_split(args.policy, root, levels, games_per_side)
        for i, (name, overrides) in enumerate(plan.items()):
            print(f"[{i + 1}/{len(plan)}] {name}: training ...", flush=True)
            with pinned_torch_threads(args.threads):
                checkpoint, seconds, curve = train_row(files["training levels"], root / f"row{i}", overrides)
                scores, parameters = score(checkpoint, files, 200 if args.quick else 1000)
            with pinned_torch_threads(1):
                model_rates = model_step_rates(checkpoint, files["unseen levels"], worlds)
                env_rates = env_step_rates(checkpoint, worlds)
            rows[name] = {"overrides": overrides, "parameters": parameters,
                          "train_seconds": round(seconds, 1), "curve": curve, "scores": scores,
                          "model_rates": model_rates, "env_rates": env_rates}
    summary = summarise(rows, args.quality_margin)
    print_tables(rows, summary)
    if args.quick:
        return
    record_ = provenance(seed=0, policy=args.policy, level_sets=levels, overrides=args.set, rows=rows,
                         recorded={k: {f: v[f] for f in ("games", "agent_steps", "mean_return")}
                                   for k, v in recorded.items()},
                         wall_seconds=round(time.perf_counter() - started, 1), summary=summary,
                         goals={"view_ce_ratio": "<= 1.03", "model_late_over_early": ">= 0.9",
                                "excess_seen_21_plus": "srwm below attention"})
    write_results(args.out, record_, lambda png: plot(rows, png))


if __name__ == "__main__":
    run_command(main)
