"""Compatibility alias: the features extractors moved to `rpg_env.policies.features`."""

from rpg_env.policies.features import EXTRACTORS, GridCNN, GridMLP  # noqa: F401
