"""``python -m rpg_env.demo``: a seeded greedy game written as GIF + PNG + provenance JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rpg_base.cli import command_status
from rpg_env.demo import main, play_episode, run_demo
from rpg_env.policies.scripted import GreedyPolicy, RandomPolicy


def test_demo_command_writes_gif_png_and_scores(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "rpg_env.demo", "--out", str(out), "--seed", "3",
                           "--turns", "12"], capture_output=True, text=True, timeout=120, check=True)
    lines = proc.stdout.strip().splitlines()
    gif = Path(lines[-1])
    assert gif == out / "demo.gif" and gif.is_file()
    assert lines[0].startswith("greedy agent: score ") and "in 12 turns (seed 3" in lines[0]
    assert lines[1].startswith("random agent: score ")
    with Image.open(gif) as im:
        assert im.n_frames <= 13  # reset + 12 turns (Pillow merges identical frames)
        assert im.n_frames >= 10 and im.info["loop"] == 0
        size = im.size
    with Image.open(out / "last_frame.png") as im:
        assert im.size == size
    record = json.loads((out / "demo.json").read_text())
    assert record["seed"] == 3 and record["turns"] == 12
    assert set(record["scores"]) == {"greedy", "random"}
    assert "numpy" in record["versions"]
    assert f"{record['scores']['greedy']:+g}" in lines[0]


def test_same_seed_same_game_and_greedy_beats_random(tmp_path):
    a = run_demo(tmp_path / "a", seed=7, turns=40)
    b = run_demo(tmp_path / "b", seed=7, turns=40)
    assert a.greedy.score == b.greedy.score and a.random.score == b.random.score
    assert len(a.greedy.frames) == 41
    for fa, fb in zip(a.greedy.frames, b.greedy.frames, strict=True):
        np.testing.assert_array_equal(fa, fb)
    assert (tmp_path / "a" / "demo.gif").read_bytes() == (tmp_path / "b" / "demo.gif").read_bytes()
    # The PNG is the last frame of the game, exactly.
    with Image.open(a.png) as im:
        np.testing.assert_array_equal(np.asarray(im), a.greedy.frames[-1])
    # Over a few seeds the scripted agent collects far more than a random walk.
    greedy = [play_episode(GreedyPolicy(), seed=s, turns=100, keep_frames=False).score
              for s in range(3)]
    random = [play_episode(RandomPolicy(), seed=s, turns=100, keep_frames=False).score
              for s in range(3)]
    assert np.mean(greedy) > np.mean(random) + 50, (greedy, random)


def test_demo_main_prints_the_gif_path_last(tmp_path, capsys):
    result = main(["--out", str(tmp_path), "--turns", "3", "--co-policy", "greedy", "--fps", "4"])
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == str(result.gif) == str(tmp_path / "demo.gif")
    assert result.greedy.turns == 3


@pytest.mark.parametrize(("argv", "match"), [
    (["--turns", "0"], "--turns must be >= 1"),
    (["--fps", "0"], "--fps must be > 0"),
    (["--co-policy", "clever"], "invalid choice"),
])
def test_demo_rejects_bad_arguments(tmp_path, capsys, argv, match):
    assert command_status(main, ["--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and err.startswith("error: ") and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


def test_run_demo_rejects_bad_turns(tmp_path):
    with pytest.raises(ValueError, match="turns must be a positive integer"):
        run_demo(tmp_path, turns=0)
