"""Evaluation figures as sums of per-unit counts, with cluster-bootstrap confidence intervals.

Every figure here (cross-entropy, accuracies, precision/recall/F1) is a ratio of sums over
cells or steps. The evaluator turns each predictor's outputs into per-row counts
(`view_counts`, `action_counts`), sums them per *unit* (a game: the learner's and the
co-player's episodes of one game share a world, so they are one cluster), and `bootstrap`
resamples units with replacement. Windows within an episode overlap and episodes of one
game are correlated, so resampling windows would give intervals that are far too narrow.

Shapes: ``N`` rows (predictions), ``C`` cell classes (channels), ``V`` view side, ``U`` units,
``B`` bootstrap replicates. Cross-entropies are in nats (per cell, or per action).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

# The classes and items of the figures are the data's, from its channel names.
from rpg_worldmodel.data.kinds import entity_names, item_names
from rpg_worldmodel.data.stores import NO_ACTION

#: Steps per block of the return error (``return_mae``): the return summed over this many
#: consecutive scored steps of an episode, predicted against true.
RETURN_BLOCK = 10

#: Where a predicted cell lies (`rpg_worldmodel.evaluation.cells` defines each).
CELL_CATEGORIES: tuple[str, ...] = ("in_view", "seen_1_5", "seen_6_20", "seen_21_plus", "never_seen",
                                    "spawned", "other_agent")

Counts = dict[str, np.ndarray]
Figures = dict[str, np.ndarray]


# ---------------------------------------------------------------------------- per-row counts
def view_counts(log_probs: np.ndarray, target: np.ndarray, previous: np.ndarray) -> Counts:
    """Per-row counts of one next-view predictor.

    Args:
        log_probs: ``(N, C, V, V)`` log-probabilities over cell classes (any normalized
            log-distribution over axis 1; logits must go through ``log_softmax`` first).
        target: ``(N, V, V)`` int true class of every cell of the next view.
        previous: ``(N, V, V)`` int class of every cell of the last input view (unmasked),
            which defines the cells that change between t and t+1.

    Returns ``(N,)`` arrays ``ce_sum`` (nats), ``cells``, ``correct``, ``changed``,
    ``changed_correct`` and ``(N, C)`` arrays ``tp``, ``fp``, ``fn`` per class, where the
    prediction is the arg-max class.
    """
    log_probs = np.asarray(log_probs)
    target = np.asarray(target).astype(np.int64)
    previous = np.asarray(previous).astype(np.int64)
    if log_probs.ndim != 4 or target.shape != (log_probs.shape[0], *log_probs.shape[2:]):
        raise ValueError(f"log_probs must be (N, C, V, V) and target (N, V, V); got "
                         f"{log_probs.shape} and {target.shape}")
    if previous.shape != target.shape:
        raise ValueError(f"previous must have the target's shape {target.shape}, got {previous.shape}")
    num_classes = log_probs.shape[1]
    if target.size and (target.min() < 0 or target.max() >= num_classes):
        raise ValueError(f"target classes must be in 0..{num_classes - 1}")
    n = target.shape[0]
    nll = -np.take_along_axis(log_probs, target[:, None], axis=1)[:, 0]
    pred = log_probs.argmax(axis=1)
    hit = pred == target
    changed = previous != target
    counts: Counts = {
        "ce_sum": nll.reshape(n, -1).sum(1, dtype=np.float64),
        "cells": np.full(n, target[0].size if n else 0, dtype=np.float64),
        "correct": hit.reshape(n, -1).sum(1).astype(np.float64),
        "changed": changed.reshape(n, -1).sum(1).astype(np.float64),
        "changed_correct": (changed & hit).reshape(n, -1).sum(1).astype(np.float64),
    }
    classes = np.arange(num_classes)[None, :, None]
    pred_flat, true_flat = pred.reshape(n, 1, -1), target.reshape(n, 1, -1)
    is_pred, is_true = pred_flat == classes, true_flat == classes
    counts["tp"] = (is_pred & is_true).sum(2).astype(np.float64)
    counts["fp"] = (is_pred & ~is_true).sum(2).astype(np.float64)
    counts["fn"] = (~is_pred & is_true).sum(2).astype(np.float64)
    return counts


def action_counts(log_probs: np.ndarray, target: np.ndarray) -> Counts:
    """Per-row counts of a next-action predictor: ``log_probs`` ``(N, A)``, ``target`` ``(N,)``.

    Returns ``(N,)`` arrays ``action_ce_sum`` (nats), ``action_n`` and ``action_correct``. A target
    of `NO_ACTION` (-1: the game ended, no action follows) counts nothing.
    """
    log_probs = np.asarray(log_probs)
    target = np.asarray(target).astype(np.int64)
    if log_probs.ndim != 2 or target.shape != (log_probs.shape[0],):
        raise ValueError(f"log_probs must be (N, A) and target (N,); got {log_probs.shape}, {target.shape}")
    if target.size and (target.min() < NO_ACTION or target.max() >= log_probs.shape[1]):
        raise ValueError(f"target actions must be in 0..{log_probs.shape[1] - 1} (or {NO_ACTION}: none)")
    taken = target != NO_ACTION
    nll = -np.take_along_axis(log_probs, np.maximum(target, 0)[:, None], axis=1)[:, 0]
    return {
        "action_ce_sum": np.where(taken, nll, 0.0).astype(np.float64),
        "action_n": taken.astype(np.float64),
        "action_correct": ((log_probs.argmax(1) == target) & taken).astype(np.float64),
    }


def category_counts(log_probs: np.ndarray, target: np.ndarray, category: np.ndarray, floor: np.ndarray
                    ) -> Counts:
    """Per-row counts of a view predictor by cell category, and of the floor.

    Args:
        log_probs, target: as for `view_counts`.
        category: ``(N, V, V)`` int index into `CELL_CATEGORIES` of every cell.
        floor: ``(N, V, V)`` the floor's cross-entropy of every cell (nats).

    Returns ``(N,)`` ``floor_ce_sum`` and ``(N, K)`` ``cat_cells``, ``cat_ce_sum``, ``cat_correct``
    and ``cat_floor_sum`` (K categories).
    """
    target = np.asarray(target).astype(np.int64)
    n, k = target.shape[0], len(CELL_CATEGORIES)
    nll = -np.take_along_axis(np.asarray(log_probs), target[:, None], axis=1)[:, 0].reshape(n, -1)
    hit = (np.asarray(log_probs).argmax(axis=1) == target).reshape(n, -1)
    floor = np.asarray(floor, dtype=np.float64).reshape(n, -1)
    onehot = np.asarray(category, dtype=np.int64).reshape(n, -1, 1) == np.arange(k)  # (N, cells, K)
    return {
        "floor_ce_sum": floor.sum(1),
        "cat_cells": onehot.sum(1).astype(np.float64),
        "cat_ce_sum": np.einsum("nc,nck->nk", nll.astype(np.float64), onehot),
        "cat_correct": np.einsum("nc,nck->nk", hit.astype(np.float64), onehot),
        "cat_floor_sum": np.einsum("nc,nck->nk", floor, onehot),
    }


def reward_counts(log_probs: np.ndarray, target: np.ndarray) -> Counts:
    """Per-row counts of a reward predictor: ``log_probs`` ``(N, K)`` over reward classes,
    ``target`` ``(N, K)`` the true reward's weights over them (one class, or the two around it:
    `rpg_worldmodel.evaluation.scoring.reward_targets`). ``(N,)`` ``reward_ce_sum`` (nats),
    ``reward_n``, ``reward_correct`` (the likeliest class is the true reward's heaviest); ``(N, K)``
    ``reward_hit`` and ``reward_true`` (for per-class recall)."""
    log_probs, target = np.asarray(log_probs), np.asarray(target, dtype=np.float64)
    k = log_probs.shape[1]
    heaviest = target.argmax(1)
    hit = log_probs.argmax(1) == heaviest
    true = np.arange(k)[None, :] == heaviest[:, None]
    return {
        "reward_ce_sum": -(target * np.where(target > 0, log_probs, 0.0)).sum(1),  # 0 x -inf: no loss
        "reward_n": np.ones(len(target), dtype=np.float64),
        "reward_correct": hit.astype(np.float64),
        "reward_hit": (true & hit[:, None]).astype(np.float64),
        "reward_true": true.astype(np.float64),
    }


def end_counts(logits: np.ndarray, ended: np.ndarray) -> Counts:
    """Per-row counts of a game-end predictor: ``logits`` ``(N,)`` that the step ended its game,
    ``ended`` ``(N,)`` bool whether it did. ``(N,)`` ``end_ce_sum`` (nats, the binary cross-entropy),
    ``end_n``, and ``end_tp``, ``end_fp``, ``end_fn`` of the ends it calls (a logit above 0, the one
    half at which an imagined game ends)."""
    logits, ended = np.asarray(logits, dtype=np.float64), np.asarray(ended, dtype=bool)
    called = logits > 0
    return {
        "end_ce_sum": np.logaddexp(0.0, logits) - ended * logits,
        "end_n": np.ones(len(ended), dtype=np.float64),
        "end_tp": (called & ended).astype(np.float64),
        "end_fp": (called & ~ended).astype(np.float64),
        "end_fn": (~called & ended).astype(np.float64),
    }


def sum_by_unit(counts: Counts, unit_index: np.ndarray, num_units: int) -> Counts:
    """Sum per-row counts into ``(U, ...)`` per-unit counts (rows of unit ``u`` have index ``u``)."""
    unit_index = np.asarray(unit_index, dtype=np.int64)
    out: Counts = {}
    for key, value in counts.items():
        if len(value) != len(unit_index):
            raise ValueError(f"count {key!r} has {len(value)} rows but unit_index has {len(unit_index)}")
        total = np.zeros((num_units, *value.shape[1:]), dtype=np.float64)
        np.add.at(total, unit_index, value)
        out[key] = total
    return out


def merge_counts(*parts: Counts) -> Counts:
    """Add count dictionaries key by key (keys missing from a part count as absent there)."""
    out: Counts = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out[key] + value if key in out else np.array(value, dtype=np.float64)
    return out


# ---------------------------------------------------------------------------- figures
def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` elementwise, NaN where ``den`` is 0 (an undefined figure, not an error)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def figures_from_counts(totals: Counts, channel_names: Sequence[str],
                        reward_names: Sequence[str] = ()) -> Figures:
    """Figures from summed counts; works on leading replicate axes (``(B,)`` or scalars).

    View figures (when the view counts are present): ``view_ce`` (nats/cell), ``cell_acc``,
    ``changed_acc``, and ``precision_X``, ``recall_X``, ``f1_X`` for every channel but empty
    (`entity_names`), plus ``f1_items`` (mean F1 over the items, `item_names`). With category
    counts (`category_counts`): ``floor_view_ce``, ``excess_view_ce`` (view CE minus the floor),
    and per category X of `CELL_CATEGORIES` ``share_X`` (of the cells), ``ce_X``, ``acc_X`` and
    ``excess_X``.
    Action figures: ``action_ce`` (nats/step), ``action_acc``. Reward figures: ``reward_ce``
    (nats/step), ``reward_acc``, ``reward_recall_X`` per class X of ``reward_names``, and
    ``return_mae`` (points, mean absolute error of the return summed over a block of steps). End
    figures (`end_counts`): ``end_ce`` (nats/step), ``end_f1`` and ``end_recall`` of the ends called.
    Undefined ratios are NaN.
    """
    out: Figures = {}
    if "ce_sum" in totals:
        out["view_ce"] = ratio(totals["ce_sum"], totals["cells"])
        out["cell_acc"] = ratio(totals["correct"], totals["cells"])
        out["changed_acc"] = ratio(totals["changed_correct"], totals["changed"])
        tp, fp, fn = totals["tp"], totals["fp"], totals["fn"]
        item_f1 = []
        items = item_names(channel_names)
        for name in entity_names(channel_names):
            k = list(channel_names).index(name)
            out[f"precision_{name}"] = ratio(tp[..., k], tp[..., k] + fp[..., k])
            out[f"recall_{name}"] = ratio(tp[..., k], tp[..., k] + fn[..., k])
            out[f"f1_{name}"] = ratio(2 * tp[..., k], 2 * tp[..., k] + fp[..., k] + fn[..., k])
            if name in items:
                item_f1.append(out[f"f1_{name}"])
        if item_f1:
            out["f1_items"] = np.mean(np.stack(item_f1), axis=0)
    if "floor_ce_sum" in totals:
        out["floor_view_ce"] = ratio(totals["floor_ce_sum"], totals["cells"])
        out["excess_view_ce"] = out["view_ce"] - out["floor_view_ce"]
        for k, name in enumerate(CELL_CATEGORIES):
            cells = totals["cat_cells"][..., k]
            out[f"share_{name}"] = ratio(cells, totals["cells"])
            out[f"ce_{name}"] = ratio(totals["cat_ce_sum"][..., k], cells)
            out[f"acc_{name}"] = ratio(totals["cat_correct"][..., k], cells)
            out[f"excess_{name}"] = out[f"ce_{name}"] - ratio(totals["cat_floor_sum"][..., k], cells)
    if "action_ce_sum" in totals:
        out["action_ce"] = ratio(totals["action_ce_sum"], totals["action_n"])
    if "action_correct" in totals:  # hard predictors (the expert through an oracle) have no CE
        out["action_acc"] = ratio(totals["action_correct"], totals["action_n"])
    if "reward_ce_sum" in totals:
        out["reward_ce"] = ratio(totals["reward_ce_sum"], totals["reward_n"])
        out["reward_acc"] = ratio(totals["reward_correct"], totals["reward_n"])
        for k, name in enumerate(reward_names):
            out[f"reward_recall_{name}"] = ratio(totals["reward_hit"][..., k], totals["reward_true"][..., k])
    if "end_ce_sum" in totals:
        out["end_ce"] = ratio(totals["end_ce_sum"], totals["end_n"])
        tp, fp, fn = totals["end_tp"], totals["end_fp"], totals["end_fn"]
        out["end_f1"] = ratio(2 * tp, 2 * tp + fp + fn)
        out["end_recall"] = ratio(tp, tp + fn)
    if "return_abs_err_sum" in totals:
        out["return_mae"] = ratio(totals["return_abs_err_sum"], totals["return_blocks"])
    return out


# ---------------------------------------------------------------------------- bootstrap
@dataclass(frozen=True)
class Interval:
    """A point estimate (on all units) with a percentile bootstrap interval."""

    value: float
    lo: float
    hi: float

    def as_dict(self) -> dict[str, float | None]:
        return {k: (None if not np.isfinite(v) else float(v))
                for k, v in (("value", self.value), ("lo", self.lo), ("hi", self.hi))}


def resample_weights(num_units: int, num_boot: int, seed: int) -> np.ndarray:
    """``(B, U)`` multiplicities of each unit in ``B`` resamples with replacement (seeded)."""
    if num_units < 1:
        raise ValueError("the bootstrap needs at least one unit (game) to resample")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, num_units, size=(num_boot, num_units))
    weights = np.zeros((num_boot, num_units), dtype=np.float64)
    np.add.at(weights, (np.arange(num_boot)[:, None], picks), 1.0)
    return weights


def _resampled_totals(unit_counts: Counts, weights: np.ndarray) -> Counts:
    return {k: np.tensordot(weights, v, axes=(1, 0)) for k, v in unit_counts.items()}


def bootstrap_interval(point: np.ndarray | float, replicates: np.ndarray, level: float = 0.95
                       ) -> Interval:
    """``point`` with the percentile interval of its ``replicates`` (non-finite ones dropped)."""
    alpha = (1.0 - level) / 2.0
    finite = replicates[np.isfinite(replicates)]
    if finite.size == 0:
        return Interval(float(point), float("nan"), float("nan"))
    lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
    return Interval(float(point), float(lo), float(hi))


def bootstrap_figures(
    unit_counts: Counts,
    figures_fn: Callable[[Counts], Figures],
    num_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    weights: np.ndarray | None = None,
) -> dict[str, Interval]:
    """Point estimates and percentile intervals of ``figures_fn`` over resampled units."""
    num_units = len(next(iter(unit_counts.values())))
    weights = resample_weights(num_units, num_boot, seed) if weights is None else weights
    point = figures_fn({k: v.sum(0) for k, v in unit_counts.items()})
    reps = figures_fn(_resampled_totals(unit_counts, weights))
    return {name: bootstrap_interval(point[name], reps[name], level) for name in point}


def bootstrap_differences(
    counts_a: Counts,
    counts_b: Counts,
    figures_fn: Callable[[Counts], Figures],
    num_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Interval]:
    """Paired bootstrap of ``figure(a) - figure(b)`` for two predictors scored on the same units.

    Both predictors are resampled with the *same* unit multiplicities, so the interval
    reflects the difference on shared windows, not the spread of either alone.
    """
    num_units = len(next(iter(counts_a.values())))
    if len(next(iter(counts_b.values()))) != num_units:
        raise ValueError("a paired bootstrap needs both predictors scored on the same units")
    weights = resample_weights(num_units, num_boot, seed)
    pa = figures_fn({k: v.sum(0) for k, v in counts_a.items()})
    pb = figures_fn({k: v.sum(0) for k, v in counts_b.items()})
    ra = figures_fn(_resampled_totals(counts_a, weights))
    rb = figures_fn(_resampled_totals(counts_b, weights))
    shared = [name for name in pa if name in pb]
    return {name: bootstrap_interval(pa[name] - pb[name], ra[name] - rb[name], level) for name in shared}


def bootstrap_relative_gap(
    counts_self: Counts,
    counts_cross: Counts,
    figures_fn: Callable[[Counts], Figures],
    names: Sequence[str],
    num_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Interval]:
    """``(cross - self) / self`` (as in the reference's "+124%", here a fraction) per figure.

    The two sets are different games, so each is resampled independently.
    """
    ws = resample_weights(len(next(iter(counts_self.values()))), num_boot, seed)
    wc = resample_weights(len(next(iter(counts_cross.values()))), num_boot, seed + 1)
    ps = figures_fn({k: v.sum(0) for k, v in counts_self.items()})
    pc = figures_fn({k: v.sum(0) for k, v in counts_cross.items()})
    rs = figures_fn(_resampled_totals(counts_self, ws))
    rc = figures_fn(_resampled_totals(counts_cross, wc))
    out = {}
    for name in names:
        if name in ps and name in pc:
            out[name] = bootstrap_interval(ratio(pc[name] - ps[name], ps[name]),
                                           ratio(rc[name] - rs[name], rs[name]), level)
    return out


def bootstrap_over_seeds(
    seed_counts: Sequence[Counts],
    figures_fn: Callable[[Counts], Figures],
    num_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[dict[str, Interval], dict[str, list[float]]]:
    """Figures of several training seeds scored on the same units (games): the mean over seeds
    with a two-level stratified bootstrap interval (as rliable's, with games as the tasks' runs):
    each replicate draws seeds with replacement and one resample of the games shared by every
    drawn seed, and averages the drawn seeds' figures. Returns the intervals and each seed's own
    point estimates (in the order given)."""
    num_seeds = len(seed_counts)
    if num_seeds < 1:
        raise ValueError("give the counts of at least one seed")
    num_units = len(next(iter(seed_counts[0].values())))
    if any(len(next(iter(c.values()))) != num_units for c in seed_counts):
        raise ValueError("every seed must be scored on the same units (games)")
    weights = resample_weights(num_units, num_boot, seed)
    picks = np.random.default_rng(seed + 1).integers(0, num_seeds, size=(num_boot, num_seeds))
    points = [figures_fn({k: v.sum(0) for k, v in c.items()}) for c in seed_counts]
    reps = [figures_fn(_resampled_totals(c, weights)) for c in seed_counts]
    rows = np.arange(num_boot)[:, None]
    out: dict[str, Interval] = {}
    per_seed: dict[str, list[float]] = {}
    shared = [name for name in points[0] if all(name in p for p in points)]  # e.g. a floor scored once
    for name in shared:
        values = np.array([float(p[name]) for p in points])
        stacked = np.stack([np.asarray(r[name], dtype=np.float64) for r in reps], axis=1)  # (B, S)
        out[name] = bootstrap_interval(values.mean(), stacked[rows, picks].mean(1), level)
        per_seed[name] = values.tolist()
    return out, per_seed


def intervals_to_json(intervals: Mapping[str, Interval]) -> dict[str, dict[str, float | None]]:
    return {name: iv.as_dict() for name, iv in intervals.items()}
