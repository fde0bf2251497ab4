"""End-to-end expert training on tiny configs: run folder contents, determinism, no overwrite."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from rpg_base.cli import command_status
from rpg_env.experts.__main__ import main
from rpg_env.experts.config import from_dict
from rpg_env.policies.sb3 import SB3Policy, load_expert

TINY = ["n_envs=2", "progress_bar=false", "net.channels=[4]", "net.features_dim=16",
        "eval.freq=600", "eval.episodes=2", "eval.final_episodes=4", "checkpoint_freq=600"]


def _train(tmp_path, name, algo, *extra):
    out = tmp_path / name
    argv = ["train", "--algo", algo, "--out", str(out), *TINY, *extra]
    assert main(argv) == 0
    return out


def test_dqn_training_writes_complete_run_folder(tmp_path):
    import torch

    threads = torch.get_num_threads()
    run = _train(tmp_path, "dqn", "dqn", "timesteps=1500", "hyperparams.learning_starts=200",
                 "hyperparams.buffer_size=2000", "seed=3", "vec_env=subproc", "torch_threads=1")
    assert torch.get_num_threads() == threads  # training pins its threads, then gives them back
    assert (run / "model.zip").is_file()
    cfg = from_dict(yaml.safe_load((run / "config.yaml").read_text()))
    assert (cfg.algo, cfg.seed, cfg.total_timesteps, cfg.net.channels) == ("dqn", 3, 1500, [4])

    prov = json.loads((run / "provenance.json").read_text())
    assert prov["seed"] == 3 and prov["seeds"]["train_envs"] == [3, 4]
    assert {"stable-baselines3", "torch", "gymnasium", "python"} <= set(prov["versions"])
    assert prov["command"].startswith("python -m rpg_env.experts train --algo dqn")
    assert prov["train_seconds"] > 0 and prov["total_timesteps"] >= 1500

    result = json.loads((run / "eval.json").read_text())
    assert set(result) == {"model", "greedy", "random"}
    assert all(row["episodes"] == 4 for row in result.values())

    assert list((run / "tb").rglob("events.out.tfevents.*")), "tensorboard logs missing"
    assert (run / "best" / "evaluations.npz").is_file() and (run / "best" / "best_model.zip").is_file()
    assert sorted(p.name for p in (run / "checkpoints").iterdir())[:1] == ["dqn_1200_steps.zip"]

    model = load_expert(run / "model.zip")
    assert model.observation_space.shape == (6 * cfg.frame_stack, 9, 9)
    actions = SB3Policy(model).act(np.zeros((5, 6, 9, 9), np.uint8))
    assert actions.shape == (5,) and actions.dtype == np.int64

    # A run folder is never overwritten.
    assert command_status(main, ["train", "--algo", "dqn", "--out", str(run), *TINY, "timesteps=100"]) == 2
    assert load_expert(run / "model.zip").num_timesteps == model.num_timesteps


def test_ppo_training_is_deterministic(tmp_path):
    extra = ("timesteps=512", "hyperparams.n_steps=128", "hyperparams.batch_size=64",
             "hyperparams.n_epochs=1", "env.vision_radius=3", "frame_stack=3")
    runs = [_train(tmp_path, f"ppo{i}", "ppo", *extra) for i in range(2)]
    first, second = (load_expert(r / "model.zip") for r in runs)
    assert first.observation_space.shape == (18, 7, 7)
    for (name, a), (_, b) in zip(first.policy.state_dict().items(), second.policy.state_dict().items(),
                                 strict=True):
        assert np.array_equal(a.numpy(), b.numpy()), f"{name} differs between same-seed runs"
    assert json.loads((runs[0] / "eval.json").read_text()) == json.loads((runs[1] / "eval.json").read_text())
    # The vision radius travels with the model: it refuses the default 9x9 view.
    with pytest.raises(ValueError, match=r"\(6, 7, 7\) \(vision_radius 3\).*\(6, 9, 9\)"):
        SB3Policy(first).act(np.zeros((1, 6, 9, 9), np.uint8))
