"""Held-out evaluation of a world model: which episodes (`episodes`), the hard predictors
(`oracles`) and the baselines calibrated from them (`baselines`), per-cell categories and the
floor (`cells`), running model and baselines over the windows (`scoring`), counts and bootstrap
intervals (`metrics`), the tables (`tables`), the next action's theory-of-mind ceiling
(`theory_of_mind`), open-loop rollouts (`rollouts`), figures across training seeds (`seeds`) and
the driver that writes ``metrics.json`` (`run`).

`rpg_worldmodel.evaluate` is its command line; `rpg_worldmodel.report` formats its results.
"""
