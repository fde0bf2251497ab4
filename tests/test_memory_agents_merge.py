"""`benchmarks/memory_agents.py --merge`: an earlier result's agents join a new command's summary as
they were, and a file that cannot join is refused in one line before any agent trains."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmark_modules import load_benchmark

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "memory_agents.py"
CARTPOLE = REPO / "benchmarks" / "results" / "memory_agents_cartpole.json"
#: One agent, read from an empty folder (nothing trains). The shipped cartpole file holds it since
#: its row was merged in, so the summary test merges a copy without it.
NOTHING_TRAINED = ["--tasks", "cartpole", "--algos", "recurrent-ppo", "--seeds", "0", "--episodes", "50",
                   "--resume", "--finished-only"]


def test_merged_agents_are_summarised_as_their_own_file_summarised_them(tmp_path):
    (tmp_path / "runs").mkdir()
    earlier = json.loads(CARTPOLE.read_text())
    earlier["runs"] = [r for r in earlier["runs"] if r["algo"] != "recurrent-ppo"]  # the agent read here
    given, out = tmp_path / "earlier.json", tmp_path / "merged.json"
    given.write_text(json.dumps(earlier))
    main = load_benchmark("memory_agents", "benchmark_memory_agents_merge").main
    main([*NOTHING_TRAINED, "--runs", str(tmp_path / "runs"), "--merge", str(given), "--out", str(out)])
    merged = json.loads(out.read_text())
    assert merged["runs"] == earlier["runs"]
    for algo in ("trxl-ppo", "ppo"):
        mine, theirs = merged["summary"]["cartpole"][algo], earlier["summary"]["cartpole"][algo]
        assert mine["figure"] == theirs["figure"] and mine["seeds"] == theirs["seeds"] == [0, 1, 2, 3, 4]
        assert mine["vs_best_memoryless"] == theirs["vs_best_memoryless"]
        assert mine["env_steps"] == sorted({r["steps"] for r in earlier["runs"] if r["algo"] == algo})
    source = merged["merged"][0]
    assert source["file"] == "earlier.json"  # portable: no machine path
    assert source["command"] == earlier["command"] and source["git_revision"] == earlier["git_revision"]


def _refused(tmp_path: Path, *argv: str) -> str:
    (tmp_path / "runs").mkdir(exist_ok=True)
    argv = [*NOTHING_TRAINED[:-2], "--runs", str(tmp_path / "runs"), *argv, "--out", str(tmp_path / "o.json")]
    done = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2 and not (tmp_path / "o.json").exists()
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not any((tmp_path / "runs").iterdir())  # no agent started
    return done.stderr


def test_a_file_that_cannot_join_is_refused_in_one_line_before_any_agent_trains(tmp_path):
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"runs": [{"method": "learn", "seed": 0}]}))
    assert "is not a result of benchmarks/memory_agents.py" in _refused(tmp_path, "--merge", str(foreign))
    (tmp_path / "empty.json").write_text("")
    assert "is empty" in _refused(tmp_path, "--merge", str(tmp_path / "empty.json"))
    assert "give --episodes 50" in _refused(tmp_path, "--merge", str(CARTPOLE), "--episodes", "20")
    holds = _refused(tmp_path, "--merge", str(CARTPOLE), "--algos", "ppo")
    assert "--merge already holds cartpole ppo seed 0" in holds


def test_an_agent_is_judged_greedily_and_with_sampled_actions_on_the_same_games(tmp_path):
    """Seed 002 plays its agents with actions sampled from the policy; the table gives that figure
    beside the greedy one, the draws seeded: read again, the agent scores the same."""
    module = load_benchmark("memory_agents", "benchmark_memory_agents_sampled")
    row = module.run_one("proof", "ppo", 0, 2048, 2, 6, tmp_path / "runs")
    assert set(row) >= {"figure", "figure_sampled"}
    assert all(0.0 <= row[key] <= 1.0 for key in ("figure", "figure_sampled"))
    again = module.run_one("proof", "ppo", 0, 2048, 2, 6, tmp_path / "runs")  # read, not trained again
    assert again["figure_sampled"] == row["figure_sampled"] and again["figure"] == row["figure"]
    summary = module.summarize_runs([row, {**row, "seed": 1}])["proof"]["ppo"]
    assert summary["figure_sampled"]["mean"] == row["figure_sampled"]
    older = {k: v for k, v in row.items() if k != "figure_sampled"}  # a merged row from before it
    assert module.summarize_runs([older])["proof"]["ppo"]["figure_sampled"] is None
