"""TrXL-PPO's settings that bring it to seed 002's reference network and loss: an orthogonal input
layer, a hidden layer each for the policy and the value, the clipped value loss, and a time limit's
end counted as the game's own end."""

from __future__ import annotations

import json
import math
import zipfile

import numpy as np
import pytest
import torch
from test_any_env_trxl import MULTI_ID, TINY

from rpg_env.experts.config import load_expert_config
from rpg_env.experts.train import train
from rpg_env.experts.trxl_ppo import TrXLTrainer, ppo_value_loss
from rpg_env.policies.transformer_xl import TrXLActorCritic, TrXLPolicy, TrXLShape, load_trxl

SEED002 = ["memory.input_layer=true", "memory.separate_heads=true", "hyperparams.clip_value=true",
           "hyperparams.bootstrap_truncation=false"]


def _shape(**kw) -> TrXLShape:
    return TrXLShape(obs_shape=(3,), action_dims=(3, 2), encoder="vector", embed_dim=16, num_heads=2,
                     memory_length=4, hidden_size=8, **kw)


def _step(model: TrXLActorCritic, obs: torch.Tensor):
    shape = model.shape
    memory = torch.zeros(len(obs), shape.num_blocks, shape.memory_length, shape.embed_dim)
    valid = torch.zeros(len(obs), shape.memory_length, dtype=torch.bool)
    previous = torch.full((len(obs), 2), 0, dtype=torch.int64)
    return model(obs, previous, memory, valid)


def test_clipped_value_loss_is_the_larger_error_and_stops_a_far_move():
    old, returns = torch.zeros(2), torch.full((2,), 3.0)
    value = torch.tensor([2.0, -1.0], requires_grad=True)
    assert float(ppo_value_loss(value, old, returns).detach()) == pytest.approx((1.0 + 16.0) / 2)
    loss = ppo_value_loss(value, old, returns, clip=0.5)
    # Row 0 moved 2.0 towards the return: its clipped error (3 - 0.5)^2 is the larger, and constant.
    # Row 1 moved away from it: its own error (16) is the larger and keeps its gradient.
    assert float(loss.detach()) == pytest.approx((6.25 + 16.0) / 2)
    loss.backward()
    assert value.grad[0] == 0.0 and value.grad[1] == pytest.approx(-(3.0 - -1.0))


def test_separate_heads_read_the_memory_through_their_own_layers_initialised_as_seed_002():
    torch.manual_seed(0)
    model = TrXLActorCritic(_shape(separate_heads=True, input_layer=True, previous_action=False))
    for layer, gain in ((model.input_layer[0], math.sqrt(2)), (model.hidden[0], math.sqrt(2)),
                        (model.value_hidden[0], math.sqrt(2)), (model.policy_head, 0.1),
                        (model.value_head, 1.0)):
        w = layer.weight.detach()
        rows = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w  # orthogonal: a scaled identity
        torch.testing.assert_close(rows, gain**2 * torch.eye(len(rows)), atol=1e-5, rtol=0)
    obs = torch.rand(5, 3)
    logits, value, entries = _step(model, obs)
    with torch.no_grad():
        model.value_hidden[0].weight.add_(1.0)
    logits2, value2, _ = _step(model, obs)
    torch.testing.assert_close(logits2, logits)  # the policy does not read the value's layer
    assert not torch.allclose(value2, value)
    with torch.no_grad():
        model.hidden[0].weight.add_(1.0)
    _, value3, _ = _step(model, obs)
    torch.testing.assert_close(value3, value2)  # nor the value the policy's
    # The input layer sits between the encoder and the memory: the memory stores its output.
    torch.testing.assert_close(entries[:, 0], model.input_layer(model.encoder(obs)))


def test_default_network_is_unchanged_by_the_new_settings():
    torch.manual_seed(0)
    plain = TrXLActorCritic(_shape())
    assert plain.input_layer is None and plain.value_hidden is None
    assert not any(name.startswith(("input_layer", "value_hidden")) for name in plain.state_dict())


def test_a_time_limit_ends_the_episode_without_bootstrapping_when_asked(tmp_path):
    """PickTwo's episodes end by their 8-turn limit only: with ``bootstrap_truncation=false`` the
    rollout holds the game's rewards; with it, those ends add gamma * V(final view) and nothing else."""
    rollouts = {}
    for bootstrap in (True, False):
        setting = f"hyperparams.bootstrap_truncation={str(bootstrap).lower()}"
        cfg = load_expert_config("trxl-ppo", env_id=MULTI_ID, overrides=[*TINY, setting])
        trainer = TrXLTrainer(cfg, tmp_path)
        obs, _ = trainer.envs.reset(seed=cfg.seed)
        rollouts[bootstrap], _, _ = trainer.collect(obs)
        trainer.close()
    plain, bootstrapped = rollouts[False], rollouts[True]
    torch.testing.assert_close(plain.actions, bootstrapped.actions)  # the same play
    assert set(np.unique(plain.rewards.numpy())) <= {0.0, 1.0, 2.0}  # the game's own rewards
    ends = plain.dones.bool()
    assert ends.sum() == 2 * 32 // 8
    assert torch.equal(plain.rewards != bootstrapped.rewards, ends)


def test_seed_002_settings_train_save_and_load_the_same_network(tmp_path):
    cfg = load_expert_config("trxl-ppo", env_id=MULTI_ID, overrides=[*TINY, *SEED002, "timesteps=64"])
    run = train(cfg, tmp_path / "run")
    with zipfile.ZipFile(run / "model.zip") as archive:
        shape = json.loads(archive.read("data"))["rpg_expert"]["net_shape"]
    assert shape["input_layer"] and shape["separate_heads"]
    network, _ = load_trxl(run / "model.zip")
    assert network.input_layer is not None and network.value_hidden is not None
    policy = TrXLPolicy.load(run / "model.zip")
    assert policy.act(np.zeros((2, 3), dtype=np.float32)).shape == (2, 2)
    # A file from before these settings (no such keys in its shape) loads the shared network.
    old = {k: v for k, v in shape.items() if k not in ("input_layer", "separate_heads")}
    assert TrXLShape.from_record(old) == TrXLShape.from_record({**old, "input_layer": False})
