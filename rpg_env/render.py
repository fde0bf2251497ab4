"""Rendering of a world: RGB frames, text maps, the pygame window, and GIF/MP4/PNG files.

Kept apart from the rules: every function takes the map codes ``(H, W)`` and agent positions
``(A, 2)`` (row, column; row 0 is the learner) and draws them; nothing here changes game state.
pygame is imported only when a window is opened, so ``import rpg_env`` and the ``rgb_array`` /
``ansi`` modes never load it.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rpg_env.core import AGENT, AGENT_LETTERS, BONE, EMPTY, FOOD, GEM, WALL, WorldParams
from rpg_env.observation import PALETTE, codes_to_rgb, tile_atlas

ANSI_CHARS = {EMPTY: ".", WALL: "#", GEM: "g", BONE: "b", FOOD: "f"}
RGB_TILE = 16
VIEW_OUTLINE_RGB = (255, 120, 0)
# Cells outside the learner's view are drawn at this brightness, so the view stands out.
OUTSIDE_VIEW_BRIGHTNESS = 0.62
LEARNER_RGB = PALETTE[AGENT]
LEARNER_MARK_RGB = (40, 40, 40)
# Co-players B, C, ... get hues that no item uses (gem blue, food green, bone red).
CO_PLAYER_RGB = ((150, 80, 210), (225, 80, 170), (120, 85, 50), (20, 20, 20))

VIDEO_SUFFIXES = (".gif", ".mp4")


def agent_rgb(index: int) -> tuple[int, int, int]:
    """Body colour of agent ``index`` (0 the learner, 1.. co-players)."""
    return LEARNER_RGB if index == 0 else CO_PLAYER_RGB[(index - 1) % len(CO_PLAYER_RGB)]


def render_ansi(grid: np.ndarray, agent_rc: np.ndarray, params: WorldParams, *, turn: int,
                score: float) -> str:
    """The map as text in the layout alphabet (``A`` the learner, ``B``.. co-players).

    The first line is a ``turn t/T  score s`` header; the remaining ``H`` lines parse back with
    `rpg_env.core.parse_layout` into the same grid and agent positions.
    """
    rows = [[ANSI_CHARS.get(int(c), "?") for c in row] for row in grid]
    for k, (r, c) in enumerate(agent_rc):
        rows[r][c] = AGENT_LETTERS[k]
    header = f"turn {turn}/{params.max_turns}  score {score:+g}"
    return header + "\n" + "\n".join("".join(row) for row in rows) + "\n"


def view_box(agent_rc: np.ndarray, params: WorldParams) -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)`` map cells (inclusive) of the learner's view, clipped to the map."""
    r = params.vision_radius
    row, col = (int(v) for v in agent_rc[0])
    return (max(row - r, 0), max(col - r, 0), min(row + r, params.height - 1),
            min(col + r, params.width - 1))


def render_rgb(grid: np.ndarray, agent_rc: np.ndarray, params: WorldParams,
               tile: int = RGB_TILE) -> np.ndarray:
    """``(H * tile, W * tile, 3)`` uint8 frame of the whole map.

    The learner's view is outlined and the map outside it dimmed; the learner is orange with a
    dark centre, co-players take the colours of ``CO_PLAYER_RGB`` in agent order.
    """
    grid = np.asarray(grid)
    agent_rc = np.asarray(agent_rc)
    if grid.shape != (params.height, params.width):
        raise ValueError(f"grid has shape {grid.shape}, expected (height, width) = "
                         f"{(params.height, params.width)}")
    frame = codes_to_rgb(grid, tile)
    top, left, bottom, right = (v * tile for v in view_box(agent_rc, params))
    bottom, right = bottom + tile - 1, right + tile - 1
    inside = frame[top : bottom + 1, left : right + 1].copy()
    frame[:] = (frame * OUTSIDE_VIEW_BRIGHTNESS).astype(np.uint8)
    frame[top : bottom + 1, left : right + 1] = inside

    body = tile_atlas(tile)[AGENT].reshape(-1, 3)
    body_mask = (body == PALETTE[AGENT]).all(axis=1).reshape(tile, tile)
    for k, (row, col) in enumerate(agent_rc):
        cell = frame[row * tile : (row + 1) * tile, col * tile : (col + 1) * tile]
        dim = not (top <= row * tile <= bottom and left <= col * tile <= right)
        colour = np.asarray(agent_rgb(k), dtype=np.float64) * (OUTSIDE_VIEW_BRIGHTNESS if dim else 1.0)
        cell[body_mask] = colour.astype(np.uint8)
        if k == 0:  # the learner's dark centre tells it apart even in greyscale
            a, b = tile // 3, tile - tile // 3
            cell[a:b, a:b] = LEARNER_MARK_RGB
    frame[top : bottom + 1, [left, right]] = VIEW_OUTLINE_RGB
    frame[[top, bottom], left : right + 1] = VIEW_OUTLINE_RGB
    return frame


# --------------------------------------------------------------------------- annotated frames
@functools.cache
def _strip_font(size: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def annotate(frame: np.ndarray, text: str, *, height: int = 20,
             background: tuple[int, int, int] = (30, 30, 36),
             colour: tuple[int, int, int] = (240, 240, 240)) -> np.ndarray:
    """``(H, W, 3)`` uint8 -> ``(H + height, W, 3)`` uint8 with ``text`` on a strip above the frame.

    For GIFs and videos, which have no window to show the turn and score in.
    """
    from PIL import Image, ImageDraw

    frame = _check_frame(frame, "frame")
    strip = Image.new("RGB", (frame.shape[1], height), background)
    font = _strip_font(max(height - 7, 6))
    ImageDraw.Draw(strip).text((4, height // 2), text, fill=colour, font=font, anchor="lm")
    return np.concatenate([np.asarray(strip, dtype=np.uint8), frame], axis=0)


# --------------------------------------------------------------------------- files
def _check_frame(frame: Any, name: str) -> np.ndarray:
    frame = np.asarray(frame)
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3 or 0 in frame.shape:
        raise ValueError(f"{name} must be an (H, W, 3) uint8 RGB image (e.g. env.render() with "
                         f"render_mode='rgb_array'), got {frame.dtype} array of shape {frame.shape}")
    return frame


def _check_frames(frames: Sequence[np.ndarray]) -> list[np.ndarray]:
    if isinstance(frames, np.ndarray) and frames.ndim == 4:
        frames = list(frames)
    if not isinstance(frames, (list, tuple)) or len(frames) == 0:
        what = f"empty {type(frames).__name__}" if isinstance(frames, (list, tuple)) else (
            type(frames).__name__)
        raise ValueError(f"frames must be a non-empty list of (H, W, 3) uint8 images, got {what}")
    checked = [_check_frame(f, f"frames[{i}]") for i, f in enumerate(frames)]
    shapes = {f.shape for f in checked}
    if len(shapes) > 1:
        raise ValueError(f"all frames must have the same shape, got {sorted(shapes)}; render every "
                         f"frame with the same tile size and map")
    return checked


def _atomic_target(path: Path) -> tuple[Path, Path]:
    """A temporary file beside ``path``: written fully, then renamed, so a failed write never
    leaves a truncated file where a good one was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    # mkstemp creates the file private (0600); give the result the permissions a plain open()
    # would, so shared outputs stay readable by the group and others as the umask allows.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    return path, Path(tmp)


def save_animation(frames: Sequence[np.ndarray], path: str | os.PathLike, fps: float = 8) -> Path:
    """Write ``frames`` (each ``(H, W, 3)`` uint8) as an animation; returns the path written.

    ``.gif``: Pillow, looping forever, ``1000 / fps`` ms per frame (GIF stores 10 ms units, and
    Pillow merges consecutive identical frames into one longer frame). ``.mp4``: H.264 through
    imageio-ffmpeg (``pip install 'rpg-treasurehunt[video]'``); odd sizes are padded by one black
    pixel row/column, as the codec needs even sizes.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in VIDEO_SUFFIXES:
        raise ValueError(f"cannot write an animation to {str(path)!r}: the extension must be one of "
                         f"{', '.join(VIDEO_SUFFIXES)} (got {path.suffix or 'none'!r})")
    if isinstance(fps, bool) or not isinstance(fps, (int, float, np.number)) or not fps > 0:
        raise ValueError(f"fps must be a positive number of frames per second, got {fps!r}")
    checked = _check_frames(frames)
    if suffix == ".mp4":
        try:
            import imageio_ffmpeg
        except ImportError as exc:
            raise ModuleNotFoundError(
                "writing .mp4 needs imageio-ffmpeg, which is not installed: "
                "pip install 'rpg-treasurehunt[video]' (or save a .gif instead)") from exc
    path, tmp = _atomic_target(path)
    try:
        if suffix == ".gif":
            from PIL import Image

            images = [Image.fromarray(f) for f in checked]
            images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:],
                           duration=max(int(round(1000 / fps)), 10), loop=0)
        else:
            h, w = checked[0].shape[:2]
            pad = ((0, h % 2), (0, w % 2), (0, 0))
            writer = imageio_ffmpeg.write_frames(str(tmp), (w + w % 2, h + h % 2), fps=float(fps),
                                                 codec="libx264", pix_fmt_out="yuv420p",
                                                 macro_block_size=1, quality=8)
            writer.send(None)  # start the generator
            for f in checked:
                writer.send(np.ascontiguousarray(np.pad(f, pad)))
            writer.close()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def save_png(frame: np.ndarray, path: str | os.PathLike) -> Path:
    """Write one ``(H, W, 3)`` uint8 frame as a PNG; returns the path written."""
    from PIL import Image

    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"save_png writes PNG files: the path must end in .png, got {str(path)!r}")
    frame = _check_frame(frame, "frame")
    path, tmp = _atomic_target(path)
    try:
        Image.fromarray(frame).save(tmp, format="PNG")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


# --------------------------------------------------------------------------- pygame window
PLAY_HELP = "arrows/WASD move  ·  R restart  ·  Esc quit"
WATCH_HELP = "watching an agent  ·  close the window to hide it"
_PANEL_WIDTH = 230
_HELP_HEIGHT = 30
_MAX_STATUS_LINES = 4
_BACKGROUND = (30, 30, 36)
_TEXT = (235, 235, 235)
_DIM_TEXT = (170, 170, 180)


def window_tile(params: WorldParams, target_px: int = 640) -> int:
    """Tile size (pixels) that makes the map about ``target_px`` on its longer side."""
    return int(np.clip(target_px // max(params.height, params.width), 12, 48))


class PygameWindow:
    """A pygame window showing one world: the map with the learner's view highlighted, agents
    lettered like layouts (``A`` you, ``B``.. co-players), a side panel with turn, score and a
    legend, and a one-line key help.

    ``draw`` pumps pygame's event queue (so the OS sees the window as responsive) without taking
    key events out of it: a caller that handles keys (``rpg_env.play``) reads them itself with
    ``pygame.event.get``. Closing the window sets ``quit_requested``; with ``close_on_quit`` the
    window then closes itself and later ``draw`` calls are no-ops (the game keeps running).
    """

    def __init__(self, params: WorldParams, fps: float = 8, *, tile: int | None = None,
                 help_text: str = WATCH_HELP, close_on_quit: bool = True,
                 title: str = "Treasurehunt") -> None:
        if isinstance(fps, bool) or not isinstance(fps, (int, float)) or fps < 0:
            raise ValueError(f"fps must be a number >= 0 (0 = as fast as possible), got {fps!r}")
        os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
        import pygame

        self._pg = pygame
        self.params = params
        self.fps = fps
        self.tile = int(tile) if tile is not None else window_tile(params)
        self.help_text = help_text
        self.close_on_quit = close_on_quit
        self.quit_requested = False
        self.closed = False
        self.map_size = (params.width * self.tile, params.height * self.tile)
        pygame.display.init()
        pygame.font.init()
        self.clock = pygame.time.Clock()
        self.font = pygame.font.Font(None, 26)
        self.small_font = pygame.font.Font(None, 22)
        self.letter_font = pygame.font.Font(None, max(int(self.tile * 0.75), 10))
        legend_tile = 18
        atlas = tile_atlas(legend_tile)
        self._legend = [
            (atlas[GEM], f"gem  {params.gem_value:+g}"),
            (atlas[FOOD], f"food  {params.food_value:+g}"),
            (atlas[BONE], f"bone  {params.bone_value:+g}"),
            (atlas[WALL], f"wall  {params.wall_penalty:+g} (bump)"),
            (self._agent_icon(legend_tile, 0), "A  you (the learner)"),
        ]
        if params.num_agents > 1:
            self._legend.append((self._agent_icon(legend_tile, 1), "B..  co-players"))
        # Title, turn, score, up to _MAX_STATUS_LINES status lines, the legend and "your view".
        panel_height = 12 + 32 + 2 * 26 + _MAX_STATUS_LINES * 22 + 10 + (len(self._legend) + 1) * 24 + 8
        self.size = (self.map_size[0] + _PANEL_WIDTH,
                     max(self.map_size[1], panel_height) + _HELP_HEIGHT)
        self.screen = pygame.display.set_mode(self.size)
        pygame.display.set_caption(title)
        self.frames_drawn = 0

    @staticmethod
    def _agent_icon(tile: int, index: int) -> np.ndarray:
        icon = tile_atlas(tile)[AGENT].copy()
        icon[(icon == PALETTE[AGENT]).all(axis=-1)] = agent_rgb(index)
        return icon

    def _surface(self, rgb: np.ndarray):
        rgb = np.ascontiguousarray(rgb)
        return self._pg.image.frombuffer(rgb.tobytes(), (rgb.shape[1], rgb.shape[0]), "RGB")

    def _text(self, text: str, pos: tuple[int, int], *, font=None, colour=_TEXT) -> None:
        self.screen.blit((font or self.font).render(text, True, colour), pos)

    def draw(self, grid: np.ndarray, agent_rc: np.ndarray, *, turn: int, score: float,
             status: Sequence[str] = ()) -> None:
        """Draw one frame and wait so that frames come at most ``fps`` per second.

        Args:
            grid: ``(H, W)`` cell codes of the map.
            agent_rc: ``(A, 2)`` agent (row, column), row 0 the learner.
            turn, score: shown in the side panel (score: the learner's episode return, points).
            status: up to 4 extra short lines for the panel (e.g. the last reward, "episode over").
        """
        if self.closed:
            return
        pg = self._pg
        pg.event.pump()
        if pg.event.peek(pg.QUIT):
            self.quit_requested = True
            if self.close_on_quit:
                pg.event.get(pg.QUIT)
                self.close()
                return
        agent_rc = np.asarray(agent_rc)
        self.screen.fill(_BACKGROUND)
        self.screen.blit(self._surface(render_rgb(grid, agent_rc, self.params, self.tile)), (0, 0))
        for k, (row, col) in enumerate(agent_rc):
            letter = self.letter_font.render(AGENT_LETTERS[k], True,
                                             (255, 255, 255) if k else (250, 210, 120))
            centre = ((int(col) + 0.5) * self.tile, (int(row) + 0.5) * self.tile)
            self.screen.blit(letter, letter.get_rect(center=centre))

        x, y = self.map_size[0] + 14, 12
        self._text("Treasurehunt", (x, y))
        y += 32
        self._text(f"turn   {turn} / {self.params.max_turns}", (x, y))
        y += 26
        self._text(f"score  {score:+g}", (x, y))
        y += 26
        for line in list(status)[:_MAX_STATUS_LINES]:
            self._text(line, (x, y), font=self.small_font, colour=(250, 200, 90))
            y += 22
        y += 10
        for icon, label in self._legend:
            self.screen.blit(self._surface(icon), (x, y))
            self._text(label, (x + 26, y + 2), font=self.small_font, colour=_DIM_TEXT)
            y += 24
        pg.draw.rect(self.screen, VIEW_OUTLINE_RGB, (x, y + 2, 18, 18), width=2)
        self._text("your view", (x + 26, y + 4), font=self.small_font, colour=_DIM_TEXT)
        self._text(self.help_text, (10, self.size[1] - _HELP_HEIGHT + 7), font=self.small_font,
                   colour=_DIM_TEXT)
        pg.display.flip()
        self.frames_drawn += 1
        self.clock.tick(self.fps)

    def tick(self) -> None:
        """Wait as ``draw`` does (at most ``fps`` calls per second) without redrawing."""
        self.clock.tick(self.fps)

    def snapshot(self) -> np.ndarray:
        """``(height, width, 3)`` uint8 copy of what the window shows now."""
        return np.ascontiguousarray(self._pg.surfarray.array3d(self.screen).swapaxes(0, 1))

    def close(self) -> None:
        """Close the window (idempotent)."""
        if not self.closed:
            self.closed = True
            self._pg.display.quit()
