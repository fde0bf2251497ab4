"""Records name no machine's folders: paths relative to the run, the source tree or the working
folder, else a file name (which records pair with a fingerprint)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rpg_base.provenance import SOURCE_ROOT, first_processor, portable_command, portable_path, provenance


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


def test_a_provenance_record_names_the_processor_its_figures_depend_on():
    import os

    import torch

    cpu = provenance(seed=0)["cpu"]
    assert cpu == json.loads(json.dumps(cpu))
    assert cpu["name"]
    assert cpu["cores"] == len(os.sched_getaffinity(0))
    # the instruction set torch's kernels run on, which decides their floating-point results
    assert cpu["torch_capability"] == torch.backends.cpu.get_cpu_capability()


def test_the_processor_is_read_from_the_first_block_of_cpuinfo():
    text = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
            "model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 25\nmodel name\t: Other\n")
    assert first_processor(text) == {"family": "26", "model": "2", "name": "AMD EPYC"}
    assert first_processor("") == {}


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


# ------------------------------------------------------------------ results (rpg_base.results)
def test_write_results_is_strict_json_with_its_plot_beside_it(tmp_path, capsys):
    import numpy as np

    from rpg_base.results import pyplot, save_figure, write_results

    def plot(png):
        fig, ax = pyplot().subplots()
        ax.plot([0, 1], [1, 0])
        save_figure(fig, png)

    record = {"mean": float("nan"), "rows": [1.5, float("inf"), np.float64(2.0)], 3: (np.int64(4),)}
    written = write_results(tmp_path / "deep" / "bench.json", record, plot)
    assert written == [tmp_path / "deep" / "bench.json", tmp_path / "deep" / "bench.png"]
    text = written[0].read_text()
    assert "NaN" not in text and "Infinity" not in text  # strict JSON: unmeasured is null
    assert json.loads(text) == {"mean": None, "rows": [1.5, None, 2.0], "3": [4]}
    assert written[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in capsys.readouterr().out
    assert not list(tmp_path.glob("deep/.*"))  # no temporary left behind


def test_write_results_keeps_the_old_record_when_the_new_one_cannot_be_written(tmp_path):
    from rpg_base.results import write_results

    out = tmp_path / "bench.json"
    write_results(out, {"figure": 1})
    with pytest.raises(TypeError):
        write_results(out, {"figure": object()})  # not JSON: fails before touching the file
    assert json.loads(out.read_text()) == {"figure": 1}


def test_a_cpu_device_is_described_as_the_cpu():
    from rpg_base.provenance import device_description

    assert device_description("cpu") == "cpu"
