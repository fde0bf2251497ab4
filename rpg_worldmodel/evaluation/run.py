"""The evaluation driver: one checkpoint on some trajectory files, beside baselines, across agents
and under input masks. `Evaluation` is the only producer of ``metrics.json``.

The first file holding the checkpoint's training data (or else the first file) is "self"; every
other file gives a transfer table. Baselines are fitted on the checkpoint's training split only
(its part in the first training file found).
Outputs (`Evaluation.write`): ``metrics.json`` (every figure with its interval, plus provenance,
plus the caller's own section, e.g. the pipeline's settings and timings) and ``examples.npz``
(a few held-out views of the self file: last input, predicted, true) for the report.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rpg_base.errors import InputError
from rpg_base.provenance import provenance, write_whole
from rpg_worldmodel.checkpoint import load_checkpoint
from rpg_worldmodel.data.masks import check_mask
from rpg_worldmodel.data.sources import DataSource, check_data_matches
from rpg_worldmodel.evaluation.baselines import (
    BASELINES_FILE,
    FittedBaselines,
    baselines_summary,
    fit_baselines,
    load_baselines,
)
from rpg_worldmodel.evaluation.episodes import (
    EvalSet,
    checkpoint_split,
    first_episodes,
    is_training_file,
    select_episodes,
    train_mask_of,
    training_file,
    training_files,
)
from rpg_worldmodel.evaluation.rollouts import DEFAULT_HORIZON, rollout_table
from rpg_worldmodel.evaluation.scoring import Scores, score_eval_set
from rpg_worldmodel.evaluation.tables import evaluate_file, masking_table, transfer_table
from rpg_worldmodel.evaluation.theory_of_mind import shipped_expert
from rpg_worldmodel.run_record import RunRecord


@dataclass
class EvalOptions:
    """How an evaluation selects and scores (the `run_evaluation` arguments of the same names)."""

    split: str = "auto"  # auto | test | val | all | train (see `select_episodes`)
    allow_training_episodes: bool = False
    num_boot: int = 1000  # bootstrap replicates
    seed: int = 0  # bootstrap, masks, baseline subset, other files' own splits
    batch_size: int = 256
    device: str = "cpu"
    baseline_episodes: int = 400  # training episodes the baselines are fitted on (at most)
    context: str = "full"  # full | stride (see `rpg_worldmodel.data.windows.window_plan`)
    mask_context: str | None = None  # windows of the masking table; None: ``context``
    mask_episodes: int | None = None  # first episodes of the self set in the masking table; None: all
    floor: str = "auto"  # auto | replay | bound (see `rpg_worldmodel.evaluation.cells.annotate_cells`)
    theory_of_mind: bool = True  # the expert-through-oracle ceiling, for files a shipped expert played


def _training_games(record: RunRecord) -> tuple:
    """What decides which games a checkpoint trained on: its data files' fingerprints, in order (the
    split's episode ids count over them in that order), and its split."""
    return tuple(f.fingerprint for f in training_files(record)), record.splits


class Evaluation:
    """One checkpoint evaluated on ``data`` (trajectory files), step by step: `evaluate_file` for
    each file, then `transfer` and `masking`; `metrics` assembles the result and `write` saves it.

    Construction loads the checkpoint, refuses files recorded for another model before any work,
    and fits the baselines on the checkpoint's training split.
    """

    def __init__(self, checkpoint: str | Path, data: Sequence[str | Path],
                 options: EvalOptions | None = None, baselines: FittedBaselines | None = None):
        if not data:
            raise InputError("give at least one trajectory file (--data F)")
        self.checkpoint, self.data = checkpoint, [str(p) for p in data]
        self.options = options or EvalOptions()
        ck = load_checkpoint(checkpoint)
        self.model, self.config, self.record = ck.model, ck.config, ck.record
        self.checkpoint_used, self.checkpoint_choice = ck.path, ck.choice
        for path in self.data:
            check_data_matches(self.config.model, DataSource.open(path).meta, data_path=path,
                               model_source=f"checkpoint {checkpoint}", trained_on=self.record.data.to_dict())
        # Another seed's model of the same data reuses that model's baselines (the same training split).
        if baselines is None:
            self.train_path, self.baselines = self._baselines(ck.path)
        else:
            found = self._training_file()
            self.train_path, self.baselines = (str(found[0]) if found else "given by the caller"), baselines
        self.self_key = next((p for p in self.data if is_training_file(self.record, p)), self.data[0])
        self.files: dict[str, dict] = {}
        self.scores: dict[str, tuple[EvalSet, Scores]] = {}
        self.transfers: dict[str, dict] = {}
        self.masks: dict | None = None
        self.rollouts: dict | None = None
        self.rollout_strip: dict[str, np.ndarray] = {}
        self._provenance: dict | None = None

    def _training_file(self) -> tuple[Path, list[int]] | None:
        """The training file the baselines are fitted on and its episodes of the training split: the
        first of ``data`` the model trained on (the file evaluated first: a model trained on an
        expert's games beside random play is judged beside the expert's baselines), else the first
        training file found (at its recorded path, or among ``--data``); None when none is here."""
        split = checkpoint_split(self.record)
        for path in self.data:
            given = training_file(self.record, path)
            if given is not None and given.part(split)["train"]:
                return Path(path), given.part(split)["train"]
        for trained in training_files(self.record):
            train = trained.part(split)["train"]
            if trained.path is not None and trained.path.exists() and train:
                return trained.path, train
            for path in self.data:
                if train and training_file(self.record, path) == trained:
                    return Path(path), train
        return None

    def _baselines(self, folder: Path) -> tuple[str, FittedBaselines]:
        """Where the baselines come from and the baselines: fitted on the training split of the first
        training file found, or else the ones the checkpoint ``folder`` carries (`BASELINES_FILE`,
        written when a model is shipped)."""
        opts = self.options
        found = self._training_file()
        if found is not None:
            path, episodes = found
            rewards = self.config.model.reward_values if self.config.model.reward_head else ()
            return str(path), fit_baselines(path, episodes, opts.baseline_episodes, opts.seed, rewards)
        carried = Path(folder) / BASELINES_FILE
        if carried.is_file():
            fb = load_baselines(carried, [f.fingerprint for f in training_files(self.record)])
            fitted = fb.fitted_on or {}
            seed, most = fitted.get("seed"), fitted.get("max_episodes")
            if (seed, most) != (opts.seed, opts.baseline_episodes):
                # the training file is not here to fit them as asked: use them, and say so
                warnings.warn(f"{carried}: the carried baselines were fitted with seed {seed} on at most "
                              f"{most} training episodes, not seed {opts.seed} and {opts.baseline_episodes} "
                              f"as this evaluation asks; pass the checkpoint's training file as --data to "
                              f"fit them so", stacklevel=2)
            return (f"{carried} (carried by the checkpoint: its training files are not here; fitted with "
                    f"seed {seed} on at most {most} training episodes)"), fb
        recorded = ", ".join(f.name for f in training_files(self.record))
        raise FileNotFoundError(
            f"the checkpoint's training files ({recorded}) are not found and none of --data is one; "
            "the baselines are fitted on the training split: pass a training file as --data")

    def evaluate_file(self, path: str | Path, num_examples: int = 8) -> dict:
        """The held-out table of one file (also kept for `metrics`)."""
        opts, key = self.options, str(path)
        es = select_episodes(self.record, path, opts.split, opts.allow_training_episodes,
                             split_seed=opts.seed, agent_id=getattr(self.config.data, "agent_id", None))
        expert = shipped_expert(sorted(set(es.policy_ids))) if opts.theory_of_mind else None
        result, scores = evaluate_file(self.model, self.config, es, self.baselines, opts.num_boot, opts.seed,
                                       opts.batch_size, opts.device, num_examples=num_examples,
                                       context=opts.context, floor=opts.floor, expert=expert)
        self.files[key], self.scores[key] = result, (es, scores)
        return result

    def scores_of(self, path: str | Path) -> Scores:
        """The model's per-game counts on ``path``'s held-out selection, without the baselines and
        tables (what the seeds stage needs of a further seed's model)."""
        opts = self.options
        es = select_episodes(self.record, path, opts.split, opts.allow_training_episodes,
                             split_seed=opts.seed, agent_id=getattr(self.config.data, "agent_id", None))
        return score_eval_set(self.model, self.config, es, None, batch_size=opts.batch_size,
                              device=opts.device, desc=f"score {Path(path).name}", context=opts.context)

    def transfer(self) -> dict[str, dict]:
        """Self-vs-cross tables of every evaluated file but the self file."""
        own = self.scores[self.self_key][1]
        for key, (_, scores) in self.scores.items():
            if key != self.self_key:
                self.transfers[key] = transfer_table(own, scores, self.self_key, key, self.options.num_boot,
                                                     self.options.seed)
        return self.transfers

    def masking(self, masks: Sequence[str], masked_checkpoints: Sequence[str | Path] = ()) -> dict:
        """Train mask x evaluation mask on the self file: this checkpoint's model and those of
        ``masked_checkpoints`` (one row per training mask)."""
        opts = self.options
        check_masks(masks, self.self_key)
        models = {train_mask_of(self.config): (self.model, self.config)}
        for extra in masked_checkpoints:
            other = load_checkpoint(extra)
            if _training_games(other.record) != _training_games(self.record):
                raise InputError(
                    f"masked checkpoint {other.path} was trained on other data or another split than "
                    f"{self.checkpoint_used}, so the test games scored here may be its training games; "
                    f"fine-tune that model: train.init_from={self.checkpoint_used} train.train_mask=M")
            models.setdefault(train_mask_of(other.config), (other.model, other.config))
        es = self.scores[self.self_key][0]
        if opts.mask_episodes is not None:
            es = first_episodes(es, opts.mask_episodes)
        self.masks = masking_table(models, es, masks, opts.num_boot, opts.seed, opts.batch_size, opts.device,
                                   opts.mask_context or opts.context)
        return self.masks

    def rollout(self, horizon: int = DEFAULT_HORIZON) -> dict:
        """Open-loop rollouts of ``horizon`` steps from held-out starts of the self file, scored at
        every horizon beside the memory and motion oracles, copy and the teacher-forced model
        (`rpg_worldmodel.evaluation.rollouts`)."""
        if horizon < 1:
            raise InputError(f"the rollout horizon must be >= 1 step, got {horizon}")
        opts = self.options
        es = self.scores[self.self_key][0]
        self.rollouts, self.rollout_strip = rollout_table(self.model, self.config, es, self.baselines,
                                                          horizon, opts.num_boot, opts.seed, opts.device)
        return self.rollouts

    def metrics(self, extra: dict[str, Any] | None = None) -> dict:
        """The metrics dictionary; ``extra`` (e.g. ``{"pipeline": {...}}``) is added before the
        provenance."""
        opts = self.options
        results: dict = {
            "checkpoint": str(self.checkpoint),
            "checkpoint_used": str(self.checkpoint_used),
            "checkpoint_choice": self.checkpoint_choice,
            "checkpoint_step": self.record.step,
            "train_mask": train_mask_of(self.config),
            "baselines": baselines_summary(self.baselines, self.train_path),
            "bootstrap": {"resampled_unit": "game", "replicates": opts.num_boot, "level": 0.95,
                          "seed": opts.seed},
            "files": self.files,
            "self": self.self_key,
            "transfer": self.transfers,
        }
        if self.masks is not None:
            results["masking"] = self.masks
        if self.rollouts is not None:
            results["rollout"] = self.rollouts
        results.update(extra or {})
        if self._provenance is None:
            self._provenance = provenance(seed=opts.seed, checkpoint=str(self.checkpoint))
        results["provenance"] = self._provenance
        return results

    def write(self, out: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """Write ``metrics.json``, ``examples.npz`` and (after `rollout`) ``rollout_strip.npz`` into
        ``out``; returns the JSON path."""
        path = write_outputs(self.metrics(extra), self.scores[self.self_key][1], out)
        if self.rollout_strip:
            np.savez_compressed(Path(out) / "rollout_strip.npz", **self.rollout_strip)
        return path


def run_evaluation(
    checkpoint: str | Path,
    data: Sequence[str | Path],
    out: str | Path | None = None,
    masks: Sequence[str] = (),
    masked_checkpoints: Sequence[str | Path] = (),
    split: str = "auto",
    allow_training_episodes: bool = False,
    num_boot: int = 1000,
    seed: int = 0,
    batch_size: int = 256,
    device: str = "cpu",
    baseline_episodes: int = 400,
    context: str = "full",
    rollout_horizon: int = 0,
    floor: str = "auto",
) -> dict:
    """Evaluate ``checkpoint`` on each file of ``data`` (see `Evaluation`); with ``masks``, add the
    masking table; with ``rollout_horizon`` > 0, the rollout table. Returns the metrics
    dictionary (also written to ``out`` when given)."""
    if masked_checkpoints and not masks:
        raise InputError("--masked-checkpoint is only used by the masking table: add --masks "
                         "(e.g. --masks none random_cells gem) or drop it")
    if masks and data:  # refused before the checkpoint is read and its baselines fitted
        check_masks(masks, data[0])
    ev = Evaluation(checkpoint, data, EvalOptions(split, allow_training_episodes, num_boot, seed, batch_size,
                                                  device, baseline_episodes, context, floor=floor))
    for path in ev.data:
        ev.evaluate_file(path)
    ev.transfer()
    if masks:
        ev.masking(masks, masked_checkpoints)
    if rollout_horizon:
        ev.rollout(rollout_horizon)
    if out is not None:
        ev.write(out)
    return ev.metrics()


def check_masks(masks: Sequence[str], path: str | Path) -> None:
    """`ConfigError` naming the valid choices unless every one of ``masks`` is a mask of the
    trajectory file at ``path`` (none, random_cells or one of its channels)."""
    channels = DataSource.open(path).channel_names
    for mask in masks:
        check_mask(mask, channels, "evaluation mask")


def write_outputs(results: dict, self_scores: Scores, out: str | Path) -> Path:
    """Write ``metrics.json`` (atomically) and ``examples.npz`` into ``out``; returns the JSON path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "metrics.json"
    write_whole(path, json.dumps(results, indent=1, default=_json_default))
    if self_scores.examples:
        np.savez_compressed(out / "examples.npz", **self_scores.examples,
                            channel_names=np.asarray(self_scores.channel_names))
    return path


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")
