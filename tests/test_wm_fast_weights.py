"""The self-referential weight matrix (``model.layer=srwm``): its update rule, its two forms, the
world model built on it (causal, imagination with a constant-size state that equals the forward
over the whole history, a memory past the attention window), training and checkpoints, and that
it learns to recall."""

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import rpg_worldmodel
from rpg_base.typed_config.values import ConfigError
from rpg_env.record import record
from rpg_worldmodel import train as T
from rpg_worldmodel.checkpoint import load_checkpoint
from rpg_worldmodel.config import ModelConfig, load_world_model_config
from rpg_worldmodel.models.fast_weights import SelfReferentialWeights, srwm_chunked, srwm_sequential
from rpg_worldmodel.models.world_model import WorldModel
from rpg_worldmodel.run_record import CheckpointError

TINY = dict(width=24, num_heads=2, num_layers=2, num_frames=3, reward_values=(-10.0, -1.0, 0.0, 5.0, 10.0))


def _views(b, t, seed=0):
    g = torch.Generator().manual_seed(seed)
    return F.one_hot(torch.randint(0, 6, (b, t, 9, 9), generator=g), 6).permute(0, 1, 4, 2, 3).float()


def _model(**kw):
    torch.manual_seed(0)
    return WorldModel(ModelConfig(**{**TINY, "layer": "srwm", **kw})).eval()


def _by_hand(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seed 003's equations for one head, in numpy: (L, dh) tokens, (3 dh + 4, dh) matrix."""
    dh = x.shape[1]
    softmax = lambda z: np.exp(z - z.max()) / np.exp(z - z.max()).sum()  # noqa: E731
    outputs = []
    for token in x:
        a = w @ token
        y, q, k, b = a[:dh], softmax(a[dh:2 * dh]), softmax(a[2 * dh:3 * dh]), 1 / (1 + np.exp(-a[3 * dh:]))
        v, v_old = w @ q, w @ k
        rate = np.concatenate([np.full(dh, b[0]), np.full(dh, b[1]), np.full(dh, b[2]), b[3].repeat(4)])
        w = w + np.outer(rate * (v - v_old), k)
        outputs.append(y)
    return np.stack(outputs), w


def test_the_update_rule_is_seed_003s_and_both_forms_compute_it():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, 23, 5, generator=g, dtype=torch.float64)
    w = torch.randn(3, 2, 19, 5, generator=g, dtype=torch.float64) / 5**0.5
    y, after = srwm_sequential(x, w)
    want_y, want_w = _by_hand(x[1, 0].numpy(), w[1, 0].numpy())
    np.testing.assert_allclose(y[1, 0].numpy(), want_y, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(after[1, 0].numpy(), want_w, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(after, w)  # the matrix did rewrite itself
    for chunk in (1, 4, 16, 64):
        y2, after2 = srwm_chunked(x, w, chunk)
        torch.testing.assert_close(y2, y, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(after2, after, rtol=1e-10, atol=1e-12)


def test_the_chunked_form_has_the_sequential_forms_gradients():
    layer = SelfReferentialWeights(12, 2, chunk=5).double()
    x = torch.randn(2, 13, 12, dtype=torch.float64, requires_grad=True)
    grads = []
    for form in ("chunked", "sequential"):
        layer.zero_grad()
        x.grad = None
        if form == "chunked":
            y, w = layer(x)
        else:  # two tokens a call: the stepping path, carrying the state
            pieces, w = [], None
            for t in range(0, 13, 2):
                piece, w = layer(x[:, t:t + 2], w)
                pieces.append(piece)
            y = torch.cat(pieces, 1)
        (y.square().sum() + w.sum()).backward()
        grads.append((x.grad.clone(), layer.initial.grad.clone()))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_config_names_the_layer_and_refuses_what_does_not_fit():
    assert load_world_model_config(None, ["model.layer=srwm"]).model.layer == "srwm"
    for overrides, message in ((["model.layer=lstm"], "model.layer must be one of attention, srwm"),
                               (["model.srwm_heads=5"], "srwm_heads must be >= 1 and divide model.width=96"),
                               (["model.layer=srwm", "model.position=learned"],
                                "leave model.position at rope")):
        with pytest.raises(ConfigError, match=message):
            load_world_model_config(None, overrides)


def test_equal_parameters_to_attention_with_one_head_of_the_full_width():
    cfg = load_world_model_config(None, ["model.reward_values=[-1,0,1]"]).model
    attention = WorldModel(cfg).num_parameters()
    cfg.layer = "srwm"
    assert abs(WorldModel(cfg).num_parameters() / attention - 1) < 0.001


def test_predictions_are_causal_and_imagination_equals_the_forward_over_the_whole_history():
    model = _model()
    views, actions = _views(3, 14, seed=4), torch.randint(0, 4, (3, 14))
    reference = model(views, actions)
    changed = views.clone()
    changed[:, 9:] = _views(3, 5, seed=9)
    later = model(changed, actions)
    torch.testing.assert_close(later.view[:, :9], reference.view[:, :9])  # the future is not read
    state, shapes = None, set()
    for t in range(14):
        out, state = model.imagine_step(views[:, t], actions[:, t], state)
        for got, want in zip(out, reference, strict=True):
            torch.testing.assert_close(got[:, 0], want[:, t], rtol=1e-4, atol=1e-4)
        shapes.add(tuple(tuple(w.shape) for (w,) in state.past))
    assert shapes == {((3, 1, 3 * 24 + 4, 24),) * 2}  # one size of state at every turn
    last = model.predict_last(views, actions)  # the uncached reference reads the whole history
    torch.testing.assert_close(last.view[:, 0], reference.view[:, -1], rtol=1e-4, atol=1e-4)


def test_it_remembers_past_the_attention_window():
    # Without the memory map and the extent prior (both carry what step 0 showed) the attention model
    # cannot see step 0 from step 12; the SRWM can.
    views, actions = _views(2, 13, seed=1), torch.randint(0, 4, (2, 13))
    other = views.clone()
    other[:, 0] = _views(2, 1, seed=7)[:, 0]
    for layer, remembers in (("attention", False), ("srwm", True)):
        model = _model(layer=layer, memory_map=False, extent_prior=False)
        delta = (model(views, actions).view[:, -1] - model(other, actions).view[:, -1]).abs().max()
        assert (delta > 1e-5) == remembers, layer


def test_the_layer_learns_to_recall_a_cue_from_the_start_of_a_sequence():
    # A cue among 4 symbols at token 0, 20 noise tokens, then a query: recall the cue. A layer that
    # cannot carry token 0 to the end stays at chance (0.25).
    torch.manual_seed(0)
    embed, readout = torch.nn.Embedding(8, 16), torch.nn.Linear(16, 4)
    layer = SelfReferentialWeights(16, 1, chunk=8)
    params = [*embed.parameters(), *layer.parameters(), *readout.parameters()]
    optimizer = torch.optim.Adam(params, lr=3e-3)

    def batch(n):
        cue = torch.randint(0, 4, (n,))
        tokens = torch.cat([cue[:, None], torch.randint(4, 7, (n, 20)), torch.full((n, 1), 7)], 1)
        return tokens, cue

    for _ in range(120):
        tokens, cue = batch(64)
        loss = F.cross_entropy(readout(layer(embed(tokens))[0][:, -1]), cue)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    tokens, cue = batch(512)
    with torch.no_grad():
        accuracy = (readout(layer(embed(tokens))[0][:, -1]).argmax(-1) == cue).float().mean().item()
    assert accuracy > 0.9


@pytest.fixture(scope="module")
def srwm_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("srwm")
    data = root / "greedy.h5"
    record("greedy", data, 12, seed=0, num_envs=6, mode="w", progress=False, env_kwargs={"max_turns": 30})
    cfg = load_world_model_config(None, ["model.width=24", "model.num_heads=2", "model.num_layers=1",
                                         "model.num_frames=3", "model.train_window=8", "model.layer=srwm",
                                         "train.batch_size=8", "train.max_steps=6", "train.warmup_steps=2",
                                         "train.eval_every=3", "train.checkpoint_every=3",
                                         "train.progress=false", "data.max_val_windows=64",
                                         "train.num_threads=1", f"data.path={data}",
                                         f"out_dir={root / 'run'}"])
    return T.train(cfg), cfg


def test_it_trains_and_its_checkpoint_names_it(srwm_run):
    result, cfg = srwm_run
    assert np.isfinite(result.val["loss"])
    ck = load_checkpoint(result.checkpoint)
    assert ck.config.model.layer == "srwm" and ck.record.config.model.layer == "srwm"
    assert any(name.endswith("global_.srwm.initial") for name, _ in ck.model.named_parameters())
    attention = ModelConfig(**{**vars(ck.config.model), "layer": "attention"})
    with pytest.raises(CheckpointError, match="layer"):
        load_checkpoint(result.checkpoint, model_config=attention)


def test_the_imagined_env_steps_it_with_a_constant_size_state(srwm_run):
    result, _ = srwm_run
    venv = gym.make_vec(rpg_worldmodel.IMAGINED_ENV_ID, num_envs=3, checkpoint=str(result.checkpoint))
    venv.reset(seed=0)
    rng = np.random.default_rng(0)
    sizes = set()
    for _ in range(45):  # past the recorded games' 30 turns: worlds restart and are spliced in
        obs, reward, terminated, truncated, _ = venv.step(rng.integers(0, 4, 3))
        assert np.isfinite(reward).all()
        sizes.add(tuple(w.shape for (w,) in venv.unwrapped.worlds.state.past))
    assert len(sizes) == 1
    venv.close()
