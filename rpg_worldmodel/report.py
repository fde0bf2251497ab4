"""Plots (matplotlib, Agg) and a short markdown report from an evaluation's ``metrics.json``.

    python -m rpg_worldmodel.report --metrics OUT/metrics.json [--run RUN_DIR]

Writes beside ``metrics.json``: ``learning_curves.png`` (from the run's ``metrics.csv``),
``entity_f1.png`` (per-entity F1, model vs baselines, 95% intervals), ``view_strip.png``
(last input / predicted / true views of held-out windows), ``transfer.png`` (self vs cross),
``masking.png`` (train mask x eval mask) and ``report.md`` linking them with the tables.

This module owns every human-readable rendering of the evaluation's results: the markdown
tables (`format_table`, `fmt_interval`, `fmt_percent`), the console summaries printed by
``rpg_worldmodel.evaluate`` and the pipeline, the plots and the report.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rpg_env.cli import ArgumentParser, run_command
from rpg_env.errors import InputError
from rpg_worldmodel.evaluation.metrics import ENTITY_NAMES, ITEM_NAMES, RETURN_BLOCK
from rpg_worldmodel.evaluation.tables import MATCH_TOLERANCE

# Cell colours by class name (as the game's sprites: floor, wall, gem, bone, food, agent).
CELL_COLOURS = {"empty": "#ece8dc", "wall": "#545460", "gem": "#28a0e6", "bone": "#c82828",
                "food": "#3caa46", "agent": "#f0aa1e"}
PREDICTOR_COLOURS = {"model": "#4c72b0", "copy": "#999999", "motion_oracle": "#dd8452",
                     "majority_action": "#999999", "previous_action": "#dd8452"}
MAIN_FIGURES = ("view_ce", "cell_acc", "changed_acc", "f1_gem", "f1_bone", "f1_food", "f1_wall", "f1_agent",
                "action_ce", "action_acc")
SCORING_TEXT = {"full": "(every transition once, with up to num_frames steps of history).",
                "stride": "(every transition once; non-overlapping windows: 1..num_frames steps of history)."}
FIGURE_HELP = {
    "view_ce": "next-view cross-entropy, nats per cell (lower is better)",
    "cell_acc": "fraction of next-view cells predicted right",
    "changed_acc": "accuracy on the cells that change between t and t+1",
    "f1_X": "per-entity F1 of the arg-max prediction (gem, bone, food, wall, agent)",
    "action_ce": "next-action cross-entropy, nats per step",
    "action_acc": "next-action accuracy",
    "total_ce": "view_ce + action_ce (the reference's 'state + action loss')",
    "reward_ce, reward_acc": "reward-class cross-entropy (nats per step) and accuracy",
    "reward_recall_X": "share of the steps that gave reward class X predicted as X",
    "return_mae": "mean absolute error of the return summed over a block of steps (points)",
}


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend, imported on the first plot (formatting
    tables, as the command lines do, needs no matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ---------------------------------------------------------------------------- text
def fmt_interval(iv: dict | None) -> str:
    """``0.143 [0.140, 0.146]`` (value [95% interval]); ``-`` when undefined."""
    if not iv or iv.get("value") is None:
        return "-"
    lo, hi = iv.get("lo"), iv.get("hi")
    if lo is None or hi is None:
        return f"{iv['value']:.3f}"
    return f"{iv['value']:.3f} [{lo:.3f}, {hi:.3f}]"


def fmt_percent(iv: dict | None) -> str:
    """A relative figure as ``+54.6% [+45.4%, +65.3%]``; ``-`` when undefined."""
    if not iv or iv.get("value") is None:
        return "-"
    if iv.get("lo") is None:
        return f"{100 * iv['value']:+.1f}%"
    return f"{100 * iv['value']:+.1f}% [{100 * iv['lo']:+.1f}%, {100 * iv['hi']:+.1f}%]"


def _table(rows: dict[str, dict], figures: Sequence[str], first: str = "predictor") -> list[str]:
    lines = [f"| {first} | " + " | ".join(figures) + " |", "|" + " --- |" * (len(figures) + 1)]
    for name, figs in rows.items():
        lines.append(f"| {name} | " + " | ".join(fmt_interval(figs.get(f)) for f in figures) + " |")
    return lines


def format_table(result: dict, figures: Sequence[str] = MAIN_FIGURES) -> str:
    """A markdown table of one file's predictors (rows) by figures (columns), with intervals."""
    return "\n".join(_table(result["predictors"], figures))


def quality_lines(result: dict) -> list[str]:
    """One line per quality criterion of a file's result: the paired difference and whether it is met."""
    return [f"    {name}: model - baseline {fmt_interval(check['difference'])} "
            f"({check['better']} is better): {'met' if check['met'] else 'NOT met'}"
            for name, check in result["quality_checks"].items()]


def transfer_line(transfer: dict) -> str:
    """The headline of a transfer table: the relative gap in total cross-entropy."""
    gap = transfer["relative_gap"].get("total_ce")
    return f"relative gap in total CE (cross - self) / self: {fmt_percent(gap)}"


def evaluation_summary(results: dict) -> str:
    """What ``python -m rpg_worldmodel.evaluate`` prints: each file's table and each transfer gap."""
    lines = []
    for key, result in results["files"].items():
        lines += [f"\n{key}: {result['selection']} ({result['episodes']} episodes, {result['games']} games, "
                  f"{result['predictions']} predictions)", format_table(result)]
    for key, tr in results["transfer"].items():
        gap = tr["relative_gap"].get("total_ce")
        lines.append(f"\ntransfer to {key}: relative gap in total CE {fmt_interval(gap)}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- plots
def _err(ivs: Sequence[dict | None]) -> tuple[np.ndarray, np.ndarray]:
    values = np.array([np.nan if not iv or iv["value"] is None else iv["value"] for iv in ivs], dtype=float)
    lo = np.array([np.nan if not iv or iv.get("lo") is None else iv["lo"] for iv in ivs], dtype=float)
    hi = np.array([np.nan if not iv or iv.get("hi") is None else iv["hi"] for iv in ivs], dtype=float)
    err = np.stack([np.nan_to_num(values - lo), np.nan_to_num(hi - values)])
    return values, np.clip(err, 0, None)


def read_metrics_csv(path: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """A training ``metrics.csv`` as ``{split: {column: float array}}`` (rows grouped by their
    ``split`` column, e.g. train / val; one group ``"all"`` without it; blanks become NaN)."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    groups: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        group = groups.setdefault(row.get("split") or "all", {})
        for key, value in row.items():
            if key == "split":
                continue
            try:
                group.setdefault(key, []).append(float(value))
            except (TypeError, ValueError):
                group.setdefault(key, []).append(float("nan"))
    return {g: {k: np.asarray(v) for k, v in cols.items()} for g, cols in groups.items()}


def plot_learning_curves(metrics_csv: str | Path, out: str | Path,
                         columns: Sequence[str] = ("loss", "view_ce", "action_ce")) -> Path | None:
    """Loss columns against the step, one line per split (train, val); None if nothing to plot."""
    plt = _pyplot()
    groups = read_metrics_csv(metrics_csv)
    present = [c for c in columns
               if any(c in cols and np.isfinite(cols[c]).any() for cols in groups.values())]
    if not present or not any("step" in cols for cols in groups.values()):
        return None
    fig, axes = plt.subplots(1, len(present), figsize=(4.2 * len(present), 3.6), squeeze=False)
    for ax, column in zip(axes[0], present, strict=True):
        for split, cols in groups.items():
            if column not in cols or "step" not in cols:
                continue
            ok = np.isfinite(cols[column])
            if ok.any():
                ax.plot(cols["step"][ok], cols[column][ok], "o-" if ok.sum() < 30 else "-", markersize=3,
                        label=split)
        ax.set_xlabel("step")
        ax.set_title(column)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("nats")
    fig.suptitle("learning curves (metrics.csv)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)


def plot_entity_f1(file_result: dict, out: str | Path) -> Path:
    """Grouped bars: per-entity F1 of the model and the view baselines, with 95% intervals."""
    plt = _pyplot()
    preds = [p for p in ("model", "motion_oracle", "copy") if p in file_result["predictors"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(preds)
    x = np.arange(len(ENTITY_NAMES))
    for i, name in enumerate(preds):
        figs = file_result["predictors"][name]
        values, err = _err([figs.get(f"f1_{e}") for e in ENTITY_NAMES])
        ax.bar(x + (i - (len(preds) - 1) / 2) * width, values, width, yerr=err, capsize=3, label=name,
               color=PREDICTOR_COLOURS.get(name))
    ax.set_xticks(x, ENTITY_NAMES)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("F1 (next view)")
    ax.set_title("per-entity F1 on held-out episodes (95% bootstrap CI)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)


def plot_view_strip(examples_npz: str | Path, out: str | Path, max_examples: int = 6) -> Path | None:
    """Rows: last input view, predicted next view (arg-max), true next view."""
    plt = _pyplot()
    from matplotlib.colors import ListedColormap

    data = np.load(examples_npz)
    if "input" not in data or len(data["input"]) == 0:
        return None
    names = [str(n) for n in data["channel_names"]]
    cmap = ListedColormap([CELL_COLOURS.get(n, "#ffffff") for n in names])
    k = min(max_examples, len(data["input"]))
    fig, axes = plt.subplots(3, k, figsize=(1.6 * k, 5.2), squeeze=False)
    for row, key in enumerate(("input", "predicted", "true")):
        for j in range(k):
            ax = axes[row, j]
            ax.imshow(data[key][j], cmap=cmap, vmin=-0.5, vmax=len(names) - 0.5, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel({"input": "input (t)", "predicted": "predicted t+1", "true": "true t+1"}[key])
    handles = [plt.Rectangle((0, 0), 1, 1, color=CELL_COLOURS.get(n, "#fff")) for n in names]
    fig.legend(handles, names, loc="lower center", ncol=len(names), fontsize=8, frameon=False)
    fig.suptitle("held-out windows: input, prediction, truth")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)


def plot_transfer(transfer: dict, out: str | Path, figures: Sequence[str] = ("view_ce", "action_ce",
                                                                            "total_ce")) -> Path:
    """Self vs cross bars (model) for the cross-entropies, with 95% intervals."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.arange(len(figures))
    for i, side in enumerate(("self", "cross")):
        values, err = _err([transfer["model"][side].get(f) for f in figures])
        ax.bar(x + (i - 0.5) * 0.38, values, 0.38, yerr=err, capsize=3, label=side,
               color=("#4c72b0", "#c44e52")[i])
    ax.set_xticks(x, figures)
    ax.set_ylabel("nats")
    gap = transfer["relative_gap"].get("total_ce")
    ax.set_title(f"cross-agent transfer; gap in total CE {fmt_percent(gap)}")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)


def plot_masking(masking: dict, out: str | Path, figure: str = "view_ce") -> Path:
    """Heatmap of one figure: rows = train mask, columns = eval mask."""
    plt = _pyplot()
    table = masking["table"]
    rows = list(table)
    cols = list(next(iter(table.values())))
    def value(cell: dict) -> float:
        iv = cell.get(figure) or {}
        return np.nan if iv.get("value") is None else iv["value"]

    grid = np.array([[value(table[r][c]) for c in cols] for r in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(1.2 * len(cols) + 2, 0.7 * len(rows) + 1.8))
    im = ax.imshow(grid, cmap="viridis_r" if figure.endswith("ce") else "viridis", aspect="auto")
    for i in range(len(rows)):
        for j in range(len(cols)):
            ax.text(j, i, f"{grid[i, j]:.3f}", ha="center", va="center", color="w", fontsize=8)
    ax.set_xticks(range(len(cols)), cols, rotation=30)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("mask at evaluation")
    ax.set_ylabel("mask in training")
    ax.set_title(f"masking probes: {figure}")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)


def _held_out_section(results: dict) -> list[str]:
    """Header, the self file's table beside the baselines, the paired differences, the quality bar."""
    self_key = results["self"]
    main = results["files"][self_key]
    lines = ["# World model evaluation", ""]
    if not main.get("held_out", True):
        lines += ["**WARNING: these figures include TRAINING episodes; they are not held out.**", ""]
    lines += [
        f"Checkpoint `{results['checkpoint']}` (step {results.get('checkpoint_step')}, trained with "
        f"input mask `{results.get('train_mask', 'none')}`), evaluated on `{self_key}`: {main['selection']}, "
        f"{main['episodes']} episodes from {main['games']} games, {main['predictions']} predictions "
        + SCORING_TEXT[main.get("context", "full")],
        "",
        "Each cell: value [95% bootstrap interval], resampling games "
        f"({results['bootstrap']['replicates']} replicates). Baselines are fitted on the training split "
        f"only; the majority action is `{results['baselines']['majority_action']}`. Motion oracle: "
        f"{results['baselines']['motion_oracle']}.",
        "",
        "## Held-out table",
        "",
        *_table(main["predictors"], MAIN_FIGURES),
        "",
        "Model minus baseline (paired bootstrap; negative CE and positive accuracy/F1 favour the model):",
        "",
        *_table(main["model_minus"], MAIN_FIGURES, "model minus"),
        "",
    ]
    lines += _reward_section(results, main)
    if main.get("quality_checks"):
        lines += ["Quality bar: the paired 95% interval of model minus baseline must lie on the "
                  f"better side ('match': the model trails by at most {MATCH_TOLERANCE:g}).", "",
                  "| criterion | model minus baseline | better | met |",
                  "| --- | --- | --- | --- |"]
        for name, check in main["quality_checks"].items():
            met = {True: "yes", False: "**no**", None: "-"}[check["met"]]
            lines.append(f"| {name} | {fmt_interval(check['difference'])} | {check['better']} | {met} |")
        lines.append("")
    if len(main.get("by_policy", {})) > 1:
        lines += ["### By policy (stream)", ""]
        for pid, preds in main["by_policy"].items():
            lines += [f"`{pid}`:", "", *_table(preds, MAIN_FIGURES), ""]
    return lines


def _reward_section(results: dict, main: dict) -> list[str]:
    """The reward head beside the rule that reads the reward off the view and the action."""
    predictors = {name: figs for name, figs in main["predictors"].items() if "reward_acc" in figs}
    if "model" not in predictors:
        return ["## Rewards", "", "This checkpoint has no reward head (a checkpoint of schema 1, or "
                "trained with model.reward_head=false): no reward figures.", ""]
    recalls = sorted({k for figs in predictors.values() for k in figs if k.startswith("reward_recall_")})
    figures = ["reward_ce", "reward_acc", "return_mae", *recalls]
    return ["## Rewards", "",
            "The learner's reward of each scored step, as a class; `return_mae`: mean absolute error "
            f"(points) of the return summed over blocks of {RETURN_BLOCK} consecutive steps (arg-max "
            f"predictions). Reward rule: {results['baselines'].get('reward_rule')}.", "",
            *_table(predictors, figures), ""]


def _transfer_section(key: str, tr: dict) -> list[str]:
    """One cross file: the model on self and cross, the baselines on cross, the relative gaps."""
    rows = {"self": tr["model"]["self"], "cross": tr["model"]["cross"],
            **{f"{b} on cross": v for b, v in tr["baselines_cross"].items()}}
    gaps = tr["relative_gap"]
    return ["## Cross-agent transfer", "",
            f"Self `{tr['self']}` vs cross `{key}`; relative gap = {tr['gap_definition']} "
            "(the reference notebook reported +124% on training data, one number, no interval).", "",
            *_table(rows, list(tr["model"]["self"]), "model on"),
            "", "| relative gap | " + " | ".join(gaps) + " |", "|" + " --- |" * (len(gaps) + 1),
            "| (cross - self) / self | " + " | ".join(fmt_percent(v) for v in gaps.values()) + " |", ""]


def _masking_section(mk: dict) -> list[str]:
    """Train mask x eval mask: view CE with mean item F1, then each mask's paired cost."""
    steps = mk.get("train_steps", {})
    lines = ["## Masking probes", "",
             f"On {mk.get('episodes', '?')} test episodes ({mk.get('context', 'full')} windows). "
             "Rows: mask used in training (with its training steps); columns: mask applied to the "
             "input at evaluation (targets are never masked). Cells: next-view CE (nats/cell) and "
             "mean item F1 in parentheses.", ""]
    cols = list(next(iter(mk["table"].values())))
    lines += ["| train \\ eval | " + " | ".join(cols) + " |", "|" + " --- |" * (len(cols) + 1)]
    for row, cells in mk["table"].items():
        rendered = []
        for c in cols:
            f1s = [cells[c].get(f"f1_{e}", {}).get("value") for e in ITEM_NAMES]
            f1s = [f for f in f1s if f is not None]
            rendered.append(fmt_interval(cells[c].get("view_ce")) + (f" ({np.mean(f1s):.2f})" if f1s else ""))
        label = f"{row} ({steps[row]} steps)" if row in steps else row
        lines.append(f"| {label} | " + " | ".join(rendered) + " |")
    lines.append("")
    if mk.get("cost"):
        lines += ["Cost of each mask: increase in view CE over the same model's unmasked input "
                  "(paired bootstrap). Rows trained for different lengths are compared through this "
                  "cost: a model that learned to infer what it cannot see pays less for a mask.", "",
                  "| train \\ eval | " + " | ".join(c for c in cols if c != "none") + " |",
                  "|" + " --- |" * len(cols)]
        for row, cells in mk["cost"].items():
            rendered = [fmt_interval(cells[c].get("view_ce")) for c in cols if c != "none"]
            lines.append(f"| {row} | " + " | ".join(rendered) + " |")
        lines.append("")
    return lines


def _plots(results: dict, out: Path, run_dir: str | Path | None) -> list[tuple[str, Path | None]]:
    """Every plot of the report, as (title, file) in the order shown."""
    plots: list[tuple[str, Path | None]] = []
    if run_dir is not None and (Path(run_dir) / "metrics.csv").exists():
        plots.append(("Learning curves", plot_learning_curves(Path(run_dir) / "metrics.csv",
                                                              out / "learning_curves.png")))
    plots.append(("Per-entity F1", plot_entity_f1(results["files"][results["self"]], out / "entity_f1.png")))
    if (out / "examples.npz").exists():
        plots.append(("Held-out views", plot_view_strip(out / "examples.npz", out / "view_strip.png")))
    for key, tr in results.get("transfer", {}).items():
        png = plot_transfer(tr, out / f"transfer_{Path(key).stem}.png")
        plots.append((f"Transfer to {Path(key).name}", png))
    if "masking" in results:
        plots.append(("Masking probes (view CE)", plot_masking(results["masking"], out / "masking.png")))
    return plots


def read_metrics(path: str | Path) -> dict:
    """An evaluation's ``metrics.json``, or `InputError` saying why it cannot be reported."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"metrics file {path} does not exist; write one with "
                                f"`python -m rpg_worldmodel.evaluate ... --out DIR`")
    try:
        results = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise InputError(f"{path} is not valid JSON ({err}); it was cut short or edited by hand, "
                         f"re-run the evaluation") from None
    keys = results if isinstance(results, dict) else {}
    missing = [key for key in ("self", "files", "bootstrap") if key not in keys]
    if missing:
        raise InputError(f"{path} is not a metrics.json written by rpg_worldmodel.evaluate (no {missing}); "
                         f"pass the metrics.json of an evaluation or pipeline run")
    return results


def write_report(metrics_path: str | Path, run_dir: str | Path | None = None,
                 extra_sections: Sequence[str] = ()) -> Path:
    """Make every plot and ``report.md`` beside ``metrics_path``; returns the report's path."""
    metrics_path = Path(metrics_path)
    out = metrics_path.parent
    results = read_metrics(metrics_path)
    lines = _held_out_section(results)
    for key, tr in results.get("transfer", {}).items():
        lines += _transfer_section(key, tr)
    if "masking" in results:
        lines += _masking_section(results["masking"])
    lines += ["## Plots", ""]
    for title, path in _plots(results, out, run_dir):
        if path is not None:
            lines += [f"### {title}", "", f"![{title}]({Path(path).name})", ""]
    lines += list(extra_sections)
    lines += ["## Figures", "", *[f"- `{k}`: {v}" for k, v in FIGURE_HELP.items()], "",
              "Every figure above is in `metrics.json` beside this report, with its interval.", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m rpg_worldmodel.report", description=__doc__.split("\n")[0])
    parser.add_argument("--metrics", required=True, help="metrics.json written by rpg_worldmodel.evaluate")
    parser.add_argument("--run", default=None,
                        help="training run folder (for the learning curves in its metrics.csv)")
    args = parser.parse_args(argv)
    print(write_report(args.metrics, args.run))
    return 0


if __name__ == "__main__":
    run_command(main)
