"""`python -m rpg_env.export_minari`: a trajectory file becomes a Minari dataset that loads."""

from __future__ import annotations

import numpy as np
import pytest

from rpg_base.cli import command_status

minari = pytest.importorskip("minari")

from rpg_env.export_minari import main  # noqa: E402
from rpg_env.record import main as record_main  # noqa: E402
from rpg_env.trajectories.reader import TrajectoryFile  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture()
def source(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    path = tmp_path / "src.h5"
    assert record_main(["--policy", "greedy", "--episodes", "4", "--out", str(path), "--num-envs", "2",
                        "--height", "8", "--width", "8", "--vision-radius", "2", "--max-turns", "6",
                        "--spawn-prob", "0.1", "--no-progress"]) == 0
    return path


def test_export_loads_and_matches_source(source, capsys):
    assert main([str(source), "--dataset-id", "treasurehunt/expert-v0", "--no-progress"]) == 0
    assert "exported 4 episodes" in capsys.readouterr().out
    dataset = minari.load_dataset("treasurehunt/expert-v0")
    assert dataset.total_episodes == 4 and dataset.total_steps == 24
    with TrajectoryFile(source) as tf:
        learner = np.flatnonzero(tf.episodes["agent_id"] == 0)
        for k, ep in enumerate(dataset.iterate_episodes()):
            src = tf.episode(int(learner[k]))
            assert ep.observations.shape == (7, 6, 5, 5) and ep.observations.dtype == np.uint8
            np.testing.assert_array_equal(ep.observations, src["obs"])
            np.testing.assert_array_equal(ep.actions, src["actions"])
            np.testing.assert_array_equal(ep.rewards, src["rewards"])
            np.testing.assert_array_equal(ep.terminations, src["terminated"])
            np.testing.assert_array_equal(ep.truncations, src["truncated"])
            assert (ep.infos["source_index"] == learner[k]).all()
            assert (ep.infos["game_id"] == tf.episodes["game_id"][learner[k]]).all()
        env = dataset.recover_environment()
        assert env.unwrapped.params.max_turns == 6 and env.unwrapped.params.vision_radius == 2
        env.close()


def test_export_all_agents_policy_filter_and_errors(source, capsys):
    assert main([str(source), "--dataset-id", "treasurehunt/all-v0", "--agents", "all",
                 "--no-progress"]) == 0
    assert minari.load_dataset("treasurehunt/all-v0").total_episodes == 8
    assert command_status(main, [str(source), "--dataset-id", "treasurehunt/all-v0", "--no-progress"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main([str(source), "--dataset-id", "treasurehunt/all-v0", "--overwrite", "--policy-id",
                 "random", "--agents", "all", "--no-progress"]) == 0
    assert minari.load_dataset("treasurehunt/all-v0").total_episodes == 4
    assert command_status(main, [str(source), "--dataset-id", "treasurehunt/none-v0", "--policy-id", "nobody",
                 "--no-progress"]) == 2
    assert "no streams" in capsys.readouterr().err
    assert command_status(main, [str(source), "--dataset-id", "treasurehunt/x-v0", "--agents", "one",
                 "--no-progress"]) == 2
    junk = source.with_name("junk.h5")
    junk.write_bytes(b"junk" * 100)
    assert command_status(main, [str(junk), "--dataset-id", "treasurehunt/junk-v0", "--no-progress"]) == 2
    assert "not an HDF5 file" in capsys.readouterr().err


def test_an_old_dataset_spec_still_makes_the_env():
    # Minari datasets exported before the envs moved to rpg_env.envs store this entry point and
    # rebuild the env from it: the one alias path rpg_env keeps for them.
    import gymnasium as gym
    from gymnasium.envs.registration import EnvSpec

    from rpg_env.envs.treasurehunt import TreasurehuntEnv

    spec = EnvSpec("Treasurehunt-v0", entry_point="rpg_env.env:TreasurehuntEnv", kwargs={"vision_radius": 3})
    env = gym.make(spec)
    assert isinstance(env.unwrapped, TreasurehuntEnv)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (6, 7, 7)
