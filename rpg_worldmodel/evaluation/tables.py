"""The evaluation's tables, as JSON-ready dicts: one file's figures beside the baselines (with
quality checks), the self-vs-cross transfer table, and the masking table.

Every figure carries a percentile bootstrap interval over games (`rpg_worldmodel.evaluation.
metrics`); model-minus-baseline differences use a paired bootstrap. Formatting them for
people is `rpg_worldmodel.report`'s job.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rpg_worldmodel.config import WorldModelConfig
from rpg_worldmodel.data.kinds import item_names, items_first
from rpg_worldmodel.evaluation import metrics as M
from rpg_worldmodel.evaluation.baselines import FittedBaselines
from rpg_worldmodel.evaluation.episodes import EvalSet
from rpg_worldmodel.evaluation.scoring import Scores, score_eval_set
from rpg_worldmodel.evaluation.theory_of_mind import theory_of_mind_counts, theory_of_mind_table
from rpg_worldmodel.models.world_model import WorldModel

#: Figures shown in the transfer table; ``total_ce`` is the reference's "state + action loss".
TRANSFER_FIGURES = ("view_ce", "action_ce", "total_ce", "cell_acc", "changed_acc", "f1_items", "action_acc")
MATCH_TOLERANCE = 0.01


def mask_figures(channel_names: Sequence[str]) -> tuple[str, ...]:
    """Figures of the masking table: the view's, the F1 of every kind of the data (items first) and
    the action accuracy."""
    kinds = tuple(f"f1_{n}" for n in items_first(channel_names))
    return ("view_ce", "cell_acc", "changed_acc", *kinds, "action_acc")


def quality_bar(channel_names: Sequence[str], view_baseline: str = "motion_oracle"
                ) -> tuple[tuple[str, str, str], ...]:
    """The quality bar: (figure, baseline, direction), with the F1 of each item of the data; the
    view's figures against ``view_baseline`` (the motion oracle; copy for a file of another game,
    which has no oracle).

    "lower" / "higher": the model must beat the baseline, i.e. the paired 95% interval of
    (model - baseline) must lie entirely on the better side. "match": the model may trail the
    baseline by at most `MATCH_TOLERANCE` (point estimate).
    """
    items = tuple((f"f1_{n}", view_baseline, "higher") for n in item_names(channel_names))
    return (("view_ce", view_baseline, "lower"), *items, ("action_acc", "majority_action", "higher"),
            ("reward_acc", "reward_rule", "match"))


def figure_table(scores: Scores, counts: dict[str, M.Counts] | None = None, num_boot: int = 1000,
                 seed: int = 0) -> dict:
    """Every predictor's figures with intervals, and model-minus-baseline paired differences."""
    counts = scores.counts if counts is None else counts
    fn = scores.figures_fn()
    out: dict = {"predictors": {}, "model_minus": {}}
    for name, c in counts.items():
        out["predictors"][name] = M.intervals_to_json(M.bootstrap_figures(c, fn, num_boot, seed))
    for name, c in counts.items():
        if name != "model":
            out["model_minus"][name] = M.intervals_to_json(
                M.bootstrap_differences(counts["model"], c, fn, num_boot, seed))
    return out


def quality_checks(file_result: dict) -> dict:
    """Each `quality_bar` criterion of the result's channels with its paired difference and whether
    it is met."""
    out = {}
    view_baseline = "motion_oracle" if "motion_oracle" in file_result["model_minus"] else "copy"
    for figure, baseline, direction in quality_bar(file_result["channel_names"], view_baseline):
        diff = file_result["model_minus"].get(baseline, {}).get(figure)
        if diff is None or diff["lo"] is None:
            out[f"{figure}_vs_{baseline}"] = {"difference": diff, "met": None, "better": direction}
            continue
        if direction == "match":
            met = diff["value"] >= -MATCH_TOLERANCE
        else:
            met = diff["hi"] < 0 if direction == "lower" else diff["lo"] > 0
        out[f"{figure}_vs_{baseline}"] = {"difference": diff, "met": bool(met), "better": direction}
    return out


def evaluate_file(model: WorldModel, config: WorldModelConfig, es: EvalSet, baselines: FittedBaselines,
                  num_boot: int = 1000, seed: int = 0, batch_size: int = 256, device: str = "cpu",
                  num_examples: int = 8, context: str = "full", floor: str | None = "auto",
                  expert: tuple[str, Path] | None = None) -> tuple[dict, Scores]:
    """The full held-out table of one file: predictors (with the figures per cell category and
    against the floor, unless ``floor`` is None), paired differences, per-policy tables, and with
    ``expert`` (``(name, model.zip)`` of the expert that played the file) the theory-of-mind
    ceiling (`rpg_worldmodel.evaluation.theory_of_mind`)."""
    scores = score_eval_set(model, config, es, baselines, batch_size=batch_size, device=device,
                            num_examples=num_examples, desc=f"evaluate {es.path.name}", context=context,
                            floor=floor, keep_model_views=expert is not None)
    result = {
        "file": str(es.path),
        "selection": es.label,
        "held_out": es.held_out,
        "episodes": len(es.episodes),
        "games": int(len(scores.unit_ids)),
        "windows": scores.num_windows,
        "predictions": scores.num_predictions,
        "context": context,
        "floor_method": scores.floor_method,
        "channel_names": list(scores.channel_names),
        **figure_table(scores, num_boot=num_boot, seed=seed),
        "by_policy": {pid: figure_table(scores, c, num_boot, seed)["predictors"]
                      for pid, c in scores.by_policy.items()},
    }
    result["quality_checks"] = quality_checks(result)
    if expert is not None:
        rows, steps, codes = scores.model_views
        references = theory_of_mind_counts(es, scores.unit_ids, rows, steps, codes, baselines, expert[1])
        result["theory_of_mind"] = theory_of_mind_table(scores.counts["model"], references, expert[0],
                                                        num_boot, seed)
        scores.model_views = None  # no longer needed; the views are large
    return result, scores


def transfer_table(self_scores: Scores, cross_scores: Scores, self_label: str, cross_label: str,
                   num_boot: int = 1000, seed: int = 0) -> dict:
    """Self-vs-cross figures of the model and the relative gap ``(cross - self) / self``."""
    fn = self_scores.figures_fn()
    out = {"self": self_label, "cross": cross_label, "gap_definition": "(cross - self) / self",
           "model": {}, "baselines_cross": {}}
    s = M.bootstrap_figures(self_scores.counts["model"], fn, num_boot, seed)
    c = M.bootstrap_figures(cross_scores.counts["model"], fn, num_boot, seed)
    out["model"]["self"] = {k: s[k].as_dict() for k in TRANSFER_FIGURES if k in s}
    out["model"]["cross"] = {k: c[k].as_dict() for k in TRANSFER_FIGURES if k in c}
    out["relative_gap"] = M.intervals_to_json(M.bootstrap_relative_gap(
        self_scores.counts["model"], cross_scores.counts["model"], fn, TRANSFER_FIGURES, num_boot, seed))
    for name in ("motion_oracle", "majority_action"):
        if name in cross_scores.counts:
            b = M.bootstrap_figures(cross_scores.counts[name], fn, num_boot, seed)
            out["baselines_cross"][name] = {k: b[k].as_dict() for k in TRANSFER_FIGURES if k in b}
    return out


def masking_table(models: dict[str, tuple[WorldModel, WorldModelConfig]], es: EvalSet,
                  eval_masks: Sequence[str], num_boot: int = 1000, seed: int = 0, batch_size: int = 256,
                  device: str = "cpu", context: str = "full") -> dict:
    """Rows: the mask a model was trained with; columns: the mask applied at evaluation.

    ``models`` maps a train-mask name to ``(model, config)``. Masks are seeded with ``seed``
    (the same cells hidden for every model). ``table`` cells: figures with intervals;
    ``cost`` cells (when ``"none"`` is among the columns): the paired increase of each figure
    over the same model's unmasked input, which compares rows trained for different lengths
    more fairly than the raw figures. ``train_steps``: each row's training length;
    ``fine_tuned_from``: the checkpoint a row's model started from (``train.init_from``), if any.
    """
    table: dict = {}
    cost: dict = {}
    steps: dict = {}
    starts: dict = {}
    for train_mask, (model, config) in models.items():
        table[train_mask], cost[train_mask] = {}, {}
        steps[train_mask] = int(getattr(config.train, "max_steps", 0))
        if getattr(config.train, "init_from", ""):
            starts[train_mask] = config.train.init_from
        counts = {}
        for eval_mask in eval_masks:
            scores = score_eval_set(model, config, es, None, mask_kind=eval_mask, mask_seed=seed,
                                    batch_size=batch_size, device=device,
                                    desc=f"mask train={train_mask} eval={eval_mask}", context=context)
            fn, figures = scores.figures_fn(), mask_figures(scores.channel_names)
            counts[eval_mask] = scores.counts["model"]
            figs = M.bootstrap_figures(counts[eval_mask], fn, num_boot, seed)
            table[train_mask][eval_mask] = {k: figs[k].as_dict() for k in figures if k in figs}
        if "none" in counts:
            for eval_mask in eval_masks:
                diff = M.bootstrap_differences(counts[eval_mask], counts["none"], fn, num_boot, seed)
                cost[train_mask][eval_mask] = {k: diff[k].as_dict() for k in figures if k in diff}
    return {"rows": "train mask", "columns": "eval mask", "file": str(es.path), "selection": es.label,
            "channel_names": es.store().channel_names,
            "episodes": len(es.episodes), "context": context, "train_steps": steps,
            "fine_tuned_from": starts, "table": table,
            "cost": cost if any(cost.values()) else {}}
