"""Compatibility alias: the encoders moved to `rpg_env.game.observation`; colours are the vocabulary's."""

from rpg_env.game.constants import FLOOR_RGB, vocabulary
from rpg_env.game.observation import codes_to_rgb, one_hot, tile_atlas  # noqa: F401

PALETTE = {code: tuple(int(v) for v in rgb) for code, rgb in enumerate(vocabulary().palette)}
__all__ = ["FLOOR_RGB", "PALETTE", "codes_to_rgb", "one_hot", "tile_atlas"]
