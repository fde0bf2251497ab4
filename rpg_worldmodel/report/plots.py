"""The evaluation's plots (matplotlib on the file-only Agg backend), one function per PNG."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rpg_base.results import pyplot, save_figure
from rpg_env.game.constants import vocabulary
from rpg_worldmodel.data.kinds import items_first
from rpg_worldmodel.report.text import fmt_percent, recorded_kinds

#: Colours of kinds the game's vocabulary does not know, in turn (matplotlib's tab10 minus its
#: blue, orange and grey, which mark predictors).
OTHER_KIND_COLOURS = ("#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#2ca02c", "#d62728")


def cell_colours(channel_names: Sequence[str]) -> list[str]:
    """A colour per channel: the game's own tile colour for a kind its vocabulary names
    (`rpg_env.game.constants`: what the renderer draws), else one of `OTHER_KIND_COLOURS`."""
    vocab, others = vocabulary(), iter(OTHER_KIND_COLOURS * len(channel_names))
    return ["#" + bytes(vocab.cells[vocab.code(n)].rgb).hex() if n in vocab.cell_names else next(others)
            for n in channel_names]


PREDICTOR_COLOURS = {"model": "#4c72b0", "copy": "#999999", "motion_oracle": "#dd8452",
                     "majority_action": "#999999", "previous_action": "#dd8452", "model_sampled": "#8172b3",
                     "teacher_forced": "#55a868", "reward_rule": "#dd8452", "memory_oracle": "#c44e52"}


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
    plt = pyplot()
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
    return save_figure(fig, out)


def plot_entity_f1(file_result: dict, out: str | Path) -> Path:
    """Grouped bars: per-entity F1 of the model and the view baselines, with 95% intervals."""
    plt = pyplot()
    preds = [p for p in ("model", "motion_oracle", "copy") if p in file_result["predictors"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(preds)
    kinds = items_first(recorded_kinds(file_result))
    x = np.arange(len(kinds))
    for i, name in enumerate(preds):
        figs = file_result["predictors"][name]
        values, err = _err([figs.get(f"f1_{e}") for e in kinds])
        ax.bar(x + (i - (len(preds) - 1) / 2) * width, values, width, yerr=err, capsize=3, label=name,
               color=PREDICTOR_COLOURS.get(name))
    ax.set_xticks(x, kinds)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("F1 (next view)")
    ax.set_title("per-entity F1 on held-out episodes (95% bootstrap CI)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, out)


def plot_view_strip(examples_npz: str | Path, out: str | Path, max_examples: int = 6) -> Path | None:
    """Rows: last input view, predicted next view (arg-max), true next view."""
    plt = pyplot()
    from matplotlib.colors import ListedColormap

    data = np.load(examples_npz)
    if "input" not in data or len(data["input"]) == 0:
        return None
    names = [str(n) for n in data["channel_names"]]
    colours = cell_colours(names)
    cmap = ListedColormap(colours)
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
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours]
    fig.legend(handles, names, loc="lower center", ncol=len(names), fontsize=8, frameon=False)
    fig.suptitle("held-out windows: input, prediction, truth")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return save_figure(fig, out)


def plot_transfer(transfer: dict, out: str | Path, figures: Sequence[str] = ("view_ce", "action_ce",
                                                                            "total_ce")) -> Path:
    """Self vs cross bars (model) for the cross-entropies, with 95% intervals."""
    plt = pyplot()
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
    return save_figure(fig, out)


def plot_masking(masking: dict, out: str | Path, figure: str = "view_ce") -> Path:
    """Heatmap of one figure: rows = train mask, columns = eval mask."""
    plt = pyplot()
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
    return save_figure(fig, out)



def plot_rollout(rollout: dict, out: str | Path) -> Path:
    """Error against horizon: one panel per figure, a line and a 95% band per predictor."""
    plt = pyplot()
    figures = [f for f in ("view_ce", "f1_items", "reward_acc", "return_error")
               if f in rollout["predictors"]["model"]]
    fig, axes = plt.subplots(1, len(figures), figsize=(4.2 * len(figures), 3.6), squeeze=False)
    ks = np.arange(1, rollout["horizon"] + 1)
    for ax, figure in zip(axes[0], figures, strict=True):
        for name, columns in rollout["predictors"].items():
            if figure not in columns:
                continue
            values, err = _err(columns[figure])
            colour = PREDICTOR_COLOURS.get(name)
            ax.plot(ks, values, "o-", markersize=3, label=name, color=colour)
            ax.fill_between(ks, values - err[0], values + err[1], alpha=0.2, color=colour)
        ax.set_xlabel("horizon k (steps imagined)")
        ax.set_title(figure)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("open-loop rollouts on held-out games (95% bootstrap bands over games)")
    fig.tight_layout()
    return save_figure(fig, out)


def plot_rollout_strip(strip_npz: str | Path, out: str | Path) -> Path | None:
    """Real views (top row) and the model's imagined ones (bottom row) of one held-out start."""
    plt = pyplot()
    from matplotlib.colors import ListedColormap

    data = np.load(strip_npz)
    names = [str(n) for n in data["channel_names"]]
    cmap = ListedColormap(cell_colours(names))
    real, imagined = data["real"], data["imagined"]
    steps = len(imagined)
    if steps == 0:
        return None
    fig, axes = plt.subplots(2, steps + 1, figsize=(1.3 * (steps + 1), 3.0), squeeze=False)
    for j in range(steps + 1):
        for row, views in enumerate((real, imagined)):
            ax = axes[row, j]
            index = j if row == 0 else j - 1
            ax.set_xticks([])
            ax.set_yticks([])
            if row == 1 and j == 0:
                ax.axis("off")
                continue
            ax.imshow(views[index], cmap=cmap, vmin=-0.5, vmax=len(names) - 0.5, interpolation="nearest")
            ax.set_title(f"k={j}" if row == 0 else "", fontsize=8)
    axes[0, 0].set_ylabel("real")
    axes[1, 1].set_ylabel("imagined")
    fig.suptitle("one held-out game: the real future (top) and the model's open-loop imagination (bottom)")
    fig.tight_layout()
    return save_figure(fig, out)


def plot_seeds(seeds: dict, out: str | Path, figures: Sequence[str] = ("view_ce", "action_acc", "f1_items",
                                                                       "reward_acc")) -> Path:
    """Each headline figure of the held-out games across training seeds: one dot per seed, the
    mean with its seeds-and-games bootstrap interval."""
    plt = pyplot()
    shown = [f for f in figures if f in seeds["self"]]
    fig, axes = plt.subplots(1, len(shown), figsize=(2.6 * len(shown), 2.8), squeeze=False)
    for ax, name in zip(axes[0], shown, strict=True):
        row = seeds["self"][name]
        ax.scatter(np.zeros(len(row["per_seed"])) - 0.15, row["per_seed"], color=PREDICTOR_COLOURS["model"],
                   alpha=0.6, label="one seed")
        ax.errorbar([0.15], [row["value"]], yerr=_err([row])[1], fmt="o", color="black", capsize=4,
                    label="mean, 95% interval")
        ax.set_xlim(-0.6, 0.6)
        ax.set_xticks([])
        ax.set_title(name, fontsize=9)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"held-out figures across training seeds {', '.join(map(str, seeds['seeds']))}", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out)


def plot_cells(file_result: dict, out: str | Path,
               predictors: Sequence[str] = ("model", "memory_oracle", "motion_oracle")) -> Path | None:
    """Excess view cross-entropy over the floor per cell category (bars, 95% intervals), and each
    category's share of the cells; None when the evaluation has no categories."""
    from rpg_worldmodel.evaluation.metrics import CELL_CATEGORIES

    preds = file_result["predictors"]
    if "share_in_view" not in preds.get("model", {}):
        return None
    plt = pyplot()
    shown = [n for n in predictors if n in preds]
    cats = [c for c in CELL_CATEGORIES if preds["model"][f"share_{c}"]["value"]]
    fig, (ax, share_ax) = plt.subplots(1, 2, figsize=(11, 3.4), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(shown)
    x = np.arange(len(cats))
    for i, name in enumerate(shown):
        ivs = [preds[name].get(f"excess_{c}") for c in cats]
        values, err = _err(ivs)
        ax.bar(x + (i - (len(shown) - 1) / 2) * width, values, width, yerr=err, capsize=2,
               color=PREDICTOR_COLOURS.get(name, "#777777"), label=name)
    ax.set_xticks(x, cats, rotation=20, fontsize=8)
    ax.set_ylabel("view CE minus the floor (nats/cell)")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.legend(fontsize=8)
    shares = [preds["model"][f"share_{c}"]["value"] for c in cats]
    share_ax.barh(cats, shares, color="#999999")
    share_ax.set_xlabel("share of cells")
    share_ax.invert_yaxis()
    share_ax.tick_params(labelsize=8)
    fig.suptitle("where the error lives (held-out games)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out)

