"""Encodings of cell codes into observations: one-hot planes and RGB pixels.

All functions are batched over leading axes and never copy more than their output.
"""

from __future__ import annotations

import numpy as np

from rpg_env.core import AGENT, BONE, EMPTY, FOOD, GEM, NUM_CELL_KINDS, WALL

_CHANNELS = np.arange(NUM_CELL_KINDS, dtype=np.int8)[:, None]

# Tile colours (RGB) by cell code; sprites draw a shape over the floor colour.
FLOOR_RGB = (236, 232, 220)
PALETTE = {
    EMPTY: FLOOR_RGB,
    WALL: (84, 84, 96),
    GEM: (40, 160, 230),
    BONE: (200, 40, 40),
    FOOD: (60, 170, 70),
    AGENT: (240, 170, 30),
}


def one_hot(codes: np.ndarray, side: int) -> np.ndarray:
    """``(..., side * side)`` int8 codes -> ``(..., 6, side, side)`` uint8 one-hot planes.

    Channel order is ``CELL_NAMES``: empty, wall, gem, bone, food, agent.
    """
    planes = (codes[..., None, :] == _CHANNELS).view(np.uint8)
    return planes.reshape(*codes.shape[:-1], NUM_CELL_KINDS, side, side)


def _sprite(code: int, tile: int) -> np.ndarray:
    """One ``(tile, tile, 3)`` uint8 tile: a floor with a shape that tells the kinds apart."""
    img = np.empty((tile, tile, 3), dtype=np.uint8)
    img[:] = FLOOR_RGB
    if code == EMPTY:
        return img
    yy, xx = np.mgrid[0:tile, 0:tile] + 0.5
    u, v = (xx / tile) * 2 - 1, (yy / tile) * 2 - 1  # [-1, 1] tile coordinates
    colour = PALETTE[code]
    if code == WALL:
        mask = np.ones((tile, tile), dtype=bool)
    elif code == GEM:  # diamond
        mask = np.abs(u) + np.abs(v) <= 0.8
    elif code == FOOD:  # disc
        mask = u**2 + v**2 <= 0.6**2
    elif code == BONE:  # cross
        width = 0.28
        mask = (np.abs(u - v) <= width) | (np.abs(u + v) <= width)
        mask &= np.maximum(np.abs(u), np.abs(v)) <= 0.8
    else:  # agent: a rounded square
        mask = np.maximum(np.abs(u), np.abs(v)) <= 0.75
    img[mask] = colour
    if tile >= 6:  # a faint grid line keeps neighbouring tiles readable
        img[0, :] = img[0, :] * 0.85
        img[:, 0] = img[:, 0] * 0.85
    return img


_ATLAS_CACHE: dict[int, np.ndarray] = {}


def tile_atlas(tile: int) -> np.ndarray:
    """``(6, tile, tile, 3)`` uint8 sprites indexed by cell code (cached per tile size)."""
    if tile < 1:
        raise ValueError(f"tile size must be >= 1 pixel, got {tile}")
    atlas = _ATLAS_CACHE.get(tile)
    if atlas is None:
        atlas = np.stack([_sprite(code, tile) for code in range(NUM_CELL_KINDS)])
        _ATLAS_CACHE[tile] = atlas
    return atlas


def codes_to_rgb(codes: np.ndarray, tile: int) -> np.ndarray:
    """``(..., h, w)`` int codes -> ``(..., h * tile, w * tile, 3)`` uint8 image(s)."""
    sprites = tile_atlas(tile)[codes]  # (..., h, w, tile, tile, 3)
    *lead, h, w = codes.shape
    sprites = np.moveaxis(sprites, -4, -3)  # (..., h, tile, w, tile, 3)
    return np.ascontiguousarray(sprites).reshape(*lead, h * tile, w * tile, 3)
