"""How much longer context buys: the default world model trained with ``num_frames`` in
{5, 10, 20, 50} on the pipeline's data, each scored on the same held-out games per cell category
(in view, seen 1-5 / 6-20 / 21+ steps ago, never seen, spawned, the other agent), against the
floor, the motion oracle and the memory oracle, with its next-action accuracy and training time.

Every row has the memory map and the movement table (`model.memory_map`, `model.move_rules`, the
default); ``--baseline`` adds a 5-frame row with other overrides. The previous default's row (5
frames, neither, and the two-step memory convolution, a setting since removed:
``model.memory_conv``) was measured and stays in ``results/worldmodel_context.json``; the code
can no longer train it, so no baseline row runs by default. Every model trains the same number of steps on
the same train games; the batch shrinks as the context grows (``batch_size = 320 // num_frames``, at
least 4, and ``model.train_window=0``: a window is one sequence of ``num_frames`` steps) so that
every step scores about the same number of predictions (320) at about the same cost. Evaluation
is the pipeline's (`rpg_worldmodel.evaluation.run.Evaluation`: every held-out transition once,
with full history, the floor from a replay of the recorded games).

Goals: on cells seen 6-20 steps ago the 20-frame model closes at least half of the
gap between the motion oracle and the memory oracle; overall excess over the floor falls by at
least 25% from the previous default's (the baseline row of the committed results).

    python benchmarks/worldmodel_context.py [--frames 5 10 20 50] [--steps 1200] [--quick]

Writes ``benchmarks/results/worldmodel_context.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from rpg_base.cli import ArgumentParser, output_file, positive_int, run_command
from rpg_base.errors import InputError
from rpg_base.results import pyplot, save_figure, write_results

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_DATA = Path("runs/benchmarks/dqn_1500.h5")
CATEGORIES = ("in_view", "seen_1_5", "seen_6_20", "seen_21_plus", "never_seen", "spawned", "other_agent")
PREDICTORS = ("model", "memory_oracle", "motion_oracle")
BASELINE_LABEL = "T5_previous_default"  # 5 frames, the two-step conv, no map or table: the default before


def ensure_data(path: Path, games: int) -> Path:
    """The pipeline's self file (the shipped DQN expert, seed 0), recorded once and reused; an
    existing file is checked first (a folder or a foreign file is refused, before any training)."""
    from rpg_env.experts import pretrained_path
    from rpg_env.record import record
    from rpg_env.trajectories.reader import TrajectoryFile

    if path.is_dir():
        raise InputError(f"--data {path} is a folder: name a trajectory file (recorded there if missing)")
    if path.exists():
        with TrajectoryFile(path):
            return path
    path.parent.mkdir(parents=True, exist_ok=True)
    record(str(pretrained_path("dqn")), path, games, seed=0, num_envs=64, mode="w", policy_id="dqn",
           record_co_players=False)
    return path


def train_and_score(data: Path, frames: int, steps: int, root: Path, quick: bool,
                    extra: Sequence[str] = (), label: str = "", transfer: Path | None = None) -> dict:
    """Train the default config with ``frames`` of context (and the ``extra`` overrides); its
    held-out figures and seconds, and with ``transfer`` (another agent's games) its figures there
    and the self-vs-cross table with intervals."""
    from rpg_base.typed_config.config import with_overrides
    from rpg_worldmodel.config import WorldModelConfig
    from rpg_worldmodel.evaluation.run import EvalOptions, Evaluation
    from rpg_worldmodel.train import train

    base, batch = WorldModelConfig(), max(4, 320 // frames)
    small = {"width": 32, "num_heads": 2, "num_layers": 1} if quick else {}
    cfg = replace(base, data=replace(base.data, max_val_windows=64) if quick else base.data,
                  model=replace(base.model, num_frames=frames, train_window=0, **small),
                  train=replace(base.train, batch_size=batch, max_steps=steps,
                                eval_every=max(steps // 4, 1), checkpoint_every=max(steps // 4, 1),
                                warmup_steps=min(100, steps // 4), progress=False))
    cfg = with_overrides(cfg, extra).validate()
    label = label or f"T{frames}"
    cfg.data.path, cfg.out_dir = str(data), str(root / label)
    started = time.perf_counter()
    result = train(cfg)
    train_seconds = time.perf_counter() - started
    files = [data] if transfer is None else [data, transfer]
    ev = Evaluation(result.best, files, EvalOptions(num_boot=200 if quick else 1000, theory_of_mind=False))
    started = time.perf_counter()
    table = ev.evaluate_file(data, num_examples=0)
    preds = table["predictors"]
    row = {"label": label, "num_frames": frames, "overrides": list(extra), "memory_map": cfg.model.memory_map,
           "batch_size": batch, "steps": steps,
           "train_seconds": round(train_seconds, 1), "eval_seconds": round(time.perf_counter() - started, 1),
           "floor_method": table["floor_method"], "parameters": ev.model.num_parameters()}
    for name in PREDICTORS:
        row[name] = {k: preds[name][k] for k in ("view_ce", "excess_view_ce", "floor_view_ce")
                     if k in preds[name]}
        row[name].update({f"ce_{c}": preds[name][f"ce_{c}"] for c in CATEGORIES})
        row[name].update({f"excess_{c}": preds[name][f"excess_{c}"] for c in CATEGORIES})
    row["model"]["action_acc"] = preds["model"]["action_acc"]
    row["share"] = {c: preds["model"][f"share_{c}"]["value"] for c in CATEGORIES}
    if transfer is not None:
        ev.evaluate_file(transfer, num_examples=0)
        table = ev.transfer()[str(transfer)]
        row["transfer"] = {"data": str(transfer), "self": table["model"]["self"],
                           "cross": table["model"]["cross"], "relative_gap": table["relative_gap"]}
    return row


def summarise(rows: list[dict]) -> dict:
    """The two goals: the gap closed on cells seen 6-20 steps ago by each model (the 20-frame one
    is the goal's), and the fall of the overall excess over the floor relative to the baseline row
    (the previous default: 5 frames, no map or movement table) and to the 5-frame row."""
    sweep = {r["num_frames"]: r for r in rows if r["label"] != BASELINE_LABEL}
    baseline = next((r for r in rows if r["label"] == BASELINE_LABEL), None)
    out = {}
    for r in rows:
        motion = r["motion_oracle"]["ce_seen_6_20"]["value"]
        memory = r["memory_oracle"]["ce_seen_6_20"]["value"]
        model = r["model"]["ce_seen_6_20"]["value"]
        gap = motion - memory
        out[f"{r['label']}_gap_closed_seen_6_20"] = round((motion - model) / gap, 4) if gap else None
    for name, base in (("baseline", baseline), ("T5", sweep.get(5))):
        if base is None:
            continue
        excess = base["model"]["excess_view_ce"]["value"]
        for t, r in sweep.items():
            out[f"T{t}_excess_fall_vs_{name}"] = round(1 - r["model"]["excess_view_ce"]["value"] / excess, 4)
    return out


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    x = np.arange(len(CATEGORIES))
    width = 0.8 / (len(rows) + 2)
    for i, r in enumerate(rows):
        axes[0].bar(x + i * width, [r["model"][f"excess_{c}"]["value"] for c in CATEGORIES], width,
                    label=f"model {r['label']}")
    for j, name in enumerate(("memory_oracle", "motion_oracle")):
        axes[0].bar(x + (len(rows) + j) * width, [rows[0][name][f"excess_{c}"]["value"] for c in CATEGORIES],
                    width, label=name, hatch="//", alpha=0.6)
    axes[0].set_xticks(x + 0.4, CATEGORIES, rotation=20, fontsize=8)
    axes[0].set_yscale("symlog", linthresh=0.01)
    axes[0].set_ylabel("view CE minus the floor (nats/cell)")
    axes[0].legend(fontsize=7)
    sweep = [r for r in rows if r["label"] != BASELINE_LABEL]
    frames = [r["num_frames"] for r in sweep]
    excess = [r["model"]["excess_view_ce"]["value"] for r in sweep]
    seen = [r["model"]["excess_seen_6_20"]["value"] for r in sweep]
    axes[1].plot(frames, excess, "o-", label="model, all cells")
    axes[1].plot(frames, seen, "s-", label="model, seen 6-20 ago")
    for r in rows:
        if r["label"] == BASELINE_LABEL:
            axes[1].axhline(r["model"]["excess_view_ce"]["value"], ls=":", color="grey",
                            label="previous default (5 frames, no map or table), all cells")
    axes[1].axhline(rows[0]["memory_oracle"]["excess_seen_6_20"]["value"], ls="--", color="green",
                    label="memory oracle, seen 6-20 ago")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("num_frames")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/worldmodel_context.py",
                            description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=positive_int, nargs="+", default=[5, 10, 20, 50])
    parser.add_argument("--steps", type=positive_int, default=1200,
                        help="training steps of every row (the default's)")
    parser.add_argument("--data", type=output_file, default=None,
                        help=f"trajectory file, recorded once if missing (default {DEFAULT_DATA}; "
                             "with --quick a temporary one)")
    parser.add_argument("--transfer-data", type=Path, default=None,
                        help="another agent's trajectory file: every row is also scored there (self vs "
                             "cross, the transfer gap with intervals)")
    parser.add_argument("--games", type=positive_int, default=1500)
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny models, 20 steps, 60 games (no JSON)")
    parser.add_argument("--out", type=output_file, default=RESULTS / "worldmodel_context.json")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config overrides for every row, e.g. model.memory_map=false")
    parser.add_argument("--baseline", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides of a 5-frame baseline row, e.g. model.memory_map=false "
                        "model.move_rules=false (default: none; the previous default's row, with the "
                        "removed two-step convolution, is in the committed results)")
    return parser


def main(argv: list[str] | None = None) -> None:
    from rpg_base.provenance import pinned_torch_threads
    from rpg_base.typed_config.config import with_overrides
    from rpg_worldmodel.config import WorldModelConfig

    args = build_parser().parse_args(argv)
    if args.transfer_data is not None and not args.transfer_data.is_file():
        raise InputError(f"--transfer-data {args.transfer_data} is not a file: record the other agent's "
                         "games first (python -m rpg_env.record)")
    runs = [(5, [*args.set, *args.baseline], BASELINE_LABEL)] if args.baseline else []
    runs += [(frames, args.set, "") for frames in args.frames]
    base = WorldModelConfig()
    for frames, extra, _ in runs:  # every row's overrides are checked before the first is trained
        with_overrides(replace(base, model=replace(base.model, num_frames=frames)), extra).validate()
    with pinned_torch_threads(args.threads):  # and the caller's setting back after
        measure(args, runs)


def measure(args: argparse.Namespace, runs: list[tuple[int, list[str], str]]) -> None:
    """Train and score every row of ``runs``; print the table, write the JSON and plot."""
    from rpg_base.provenance import portable_path, provenance

    rows = []
    steps = 20 if args.quick else args.steps
    data = ensure_data(args.data or (Path(tempfile.mkdtemp()) / "dqn.h5" if args.quick else DEFAULT_DATA),
                       60 if args.quick else args.games)
    with tempfile.TemporaryDirectory() as root:
        for frames, extra, label in runs:
            rows.append(train_and_score(data, frames, steps, Path(root), args.quick, extra, label,
                                        args.transfer_data))
            r = rows[-1]
            m, mem, mot = (r[n] for n in PREDICTORS)
            print(f"{r['label']:>20}  train {r['train_seconds']:6.1f}s  view CE {m['view_ce']['value']:.4f}  "
                  f"excess {m['excess_view_ce']['value']:.4f}  "
                  f"seen 6-20: model {m['ce_seen_6_20']['value']:.3f} "
                  f"memory {mem['ce_seen_6_20']['value']:.3f} motion {mot['ce_seen_6_20']['value']:.3f}  "
                  f"action acc {m['action_acc']['value']:.3f}"
                  + (f"  cross {r['transfer']['cross']['action_acc']['value']:.3f}" if "transfer" in r
                     else ""),
                  flush=True)
    summary = summarise(rows)
    print(json.dumps(summary, indent=1))
    if not args.quick:
        record = provenance(seed=0, data=portable_path(data), threads=args.threads, rows=rows,
                            summary=summary, transfer_data=None if args.transfer_data is None
                            else portable_path(args.transfer_data))
        write_results(args.out, record, lambda png: plot(rows, png))


if __name__ == "__main__":
    run_command(main)
