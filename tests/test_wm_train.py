"""World-model training end to end on a small recorded file: windows, splits, run folder,
exact resume, checkpoint safety and mismatch errors."""

import csv
import json

import numpy as np
import pytest
import torch

from rpg_base.cli import command_status
from rpg_base.errors import InputError
from rpg_base.typed_config.values import ConfigError
from rpg_env.record import record
from rpg_env.trajectories.reader import TrajectoryFile
from rpg_env.trajectories.splits import split_episodes
from rpg_worldmodel import train as T
from rpg_worldmodel.checkpoint import (
    BEST_FILE,
    choose_checkpoint,
    load_checkpoint,
    load_model_weights,
    mark_best,
    read_checkpoint_record,
    resolve_checkpoint,
)
from rpg_worldmodel.config import ModelConfig, load_world_model_config
from rpg_worldmodel.data.sources import check_data_matches
from rpg_worldmodel.data.stores import NO_ACTION
from rpg_worldmodel.data.windows import EpochBatchSampler, TrajectoryWindows
from rpg_worldmodel.evaluation.episodes import EvalSet
from rpg_worldmodel.evaluation.run import Evaluation
from rpg_worldmodel.evaluation.scoring import iter_windows
from rpg_worldmodel.models.world_model import WorldModel
from rpg_worldmodel.run_record import CheckpointError, DataFile

TINY = ["model.width=24", "model.num_heads=2", "model.num_layers=1", "model.num_frames=3",
        "train.batch_size=8", "train.warmup_steps=2", "train.log_every=1", "train.eval_every=3",
        "train.checkpoint_every=3", "train.progress=false", "data.max_val_windows=64", "train.num_threads=1",
        "train.refiner_stage=0"]  # the refiner stage: tests/test_wm_refiner_stage.py


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("wm_train")
    greedy, small_view = root / "greedy.h5", root / "small_view.h5"
    record("greedy", greedy, 12, seed=0, num_envs=6, mode="w", progress=False,
           env_kwargs={"max_turns": 30})
    record("greedy", small_view, 3, seed=1, num_envs=3, mode="w", progress=False,
           env_kwargs={"max_turns": 10, "vision_radius": 3})
    return greedy, small_view


def _cfg(path, out, *extra):
    return load_world_model_config(None, [*TINY, f"data.path={path}", f"out_dir={out}", *extra])


def _rows(run_dir, split="train"):
    with open(run_dir / "metrics.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r["split"] == split]


def test_windows_match_the_reader_and_stay_inside_their_episodes(files):
    greedy, _ = files
    with TrajectoryFile(greedy) as tf:
        episodes = split_episodes(tf)["val"]
        ds = TrajectoryWindows(greedy, episodes, num_frames=3)
        # starts 0 .. L-3: the last window ends on the game's final view
        assert len(ds) == sum(int(tf.episodes["length"][e]) - 3 + 1 for e in episodes)
        for i in (0, len(ds) // 2):
            item = ds[i]
            ref = tf.window(int(item["episode"]), int(item["start"]), 4)
            np.testing.assert_array_equal(item["views"], ref["obs"][:4])  # views s..s+3
            np.testing.assert_array_equal(item["actions"], ref["actions"])  # actions s..s+3
            assert item["agent_id"] == tf.episodes["agent_id"][item["episode"]]
        last = ds[len(ds) - 1]
        game = tf.episode(int(last["episode"]))
        np.testing.assert_array_equal(last["views"], game["obs"][-4:])  # ... through the final view
        np.testing.assert_array_equal(last["actions"], [*game["actions"][-3:], NO_ACTION])
        np.testing.assert_array_equal(last["rewards"], [*game["rewards"][-3:], 0.0])
        # treasurehunt games run out of turns: none ends
        assert not last["ends"].any() and game["truncated"][-1]
        assert set(np.unique(ds.window_episode)) == set(episodes.tolist())
    batch = ds.get_batch([0, 5, len(ds) - 1])
    assert batch["views"].shape == (3, 4, 6, 9, 9) and batch["views"].dtype == torch.uint8
    np.testing.assert_array_equal(batch["actions"][1].numpy(), ds[5]["actions"])
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_training_and_evaluation_cut_the_same_windows(files):
    greedy, _ = files
    with TrajectoryFile(greedy) as tf:
        episodes = split_episodes(tf)["test"]
    ds = TrajectoryWindows(greedy, episodes, num_frames=3)
    es = EvalSet(greedy, episodes.tolist(), "test", agent_ids=np.zeros(len(episodes), np.int64))
    batches = list(iter_windows(es, 3, batch_size=50, desc="", context="full"))
    views = np.concatenate([b.views for b in batches])
    actions = np.concatenate([b.actions for b in batches])
    whole = ds.get_batch(np.arange(len(ds)))
    np.testing.assert_array_equal(views, whole["views"].numpy())  # every training window, in order
    np.testing.assert_array_equal(actions, whole["actions"].numpy())
    np.testing.assert_array_equal(episodes[np.concatenate([b.rows for b in batches])], ds.window_episode)


def test_batch_order_is_a_function_of_seed_and_step():
    full = list(EpochBatchSampler(10, 4, seed=3, start_step=0, num_steps=6))
    assert list(EpochBatchSampler(10, 4, seed=3, start_step=4, num_steps=2)) == full[4:]
    epoch0 = [i for b in full for i in b][:10]
    assert sorted(epoch0) == list(range(10))  # one permutation per epoch
    assert full != list(EpochBatchSampler(10, 4, seed=4, start_step=0, num_steps=6))


@pytest.mark.parametrize("world_size", [2, 4])
def test_each_rank_gets_its_slice_of_the_global_batch(world_size):
    whole = list(EpochBatchSampler(13, 8, seed=1, start_step=2, num_steps=5))
    ranks = [list(EpochBatchSampler(13, 8, seed=1, start_step=2, num_steps=5, rank=r, world_size=world_size))
             for r in range(world_size)]
    for step, batch in enumerate(whole):
        assert all(len(r[step]) == 8 // world_size for r in ranks)
        assert [i for r in ranks for i in r[step]] == batch  # the ranks' slices, in rank order
    with pytest.raises(ValueError, match="divisible by world_size"):
        EpochBatchSampler(13, 8, seed=1, start_step=0, num_steps=1, rank=0, world_size=3)
    with pytest.raises(ValueError, match="0 <= rank < world_size"):
        EpochBatchSampler(13, 8, seed=1, start_step=0, num_steps=1, rank=2, world_size=2)


def test_training_run_end_to_end(files, tmp_path):
    greedy, _ = files
    out = tmp_path / "run"
    result = T.train(_cfg(greedy, out, "train.max_steps=6"))
    assert result.step == 6 and result.checkpoint == out / "checkpoints" / "step_00000006"
    for name in ("config.yaml", "metrics.csv", "provenance.json", "summary.json", "tb"):
        assert (out / name).exists(), name
    assert [int(r["step"]) for r in _rows(out)] == list(range(1, 7))
    assert [int(r["step"]) for r in _rows(out, "val")] == [3, 6]
    assert load_world_model_config(out / "config.yaml").model.width == 24
    ck = load_checkpoint(out, which="latest")  # run folder -> its last checkpoint
    assert ck.step == 6 and not ck.model.training and ck.config.model.num_frames == 3
    rec = ck.record
    # The split is by game, recorded, and only the learner's streams (data.agent_id=0) are used.
    with TrajectoryFile(greedy) as tf:
        expected = split_episodes(tf)
        games = {k: set(tf.episodes["game_id"][list(v)].tolist()) for k, v in rec.splits.items()}
        assert all((tf.episodes["agent_id"][list(rec.splits[k])] == 0).all() for k in expected)
        recorded = DataFile(str(greedy.resolve()), tf.digest(), len(tf), ("greedy", "random"))
        assert rec.data.files == (recorded,)
        assert rec.data.channel_names == tuple(tf.meta["channel_names"]) and rec.data.num_episodes == len(tf)
    for k in expected:
        assert set(rec.splits[k]) == {e for e in expected[k].tolist() if e % 2 == 0}
    assert not games["train"] & games["val"] and not games["train"] & games["test"]
    assert rec.seed == 0 and "torch" in rec.versions and rec.step == 6 and rec.init_from is None
    assert rec.provenance["seed"] == 0 and rec.extra == {}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["val"]["loss"] == pytest.approx(rec.metrics["loss"])
    # The validation loss is computed on val windows only.
    val_set = TrajectoryWindows(greedy, np.array(rec.splits["val"]), ck.config.model.window)
    again = T.evaluate_split(ck.model, val_set, np.arange(len(val_set)), ck.config, torch.device("cpu"))
    assert again["loss"] == pytest.approx(rec.metrics["loss"], rel=1e-5)
    # The same seed gives the same run.
    other = T.train(_cfg(greedy, tmp_path / "run2", "train.max_steps=6"))
    assert [r["loss"] for r in _rows(tmp_path / "run2")] == [r["loss"] for r in _rows(out)]
    assert other.val == result.val
    # A run folder is never overwritten by a new run.
    with pytest.raises(ConfigError, match="already holds a run; resume it with --resume"):
        T.train(_cfg(greedy, out, "train.max_steps=6"))


@pytest.mark.parametrize("extra", [[], ["train.train_mask=random_cells"]])
def test_resume_gives_exactly_the_uninterrupted_run(files, tmp_path, extra):
    greedy, _ = files
    whole = T.train(_cfg(greedy, tmp_path / "whole", "train.max_steps=7", *extra))
    T.train(_cfg(greedy, tmp_path / "cut", "train.max_steps=7", *extra), stop_at=4)
    assert resolve_checkpoint(tmp_path / "cut", "latest").name == "step_00000004"
    # Rows logged after the last checkpoint of an interrupted run are replaced on resume.
    with open(tmp_path / "cut" / "metrics.csv", "a") as f:
        f.write("5,train,99,,,,,,,\n")
    assert command_status(T.main, ["--resume", str(tmp_path / "cut")]) == 0
    resumed = resolve_checkpoint(tmp_path / "cut", "latest")
    losses = lambda d: [(r["step"], r["loss"], r["view_ce"], r["action_ce"]) for r in _rows(d)]  # noqa: E731
    assert losses(tmp_path / "cut") == losses(tmp_path / "whole")
    a = torch.load(whole.checkpoint / "model.pt", weights_only=True)
    b = torch.load(resumed / "model.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_run_keeps_its_best_checkpoint_beside_its_last(files, tmp_path):
    greedy, _ = files
    out = tmp_path / "run"
    result = T.train(_cfg(greedy, out, "train.max_steps=9", "train.eval_every=2", "train.checkpoint_every=4",
                          "train.lr=0.05"))
    val = {int(r["step"]): float(r["loss"]) for r in _rows(out, "val")}
    assert sorted(val) == [2, 4, 6, 8, 9]
    best_step = min(val, key=val.get)
    best = json.loads((out / "checkpoints" / BEST_FILE).read_text())
    assert best["step"] == best_step and best["val_loss"] == pytest.approx(val[best_step])
    assert result.best == out / "checkpoints" / f"step_{best_step:08d}"
    assert result.checkpoint.name == "step_00000009"
    # keep_last_checkpoints=1: the last and the best are all that is left.
    kept = {p.name for p in (out / "checkpoints").glob("step_*")}
    assert kept == {result.best.name, "step_00000009"}
    ck = load_checkpoint(out)
    assert ck.step == best_step and ck.path == result.best
    assert ck.choice.startswith(str(result.best)) and ("best by validation loss" in ck.choice)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best_checkpoint"]["step"] == best_step
    # Resuming takes the last, whatever the best: a finished run has nothing left to train.
    assert load_checkpoint(out, which="latest").step == 9
    assert T.train(_cfg(greedy, out, "train.max_steps=9"), resume=out).step == 9


def test_best_falls_back_to_the_last_and_a_step_folder_is_taken_as_given(files, tmp_path):
    greedy, _ = files
    out = tmp_path / "run"
    T.train(_cfg(greedy, out, "train.max_steps=6", "train.keep_last_checkpoints=0"))
    steps = sorted(p.name for p in (out / "checkpoints").glob("step_*"))
    assert steps == ["step_00000003", "step_00000006"]  # keep_last_checkpoints=0 keeps every one
    first = out / "checkpoints" / "step_00000003"
    mark_best(first, 0.123)
    choice = choose_checkpoint(out)
    assert (choice.folder, choice.how, choice.step, choice.last_step) == (first, "best", 3, 6)
    assert "0.1230" in choice.describe() and "the last is step 6" in choice.describe()
    assert choice.chosen is None and "the best by validation loss 0.1230" in choice.describe()
    mark_best(first, 0.5, chosen="the refiner stage's result")  # not the lowest: the record says why
    choice = choose_checkpoint(out)
    assert choice.chosen == "the refiner stage's result" and choice.val_loss == 0.5
    assert "the best: the refiner stage's result; validation loss 0.5000, step 3" in choice.describe()
    (out / "checkpoints" / BEST_FILE).unlink()
    assert choose_checkpoint(out).how == "latest" and choose_checkpoint(out).step == 6
    assert choose_checkpoint(first).how == "given" and load_checkpoint(first).step == 3
    (out / "checkpoints" / BEST_FILE).write_text("{")
    with pytest.raises(CheckpointError, match=r"best.json is corrupt .* pass a step_\* folder"):
        load_checkpoint(out)


def test_init_from_fine_tunes_a_checkpoint_on_its_split(files, tmp_path):
    greedy, _ = files
    T.train(_cfg(greedy, tmp_path / "base", "train.max_steps=6", "data.split_fractions=[0.6, 0.2, 0.2]"))
    start = load_checkpoint(tmp_path / "base")
    # Zero steps of learning rate: the fine-tuned run starts, and stays, at the base's weights.
    tuned = T.train(_cfg(greedy, tmp_path / "tuned", "train.max_steps=3", "train.lr=1e-12",
                         f"train.init_from={tmp_path / 'base'}"))
    rec = read_checkpoint_record(tuned.checkpoint)
    assert rec.init_from == str(start.path)
    assert rec.config.train.init_from == str(tmp_path / "base")
    # The split is the base's (fractions 0.6, 0.2, 0.2), not the one its own 0.8, 0.1, 0.1 would
    # draw, and its config says so.
    assert rec.splits == start.record.splits
    assert rec.config.data.split_fractions == (0.6, 0.2, 0.2)
    a, b = start.model.state_dict(), load_checkpoint(tuned.checkpoint).model.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert tuned.val["loss"] == pytest.approx(start.record.metrics["loss"], rel=1e-4)
    # A fresh run of the same config (no init_from) starts elsewhere.
    fresh = T.train(_cfg(greedy, tmp_path / "fresh", "train.max_steps=3", "train.lr=1e-12"))
    c = load_checkpoint(fresh.checkpoint).model.state_dict()
    assert not all(torch.allclose(a[k], c[k], atol=1e-6) for k in a)
    # ... on its own split, so it may not be scored as a masking probe on the base's test games.
    with pytest.raises(InputError, match=r"another split .* train.init_from="):
        Evaluation(tmp_path / "base", [greedy]).masking(["none"], [fresh.checkpoint])
    # Resuming a fine-tuned run keeps where it started; that setting cannot be changed on resume.
    T.train(_cfg(greedy, tmp_path / "cut", "train.max_steps=6", f"train.init_from={tmp_path / 'base'}"),
            stop_at=3)
    with pytest.raises(CheckpointError, match="a resumed run keeps the train.init_from"):
        T.main(["--resume", str(tmp_path / "cut"), "train.init_from=/elsewhere"])
    assert command_status(T.main, ["--resume", str(tmp_path / "cut")]) == 0
    resumed = read_checkpoint_record(tmp_path / "cut", "latest")
    assert resumed.step == 6 and resumed.init_from == str(start.path)
    # Another model or other data is refused, naming what differs.
    refused = r"cannot fine-tune \(train.init_from\) .*width: 24 vs 32.*--config"
    with pytest.raises(CheckpointError, match=refused):
        T.train(_cfg(greedy, tmp_path / "wide", "model.width=32", f"train.init_from={tmp_path / 'base'}"))
    other = tmp_path / "other.h5"
    record("greedy", other, 4, seed=5, num_envs=4, mode="w", progress=False, env_kwargs={"max_turns": 30})
    with pytest.raises(CheckpointError, match=r"trained on .*greedy.h5 .* but .*other.h5 has fingerprint"):
        T.train(_cfg(other, tmp_path / "elsewhere", f"train.init_from={tmp_path / 'base'}"))
    assert not any((tmp_path / name / "checkpoints").exists() for name in ("wide", "elsewhere"))


def test_checkpoint_and_data_mismatches_name_both_sides(files, tmp_path):
    greedy, small_view = files
    out = tmp_path / "run"
    T.train(_cfg(greedy, out, "train.max_steps=3"))
    with pytest.raises(CheckpointError, match=r"width: 24 vs 32"):
        load_checkpoint(out, model_config=ModelConfig(width=32, num_heads=2, num_layers=1, num_frames=3))
    with pytest.raises(CheckpointError, match=r"num_layers: 1 vs 2"):
        load_model_weights(WorldModel(ModelConfig(width=24, num_heads=2, num_layers=2, num_frames=3)), out)
    # A data file with another view shape: training and evaluation refuse it, naming both shapes.
    with TrajectoryFile(small_view) as tf:
        with pytest.raises(ConfigError, match=r"views \(6, 7, 7\) in .*small_view.h5 but \(6, 9, 9\) in"):
            check_data_matches(load_checkpoint(out).config.model, tf.meta, data_path=small_view)
    # a model sized for other views is refused (one left at the defaults takes the file's: below)
    with pytest.raises(ConfigError, match=r"views \(6, 7, 7\) in .*small_view.h5 but \(6, 6, 6\)"):
        T.train(_cfg(small_view, tmp_path / "small", "model.view_size=6"))
    # Resuming with a changed model or another data file is refused.
    with pytest.raises(CheckpointError, match=r"model config differs .*width: 24 vs 48"):
        T.train(_cfg(greedy, out, "train.max_steps=6", "model.width=48"), resume=out)
    with pytest.raises(InputError, match=r"views \(6, 7, 7\)"):
        T.main(["--resume", str(out), f"data.path={small_view}", "train.max_steps=6"])
    other = tmp_path / "other.h5"
    record("greedy", other, 4, seed=5, num_envs=4, mode="w", progress=False, env_kwargs={"max_turns": 30})
    with pytest.raises(CheckpointError, match=r"trained on .*greedy.h5 .* but .*other.h5 has fingerprint"):
        T.main(["--resume", str(out), "--data", str(other), "train.max_steps=6"])
    # Settings a resumed run takes from its checkpoint are refused, not ignored.
    for override in ([f"out_dir={tmp_path / 'elsewhere'}"], ["data.split_fractions=[0.6, 0.2, 0.2]"],
                     ["agent_id=-1"]):
        with pytest.raises(CheckpointError, match="a resumed run keeps the"):
            T.main(["--resume", str(out), *override])
    with pytest.raises(CheckpointError, match="drop --config / --out"):
        T.main(["--resume", str(out), "--out", str(tmp_path / "elsewhere")])
    assert command_status(T.main, ["--resume", str(out), "out_dir=/nowhere"]) == 2
    assert not (tmp_path / "elsewhere").exists()


def test_weights_that_do_not_fit_name_the_tensor_and_both_shapes(files, tmp_path):
    greedy, _ = files
    out = tmp_path / "run"
    T.train(_cfg(greedy, out, "train.max_steps=3"))
    folder = resolve_checkpoint(out)
    state = torch.load(folder / "model.pt", weights_only=True)
    state["action_head.out.weight"] = torch.zeros(5, 48)  # the frame-stack head reads [its CNN, global]
    torch.save(state, folder / "model.pt")
    with pytest.raises(CheckpointError, match=r"'action_head.out.weight' has shape \(5, 48\) in the "
                                              r"checkpoint but \(4, 48\) in the model"):
        load_checkpoint(out)
    del state["action_head.out.weight"]
    torch.save(state, folder / "model.pt")
    with pytest.raises(CheckpointError, match=r"'action_head.out.weight' of shape \(4, 48\) is missing"):
        load_checkpoint(out)


def test_checkpoints_load_safely(files, tmp_path):
    greedy, _ = files
    out = tmp_path / "run"
    T.train(_cfg(greedy, out, "train.max_steps=3"))
    folder = resolve_checkpoint(out)
    # A model.pt that would run arbitrary code when unpickled is refused, not executed.
    torch.save({"weights": torch.zeros(1), "payload": _Exploit()}, folder / "model.pt")
    with pytest.raises(CheckpointError, match="cannot be loaded safely"):
        load_checkpoint(folder)
    (folder / "meta.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(folder)
    with pytest.raises(CheckpointError, match="is not a checkpoint"):
        load_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope")
    with pytest.raises(ConfigError, match=r"patch sizes that divide it: \[1, 3, 9\]"):
        T.main(["--data", str(greedy), "--out", str(tmp_path / "bad"), "model.patch_size=2"])
    assert not (tmp_path / "bad").exists()


class _Exploit:
    def __reduce__(self):
        return (print, ("pwned",))
