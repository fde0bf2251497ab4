"""Experts: config validation, SB3Policy stacking/loading, evaluation, shipped models, watch."""

from __future__ import annotations

import json
import zipfile

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecFrameStack

import rpg_env
from rpg_base.cli import command_status
from rpg_base.typed_config.config import apply_overrides, read_yaml
from rpg_base.typed_config.values import ConfigError
from rpg_env.experts import PRETRAINED, pretrained_path
from rpg_env.experts.__main__ import main
from rpg_env.experts.config import ExpertConfig, from_dict, load_expert_config
from rpg_env.experts.evaluate import compare, run_episodes, summarize, t_quantile_975
from rpg_env.experts.train import stackable_views
from rpg_env.policies.registry import make_policy
from rpg_env.policies.sb3 import ExpertLoadError, SB3Policy, load_expert
from rpg_env.policies.scripted import RandomPolicy

MB = 1 << 20


# --------------------------------------------------------------------------- config
def test_shipped_configs_resolve_and_overrides_apply():
    assert load_expert_config("dqn", overrides=["timesteps=2e5"]).total_timesteps == 200_000
    cfg = load_expert_config("dqn", overrides=["seed=7", "timesteps=1234", "vision_radius=3",
                                               "learning_rate=3e-4", "hyperparams.gamma=0.95",
                                               "net.channels=[8, 8]", "env.co_policy=greedy"])
    assert (cfg.algo, cfg.seed, cfg.total_timesteps) == ("dqn", 7, 1234)
    assert cfg.env["vision_radius"] == 3 and cfg.env["co_policy"] == "greedy"
    assert cfg.hyperparams["learning_rate"] == pytest.approx(3e-4)
    assert cfg.hyperparams["gamma"] == pytest.approx(0.95)
    assert cfg.net.channels == [8, 8]
    # The resolved YAML reads back to the same config.
    import yaml

    assert from_dict(yaml.safe_load(cfg.to_yaml())) == cfg
    assert load_expert_config("ppo").algo == "ppo"


@pytest.mark.parametrize("overrides, message", [
    (["sed=1"], "unknown key 'sed'; did you mean 'seed'"),
    (["env.vision_radus=3"], "unknown key 'env.vision_radus'; did you mean 'env.vision_radius'"),
    (["hyperparams.learning_rat=0.1"], "did you mean 'hyperparams.learning_rate'"),
    (["seed=abc"], "seed must be an integer, got str 'abc'"),
    (["timesteps=0"], "total_timesteps must be >= 1"),
    (["timesteps=1.5"], "total_timesteps must be an integer, got float 1.5"),
    (["hyperparams.gamma=high"], "hyperparams.gamma must be a number"),
    (["gamma=1.5"], "hyperparams.gamma must be in [0.0, 1.0], got 1.5"),
    (["buffer_size=-5"], "hyperparams.buffer_size must be >= 1, got -5"),
    (["env.render_mode=human"], "env.render_mode cannot be set"),
    (["hyperparams.policy_kwargs={}"], "hyperparams.policy_kwargs cannot be set"),
    (["net.extractor=resnet"], "net.extractor must be one of"),
    (["net.channels=32"], "net.channels must be a list of integers"),
    (["vec_env=threads"], "vec_env must be one of"),
    (["progress_bar=maybe"], "progress_bar must be true or false"),
    (["no_equals_sign"], "must look like key=value"),
    (["env.co_policy=3"], "env.co_policy must be"),
])
def test_malformed_overrides_raise_clear_errors(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_expert_config("dqn", overrides=overrides)


def test_malformed_config_files(tmp_path):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("algo: dqn\nenv: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        read_yaml(bad_yaml)
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        read_yaml(listing)
    with pytest.raises(ConfigError, match="does not exist"):
        load_expert_config(path=tmp_path / "missing.yaml")
    ppo = tmp_path / "ppo.yaml"
    ppo.write_text("algo: ppo\n")
    with pytest.raises(ConfigError, match="conflicts with algo: ppo"):
        load_expert_config("dqn", ppo)
    # A DQN-only hyperparameter in a PPO config is named as unknown for PPO.
    with pytest.raises(ConfigError, match=r"unknown key 'hyperparams.buffer_size' \(valid PPO arguments"):
        from_dict({"algo": "ppo", "hyperparams": {"buffer_size": 10}})
    with pytest.raises(ConfigError, match="env must be a mapping"):
        from_dict({"env": [1, 2]})
    with pytest.raises(ConfigError, match="algo must be one of"):
        from_dict({"algo": "a2c"})
    # Overrides never mutate the input mapping.
    data = {"seed": 1}
    assert apply_overrides(ExpertConfig, data, ["seed=2"]) == {"seed": 2} and data == {"seed": 1}


def test_cli_reports_config_errors_without_traceback(capsys, tmp_path):
    assert command_status(main, ["train", "--algo", "dqn", "--out", str(tmp_path / "run"), "gama=0.9"]) == 2
    err = capsys.readouterr().err
    assert "error: override 'gama=0.9': unknown key 'gama'" in err and "'hyperparams.gamma'" in err
    assert not (tmp_path / "run").exists()
    # A value only SB3 can judge fails while building the model, before the folder exists.
    argv = ["train", "--algo", "dqn", "--out", str(tmp_path / "run"), "train_freq=[4, fortnight]"]
    assert command_status(main, argv) == 2
    assert "fortnight" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- statistics
@pytest.mark.parametrize("dof, exact", [(1, 12.7062), (5, 2.5706), (10, 2.2281), (19, 2.0930),
                                        (30, 2.0423), (99, 1.9842), (10_000, 1.9602)])
def test_t_quantile_matches_tables(dof, exact):
    assert t_quantile_975(dof) == pytest.approx(exact, abs=2e-3)


def test_summarize_interval():
    s = summarize(np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert s["mean"] == 3.0 and s["episodes"] == 5
    half = 2.7764 * np.std([1, 2, 3, 4, 5], ddof=1) / np.sqrt(5)
    assert s["ci95"] == pytest.approx([3 - half, 3 + half], abs=1e-3)
    with pytest.raises(ValueError, match="at least 2 episodes"):
        summarize(np.array([1.0]))



def test_evaluation_table_compares_each_row_with_greedy_beside_the_same_co_player(capsys, monkeypatch):
    from rpg_env.experts.evaluate import print_table

    monkeypatch.setenv("COLUMNS", "200")  # one line per row

    def row(mean):
        return {"mean": mean, "ci95": [mean - 1, mean + 1], "episodes": 10}

    print_table({"model": row(300.0), "greedy": row(400.0),
                 "model_greedy_co_player": row(300.0), "greedy_greedy_co_player": row(250.0)})
    lines = {line.split()[1]: line for line in capsys.readouterr().out.splitlines()
             if line.startswith("│") and ("model" in line or "greedy" in line)}
    assert "75.0%" in lines["model"]                       # 300 / 400 beside the env's co-player
    assert "120.0%" in lines["model_greedy_co_player"]     # 300 / 250 beside a greedy co-player
    assert "100.0%" in lines["greedy_greedy_co_player"]


# --------------------------------------------------------------------------- shipped experts
@pytest.fixture(scope="module")
def dqn_path():
    return pretrained_path("dqn")


@pytest.mark.parametrize("name", PRETRAINED)
def test_shipped_experts_are_complete_and_small(name):
    folder = pretrained_path(name).parent
    for file in ("model.zip", "config.yaml", "provenance.json", "eval.json"):
        assert (folder / file).is_file(), f"{name}: {file} missing"
        assert (folder / file).stat().st_size < 2 * MB
    prov = json.loads((folder / "provenance.json").read_text())
    assert isinstance(prov["seed"], int) and prov["command"].startswith("python -m rpg_env.experts train")
    assert "stable-baselines3" in prov["versions"]
    assert set(json.loads((folder / "eval.json").read_text())) == {"model", "greedy", "random"}
    assert load_expert_config(path=folder / "config.yaml").algo == name
    with pytest.raises(ValueError, match="unknown pretrained expert"):
        pretrained_path("iqn")


@pytest.mark.parametrize("name", PRETRAINED)
def test_shipped_experts_beat_random(name):
    policy = SB3Policy.load(pretrained_path(name))
    env_kwargs = policy.model.rpg_expert["env"]
    expert = summarize(run_episodes(policy, env_kwargs, episodes=24, seed=777))
    random = summarize(run_episodes(RandomPolicy(), env_kwargs, episodes=24, seed=777))
    # 95% intervals apart, not merely a higher mean.
    assert expert["ci95"][0] > random["ci95"][1], (expert, random)


def test_sb3policy_via_make_policy_as_co_player(dqn_path):
    policy = make_policy(str(dqn_path))
    assert isinstance(policy, SB3Policy) and policy.policy_id == "sb3-dqn"
    env = gym.make(rpg_env.ENV_ID, co_policy=str(dqn_path))
    env.reset(seed=3)
    for _ in range(100):
        *_, info = env.step(0)
    assert info["co_returns"][0] > 0  # a competent co-player scores within one episode
    # Same seed, same co-player trajectory.
    env.reset(seed=3)
    first = [env.step(0)[-1]["positions"][1].tolist() for _ in range(30)]
    env.reset(seed=3)
    second = [env.step(0)[-1]["positions"][1].tolist() for _ in range(30)]
    assert first == second


def test_mismatched_vision_radius_names_both_shapes(dqn_path):
    env = gym.make(rpg_env.ENV_ID, co_policy=str(dqn_path), vision_radius=3)
    env.reset(seed=0)
    both = r"\(6, 9, 9\) \(vision_radius 4\).*\(6, 7, 7\) \(vision_radius 3\)"
    with pytest.raises(ExpertLoadError, match=both):
        env.step(0)
    with pytest.raises(ExpertLoadError, match="vision_radius 3"):
        compare(dqn_path, episodes=2, env_kwargs={"vision_radius": 3})


def test_foreign_and_broken_zips_are_refused(tmp_path, dqn_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_expert(tmp_path / "nope.zip")
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"not a zip at all")
    with pytest.raises(ExpertLoadError, match="not a Stable-Baselines3 model zip"):
        load_expert(junk)
    # A plain SB3 zip (no rpg_expert record) would need unpickling: refused, with the way out.
    from stable_baselines3 import DQN

    plain = DQN("MlpPolicy", "CartPole-v1", buffer_size=10, learning_starts=0)
    plain.save(tmp_path / "plain.zip")
    with pytest.raises(ExpertLoadError, match="without an 'rpg_expert' record"):
        load_expert(tmp_path / "plain.zip")
    # A record whose network does not fit the stored weights.
    tampered = tmp_path / "tampered.zip"
    with zipfile.ZipFile(dqn_path) as src, zipfile.ZipFile(tampered, "w") as dst:
        for item in src.infolist():
            payload = src.read(item.filename)
            if item.filename == "data":
                data = json.loads(payload)
                data["rpg_expert"]["net"]["features_dim"] += 1
                payload = json.dumps(data).encode()
            dst.writestr(item, payload)
    with pytest.raises(ExpertLoadError, match="weights do not match"):
        load_expert(tampered)


def test_stacking_matches_vecframestack(dqn_path):
    """SB3Policy.stack reproduces VecFrameStack's channels-first stacks, resets included."""
    policy = SB3Policy.load(dqn_path)
    k = policy.frame_stack
    venv = VecFrameStack(make_vec_env(rpg_env.ENV_ID, n_envs=3, seed=5, env_kwargs={"max_turns": 4},
                                      wrapper_class=stackable_views), k, channels_order="first")
    stacked = venv.reset()
    assert np.array_equal(policy.stack(stacked[:, -6:]), stacked)
    rng = np.random.default_rng(0)
    resets = 0
    for _ in range(11):
        stacked, _, dones, _ = venv.step(rng.integers(0, 4, size=3))
        resets += int(dones.sum())
        assert np.array_equal(policy.stack(stacked[:, -6:], dones), stacked)
    assert resets > 0


@pytest.mark.parametrize("name", PRETRAINED)
def test_stochastic_policy_is_seeded(name):
    """epsilon-greedy DQN / sampled PPO draw from the generator given to seed, nothing else."""
    policy = SB3Policy.load(pretrained_path(name), deterministic=False, epsilon=0.5)
    greedy = SB3Policy.load(pretrained_path(name))
    obs = np.stack([gym.make(rpg_env.ENV_ID).reset(seed=s)[0] for s in range(64)])
    runs = []
    for seed in (42, 42, 43):
        policy.seed(np.random.default_rng(seed))
        policy.reset()
        runs.append(policy.act(obs, np.ones(64, bool)))
    assert np.array_equal(runs[0], runs[1]) and runs[0].dtype == np.int64 and runs[0].shape == (64,)
    assert not np.array_equal(runs[0], runs[2])
    assert not np.array_equal(runs[0], greedy.act(obs))  # it does explore


# --------------------------------------------------------------------------- evaluate / watch
def test_evaluate_cli_table_and_json(tmp_path, capsys, dqn_path):
    out = tmp_path / "eval" / "result.json"
    assert main(["evaluate", str(dqn_path), "--episodes", "8", "--seed", "5", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    for word in ("model", "greedy", "random", "95% CI", "vs greedy"):
        assert word in table
    result = json.loads(out.read_text())
    assert set(result) == {"model", "greedy", "random"} and result["model"].pop("actions") == "likeliest"
    for row in result.values():
        assert set(row) == {"mean", "ci95", "episodes", "positive"} and row["episodes"] == 8
        assert row["ci95"][0] <= row["mean"] <= row["ci95"][1]
    # Fixed seeds: the same figures again.
    again = compare(dqn_path, episodes=8, seed=5)
    assert again["model"].pop("actions") == "likeliest" and again == result
    # Actions drawn from the policy (seed 002's play): seeded, so repeatable, and not the greedy play.
    sampled = tmp_path / "sampled.json"
    words = ["evaluate", str(dqn_path), "--episodes", "8", "--seed", "5", "--sampled", "--json", str(sampled)]
    assert main(words) == 0
    assert "actions sampled" in capsys.readouterr().out
    drawn = json.loads(sampled.read_text())
    assert drawn["model"]["actions"] == "sampled" and drawn["model"]["mean"] != result["model"]["mean"]
    assert drawn["greedy"] == result["greedy"]
    assert compare(dqn_path, episodes=8, seed=5, sampled=True) == drawn


def test_watch_headless_writes_gif(tmp_path, capsys, dqn_path):
    from PIL import Image

    gif = tmp_path / "expert.gif"
    assert main(["watch", str(dqn_path), "--out", str(gif), "--seed", "2"]) == 0
    assert "returns:" in capsys.readouterr().out
    with Image.open(gif) as image:
        assert image.n_frames > 10  # identical consecutive frames may merge
        assert image.size[0] > 100
    assert command_status(main, ["watch", str(dqn_path), "--out", str(tmp_path / "expert.avi")]) == 2
    assert "must end in .gif or .mp4" in capsys.readouterr().err


def test_watch_window_plays_the_same_episode_as_the_gif(tmp_path, dqn_path):
    """The pygame window (dummy SDL driver in tests) and the GIF show the same seeded game."""
    from rpg_env.experts.watch import watch

    shown = watch(dqn_path, seed=4, fps=1000)
    written = watch(dqn_path, out=tmp_path / "same.gif", seed=4)
    assert shown["returns"] == written["returns"] and written["frames"] == 101


def test_profile_cli_tells_policies_apart(tmp_path, capsys):
    out = tmp_path / "profile.json"
    experts = [str(pretrained_path(name)) for name in PRETRAINED]
    assert main(["profile", *experts, "--episodes", "4", "--json", str(out)]) == 0
    assert "action agreement" in capsys.readouterr().out
    result = json.loads(out.read_text())
    rows = result["policies"]
    assert list(rows) == ["dqn/model.zip", "ppo/model.zip", "greedy", "random"]
    for row in rows.values():
        assert sum(row["action_share"].values()) == pytest.approx(1.0, abs=1e-3)
        assert row["return"]["episodes"] == 4
    # Random play bumps walls and eats bones; the DQN expert almost never does.
    assert rows["random"]["bumps_per_episode"] > rows["dqn/model.zip"]["bumps_per_episode"] + 2
    assert rows["random"]["bone_per_episode"] > rows["dqn/model.zip"]["bone_per_episode"]
    assert 0.0 < result["agreement"]["dqn/model.zip | ppo/model.zip"] < 1.0


def test_shipped_zips_still_load_with_stable_baselines3_itself():
    # The shipped zips name `rpg_env.experts.features.GridCNN` in their pickled policy_kwargs: the one
    # alias path the project keeps. SB3's own loader (which unpickles) must still find it.
    from stable_baselines3 import DQN

    from rpg_env.policies.features import GridCNN

    model = DQN.load(pretrained_path("dqn"), device="cpu", custom_objects={"buffer_size": 1})
    assert type(model.policy.q_net.features_extractor) is GridCNN
    ours = load_expert(pretrained_path("dqn"))
    for mine, theirs in zip(ours.policy.parameters(), model.policy.parameters(), strict=True):
        assert np.array_equal(mine.detach().numpy(), theirs.detach().numpy())
