"""Records name no machine's folders: paths relative to the run, the source tree or the working
folder, else a file name (which records pair with a fingerprint)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rpg_base.provenance import SOURCE_ROOT, portable_command, portable_path, provenance


def test_portable_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert portable_path(SOURCE_ROOT / "rpg_worldmodel" / "pretrained") == "rpg_worldmodel/pretrained"
    assert portable_path(tmp_path / "runs" / "a" / "model.zip") == "runs/a/model.zip"  # the working folder
    assert portable_path(tmp_path / "run" / "best", base=tmp_path / "run") == "best"
    assert portable_path("/elsewhere/data/dqn.h5") == "dqn.h5"
    assert portable_path("runs/x.h5") == "runs/x.h5"  # relative paths are kept as given
    assert portable_command(["train.py", "--out", "/elsewhere/e1/b2.json", "data.path=/srv/d.h5",
                             "--python=/opt/venv/bin/python", "a b"]) == \
        "train.py --out b2.json data.path=d.h5 --python=python 'a b'"


def test_a_provenance_record_holds_no_absolute_path(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/opt/x/train.py", "--out", "/elsewhere/run", "--data=/srv/g.h5"])
    record = provenance(seed=0)
    assert record["command"] == "train.py --out run --data=g.h5"


def _committed_json() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "*.json"], cwd=SOURCE_ROOT, capture_output=True, text=True,
                             check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return out.stdout.split()


def test_no_committed_json_names_a_machine_folder():
    bad = []
    for name in _committed_json():
        text = (SOURCE_ROOT / name).read_text()
        json.loads(text)
        bad += [f"{name}: {marker}" for marker in ("/work/", "/tmp/", "/home/", "/root/", "/Users/")
                if marker in text]
    assert not bad, bad
