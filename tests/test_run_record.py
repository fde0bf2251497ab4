"""A checkpoint's typed record (meta.json): the current schema reads and a rewrite loses nothing,
every older schema is refused in one line saying why, bad input is refused naming the file, and
the shipped record names its files without this machine's paths."""

import copy
import dataclasses
import json
import re
from pathlib import Path

import pytest

from rpg_env.record import record
from rpg_worldmodel.checkpoint import load_checkpoint, read_checkpoint_record
from rpg_worldmodel.evaluation.baselines import BASELINES_FILE
from rpg_worldmodel.evaluation.episodes import is_training_file, training_files
from rpg_worldmodel.run_record import (
    CHECKPOINT_VERSION,
    OLDEST_READABLE,
    CheckpointError,
    read_record,
    write_record,
)
from rpg_worldmodel.shipped import pretrained_path

SHIPPED_META = pretrained_path() / "meta.json"
#: What schema 12 took out of the model's config: the game's movement and reward tables.
TOLD = {"move_rules": True, "entered_rewards": [0.0, -1.0, 10.0, -10.0, 5.0, 0.0],
        "move_deltas": [-1, 0, 1, 0, 0, -1, 0, 1], "blocking_kinds": [1, 5]}


def _current() -> dict:
    """A complete record of the current schema: the shipped model's meta.json, less the settings
    schema 12 removed where it still holds them (a model shipped at schema 11)."""
    meta = json.loads(SHIPPED_META.read_text())
    for key in TOLD:
        meta["config"]["model"].pop(key, None)
    meta["config"]["model"].setdefault("end_head", False)  # a model shipped before the end head (schema 13)
    meta["version"] = CHECKPOINT_VERSION
    return meta


def _as_schema(version: int) -> dict:
    """The current record as schema ``version`` wrote it: without what later schemas added, and
    from 5 to 11 with the game's movement table its model was told."""
    meta = _current()
    model, train = meta["config"]["model"], meta["config"]["train"]
    if version < 15:
        model.pop("turns", None)
    if version < 14:
        model.pop("end_head", None)
    if version < 13:
        model.pop("extent_prior", None)
    if 5 <= version < 12:
        model.update(TOLD)
    if version < 11:
        del model["sample_floor"]
    if version < 10:
        model.pop("map_reach", None)
    if version < 9:
        del model["layer"], model["srwm_heads"]
    if version < 8:
        model.pop("sample_doubt", None)
        del model["refiner_views"]
    if version < 7:
        for key in ("memory_steps", "map_size", "refiner_layers", "train_window"):
            model.pop(key, None)
    if version < 6:
        del train["init_from"]
    if version < 4:
        del model["action_frames"]
    if version < 3:
        one = meta["data"].pop("files")[0]
        meta["data"].update(path=one["path"], fingerprint=one["fingerprint"])
    if version < 2:
        for key in ("position", "reward_head", "reward_values"):
            del model[key]
        train.pop("reward_loss_weight", None)
    meta["version"] = version
    return meta


def _read_record_of(meta: dict, folder: Path):
    """``meta`` as read from a meta.json in ``folder``."""
    (folder / "other.json").write_text(json.dumps(meta))
    return read_record(folder / "other.json")


def test_the_current_schema_reads_and_round_trips(tmp_path):
    file = tmp_path / "meta.json"
    file.write_text(json.dumps(_current()))
    rec = read_record(file)
    assert not hasattr(rec, "migrated_from")
    # the shipped model is its run's step 4,800: 1,200 of the whole model, then 3,600 of the refiner alone
    assert rec.step == 4800 and rec.config.train.init_from == "" and rec.init_from is None
    model = rec.config.model
    assert model.memory_map and model.action_frames == 5
    assert (model.layer, model.srwm_heads) == ("attention", 1)
    assert (model.position, model.reward_head) == ("rope", True)
    assert not any(hasattr(model, key) for key in TOLD)
    files = _current()["data"]["files"]  # the expert's games and the games of random play, named only
    assert [(f.path, f.fingerprint) for f in rec.data.files] == [(e["path"], e["fingerprint"]) for e in files]
    assert sorted(f.path for f in rec.data.files) == ["dqn.h5", "explore.h5"]
    assert len(rec.splits["train"]) == 1200 + 240 and rec.data.env_kwargs["max_turns"] == 100
    write_record(rec, tmp_path / "again.json")
    assert read_record(tmp_path / "again.json") == rec


def test_schema_12_reads_as_a_model_without_the_extent_prior(tmp_path):
    """Schema 12 came just before the extent prior: its record reads, its model without it."""
    rec = _read_record_of(_as_schema(12), tmp_path)
    assert rec.config.model.extent_prior is False
    assert rec.config.model.memory_map and rec.step == 4800
    current = _read_record_of(_current(), tmp_path).config.model
    assert rec.config.model.end_head is False  # nor an end head (schema 14)
    same = dataclasses.replace(rec.config.model, extent_prior=current.extent_prior, end_head=current.end_head)
    assert same == current


def test_schema_13_reads_as_a_model_without_the_end_head(tmp_path):
    """Schema 13 came just before the end head: its record reads, its model without one; a current
    record that leaves the setting out gets the default, an end head (the shipped model has one: a
    treasurehunt game never ends, and it learned so)."""
    old = _as_schema(13)
    assert "end_head" not in old["config"]["model"]
    assert _read_record_of(old, tmp_path).config.model.end_head is False
    current = {**old, "version": CHECKPOINT_VERSION}
    assert _read_record_of(current, tmp_path).config.model.end_head is True
    assert read_checkpoint_record("pretrained").config.model.end_head is True
    assert load_checkpoint("pretrained").model.end_head is not None


@pytest.mark.parametrize("version", range(1, OLDEST_READABLE))
def test_every_older_schema_is_refused_in_one_line_saying_why(tmp_path, version):
    """Schemas 1..11 were told the game's movement table, reward table or agent placement (or came
    before them): this code cannot rebuild their models, and says so rather than load them wrong."""
    (tmp_path / "meta.json").write_text(json.dumps(_as_schema(version)))
    why = (rf"{re.escape(str(tmp_path / 'meta.json'))} is a checkpoint of schema {version}, whose model was "
           rf"told the game's movement table.*cannot rebuild it: retrain it")
    with pytest.raises(CheckpointError, match=why) as refused:
        read_record(tmp_path / "meta.json")
    assert "\n" not in str(refused.value)
    with pytest.raises(CheckpointError, match=why):
        load_checkpoint(tmp_path)


def test_a_removed_setting_reads_as_nothing_at_the_value_the_code_runs_with(tmp_path):
    meta = _current()
    meta["config"]["model"].update(move_rules=False, entered_rewards=[], move_deltas=[], blocking_kinds=[])
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    assert read_record(tmp_path / "meta.json").config == _read_record_of(_current(), tmp_path).config
    meta["config"]["model"]["move_rules"] = True  # a current record that says it was told the table
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"meta.json holds an unusable config.*model.move_rules=True "
                                              r"can no longer be set"):
        read_record(tmp_path / "meta.json")


def test_a_rewrite_keeps_every_field_and_unknown_keys(tmp_path):
    meta = {**_current(), "notes": {"by": "hand"}}
    (tmp_path / "old.json").write_text(json.dumps(meta))
    old = read_record(tmp_path / "old.json")
    assert old.extra == {"notes": {"by": "hand"}} and old.shipped["weights"] == "float16"
    write_record(old, tmp_path / "new.json")
    written = json.loads((tmp_path / "new.json").read_text())
    assert written["version"] == CHECKPOINT_VERSION and "migrated_from" not in written
    assert written["notes"] == {"by": "hand"} and written["config"] == old.config.to_dict()
    assert written["data"] == _current()["data"] and written["splits"] == _current()["splits"]
    new = read_record(tmp_path / "new.json")
    assert new == old


def _broken(meta: dict) -> list[tuple[str, object]]:
    """(what is wrong, the meta.json text or document) cases and the message each must give."""
    no_split = {k: v for k, v in meta.items() if k != "splits"}
    bad_config = copy.deepcopy(meta)
    bad_config["config"]["model"]["width"] = -1
    bad_files = {**meta, "data": {**meta["data"], "files": [{"num_episodes": "many"}]}}
    return [("{not json", "is not valid JSON"), ([1, 2], "is not an rpg_worldmodel checkpoint"),
            ({**meta, "format": "other"}, "is not an rpg_worldmodel checkpoint"),
            ({**meta, "version": CHECKPOINT_VERSION + 1}, "newer rpg_worldmodel.*upgrade"),
            ({**meta, "version": "twelve"}, "schema version 'twelve', which no rpg_worldmodel wrote"),
            (no_split, "meta.json records no 'splits'.*restore the checkpoint"),
            (bad_config, "meta.json holds an unusable config.*model.width"),
            (bad_files, "meta.json holds a malformed record.*many")]


@pytest.mark.parametrize("case", range(8))
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
    assert loaded.step == loaded.record.step == 4800
    assert loaded.record == read_checkpoint_record("pretrained")
    assert _current()["version"] == CHECKPOINT_VERSION
    for name in ("meta.json", BASELINES_FILE):
        assert "/work/" not in (pretrained_path() / name).read_text()
    trained = {f.name: f for f in training_files(loaded.record)}  # the expert's games and random play
    assert sorted(trained) == ["dqn.h5", "explore.h5"] and all(f.path is None for f in trained.values())
    assert (trained["dqn.h5"].num_episodes, trained["explore.h5"].num_episodes) == (1500, 300)
    # A file of that name here is another recording: known by content, not by its name.
    monkeypatch.chdir(tmp_path)
    record("random", tmp_path / "dqn.h5", 2, seed=0, num_envs=2, mode="w", progress=False)
    assert not is_training_file(loaded.record, "dqn.h5")


def test_shipping_names_the_files_and_says_where_it_came_from(tmp_path):
    rec = _read_record_of(_current(), tmp_path)
    files = tuple(dataclasses.replace(f, path=f"/runs/x/{f.path}") for f in rec.data.files)
    prov = {**rec.provenance, "data": {**rec.provenance["data"], "files": [f.to_dict() for f in files]}}
    located = dataclasses.replace(rec, data=dataclasses.replace(rec.data, files=files), provenance=prov)
    names = [f.path.rpartition("/")[2] for f in files]
    assert sorted(names) == ["dqn.h5", "explore.h5"]
    assert [f.location for f in files] == [Path("/runs/x") / name for name in names]
    shipped = located.shipped_as("run/checkpoints/step_00001200", "float16")
    assert [f.path for f in shipped.data.files] == names
    assert [f["path"] for f in shipped.provenance["data"]["files"]] == names
    assert shipped.shipped == {"from": "run/checkpoints/step_00001200", "weights": "float16"}
    assert (shipped.config.data.path, shipped.config.out_dir) == (names, "run")
    assert dataclasses.replace(shipped.config, data=rec.config.data, out_dir=rec.config.out_dir) == rec.config
