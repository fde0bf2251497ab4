"""Checkpoints that are safe to load: tensors via ``torch.save`` / ``torch.load(weights_only=True)``
plus JSON, never a pickle of arbitrary objects.

Layout of one checkpoint (a folder, written to a temporary name and renamed, so a crash never
leaves a half-written checkpoint under the final name)::

    checkpoints/step_00002000/
        model.pt      model state_dict (tensors only)
        training.pt   optimizer / scheduler / grad-scaler state, RNG states (tensors and numbers)
        meta.json     config, step, split episode ids, data files (paths, fingerprints), seed, versions
    checkpoints/latest.json   {"name": "step_00002000", "step": 2000}
    checkpoints/best.json     {"name": "step_00001600", "step": 1600, "val_loss": 0.4521}

A run folder names its best checkpoint (lowest held-out validation loss) and its last one. What
reads a model (evaluate, the imagined env, play, the pipeline) takes the best by default; resuming
takes the last. `resolve_checkpoint` says which it took.

Resuming from a checkpoint is `rpg_worldmodel.resume`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rpg_env.errors import InputError
from rpg_env.provenance import portable_path
from rpg_worldmodel.config import ConfigError, ModelConfig, WorldModelConfig
from rpg_worldmodel.models.world_model import WorldModel
from rpg_worldmodel.shipped import PRETRAINED_NAME, pretrained_path

CHECKPOINT_FORMAT = "rpg_worldmodel.checkpoint"
#: The checkpoint schema. 2 added rotary positions and the reward head (model.position,
#: model.reward_head, model.reward_values, train.reward_loss_weight); 3 records the training
#: data as a list of files (``data.files``: path, fingerprint, num_episodes each), the split's
#: episode ids counting over all of them in that order (one file: its own ids); 4 added the
#: frame-stack action head (model.action_frames; older checkpoints have the linear head, 0); 5 the
#: memory map and the movement table (model.memory_map, model.move_rules, model.move_deltas,
#: model.blocking_kinds; older ones have neither); 6 fine-tuning (train.init_from; older runs
#: started from random weights).
CHECKPOINT_VERSION = 6
#: How a checkpoint of an older schema is read: the config values it lacked, as its model was
#: (schema 2's one data file becomes a list of one by `migrate`).
MIGRATIONS: dict[int, dict[str, dict[str, Any]]] = {
    1: {"model": {"position": "learned", "reward_head": False, "reward_values": []}},
    2: {},
    3: {"model": {"action_frames": 0}},
    4: {"model": {"memory_map": False, "move_rules": False}},
    5: {"train": {"init_from": ""}},
}
MODEL_FILE, TRAINING_FILE, META_FILE, LATEST_FILE = "model.pt", "training.pt", "meta.json", "latest.json"
BEST_FILE = "best.json"
STEP_PREFIX = "step_"


class CheckpointError(InputError):
    """A checkpoint that is missing, corrupt, or does not fit what it is loaded into."""


@dataclass
class LoadedCheckpoint:
    """A loaded checkpoint: ``model`` in eval mode on ``map_location``, its ``config``, and ``meta``
    (``splits`` {"train","val","test"} episode ids, ``data`` {path, fingerprint, obs_shape, ...},
    ``seed``, ``step``, ``versions``, ``provenance``, ``metrics``)."""

    model: WorldModel
    config: WorldModelConfig
    meta: dict[str, Any]
    path: Path
    choice: str = ""  # which checkpoint of a run folder was taken and why (`Choice.describe`)

    @property
    def step(self) -> int:
        return int(self.meta["step"])


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return value


def save_checkpoint(
    directory: str | os.PathLike,
    *,
    model: torch.nn.Module,
    config: WorldModelConfig,
    step: int,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    extra: dict[str, Any] | None = None,
    training_state: dict[str, Any] | None = None,
) -> Path:
    """Write ``directory/step_{step:08d}`` atomically and point ``latest.json`` at it; returns its path.

    ``extra`` (JSON-ready: splits, data fingerprint, provenance, metrics...) is merged into
    meta.json. ``training_state`` holds further tensors/numbers for exact resume (RNG states,
    grad-scaler state); it is stored beside the optimizer and scheduler states.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"step_{int(step):08d}"
    final, tmp = directory / name, directory / f".{name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    torch.save(model.state_dict(), tmp / MODEL_FILE)
    training: dict[str, Any] = dict(training_state or {})
    if optimizer is not None:
        training["optimizer"] = optimizer.state_dict()
    if scheduler is not None:
        training["scheduler"] = scheduler.state_dict()
    if training:
        torch.save(training, tmp / TRAINING_FILE)
    meta = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "step": int(step),
        "config": config.to_dict(),
        **_json_ready(extra or {}),
    }
    (tmp / META_FILE).write_text(json.dumps(meta, indent=1))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    _write_pointer(directory / LATEST_FILE, {"name": name, "step": int(step)})
    return final


def _write_pointer(file: Path, record: dict[str, Any]) -> None:
    """Write a small JSON pointer atomically (a crash leaves the old one or the new one)."""
    tmp = file.with_name(f".{file.name}.tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(file)


def _read_pointer(file: Path) -> dict[str, Any]:
    try:
        record = json.loads(file.read_text())
        record["name"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{file} is corrupt ({exc!r}); pass a step_* folder instead") from None
    return record


def mark_best(checkpoint: Path, val_loss: float) -> None:
    """Name ``checkpoint`` (a ``step_*`` folder) its run's best, with its validation loss."""
    meta = json.loads((checkpoint / META_FILE).read_text())
    _write_pointer(checkpoint.parent / BEST_FILE,
                   {"name": checkpoint.name, "step": int(meta["step"]), "val_loss": float(val_loss)})


def best_val_loss(directory: str | os.PathLike) -> float:
    """The validation loss of the best checkpoint in ``directory`` (``inf`` before the first)."""
    file = Path(directory) / BEST_FILE
    return float(_read_pointer(file).get("val_loss", float("inf"))) if file.is_file() else float("inf")


def prune_checkpoints(directory: str | os.PathLike, keep_last: int) -> list[Path]:
    """Delete all ``step_*`` folders of ``directory`` but the ``keep_last`` newest and the best
    (``keep_last`` 0: keep all); returns what was deleted. The pointers are written before, so
    they never name a deleted folder."""
    directory = Path(directory)
    if keep_last <= 0:
        return []
    steps = sorted(p for p in directory.glob(f"{STEP_PREFIX}*") if (p / META_FILE).is_file())
    keep = {p.name for p in steps[-keep_last:]}
    for pointer in (LATEST_FILE, BEST_FILE):
        if (directory / pointer).is_file():
            keep.add(_read_pointer(directory / pointer)["name"])
    gone = [p for p in steps if p.name not in keep]
    for p in gone:
        shutil.rmtree(p)
    return gone


@dataclass(frozen=True)
class Choice:
    """The checkpoint folder a path names, and how it was chosen: ``"given"`` (a ``step_*``
    folder), ``"best"`` (the run's lowest validation loss) or ``"latest"`` (its last; also what
    ``"best"`` falls back to in a run that recorded no best)."""

    folder: Path
    how: str
    step: int
    val_loss: float | None = None
    last_step: int | None = None

    def describe(self, portable: bool = False) -> str:
        """``"RUN/checkpoints/step_00001600 (the best by validation loss 0.4521, step 1600 of 2000)"``;
        ``portable``: the folder as `portable_path` gives it, for records that travel (dream.json)."""
        folder = portable_path(self.folder) if portable else self.folder
        if self.how == "pretrained":
            return f"the shipped world model ({folder}, step {self.step})"
        if self.how == "best":
            return (f"{folder} (the best by validation loss {self.val_loss:.4f}, step {self.step}; "
                    f"the last is step {self.last_step})")
        return f"{folder} ({'as given' if self.how == 'given' else 'the last'}, step {self.step})"


def choose_checkpoint(path: str | os.PathLike, which: str = "best") -> Choice:
    """The checkpoint folder of ``path``: the folder itself or its model.pt/meta.json; for a run
    folder or its ``checkpoints/`` folder, its best (``which="best"``; the last when no best is
    recorded) or its last (``which="latest"``); ``"pretrained"``: the shipped world model."""
    if which not in ("best", "latest"):
        raise ValueError(f"which must be 'best' or 'latest', not {which!r}")
    if str(path) == PRETRAINED_NAME:
        return Choice(pretrained_path(), "pretrained", _step_of(pretrained_path()))
    p = Path(path)
    if p.is_file() and p.name in (MODEL_FILE, META_FILE, TRAINING_FILE):
        p = p.parent
    if not p.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    if (p / META_FILE).is_file():
        return Choice(p, "given", _step_of(p))
    for folder in (p, p / "checkpoints"):
        latest_file, best_file = folder / LATEST_FILE, folder / BEST_FILE
        if not latest_file.is_file():
            continue
        latest = _read_pointer(latest_file)
        if which == "best" and best_file.is_file():
            best = _read_pointer(best_file)
            chosen = _pointed(folder, best_file, best)
            return Choice(chosen, "best", _step_of(chosen), float(best.get("val_loss", float("nan"))),
                          int(latest.get("step", -1)))
        chosen = _pointed(folder, latest_file, latest)
        return Choice(chosen, "latest", _step_of(chosen))
    raise CheckpointError(
        f"{str(path)!r} is not a checkpoint: expected a folder with {META_FILE} and "
        f"{MODEL_FILE}, or a run folder with checkpoints/{LATEST_FILE}"
    )


def _pointed(folder: Path, pointer: Path, record: dict[str, Any]) -> Path:
    if (folder / record["name"] / META_FILE).is_file():
        return folder / record["name"]
    raise CheckpointError(f"{pointer} points to {record['name']!r}, which has no {META_FILE}")


def _step_of(folder: Path) -> int:
    """The step a checkpoint folder holds (its meta.json's; -1 when unreadable, which `read_meta`
    then reports)."""
    try:
        return int(json.loads((folder / META_FILE).read_text()).get("step", -1))
    except (ValueError, TypeError, AttributeError):
        return -1


def resolve_checkpoint(path: str | os.PathLike, which: str = "best") -> Path:
    """The checkpoint folder of ``path`` (`choose_checkpoint`)."""
    return choose_checkpoint(path, which).folder


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """meta.json of a checkpoint (see `resolve_checkpoint` for accepted paths)."""
    folder = resolve_checkpoint(path)
    try:
        meta = json.loads((folder / META_FILE).read_text())
    except ValueError as exc:
        raise CheckpointError(f"{folder / META_FILE} is not valid JSON ({exc})") from None
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{folder} is not an rpg_worldmodel checkpoint (format {meta.get('format')!r})")
    return migrate(meta, folder)


def migrate(meta: dict[str, Any], folder: Path | str = "checkpoint") -> dict[str, Any]:
    """``meta`` of any supported schema as schema `CHECKPOINT_VERSION` reads it: an older one gets
    the config values it lacked (`MIGRATIONS`) and ``migrated_from``; an unknown one is refused."""
    version = meta.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CheckpointError(f"{folder} has checkpoint schema version {version!r}, which no rpg_worldmodel "
                              f"wrote (this one reads 1..{CHECKPOINT_VERSION}); the meta.json was edited or "
                              f"is corrupt: retrain, or restore the checkpoint")
    if version > CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{folder} was written by a newer rpg_worldmodel (checkpoint schema {version}; this one reads "
            f"up to {CHECKPOINT_VERSION}); upgrade the package to use it"
        )
    if version == 5 and "move_rules" not in dict((meta.get("config") or {}).get("model") or {}):
        # schema 5 gained the movement table (and a map that leaves the centre alone) before it was
        # released; a checkpoint of the interim development form would load into the wrong model
        raise CheckpointError(f"{folder} is a schema-5 checkpoint from before the movement table (its config "
                              f"has no model.move_rules), a development form this package cannot rebuild: "
                              f"retrain it")
    if version == CHECKPOINT_VERSION:
        return meta
    config = dict(meta.get("config") or {})
    for old in range(version, CHECKPOINT_VERSION):
        for section, values in MIGRATIONS[old].items():
            config[section] = {**values, **dict(config.get(section) or {})}
    data = dict(meta.get("data") or {})
    if "files" not in data and "path" in data:
        one = {"path": data.pop("path"), "fingerprint": data.pop("fingerprint", None),
               "num_episodes": data.get("num_episodes")}
        data["files"] = [one]
    return {**meta, "config": config, "data": data, "migrated_from": version, "version": CHECKPOINT_VERSION}


def _safe_load(file: Path, map_location: str | torch.device) -> Any:
    if not file.is_file():
        raise CheckpointError(f"{file} is missing")
    try:
        return torch.load(file, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means "unsafe or corrupt"
        raise CheckpointError(
            f"{file} cannot be loaded safely (tensors and plain containers only): "
            f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        ) from None


def config_differences(a: ModelConfig, b: ModelConfig) -> list[str]:
    """``["width: 192 vs 256", ...]`` for the fields that differ."""
    return [
        f"{f.name}: {getattr(a, f.name)!r} vs {getattr(b, f.name)!r}"
        for f in dataclasses.fields(ModelConfig)
        if getattr(a, f.name) != getattr(b, f.name)
    ]


def load_model_weights(
    model: WorldModel, path: str | os.PathLike, map_location: str | torch.device = "cpu"
) -> dict:
    """Load a checkpoint's weights into an existing ``model``; raises `CheckpointError` naming both
    configs when they differ. Returns the checkpoint's meta."""
    folder = resolve_checkpoint(path)
    meta = read_meta(folder)
    saved = WorldModelConfig.from_dict(meta["config"], source=str(folder / META_FILE)).model
    diffs = config_differences(saved, model.cfg)
    if diffs:
        raise CheckpointError(
            f"checkpoint {folder} does not fit this model: model config differs "
            f"(checkpoint vs current): {'; '.join(diffs)}"
        )
    state = _safe_load(folder / MODEL_FILE, map_location)
    mismatch = first_weight_mismatch(state, model.state_dict())
    if mismatch:
        raise CheckpointError(
            f"weights in {folder / MODEL_FILE} do not fit the model built from its own config: "
            f"{mismatch}; the checkpoint is corrupt or was edited (retrain, or restore its model.pt)"
        )
    model.load_state_dict(state)
    return meta


def first_weight_mismatch(saved: dict[str, Any], expected: dict[str, torch.Tensor]) -> str | None:
    """The first tensor where ``saved`` does not fit ``expected`` (in the model's order), in
    words naming the tensor and both shapes; None when every tensor fits."""
    for name, tensor in expected.items():
        if name not in saved:
            return f"tensor {name!r} of shape {tuple(tensor.shape)} is missing from the checkpoint"
        got = saved[name]
        if not isinstance(got, torch.Tensor) or got.shape != tensor.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return (f"tensor {name!r} has shape {shape} in the checkpoint but {tuple(tensor.shape)} "
                    "in the model")
    extra = [name for name in saved if name not in expected]
    return f"the checkpoint has tensor {extra[0]!r}, which the model does not have" if extra else None


def load_checkpoint(
    path: str | os.PathLike,
    map_location: str | torch.device = "cpu",
    model_config: ModelConfig | None = None,
    which: str = "best",
) -> LoadedCheckpoint:
    """Rebuild the model from a checkpoint's own config and load its weights (eval mode). A run
    folder gives its best checkpoint (``which="latest"``: its last); ``choice`` says which.

    ``model_config``, when given, must equal the saved one (else `CheckpointError` naming both).
    """
    choice = choose_checkpoint(path, which)
    folder = choice.folder
    meta = read_meta(folder)
    try:
        config = WorldModelConfig.from_dict(meta["config"], source=str(folder / META_FILE))
    except (ConfigError, KeyError) as exc:
        raise CheckpointError(f"{folder / META_FILE} holds an unusable config: {exc}") from None
    if model_config is not None:
        diffs = config_differences(config.model, model_config)
        if diffs:
            raise CheckpointError(
                f"checkpoint {folder} was trained with another model config "
                f"(checkpoint vs requested): {'; '.join(diffs)}"
            )
    model = WorldModel(config.model)
    load_model_weights(model, folder, map_location)
    model.to(map_location).eval()
    return LoadedCheckpoint(model=model, config=config, meta=meta, path=folder, choice=choice.describe())


def load_training_state(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The optimizer/scheduler/RNG state saved beside a checkpoint (for exact resume)."""
    return _safe_load(resolve_checkpoint(path, "latest") / TRAINING_FILE, map_location)
