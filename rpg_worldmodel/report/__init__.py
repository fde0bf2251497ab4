"""Plots (matplotlib, Agg) and a short markdown report from an evaluation's ``metrics.json``.

    python -m rpg_worldmodel.report --metrics OUT/metrics.json [--run RUN_DIR]

Writes beside ``metrics.json``: ``learning_curves.png`` (from the run's ``metrics.csv``),
``entity_f1.png`` (per-entity F1, model vs baselines, 95% intervals), ``view_strip.png``
(last input / predicted / true views of held-out windows), ``transfer.png`` (self vs cross),
``masking.png`` (train mask x eval mask) and ``report.md`` linking them with the tables.

This package owns every human-readable rendering of the evaluation's results: the markdown
tables (`format_table`, `fmt_interval`, `fmt_percent`), the console summaries printed by
``rpg_worldmodel.evaluate`` and the pipeline, the plots and the report.
"""

from rpg_worldmodel.report.document import read_metrics, write_report
from rpg_worldmodel.report.plots import (
    PREDICTOR_COLOURS,
    cell_colours,
    plot_entity_f1,
    plot_learning_curves,
    plot_masking,
    plot_transfer,
    plot_view_strip,
    read_metrics_csv,
)
from rpg_worldmodel.report.text import (
    FIGURE_HELP,
    evaluation_summary,
    fmt_interval,
    fmt_percent,
    format_table,
    main_figures,
    quality_lines,
    recorded_kinds,
    rollout_goal,
    rollout_line,
    seeds_line,
    transfer_line,
)

__all__ = ["FIGURE_HELP", "PREDICTOR_COLOURS", "cell_colours", "evaluation_summary",
           "fmt_interval", "fmt_percent", "format_table", "main", "main_figures", "plot_entity_f1",
           "plot_learning_curves", "plot_masking", "plot_transfer", "plot_view_strip", "quality_lines",
           "read_metrics", "read_metrics_csv", "recorded_kinds", "rollout_goal", "rollout_line", "seeds_line",
           "transfer_line", "write_report"]


def main(argv=None):
    """``python -m rpg_worldmodel.report`` (see `rpg_worldmodel.report.__main__`)."""
    from rpg_worldmodel.report.__main__ import main as cli_main

    return cli_main(argv)
