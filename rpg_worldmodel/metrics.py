"""Compatibility alias: the evaluation metrics moved to `rpg_worldmodel.evaluation.metrics`."""

from rpg_worldmodel.evaluation.metrics import (  # noqa: F401
    Counts,
    Figures,
    Interval,
    action_counts,
    bootstrap_differences,
    bootstrap_figures,
    bootstrap_relative_gap,
    figures_from_counts,
    intervals_to_json,
    merge_counts,
    ratio,
    resample_weights,
    sum_by_unit,
    view_counts,
)
