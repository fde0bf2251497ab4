"""Data for the world model: trajectory files (`sources`), several files of one game as one set of
episodes (`shards`), where the steps are held, in memory or streamed from disk (`stores`), the one
windowing of their episodes shared by training and evaluation (`windows`), input masks (`masks`),
and the kinds of cell a file names, read from its channel names (`kinds`).

Nothing here imports the environment: the trajectory file is the contract with the game.
"""
