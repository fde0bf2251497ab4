"""Compatibility alias: the rules moved to `rpg_env.game.world`, the vocabulary to
`rpg_env.game.constants`."""

from rpg_env.game.constants import (  # noqa: F401
    ACTION_NAMES,
    AGENT,
    AGENT_LETTERS,
    BONE,
    CELL_NAMES,
    EMPTY,
    FOOD,
    GEM,
    ITEM_CODES,
    LAYOUT_CHARS,
    NUM_ACTIONS,
    NUM_CELL_KINDS,
    WALL,
)
from rpg_env.game.world import MIN_SPAWN_PROB, WorldBatch, WorldParams, parse_layout  # noqa: F401
