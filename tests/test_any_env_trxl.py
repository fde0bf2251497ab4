"""TrXL-PPO on any Gymnasium env (seed 002): spaces saved as JSON, envs of other packages with their
wrappers, vector and image observations, MultiDiscrete actions, and the update's rewritten attention
and shared window keys, checked against `nn.MultiheadAttention`'s sums."""

from __future__ import annotations

import dataclasses
import json
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

import rpg_env
from rpg_base.cli import command_status
from rpg_base.errors import InputError
from rpg_base.spaces import action_dims, space_from_json, space_to_json
from rpg_base.typed_config.values import ConfigError
from rpg_env.envs.any_env import env_kwarg_defaults, make_vector, make_wrapped_env, resolve_env_id
from rpg_env.envs.wrappers import FirstActions
from rpg_env.experts.__main__ import main
from rpg_env.experts.config import EXPERT_CONFIG_DIR, load_expert_config
from rpg_env.experts.evaluate import compare
from rpg_env.experts.train import train
from rpg_env.experts.trxl_model import TrXLPPO
from rpg_env.policies.action_heads import ActionHeads
from rpg_env.policies.registry import load_expert_policy
from rpg_env.policies.scripted import RandomPolicy
from rpg_env.policies.transformer_xl import (
    MemoryBlock,
    TrXLActorCritic,
    TrXLPolicy,
    TrXLShape,
    encoder_kind,
)

TINY = ["n_envs=2", "progress_bar=false", "net.channels=[4]", "net.features_dim=16", "memory.num_heads=2",
        "memory.memory_length=4", "memory.hidden_size=16", "eval.freq=128", "eval.episodes=2",
        "eval.final_episodes=3", "checkpoint_freq=100000", "hyperparams.n_steps=32",
        "hyperparams.n_minibatches=2", "timesteps=128"]
MULTI_ID = "TestPickTwo-v0"


class PickTwo(gym.Env):
    """A vector observation and two action dimensions: +1 for each dimension that matches the cue."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, (3,), np.float32)
        self.action_space = spaces.MultiDiscrete([3, 2])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cue = self.np_random.integers(0, [3, 2])
        self.turn = 0
        return self._obs(), {}

    def _obs(self):
        return np.array([self.cue[0] / 2, self.cue[1], 1.0], dtype=np.float32)

    def step(self, action):
        reward = float(np.sum(np.asarray(action) == self.cue))
        self.turn += 1
        return self._obs(), reward, False, self.turn >= 8, {}


if MULTI_ID not in gym.registry:
    gym.register(MULTI_ID, entry_point=PickTwo)


# --------------------------------------------------------------------------- spaces and envs
@pytest.mark.parametrize("space", [
    spaces.Discrete(5), spaces.MultiDiscrete([3, 2, 4]), spaces.MultiBinary((6, 5, 5)),
    spaces.Box(0, 255, (84, 84, 3), np.uint8), spaces.Box(-np.inf, np.inf, (4,), np.float32),
    spaces.Box(np.array([-1.0, 0.0]), np.array([2.0, 3.0]), dtype=np.float64)])
def test_spaces_survive_json(space):
    text = json.dumps(space_to_json(space))
    assert space_from_json(json.loads(text)) == space


def test_unusable_spaces_and_descriptions_are_refused():
    with pytest.raises(InputError, match="Discrete or a flat MultiDiscrete"):
        action_dims(spaces.Box(-1, 1, (2,)))
    with pytest.raises(InputError, match="starts at 1"):
        action_dims(spaces.Discrete(3, start=1))
    with pytest.raises(InputError, match="malformed"):
        space_from_json({"type": "Box", "shape": [2]})
    with pytest.raises(InputError, match="unknown space type"):
        space_from_json({"type": "Graph"})


def test_env_ids_of_other_packages_and_their_arguments():
    assert resolve_env_id("gymnasium.envs.classic_control:CartPole-v1") == "CartPole-v1"
    with pytest.raises(InputError, match="did you mean CartPoleMasked-v1"):
        resolve_env_id("CartPoleMaskd-v1")
    with pytest.raises(InputError, match="cannot import"):
        resolve_env_id("no_such_package_here:Thing-v0")
    pytest.importorskip("minigrid")
    kwargs = env_kwarg_defaults("minigrid:MiniGrid-MemoryS9-v0")  # the base class's through **kwargs
    assert kwargs["size"] == 9 and kwargs["agent_view_size"] == 7


@pytest.mark.parametrize("path", sorted(EXPERT_CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_config_is_valid_for_its_env(path):
    import yaml

    env_id = yaml.safe_load(path.read_text()).get("env_id", rpg_env.ENV_ID)
    if ":" in env_id:
        pytest.importorskip(env_id.split(":")[0])
    assert load_expert_config(path=path).env_id == env_id


def test_masked_cartpole_hides_both_velocities_and_keeps_the_rest():
    real, masked = gym.make("CartPole-v1"), gym.make(rpg_env.CARTPOLE_MASKED_ID)
    obs, _ = real.reset(seed=3)
    hidden, _ = masked.reset(seed=3)
    assert masked.observation_space.shape == (2,)
    np.testing.assert_array_equal(hidden, obs[[0, 2]])
    for _ in range(5):
        obs, reward, *_ = real.step(1)
        hidden, same_reward, *_ = masked.step(1)
        np.testing.assert_array_equal(hidden, obs[[0, 2]])
        assert reward == same_reward


def test_wrappers_with_arguments_apply_in_order_and_bad_ones_are_refused():
    env = make_wrapped_env("CartPole-v1", {}, ["rpg_env.envs.wrappers:FirstActions n=1"])
    assert env.action_space == spaces.Discrete(1)
    with pytest.raises(InputError, match="outside"):
        env.reset(seed=0) and env.step(1)
    with pytest.raises(InputError, match="key=value"):
        make_wrapped_env("CartPole-v1", {}, ["rpg_env.envs.wrappers:FirstActions 3"])
    with pytest.raises(InputError, match="n must be"):
        FirstActions(gym.make("CartPole-v1"), 0)


def test_random_baseline_draws_from_the_envs_own_actions():
    policy = RandomPolicy(action_space=spaces.MultiDiscrete([3, 2]))
    policy.seed(np.random.default_rng(0))
    actions = policy.act(np.zeros((500, 3)))
    assert actions.shape == (500, 2)
    assert set(actions[:, 0]) == {0, 1, 2} and set(actions[:, 1]) == {0, 1}
    default = RandomPolicy()
    default.seed(np.random.default_rng(0))
    assert default.act(np.zeros((7, 6, 5, 5))).shape == (7,)


@pytest.mark.parametrize(("argv", "message"), [
    (["--algo", "ppo", "--env-id", "CartPoleMaskd-v1"], "did you mean CartPoleMasked-v1"),
    (["--algo", "ppo", "--env-id", "Pendulum-v1"], "not supported"),
    (["--algo", "trxl-ppo", "--env-id", "minigrid:MiniGrid-MemoryS7-v0"], "ImgObsWrapper"),
    (["--algo", "ppo", "--env-id", "CartPole-v1", "env.vision_radius=3"], "unknown key"),
    (["--algo", "ppo", "--env-id", "CartPole-v1", "--env-kwargs", "{length: 3}"], "unknown key"),
    (["--config", str(EXPERT_CONFIG_DIR / "memorycue-ppo.yaml"), "--env-id", "CartPole-v1"],
     "not for --env-id"),
    (["--algo", "ppo", "--env-id", "CartPole-v1", "--wrappers", "nowhere.at_all:Wrap"], "cannot be loaded"),
    (["--algo", "dqn", "--env-id", "CartPole-v1", "--wrappers", "rpg_env.envs.wrappers:FirstActions n=9"],
     "FirstActions n must be"),
])
def test_bad_env_input_gives_one_line_exit_2_and_writes_nothing(argv, message, tmp_path, capsys, monkeypatch):
    if "minigrid" in " ".join(argv):
        pytest.importorskip("minigrid")
    monkeypatch.chdir(tmp_path)  # the default run folder (runs/) would land here
    assert command_status(main, ["train", *argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------- the network
def test_encoder_follows_the_observation():
    assert encoder_kind(spaces.MultiBinary((6, 5, 5))) == ("grid", 1.0)
    assert encoder_kind(spaces.Box(0, 255, (84, 84, 3), np.uint8)) == ("image", 1 / 255)
    assert encoder_kind(spaces.Box(-1, 1, (4,), np.float32)) == ("vector", 1.0)
    assert encoder_kind(spaces.MultiBinary((6, 5, 5)), "mlp") == ("vector", 1.0)
    for obs_shape, kind in (((84, 84, 3), "image"), ((3, 7, 7), "image"), ((5,), "vector")):
        torch.manual_seed(0)
        model = TrXLActorCritic(TrXLShape(obs_shape=obs_shape, action_dims=(3, 2), encoder=kind, embed_dim=16,
                                          num_heads=2, memory_length=4, hidden_size=16, channels=(4,)))
        logits, value, entries = model(torch.rand(2, *obs_shape), torch.tensor([[3, 2], [0, 1]]),
                                       torch.zeros(2, 2, 4, 16), torch.zeros(2, 4, dtype=torch.bool))
        assert logits.shape == (2, 5) and value.shape == (2,) and entries.shape == (2, 2, 16)


def test_action_heads_are_independent_categoricals():
    heads = ActionHeads((3, 2))
    logits = torch.randn(6, 5)
    actions = torch.stack([torch.randint(0, 3, (6,)), torch.randint(0, 2, (6,))], dim=1)
    first = torch.distributions.Categorical(logits=logits[:, :3])
    second = torch.distributions.Categorical(logits=logits[:, 3:])
    torch.testing.assert_close(heads.log_prob(logits, actions),
                               first.log_prob(actions[:, 0]) + second.log_prob(actions[:, 1]))
    torch.testing.assert_close(heads.entropy(logits), first.entropy() + second.entropy())
    assert heads.greedy(logits).tolist() == torch.stack([logits[:, :3].argmax(1), logits[:, 3:].argmax(1)],
                                                        1).tolist()


def _reference_block(block: MemoryBlock, query, keys, ignore):
    """The block as `nn.MultiheadAttention` computes it, over the window and the step as one sequence."""
    mask = torch.cat([ignore, torch.zeros_like(ignore[:, :1])], dim=1)
    if block.pre_norm:
        normed = block.norm_memory(keys)
        out, _ = block.attention(block.norm_query(query)[:, None], normed, normed, key_padding_mask=mask,
                                 need_weights=False)
        h = block.gate_attention(query, out[:, 0])
        return block.gate_ff(h, block.feed_forward(block.norm_ff(h)))
    out, _ = block.attention(query[:, None], keys, keys, key_padding_mask=mask, need_weights=False)
    h = block.norm_query(block.gate_attention(query, out[:, 0]))
    return block.norm_ff(block.gate_ff(h, block.feed_forward(h)))


@pytest.mark.parametrize("layer_norm", ["pre", "post"])
@pytest.mark.parametrize("gtrxl", [False, True])
def test_written_out_attention_equals_multihead_attention_values_and_gradients(layer_norm, gtrxl):
    torch.manual_seed(0)
    shape = TrXLShape(obs_shape=(4,), action_dims=(2,), encoder="vector", embed_dim=16, num_heads=4,
                      memory_length=6, layer_norm=layer_norm, gtrxl=gtrxl)
    block = MemoryBlock(shape).double()
    nn.init.normal_(block.attention.in_proj_bias)  # biases that do not drop out would show
    with torch.no_grad():
        block.norm_memory.weight.normal_() if block.pre_norm else None
        block.norm_memory.bias.normal_() if block.pre_norm else None
    query = torch.randn(5, 16, dtype=torch.float64)
    window = torch.randn(5, 6, 16, dtype=torch.float64)
    ignore = torch.rand(5, 6) < 0.4
    ignore[0] = True  # a window wholly outside the episode: the step sees only itself
    expected = _reference_block(block, query, torch.cat([window, query[:, None]], dim=1), ignore)
    expected.square().sum().backward()
    reference = {name: p.grad.clone() for name, p in block.named_parameters()}
    block.zero_grad()
    got = block(query, block.window_keys(window), query, ignore)
    got.square().sum().backward()
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    for name, p in block.named_parameters():
        torch.testing.assert_close(p.grad, reference[name], rtol=1e-9, atol=1e-10, msg=name)


def test_window_keys_computed_once_give_the_same_step():
    torch.manual_seed(1)
    model = TrXLActorCritic(TrXLShape(obs_shape=(6, 5, 5), action_dims=(4,), embed_dim=16, num_heads=2,
                                      memory_length=4, hidden_size=16, channels=(4,))).eval()
    views = torch.randint(0, 2, (3, 6, 5, 5), dtype=torch.uint8)
    previous, memory = torch.tensor([[4], [0], [2]]), torch.randn(3, 2, 4, 16)
    valid = torch.tensor([[False, True, True, True]] * 3)
    direct = model(views, previous, memory, valid)
    shared = model(views, previous, None, valid, keys=model.window_keys(memory))
    for a, b in zip(direct, shared, strict=True):
        torch.testing.assert_close(a, b)
    assert model.fixed_window_keys


# --------------------------------------------------------------------------- training in other envs
def test_trxl_ppo_trains_in_masked_cartpole_and_its_file_names_the_env(tmp_path):
    cfg = load_expert_config("trxl-ppo", env_id=rpg_env.CARTPOLE_MASKED_ID, overrides=TINY)
    assert cfg.env == {}  # the shipped config's env section (Treasurehunt's) is left out
    run = train(cfg, tmp_path / "run")
    results = json.loads((run / "eval.json").read_text())
    assert set(results) == {"model", "random"}  # no greedy outside the project's games
    with zipfile.ZipFile(run / "model.zip") as archive:
        record = json.loads(archive.read("data"))["rpg_expert"]
    assert record["env_id"] == rpg_env.CARTPOLE_MASKED_ID and "view_shape" not in record
    assert space_from_json(record["observation_space"]).shape == (2,)
    policy = load_expert_policy(run / "model.zip")
    assert isinstance(policy, TrXLPolicy) and policy.model.shape.encoder == "vector"
    assert compare(run / "model.zip", episodes=3, seed=cfg.eval.seed)["model"] == results["model"]
    with pytest.raises(InputError, match="trained on observations of shape"):
        policy.act(np.zeros((2, 4), dtype=np.float32))  # CartPole-v1's full observation


def test_trxl_ppo_same_seed_same_weights_in_another_env(tmp_path):
    cfg = load_expert_config("trxl-ppo", env_id=rpg_env.CARTPOLE_MASKED_ID, overrides=[*TINY, "timesteps=64"])
    first, second = train(cfg, tmp_path / "a"), train(cfg, tmp_path / "b")
    weights = [TrXLPolicy.load(run / "model.zip").model.state_dict() for run in (first, second)]
    for name, tensor in weights[0].items():
        assert torch.equal(tensor, weights[1][name]), name


def test_trxl_ppo_acts_in_many_action_dimensions(tmp_path):
    cfg = load_expert_config("trxl-ppo", env_id=MULTI_ID, overrides=[*TINY, "timesteps=64"])
    run = train(cfg, tmp_path / "run")
    policy = TrXLPolicy.load(run / "model.zip", deterministic=False)
    policy.seed(np.random.default_rng(0))
    actions = policy.act(np.zeros((4, 3), dtype=np.float32))
    assert actions.shape == (4, 2) and actions[:, 0].max() < 3 and actions[:, 1].max() < 2
    with pytest.raises(ConfigError, match="dqn takes Discrete actions"):
        load_expert_config("dqn", env_id=MULTI_ID)


def test_trxl_ppo_trains_in_minigrid_through_its_wrappers(tmp_path):
    pytest.importorskip("minigrid")
    wrappers = ["minigrid.wrappers:ImgObsWrapper", "rpg_env.envs.wrappers:FirstActions n=3"]
    cfg = load_expert_config("trxl-ppo", env_id="minigrid:MiniGrid-MemoryS7-v0",
                             env_kwargs="{agent_view_size: 3}", wrappers=wrappers,
                             overrides=[*TINY, "timesteps=64"])
    run = train(cfg, tmp_path / "run")
    policy = load_expert_policy(run / "model.zip")
    assert policy.rpg_expert["wrappers"] == wrappers and policy.model.shape.action_dims == (3,)
    envs = make_vector(cfg.env_id, 2, cfg.env, cfg.wrappers)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 3, 3, 3) and policy.act(obs).shape == (2,)
    envs.close()
    with pytest.raises(ConfigError, match="ImgObsWrapper"):
        load_expert_config("trxl-ppo", env_id="minigrid:MiniGrid-MemoryS7-v0")


def test_sb3_style_api_learns_as_the_command_line_does_and_predicts_with_its_memory(tmp_path):
    sections = {"n_envs": 2, "net": {"channels": [4], "features_dim": 16},
                "memory": {"num_heads": 2, "memory_length": 4, "hidden_size": 16},
                "hyperparams": {"n_steps": 32, "n_minibatches": 2}}
    model = TrXLPPO(rpg_env.CARTPOLE_MASKED_ID, seed=3, **sections).learn(total_timesteps=64)
    assert model.num_timesteps == 64
    cfg = dataclasses.replace(model.config, total_timesteps=64)
    cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, final_episodes=2))
    cli = train(cfg, tmp_path / "cli")
    cli_weights = TrXLPolicy.load(cli / "model.zip").model.state_dict()
    for name, tensor in model.policy.model.state_dict().items():
        assert torch.equal(tensor, cli_weights[name]), name
    model.save(tmp_path / "api.zip")
    loaded = TrXLPPO.load(tmp_path / "api.zip")
    obs = np.random.default_rng(0).normal(size=(3, 2)).astype(np.float32)
    first, memory = model.predict(obs)
    again, _ = loaded.predict(obs)
    np.testing.assert_array_equal(first, again)
    assert memory.valid[:, -1].all()  # the step went into each row's window
    _, memory = model.predict(obs, memory, episode_start=np.array([True, False, False]))
    assert memory.valid[0].sum() == 1 and memory.valid[1].sum() == 2
    with pytest.raises(RuntimeError, match="only predicts"):
        loaded.learn(64)
    model.close()


@pytest.mark.parametrize("algo", ["trxl-ppo", "ppo", "recurrent-ppo"])
def test_minigrid_memory_as_cells_sees_what_the_image_shows_and_trains_alike(algo):
    """The cells configs change the view's encoding only: the same task, 3x3 view, three actions,
    budget and hyperparameters as the 84x84 image configs, and a first view that holds exactly the
    cells the image draws (one kind a cell)."""
    pytest.importorskip("minigrid")
    image = load_expert_config(path=EXPERT_CONFIG_DIR / f"minigrid-memory-{algo}.yaml")
    cells = load_expert_config(path=EXPERT_CONFIG_DIR / f"minigrid-memory-onehot-{algo}.yaml")
    assert (cells.env_id, cells.env, cells.total_timesteps, cells.n_envs) == \
        (image.env_id, image.env, image.total_timesteps, image.n_envs)
    assert cells.hyperparams == image.hyperparams and cells.memory == image.memory
    assert cells.wrappers[-1] == image.wrappers[-1] == "rpg_env.envs.wrappers:FirstActions n=3"
    env = make_wrapped_env(cells.env_id, cells.env, cells.wrappers)
    symbolic = gym.make("MiniGrid-MemoryS9-v0", agent_view_size=3)
    views, _ = env.reset(seed=4)
    image_cells = symbolic.reset(seed=4)[0]["image"][..., 0].T  # (y, x) object ids
    assert views.shape[1:] == (3, 3) and (views.sum(0) == 1).all() and env.action_space.n == 3
    names = env.metadata["channel_names"]
    assert [[names[k] for k in row] for row in views.argmax(0)] == \
        [[{1: "empty", 2: "wall", 5: "key", 6: "ball"}[int(o)] for o in row] for row in image_cells]
