"""Rendering of a world: RGB frames, text maps, and the pygame window.

Kept apart from the rules: every function takes the map codes ``(H, W)`` and agent positions
``(A, 2)`` and draws them; nothing here changes game state.
"""

from __future__ import annotations

import numpy as np

from rpg_env.core import AGENT_LETTERS, BONE, EMPTY, FOOD, GEM, WALL, WorldParams
from rpg_env.observation import codes_to_rgb

ANSI_CHARS = {EMPTY: ".", WALL: "#", GEM: "g", BONE: "b", FOOD: "f"}
RGB_TILE = 16
VIEW_OUTLINE_RGB = (255, 120, 0)


def render_ansi(grid: np.ndarray, agent_rc: np.ndarray, params: WorldParams, *, turn: int,
                score: float) -> str:
    """The map as text in the layout alphabet (``A`` the learner, ``B``.. co-players)."""
    rows = [[ANSI_CHARS.get(int(c), "?") for c in row] for row in grid]
    for k, (r, c) in enumerate(agent_rc):
        rows[r][c] = AGENT_LETTERS[k]
    header = f"turn {turn}/{params.max_turns}  score {score:+g}"
    return header + "\n" + "\n".join("".join(row) for row in rows) + "\n"


def render_rgb(grid: np.ndarray, agent_rc: np.ndarray, params: WorldParams,
               tile: int = RGB_TILE) -> np.ndarray:
    """``(H * tile, W * tile, 3)`` uint8 frame of the whole map with the learner's view outlined."""
    frame = codes_to_rgb(np.asarray(grid), tile)
    r = params.vision_radius
    row, col = (int(v) for v in agent_rc[0])
    top, left = max(row - r, 0) * tile, max(col - r, 0) * tile
    bottom = min(row + r + 1, params.height) * tile - 1
    right = min(col + r + 1, params.width) * tile - 1
    frame[top : bottom + 1, [left, right]] = VIEW_OUTLINE_RGB
    frame[[top, bottom], left : right + 1] = VIEW_OUTLINE_RGB
    # The learner gets a dark centre so it stands out from the co-players.
    c0, c1 = row * tile + tile // 3, row * tile + tile - tile // 3
    d0, d1 = col * tile + tile // 3, col * tile + tile - tile // 3
    frame[c0:c1, d0:d1] = (40, 40, 40)
    return frame
