"""Compatibility alias: the world model moved to `rpg_worldmodel.models.world_model`."""

from rpg_worldmodel.models.blocks import Block, SelfAttention  # noqa: F401
from rpg_worldmodel.models.world_model import (  # noqa: F401
    LossWeights,
    StarBlock,
    StepEmbedding,
    WorldModel,
    view_codes,
)
