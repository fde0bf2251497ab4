"""``data.unmodelled_policies``: games whose actions the action head does not learn (the pipeline's
random play), while their views, rewards and ends still train the model."""

import numpy as np
import pytest
import torch

from rpg_base.cli import command_status
from rpg_base.typed_config.values import ConfigError
from rpg_env.record import record
from rpg_worldmodel import train as T
from rpg_worldmodel.checkpoint import load_checkpoint
from rpg_worldmodel.config import load_world_model_config
from rpg_worldmodel.data.shards import DataFiles, training_splits, training_windows
from rpg_worldmodel.pipeline import EXPLORE_POLICY, training_config

TINY = ["model.width=24", "model.num_heads=2", "model.num_layers=1", "model.num_frames=3",
        "train.batch_size=8", "train.warmup_steps=2", "train.eval_every=3", "train.checkpoint_every=3",
        "train.progress=false", "data.max_val_windows=256", "train.num_threads=1", "train.refiner_stage=0"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("unmodelled")
    greedy, random = root / "greedy.h5", root / "random.h5"
    record("greedy", greedy, 12, seed=0, num_envs=6, mode="w", progress=False, env_kwargs={"max_turns": 30})
    record("random", random, 12, seed=1, num_envs=6, mode="w", progress=False, env_kwargs={"max_turns": 30})
    return greedy, random


def _cfg(files, out, *extra):
    paths = "[" + ", ".join(str(p) for p in files) + "]"
    return load_world_model_config(None, [*TINY, f"data.path={paths}", f"out_dir={out}", *extra])


def _windows(cfg):
    data = DataFiles.open(cfg.data.path)
    splits = training_splits(data, cfg.data)
    return data, splits, training_windows(data, splits, cfg.data, cfg.model)


def test_windows_say_which_games_the_action_head_learns(files, tmp_path):
    cfg = _cfg(files, tmp_path / "run", "data.unmodelled_policies=[random]")
    data, splits, (train_set, val_set, _) = _windows(cfg)
    for windows, ids in ((train_set, splits["train"]), (val_set, splits["val"])):
        expected = data.table["policy_id"][ids] != "random"
        assert np.array_equal(windows.actions_modelled, expected) and expected.any() and not expected.all()
        batch = windows.get_batch(np.arange(len(windows)))
        rows = windows.plan.rows
        assert np.array_equal(batch["actions_modelled"].numpy(), expected[rows])
    _, _, (plain, _, _) = _windows(_cfg(files, tmp_path / "run"))  # the default: every action is learned
    assert plain.actions_modelled is None and "actions_modelled" not in plain.get_batch([0])


@pytest.mark.parametrize(("policies", "message"), [
    ("[radnom]", r"names \['radnom'\], which played no game of .*policy ids: \['greedy', 'random'\]"),
    ("[greedy, random]", r"leaves the action head no training game .*drop one of them"),
])
def test_a_choice_that_models_nothing_or_names_no_policy_is_refused(files, tmp_path, policies, message):
    with pytest.raises(ConfigError, match=message):
        _windows(_cfg(files, tmp_path / "run", f"data.unmodelled_policies={policies}"))
    with pytest.raises(ConfigError, match="empty id"):
        _cfg(files, tmp_path / "run", "data.unmodelled_policies=['']").validate()


def test_the_command_line_refuses_a_policy_no_game_was_played_by(files, tmp_path, capsys):
    before = [p.read_bytes() for p in files]
    words = ["--data", str(files[0]), "--data", str(files[1]), "--out", str(tmp_path / "run"), *TINY,
             "data.unmodelled_policies=[radnom]"]
    assert command_status(T.main, words) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.unmodelled_policies names ['radnom']" in err[0]
    assert [p.read_bytes() for p in files] == before and not (tmp_path / "run").exists()


def test_unmodelled_windows_train_views_but_not_the_action_head(files, tmp_path):
    cfg = _cfg(files, tmp_path / "run", "data.unmodelled_policies=[random]", "train.max_steps=3")
    T.train(cfg)
    model = load_checkpoint(tmp_path / "run", which="latest").model
    _, _, (train_set, val_set, _) = _windows(cfg)
    unmodelled = np.flatnonzero(~train_set.actions_modelled[train_set.plan.rows])[:16]
    batch = train_set.get_batch(unmodelled)
    model.train()

    def grads(batch):
        model.zero_grad()
        loss, stats = model.loss(batch)
        loss.backward()
        named = [(n, p.grad) for n, p in model.named_parameters() if p.grad is not None]
        action = [g for n, g in named if n.startswith("action_head.")]
        return stats, action, [g for n, g in named if not n.startswith("action_head.")]

    stats, action_grads, other_grads = grads(batch)
    assert action_grads and not any(g.any() for g in action_grads)
    assert stats["action_ce"] == 0 and torch.isnan(stats["action_acc"])
    assert any(g.any() for g in other_grads)  # the views still train the model
    # the same windows, their actions modelled: the action head learns from them
    stats, action_grads, _ = grads({k: v for k, v in batch.items() if k != "actions_modelled"})
    assert any(g.any() for g in action_grads) and stats["action_ce"] > 0
    # validation: the action accuracy is over the modelled windows alone, the loss over all
    device = torch.device("cpu")
    everything = np.arange(len(val_set))
    mixed = T.evaluate_split(model, val_set, everything, cfg, device, batch_size=8)
    modelled = np.flatnonzero(val_set.actions_modelled[val_set.plan.rows])
    alone = T.evaluate_split(model, val_set, modelled, cfg, device, batch_size=8)
    assert mixed["action_acc"] == pytest.approx(alone["action_acc"], rel=1e-6)
    assert not np.isnan(mixed["loss"]) and mixed["view_ce"] != pytest.approx(alone["view_ce"], rel=1e-6)


def test_the_pipeline_learns_no_action_of_its_random_play_unless_told(files):
    assert training_config([], seed=0, explore_policy=EXPLORE_POLICY).data.unmodelled_policies == ("random",)
    assert training_config([], seed=0).data.unmodelled_policies == ()
    told = training_config(["data.unmodelled_policies=[greedy]"], seed=0, explore_policy=EXPLORE_POLICY)
    assert told.data.unmodelled_policies == ("greedy",)
    every = training_config(["data.unmodelled_policies=[]"], seed=0, explore_policy=EXPLORE_POLICY)
    assert every.data.unmodelled_policies == ()  # the pipeline as it was: random play's actions learned
