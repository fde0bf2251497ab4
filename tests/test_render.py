"""Rendering: rgb_array / ansi frames, the pygame window (headless), GIF/MP4/PNG files."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest
from PIL import Image

import rpg_env  # noqa: F401  (registers Treasurehunt-v0)
from rpg_env.game.constants import FLOOR_RGB, vocabulary
from rpg_env.game.world import WorldParams, parse_layout
from rpg_env.render import (
    CO_PLAYER_RGB,
    LEARNER_MARK_RGB,
    LEARNER_RGB,
    VIEW_OUTLINE_RGB,
    PygameWindow,
    annotate,
    game_legend,
    kind_colors,
    kinds_legend,
    render_ansi,
    render_kinds,
    render_rgb,
    render_view,
    save_animation,
    save_png,
)

PALETTE = {code: tuple(int(v) for v in rgb) for code, rgb in enumerate(vocabulary().palette)}

LAYOUT = [
    "##########",
    "#A..g....#",
    "#.f......#",
    "#..b.....#",
    "#........#",
    "#......B.#",
    "#........#",
    "##########",
]
H, W = len(LAYOUT), len(LAYOUT[0])


def make(render_mode: str | None, **kwargs):
    env = gym.make("Treasurehunt-v0", height=H, width=W, vision_radius=2, spawn_prob=0.0,
                   render_mode=render_mode, **kwargs)
    env.reset(seed=0, options={"layout": LAYOUT})
    return env


def tile_at(frame: np.ndarray, row: int, col: int, tile: int) -> np.ndarray:
    return frame[row * tile : (row + 1) * tile, col * tile : (col + 1) * tile]


# --------------------------------------------------------------------------- rgb_array
def test_rgb_array_shape_dtype_and_view_highlight():
    env = make("rgb_array")
    frame = env.render()
    tile = 16
    assert frame.shape == (H * tile, W * tile, 3) and frame.dtype == np.uint8
    # Learner A at (1, 1) with radius 2 sees rows/cols 0..3; (2, 3) is an empty cell inside.
    inside = tile_at(frame, 2, 3, tile)
    assert tuple(inside[tile // 2, tile // 2]) == FLOOR_RGB
    outside = tile_at(frame, 4, 6, tile)  # empty, outside the view: dimmed floor
    assert tuple(outside[tile // 2, tile // 2]) != FLOOR_RGB
    assert np.all(outside[tile // 2, tile // 2] < np.array(FLOOR_RGB))
    # The view outline runs along the view's right edge (column 3's last pixel column).
    assert tuple(frame[2 * tile + 3, 4 * tile - 1]) == VIEW_OUTLINE_RGB
    env.close()


def test_learner_and_co_player_look_different():
    env = make("rgb_array")
    frame = env.render()
    tile = 16
    learner = tile_at(frame, 1, 1, tile)
    co = tile_at(frame, 5, 7, tile)
    colours_learner = {tuple(p) for p in learner.reshape(-1, 3)}
    colours_co = {tuple(p) for p in co.reshape(-1, 3)}
    assert LEARNER_RGB in colours_learner and LEARNER_MARK_RGB in colours_learner
    assert LEARNER_RGB not in colours_co and LEARNER_MARK_RGB not in colours_co
    # The co-player is outside the learner's view, so its colour is dimmed but keeps its hue.
    purple = np.array(CO_PLAYER_RGB[0])
    body = co[tile // 2 - 3, tile // 2 - 3].astype(int)
    assert np.argmax(body) == np.argmax(purple) and body[1] < body[0] < body[2]
    # Items keep their palette colours inside the view (gem at (1, 4) is outside: r=2 -> col<=3).
    food = tile_at(frame, 2, 2, tile)
    assert tuple(food[tile // 2, tile // 2]) == PALETTE[4]


def test_render_rgb_rejects_a_grid_of_the_wrong_shape():
    params = WorldParams(height=H, width=W)
    grid, agents = parse_layout(LAYOUT, params)
    with pytest.raises(ValueError, match="expected"):
        render_rgb(grid[:-1], agents, params)


def test_vector_env_renders_one_frame_per_world():
    envs = gym.make_vec("Treasurehunt-v0", num_envs=3, render_mode="rgb_array", height=H, width=W)
    envs.reset(seed=1)
    frames = envs.render()
    assert len(frames) == 3 and all(f.shape == (H * 16, W * 16, 3) for f in frames)
    envs.close()


# --------------------------------------------------------------------------- ansi
def test_ansi_round_trips_through_the_layout_parser():
    env = make("ansi")
    text = env.render()
    header, *rows = text.rstrip("\n").split("\n")
    assert rows == LAYOUT
    assert header == "turn 0/100  score +0"
    params = env.unwrapped.params
    grid, agents = parse_layout(rows, params)
    np.testing.assert_array_equal(grid, env.unwrapped.world.grid[0])
    np.testing.assert_array_equal(agents, env.unwrapped.world.agent_rc()[0])
    # After moves the text still parses back into the current state.
    env.step(3)  # right
    env.step(3)
    header, *rows = env.render().rstrip("\n").split("\n")
    grid, agents = parse_layout(rows, params)
    np.testing.assert_array_equal(agents[0], (1, 3))
    np.testing.assert_array_equal(grid, env.unwrapped.world.grid[0])
    assert header.startswith("turn 2/100")
    env.close()


def test_ansi_header_shows_the_score():
    params = WorldParams(height=H, width=W)
    grid, agents = parse_layout(LAYOUT, params)
    assert render_ansi(grid, agents, params, turn=7, score=-3.0).startswith("turn 7/100  score -3\n")


# --------------------------------------------------------------------------- human (headless)
def test_human_mode_draws_a_frame_per_reset_and_step():
    env = make("human")
    window = env.unwrapped._renderer
    assert isinstance(window, PygameWindow)
    for action in (1, 1, 3):
        env.step(action)
    assert window.frames_drawn == 4  # reset + 3 steps
    shot = window.snapshot()
    assert shot.shape == (window.size[1], window.size[0], 3)
    # The window shows the env's rgb_array frame, scaled by an integer factor (nearest neighbour).
    game = env.unwrapped
    expected = render_rgb(game.world.grid[0], game.world.agent_rc()[0], game.params)
    scaled = expected.repeat(window.scale, axis=0).repeat(window.scale, axis=1)
    top, left = 34, 12  # below the header line, after the left margin
    np.testing.assert_array_equal(shot[top : top + scaled.shape[0], left : left + scaled.shape[1]], scaled)
    # The side panel holds text and the legend (not just background).
    panel = shot[:, left + scaled.shape[1] :]
    assert len(np.unique(panel.reshape(-1, 3), axis=0)) > 10
    env.close()
    assert env.unwrapped._renderer is None and window.closed


def test_window_shows_frames_of_any_size_side_by_side():
    window = PygameWindow(fps=0, scale=3, legend=[])
    try:
        view = render_view(np.full((5, 5), 0, dtype=np.int8))
        window.show([view, view[:, :40]], captions=["left", "right"], header="turn 1", status=["hello"])
        first = window.size
        shot = window.snapshot()
        assert shot.shape == (first[1], first[0], 3)
        window.show(view, header="one frame")  # fewer frames: the window shrinks
        assert window.size[0] < first[0] and window.frames_drawn == 2
        with pytest.raises(ValueError, match=r"\(H, W, 3\) uint8"):
            window.show(np.zeros((4, 4), dtype=np.uint8))
    finally:
        window.close()


def test_closing_the_window_hides_it_and_the_game_goes_on():
    import pygame

    env = make("human")
    window = env.unwrapped._renderer
    pygame.event.post(pygame.event.Event(pygame.QUIT))
    env.step(1)
    assert window.quit_requested and window.closed
    drawn = window.frames_drawn
    env.step(1)  # no window any more, no error
    assert window.frames_drawn == drawn
    env.close()


def test_window_rejects_bad_fps_and_scale():
    with pytest.raises(ValueError, match="fps"):
        PygameWindow(fps=-1)
    with pytest.raises(ValueError, match="scale"):
        PygameWindow(fps=1, scale=0)


# --------------------------------------------------------------------------- files
def game_frames(n: int) -> list[np.ndarray]:
    env = make("rgb_array")
    frames = [env.render()]
    for action in [1, 1, 3, 3, 3, 0][:n - 1]:
        env.step(action)
        frames.append(env.render())
    env.close()
    return frames


def test_gif_has_every_frame_loops_and_keeps_colours(tmp_path):
    frames = game_frames(5)
    path = save_animation(frames, tmp_path / "sub" / "game.gif", fps=10)
    assert path == tmp_path / "sub" / "game.gif"
    with Image.open(path) as im:
        assert im.n_frames == 5
        assert im.size == (W * 16, H * 16)
        assert im.info["loop"] == 0
        assert im.info["duration"] == 100
        im.seek(3)
        np.testing.assert_array_equal(np.asarray(im.convert("RGB")), frames[3])
    assert list(tmp_path.joinpath("sub").iterdir()) == [path]  # no temporary files left


def test_png_round_trips_exactly(tmp_path):
    frame = annotate(game_frames(1)[0], "turn 0/100  score +0")
    assert frame.shape == (H * 16 + 20, W * 16, 3)
    path = save_png(frame, tmp_path / "last.png")
    with Image.open(path) as im:
        np.testing.assert_array_equal(np.asarray(im), frame)


def test_mp4_through_imageio_ffmpeg(tmp_path):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    frames = [f[:-1, :-3] for f in game_frames(4)]  # odd sizes get padded to even
    path = save_animation(frames, tmp_path / "game.mp4", fps=4)
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    assert meta["size"] == (W * 16 - 2, H * 16) and meta["fps"] == 4
    assert sum(1 for _ in reader) == 4


def test_mp4_without_imageio_ffmpeg_names_the_video_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # import now raises ImportError
    with pytest.raises(ModuleNotFoundError, match=r"rpg-treasurehunt\[video\]"):
        save_animation(game_frames(2), tmp_path / "game.mp4", fps=4)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("frames", "name", "fps", "match"),
    [
        ("ok", "game.avi", 8, "extension must be one of .gif, .mp4"),
        ("ok", "game", 8, "extension"),
        ("ok", "game.gif", 0, "fps must be a positive"),
        ("ok", "game.gif", "fast", "fps must be a positive"),
        ([], "game.gif", 8, "non-empty list"),
        ([np.zeros((8, 8), np.uint8)], "game.gif", 8, r"\(H, W, 3\) uint8"),
        ([np.zeros((8, 8, 3), np.float32)], "game.gif", 8, r"\(H, W, 3\) uint8"),
        ([np.zeros((8, 8, 3), np.uint8), np.zeros((8, 9, 3), np.uint8)], "game.gif", 8, "same shape"),
    ],
)
def test_save_animation_bad_inputs(tmp_path, frames, name, fps, match):
    frames = game_frames(2) if frames == "ok" else frames
    with pytest.raises(ValueError, match=match):
        save_animation(frames, tmp_path / name, fps=fps)
    assert not list(tmp_path.iterdir())


def test_a_failed_save_keeps_the_file_already_there(tmp_path):
    path = save_animation(game_frames(3), tmp_path / "game.gif", fps=8)
    before = path.read_bytes()
    with pytest.raises(ValueError):
        save_animation([np.zeros((4, 4, 3), np.uint8), np.zeros((5, 4, 3), np.uint8)], path)
    assert path.read_bytes() == before


def test_save_png_bad_inputs(tmp_path):
    frame = game_frames(1)[0]
    with pytest.raises(ValueError, match=r"must end in \.png"):
        save_png(frame, tmp_path / "frame.jpg")
    with pytest.raises(ValueError, match=r"\(H, W, 3\) uint8"):
        save_png(frame[..., 0], tmp_path / "frame.png")
    assert not list(tmp_path.iterdir())


def test_window_waits_to_honour_fps():
    import time

    params = WorldParams(height=H, width=W, num_agents=1)
    grid, agents = parse_layout([row.replace("B", ".") for row in LAYOUT], params)
    frame = render_rgb(grid, agents, params)
    window = PygameWindow(fps=20, legend=game_legend(params, num_agents=1))
    try:
        window.show(frame, header="turn 0")
        start = time.perf_counter()
        for turn in range(1, 4):
            window.show(frame, header=f"turn {turn}")
        # The clock spaces frames at least 1/20 s apart (a lower bound: never flaky when slow).
        assert time.perf_counter() - start >= 3 / 20 - 0.01
        assert window.frames_drawn == 4
        assert len(window.legend) == 5  # wall, gem, bone, food, the learner: no co-player entry
    finally:
        window.close()


def test_written_files_get_ordinary_permissions(tmp_path):
    import os

    from rpg_env.render import save_animation, save_png

    frame = np.zeros((8, 8, 3), dtype=np.uint8)
    umask = os.umask(0o022)
    try:
        gif = save_animation([frame, frame], tmp_path / "a.gif", fps=4)
        png = save_png(frame, tmp_path / "a.png")
    finally:
        os.umask(umask)
    assert gif.stat().st_mode & 0o777 == 0o644
    assert png.stat().st_mode & 0o777 == 0o644


# --------------------------------------------------------------------------- the legend
def _legend_icon(legend: list[tuple[np.ndarray, str]], letter: str) -> np.ndarray:
    """The icon of the legend row that names agent ``letter`` ("A  the learner", "B, F  co-players")."""
    rows = [icon for icon, label in legend if letter in label.split("  ")[0].rstrip(".").split(", ")]
    assert len(rows) == 1, [label for _, label in legend]
    return rows[0]


@pytest.mark.parametrize("num_agents", [1, 2, 3, 6])
def test_the_map_legend_shows_every_agent_in_the_pixels_the_map_draws(num_agents):
    layout = ["#######", "#.B.C.#", "#.D.E.#", "#..A..#", "#.F...#", "#.....#", "#######"]
    letters = "ABCDEF"[:num_agents]
    layout = ["".join(ch if ch not in "ABCDEF" or ch in letters else "." for ch in row) for row in layout]
    params = WorldParams(height=7, width=7, vision_radius=3, num_agents=num_agents)  # the view: all of it
    grid, agents = parse_layout(layout, params)
    tile = 18  # the legend's
    frame = render_rgb(grid, agents, params, tile=tile)
    legend = game_legend(params, num_agents, tile=tile)
    for letter, (row, col) in zip(letters, agents, strict=True):
        drawn = frame[row * tile:(row + 1) * tile, col * tile:(col + 1) * tile]
        np.testing.assert_array_equal(_legend_icon(legend, letter), drawn, err_msg=f"agent {letter}")
    assert len(legend) == 4 + min(num_agents, len(CO_PLAYER_RGB) + 1)  # B and F share a colour, and a row


def test_the_views_legend_shows_the_agents_in_the_pixels_a_view_draws():
    """In an egocentric view every agent has the agent kind's colour (a co-player is not purple
    there) and only the learner, at the centre, has the dark mark."""
    agent, empty = vocabulary().agent, vocabulary().code("empty")
    codes = np.full((9, 9), empty)
    codes[4, 4] = codes[2, 6] = agent
    tile = 18
    frame = render_view(codes, tile=tile)
    legend = game_legend(WorldParams(), 2, tile=tile, views=True)
    np.testing.assert_array_equal(_legend_icon(legend, "A"), frame[4 * tile:5 * tile, 4 * tile:5 * tile])
    np.testing.assert_array_equal(_legend_icon(legend, "B"), frame[2 * tile:3 * tile, 6 * tile:7 * tile])
    assert not any(label.startswith("B") for _, label in game_legend(WorldParams(), 1, views=True))


def test_any_games_view_is_drawn_in_its_kinds_colours_with_the_agents_cell_marked():
    names = ("unseen", "empty", "wall", "crystal")
    declared = [(1, 2, 3), (0, 0, 0), (90, 90, 90), (200, 10, 10)]
    np.testing.assert_array_equal(kind_colors(names, declared), np.asarray(declared, dtype=np.uint8))
    named = kind_colors(names)  # none declared: the common kinds' colours, the others' fixed by name
    assert tuple(named[2]) == (110, 110, 110) and tuple(named[3]) == tuple(kind_colors(["crystal"])[0])
    codes = np.array([[2, 2, 2], [0, 3, 0], [1, 1, 1]])
    frame = render_kinds(codes, named, agent_cell=(2, 1), tile=16)
    assert frame.shape == (48, 48, 3) and tuple(frame[0, 5]) == VIEW_OUTLINE_RGB
    assert tuple(frame[24, 24]) == tuple(named[3]) and tuple(frame[8, 8]) == tuple(named[2])
    agent = frame[32:48, 16:32]
    assert (agent == (230, 30, 30)).all(-1).sum() > 20 and tuple(frame[40, 8]) == tuple(named[1])
    red = (agent == (230, 30, 30)).all(-1).sum(1)
    assert red[12] > red[6] > red[4] >= 0 and red[14] == 0  # a triangle, its apex to the view's top
    assert tuple(render_kinds(codes, named, tile=16)[40, 24]) == tuple(named[1])  # no agent: no mark
    assert [label for _, label in kinds_legend(names, named)] == list(names)
