"""Headline figures across training seeds, reported as the field reports them.

One model per training seed, all scored on the same held-out games of the same files. For every
headline figure: each seed's value, the mean over seeds, and a 95% interval from a two-level
stratified bootstrap that resamples seeds and games (`rpg_worldmodel.evaluation.metrics.
bootstrap_over_seeds`). The transfer gap resamples the games of both files, independently, with
the same seed draws.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rpg_worldmodel.evaluation import metrics as M
from rpg_worldmodel.evaluation.scoring import Scores

#: The figures of the held-out table reported across seeds (those a model has).
HEADLINE = ("view_ce", "cell_acc", "changed_acc", "f1_items", "action_acc", "action_ce", "total_ce",
            "reward_acc", "return_mae")
MODEL = "model"


def _row(interval: M.Interval, values: Sequence[float]) -> dict:
    return {"per_seed": [float(v) for v in values], **interval.as_dict()}


def seed_figures(scores: Sequence[Scores], num_boot: int, seed: int) -> dict[str, dict]:
    """``{figure: {"per_seed", "value" (the mean), "lo", "hi"}}`` of the model over ``scores``
    (one `Scores` per training seed, all of the same games)."""
    if any(not np.array_equal(s.unit_ids, scores[0].unit_ids) for s in scores):
        raise ValueError("every seed's model must be scored on the same games")
    intervals, per_seed = M.bootstrap_over_seeds([s.counts[MODEL] for s in scores], scores[0].figures_fn(),
                                                 num_boot, seed)
    return {name: _row(intervals[name], per_seed[name]) for name in HEADLINE if name in intervals}


def seed_transfer_gap(own: Sequence[Scores], cross: Sequence[Scores], num_boot: int, seed: int,
                      names: Sequence[str] = ("total_ce", "view_ce", "action_acc")) -> dict[str, dict]:
    """The relative gap ``(cross - self) / self`` across seeds: per seed, the mean, and an interval
    resampling seeds and, independently, the games of each file."""
    fn = own[0].figures_fn()
    ws = M.resample_weights(len(own[0].unit_ids), num_boot, seed)
    wc = M.resample_weights(len(cross[0].unit_ids), num_boot, seed + 1)
    picks = np.random.default_rng(seed + 2).integers(0, len(own), size=(num_boot, len(own)))

    def gaps(weights_self: np.ndarray | None, weights_cross: np.ndarray | None) -> list[M.Figures]:
        """Per seed, the gap figures of the games weighted so (None: every game once)."""
        def total(counts: M.Counts, w: np.ndarray | None) -> M.Figures:
            return fn({k: v.sum(0) if w is None else np.tensordot(w, v, axes=(1, 0))
                       for k, v in counts.items()})

        out = []
        for a, b in zip(own, cross, strict=True):
            fa, fb = total(a.counts[MODEL], weights_self), total(b.counts[MODEL], weights_cross)
            out.append({n: M.ratio(fb[n] - fa[n], fa[n]) for n in names if n in fa and n in fb})
        return out

    points, reps = gaps(None, None), gaps(ws, wc)
    rows = np.arange(num_boot)[:, None]
    result = {}
    for name in points[0]:
        values = [float(p[name]) for p in points]
        stacked = np.stack([r[name] for r in reps], axis=1)  # (B, S)
        result[name] = _row(M.bootstrap_interval(np.mean(values), stacked[rows, picks].mean(1)), values)
    return result


def across_seeds(seeds: Sequence[int], runs: Sequence[str], own: Sequence[Scores],
                 cross: Sequence[Scores] | None, num_boot: int, seed: int) -> dict:
    """The ``"seeds"`` part of metrics.json: the training seeds, their run folders, the self file's
    headline figures and (with ``cross``) the cross file's and the transfer gap, across seeds."""
    result = {"seeds": list(seeds), "runs": list(runs), "bootstrap": {
        "resampled": "seeds and games (stratified, two levels)", "replicates": num_boot, "level": 0.95,
        "seed": seed}, "self": seed_figures(own, num_boot, seed)}
    if cross is not None:
        result["cross"] = seed_figures(cross, num_boot, seed)
        result["transfer_gap"] = seed_transfer_gap(own, cross, num_boot, seed)
    return result
