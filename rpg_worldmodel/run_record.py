"""What a checkpoint records besides its weights (its ``meta.json``), typed, and read and written
here only, with the schema migrations that keep every older checkpoint readable.

    RunRecord         what a run writes into each of its checkpoints: split, data, seed, versions,
                      provenance, the checkpoint its weights started from
    CheckpointRecord  a RunRecord with the checkpoint's step, config and validation metrics
    DataRecord        the training data: its files (DataFile: path, fingerprint, episodes) and game

`read_record` reads a meta.json of the current schema (`CHECKPOINT_VERSION`) or of schemas 12 to 14
(their models had no turns, 12 and 13 no end head, schema 12 no extent prior:
`migrate_older_schema`) and refuses a missing, corrupt, foreign, older or newer one with a
`CheckpointError` that names the file and says why (`check_schema`);
`write_record` writes the current schema.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rpg_base.errors import InputError
from rpg_base.provenance import json_ready
from rpg_base.typed_config.values import ConfigError
from rpg_worldmodel.config import WorldModelConfig

CHECKPOINT_FORMAT = "rpg_worldmodel.checkpoint"
#: The checkpoint schema. 12: the model learns which shift an action causes and what a step pays
#: (model.motion, the reward head's per-action view map) and places no agents by rule; schemas
#: 1..11 were told the game's movement table, reward table or agent placement (or came before
#: them) and are refused (`check_schema`): their models cannot be rebuilt by this code. 13: the
#: extent prior (model.extent_prior); a schema-12 record reads as a model without it. 14: the end head
#: (model.end_head) and windows that end on a game's final view; older records read without it. 15:
#: the turns of the view beside the shifts (model.turns, read off the files); older records read with
#: none.
CHECKPOINT_VERSION = 15
#: The oldest schema this code reads.
OLDEST_READABLE = 12

#: The keys of meta.json this version reads; any other is kept in `CheckpointRecord.extra`.
KNOWN_KEYS = ("format", "version", "step", "config", "splits", "data", "seed", "versions", "init_from",
              "provenance", "metrics", "shipped")


class CheckpointError(InputError):
    """A checkpoint that is missing, corrupt, or does not fit what it is loaded into."""


@dataclass(frozen=True)
class DataFile:
    """One training file, in the order that numbers the split's episodes."""

    path: str
    """Where the run read it (absolute); a shipped checkpoint records its bare name only."""
    fingerprint: str | None
    """Content digest (`rpg_worldmodel.data.sources.file_digest`); None: an old record lacked it."""
    num_episodes: int | None
    """How many episodes it holds (None: an old record lacked it; then it is the only file)."""
    policy_ids: tuple[str, ...] = ()
    """Who played its episodes (``"dqn"``, ``"sb3-ppo"``, ``"greedy"``)."""

    @property
    def location(self) -> Path | None:
        """Where the file was when the run read it; None when only its name is recorded (a shipped
        model's file is then recognised by its fingerprint alone, wherever it is)."""
        path = Path(self.path) if self.path else None
        return path if path is not None and path.is_absolute() else None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "fingerprint": self.fingerprint, "num_episodes": self.num_episodes,
                "policy_ids": list(self.policy_ids)}

    @classmethod
    def from_dict(cls, entry: dict[str, Any]) -> DataFile:
        size = entry.get("num_episodes")
        return cls(str(entry.get("path") or ""), entry.get("fingerprint"),
                   None if size is None else int(size), tuple(str(p) for p in entry.get("policy_ids", ())))


@dataclass(frozen=True)
class DataRecord:
    """The data a model was trained on (`rpg_worldmodel.data.shards.data_record` writes it): its files and
    the game they hold."""

    files: tuple[DataFile, ...]
    """Every training file, in the order that numbers the split's episodes."""
    obs_shape: tuple[int, ...]
    """One view, (C, V, V)."""
    channel_names: tuple[str, ...]
    """The view's channels (cell kinds), in order."""
    action_names: tuple[str, ...]
    """The actions, in order."""
    env_id: str
    """The Gymnasium id of the game that was recorded."""
    env_kwargs: dict[str, Any]
    """The game's rules: its keyword arguments (max_turns, gem_value, ...)."""
    num_episodes: int
    """Episodes of all files together."""

    def to_dict(self) -> dict[str, Any]:
        return {"files": [f.to_dict() for f in self.files], "obs_shape": list(self.obs_shape),
                "channel_names": list(self.channel_names), "action_names": list(self.action_names),
                "env_id": self.env_id, "env_kwargs": dict(self.env_kwargs), "num_episodes": self.num_episodes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataRecord:
        return cls(tuple(DataFile.from_dict(f) for f in data["files"]),
                   tuple(int(n) for n in data["obs_shape"]),
                   tuple(str(c) for c in data["channel_names"]), tuple(str(a) for a in data["action_names"]),
                   str(data["env_id"]), dict(data["env_kwargs"]), int(data["num_episodes"]))


@dataclass(kw_only=True)
class RunRecord:
    """What a run records in every checkpoint it writes besides the step, config and metrics."""

    splits: dict[str, tuple[int, ...]]
    """The episode ids of each part ("train", "val", "test"), sorted, counting over `data.files` in order."""
    data: DataRecord
    """The training data."""
    seed: int | None
    """The run's train.seed."""
    versions: dict[str, str]
    """The package versions of the session that wrote it (`package_versions`)."""
    init_from: str | None = None
    """The checkpoint folder its weights started from (train.init_from); None: random."""
    provenance: dict[str, Any] | None = None
    """The session's provenance.json (command, platform, git revision)."""


@dataclass(kw_only=True)
class CheckpointRecord(RunRecord):
    """A checkpoint's meta.json: its run's record, its step, config and validation metrics."""

    step: int
    """Optimisation steps taken."""
    config: WorldModelConfig
    """The run's config (migrated: as the model was built)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Validation loss and figures at ``step``."""
    shipped: dict[str, str] | None = None
    """A shipped model's origin: "from" (the checkpoint), "weights" (dtype)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys this version does not know, kept on rewrite."""

    @classmethod
    def of(cls, run: RunRecord, *, step: int, config: WorldModelConfig,
           metrics: dict[str, float]) -> CheckpointRecord:
        """The record of ``run``'s checkpoint at ``step``."""
        return cls(splits=run.splits, data=run.data, seed=run.seed, versions=run.versions,
                   init_from=run.init_from, provenance=run.provenance, step=int(step), config=config,
                   metrics=metrics)

    def shipped_as(self, origin: str, weights: str) -> CheckpointRecord:
        """This record as a shipped model carries it: ``shipped`` says where it came from (``origin``)
        and its weights' dtype; its data files are named, not located, in the data record, the
        provenance and the config (``data.path``; ``out_dir``: the run folder's name): the paths of
        the machine that trained it mean nothing elsewhere, and a file is recognised by its
        fingerprint."""
        files = tuple(dataclasses.replace(f, path=Path(f.path).name) for f in self.data.files)
        prov = self.provenance
        if prov is not None and isinstance(prov.get("data"), dict):
            named = [{**e, "path": Path(str(e.get("path", ""))).name} for e in prov["data"].get("files", [])]
            prov = {**prov, "data": {**prov["data"], "files": named}}
        config = copy.deepcopy(self.config)
        config.data.path = files[0].path if len(files) == 1 else [f.path for f in files]
        config.out_dir = Path(config.out_dir).name
        return dataclasses.replace(self, data=dataclasses.replace(self.data, files=files), provenance=prov,
                                   config=config, shipped={"from": origin, "weights": weights})

    def to_json(self) -> dict[str, Any]:
        """meta.json's content at the current schema."""
        meta: dict[str, Any] = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION,
                                "step": int(self.step), "config": self.config.to_dict(),
                                "splits": self.splits, "data": self.data.to_dict(), "seed": self.seed,
                                "versions": self.versions}
        optional = {"init_from": self.init_from, "provenance": self.provenance}
        meta.update({k: v for k, v in optional.items() if v is not None})
        meta["metrics"] = self.metrics
        if self.shipped is not None:
            meta["shipped"] = self.shipped
        return json_ready({**meta, **self.extra})

    @classmethod
    def from_json(cls, meta: dict[str, Any], source: str = "checkpoint") -> CheckpointRecord:
        """``meta`` of the current schema (`check_schema`) as a record; `CheckpointError` naming
        ``source`` (the meta.json) when a part is missing or malformed."""
        check_schema(meta, source)
        meta = migrate_older_schema(meta)
        try:
            config = WorldModelConfig.from_dict(meta["config"], source=source)
        except (ConfigError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{source} holds an unusable config: {exc}") from None
        try:
            return cls(splits={str(k): tuple(int(i) for i in v) for k, v in meta["splits"].items()},
                       data=DataRecord.from_dict(meta["data"]), seed=meta.get("seed"),
                       versions=dict(meta.get("versions") or {}), init_from=meta.get("init_from"),
                       provenance=meta.get("provenance"), step=int(meta["step"]), config=config,
                       metrics=dict(meta.get("metrics") or {}), shipped=meta.get("shipped"),
                       extra={k: v for k, v in meta.items() if k not in KNOWN_KEYS})
        except KeyError as exc:
            raise CheckpointError(f"{source} records no {exc.args[0]!r}: it was edited or is corrupt; "
                                  f"retrain, or restore the checkpoint") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"{source} holds a malformed record ({exc}): it was edited or is corrupt; "
                                  f"retrain, or restore the checkpoint") from None


def check_schema(meta: dict[str, Any], source: Path | str = "checkpoint") -> None:
    """Nothing for ``meta`` of a schema this code reads (`OLDEST_READABLE` .. `CHECKPOINT_VERSION`);
    a `CheckpointError` in one line that says why for any other."""
    version = meta.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CheckpointError(f"{source} has checkpoint schema version {version!r}, which no rpg_worldmodel "
                              f"wrote (this one reads {CHECKPOINT_VERSION}); the meta.json was edited or is "
                              f"corrupt: retrain, or restore the checkpoint")
    if version > CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{source} was written by a newer rpg_worldmodel (checkpoint schema {version}; this one reads "
            f"{CHECKPOINT_VERSION}); upgrade the package to use it"
        )
    if version < OLDEST_READABLE:
        raise CheckpointError(
            f"{source} is a checkpoint of schema {version}, whose model was told the game's movement table, "
            f"reward table or agent placement (or came before them); this package's model learns them "
            f"(schema {CHECKPOINT_VERSION}) and cannot rebuild it: retrain it with python -m "
            f"rpg_worldmodel.train, or evaluate it with a revision from before schema 12 (CHANGELOG.md)"
        )


#: The model settings each older schema ran without, at the value that builds its model.
ABSENT_BEFORE = {14: {"turns": []}, 13: {"end_head": False, "turns": []},
                 12: {"extent_prior": False, "end_head": False, "turns": []}}


def migrate_older_schema(meta: dict[str, Any]) -> dict[str, Any]:
    """An older ``meta`` as this schema reads it (a copy): the parts its model did not have are off
    where the record does not set them (schema 12: no extent prior; 12 and 13: no end head; 12 to 14:
    no turns); the current schema unchanged."""
    absent = ABSENT_BEFORE.get(meta.get("version"))
    if absent is None or not isinstance(meta.get("config"), dict):
        return meta
    meta = copy.deepcopy(meta)
    model = meta["config"].setdefault("model", {})
    if isinstance(model, dict):
        for key, value in absent.items():
            model.setdefault(key, value)
    return meta


def read_record(file: Path) -> CheckpointRecord:
    """A checkpoint's meta.json ``file`` as a record (`CheckpointRecord.from_json`)."""
    try:
        meta = json.loads(file.read_text())
    except OSError as exc:
        raise CheckpointError(f"{file} cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise CheckpointError(f"{file} is not valid JSON ({exc})") from None
    kind = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
    if kind != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{file} is not an rpg_worldmodel checkpoint's record (format {kind!r}); "
                              f"pass a checkpoint written by rpg_worldmodel.train")
    return CheckpointRecord.from_json(meta, str(file))


def recorded_step(file: Path) -> int:
    """The step a meta.json ``file`` records, read without checking the rest (to name a checkpoint
    before it is loaded); -1 when it cannot be read, which `read_record` then explains."""
    try:
        return int(json.loads(file.read_text()).get("step", -1))
    except (OSError, ValueError, TypeError, AttributeError):
        return -1


def write_record(record: CheckpointRecord, file: Path) -> None:
    """Write ``record`` as meta.json ``file`` (the current schema)."""
    file.write_text(json.dumps(record.to_json(), indent=1))
