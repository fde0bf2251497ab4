"""rpg_worldmodel: a Vision-Transformer predictor of next views and actions, trained on
trajectory files written by `rpg_env` (the HDF5 schema in docs/trajectory-format.md)."""

__version__ = "0.1.0"
