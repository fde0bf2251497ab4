"""Which episodes an evaluation scores: held-out ones only, unless asked loudly.

On one of the checkpoint's own training files (recognised by path or by content fingerprint)
that file's part of the test split recorded in the checkpoint is scored; on any other file, all
of its episodes (or its own test split). Asking for training episodes raises
`TrainingEpisodesError` unless explicitly allowed, and then the selection is marked as not held
out.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rpg_base.errors import InputError
from rpg_env.trajectories.splits import split_episodes
from rpg_worldmodel.config import WorldModelConfig
from rpg_worldmodel.data.sources import DataSource, file_digest
from rpg_worldmodel.data.stores import EpisodeStore
from rpg_worldmodel.run_record import CheckpointError, RunRecord

SPLITS = ("auto", "test", "val", "all", "train")


class TrainingEpisodesError(InputError):
    """Raised when an evaluation would score episodes the model was trained on."""


@dataclass
class EvalSet:
    """Episodes of one trajectory file selected for scoring; ``game_ids``, ``agent_ids`` and
    ``policy_ids`` are per selected episode (same order as ``episodes``, sorted file ids)."""

    path: Path
    episodes: list[int]
    label: str  # "test split of the training file", "all episodes", ...
    held_out: bool = True
    game_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    agent_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    policy_ids: list[str] = field(default_factory=list)
    _store: EpisodeStore | None = field(default=None, repr=False, compare=False)

    def store(self) -> EpisodeStore:
        """The selected episodes in memory (read once, on first use)."""
        if self._store is None:
            self._store = EpisodeStore.load(self.path, self.episodes)
        return self._store


def train_mask_of(config: WorldModelConfig) -> str:
    """The input mask a checkpoint's model was trained with (``"none"`` when it had none)."""
    return str(getattr(config.train, "train_mask", "none") or "none")


def checkpoint_split(record: RunRecord) -> dict[str, list[int]]:
    """The train/val/test episode indices recorded in a checkpoint (``splits``)."""
    split = record.splits
    if "train" not in split or "test" not in split:
        raise CheckpointError("the checkpoint records no train/test episode split; it cannot be evaluated "
                              "on held-out episodes of its training file (retrain with the current trainer)")
    return {k: [int(i) for i in v] for k, v in split.items()}


@dataclass(frozen=True)
class TrainingFile:
    """One file of a checkpoint's training data (its ``data.files`` entry): the recorded split
    numbers its episodes ``first .. first + num_episodes - 1`` (None: all of them, one file).
    ``path`` is where it was read (None when the checkpoint records its name only, as a shipped
    one does: it is then known by its fingerprint); ``name`` is the path as recorded."""

    path: Path | None
    fingerprint: str | None
    first: int = 0
    num_episodes: int | None = None
    name: str = ""

    def part(self, split: dict[str, list[int]]) -> dict[str, list[int]]:
        """This file's own episode ids in each part of ``split`` (ids over all training files)."""
        stop = None if self.num_episodes is None else self.first + self.num_episodes
        return {k: [i - self.first for i in v if i >= self.first and (stop is None or i < stop)]
                for k, v in split.items()}


def training_files(record: RunRecord) -> list[TrainingFile]:
    """The files a checkpoint was trained on (``data.files``, in the order that numbers the
    split's episodes)."""
    found, first = [], 0
    for entry in record.data.files:
        found.append(TrainingFile(entry.location, entry.fingerprint, first, entry.num_episodes, entry.path))
        first += int(entry.num_episodes or 0)
    return found


def training_file(record: RunRecord, path: str | Path) -> TrainingFile | None:
    """The training file ``path`` is, or a copy of it (same content); None for another file.

    Raises `InputError` when ``path`` *is* a training path but its content changed since
    training (re-recorded or appended): the recorded split would then be meaningless.
    """
    digest = None
    for trained in training_files(record):
        same_path = trained.path is not None and Path(path).resolve() == trained.path.resolve()
        if trained.fingerprint is None:  # an older checkpoint without a fingerprint: trust the path
            if same_path:
                return trained
            continue
        digest = digest or file_digest(path)
        if same_path and digest != trained.fingerprint:
            raise InputError(f"{path} changed since the checkpoint was trained on it (content fingerprint "
                             f"differs), so its recorded train/test split no longer applies; evaluate on "
                             "the original file or retrain")
        if digest == trained.fingerprint:
            return trained
    return None


def is_training_file(record: RunRecord, path: str | Path) -> bool:
    """Whether ``path`` is one of the files the checkpoint was trained on (`training_file`)."""
    return training_file(record, path) is not None


def select_episodes(record: RunRecord, path: str | Path, split: str = "auto",
                    allow_training_episodes: bool = False, split_seed: int = 0,
                    agent_id: int | None = None) -> EvalSet:
    """Choose the episodes of ``path`` to score for a checkpoint with record ``record``.

    ``split``: ``auto`` (the recorded test split on a training file, all episodes
    elsewhere), ``test``, ``val``, ``all`` or ``train``. On a training file, ``train`` and
    ``all`` include training episodes and raise `TrainingEpisodesError` unless
    ``allow_training_episodes``; then a loud warning is issued and the set is marked.
    ``agent_id`` (e.g. the config's ``data.agent_id``; None or -1: all) keeps only that agent's
    streams of another file, as training did on its own file.
    """
    if split not in SPLITS:
        raise InputError(f"split must be auto, test, val, all or train, got {split!r}")
    path = Path(path)
    table = DataSource.open(path).table
    own = training_file(record, path)
    if own is not None:
        recorded = own.part(checkpoint_split(record))
        if split in ("train", "all"):
            return _training_episodes(recorded, path, split, table, allow_training_episodes)
        if split == "val":
            episodes, label = recorded.get("val", []), "validation split recorded in the checkpoint"
        else:
            episodes, label = recorded["test"], "test split recorded in the checkpoint"
    else:
        if split in ("auto", "all", "train"):
            episodes, label = list(range(len(table))), "all episodes (file not used in training)"
        else:
            parts = split_episodes(table, seed=split_seed)
            episodes, label = list(parts[split]), f"{split} split of a file not used in training"
        if agent_id is not None and agent_id >= 0:
            episodes = [e for e in episodes if int(table["agent_id"][e]) == agent_id]
            label += f", agent {agent_id} streams"
    if not episodes:
        raise InputError(f"no episodes selected in {path} (split={split!r}); record more episodes")
    return _with_table(EvalSet(path, sorted(int(i) for i in episodes), label), table)


def _training_episodes(recorded: dict[str, list[int]], path: Path, split: str, table: np.ndarray,
                       allow: bool) -> EvalSet:
    chosen = sorted(recorded["train"]) if split == "train" else list(range(len(table)))
    if not allow:
        raise TrainingEpisodesError(
            f"{path} is a training file of the checkpoint and split={split!r} includes "
            f"{len(set(chosen) & set(recorded['train']))} episodes the model was trained on; "
            "evaluate on split 'test' (the default) or pass --allow-training-episodes to "
            "score them anyway (the results are then marked as not held out)")
    warnings.warn(f"EVALUATING ON TRAINING EPISODES of {path}: these figures are NOT "
                  "held-out and overstate the model", stacklevel=3)
    label = f"{split} episodes INCLUDING TRAINING EPISODES (not held out)"
    return _with_table(EvalSet(path, chosen, label, held_out=False), table)


def _with_table(es: EvalSet, table: np.ndarray) -> EvalSet:
    idx = np.asarray(es.episodes, dtype=np.int64)
    es.game_ids = table["game_id"][idx].astype(np.int64)
    es.agent_ids = table["agent_id"][idx].astype(np.int64)
    es.policy_ids = [str(p) for p in table["policy_id"][idx]]
    return es


def first_episodes(es: EvalSet, max_episodes: int) -> EvalSet:
    """The first ``max_episodes`` episodes (by file id) of ``es``: a fixed subset, no randomness."""
    keep = slice(0, max(1, int(max_episodes)))
    return EvalSet(es.path, es.episodes[keep], es.label + f" (first {max_episodes} episodes)",
                   es.held_out, es.game_ids[keep], es.agent_ids[keep], es.policy_ids[keep])
