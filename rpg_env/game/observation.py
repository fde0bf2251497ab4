"""What an agent sees: cell codes encoded as one-hot planes, RGB pixels or the full map.

Channels and colours come from the vocabulary (`rpg_env.game.constants`): one channel per cell
kind, in table order. All encoders are batched over leading axes and never copy more than
their output.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from rpg_env.game.constants import FLOOR_RGB, Vocabulary, vocabulary
from rpg_env.game.world import WorldParams

OBS_MODES = ("onehot", "rgb", "full")


def one_hot(codes: np.ndarray, side: int, num_kinds: int | None = None) -> np.ndarray:
    """``(..., side * side)`` int8 codes -> ``(..., K, side, side)`` int8 one-hot planes (0 or 1).

    Channel ``k`` is cell kind ``k`` of the vocabulary (``K`` kinds; the current table's
    size when ``num_kinds`` is None). int8 is the dtype of Gymnasium's `MultiBinary` space.
    """
    k = vocabulary().num_kinds if num_kinds is None else int(num_kinds)
    planes = (codes[..., None, :] == np.arange(k, dtype=np.int8)[:, None]).view(np.int8)
    return planes.reshape(*codes.shape[:-1], k, side, side)


def full_map_observation(grid: np.ndarray, learner_rc: np.ndarray,
                         num_kinds: int | None = None) -> np.ndarray:
    """``(..., H, W)`` codes, ``(..., 2)`` learner (row, col) -> ``(..., K + 1, H, W)`` int8.

    One-hot planes in vocabulary order plus a last plane marking the learner.
    """
    k = vocabulary().num_kinds if num_kinds is None else int(num_kinds)
    *lead, height, width = grid.shape
    full = np.zeros((*lead, k + 1, height, width), dtype=np.int8)
    full[..., :k, :, :] = grid[..., None, :, :] == np.arange(k, dtype=np.int8)[:, None, None]
    rows = full.reshape(-1, k + 1, height, width)
    rc = np.asarray(learner_rc).reshape(-1, 2)
    rows[np.arange(len(rc)), k, rc[:, 0], rc[:, 1]] = 1
    return full


def observation_space_for(params: WorldParams, obs_mode: str, tile_size: int,
                          num_kinds: int | None = None) -> spaces.Space:
    """The learner's observation space for one world.

    One-hot views are `MultiBinary` grids, not images: Stable-Baselines3 (whose checker treats
    every 3-D ``Box`` as an image) and Gymnasium then both take them for what they are. Gymnasium
    batches them into a ``Box(0, 1, (N, ...), int8)``. Only ``"rgb"`` is an image.
    """
    k = vocabulary().num_kinds if num_kinds is None else int(num_kinds)
    side = params.view_size
    if obs_mode == "onehot":
        return spaces.MultiBinary((k, side, side))
    if obs_mode == "rgb":
        return spaces.Box(0, 255, (side * tile_size, side * tile_size, 3), dtype=np.uint8)
    if obs_mode == "full":
        return spaces.MultiBinary((k + 1, params.height, params.width))
    raise ValueError(f"obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")


# ----------------------------------------------------------------------------- pixels
def _sprite(sprite: str, colour: tuple[int, int, int], tile: int) -> np.ndarray:
    """One ``(tile, tile, 3)`` uint8 tile: a floor with a shape that tells the kinds apart."""
    img = np.empty((tile, tile, 3), dtype=np.uint8)
    img[:] = FLOOR_RGB
    if sprite == "floor":
        return img
    yy, xx = np.mgrid[0:tile, 0:tile] + 0.5
    u, v = (xx / tile) * 2 - 1, (yy / tile) * 2 - 1  # [-1, 1] tile coordinates
    if sprite == "block":
        mask = np.ones((tile, tile), dtype=bool)
    elif sprite == "diamond":
        mask = np.abs(u) + np.abs(v) <= 0.8
    elif sprite == "disc":
        mask = u**2 + v**2 <= 0.6**2
    elif sprite == "cross":
        width = 0.28
        mask = (np.abs(u - v) <= width) | (np.abs(u + v) <= width)
        mask &= np.maximum(np.abs(u), np.abs(v)) <= 0.8
    else:  # "rounded": a rounded square
        mask = np.maximum(np.abs(u), np.abs(v)) <= 0.75
    img[mask] = colour
    if tile >= 6:  # a faint grid line keeps neighbouring tiles readable
        img[0, :] = img[0, :] * 0.85
        img[:, 0] = img[:, 0] * 0.85
    return img


_ATLAS_CACHE: dict[tuple, np.ndarray] = {}


def tile_atlas(tile: int, vocab: Vocabulary | None = None) -> np.ndarray:
    """``(K, tile, tile, 3)`` uint8 sprites indexed by cell code (cached per tile size and table)."""
    if tile < 1:
        raise ValueError(f"tile size must be >= 1 pixel, got {tile}")
    vocab = vocab or vocabulary()
    key = (tile, tuple((c.sprite, c.rgb) for c in vocab.cells))
    atlas = _ATLAS_CACHE.get(key)
    if atlas is None:
        atlas = np.stack([_sprite(c.sprite, c.rgb, tile) for c in vocab.cells])
        _ATLAS_CACHE[key] = atlas
    return atlas


def codes_to_rgb(codes: np.ndarray, tile: int) -> np.ndarray:
    """``(..., h, w)`` int codes -> ``(..., h * tile, w * tile, 3)`` uint8 image(s)."""
    sprites = tile_atlas(tile)[codes]  # (..., h, w, tile, tile, 3)
    *lead, h, w = codes.shape
    sprites = np.moveaxis(sprites, -4, -3)  # (..., h, tile, w, tile, 3)
    return np.ascontiguousarray(sprites).reshape(*lead, h * tile, w * tile, 3)
