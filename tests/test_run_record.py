"""A checkpoint's typed record (meta.json): every schema reads, a rewrite loses nothing, bad input
is refused naming the file, and the shipped record names its files without this machine's paths."""

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from rpg_env.record import record
from rpg_worldmodel.checkpoint import load_checkpoint, read_checkpoint_record
from rpg_worldmodel.evaluation.baselines import BASELINES_FILE
from rpg_worldmodel.evaluation.episodes import is_training_file, training_files
from rpg_worldmodel.run_record import (
    CHECKPOINT_VERSION,
    CheckpointError,
    read_record,
    write_record,
)
from rpg_worldmodel.shipped import pretrained_path

SHIPPED_META = pretrained_path() / "meta.json"


def _current() -> dict:
    """The shipped model's meta.json: a complete record of the current schema."""
    return json.loads(SHIPPED_META.read_text())


def _as_schema(version: int) -> dict:
    """The shipped record as schema ``version`` wrote it: without what later schemas added."""
    meta = _current()
    model, train = meta["config"]["model"], meta["config"]["train"]
    if version < 11:
        del model["sample_floor"]
    if version < 10:
        del model["map_reach"]
    if version < 9:
        del model["layer"], model["srwm_heads"]
    if version < 8:
        del model["sample_doubt"], model["refiner_views"]
    if version < 7:
        for key in ("memory_steps", "map_size", "refiner_layers", "train_window"):
            model.pop(key, None)
    if version < 6:
        del train["init_from"]
    if version < 5:
        for key in ("memory_map", "move_rules", "move_deltas", "blocking_kinds"):
            del model[key]
    if version < 4:
        del model["action_frames"]
    if version < 3:
        one = meta["data"].pop("files")[0]
        meta["data"].update(path=one["path"], fingerprint=one["fingerprint"])
    if version < 2:
        for key in ("position", "reward_head", "reward_values", "entered_rewards"):
            del model[key]
        del train["reward_loss_weight"]
    meta["version"] = version
    return meta


@pytest.mark.parametrize("version", range(1, CHECKPOINT_VERSION + 1))
def test_every_schema_reads_as_its_model_was(tmp_path, version):
    file = tmp_path / "meta.json"
    file.write_text(json.dumps(_as_schema(version)))
    rec = read_record(file)
    assert rec.migrated_from == (None if version == CHECKPOINT_VERSION else version)
    assert rec.step == 1200 and rec.config.train.init_from == "" and rec.init_from is None
    model = rec.config.model
    assert model.memory_map == model.move_rules == (version >= 5)
    assert model.action_frames == (5 if version >= 4 else 0)
    assert (model.layer, model.srwm_heads) == ("attention", 1)
    assert (model.position, model.reward_head) == (("rope", True) if version >= 2 else ("learned", False))
    assert [(f.path, f.fingerprint) for f in rec.data.files] == [("dqn.h5", _current()["data"]["files"][0]
                                                                  ["fingerprint"])]
    assert len(rec.splits["train"]) == 1200 and rec.data.env_kwargs["max_turns"] == 100


def test_an_interim_schema_5_record_is_refused(tmp_path):
    meta = _as_schema(5)
    del meta["config"]["model"]["move_rules"]
    file = tmp_path / "meta.json"
    file.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"meta.json is a schema-5 checkpoint from before the movement"):
        read_record(file)


def test_a_rewrite_keeps_every_field_and_unknown_keys(tmp_path):
    meta = {**_as_schema(4), "notes": {"by": "hand"}}
    (tmp_path / "old.json").write_text(json.dumps(meta))
    old = read_record(tmp_path / "old.json")
    assert old.extra == {"notes": {"by": "hand"}} and old.shipped["weights"] == "float16"
    write_record(old, tmp_path / "new.json")
    written = json.loads((tmp_path / "new.json").read_text())
    assert written["version"] == CHECKPOINT_VERSION and "migrated_from" not in written
    assert written["notes"] == {"by": "hand"} and written["config"] == old.config.to_dict()
    assert written["data"] == _current()["data"] and written["splits"] == _current()["splits"]
    new = read_record(tmp_path / "new.json")
    assert new == dataclasses.replace(old, migrated_from=None)


def _broken(meta: dict) -> list[tuple[str, object]]:
    """(what is wrong, the meta.json text or document) cases and the message each must give."""
    no_split = {k: v for k, v in meta.items() if k != "splits"}
    bad_config = copy.deepcopy(meta)
    bad_config["config"]["model"]["width"] = -1
    bad_files = {**meta, "data": {**meta["data"], "files": [{"num_episodes": "many"}]}}
    return [("{not json", "is not valid JSON"), ([1, 2], "is not an rpg_worldmodel checkpoint"),
            ({**meta, "format": "other"}, "is not an rpg_worldmodel checkpoint"),
            ({**meta, "version": CHECKPOINT_VERSION + 1}, "newer rpg_worldmodel.*upgrade"),
            (no_split, "meta.json records no 'splits'.*restore the checkpoint"),
            (bad_config, "meta.json holds an unusable config.*model.width"),
            (bad_files, "meta.json holds a malformed record.*many")]


@pytest.mark.parametrize("case", range(7))
def test_a_broken_record_is_refused_naming_the_file(tmp_path, case):
    document, message = _broken(_current())[case]
    file = tmp_path / "meta.json"
    file.write_text(document if isinstance(document, str) else json.dumps(document))
    with pytest.raises(CheckpointError, match=message):
        read_record(file)
    with pytest.raises(CheckpointError, match="meta.json" if case else "not valid JSON"):
        load_checkpoint(tmp_path)


def test_the_shipped_record_is_current_and_names_its_files_only(tmp_path, monkeypatch):
    loaded = load_checkpoint("pretrained")
    assert loaded.record.migrated_from is None and loaded.step == loaded.record.step == 1200
    assert loaded.record == read_checkpoint_record("pretrained")
    assert _current()["version"] == CHECKPOINT_VERSION
    for name in ("meta.json", BASELINES_FILE):
        assert "/work/" not in (pretrained_path() / name).read_text()
    (trained,) = training_files(loaded.record)
    assert trained.path is None and trained.name == "dqn.h5" and trained.num_episodes == 1500
    # A file of that name here is another recording: known by content, not by its name.
    monkeypatch.chdir(tmp_path)
    record("random", tmp_path / "dqn.h5", 2, seed=0, num_envs=2, mode="w", progress=False)
    assert not is_training_file(loaded.record, "dqn.h5")


def test_shipping_names_the_files_and_says_where_it_came_from():
    rec = read_checkpoint_record("pretrained")
    files = tuple(dataclasses.replace(f, path=f"/runs/x/{f.path}") for f in rec.data.files)
    prov = {**rec.provenance, "data": {**rec.provenance["data"], "files": [f.to_dict() for f in files]}}
    located = dataclasses.replace(rec, data=dataclasses.replace(rec.data, files=files), provenance=prov)
    assert [f.location for f in files] == [Path("/runs/x/dqn.h5")]
    shipped = located.shipped_as("run/checkpoints/step_00001200", "float16")
    assert [f.path for f in shipped.data.files] == ["dqn.h5"]
    assert [f["path"] for f in shipped.provenance["data"]["files"]] == ["dqn.h5"]
    assert shipped.shipped == {"from": "run/checkpoints/step_00001200", "weights": "float16"}
    assert (shipped.config.data.path, shipped.config.out_dir) == ("dqn.h5", "run")
    assert dataclasses.replace(shipped.config, data=rec.config.data, out_dir=rec.config.out_dir) == rec.config
