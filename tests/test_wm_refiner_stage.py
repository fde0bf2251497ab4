"""The refiner stage: after the whole model, the cell refiner trains alone on the final view head,
every other weight left bit for bit, seeded, once per run."""

import numpy as np
import pytest
import torch

from rpg_env.record import record
from rpg_worldmodel import train as T
from rpg_worldmodel.checkpoint import choose_checkpoint, load_checkpoint
from rpg_worldmodel.config import load_world_model_config
from rpg_worldmodel.refiner_stage import REFINER_KEPT, REFINER_LR, REFINER_WARMUP, refiner_lr

TINY = ["model.width=24", "model.num_heads=2", "model.num_layers=1", "model.num_frames=3",
        "train.batch_size=8", "train.warmup_steps=2", "train.eval_every=4", "train.checkpoint_every=4",
        "train.progress=false", "data.max_val_windows=64", "train.num_threads=1", "train.max_steps=4",
        "train.keep_last_checkpoints=0"]


@pytest.fixture(scope="module")
def greedy(tmp_path_factory):
    path = tmp_path_factory.mktemp("refiner_stage") / "greedy.h5"
    record("greedy", path, 12, seed=0, num_envs=6, mode="w", progress=False)
    return path


def _cfg(path, out, *extra):
    return load_world_model_config(None, [*TINY, f"data.path={path}", f"out_dir={out}", *extra])


def _refiner(name: str) -> bool:
    return name.startswith("refiner.")


def test_the_stage_trains_the_refiner_alone_and_writes_the_runs_next_checkpoint(greedy, tmp_path):
    result = T.train(_cfg(greedy, tmp_path / "run", "train.refiner_stage=1.5"))
    assert result.step == 4 + 6 and result.checkpoint.name == "step_00000010"
    main, staged = (load_checkpoint(tmp_path / "run" / "checkpoints" / f"step_{s:08d}") for s in (4, 10))
    before, after = main.model.state_dict(), staged.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if not _refiner(k))
    assert any(not torch.equal(before[k], after[k]) for k in before if _refiner(k))
    # validated like any checkpoint: the view figures are the main stage's, the refiner's its own
    assert staged.record.metrics["view_ce"] == pytest.approx(main.record.metrics["view_ce"], rel=1e-6)
    assert staged.record.metrics["refiner_ce"] != main.record.metrics["refiner_ce"]
    # the run's best whatever its validation loss, and the record says why where that is not the lowest
    best = choose_checkpoint(tmp_path / "run", "best")
    lowest = staged.record.metrics["loss"] < main.record.metrics["loss"]
    assert best.step == 10 and best.chosen == (None if lowest else REFINER_KEPT)
    assert best.val_loss == pytest.approx(staged.record.metrics["loss"])
    assert ("by validation loss" if lowest else "the refiner stage's result") in best.describe()
    # seeded: the same run trains the same refiner
    again = T.train(_cfg(greedy, tmp_path / "again", "train.refiner_stage=1.5"))
    twin = load_checkpoint(again.checkpoint).model.state_dict()
    assert all(torch.equal(after[k], twin[k]) for k in after)


def test_a_finished_run_resumed_does_not_train_its_refiner_again(greedy, tmp_path):
    cfg = _cfg(greedy, tmp_path / "run", "train.refiner_stage=1")
    first = T.train(cfg)
    resumed = T.train(cfg, resume=tmp_path / "run")
    assert first.step == resumed.step == 8
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step_*")) == \
        ["step_00000004", "step_00000008"]


def test_no_stage_without_steps_a_refiner_or_a_finished_main_stage(greedy, tmp_path):
    assert T.train(_cfg(greedy, tmp_path / "none", "train.refiner_stage=0")).step == 4
    assert T.train(_cfg(greedy, tmp_path / "cells", "model.refiner_layers=0")).step == 4
    stopped = T.train(_cfg(greedy, tmp_path / "cut", "train.refiner_stage=1"), stop_at=2)
    assert stopped.step == 2  # interrupted before max_steps: the stage waits for the resumed run


def test_the_refiners_learning_rate_warms_up_then_falls_to_zero():
    rates = np.array([refiner_lr(s, 400) for s in range(400)])
    assert rates[0] == pytest.approx(REFINER_LR / REFINER_WARMUP)
    assert rates[REFINER_WARMUP - 1] == pytest.approx(REFINER_LR) == rates.max()
    assert (np.diff(rates[REFINER_WARMUP:]) <= 0).all() and rates[-1] < 1e-3 * REFINER_LR
