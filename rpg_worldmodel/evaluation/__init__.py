"""Held-out evaluation of a world model: which episodes (`episodes`), the baselines
(`baselines`), running model and baselines over the windows (`scoring`), counts and bootstrap
intervals (`metrics`), the tables (`tables`) and the driver that writes ``metrics.json`` (`run`).

`rpg_worldmodel.evaluate` is its command line; `rpg_worldmodel.report` formats its results.
"""
