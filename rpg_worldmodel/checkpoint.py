"""Checkpoints that are safe to load: tensors via ``torch.save`` / ``torch.load(weights_only=True)``
plus JSON, never a pickle of arbitrary objects.

Layout of one checkpoint (a folder, written to a temporary name and renamed, so a crash never
leaves a half-written checkpoint under the final name)::

    checkpoints/step_00002000/
        model.pt      model state_dict (tensors only)
        training.pt   optimizer / scheduler / grad-scaler state, RNG states (tensors and numbers)
        meta.json     config, step, split episode ids, data files (paths, fingerprints), seed, versions
                      (`rpg_worldmodel.run_record`: typed, with the schema migrations)
    checkpoints/latest.json   {"name": "step_00002000", "step": 2000}
    checkpoints/best.json     {"name": "step_00001600", "step": 1600, "val_loss": 0.4521}

A run folder names its best checkpoint (lowest held-out validation loss; after a refiner stage, its
result, with ``"chosen"`` saying so: `rpg_worldmodel.refiner_stage.REFINER_KEPT`) and its last one. What
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

from rpg_base.provenance import portable_path, write_whole
from rpg_worldmodel.config import ModelConfig, WorldModelConfig
from rpg_worldmodel.models.world_model import WorldModel
from rpg_worldmodel.run_record import (
    CheckpointError,
    CheckpointRecord,
    read_record,
    recorded_step,
    write_record,
)
from rpg_worldmodel.shipped import PRETRAINED_NAME, pretrained_path

MODEL_FILE, TRAINING_FILE, META_FILE, LATEST_FILE = "model.pt", "training.pt", "meta.json", "latest.json"
BEST_FILE = "best.json"
STEP_PREFIX = "step_"


@dataclass
class LoadedCheckpoint:
    """A loaded checkpoint: ``model`` in eval mode on ``map_location``, its ``config`` and its
    ``record`` (meta.json: split, training data, seed, step, versions, provenance, metrics)."""

    model: WorldModel
    record: CheckpointRecord
    path: Path
    choice: str = ""  # which checkpoint of a run folder was taken and why (`Choice.describe`)

    @property
    def config(self) -> WorldModelConfig:
        return self.record.config

    @property
    def step(self) -> int:
        return self.record.step


def save_checkpoint(
    directory: str | os.PathLike,
    *,
    model: torch.nn.Module,
    record: CheckpointRecord,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    training_state: dict[str, Any] | None = None,
) -> Path:
    """Write ``directory/step_{record.step:08d}`` atomically and point ``latest.json`` at it; returns
    its path.

    ``record`` (its step, config, split, data, provenance, metrics...) becomes meta.json.
    ``training_state`` holds further tensors/numbers for exact resume (RNG states, grad-scaler
    state); it is stored beside the optimizer and scheduler states.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    step = record.step
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
    write_record(record, tmp / META_FILE)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    _write_pointer(directory / LATEST_FILE, {"name": name, "step": int(step)})
    return final


def _write_pointer(file: Path, record: dict[str, Any]) -> None:
    """Write a small JSON pointer atomically (a crash leaves the old one or the new one)."""
    write_whole(file, json.dumps(record))


def _read_pointer(file: Path) -> dict[str, Any]:
    try:
        record = json.loads(file.read_text())
        record["name"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{file} is corrupt ({exc!r}); pass a step_* folder instead") from None
    return record


def mark_best(checkpoint: Path, val_loss: float, chosen: str | None = None) -> None:
    """Name ``checkpoint`` (a ``step_*`` folder) its run's best, with its validation loss; ``chosen``
    says why where it is not the lowest validation loss (the refiner stage's result)."""
    _write_pointer(checkpoint.parent / BEST_FILE,
                   {"name": checkpoint.name, "step": _step_of(checkpoint), "val_loss": float(val_loss),
                    **({"chosen": chosen} if chosen else {})})


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
    folder), ``"best"`` (the run's lowest validation loss, or ``chosen`` says why: the refiner
    stage's result) or ``"latest"`` (its last; also what ``"best"`` falls back to in a run that
    recorded no best)."""

    folder: Path
    how: str
    step: int
    val_loss: float | None = None
    last_step: int | None = None
    chosen: str | None = None

    def describe(self, portable: bool = False) -> str:
        """``"RUN/checkpoints/step_00001600 (the best by validation loss 0.4521, step 1600 of 2000)"``;
        ``portable``: the folder as `portable_path` gives it, for records that travel (dream.json)."""
        folder = portable_path(self.folder) if portable else self.folder
        if self.how == "pretrained":
            return f"the shipped world model ({folder}, step {self.step})"
        if self.how == "best":
            why = f": {self.chosen}; validation loss" if self.chosen else " by validation loss"
            return (f"{folder} (the best{why} {self.val_loss:.4f}, step {self.step}; "
                    f"the last is step {self.last_step})")
        return f"{folder} ({'as given' if self.how == 'given' else 'the last'}, step {self.step})"


def choose_checkpoint(path: str | os.PathLike, which: str = "best") -> Choice:
    """The checkpoint folder of ``path``: the folder itself or its model.pt/meta.json; for a run
    folder or its ``checkpoints/`` folder, its best (``which="best"``; the last when no best is
    recorded) or its last (``which="latest"``); ``"pretrained"``: the shipped world model."""
    located = _locate(path, which)
    return dataclasses.replace(located, step=_step_of(located.folder))


def _locate(path: str | os.PathLike, which: str) -> Choice:
    """`choose_checkpoint` without reading the chosen meta.json (its ``step`` is -1)."""
    if which not in ("best", "latest"):
        raise ValueError(f"which must be 'best' or 'latest', not {which!r}")
    if str(path) == PRETRAINED_NAME:
        return Choice(pretrained_path(), "pretrained", -1)
    p = Path(path)
    if p.is_file() and p.name in (MODEL_FILE, META_FILE, TRAINING_FILE):
        p = p.parent
    if not p.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    if (p / META_FILE).is_file():
        return Choice(p, "given", -1)
    for folder in (p, p / "checkpoints"):
        latest_file, best_file = folder / LATEST_FILE, folder / BEST_FILE
        if not latest_file.is_file():
            continue
        latest = _read_pointer(latest_file)
        if which == "best" and best_file.is_file():
            best = _read_pointer(best_file)
            return Choice(_pointed(folder, best_file, best), "best", -1,
                          float(best.get("val_loss", float("nan"))), int(latest.get("step", -1)),
                          best.get("chosen"))
        return Choice(_pointed(folder, latest_file, latest), "latest", -1)
    raise CheckpointError(
        f"{str(path)!r} is not a checkpoint: expected a folder with {META_FILE} and "
        f"{MODEL_FILE}, or a run folder with checkpoints/{LATEST_FILE}"
    )


def _pointed(folder: Path, pointer: Path, record: dict[str, Any]) -> Path:
    if (folder / record["name"] / META_FILE).is_file():
        return folder / record["name"]
    raise CheckpointError(f"{pointer} points to {record['name']!r}, which has no {META_FILE}")


def _step_of(folder: Path) -> int:
    """The step a checkpoint folder holds (`recorded_step` of its meta.json)."""
    return recorded_step(folder / META_FILE)


def resolve_checkpoint(path: str | os.PathLike, which: str = "best") -> Path:
    """The checkpoint folder of ``path`` (`choose_checkpoint`)."""
    return _locate(path, which).folder


def read_checkpoint_record(path: str | os.PathLike, which: str = "best") -> CheckpointRecord:
    """The record (meta.json) of the checkpoint ``path`` names (see `choose_checkpoint`)."""
    return read_record(_locate(path, which).folder / META_FILE)


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


#: Model settings that hold no weight, read off the training files: the most cells of each kind a
#: drawn view holds, and whether the files pay only as games end (a model fine-tuned on more games
#: reads its own).
WEIGHTLESS_SETTINGS = ("kind_limits", "pays_only_at_ends")


def config_differences(a: ModelConfig, b: ModelConfig, weights_only: bool = False) -> list[str]:
    """``["width: 192 vs 256", ...]`` for the fields that differ (``weights_only``: but for
    `WEIGHTLESS_SETTINGS`)."""
    return [
        f"{f.name}: {getattr(a, f.name)!r} vs {getattr(b, f.name)!r}"
        for f in dataclasses.fields(ModelConfig)
        if getattr(a, f.name) != getattr(b, f.name) and not (weights_only and f.name in WEIGHTLESS_SETTINGS)
    ]


def load_model_weights(
    model: WorldModel, path: str | os.PathLike, map_location: str | torch.device = "cpu",
    record: CheckpointRecord | None = None,
) -> CheckpointRecord:
    """Load a checkpoint's weights into an existing ``model``; raises `CheckpointError` naming both
    configs when they differ in a setting that builds weights (`WEIGHTLESS_SETTINGS` may differ).
    Returns the checkpoint's record (``record``: already read, not read again)."""
    folder = resolve_checkpoint(path)
    record = record or read_record(folder / META_FILE)
    diffs = config_differences(record.config.model, model.cfg, weights_only=True)
    if diffs:
        raise CheckpointError(
            f"checkpoint {folder} does not fit this model: model config differs "
            f"(checkpoint vs current): {'; '.join(diffs)}"
        )
    _load_state(model, folder, map_location)
    return record


def _load_state(model: WorldModel, folder: Path, map_location: str | torch.device) -> None:
    """model.pt of ``folder`` into ``model`` (built from the checkpoint's own config)."""
    state = _safe_load(folder / MODEL_FILE, map_location)
    mismatch = first_weight_mismatch(state, model.state_dict())
    if mismatch:
        raise CheckpointError(
            f"weights in {folder / MODEL_FILE} do not fit the model built from its own config: "
            f"{mismatch}; the checkpoint is corrupt or was edited (retrain, or restore its model.pt)"
        )
    model.load_state_dict(state)


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
    located = _locate(path, which)
    folder = located.folder
    record = read_record(folder / META_FILE)
    if model_config is not None:
        diffs = config_differences(record.config.model, model_config)
        if diffs:
            raise CheckpointError(
                f"checkpoint {folder} was trained with another model config "
                f"(checkpoint vs requested): {'; '.join(diffs)}"
            )
    model = WorldModel(record.config.model)
    _load_state(model, folder, map_location)
    model.to(map_location).eval()
    choice = dataclasses.replace(located, step=record.step)
    return LoadedCheckpoint(model=model, record=record, path=folder, choice=choice.describe())


def load_training_state(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The optimizer/scheduler/RNG state saved beside a checkpoint (for exact resume)."""
    return _safe_load(resolve_checkpoint(path, "latest") / TRAINING_FILE, map_location)
