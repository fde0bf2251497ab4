"""Compatibility alias: the baselines moved to `rpg_worldmodel.evaluation.baselines`."""

from rpg_worldmodel.evaluation.baselines import (  # noqa: F401
    ActionFrequencies,
    CalibratedCells,
    FittedBaselines,
    action_deltas,
    copy_view,
    fit_baselines,
    shift_view,
    views_to_codes,
)
