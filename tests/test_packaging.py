"""Packaging facts: one pygame distribution, and a game import that never loads pygame."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest


def test_pygame_module_comes_from_pygame_ce_alone():
    assert metadata.packages_distributions().get("pygame") == ["pygame-ce"]
    assert metadata.version("pygame-ce")
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.distribution("pygame")  # the original pygame would overwrite pygame-ce's files


def test_import_rpg_env_and_playing_headless_do_not_import_pygame():
    code = (
        "import sys, gymnasium, rpg_env\n"
        "assert 'pygame' not in sys.modules, 'import rpg_env loaded pygame'\n"
        "env = gymnasium.make('Treasurehunt-v0', render_mode='rgb_array')\n"
        "env.reset(seed=0)\n"
        "env.step(0)\n"
        "assert env.render().shape == (320, 320, 3)\n"
        "from rpg_env import render\n"
        "assert 'pygame' not in sys.modules, 'rgb_array rendering loaded pygame'\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
