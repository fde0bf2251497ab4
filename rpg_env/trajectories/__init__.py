"""Trajectory files: the HDF5 schema shared by `rpg_env` (writer) and `rpg_worldmodel` (reader).

Game-free on purpose: the package needs only NumPy, h5py, Gymnasium, the standard library
and the env protocol (`rpg_env.envs.protocol`), so a trainer can read trajectories without
importing the environment, and the recorders record any env shaped like Treasurehunt-v0.
The layout is documented in ``docs/trajectory-format.md``. One job per module:

- `format`: schema version, ``/episodes`` dtype and ``FLAG_*`` bits, errors, `Stream`,
  policy-id encoding, container and attribute checks;
- `writer`: `TrajectoryWriter`, crash-safe commits in SWMR mode;
- `reader`: `TrajectoryFile`, lazy reads (also while a file is recorded);
- `splits`: `split_episodes` by game;
- `maintenance`: `validate` and `repair`;
- `recorders`: `HDF5Recorder` and `HDF5VectorRecorder`, Gymnasium wrappers that record games;
- ``__main__``: ``python -m rpg_env.trajectories {info,validate,repair} ...``.
"""
