"""Resuming a run from its last checkpoint: `resume_config`, `resume_from` and `restore_training`
check that the checkpoint fits the run (model config, data fingerprints) and restore the optimizer,
RNG and grad-scaler states, so a resumed run continues with exactly the losses an uninterrupted one
would have had (under torchrun too: every rank's random state is saved, `training_state`).

`start_from` is the lighter form behind ``train.init_from``: a new run (fresh optimizer and
schedule) that starts from a checkpoint's weights, on the same data and split, to fine-tune it.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rpg_base.cli import output_folder_contents
from rpg_base.typed_config.values import ConfigError
from rpg_worldmodel.checkpoint import (
    LATEST_FILE,
    META_FILE,
    config_differences,
    load_model_weights,
    load_training_state,
    resolve_checkpoint,
)
from rpg_worldmodel.config import WorldModelConfig, apply_override
from rpg_worldmodel.models.world_model import WorldModel
from rpg_worldmodel.run_record import CheckpointError, CheckpointRecord, DataRecord, read_record

#: The settings that draw a run's split: a fine-tuned run (``train.init_from``) takes them from its
#: checkpoint along with the split itself, so its config says how its split was drawn.
SPLIT_SETTINGS = ("data.split_fractions", "data.agent_id")
#: What a training run writes into its folder; a new run refuses a folder holding anything else.
RUN_OUTPUTS = ("config.yaml", "metrics.csv", "summary.json", "provenance*.json", "tb", "checkpoints")


def check_new_run_dir(run_dir: Path) -> None:
    """Refuse ``run_dir`` for a new run when it already holds a run (resume it instead) or files
    a run does not write (someone's own folder), before anything is written into it."""
    if (run_dir / "checkpoints" / LATEST_FILE).exists():
        raise ConfigError(f"{run_dir} already holds a run; resume it with --resume {run_dir} or choose "
                              "another out_dir (nothing was overwritten)")
    output_folder_contents(run_dir, RUN_OUTPUTS, "a training run", option="out_dir", error=ConfigError)


#: Settings a resumed run takes from its checkpoint (its folder, its recorded split, where its
#: weights started): an override of one of them would be ignored, so it is refused.
FIXED_ON_RESUME = ("out_dir", *SPLIT_SETTINGS, "train.init_from")


def _setting(cfg: WorldModelConfig, name: str) -> Any:
    section, _, key = name.rpartition(".")
    return getattr(getattr(cfg, section) if section else cfg, key)


def resume_config(path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = ()) -> WorldModelConfig:
    """The config a run resumed from ``path`` continues with: the checkpoint's, plus ``overrides``.

    Overrides of `FIXED_ON_RESUME` settings are refused (`CheckpointError`); model changes are
    refused by `resume_from`, naming both configs.
    """
    folder = resolve_checkpoint(path, "latest")
    saved = read_record(folder / META_FILE).config
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
    ``record`` (meta.json), recorded ``splits`` (sorted episode ids) and ``training`` state."""

    folder: Path
    record: CheckpointRecord
    splits: dict[str, np.ndarray]
    training: dict[str, Any]

    @property
    def step(self) -> int:
        return self.record.step

    @property
    def run_dir(self) -> Path:
        return self.folder.parent.parent

    @property
    def started_from(self) -> str | None:
        """The checkpoint folder the resumed run was fine-tuned from (``train.init_from``), if any."""
        return self.record.init_from


def _checked(folder: Path, cfg: WorldModelConfig, data: DataRecord, doing: str,
             more_data: bool = False) -> CheckpointRecord:
    """The record of checkpoint ``folder``; refused (`CheckpointError`, both sides named) when its
    model config differs from ``cfg.model`` or it was trained on other data than ``data`` (the same
    files' contents, in any order; with ``more_data``, ``data`` may hold further files too)."""
    record = read_record(folder / META_FILE)
    # more games may hold more of a kind: the draw's limits follow the data, not the weights
    diffs = config_differences(record.config.model, cfg.model, weights_only=more_data)
    if diffs:
        raise CheckpointError(
            f"cannot {doing} {folder}: model config differs (checkpoint vs now): {'; '.join(diffs)}; "
            f"use the checkpoint's model settings (its run folder's config.yaml: --config "
            f"{folder.parent.parent / 'config.yaml'}, or drop those model.* overrides)"
        )
    trained = {f.fingerprint: f.path for f in record.data.files}
    given = {f.fingerprint: f.path for f in data.files}
    if not trained.keys() <= given.keys() or (trained.keys() != given.keys() and not more_data):
        new = [f"{p} has fingerprint {fp[:12]}" for fp, p in given.items() if fp not in trained]
        gone = [f"{p} (fingerprint {fp[:12]})" for fp, p in trained.items() if fp not in given]
        raise CheckpointError(
            f"cannot {doing} {folder}: it was trained on {', '.join(gone) or 'fewer files'}, but "
            f"{'; '.join(new) or 'those files are not given'}; pass the same data files"
        )
    return record


def _splits(record: CheckpointRecord) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.int64) for k, v in record.splits.items()}


def resume_from(path: str | os.PathLike, cfg: WorldModelConfig, data: DataRecord) -> Resume:
    """Read the checkpoint a run resumes from (its latest); refused as `_checked` says. What the
    run read off its training views and games when it began (``model.fixed_cells``,
    ``model.kind_limits``, ``model.turns``, ``model.train_window``) is taken from it where ``cfg``
    leaves them empty."""
    folder = resolve_checkpoint(path, "latest")
    saved = read_record(folder / META_FILE).config.model
    if not cfg.model.kind_limits:
        cfg.model.fixed_cells, cfg.model.kind_limits = saved.fixed_cells, saved.kind_limits
        cfg.model.turns = saved.turns
    if cfg.model.train_window is None:
        cfg.model.train_window = saved.train_window
    record = _checked(folder, cfg, data, "resume")
    return Resume(folder, record, _splits(record), load_training_state(folder))


def starting_checkpoint(cfg: WorldModelConfig) -> Path:
    """``train.init_from``'s checkpoint folder (a run folder gives its best), read before the data:
    ``cfg.data`` takes its `SPLIT_SETTINGS`, since the new run keeps its split (`start_from`)."""
    try:
        folder = resolve_checkpoint(cfg.train.init_from, "best")
        saved = read_record(folder / META_FILE).config
    except CheckpointError as exc:
        raise CheckpointError(f"train.init_from={cfg.train.init_from}: {exc}") from None
    for name in SPLIT_SETTINGS:
        setattr(cfg.data, name.partition(".")[2], copy.deepcopy(_setting(saved, name)))
    if not cfg.model.fixed_cells:  # what the map keeps apart, as the start's weights learned it
        cfg.model.fixed_cells = saved.model.fixed_cells
    cfg.model.turns = cfg.model.turns or saved.model.turns  # the motions its weights tell apart
    if cfg.model.train_window is None:  # the memory map's ages its weights tell apart
        cfg.model.train_window = saved.model.train_window
    # its reward head's classes: a learner's later games may pay what the first ones never did
    cfg.model.reward_values = cfg.model.reward_values or saved.model.reward_values
    return folder


def start_from(folder: Path, cfg: WorldModelConfig, data: DataRecord, fresh: dict[str, np.ndarray]
               ) -> dict[str, np.ndarray]:
    """The split of a run fine-tuned from `starting_checkpoint` ``folder``: the start's recorded
    split, so that the games its start held out stay unseen. ``data`` may add files to the start's
    (a learner's growing experience, `rpg_worldmodel.learn`): their games take the split ``fresh``
    (the config's split of all of ``data``) gives them. Refused as `_checked` says: data without
    one of the start's files would need another split."""
    record = _checked(folder, cfg, data, "fine-tune (train.init_from)", more_data=True)
    if len(record.data.files) == len(data.files):
        return _splits(record)
    return _grown_split(record, data, fresh)


def _episode_offsets(files) -> dict[str, int]:
    """File fingerprint -> the id of its first episode, where ``files`` number them."""
    offsets, first = {}, 0
    for f in files:
        offsets[f.fingerprint] = first
        first += int(f.num_episodes)
    return offsets


def _grown_split(record: CheckpointRecord, data: DataRecord, fresh: dict[str, np.ndarray]
                 ) -> dict[str, np.ndarray]:
    """The start's recorded split carried over to ``data``'s numbering (files are numbered in
    fingerprint order, so a new file can move old episodes' ids), plus the new files' games as
    ``fresh`` splits them."""
    before, after = _episode_offsets(record.data.files), _episode_offsets(data.files)
    shift = np.zeros(record.data.num_episodes, dtype=np.int64)
    for f in record.data.files:
        first = before[f.fingerprint]
        shift[first:first + int(f.num_episodes)] = after[f.fingerprint] - first
    old = np.zeros(data.num_episodes, dtype=bool)
    for f in record.data.files:
        old[after[f.fingerprint]:after[f.fingerprint] + int(f.num_episodes)] = True
    grown = {}
    for name, ids in _splits(record).items():
        new_ids = fresh.get(name, np.zeros(0, np.int64))
        grown[name] = np.sort(np.concatenate([ids + shift[ids], new_ids[~old[new_ids]]]))
    return grown


def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    """This process's random state (the CPU generator, and its GPU's on CUDA)."""
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def training_state(device: torch.device, scaler: torch.amp.GradScaler,
                   rank_states: list[dict[str, torch.Tensor]] | None = None,
                   draws: torch.Generator | None = None) -> dict[str, Any]:
    """RNG and grad-scaler state saved beside a checkpoint, so a resumed run draws exactly the
    dropout and masks an uninterrupted one would have; under torchrun ``rank_states`` holds
    every rank's `rng_state`, in rank order, and ``draws`` the ranks' shared generator
    (`rpg_worldmodel.distributed.shared_generator`)."""
    state: dict[str, Any] = {"torch_rng": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    if rank_states is not None:
        state["rank_rng"] = rank_states
    if draws is not None:
        state["draw_rng"] = draws.get_state()
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
    draws: torch.Generator | None = None,
) -> None:
    """Load the weights, optimizer, RNG and grad-scaler states of ``resume`` into a fresh run;
    rank ``rank`` of a torchrun launch takes that rank's random state when it was saved, and the
    ranks' shared generator ``draws`` its saved state (a checkpoint of one process, or from
    before it was saved, has none: ``draws`` then goes on from the run's seed)."""
    state = resume.training
    load_model_weights(model, resume.folder, device, resume.record)
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
    if draws is not None and "draw_rng" in state:
        draws.set_state(state["draw_rng"])
    if "scaler" in state:
        scaler.load_state_dict(state["scaler"])
