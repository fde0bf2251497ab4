"""Plots (matplotlib, Agg) and a short markdown report from an evaluation's ``metrics.json``.

    python -m rpg_worldmodel.report --metrics OUT/metrics.json [--run RUN_DIR]

Writes beside ``metrics.json``: ``learning_curves.png`` (from the run's ``metrics.csv``),
``entity_f1.png`` (per-entity F1, model vs baselines, 95% intervals), ``view_strip.png``
(last input / predicted / true views of held-out windows), ``transfer.png`` (self vs cross),
``masking.png`` (train mask x eval mask) and ``report.md`` linking them with the tables.

This package owns every human-readable rendering of the evaluation's results: the markdown
tables (`format_table`, `fmt_interval`, `fmt_percent`), the console summaries printed by
``rpg_worldmodel.evaluate`` and the pipeline, the plots and the report. One job per module:
`text` (tables, console lines, the report's sections), `plots` (one function per PNG), `document`
(``report.md`` and its plots) and ``__main__`` (the command line).
"""
