"""Using the imagination: play and watch inside the world model (headless), the predictor as a
policy, training an agent in imagination, and shipping the results."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pygame
import pytest

import rpg_env
from rpg_base.cli import command_status
from rpg_base.errors import InputError
from rpg_env.policies.registry import make_policy
from rpg_env.render import PygameWindow
from rpg_worldmodel import play as P
from rpg_worldmodel.checkpoint import load_checkpoint
from rpg_worldmodel.models.refiner import SAMPLE_DOUBT
from rpg_worldmodel.policy import WorldModelPolicy


def press(*keys: int) -> None:
    for key in keys:
        pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=key, mod=0, unicode=""))


@pytest.fixture
def window():
    window = PygameWindow(fps=0, help_text=P.KEYS_HELP, close_on_quit=False)
    pygame.event.clear()
    yield window
    window.close()


def test_keys_drive_the_dream_beside_the_real_game(tiny_world_model, window):
    run, _ = tiny_world_model
    worlds = P.build_worlds(str(run), side_by_side=True)
    real, dream = worlds.real, worlds.dream
    press(pygame.K_RIGHT, pygame.K_d, pygame.K_SPACE, pygame.K_UP)
    summary = P.play_by_keys(worlds, seed=3, max_frames=2, window=window)
    assert summary.steps == 3
    # Both worlds opened on the same real turns and took the same moves since.
    turns = dream.env.unwrapped.worlds.num_frames - 1
    assert real.unwrapped.world.turn[0] == dream.env.unwrapped.worlds.turns[0] == turns + 3
    assert not dream.env.unwrapped.worlds.sample  # Space toggled sampling off
    frames = [real.render(), dream.render()]
    assert frames[0].shape == frames[1].shape
    wrong = P.differences(real, dream)
    marked = np.all(frames[1] == P.MISMATCH_RGB, axis=-1)
    assert marked.any() == wrong.any()  # disagreeing cells are outlined, and only those
    press(pygame.K_r)  # R: a fresh real opening for both
    P.play_by_keys(worlds, seed=None, max_frames=1, window=window)
    assert np.array_equal(real.view, dream.view)  # the dream starts from the real state


def test_an_agent_plays_in_both_worlds_and_the_screens_are_recorded(tiny_world_model, tmp_path, capsys):
    run, _ = tiny_world_model
    out = tmp_path / "dream.gif"
    result = P.main(["--checkpoint", str(run), "--side-by-side", "--agent", "greedy", "--out", str(out),
                     "--steps", "12"])
    assert result["frames"] == 12 and out.stat().st_size > 10_000
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(out)
    assert "Space sampled/arg-max" in P.build_parser().format_help()


@pytest.mark.parametrize(("argv", "match"), [
    (["--steps", "0", "--agent", "greedy", "--out", "x.gif"], "--steps must be >= 1"),
    (["--out", "x.gif"], "add --agent"),
    (["--agent", "greedy", "--out", "x.png"], "must end in"),
    (["--agent", "alphago"], "--agent must be one of"),
    (["--checkpoint", "nowhere"], "does not exist"),
])
def test_play_refuses_bad_arguments(argv, match, capsys, tiny_world_model):
    assert command_status(P.main, argv) == 2
    assert match in capsys.readouterr().err


def test_the_action_head_is_a_policy_of_the_real_game(tiny_world_model):
    run, data = tiny_world_model
    policy = WorldModelPolicy.load(run)
    env = gym.make_vec(rpg_env.ENV_ID, num_envs=4)
    obs, _ = env.reset(seed=0)
    policy.seed(np.random.default_rng(0))
    first = policy.act(obs, np.ones(4, bool))
    assert first.shape == (4,) and first.dtype == np.int64
    second = policy.act(env.step(first)[0], np.zeros(4, bool))
    # With history, the head's arg-max: the same as running the model on that history.
    loaded = load_checkpoint(run)
    import torch

    views = torch.as_tensor(obs[:, None]).float()
    expected = loaded.model(views, torch.as_tensor(first)[:, None]).action[:, -1].argmax(-1).numpy()
    assert np.array_equal(second, expected)
    env.close()
    with pytest.raises(InputError, match="reads views"):
        policy.act(np.zeros((2, 6, 7, 7), np.uint8))
    # Anything that takes a policy spec takes it by entry point.
    assert isinstance(make_policy("rpg_worldmodel.policy:pretrained"), WorldModelPolicy)
    with pytest.raises(ValueError, match="cannot be loaded"):
        make_policy("rpg_worldmodel.policy:nothing_here")


def test_the_shipped_world_model_beats_the_motion_oracle_on_fresh_games(tmp_path):
    from rpg_env.experts import pretrained_path
    from rpg_env.record import record
    from rpg_worldmodel.evaluation.baselines import BASELINES_FILE, load_baselines
    from rpg_worldmodel.evaluation.episodes import training_files
    from rpg_worldmodel.evaluation.run import EvalOptions, Evaluation
    from rpg_worldmodel.shipped import pretrained_path as shipped

    folder = shipped()
    assert sum(p.stat().st_size for p in folder.parent.rglob("*") if p.is_file()) <= 8 * 2**20
    for name in ("eval.json", "provenance.json"):
        assert (folder.parent / name).is_file()
    loaded = load_checkpoint("pretrained")
    assert loaded.path == folder and "shipped world model" in loaded.choice
    assert loaded.config.model.reward_head
    # it carries the baselines fitted on its training split, so no training file is needed here
    carried = load_baselines(folder / BASELINES_FILE, [f.fingerprint for f in training_files(loaded.record)])
    assert carried.reward_rule is not None and carried.train_episodes_used == 400
    fresh = tmp_path / "fresh.h5"
    record(str(pretrained_path("dqn")), fresh, 40, seed=123, num_envs=40, mode="w", progress=False,
           policy_id="dqn", record_co_players=False)
    ev = Evaluation("pretrained", [fresh], EvalOptions(num_boot=200))
    result = ev.evaluate_file(fresh, num_examples=0)
    diff = result["model_minus"]
    assert diff["motion_oracle"]["view_ce"]["hi"] < 0  # better than the motion oracle, interval and all
    assert diff["reward_rule"]["reward_acc"]["value"] >= -0.01  # matches the reward rule


def test_imitate_reports_the_head_beside_the_expert_it_learned_from(tmp_path, capsys):
    from rpg_worldmodel import imitate

    out = tmp_path / "imitate.json"
    assert imitate.main(["--episodes", "4", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert {"model", "greedy", "random", "expert"} <= set(results)
    assert results["expert"]["policy"] == "dqn" and 0.0 <= results["expert"]["action_agreement"] <= 1.0
    assert results["expert"]["action_agreement"] > 0.5  # it learned that expert, not another
    assert "agreement with the dqn expert" in capsys.readouterr().out
    with pytest.raises(InputError, match="--episodes must be >= 2"):
        imitate.main(["--episodes", "1"])


@pytest.mark.slow
def test_an_agent_trains_in_imagination_and_is_judged_in_the_real_game(tiny_world_model, tmp_path):
    from rpg_env.experts.config import load_expert_config
    from rpg_worldmodel import dream as D

    run, _ = tiny_world_model
    cfg = load_expert_config("ppo", D.dream_config_path("ppo"), [
        "timesteps=256", "n_envs=4", "hyperparams.n_steps=32", "hyperparams.batch_size=64",
        "eval.freq=128", "eval.episodes=2", "eval.final_episodes=3", "progress_bar=false",
        "checkpoint_freq=1000"])
    out = D.dream(cfg, D.World(str(run)), tmp_path / "dream")
    for name in ("model.zip", "config.yaml", "provenance.json", "eval.json", "dream.json"):
        assert (out / name).is_file(), name
    evaluation = json.loads((out / "eval.json").read_text())
    assert {"model", "greedy", "random", "dqn", "imagined", "model_greedy_co_player",
            "greedy_greedy_co_player", "random_greedy_co_player"} <= set(evaluation)
    record = json.loads((out / "dream.json").read_text())
    assert record["real_return"] == evaluation["model"]["mean"]
    beside_greedy = (evaluation["model_greedy_co_player"]["mean"]
                     / evaluation["greedy_greedy_co_player"]["mean"])
    assert record["real_vs_greedy_with_greedy_co_player"] == round(beside_greedy, 4)
    burn_in = load_checkpoint(run).config.model.num_frames - 1
    assert record["imagined_turns"] == record["real_turns"] - burn_in
    model = load_checkpoint(run).config.model
    assert record["draw"] == {"sample_rounds": model.sample_rounds, "sample_doubt": SAMPLE_DOUBT,
                              "sample_floor": model.sample_floor}
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["trained_in"] == "TreasurehuntImagined-v0"
    # The agent is an expert like any other: the real game takes it as a co-player.
    env = gym.make(rpg_env.ENV_ID, co_policy=str(out / "model.zip"))
    env.reset(seed=0)
    env.step(0)
    with pytest.raises(InputError, match="does not exist"):
        D.dream(cfg, D.World(str(tmp_path / "missing")), tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_the_shipped_dream_agent_is_an_expert_of_the_real_game():
    """The agent that trained only in imagination ships with its records, loads as any expert does,
    and plays the real game far better than random (its record says 99% of greedy over 100)."""
    from rpg_env.experts.evaluate import run_episodes
    from rpg_worldmodel.shipped import pretrained_path

    agent = pretrained_path("dream")
    record = json.loads((agent.parent / "dream.json").read_text())
    provenance = json.loads((agent.parent / "provenance.json").read_text())
    assert provenance["trained_in"] == "TreasurehuntImagined-v0" and record["real_vs_greedy"] >= 0.75
    rules = {"co_policy": "random"}
    returns = run_episodes(make_policy(str(agent)), rules, 8, seed=10_000)
    random_returns = run_episodes(make_policy("random"), rules, 8, seed=10_000)
    assert np.mean(returns) > 150 > np.mean(random_returns)


def test_the_shipped_scratch_pair_learned_the_game_from_its_own_games():
    """The agent learned from nothing (`rpg_worldmodel.learn`, 10,000 real steps, its world models
    told nothing of the game) ships with its curve, plays the real game on games its run never saw
    far above random, and its world model imagines the game for it (trained only on the learner's
    own stream)."""
    from rpg_env.experts.evaluate import run_episodes
    from rpg_worldmodel.checkpoint import load_checkpoint
    from rpg_worldmodel.shipped import pretrained_path

    agent = pretrained_path("scratch")
    curve = json.loads((agent.parent / "curve.json").read_text())
    assert curve["final"]["real_steps"] == 10_000 and not {"rules", "move_rules"} & set(curve["config"])
    provenance = json.loads((agent.parent / "provenance.json").read_text())
    assert provenance["trained_in"] == "TreasurehuntImagined-v0"
    returns = run_episodes(make_policy(str(agent)), {"co_policy": "random"}, 8, seed=5_000_000)
    random_returns = run_episodes(make_policy("random"), {"co_policy": "random"}, 8, seed=5_000_000)
    assert np.mean(returns) > 200 > 100 > np.mean(random_returns)
    loaded = load_checkpoint(pretrained_path("scratch_worldmodel"))
    assert loaded.record.shipped["weights"] == "float16" and loaded.config.data.agent_id == 0
    assert {f.policy_ids for f in loaded.record.data.files} == {(f"learner-{k}",) for k in range(5)}
    venv = gym.make_vec("TreasurehuntImagined-v0", num_envs=2,
                        checkpoint=pretrained_path("scratch_worldmodel"))
    obs, _ = venv.reset(seed=0)
    for _ in range(5):
        obs, *_ = venv.step(np.zeros(2, dtype=np.int64))
    assert obs.shape == (2, 6, 9, 9) and (obs.sum(1) == 1).all()
