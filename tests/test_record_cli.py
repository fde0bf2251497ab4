"""`python -m rpg_env.record`: recording with the vector env, seeds, determinism, bad input."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import rpg_env
from rpg_base.cli import command_status
from rpg_env.policies.registry import make_policy
from rpg_env.record import main, wave_seed
from rpg_env.trajectories.reader import TrajectoryFile

SMALL = ["--height", "8", "--width", "8", "--vision-radius", "2", "--max-turns", "5",
         "--spawn-prob", "0.1", "--no-progress"]


def run(out, *extra: str, policy: str = "greedy", episodes: int = 5, seed: int = 0) -> int:
    return main(["--policy", policy, "--episodes", str(episodes), "--out", str(out), "--seed", str(seed),
                 "--num-envs", "2", *SMALL, *extra])


def test_record_writes_games_with_per_wave_seeds(tmp_path, capsys):
    out = tmp_path / "g.h5"
    assert run(out, "--co-policy", "random") == 0
    assert "wrote 5 games" in capsys.readouterr().out
    with TrajectoryFile(out) as tf:
        ep = tf.episodes
        assert len(tf) == 10 and len(np.unique(ep["game_id"])) == 5
        assert ep["policy_id"].tolist() == ["greedy", "random"] * 5
        assert (ep["length"] == 5).all() and tf.meta["env_kwargs"]["max_turns"] == 5
        learner = ep[ep["agent_id"] == 0]
        # waves of 2 worlds; the 3rd wave keeps only world 0
        assert learner["seed"].tolist() == [wave_seed(0, w) for w in (0, 0, 1, 1, 2)]
        assert learner["env_index"].tolist() == [0, 1, 0, 1, 0]
        assert (learner["reset_count"] == 0).all()
        assert tf.runs[0]["seed"] == 0 and tf.runs[0]["num_envs"] == 2
        # Any wave replays alone from its recorded seed.
        env = gym.make_vec(rpg_env.ENV_ID, num_envs=2, **tf.meta["env_kwargs"], co_policy="random")
        obs, _ = env.reset(seed=int(learner["seed"][2]))
        policy = make_policy("greedy")
        s = int(learner["seed"][2])
        policy.seed(np.random.default_rng(np.random.SeedSequence([s & 0xFFFFFFFF, s >> 32, 1])))
        actions = policy.act(obs, np.ones(2, dtype=bool))
        np.testing.assert_array_equal(obs[0], tf.episode(4)["obs"][0])
        assert actions[0] == tf.episode(4)["actions"][0]


def test_same_seed_is_bit_identical_and_other_seed_differs(tmp_path):
    digests = []
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        assert run(tmp_path / f"{name}.h5", policy="random", seed=seed) == 0
        with TrajectoryFile(tmp_path / f"{name}.h5") as tf:
            digests.append(tf.digest())
    assert digests[0] == digests[1] != digests[2]


def test_append_overwrite_and_mismatch(tmp_path, capsys):
    out = tmp_path / "a.h5"
    assert run(out, episodes=2) == 0
    assert run(out, policy="random", episodes=2, seed=1) == 0
    assert "appended 2 games" in capsys.readouterr().out
    with TrajectoryFile(out) as tf:
        assert tf.episodes["game_id"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
        assert tf.episodes["policy_id"][::2].tolist() == ["greedy", "greedy", "random", "random"]
        digest = tf.digest()
    assert command_status(main, ["--policy", "greedy", "--episodes", "1", "--out", str(out), *SMALL[:-3],
                 "--spawn-prob", "0.2", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "env_kwargs.spawn_prob" in err and str(out) in err
    with TrajectoryFile(out) as tf:
        assert tf.digest() == digest
    assert run(out, "--overwrite", episodes=1) == 0
    with TrajectoryFile(out) as tf:
        assert len(tf) == 2


@pytest.mark.parametrize("args, message", [
    (["--policy", "sometimes"], "random, greedy, or a path"),
    (["--policy", "missing.zip"], "does not exist"),
    (["--policy", "random", "--episodes", "0"], "--episodes must be >= 1"),
    (["--policy", "random", "--max-turns", "0"], "max_turns"),
])
def test_bad_input(tmp_path, capsys, args, message):
    base = {"--episodes": "2", "--out": str(tmp_path / "x.h5")}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    argv = [t for kv in base.items() for t in kv] + ["--no-progress"]
    assert command_status(main, argv) == 2
    assert message in capsys.readouterr().err


def test_module_entry_point_shows_progress(tmp_path):
    out = tmp_path / "m.h5"
    proc = subprocess.run([sys.executable, "-m", "rpg_env.record", "--policy", "random", "--episodes", "3",
                           "--out", str(out), *SMALL[:-1], "--learner-only"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "game" in proc.stderr  # the tqdm bar
    with TrajectoryFile(out) as tf:
        assert len(tf) == 3 and (tf.episodes["agent_id"] == 0).all()


def test_broken_policy_zip_is_refused_without_writing(tmp_path, capsys):
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"not a zip")
    out = tmp_path / "z.h5"
    assert command_status(main, ["--policy", str(junk), "--episodes", "1", "--out", str(out), *SMALL]) == 2
    assert "not a Stable-Baselines3 model zip" in capsys.readouterr().err
    assert not out.exists()


def test_shipped_expert_records(tmp_path):
    experts = pytest.importorskip("rpg_env.experts")
    try:
        path = experts.pretrained_path("dqn")
    except FileNotFoundError:
        pytest.skip("the DQN expert is not shipped in this checkout yet")
    out = tmp_path / "dqn.h5"
    assert main(["--policy", str(path), "--episodes", "2", "--out", str(out), "--num-envs", "2",
                 "--max-turns", "5", "--no-progress"]) == 0
    with TrajectoryFile(out) as tf:
        assert tf.episodes["policy_id"].tolist() == ["sb3-dqn", "random"] * 2
        assert (tf.episodes["length"] == 5).all()


def test_record_restores_the_callers_torch_threads(tmp_path):
    """Recording runs torch on one thread but must not leave the caller (e.g. a trainer) on it."""
    torch = pytest.importorskip("torch")
    from rpg_env.record import record

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        record("greedy", episodes=2, out=tmp_path / "t.h5", seed=0, num_envs=2, progress=False,
               env_kwargs={"height": 8, "width": 8, "vision_radius": 2, "max_turns": 5})
        assert torch.get_num_threads() == 2
        with pytest.raises(Exception, match="differ|mismatch|settings"):  # a refused append too
            record("greedy", episodes=1, out=tmp_path / "t.h5", seed=1, num_envs=1, progress=False,
                   env_kwargs={"height": 9, "width": 9, "vision_radius": 2, "max_turns": 5})
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
