"""The IRIS loop (`rpg_worldmodel.learn`) on a game nobody here wrote: MiniGrid's DoorKey, whose
games end when the goal is reached, which has no greedy baseline and no co-player, and whose
rewards the first files may never show."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from rpg_base.errors import InputError
from rpg_base.typed_config.values import ConfigError
from rpg_env.experts.evaluate import summarize
from rpg_worldmodel.checkpoint import read_checkpoint_record
from rpg_worldmodel.learn import Iteration, extend_budget, learn, stage_collect, wave_games
from rpg_worldmodel.learn_config import load_learn_config

pytest.importorskip("minigrid")

REPO = Path(__file__).resolve().parents[1]
#: One iteration of a tiny world model and agent on DoorKey-5x5, with fixed reward bins.
TINY = ["env_id=MiniGrid-DoorKey-5x5-v0", "real_steps=1000", "collect_steps=1000", "collect_envs=4",
        "world_model_steps=4", "world_model_steps_later=2", "agent_steps=128", "eval_episodes=4",
        "torch_threads=1",
        "world_model=[model.width=24,model.num_heads=2,model.num_layers=1,train.batch_size=8,"
        "data.max_val_windows=16,model.train_window=8,'model.reward_values=[0.0,0.5,1.0]']",
        "agent=[n_envs=4,hyperparams.n_steps=32,hyperparams.batch_size=64,eval.episodes=2]"]


def _tiny(*more: str):
    return load_learn_config(None, [*TINY, *more])


@pytest.fixture(scope="module")
def doorkey_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("learn_doorkey") / "run"
    learn(_tiny(), out)
    return out


def test_the_loop_learns_a_minigrid_task_through_its_one_hot_views(doorkey_run):
    curve = json.loads((doorkey_run / "curve.json").read_text())
    point = curve["final"]
    assert point["real_steps"] >= 1000 and point["collect_target"] == 1000
    assert point["greedy"] is None and point["vs_greedy"] is None  # MiniGrid has no greedy baseline
    assert 0.0 <= point["success"] <= 1.0 and point["random"] >= 0.0
    record = read_checkpoint_record(doorkey_run / "iter_000/world_model", "best")
    assert record.data.env_id == "OneHotMiniGrid-v0"
    assert record.config.model.reward_values == (0.0, 0.5, 1.0)  # the run's bins, not the files' rewards
    assert len(record.config.model.turns) == 2  # MiniGrid's two quarter turns, read off the games
    agent = json.loads((doorkey_run / "iter_000/agent/provenance.json").read_text())
    assert agent["trained_in"] == "rpg_worldmodel/Imagined-v0"
    results = json.loads((doorkey_run / "iter_000/agent/eval.json").read_text())
    assert set(results) == {"model", "random"}
    agent_cfg = _tiny().agent_config(0)  # the task under the one-hot wrapper, as `dream` names it
    assert (agent_cfg.env_id, agent_cfg.env) == ("minigrid:MiniGrid-DoorKey-5x5-v0", {})
    assert agent_cfg.wrappers == ["rpg_env.envs.minigrid_views:OneHotViews"]
    written = (doorkey_run / "iter_000/agent/config.yaml").read_text()
    assert "env_id: minigrid:MiniGrid-DoorKey-5x5-v0" in written


def test_collection_plays_whole_games_until_the_target_is_met(tmp_path):
    """DoorKey's games end when the goal is reached: the first wave assumes full-length games, the
    next ones make up what the short ones left out, from seeds no wave shares."""
    cfg = _tiny()
    it = Iteration(tmp_path, 0)
    summary = stage_collect(cfg, it, "random", 600, 250)
    assert summary["agent_steps"] >= 600 and summary["target_steps"] == 600
    with h5py.File(it.games, "r") as f:
        lengths = np.asarray(f["episodes"]["length"])
    assert lengths.sum() == summary["agent_steps"] and len(lengths) == summary["games"]
    assert summary["games"] >= 3  # 600 steps of 250-step games: three at least
    assert stage_collect(cfg, it, "random", 600, 250) == summary  # finished: read back, not played again
    # 1,000 steps from games of at most 250: a random walk wins some early, so more waves follow
    summary = stage_collect(cfg, Iteration(tmp_path, 1), "random", 1000, 250)
    assert summary["agent_steps"] >= 1000


def test_every_game_a_wave_plays_is_recorded_and_a_later_wave_is_at_most_one_game_a_world():
    assert wave_games(2000, 100, 10, first=True) == (20, 10)  # the treasurehunt game: one wave, as before
    assert wave_games(50, 100, 10, first=True) == (1, 1)
    assert wave_games(1500, 100, 10, first=True) == (20, 10)  # 15 games would leave 5 played unrecorded
    assert wave_games(4000, 20, 10, first=False) == (10, 10)  # a short mean length asks for no more
    assert wave_games(30, 20, 10, first=False) == (2, 2)


def test_treasurehunt_arguments_reach_both_collection_and_agent():
    cfg = load_learn_config(None, ["env.co_policy=greedy"])
    assert cfg.treasurehunt and cfg.real_env() == ("Treasurehunt-v0", {"co_policy": "greedy"})
    agent = cfg.agent_config(0)
    assert agent.env["co_policy"] == "greedy" and agent.env["vision_radius"] == 4
    assert load_learn_config().agent_config(0).env == {"vision_radius": 4, "co_policy": "random"}
    assert load_learn_config().game_turns() == 100 and _tiny().game_turns() == 250


def test_a_minigrid_tasks_own_arguments_reach_both_collection_and_agent():
    """The learner is recorded in the one-hot twin and judged in the task under the one-hot wrapper:
    a task argument the twin passes on unnamed (``max_steps``) reaches both, and the game's length
    the budget counts in follows it."""
    cfg = _tiny("env.max_steps=60")
    assert cfg.real_env() == ("OneHotMiniGrid-v0", {"task": "MiniGrid-DoorKey-5x5-v0", "max_steps": 60})
    agent = cfg.agent_config(0)
    assert (agent.env_id, agent.env) == ("minigrid:MiniGrid-DoorKey-5x5-v0", {"max_steps": 60})
    assert cfg.game_turns() == 60
    with pytest.raises(ConfigError, match="max_stepz"):
        _tiny("env.max_stepz=60")


def test_bad_envs_are_refused_in_one_line_before_anything_runs():
    with pytest.raises(ConfigError, match="is not a registered Gymnasium env") as refused:
        load_learn_config(None, ["env_id=MiniGrid-DoorKey-55-v0"])
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="env.sizee"):
        _tiny("env.sizee=6")


def test_a_run_whose_iteration_collected_toward_a_remainder_is_not_extended(tmp_path):
    """Games that end early make an iteration overshoot its target, so the next one's target may be
    a remainder even where the budget is a multiple of collect_steps: such a run is not extended."""
    cfg = _tiny("real_steps=2000")
    (tmp_path / "provenance.json").write_text("{}")
    for k, (steps, target) in enumerate(((1100, 1000), (2000, 900))):
        (tmp_path / f"iter_00{k}").mkdir()
        (tmp_path / f"iter_00{k}/iteration.json").write_text(
            json.dumps({"real_steps": steps, "collect_target": target}))
    with pytest.raises(InputError, match="start a new run with --steps 3000"):
        extend_budget(tmp_path, cfg, 3000, "python -m rpg_worldmodel.learn")
    whole = {"real_steps": 2100, "collect_target": 1000}
    (tmp_path / "iter_001/iteration.json").write_text(json.dumps(whole))
    extend_budget(tmp_path, cfg, 3000, "python -m rpg_worldmodel.learn")
    assert cfg.real_steps == 3000


def test_an_evaluation_counts_the_games_won():
    assert summarize(np.array([0.0, 0.9, 0.0, 0.5]))["positive"] == 0.5


def _benchmark():
    from benchmark_modules import load_benchmark

    return load_benchmark("sample_efficiency_minigrid", "se_minigrid")


def test_the_benchmark_finds_where_each_seed_first_solves_the_task():
    module = _benchmark()
    curve = [{"steps": s, "success": x, "return": x} for s, x in ((5000, 0.1), (10000, 0.95), (15000, 0.8))]
    assert module.solved_at(curve, 0.9) == 10000 and module.solved_at(curve, 0.99) is None
    runs = [{"method": "learn", "seed": 0, "points": curve, "cpu_minutes": 10.0, "budget": 25000},
            {"method": "learn", "seed": 1, "points": curve[:1] + [{**curve[1], "steps": 20000}],
             "cpu_minutes": 12.0, "budget": 25000},
            {"method": "ppo", "seed": 0, "points": curve[:1], "cpu_minutes": 1.0, "budget": 100000}]
    summary = module.summarize(runs, 0.9)
    assert summary["learn"]["solved_at"] == [10000, 20000] and summary["learn"]["censored"] == 0
    assert summary["learn"]["held"] == [0.5, 1.0] and summary["ppo"]["held"] == [None]
    assert summary["learn"]["steps_to_target"]["mean"] == 15000
    assert summary["ppo"]["solved_at"] == [None] and summary["ppo"]["censored"] == 1
    assert summary["ppo_over_learn"] == {"ratio": round(100000 / 15000, 3), "at_least": True}
    runs[1]["points"] = curve[:1]  # a loop seed that never solves it: no ratio
    assert "ppo_over_learn" not in module.summarize(runs, 0.9)


def test_windows_that_hold_an_end_are_drawn_more_often_and_the_order_stays_a_function_of_the_step(
        tmp_path):
    from rpg_env.record import record
    from rpg_worldmodel.data.stores import EpisodeStore
    from rpg_worldmodel.data.windows import EpochBatchSampler, TrajectoryWindows

    games = tmp_path / "empty.h5"  # a random walk reaches the goal of the empty room in some games
    record("random", games, 12, seed=0, num_envs=4, env_id="OneHotMiniGrid-v0",
           env_kwargs={"task": "MiniGrid-Empty-5x5-v0"}, progress=False)
    with h5py.File(games, "r") as f:
        count = len(f["episodes"])
    windows = TrajectoryWindows.of(EpisodeStore.load(games, np.arange(count)), num_frames=4)
    rows, starts, store = windows.plan.rows, windows.plan.starts, windows.store
    ends = store.ended[rows] & (starts + 4 >= store.lengths[rows] - 1)  # the window's 5 steps reach it
    assert ends.any() and not ends.all()
    assert (windows.end_repeats(0) == 1).all()
    repeats = windows.end_repeats(5)
    assert (repeats == np.where(ends, 6, 1)).all()
    epoch = -(-int(repeats.sum()) // 8)
    drawn = list(EpochBatchSampler(len(windows), 8, 3, 0, epoch + 3, repeats=repeats))
    seen = np.bincount(np.concatenate(drawn)[:repeats.sum()], minlength=len(windows))
    assert (seen == repeats).all()  # one epoch: each window as often as it is repeated
    assert list(EpochBatchSampler(len(windows), 8, 3, epoch, 3, repeats=repeats)) == drawn[epoch:]  # resumed
    with pytest.raises(ConfigError, match="train.end_repeats must be >= 0"):
        load_learn_config(None, [*TINY[:-2], "world_model=[train.end_repeats=-1]"])


def test_the_benchmark_reads_loop_runs_and_merges_earlier_ppo_runs(tmp_path):
    module = _benchmark()
    run = tmp_path / "learn-s4"
    run.mkdir()
    config = {"seed": 4, "env_id": "MiniGrid-DoorKey-5x5-v0", "real_steps": 10000, "eval_seed": 900_000}
    points = [{"real_steps": s, "success": x, "return": x, "seconds": {"cpu": 60.0}}
              for s, x in ((5000, 0.2), (10000, 0.95))]
    (run / "curve.json").write_text(json.dumps({"config": config, "points": points}))
    ppo = [{"method": "ppo", "seed": 0, "env_id": "MiniGrid-DoorKey-5x5-v0", "cpu_minutes": 2.0,
            "budget": 100000, "points": [{"steps": 40000, "success": 0.93, "return": 0.8}]}]
    (tmp_path / "ppo.json").write_text(json.dumps({"runs": ppo}))
    out = tmp_path / "se.json"
    module.main(["--methods", "--learn-from", str(run), "--merge", str(tmp_path / "ppo.json"),
                 "--out", str(out)])
    summary = json.loads(out.read_text())["summary"]
    assert summary["learn"]["solved_at"] == [10000] and summary["learn"]["seeds"] == [4]
    assert summary["ppo_over_learn"] == {"ratio": 4.0, "at_least": False}
    assert out.with_suffix(".png").stat().st_size > 0
    config["eval_seed"] = 5  # judged on other games: refused
    (run / "curve.json").write_text(json.dumps({"config": config, "points": points}))
    with pytest.raises(InputError, match="not 900000"):
        module.main(["--methods", "--learn-from", str(run), "--out", str(out)])


def test_whether_the_files_pay_only_as_games_end_is_read_off_them(tmp_path, tiny_world_model):
    from dataclasses import replace

    from rpg_env.record import record
    from rpg_env.trajectories.format import FLAG_TERMINATED
    from rpg_worldmodel.checkpoint import config_differences
    from rpg_worldmodel.config import ModelConfig
    from rpg_worldmodel.data.shards import DataFiles
    from rpg_worldmodel.data.stores import pays_only_at_ends

    goal = tmp_path / "empty.h5"  # a random walk reaches the goal in some games, which pays and ends them
    record("random", goal, 16, seed=0, num_envs=4, env_id="OneHotMiniGrid-v0",
           env_kwargs={"task": "MiniGrid-Empty-5x5-v0", "max_steps": 40}, progress=False)
    files = DataFiles.open(str(goal))
    assert pays_only_at_ends(files.store(np.arange(len(files)), stream=True))
    with h5py.File(goal, "r") as f:
        lost = np.flatnonzero(f["episodes"]["flags"] & FLAG_TERMINATED == 0)  # cut by the time limit
    assert lost.size and not pays_only_at_ends(files.store(lost, stream=False))
    treasurehunt = DataFiles.open(str(tiny_world_model[1]))  # pays all along, never ends
    assert not pays_only_at_ends(treasurehunt.store(np.arange(len(treasurehunt)), stream=True))
    # read off the files like kind_limits: a model fine-tuned on more games reads its own
    model = ModelConfig()
    assert config_differences(model, replace(model, pays_only_at_ends=True), weights_only=True) == []


@pytest.mark.parametrize("name", ["learn_doorkey.yaml", "learn_keycorridor.yaml"])
def test_the_shipped_minigrid_learn_configs_resolve_for_their_task(name, tmp_path):
    cfg = load_learn_config(REPO / "rpg_worldmodel" / "configs" / name)
    agent = cfg.agent_config(0)
    # judged in the task itself, under the one-hot views the world model reads
    assert agent.env_id == f"minigrid:{cfg.env_id}"
    assert agent.wrappers == ["rpg_env.envs.minigrid_views:OneHotViews"]
    assert agent.hyperparams["gamma"] == 0.99 and agent.total_timesteps == cfg.agent_steps == 100_000
    world_model = cfg.world_model_config(0, [tmp_path / "games.h5"], tmp_path / "wm")
    assert world_model.model.train_window == 8 and world_model.train.end_repeats == 20


def test_the_keycorridor_loop_is_doorkeys_but_for_the_task_and_what_was_measured_on_each():
    configs = REPO / "rpg_worldmodel" / "configs"
    doorkey, corridor = (dataclasses.asdict(load_learn_config(configs / n))
                         for n in ("learn_doorkey.yaml", "learn_keycorridor.yaml"))
    assert {k for k in doorkey if doorkey[k] != corridor[k]} == {"env_id", "horizon", "world_model_steps"}
    assert (doorkey["horizon"], corridor["horizon"]) == (20, 0)  # the corridor's as measured
    # DoorKey's first world model trains 1,000 steps (measured there); the corridor's figures are at 300
    assert (doorkey["world_model_steps"], corridor["world_model_steps"]) == (1000, 300)
