"""The IRIS loop from scratch (`rpg_worldmodel.learn`): what each iteration feeds the next, what
stays out of the learner's data, and that a run killed at any point resumes to the same result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from rpg_base.errors import InputError
from rpg_base.typed_config.config import to_dict as tc_to_dict
from rpg_base.typed_config.values import ConfigError
from rpg_worldmodel.checkpoint import read_checkpoint_record
from rpg_worldmodel.learn import extend_budget, learn, main
from rpg_worldmodel.learn_config import LearnConfig, load_learn_config, load_run_config

#: Two iterations of 10 games each, a tiny world model and a few hundred imagined steps: seconds.
TINY = ["real_steps=2000", "collect_steps=1000", "collect_envs=5", "world_model_steps=6",
        "world_model_steps_later=4", "agent_steps=256", "eval_episodes=4", "torch_threads=1",
        "world_model=[model.width=24,model.num_heads=2,model.num_layers=1,train.batch_size=8,"
        "data.max_val_windows=32]",
        "agent=[n_envs=4,hyperparams.n_steps=32,hyperparams.batch_size=64,eval.episodes=2]"]


def _tiny(*more: str) -> LearnConfig:
    return load_learn_config(None, [*TINY, *more])


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("learn") / "run"
    learn(_tiny(), out)
    return out


def test_each_iteration_learns_from_everything_collected_so_far(tiny_run):
    curve = json.loads((tiny_run / "curve.json").read_text())
    assert [p["real_steps"] for p in curve["points"]] == [1000, 2000]
    assert curve["final"]["agent"] == "iter_001/agent/model.zip"
    assert (tiny_run / "iter_001/agent/model.zip").is_file() and (tiny_run / "curve.png").stat().st_size > 0
    assert any((tiny_run / "tb").iterdir())
    first = read_checkpoint_record(tiny_run / "iter_000/world_model", "best")
    second = read_checkpoint_record(tiny_run / "iter_001/world_model", "best")
    assert first.init_from is None and "iter_000/world_model" in second.init_from
    # read off the games: the viewer's cell kept from the start, the draw's limits from all games so far
    assert first.config.model.fixed_cells == second.config.model.fixed_cells == (40,)
    limits = zip(first.config.model.kind_limits, second.config.model.kind_limits, strict=True)
    assert all(later >= earlier for earlier, later in limits)
    assert sorted(Path(f.path).parent.name for f in second.data.files) == ["iter_000", "iter_001"]
    # The first iteration's held-out games stay held out in the second (renumbered with the new file).
    offsets, first_id = {}, 0
    for f in second.data.files:
        offsets[f.fingerprint], first_id = first_id, first_id + f.num_episodes
    shift = offsets[first.data.files[0].fingerprint]
    for name in ("val", "test"):
        assert {i + shift for i in first.splits[name]} <= set(second.splits[name])
    assert not set(second.splits["train"]) & (set(second.splits["val"]) | set(second.splits["test"]))
    # The second agent started from the first one's weights, in worlds started from its own games.
    provenance = json.loads((tiny_run / "iter_001/agent/provenance.json").read_text())
    assert provenance["started_from"] == "iter_000/agent/model.zip"
    assert provenance["contexts"] == "iter_001/games.h5"
    assert provenance["world_model"] == "iter_001/world_model"
    assert provenance["imagination_threads"] == 1  # beside the learner's torch_threads


def test_the_learner_keeps_only_its_own_stream(tiny_run):
    """The co-player's views and actions are privileged: no file of the loop holds them."""
    for k in (0, 1):
        with h5py.File(tiny_run / f"iter_00{k}/games.h5", "r") as f:
            agents = np.asarray(f["episodes"]["agent_id"])
            assert len(agents) == 10 and (agents == 0).all()
    collected = json.loads((tiny_run / "iter_001/collect.json").read_text())
    assert collected["games"] == 10 and collected["agent_steps"] == 1000


def test_the_world_models_are_told_no_game_and_the_rules_switch_is_gone(tmp_path, capsys):
    """The loop's world models learn the moves and the rewards: there is no movement table to turn
    off. The switch's keys read as nothing at the value the code runs with (off), are refused at on
    in one line, and the flags only leave a note."""
    wm = _tiny().world_model_config(0, [tmp_path / "a.h5"], tmp_path / "wm")
    assert not any(hasattr(wm.model, key) for key in ("move_rules", "move_deltas", "blocking_kinds",
                                                      "entered_rewards"))
    assert not hasattr(_tiny(), "move_rules")
    assert _tiny("move_rules=false") == _tiny() == _tiny("rules=false")  # a record of before
    for key in ("move_rules", "rules"):
        with pytest.raises(ConfigError, match=rf"{key}=True can no longer be set: {key} was removed "
                                              rf"\(.*movement table and reward prior.*\)") as refused:
            _tiny(f"{key}=true")
        assert "\n" not in str(refused.value)
    for flag in ("--no-move-rules", "--no-rules"):
        # no longer a setting: with --resume it is not refused as one, the missing run is
        with pytest.raises(InputError, match="no learn run there"):
            main(["--resume", str(tmp_path), flag])
        assert "note: --no-move-rules has no effect" in capsys.readouterr().err


def test_the_world_model_and_agent_configs_take_the_loop_settings_as_typed_values(tmp_path):
    """Each setting crosses as its typed value, and the stage's own overrides still win."""
    cfg = _tiny("seed=3", "sample_floor=0.25", "world_model=[train.max_steps=9]", "agent=[eval.seed=5]")
    wm = cfg.world_model_config(1, [tmp_path / "a.h5"], tmp_path / "wm", start=tmp_path / "w0")
    assert (wm.train.seed, wm.train.max_steps, wm.train.eval_every, wm.train.warmup_steps) == (3, 9, 4, 1)
    assert wm.model.sample_floor == 0.25 and wm.data.path == [str(tmp_path / "a.h5")]
    assert (wm.out_dir, wm.train.init_from) == (str(tmp_path / "wm"), str(tmp_path / "w0"))
    agent = cfg.agent_config(2)
    assert (agent.seed, agent.total_timesteps, agent.n_envs, agent.eval.seed) == (3002, 256, 64, 5)
    assert agent.hyperparams["n_steps"] == 32 and agent.eval.final_episodes == 4


def _parameters(zip_path: Path) -> dict[str, torch.Tensor]:
    import io

    with zipfile.ZipFile(zip_path) as z:
        return torch.load(io.BytesIO(z.read("policy.pth")), weights_only=True)


def _points(run: Path) -> list[dict]:
    points = json.loads((run / "curve.json").read_text())["points"]
    return [{k: v for k, v in p.items() if k != "seconds"} for p in points]


def test_a_run_killed_and_resumed_ends_as_an_uninterrupted_one(tiny_run, tmp_path):
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "rpg_worldmodel.learn", "--out", str(out), *TINY],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    # Kill it in the middle of the second iteration's world-model training.
    deadline = time.monotonic() + 300
    while not (out / "iter_001/world_model/checkpoints").exists():
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "iter_001/iteration.json").exists()
    done = subprocess.run([sys.executable, "-m", "rpg_worldmodel.learn", "--resume", str(out)],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert _points(out) == _points(tiny_run)
    a, b = _parameters(out / "iter_001/agent/model.zip"), _parameters(tiny_run / "iter_001/agent/model.zip")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_last_iteration_collects_only_what_is_left_of_the_budget():
    assert _tiny().planned_steps(100) == [1000, 1000]
    assert _tiny("real_steps=2500").planned_steps(100) == [1000, 1000, 500]
    assert _tiny("real_steps=2050").planned_steps(100) == [1000, 1000, 50]  # one whole game: 100 steps
    assert _tiny("real_steps=300").planned_steps(100) == [300]
    assert _tiny("collect_steps=950").planned_steps(100) == [950, 950]  # 10 whole games: 1,000 steps


@pytest.mark.slow
def test_a_run_extended_to_a_larger_budget_ends_as_a_run_to_it_from_the_start(tiny_run, tmp_path):
    out = tmp_path / "extended"
    learn(_tiny("real_steps=1000"), out)
    assert [p["real_steps"] for p in _points(out)] == [1000]
    with pytest.raises(InputError, match="can be extended, not cut"):
        main(["--resume", str(out), "--steps", "500"])
    assert main(["--resume", str(out), "--steps", "2000"]) == 0
    assert _points(out) == _points(tiny_run)
    a, b = _parameters(out / "iter_001/agent/model.zip"), _parameters(tiny_run / "iter_001/agent/model.zip")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert load_learn_config(out / "config.yaml").real_steps == 2000
    extended = json.loads((out / "provenance.json").read_text())["extended"]
    assert [(e["from_real_steps"], e["real_steps"]) for e in extended] == [(1000, 2000)]
    assert "--steps 2000" in extended[0]["command"]
    assert {"created", "git_revision", "versions"} <= set(extended[0])


def test_a_run_made_before_a_setting_existed_resumes_as_it_began(tmp_path):
    """A run's config.yaml from before ``imagined_worlds``, ``rollout_steps`` and ``sample_floor``
    existed ran its agent in dream_ppo.yaml's 16 worlds of 128-step rollouts, in world models that
    drew without a floor, and resumes so; a new run's default is 64 worlds of 32 steps, in world
    models that draw with the floor."""
    recorded = {k: v for k, v in load_learn_config().__dict__.items()
                if k not in ("imagined_worlds", "rollout_steps", "sample_floor")}
    (tmp_path / "config.yaml").write_text(json.dumps(recorded))  # JSON is YAML
    old_run, new_run = load_run_config(tmp_path), load_learn_config()
    old, new = old_run.agent_config(3), new_run.agent_config(3)
    assert (old.n_envs, old.hyperparams["n_steps"]) == (16, 128)
    assert (new.n_envs, new.hyperparams["n_steps"]) == (64, 32)
    assert new.n_envs * new.hyperparams["n_steps"] == old.n_envs * old.hyperparams["n_steps"]
    floors = [run.world_model_config(3, [], tmp_path).model.sample_floor for run in (old_run, new_run)]
    assert floors == [0.0, 0.001]
    assert _tiny("world_model=[model.sample_floor=0.002]").world_model_config(0, [], tmp_path) \
        .model.sample_floor == 0.002  # an explicit world-model override wins


def test_a_run_whose_last_iteration_collected_a_remainder_is_not_extended(tmp_path):
    (tmp_path / "provenance.json").write_text("{}")
    with pytest.raises(InputError, match="start a new run with --steps 3000"):
        extend_budget(tmp_path, _tiny("real_steps=1500"), 3000, "python -m rpg_worldmodel.learn")
    assert json.loads((tmp_path / "provenance.json").read_text()) == {}  # nothing noted


def test_the_benchmark_gives_each_budget_the_last_agent_within_it(tmp_path):
    """A 5,000 budget gets the loop's 4,000-step agent; a budget that the run's next iteration would
    have ended within gets no row."""
    module = _benchmark()
    run = tmp_path / "learn-run"
    run.mkdir()
    points = [{"real_steps": s, "return": float(s // 100), "greedy": 350.0, "random": 25.0,
               "seconds": {"collect": 1.0, "world_model": 20.0, "agent": 39.0, "cpu": 90.0}}
              for s in range(2000, 10001, 2000)]
    config = {"rules": True, "seed": 4, "collect_steps": 2000}
    (run / "curve.json").write_text(json.dumps({"config": config, "points": points}))
    rows = {r["steps"]: r for r in module.learn_rows(run, [5000, 10000, 11000, 12000, 25000])}
    assert sorted(rows) == [5000, 10000, 11000]  # 11,000: its next iteration would end at 12,000
    assert rows[11000]["steps_used"] == 10000
    assert rows[5000]["steps_used"] == 4000 and rows[5000]["return"] == 40.0
    assert rows[5000]["wall_minutes"] == pytest.approx(2.0)  # two iterations of 60 s
    assert rows[5000]["cpu_minutes"] == pytest.approx(3.0)
    assert rows[10000]["steps_used"] == 10000 and rows[10000]["cpu_minutes"] == pytest.approx(7.5)
    summary = module.summarize([{"method": "learn", "seed": 4, **r} for r in rows.values()])
    assert summary["learn"]["5000"]["steps_used"] == [4000] and "steps_used" not in summary["learn"]["10000"]
    assert rows[5000]["processor"] is None  # the run names no processor
    (run / "provenance.json").write_text(json.dumps({"cpu": {"name": "AMD EPYC", "cores": 2}}))
    del points[2]["seconds"]["cpu"]  # a run that stopped recording CPU seconds at 6,000
    (run / "curve.json").write_text(json.dumps({"config": config, "points": points}))
    rows = {r["steps"]: r for r in module.learn_rows(run, [5000, 10000])}
    assert rows[5000]["cpu_minutes"] == pytest.approx(3.0) and rows[10000]["cpu_minutes"] is None
    assert rows[10000]["wall_minutes"] == pytest.approx(5.0)
    assert rows[10000]["processor"] == {"name": "AMD EPYC", "cores": 2}



def test_the_benchmark_names_a_loop_run_by_what_differs_from_the_defaults(tmp_path):
    module = _benchmark()
    default = tc_to_dict(load_learn_config(None, ["seed=2"]))
    before = {k: v for k, v in default.items() if k not in ("imagined_worlds", "rollout_steps")}
    on, off = ("learn, rules on (schema 11)", 2), ("learn, rules off (schema 11)", 2)
    for name, config, method in (("now", default, ("learn", 2)),
                                 ("rules-on", {**default, "move_rules": True}, on),
                                 ("rules-off", {**default, "move_rules": False}, off),
                                 ("old-rules-off", {**default, "rules": False}, off),
                                 ("first", {**before, "agent_steps": 40_000}, ("learn (16 worlds, 40k)", 2))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "curve.json").write_text(json.dumps({"config": config, "points": []}))
        assert module.learn_method(tmp_path / name) == method


def _benchmark():
    from benchmark_modules import load_benchmark

    return load_benchmark("sample_efficiency", "benchmark_sample_efficiency_read")


def test_bad_settings_are_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError, match="collect_steps must be >= 1"):
        _tiny("collect_steps=0")
    with pytest.raises(ConfigError, match="world_model takes key=value"):
        _tiny("world_model=[wide]")
    with pytest.raises(FileExistsError, match="--resume"):
        out = tmp_path / "run"
        out.mkdir()
        (out / "config.yaml").write_text("seed: 0\n")
        learn(_tiny(), out)


def test_a_learn_run_ships_its_last_agent_and_world_model(tiny_run, tmp_path):
    from rpg_base.errors import InputError
    from rpg_env.policies.sb3 import SB3Policy
    from rpg_worldmodel.checkpoint import load_checkpoint
    from rpg_worldmodel.ship import ship_scratch

    agent = ship_scratch(tiny_run, tmp_path / "scratch")
    assert agent == tmp_path / "scratch" / "model.zip"
    assert SB3Policy.load(agent).num_actions == 4
    loaded = load_checkpoint(tmp_path / "scratch" / "checkpoint")
    assert loaded.record.shipped["weights"] == "float16"
    assert "iter_001/world_model" in loaded.record.shipped["from"] and "/tmp" not in json.dumps(
        loaded.record.to_json())
    assert json.loads((tmp_path / "scratch" / "curve.json").read_text())["final"]["real_steps"] == 2000
    with pytest.raises(InputError, match="not a learn run"):
        ship_scratch(tmp_path / "nowhere", tmp_path / "elsewhere")


def test_an_agent_refuses_to_start_from_weights_that_do_not_fit(tmp_path):
    """``init_params`` of another algorithm is refused before the run folder exists."""
    from rpg_env.experts import pretrained_path
    from rpg_env.experts.config import load_expert_config
    from rpg_env.experts.train import train

    cfg = load_expert_config("ppo", overrides=["total_timesteps=64", "n_envs=2", "hyperparams.n_steps=32",
                                               "hyperparams.batch_size=64"])
    with pytest.raises(ConfigError, match=r"cannot start from .*dqn.*model.zip.*same algorithm"):
        train(cfg, tmp_path / "agent", init_params=pretrained_path("dqn"))
    assert not (tmp_path / "agent").exists()


def test_the_benchmark_reads_a_stopped_dreamer_run_to_the_budgets_it_reached(tmp_path):
    """`benchmarks/sample_efficiency.py --dreamer-from`: DreamerV3's own episodes in each budget's
    last fifth, its wall minutes from its logs, and no row for a budget it never reached."""
    logs = tmp_path / "dreamer-s3"
    (logs / "dreamer" / "version_0").mkdir(parents=True)
    (logs / "dreamer" / "version_0" / "config.yaml").write_text("seed: 3\nalgo:\n  replay_ratio: 0.05\n")
    train = [{"step": s, "return": float(s // 100), "seconds": s / 10} for s in range(100, 5300, 100)]
    (logs / "episodes.json").write_text(json.dumps({"train": train, "test": None}))
    module = _benchmark()
    out = tmp_path / "se.json"
    module.main(["--methods", "dreamer", "--dreamer-from", str(logs), "--budgets", "2000", "5000", "10000",
                 "--out", str(out)])
    record = json.loads(out.read_text())
    rows = {r["steps"]: r for r in record["runs"]}
    assert sorted(rows) == [2000, 5000] and {r["seed"] for r in rows.values()} == {3}
    assert rows[5000]["return"] == pytest.approx(np.mean(range(41, 51)))  # steps 4,100-5,000
    assert rows[5000]["episodes_averaged"] == 10 and rows[5000]["wall_minutes"] == pytest.approx(500 / 60)
    assert rows[2000]["return"] == pytest.approx(np.mean(range(17, 21)))
    assert record["summary"]["dreamer"]["5000"]["return"]["mean"] == pytest.approx(45.5)
    assert out.with_suffix(".png").is_file()
