"""The fidelity and imagination benchmarks' own parts: a row a floor, one episode timed early and
late, and the rollouts a benchmark run adds (the measurements themselves: test_wm_fidelity.py)."""

from __future__ import annotations

import json

import pytest
from benchmark_modules import load_benchmark as benchmark

from rpg_env.policies.registry import make_policy


def test_the_fidelity_benchmark_gives_a_row_for_each_floor(tmp_path):
    """`benchmarks/imagination_fidelity.py --floor 0 0.001`: one sampled row a floor, each saying
    which it drew with; the shipped model's own floor (0.001) gives the row its default gives, and
    no floor draws other frames."""
    from rpg_worldmodel.checkpoint import load_checkpoint
    from rpg_worldmodel.envs.whole_games import dream_and_real, reference_of

    module = benchmark("imagination_fidelity", "benchmark_imagination_fidelity_floor")
    assert module.sampler_names(["sampled", "argmax"], [32], [0.0, 0.001]) == [
        "sampled@32 floor=0", "sampled@32 floor=0.001", "argmax"]
    assert module.sampler_settings("sampled@32 floor=0.001") == (32, 0.001)
    assert module.sampler_settings("sampled") == (None, None)
    out = tmp_path / "fidelity.json"
    module.main(["--worlds", "2", "--policies", "random", "--samplers", "sampled", "--floor", "0", "0.001",
                 "--out", str(out)])
    rows = json.loads(out.read_text())["results"][0]["rows"]
    assert list(rows) == ["sampled floor=0/random", "sampled floor=0.001/random"]
    assert [row["sample_floor"] for row in rows.values()] == [0.0, 0.001]
    loaded = load_checkpoint("pretrained")
    assert loaded.config.model.sample_floor == 0.001
    default = dream_and_real(loaded, reference_of(loaded), lambda: make_policy("random"), sample=True,
                             worlds=2, seed=0)
    floored, bare = rows["sampled floor=0.001/random"], rows["sampled floor=0/random"]
    assert floored["validity_by_turn"] == default["validity_by_turn"]
    assert floored["return"]["imagined"] == default["return"]["imagined"]
    assert bare["return"]["imagined"] != floored["return"]["imagined"]


def test_the_imagination_benchmark_times_an_episodes_last_turns_against_its_first():
    """`benchmarks/imagination.py`'s ``by_turn``: one episode of the shipped model's dream from a reset
    to its truncation at the game's last turn, timed early and late."""
    import gymnasium as gym

    import rpg_worldmodel

    module = benchmark("imagination", "benchmark_imagination_by_turn")
    venv = gym.make_vec(rpg_worldmodel.IMAGINED_ENV_ID, num_envs=2, checkpoint="pretrained")
    worlds = venv.unwrapped.worlds
    rates = module.rates_by_turn(venv, seed=0, turns=5)
    # the opening's real turns are played before the dream's first frame
    assert rates["steps"] == worlds.max_turns - (worlds.num_frames - 1)
    assert rates["steps_3_7"] > 0 and rates["last_5_steps"] > 0 and rates["late_over_early"] > 0
    venv.close()


@pytest.mark.slow
def test_the_fidelity_benchmark_adds_the_rollouts_of_each_model_once(tiny_world_model, tmp_path, monkeypatch):
    """``--rollout-data``: the open-loop rollout table from the held-out games of the file the model
    learned from, every k beside the memory and motion oracles; one table a model, however often it is
    named, by default to the game's last turn."""
    from rpg_worldmodel.checkpoint import load_checkpoint

    run, data = tiny_world_model
    module = benchmark("imagination_fidelity", "benchmark_imagination_fidelity_rollouts")
    made = []
    monkeypatch.setattr(module, "rollouts", lambda ev, horizon, made_by=module.rollouts: made.append(horizon)
                        or made_by(ev, horizon))
    out = tmp_path / "fidelity.json"
    common = ["--checkpoint", str(run), str(run), "--worlds", "1", "--policies", "random",
              "--samplers", "argmax", "--rollout-data", str(data), "--out", str(out)]
    module.main([*common, "--rollout-horizon", "3"])
    saved = json.loads(out.read_text())
    game, again = saved["results"]
    assert made == [3] and game["rollout"] == again["rollout"] and game["rollout"]["horizon"] == 3
    assert {"memory_oracle", "motion_oracle", "copy"} <= set(game["rollout"]["model_minus"])
    assert len(game["rollout"]["predictors"]["memory_oracle"]["view_ce"]) == 3
    assert saved["rollout_horizon"] == {str(run): 3} and saved["rollout_data"] == str(data)
    module.main(common)  # to the last turn: the game's 100 turns less the model's real views
    assert made[-1] == 100 - load_checkpoint(run).config.model.num_frames
