"""A long command ends with its caller (`rpg_base.cli.end_with_caller`): SIGTERM, or the death of the
process that started it, stops it cleanly, its child processes and temporary folder with it (real
processes, real signals; Linux only: process states are read from /proc). And a quick benchmark's
agents go where its ``--runs`` says, or to a temporary folder it removes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rpg_base.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

#: A command that ties itself to its caller, starts a child and waits in a temporary folder.
COMMAND = """
import os, subprocess, sys, tempfile, time
from rpg_base.cli import end_with_caller
end_with_caller()
with tempfile.TemporaryDirectory() as tmp:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print(os.getpid(), child.pid, tmp, flush=True)
    time.sleep(120)
"""
#: A caller that starts the command given as its arguments and waits (until it is killed).
CALLER = "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(300)"


def _env(tmp_path: Path) -> dict[str, str]:
    # the checkout's packages, also for a script (whose own folder is first on its path)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "TMPDIR": str(tmp_path)}


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie its parent has not reaped yet has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _children(pid: int) -> list[int]:
    return [int(c) for task in Path(f"/proc/{pid}/task").glob("*")
            for c in (task / "children").read_text().split()]


def _soon(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_sigterm_ends_the_command_with_its_child_and_its_temporary_folder(tmp_path):
    command = subprocess.Popen([sys.executable, "-c", COMMAND], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
    _, child, tmp = command.stdout.readline().split()
    command.send_signal(signal.SIGTERM)
    assert command.wait(timeout=30) == 128 + signal.SIGTERM
    assert command.stderr.read().strip() == "terminated"  # one line, no traceback
    assert _soon(lambda: _gone(int(child)), 10), "the command's child outlived it"
    assert not Path(tmp).exists()


def test_a_command_ends_when_its_caller_is_killed(tmp_path):
    caller = subprocess.Popen([sys.executable, "-c", CALLER, sys.executable, "-c", COMMAND],
                              stdout=subprocess.PIPE, text=True, env=_env(tmp_path))
    pid, child, tmp = caller.stdout.readline().split()
    caller.kill()  # as a time limit kills it: no chance to pass a signal on
    caller.wait()
    assert _soon(lambda: _gone(int(pid)) and _gone(int(child)), 20), "the command outlived its caller"
    assert not Path(tmp).exists()


def test_a_command_started_under_nohup_outlives_its_caller(tmp_path):
    """``nohup`` asks for a command that outlives its caller: the watcher leaves it running."""
    caller = subprocess.Popen([sys.executable, "-c", CALLER, "nohup", sys.executable, "-c", COMMAND],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env=_env(tmp_path))
    pid, child, _ = caller.stdout.readline().split()
    caller.kill()
    caller.wait()
    try:
        time.sleep(2)  # four of the watcher's looks
        assert not _gone(int(pid)) and not _gone(int(child))
    finally:
        for process in (int(child), int(pid)):
            os.kill(process, signal.SIGKILL)


def test_a_benchmark_whose_caller_is_killed_stops_within_seconds(tmp_path):
    """The memory benchmark training one agent (120,000 steps: minutes), its caller killed once the
    agent's run folder is made: the benchmark stops within seconds, no child of it survives, and no
    result is written."""
    benchmark = [sys.executable, str(ROOT / "benchmarks" / "memory_agents.py"), "--tasks", "proof",
                 "--algos", "ppo", "--seeds", "0", "--episodes", "2", "--runs", str(tmp_path / "runs"),
                 "--out", str(tmp_path / "result.json")]
    caller = subprocess.Popen([sys.executable, "-c", CALLER, *benchmark], stdout=subprocess.DEVNULL,
                              env=_env(tmp_path))
    try:
        assert _soon(lambda: any(tmp_path.glob("runs/proof/*")), 180), "the benchmark never started training"
        pid = next(int(c) for c in _children(caller.pid))
        children = _children(pid)
    finally:
        caller.kill()
        caller.wait()
    assert _soon(lambda: _gone(pid), 20), "the benchmark outlived its caller"
    assert all(_gone(c) for c in children)
    assert not (tmp_path / "result.json").exists()


def test_a_quick_benchmark_trains_in_the_runs_folder_given_else_in_one_it_removes(tmp_path, monkeypatch):
    """``--quick`` honours ``--runs`` and ``--resume`` as a full run does (a researcher who names a
    folder means to look in it, or to resume from it); without ``--runs`` its agents go to a
    temporary folder, removed at the end."""
    import tempfile

    from benchmark_modules import load_benchmark

    module = load_benchmark("memory_agents", "benchmark_memory_agents_runs")
    roots = []

    def trained(task, algo, seed, steps, visible_turns, episodes, root, device):  # stands in for training
        roots.append(root)
        (root / task).mkdir(parents=True, exist_ok=True)
        return {"task": task, "algo": algo, "seed": seed, "steps": steps, "figure": 1.0,
                "steps_per_second": 1.0, "cpu_seconds_with_eval": 60.0}

    monkeypatch.setattr(module, "run_one", trained)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    quick = ["--quick", "--tasks", "proof", "--algos", "ppo"]
    module.main([*quick, "--runs", str(tmp_path / "runs")])
    assert roots == [tmp_path / "runs"] and (tmp_path / "runs" / "proof").is_dir()
    with pytest.raises(InputError, match="already holds run folders"):
        module.main([*quick, "--runs", str(tmp_path / "runs")])
    module.main([*quick, "--runs", str(tmp_path / "runs"), "--resume"])
    module.main(quick)
    assert roots[-1].parent == tmp_path and roots[-1].name.startswith("memory_agents_")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # the temporary folder is gone
