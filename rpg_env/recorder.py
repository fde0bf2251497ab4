"""Compatibility alias: the recorders live in `rpg_env.trajectories.recorders`."""

from rpg_env.trajectories.recorders import HDF5Recorder, HDF5VectorRecorder, env_meta

__all__ = ["HDF5Recorder", "HDF5VectorRecorder", "env_meta"]
