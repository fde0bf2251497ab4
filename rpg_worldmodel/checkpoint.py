"""Checkpoints that are safe to load: tensors via ``torch.save`` / ``torch.load(weights_only=True)``
plus JSON, never a pickle of arbitrary objects.

Layout of one checkpoint (a folder, written to a temporary name and renamed, so a crash never
leaves a half-written checkpoint under the final name)::

    checkpoints/step_00002000/
        model.pt      model state_dict (tensors only)
        training.pt   optimizer / scheduler / grad-scaler state, RNG states (tensors and numbers)
        meta.json     config, step, split episode ids, data files (paths, fingerprints), seed, versions
    checkpoints/latest.json   {"name": "step_00002000"}

Resuming (`resume_config`, `resume_from`, `restore_training`) checks that the checkpoint fits the
run (model config, data fingerprints) and restores the optimizer, RNG and grad-scaler states, so a
resumed run continues with exactly the losses an uninterrupted one would have had (under torchrun
too: every rank's random state is saved).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rpg_env.errors import InputError
from rpg_worldmodel.config import ConfigError, ModelConfig, WorldModelConfig, apply_override
from rpg_worldmodel.models.world_model import WorldModel

CHECKPOINT_FORMAT = "rpg_worldmodel.checkpoint"
#: The checkpoint schema. 2 added rotary positions and the reward head (model.position,
#: model.reward_head, model.reward_values, train.reward_loss_weight); 3 records the training
#: data as a list of files (``data.files``: path, fingerprint, num_episodes each), the split's
#: episode ids counting over all of them in that order (one file: its own ids).
CHECKPOINT_VERSION = 3
#: How a checkpoint of an older schema is read: the config values it lacked, as its model was
#: (schema 2's one data file becomes a list of one by `migrate`).
MIGRATIONS: dict[int, dict[str, dict[str, Any]]] = {
    1: {"model": {"position": "learned", "reward_head": False, "reward_values": []}},
    2: {},
}
MODEL_FILE, TRAINING_FILE, META_FILE, LATEST_FILE = "model.pt", "training.pt", "meta.json", "latest.json"


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
    latest_tmp = directory / f".{LATEST_FILE}.tmp"
    latest_tmp.write_text(json.dumps({"name": name, "step": int(step)}))
    latest_tmp.replace(directory / LATEST_FILE)
    return final


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A checkpoint folder from: the folder itself, its model.pt/meta.json, a ``checkpoints/``
    folder (its latest), or a run folder (its ``checkpoints/`` latest)."""
    p = Path(path)
    if p.is_file() and p.name in (MODEL_FILE, META_FILE, TRAINING_FILE):
        p = p.parent
    if not p.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    if (p / META_FILE).is_file():
        return p
    for folder in (p, p / "checkpoints"):
        latest = folder / LATEST_FILE
        if latest.is_file():
            try:
                name = json.loads(latest.read_text())["name"]
            except (ValueError, KeyError) as exc:
                raise CheckpointError(f"{latest} is corrupt ({exc}); pass a step_* folder instead") from None
            if (folder / name / META_FILE).is_file():
                return folder / name
            raise CheckpointError(f"{latest} points to {name!r}, which has no {META_FILE}")
    raise CheckpointError(
        f"{str(path)!r} is not a checkpoint: expected a folder with {META_FILE} and "
        f"{MODEL_FILE}, or a run folder with checkpoints/{LATEST_FILE}"
    )


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
    path: str | os.PathLike, map_location: str | torch.device = "cpu", model_config: ModelConfig | None = None
) -> LoadedCheckpoint:
    """Rebuild the model from a checkpoint's own config and load its weights (eval mode).

    ``model_config``, when given, must equal the saved one (else `CheckpointError` naming both).
    """
    folder = resolve_checkpoint(path)
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
    return LoadedCheckpoint(model=model, config=config, meta=meta, path=folder)


def load_training_state(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The optimizer/scheduler/RNG state saved beside a checkpoint (for exact resume)."""
    return _safe_load(resolve_checkpoint(path) / TRAINING_FILE, map_location)


# ---------------------------------------------------------------------------- resume
#: Settings a resumed run takes from its checkpoint (its folder, its recorded split): an
#: override of one of them would be ignored, so it is refused.
FIXED_ON_RESUME = ("out_dir", "data.split_fractions", "data.split_seed", "data.agent_id")


def _setting(cfg: WorldModelConfig, name: str) -> Any:
    section, _, key = name.rpartition(".")
    return getattr(getattr(cfg, section) if section else cfg, key)


def resume_config(path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = ()) -> WorldModelConfig:
    """The config a run resumed from ``path`` continues with: the checkpoint's, plus ``overrides``.

    Overrides of `FIXED_ON_RESUME` settings are refused (`CheckpointError`); model changes are
    refused by `resume_from`, naming both configs.
    """
    folder = resolve_checkpoint(path)
    saved = WorldModelConfig.from_dict(read_meta(folder)["config"], source=str(folder / META_FILE))
    cfg = copy.deepcopy(saved)
    for override in overrides:
        apply_override(cfg, override)
    changed = [name for name in FIXED_ON_RESUME if _setting(cfg, name) != _setting(saved, name)]
    if changed:
        raise CheckpointError(
            f"a resumed run keeps the {', '.join(changed)} of {folder}; drop that override (to change "
            "it, start a new run with --data FILE --out DIR)"
        )
    return cfg.validate()


@dataclass
class Resume:
    """Where a resumed run continues: the checkpoint ``folder`` (``RUN/checkpoints/step_N``), its
    ``step``, recorded ``splits`` (sorted episode ids) and ``training`` state."""

    folder: Path
    step: int
    splits: dict[str, np.ndarray]
    training: dict[str, Any]

    @property
    def run_dir(self) -> Path:
        return self.folder.parent.parent


def resume_from(path: str | os.PathLike, cfg: WorldModelConfig, data: dict[str, Any]) -> Resume:
    """Read the checkpoint a run resumes from; refuse it (`CheckpointError`, both sides named) when
    its model config differs from ``cfg.model`` or it was trained on other data than ``data``
    (a data record, `rpg_worldmodel.data.data_record`: the same files' contents, in any order)."""
    folder = resolve_checkpoint(path)
    meta = read_meta(folder)
    saved = WorldModelConfig.from_dict(meta["config"], source=str(folder))
    diffs = config_differences(saved.model, cfg.model)
    if diffs:
        raise CheckpointError(
            f"cannot resume {folder}: model config differs (checkpoint vs now): {'; '.join(diffs)}"
        )
    trained = {f["fingerprint"]: f["path"] for f in meta["data"]["files"]}
    given = {f["fingerprint"]: f["path"] for f in data["files"]}
    if trained.keys() != given.keys():
        new = [f"{p} has fingerprint {fp[:12]}" for fp, p in given.items() if fp not in trained]
        gone = [f"{p} (fingerprint {fp[:12]})" for fp, p in trained.items() if fp not in given]
        raise CheckpointError(
            f"cannot resume {folder}: it was trained on {', '.join(gone) or 'fewer files'}, but "
            f"{'; '.join(new) or 'those files are not given'}; pass the same data files"
        )
    splits = {k: np.asarray(v, dtype=np.int64) for k, v in meta["splits"].items()}
    return Resume(folder, int(meta["step"]), splits, load_training_state(folder))


def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    """This process's random state (the CPU generator, and its GPU's on CUDA)."""
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def training_state(device: torch.device, scaler: torch.amp.GradScaler,
                   rank_states: list[dict[str, torch.Tensor]] | None = None) -> dict[str, Any]:
    """RNG and grad-scaler state saved beside a checkpoint, so a resumed run draws exactly the
    dropout and masks an uninterrupted one would have; under torchrun ``rank_states`` holds
    every rank's `rng_state`, in rank order."""
    state: dict[str, Any] = {"torch_rng": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    if rank_states is not None:
        state["rank_rng"] = rank_states
    if scaler.is_enabled():
        state["scaler"] = scaler.state_dict()
    return state


def restore_training(
    resume: Resume,
    model: WorldModel,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    device: torch.device,
    rank: int | None = None,
) -> None:
    """Load the weights, optimizer, RNG and grad-scaler states of ``resume`` into a fresh run;
    rank ``rank`` of a torchrun launch takes that rank's random state when it was saved."""
    state = resume.training
    load_model_weights(model, resume.folder, device)
    optimizer.load_state_dict(state["optimizer"])
    ranks = state.get("rank_rng", [])
    if rank is not None and rank < len(ranks):
        torch.set_rng_state(ranks[rank]["torch"])
        if device.type == "cuda" and "cuda" in ranks[rank]:
            torch.cuda.set_rng_state(ranks[rank]["cuda"], device)
    else:
        torch.set_rng_state(state["torch_rng"])
        if device.type == "cuda" and "cuda_rng" in state:
            torch.cuda.set_rng_state_all(list(state["cuda_rng"]))
    if "scaler" in state:
        scaler.load_state_dict(state["scaler"])
