"""Compatibility alias: the world model moved to `rpg_worldmodel.models.world_model`."""

from rpg_worldmodel.models.world_model import (  # noqa: F401
    Block,
    LossWeights,
    SelfAttention,
    StarBlock,
    StepEmbedding,
    WorldModel,
    view_codes,
)
