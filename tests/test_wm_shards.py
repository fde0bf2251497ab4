"""Training data from several files of one game, held in memory or streamed from disk: the split
by game across files, refusals, the stores' equal windows, and training, resume and evaluation
on shards."""

import json
import shutil

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from rpg_base.errors import InputError
from rpg_env.record import record
from rpg_env.trajectories.reader import TrajectoryFile
from rpg_env.trajectories.splits import split_episodes
from rpg_worldmodel import evaluate as E
from rpg_worldmodel import train as T
from rpg_worldmodel.checkpoint import load_checkpoint
from rpg_worldmodel.config import DataConfig, load_world_model_config
from rpg_worldmodel.data.shards import DataFiles, expand_paths, training_splits
from rpg_worldmodel.data.sources import DataMismatchError
from rpg_worldmodel.data.stores import StreamedEpisodes, views_nbytes
from rpg_worldmodel.data.windows import EpochBatchSampler, TrajectoryWindows, collate_batch
from rpg_worldmodel.evaluation.episodes import checkpoint_split, select_episodes, training_files
from rpg_worldmodel.run_record import CHECKPOINT_VERSION, CheckpointError, CheckpointRecord, DataFile

TINY = ["model.width=24", "model.num_heads=2", "model.num_layers=1", "model.num_frames=3",
        "train.batch_size=8", "train.warmup_steps=2", "train.log_every=1", "train.eval_every=3",
        "train.checkpoint_every=3", "train.progress=false", "data.max_val_windows=64", "train.num_threads=1",
        "train.max_steps=4", "train.refiner_stage=0"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    paths = [root / "shards" / f"part{i}.h5" for i in range(3)]
    paths[0].parent.mkdir()
    for i, path in enumerate(paths):
        record("greedy", path, 8, seed=10 + i, num_envs=4, mode="w", progress=False,
               env_kwargs={"max_turns": 30})
    other = root / "radius3.h5"
    record("greedy", other, 2, seed=0, num_envs=2, mode="w", progress=False,
           env_kwargs={"max_turns": 30, "vision_radius": 3})
    return paths, other


def test_paths_globs_and_lists(shards):
    paths, _ = shards
    pattern = str(paths[0].parent / "*.h5")
    assert expand_paths(pattern) == paths
    assert expand_paths([str(paths[2]), pattern]) == [paths[2], paths[0], paths[1]]  # each file once
    with pytest.raises(InputError, match=r"'.*nothing\*.h5' matches no file"):
        expand_paths(str(paths[0].parent / "nothing*.h5"))


def test_files_are_ordered_by_content_and_split_by_game_across_them(shards):
    paths, _ = shards
    files = DataFiles.open([str(p) for p in paths])
    again = DataFiles.open([str(p) for p in reversed(paths)])
    assert files.fingerprints == again.fingerprints == tuple(sorted(files.fingerprints))
    cfg = DataConfig(agent_id=-1)
    splits = training_splits(files, cfg)
    assert {k: v.tolist() for k, v in splits.items()} == {k: v.tolist() for k, v in
                                                          training_splits(again, cfg).items()}
    assert sorted(np.concatenate(list(splits.values())).tolist()) == list(range(len(files)))
    # A game is a (file, game id) pair: its streams share a split, whatever other files hold.
    table, split_of = files.table, np.empty(len(files), dtype=object)
    for name, ids in splits.items():
        split_of[ids] = name
    owner = np.searchsorted(files.offsets, np.arange(len(files)), side="right") - 1
    games = {}
    for i in range(len(files)):
        games.setdefault((owner[i], table["game_id"][i]), set()).add(split_of[i])
    assert all(len(s) == 1 for s in games.values()) and len(games) == 24
    # One file splits as it always did.
    with TrajectoryFile(paths[0]) as tf:
        expected = split_episodes(tf)
    one = training_splits(DataFiles.open(str(paths[0])), cfg)
    assert all(np.array_equal(one[k], expected[k]) for k in expected)


def test_files_of_another_game_or_the_same_recording_twice_are_refused(shards, tmp_path):
    paths, other = shards
    with pytest.raises(DataMismatchError, match=rf"{other} records another game than .*part\d.h5: "
                                                r"env_kwargs.vision_radius is 3 there but 4 in"):
        DataFiles.open([str(paths[0]), str(other)])
    copy = tmp_path / "copy.h5"
    shutil.copy(paths[1], copy)
    with pytest.raises(InputError, match="hold the same recording"):
        DataFiles.open([str(paths[1]), str(copy)])


def test_streamed_and_in_memory_stores_cut_the_same_windows(shards):
    paths, _ = shards
    files = DataFiles.open([str(p) for p in paths])
    ids = np.arange(1, len(files), 3)
    memory, streamed = files.store(ids, stream=False), files.store(ids, stream=True)
    assert isinstance(streamed.parts[0], StreamedEpisodes) and streamed.streamed and not memory.streamed
    a, b = TrajectoryWindows.of(memory, 3), TrajectoryWindows.of(streamed, 3)
    assert len(a) == len(b) > 0 and np.array_equal(a.window_episode, b.window_episode)
    idx = np.random.default_rng(0).permutation(len(a))[:50]
    for key, value in a.get_batch(idx).items():
        assert torch.equal(value, b.get_batch(idx)[key]), key
    # One file's store in memory has the same rows as that file read alone.
    k, local = files.locate(ids)[0]
    alone = TrajectoryWindows(files.sources[k].path, local, 3)
    n = len(alone)
    assert torch.equal(alone.get_batch(np.arange(n))["views"], a.get_batch(np.arange(n))["views"])
    lengths = files.table["length"][ids]
    assert files.views_nbytes(ids) == views_nbytes(lengths, (6, 9, 9)) == int((lengths + 1).sum()) * 486
    # DataLoader workers open the files themselves.
    sampler = EpochBatchSampler(len(b), 8, seed=0, start_step=0, num_steps=3)
    loaded = list(DataLoader(b, batch_sampler=sampler, collate_fn=collate_batch, num_workers=1))
    for batch, indices in zip(loaded, sampler, strict=True):
        assert torch.equal(batch["views"], a.get_batch(indices)["views"])


def test_shards_train_alike_from_memory_and_from_disk_and_evaluate_per_file(shards, tmp_path):
    paths, other = shards
    out = tmp_path / "memory"
    # --data takes several files; the overrides after it still count.
    assert T.main(["--data", *map(str, reversed(paths)), "--out", str(out), *TINY]) == 0
    streamed = T.train(load_world_model_config(None, [*TINY, f"data.path={paths[0].parent / '*.h5'}",
                                                      f"out_dir={tmp_path / 'disk'}",
                                                      "data.max_memory_mb=0"]))
    summary = [json.loads((d / "summary.json").read_text()) for d in (out, streamed.run_dir)]
    assert [s["data"]["streamed"] for s in summary] == [False, True] and summary[0]["data"]["files"] == 3
    assert (out / "metrics.csv").read_text().count("\n") == 1 + 4 + 2
    rows = [(d / "metrics.csv").read_text().splitlines() for d in (out, streamed.run_dir)]
    assert [r.split(",")[:9] for r in rows[0]] == [r.split(",")[:9] for r in rows[1]]  # same losses
    a = torch.load(out / "checkpoints" / "step_00000004" / "model.pt", weights_only=True)
    b = torch.load(streamed.checkpoint / "model.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)
    rec = load_checkpoint(out).record
    recorded = training_files(rec)
    assert [f.fingerprint for f in recorded] == sorted(f.fingerprint for f in recorded)
    assert {str(f.path) for f in recorded} == {str(p.resolve()) for p in paths}
    # Evaluation on one shard scores its part of the recorded test split; another file, all of it.
    shard = recorded[1]
    es = select_episodes(rec, shard.path)
    test = [i - shard.first for i in rec.splits["test"] if shard.first <= i < shard.first + 16]
    assert es.episodes == test and es.held_out and "test split recorded" in es.label
    assert not set(es.episodes) & set(shard.part(rec.splits)["train"])
    assert select_episodes(rec, other, agent_id=0).episodes == [0, 2]  # the learner's streams of 2 games
    assert E.main(["--checkpoint", str(out), "--data", str(shard.path), "--bootstrap", "20",
                   "--out", str(tmp_path / "eval")]) == 0
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["files"][str(shard.path)]["held_out"]
    # Resuming needs the same files, in any order.
    with pytest.raises(CheckpointError, match=r"it was trained on .*part\d.h5 \(fingerprint"):
        T.main(["--resume", str(out), "--data", str(paths[0]), str(paths[1]), "train.max_steps=5"])
    assert T.main(["--resume", str(out), "--data", *map(str, paths), "train.max_steps=5"]) == 0


def test_a_record_of_one_file_is_a_list_of_one_and_schema_2_is_refused():
    data = {"files": [{"path": "/runs/a.h5", "fingerprint": "f", "num_episodes": 4}], "obs_shape": [6, 9, 9],
            "channel_names": ["empty", "wall"], "action_names": ["up", "down"], "env_id": "Treasurehunt-v0",
            "env_kwargs": {}, "num_episodes": 4}
    meta = {"version": CHECKPOINT_VERSION, "step": 1, "config": {}, "data": data,
            "splits": {"train": [0], "test": [1]}}
    rec = CheckpointRecord.from_json(meta)
    assert rec.data.files == (DataFile("/runs/a.h5", "f", 4),)
    assert rec.data.num_episodes == 4 and rec.data.channel_names == ("empty", "wall")
    assert training_files(rec)[0].part(checkpoint_split(rec)) == {"train": [0], "test": [1]}
    # schema 2 recorded one data.path; its model was told the game's moves: refused, not read
    old = {**meta, "version": 2, "data": {**{k: v for k, v in data.items() if k != "files"},
                                         "path": "/runs/a.h5", "fingerprint": "f"}}
    with pytest.raises(CheckpointError, match=r"^old/meta.json is a checkpoint of schema 2, .*retrain it"):
        CheckpointRecord.from_json(old, "old/meta.json")

