"""Frames and the window: RGB frames and text maps of a world, GIF/MP4/PNG files, and a
pygame window that shows any RGB frame.

Kept apart from the rules: the frame functions take the map codes ``(H, W)`` and agent
positions ``(A, 2)`` (row, column; row 0 is the learner) and draw them with the vocabulary's
colours and sprites; nothing here changes game state. The window knows nothing about the game:
it shows whatever frames it is given (a real map, an imagined 9x9 view, both side by side)
with a header, status lines and a legend. pygame is imported only when a window is opened,
so ``import rpg_env`` and the ``rgb_array`` / ``ansi`` modes never load it.
"""

from __future__ import annotations

import colorsys
import functools
import os
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rpg_env.game.constants import AGENT_LETTERS, vocabulary
from rpg_env.game.observation import codes_to_rgb, tile_atlas
from rpg_env.game.world import WorldParams

RGB_TILE = 16
VIEW_OUTLINE_RGB = (255, 120, 0)
# Cells outside the learner's view are drawn at this brightness, so the view stands out.
OUTSIDE_VIEW_BRIGHTNESS = 0.62
LEARNER_MARK_RGB = (40, 40, 40)
# Co-players B, C, ... get hues that no item uses (gem blue, food green, bone red).
CO_PLAYER_RGB = ((150, 80, 210), (225, 80, 170), (120, 85, 50), (20, 20, 20))

VIDEO_SUFFIXES = (".gif", ".mp4")


def agent_rgb(index: int) -> tuple[int, int, int]:
    """Body colour of agent ``index`` (0 the learner, 1.. co-players)."""
    if index == 0:
        return tuple(int(v) for v in vocabulary().palette[vocabulary().agent])
    return CO_PLAYER_RGB[(index - 1) % len(CO_PLAYER_RGB)]


LEARNER_RGB = agent_rgb(0)


def render_ansi(grid: np.ndarray, agent_rc: np.ndarray, params: WorldParams, *, turn: int,
                score: float) -> str:
    """The map as text in the layout alphabet (``A`` the learner, ``B``.. co-players).

    The first line is a ``turn t/T  score s`` header; the remaining ``H`` lines parse back with
    `rpg_env.game.world.parse_layout` into the same grid and agent positions.
    """
    chars = {code: ch for ch, code in vocabulary().layout_chars.items()}
    rows = [[chars.get(int(c), "?") for c in row] for row in grid]
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

    The learner's view is outlined and the map outside it dimmed; the learner is drawn in the
    agent colour with a dark centre, co-players take the colours of ``CO_PLAYER_RGB`` in order.
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

    for k, (row, col) in enumerate(agent_rc):
        cell = frame[row * tile : (row + 1) * tile, col * tile : (col + 1) * tile]
        dim = not (top <= row * tile <= bottom and left <= col * tile <= right)
        paint_agent(cell, k, OUTSIDE_VIEW_BRIGHTNESS if dim else 1.0)
    frame[top : bottom + 1, [left, right]] = VIEW_OUTLINE_RGB
    frame[[top, bottom], left : right + 1] = VIEW_OUTLINE_RGB
    return frame


def render_view(codes: np.ndarray, tile: int = RGB_TILE) -> np.ndarray:
    """``(V, V)`` cell codes of an egocentric view -> ``(V * tile, V * tile, 3)`` uint8 frame,
    outlined like the view on the map, the agent at the centre drawn as the learner."""
    codes = np.asarray(codes)
    side = codes.shape[-1]
    if codes.ndim != 2 or codes.shape[0] != side or side % 2 == 0:
        raise ValueError(f"an egocentric view is a square (V, V) with odd V, got shape {codes.shape}")
    frame = codes_to_rgb(codes, tile)
    c = side // 2
    if codes[c, c] == vocabulary().agent:  # a view does not tell agents apart: only its centre is known
        _mark_learner(frame[c * tile : (c + 1) * tile, c * tile : (c + 1) * tile])
    frame[:, [0, -1]] = VIEW_OUTLINE_RGB
    frame[[0, -1], :] = VIEW_OUTLINE_RGB
    return frame


#: Colours of kinds many gridworlds name, for a game whose env declares none (`kind_colors`).
COMMON_KIND_RGB = {"empty": (0, 0, 0), "floor": (20, 20, 20), "wall": (110, 110, 110), "unseen": (52, 52, 72)}
AGENT_MARK_RGB = (230, 30, 30)


def kind_colors(channel_names: Sequence[str],
                declared: Sequence[Sequence[int]] | None = None) -> np.ndarray:
    """``(C, 3)`` uint8: the env's declared colour of each kind (protocol ``channel_colors``), else the
    common kinds' colour, else a bright colour fixed by the kind's name (the same name, the same
    colour in every run)."""
    if declared is not None:
        return np.asarray(declared, dtype=np.uint8).reshape(len(channel_names), 3)
    rows = []
    for name in channel_names:
        if name in COMMON_KIND_RGB:
            rows.append(COMMON_KIND_RGB[name])
            continue
        hue = zlib.crc32(name.encode()) % 360 / 360.0
        rows.append(tuple(int(255 * v) for v in colorsys.hsv_to_rgb(hue, 0.75, 0.95)))
    return np.asarray(rows, dtype=np.uint8)


def render_kinds(codes: np.ndarray, colors: np.ndarray, agent_cell: tuple[int, int] | None = None,
                 tile: int = RGB_TILE) -> np.ndarray:
    """``(V, V)`` cell codes of any game's view -> ``(V * tile, V * tile, 3)`` uint8: each cell a tile
    of its kind's colour (``colors`` ``(C, 3)``, `kind_colors`) with a dark grid line, the agent's own
    cell (``agent_cell``, row and column) marked by a red triangle pointing to the view's top, the
    view outlined as `render_view` outlines it."""
    codes = np.asarray(codes)
    if codes.ndim != 2:
        raise ValueError(f"a view is (V, V) cell codes, got shape {codes.shape}")
    frame = np.repeat(np.repeat(np.asarray(colors, dtype=np.uint8)[codes], tile, 0), tile, 1)
    frame[::tile, :] //= 2
    frame[:, ::tile] //= 2
    if agent_cell is not None:
        row, col = agent_cell
        cell = frame[row * tile:(row + 1) * tile, col * tile:(col + 1) * tile]
        depth = np.arange(tile)[:, None] - tile // 5  # the triangle's rows, apex at the top
        half = np.abs(np.arange(tile)[None, :] - (tile - 1) / 2)
        cell[(depth >= 0) & (depth < tile - 2 * (tile // 5)) & (half <= depth * 0.5)] = AGENT_MARK_RGB
    frame[:, [0, -1]] = VIEW_OUTLINE_RGB
    frame[[0, -1], :] = VIEW_OUTLINE_RGB
    return frame


def kinds_legend(channel_names: Sequence[str], colors: np.ndarray,
                 tile: int = 18) -> list[tuple[np.ndarray, str]]:
    """``(icon, name)`` legend rows of `render_kinds`'s colours."""
    return [(np.full((tile, tile, 3), colors[i], dtype=np.uint8), name)
            for i, name in enumerate(channel_names)]


def paint_agent(cell: np.ndarray, index: int, brightness: float = 1.0) -> None:
    """Draw agent ``index`` on a ``(tile, tile, 3)`` map cell, in place, as `render_rgb` draws it: the
    agent sprite's body in `agent_rgb` (times ``brightness``), the learner with its dark centre."""
    vocab, tile = vocabulary(), cell.shape[0]
    body = (tile_atlas(tile)[vocab.agent] == vocab.palette[vocab.agent]).all(axis=-1)
    cell[body] = (np.asarray(agent_rgb(index), dtype=np.float64) * brightness).astype(np.uint8)
    if index == 0:
        _mark_learner(cell)


def _mark_learner(cell: np.ndarray) -> None:
    # The learner's dark centre tells it apart even in greyscale.
    tile = cell.shape[0]
    cell[tile // 3 : tile - tile // 3, tile // 3 : tile - tile // 3] = LEARNER_MARK_RGB


def game_legend(params: WorldParams | None = None, num_agents: int = 2, tile: int = 18, *,
                views: bool = False) -> list[tuple[np.ndarray, str]]:
    """``(icon, label)`` rows for a window's legend: every kind with its points, then the agents as
    the frames shown draw them: on the map (`render_rgb`) each co-player in its own colour; in
    egocentric ``views`` (`render_view`) every agent in the agent kind's colour, the learner at the
    centre marked."""
    vocab = vocabulary()
    atlas, values = tile_atlas(tile), vocab.values(params)
    rows = []
    for code, kind in enumerate(vocab.cells):
        if kind.name in ("empty", "agent"):
            continue
        verb = "" if kind.passable else " (bump)"
        rows.append((atlas[code], f"{kind.name}  {values[code]:+g}{verb}"))
    return rows + (_view_agents(tile, num_agents) if views else _map_agents(tile, num_agents))


def _map_agents(tile: int, num_agents: int) -> list[tuple[np.ndarray, str]]:
    """The learner, then a row per co-player colour naming the co-players drawn in it."""
    rows = []
    for index in range(min(num_agents, len(CO_PLAYER_RGB) + 1)):
        icon = tile_atlas(tile)[vocabulary().agent].copy()
        paint_agent(icon, index)
        letters = AGENT_LETTERS[index:num_agents:len(CO_PLAYER_RGB)] if index else "A"
        who = "the learner" if index == 0 else "co-player" + ("s" if len(letters) > 1 else "")
        rows.append((icon, f"{', '.join(letters)}  {who}"))
    return rows


def _view_agents(tile: int, num_agents: int) -> list[tuple[np.ndarray, str]]:
    """The learner at the view's centre, and the co-players as a view draws them: like the learner,
    without the mark (a view's cells say only that an agent is there)."""
    learner = tile_atlas(tile)[vocabulary().agent].copy()
    _mark_learner(learner)
    rows = [(learner, "A  the learner (centre)")]
    if num_agents > 1:
        rows.append((tile_atlas(tile)[vocabulary().agent].copy(), f"{AGENT_LETTERS[1]}..  co-players"))
    return rows


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
SESSION_KEYS_HELP = "R restart  ·  Esc quit"
PLAY_HELP = f"arrows/WASD move  ·  {SESSION_KEYS_HELP}"
WATCH_HELP = "watching an agent  ·  close the window to hide it"
WINDOW_SCALE = 2  # screen pixels per frame pixel: a 16-pixel tile shows 32 pixels wide
_PANEL_WIDTH = 240
_HEADER_HEIGHT = 34
_CAPTION_HEIGHT = 24
_HELP_HEIGHT = 30
_MAX_STATUS_LINES = 6
_GAP = 12
_BACKGROUND = (30, 30, 36)
_TEXT = (235, 235, 235)
_DIM_TEXT = (170, 170, 180)
_STATUS_TEXT = (250, 200, 90)


class PygameWindow:
    """A pygame window that shows RGB frames: one, or several side by side with a caption each,
    under a header line, beside a panel of status lines and a legend, above a key-help line.

    It knows nothing about the game: callers pass whatever ``env.render()`` returned. Frames
    are scaled by ``scale`` (nearest neighbour), so a frame drawn at the game's 16-pixel tiles
    shows the same cell size whether it is a 20 x 20 map or a 9 x 9 view. The window resizes
    itself when the frames change size.

    ``show`` pumps pygame's event queue (so the OS sees the window as responsive) without taking
    key events out of it: a caller that handles keys (`rpg_env.play`) reads them itself with
    ``pygame.event.get``. Closing the window sets ``quit_requested``; with ``close_on_quit`` the
    window then closes itself and later ``show`` calls are no-ops (the game keeps running).
    """

    def __init__(self, fps: float = 8, *, scale: int = WINDOW_SCALE, help_text: str = WATCH_HELP,
                 close_on_quit: bool = True, title: str = "Treasurehunt",
                 legend: Sequence[tuple[np.ndarray, str]] | None = None) -> None:
        if isinstance(fps, bool) or not isinstance(fps, (int, float)) or fps < 0:
            raise ValueError(f"fps must be a number >= 0 (0 = as fast as possible), got {fps!r}")
        if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
            raise ValueError(f"scale must be a positive int (screen pixels per frame pixel), got {scale!r}")
        os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
        import pygame

        self._pg = pygame
        self.fps, self.scale = fps, scale
        self.help_text = help_text
        self.close_on_quit = close_on_quit
        self.legend = list(game_legend() if legend is None else legend)
        self.quit_requested = False
        self.closed = False
        pygame.display.init()
        pygame.font.init()
        pygame.display.set_caption(title)
        self.clock = pygame.time.Clock()
        self.font = pygame.font.Font(None, 26)
        self.small_font = pygame.font.Font(None, 22)
        self.screen = None
        self.size = (0, 0)
        self.frames_drawn = 0

    def _surface(self, rgb: np.ndarray, scale: int = 1):
        rgb = np.ascontiguousarray(rgb)
        surface = self._pg.image.frombuffer(rgb.tobytes(), (rgb.shape[1], rgb.shape[0]), "RGB")
        if scale != 1:
            surface = self._pg.transform.scale(surface, (rgb.shape[1] * scale, rgb.shape[0] * scale))
        return surface

    def _text(self, text: str, pos: tuple[int, int], *, font=None, colour=_TEXT) -> None:
        self.screen.blit((font or self.font).render(text, True, colour), pos)

    def _layout(self, frames: list[np.ndarray], captions: bool) -> tuple[int, int]:
        """Open or resize the window for ``frames``; returns the top of the frame row."""
        frames_w = sum(f.shape[1] * self.scale for f in frames) + _GAP * (len(frames) - 1)
        frames_h = max(f.shape[0] * self.scale for f in frames)
        top = _HEADER_HEIGHT + (_CAPTION_HEIGHT if captions else 0)
        panel_h = 10 + _MAX_STATUS_LINES * 22 + 14 + len(self.legend) * 24
        height = max(top + frames_h, _HEADER_HEIGHT + panel_h) + _HELP_HEIGHT
        size = (frames_w + _PANEL_WIDTH + 2 * _GAP, height)
        if self.screen is None or size != self.size:
            self.size = size
            self.screen = self._pg.display.set_mode(size)
        return top

    def show(self, frames: np.ndarray | Sequence[np.ndarray], *, captions: Sequence[str] = (),
             header: str = "", status: Sequence[str] = ()) -> None:
        """Draw one screen and wait so that screens come at most ``fps`` per second.

        Args:
            frames: one ``(H, W, 3)`` uint8 frame or a list of them (shown left to right).
            captions: a short title above each frame (e.g. "real game", "imagined").
            header: the line at the top (e.g. turn and score).
            status: up to 6 short lines for the panel (e.g. the last reward, "episode over").
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
        frames = [frames] if isinstance(frames, np.ndarray) and frames.ndim == 3 else list(frames)
        frames = [_check_frame(f, f"frames[{i}]") for i, f in enumerate(frames)]
        if not frames:
            raise ValueError("show needs at least one frame")
        top = self._layout(frames, bool(captions))
        self.screen.fill(_BACKGROUND)
        self._text(header, (_GAP, 8))
        x = _GAP
        for i, frame in enumerate(frames):
            if i < len(captions):
                self._text(captions[i], (x, _HEADER_HEIGHT), font=self.small_font, colour=_DIM_TEXT)
            self.screen.blit(self._surface(frame, self.scale), (x, top))
            x += frame.shape[1] * self.scale + _GAP
        x, y = x + _GAP, _HEADER_HEIGHT + 10
        for line in list(status)[:_MAX_STATUS_LINES]:
            self._text(line, (x, y), font=self.small_font, colour=_STATUS_TEXT)
            y += 22
        y = _HEADER_HEIGHT + 10 + _MAX_STATUS_LINES * 22 + 14
        for icon, label in self.legend:
            self.screen.blit(self._surface(icon), (x, y))
            self._text(label, (x + 26, y + 2), font=self.small_font, colour=_DIM_TEXT)
            y += 24
        self._text(self.help_text, (_GAP, self.size[1] - _HELP_HEIGHT + 7), font=self.small_font,
                   colour=_DIM_TEXT)
        pg.display.flip()
        self.frames_drawn += 1
        self.clock.tick(self.fps)

    def tick(self) -> None:
        """Wait as ``show`` does (at most ``fps`` calls per second) without redrawing."""
        self.clock.tick(self.fps)

    def snapshot(self) -> np.ndarray:
        """``(height, width, 3)`` uint8 copy of what the window shows now."""
        if self.screen is None:
            raise RuntimeError("nothing shown yet: call show() first")
        return np.ascontiguousarray(self._pg.surfarray.array3d(self.screen).swapaxes(0, 1))

    def close(self) -> None:
        """Close the window (idempotent)."""
        if not self.closed:
            self.closed = True
            self._pg.display.quit()
