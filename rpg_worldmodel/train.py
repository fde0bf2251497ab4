"""Train the world model on trajectory files, in one process or under torchrun.

    python -m rpg_worldmodel.train --data greedy.h5 [--config C.yaml] [key=value ...] [--resume RUN_DIR]
    torchrun --standalone --nproc_per_node N -m rpg_worldmodel.train --data shards/*.h5 [key=value ...]

The run folder (``out_dir``) receives config.yaml, provenance.json, metrics.csv, tb/ (tensorboard),
checkpoints/ and summary.json. ``--data`` takes files and globs (`rpg_worldmodel.data.shards`);
episodes are split by game across all of them; training uses the train split only and the
validation loss the val split only; the test split is left for ``rpg_worldmodel.evaluate``. The
split is written into every checkpoint. Episodes whose views fit ``data.max_memory_mb`` are held
in memory, larger data is streamed from the files (the same windows either way).

Under torchrun (`rpg_worldmodel.distributed`) every process trains on its slice of each global batch
(``train.batch_size``) inside DistributedDataParallel, and rank 0 alone writes.

Determinism: the batch order and the random input masks are pure functions of ``(seed, step)``,
and checkpoints carry the optimizer and RNG states, so ``--resume`` continues with exactly the
losses an uninterrupted run would have had. Every process of a torchrun launch draws the refiner's
views and masks for the global batch, so its losses are one process's (but for dropout, off by
default, whose masks are each rank's own).

Reading order: `setup` (config, seeds, data, model, optimizer, resume), then `train`'s loop
(`train_step`: learning rate, batch, loss, backward / clip / step; `after_step`: log, eval, save).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from rpg_base.cli import ArgumentParser, output_folder, positive_int, run_command
from rpg_base.progress import progress_bar
from rpg_base.provenance import package_versions, pinned_torch_threads, provenance
from rpg_base.typed_config import config as tc
from rpg_worldmodel.checkpoint import (
    Choice,
    best_val_loss,
    choose_checkpoint,
    load_model_weights,
    mark_best,
    prune_checkpoints,
    resolve_checkpoint,
    save_checkpoint,
)
from rpg_worldmodel.config import WorldModelConfig, load_world_model_config, save_config
from rpg_worldmodel.data.masks import apply_input_mask, check_mask
from rpg_worldmodel.data.shards import (
    DataFiles,
    data_record,
    split_data_args,
    step_rewards,
    training_splits,
    training_windows,
    view_statistics,
)
from rpg_worldmodel.data.sources import check_data_matches, fill_game_settings, fill_view_shape
from rpg_worldmodel.data.stores import pays_only_at_ends
from rpg_worldmodel.data.windows import EpochBatchSampler, TrajectoryWindows, collate_batch
from rpg_worldmodel.distributed import (
    Processes,
    autocast_context,
    autocast_dtype,
    pinned,
    process_group,
    rank_seed,
    shared_generator,
    to_device,
    wrap,
)
from rpg_worldmodel.models.heads import action_targets
from rpg_worldmodel.models.steps import store_extents, store_turns
from rpg_worldmodel.models.world_model import WorldModel
from rpg_worldmodel.refiner_stage import refiner_stage_due, run_refiner_stage
from rpg_worldmodel.resume import (
    Resume,
    check_new_run_dir,
    restore_training,
    resume_config,
    resume_from,
    rng_state,
    start_from,
    starting_checkpoint,
    training_state,
)
from rpg_worldmodel.run_record import CheckpointError, CheckpointRecord, DataRecord, RunRecord
from rpg_worldmodel.runlog import Meter, MetricsLog

#: The optimiser beside ``train.lr`` and its schedule: AdamW's betas and weight decay (on weight
#: matrices and kernels, `WorldModel.param_groups`), the learning rate's floor at the end of its
#: cosine decay (a share of ``train.lr``), and the largest global gradient norm.
BETAS, WEIGHT_DECAY, MIN_LR_RATIO, GRAD_CLIP = (0.9, 0.95), 0.05, 0.05, 1.0


def lr_at(step: int, cfg: WorldModelConfig) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine decay to ``lr * MIN_LR_RATIO`` at ``max_steps``."""
    t = cfg.train
    warmup = min(t.warmup_steps, t.max_steps)
    if step < warmup:
        return t.lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, t.max_steps - warmup))
    return t.lr * (MIN_LR_RATIO + (1 - MIN_LR_RATIO) * 0.5 * (1 + math.cos(math.pi * progress)))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeds the legacy global RNG third-party code uses
    torch.manual_seed(seed)


@torch.no_grad()
def evaluate_split(model: WorldModel, dataset: TrajectoryWindows, indices: np.ndarray, cfg: WorldModelConfig,
                   device: torch.device, batch_size: int = 256) -> dict[str, float]:
    """Mean loss statistics over ``indices`` windows of ``dataset`` (eval mode, no weight update);
    with an extent prior the windows start from what their games showed before, as in training.
    The action accuracy is the mean over the actions the head predicts (none after a game's end, none
    of ``data.unmodelled_policies``); every other statistic is the mean over windows."""
    if model.cfg.extent_prior and dataset.extents_before is None:
        dataset.extents_before = store_extents(dataset.store, model.cfg)
    was_training = model.training
    model.eval()
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for a in range(0, len(indices), batch_size):
        batch = dataset.get_batch(indices[a : a + batch_size])
        with autocast_context(device):
            loss, stats = model.loss(to_device(batch, device))
        targets = action_targets(batch["actions"][:, 1:], batch.get("actions_modelled"))  # (B, T)
        for key, value in {"loss": loss, **stats}.items():
            weight = int((targets >= 0).sum()) if key == "action_acc" else len(targets)
            if weight:  # a batch of unmodelled windows has no action accuracy (nan)
                totals[key] = totals.get(key, 0.0) + float(value) * weight
                counts[key] = counts.get(key, 0) + weight
    model.train(was_training)
    return {k: v / counts[k] for k, v in totals.items()}


@dataclass
class TrainResult:
    run_dir: Path
    checkpoint: Path  # the last
    best: Path  # the lowest validation loss (what evaluate, play and the pipeline take)
    step: int
    val: dict[str, float]
    train_samples_per_s: float
    wall_s: float
    rank: int = 0  # of the process that returns it (under torchrun every process returns one)


@dataclass
class Run:
    """Everything `setup` prepares for the loop."""

    cfg: WorldModelConfig
    procs: Processes
    run_dir: Path
    start_step: int
    model: WorldModel  # what is saved and evaluated
    engine: nn.Module  # what the step calls: the model's loss, in DistributedDataParallel under torchrun
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    train_set: TrajectoryWindows
    val_set: TrajectoryWindows
    val_idx: np.ndarray  # a fixed, evenly spread subset: cheap and identical at every evaluation
    record: RunRecord  # what every checkpoint records besides the weights, step, config and metrics
    data_summary: dict[str, Any]  # files, memory estimate, streamed or not (summary.json)
    draws: torch.Generator | None = None  # several processes: the refiner's, shared (shared_generator)

    @property
    def device(self) -> torch.device:
        return self.procs.device

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    def input_mask(self, generator: torch.Generator) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """The training input mask (``train.train_mask``) drawing from ``generator``; None for none.
        Under torchrun each rank masks its slice as the whole global batch would be masked."""
        t, procs = self.cfg.train, self.procs
        if t.train_mask == "none":
            return None
        return functools.partial(apply_input_mask, kind=t.train_mask, generator=generator,
                                 channel_names=self.record.data.channel_names, rows=procs.rows(t.batch_size))


def open_data(cfg: WorldModelConfig, procs: Processes) -> tuple[DataFiles, dict[str, np.ndarray], DataRecord]:
    """The training files (every rank the same: checked), their split and data record; fills in
    the model's settings that come from the game (`fill_game_settings`) when the config leaves
    them empty. The input mask must name a channel of these files (or be none / random_cells)."""
    files = DataFiles.open(cfg.data.path)
    procs.same_everywhere(files.fingerprints, "the training data",
                          shown=[f"{s.path} ({fp[:12]})" for s, fp in zip(files.sources, files.fingerprints,
                                                                          strict=True)])
    fill_view_shape(cfg.model, files.meta)
    splits = training_splits(files, cfg.data)
    fill_game_settings(cfg.model, files.meta, lambda: step_rewards(files, splits["train"]))
    check_data_matches(cfg.model, files.meta, data_path=files.describe())
    check_mask(cfg.train.train_mask, files.meta["channel_names"], "train.train_mask")
    return files, splits, DataRecord.from_dict(data_record(files))


def setup(cfg: WorldModelConfig, procs: Processes, resume: str | os.PathLike | None = None) -> Run:
    """Seeds, data (split by game), model, optimizer; a resumed run's state restored."""
    run_dir = Path(cfg.out_dir)
    if resume is None:
        check_new_run_dir(run_dir)
    start = starting_checkpoint(cfg) if resume is None and cfg.train.init_from else None
    seed_everything(cfg.train.seed)
    files, splits, record = open_data(cfg, procs)
    resumed: Resume | None = None
    if resume is not None:
        resumed = resume_from(resume, cfg, record)
        splits, run_dir = resumed.splits, resumed.run_dir
    elif start is not None:
        splits = start_from(start, cfg, record, splits)
    if not cfg.model.kind_limits:  # read off the training games' views, once: then part of the config
        fixed, cfg.model.kind_limits = view_statistics(files, splits["train"])
        cfg.model.fixed_cells = cfg.model.fixed_cells or fixed  # a fine-tuned model keeps its start's
        if start is None:  # and its motions
            cfg.model.turns = cfg.model.turns or store_turns(files.store(splits["train"], True), cfg.model)
    # the window is read off the training games when left empty: then part of the config
    train_set, val_set, data_summary = training_windows(files, splits, cfg.data, cfg.model)
    cfg.model.pays_only_at_ends = pays_only_at_ends(train_set.store)  # the files', not a setting
    if cfg.model.extent_prior:  # what each window's game showed before it (evaluate_split: the val set's)
        train_set.extents_before = store_extents(train_set.store, cfg.model)
    val_count = min(cfg.data.max_val_windows, len(val_set))
    val_idx = np.unique(np.linspace(0, len(val_set) - 1, val_count).astype(int))
    device = procs.device
    model = WorldModel(cfg.model).to(device)
    if start is not None:
        load_model_weights(model, start, device)
    # several processes share a copy of the default generator the refiner of one process draws from
    draws = shared_generator(device) if procs.world_size > 1 else None
    if procs.rank > 0:  # each rank's own random stream (what is not drawn for the global batch)
        torch.manual_seed(rank_seed(cfg.train.seed, procs.rank))
    # fused: one kernel for all parameters, ~5x faster steps on CPU, and on CUDA
    optimizer = torch.optim.AdamW(model.param_groups(WEIGHT_DECAY), lr=cfg.train.lr, betas=BETAS, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=autocast_dtype(device) == torch.float16)
    if resumed is not None:
        restore_training(resumed, model, optimizer, scaler, device, procs.rank if procs.launched else None,
                         draws)
    started = resumed.started_from if resumed is not None else (str(start) if start is not None else None)
    run_record = RunRecord(splits={k: tuple(int(i) for i in v) for k, v in splits.items()}, data=record,
                           seed=cfg.train.seed, versions=package_versions(), init_from=started or None)
    return Run(cfg, procs, run_dir, resumed.step if resumed else 0, model, wrap(model, procs), optimizer,
               scaler, train_set, val_set, val_idx, run_record, data_summary, draws)


def start_run_folder(run: Run, resumed: bool) -> None:
    """config.yaml and the provenance of this (possibly resumed) session; the provenance is also
    recorded in every checkpoint."""
    run.run_dir.mkdir(parents=True, exist_ok=True)
    save_config(run.cfg, run.run_dir / "config.yaml")
    prov = provenance(
        seed=run.cfg.train.seed,
        data=run.record.data.to_dict(),
        resumed_from=int(run.start_step) if resumed else None,
        device=str(run.device),
        world_size=run.procs.world_size,
        parameters=run.model.num_parameters(),
    )
    name = "provenance.json" if not resumed else f"provenance_resume_{run.start_step}.json"
    (run.run_dir / name).write_text(json.dumps(prov, indent=1))
    run.record.provenance = prov


def batches(run: Run, end_step: int) -> DataLoader:
    """This rank's slices of the training batches of steps ``start_step .. end_step - 1`` (see
    `EpochBatchSampler`; windows holding an end drawn ``train.end_repeats`` more times)."""
    t = run.cfg.train
    sampler = EpochBatchSampler(len(run.train_set), t.batch_size, t.seed, run.start_step,
                                max(0, end_step - run.start_step), run.procs.rank, run.procs.world_size,
                                run.train_set.end_repeats(t.end_repeats) if t.end_repeats else None)
    return DataLoader(
        run.train_set,
        batch_sampler=sampler,
        collate_fn=collate_batch,
        num_workers=0,  # in this process: the windows are in memory, or streamed from open files
        generator=torch.Generator().manual_seed(t.seed),
        pin_memory=pinned(run.device),
        persistent_workers=False,
    )


def save(run: Run, step: int, val: dict[str, float]) -> Path | None:
    """Every rank's random state to rank 0, which writes the checkpoint (a collective under
    torchrun); the checkpoint's path on rank 0, None elsewhere."""
    procs = run.procs
    states = procs.gather(rng_state(run.device)) if procs.launched else None
    if not procs.master:
        return None
    return save_checkpoint(run.checkpoint_dir, model=run.model,
                           record=CheckpointRecord.of(run.record, step=step, config=run.cfg, metrics=val),
                           optimizer=run.optimizer,
                           training_state=training_state(run.device, run.scaler, states, run.draws))


def train_step(run: Run, batch: dict[str, torch.Tensor], step: int, mask_gen: torch.Generator
               ) -> dict[str, torch.Tensor]:
    """One optimisation step on this rank's slice of the batch of ``step``; its loss statistics."""
    t, optimizer, scaler = run.cfg.train, run.optimizer, run.scaler
    for group in optimizer.param_groups:
        group["lr"] = lr_at(step, run.cfg)
    mask_gen.manual_seed(t.seed * 1_000_003 + step)
    batch = to_device(batch, run.device)
    with autocast_context(run.device):
        loss, stats = run.engine(batch, run.input_mask(mask_gen), run.procs.part(t.batch_size, run.draws))
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(run.model.parameters(), GRAD_CLIP)
    scaler.step(optimizer)
    scaler.update()
    return {"loss": loss.detach(), **stats}


@dataclass
class Progress:
    """The loop's state between steps."""

    step: int
    end_step: int
    start_time: float
    log: MetricsLog | None  # rank 0 only
    bar: tqdm
    meter: Meter
    val: dict[str, float]
    checkpoint: Path | None = None  # the last one written
    best_val: float = float("inf")  # validation loss of the run's best checkpoint so far


def after_step(run: Run, p: Progress) -> None:
    """Log (the ranks' mean, written by rank 0), evaluate and checkpoint when it is time: every
    ``checkpoint_every`` steps, at the end, and whenever the validation loss is the lowest yet
    (that checkpoint becomes the run's best)."""
    t, procs, step = run.cfg.train, run.procs, p.step
    if step % t.log_every == 0 or step == p.end_step:
        values = {**procs.mean(p.meter.flush(t.batch_size)), "lr": lr_at(step - 1, run.cfg)}
        if procs.master:
            p.log.log(step, "train", {**values, "elapsed_s": time.perf_counter() - p.start_time})
            p.bar.set_postfix(loss=f"{values['loss']:.3f}", val=f"{p.val.get('loss', float('nan')):.3f}")
    improved = False
    if step % t.eval_every == 0 or step == p.end_step:
        if procs.master:
            p.val = evaluate_split(run.model, run.val_set, run.val_idx, run.cfg, run.device)
            p.log.log(step, "val", {**p.val, "elapsed_s": time.perf_counter() - p.start_time})
            improved = p.val["loss"] < p.best_val
        improved = procs.broadcast(improved)  # the save below is a collective: every rank must agree
    if improved or step % t.checkpoint_every == 0 or step == p.end_step:
        p.checkpoint = save(run, step, p.val)
        if procs.master:
            if improved:
                p.best_val = p.val["loss"]
                mark_best(p.checkpoint, p.best_val)
            prune_checkpoints(run.checkpoint_dir, t.keep_last_checkpoints)
    p.bar.update(1)


def train(
    cfg: WorldModelConfig, resume: str | os.PathLike | None = None, stop_at: int | None = None
) -> TrainResult:
    """Train (or resume) a run; ``stop_at`` ends early after that step, with a checkpoint (as if
    interrupted: the schedule still follows ``max_steps``). Under torchrun every process calls it."""
    start_time = time.perf_counter()
    procs = Processes.from_env(cfg.train.device)
    procs.check_batch(cfg.train.batch_size)
    with pinned_torch_threads(cfg.train.num_threads or None), process_group(procs):
        run = setup(cfg, procs, resume)
        if procs.master:
            start_run_folder(run, resumed=resume is not None)
        t = cfg.train
        end_step = t.max_steps if stop_at is None else min(stop_at, t.max_steps)
        p = Progress(run.start_step, end_step, start_time,
                     MetricsLog(run.run_dir, run.start_step) if procs.master else None,
                     progress_bar(total=end_step, initial=run.start_step, desc="train", unit="step",
                          disable=not (t.progress and procs.master), dynamic_ncols=True), Meter(), {},
                     best_val=best_val_loss(run.checkpoint_dir))
        mask_gen = torch.Generator(device=run.device)
        run.engine.train()
        try:
            for batch in batches(run, end_step):
                t0 = time.perf_counter()
                stats = train_step(run, batch, p.step, mask_gen)
                p.step += 1
                p.meter.add(stats, t.batch_size, time.perf_counter() - t0)
                after_step(run, p)
            if procs.master and refiner_stage_due(run, end_step):
                run_refiner_stage(run, p, lambda m: evaluate_split(m, run.val_set, run.val_idx, cfg,
                                                                    run.device))
        finally:
            p.bar.close()
            if p.log is not None:
                p.log.close()
        if p.checkpoint is None and procs.master:  # nothing left to train (resumed at the end)
            p.checkpoint = resolve_checkpoint(run.checkpoint_dir, "latest")
            p.val = evaluate_split(run.model, run.val_set, run.val_idx, cfg, run.device)
        best = choose_checkpoint(run.checkpoint_dir, "best") if procs.master else None
        p.checkpoint, p.val, best = procs.broadcast((p.checkpoint, p.val, best))
        # Training is over: let DistributedDataParallel (whose reducer holds the process group) go
        # while the group lives. Freed later, at interpreter exit, gloo's teardown can abort the process.
        run.engine = run.model
    return finish(run, p, best, time.perf_counter() - start_time)


def finish(run: Run, p: Progress, best: Choice, wall_s: float) -> TrainResult:
    """summary.json (rank 0) and the result."""
    meter = p.meter
    speed = meter.train_samples / meter.train_time if meter.train_time else 0.0
    if run.procs.master:
        summary = {
            "step": p.step,
            "max_steps": run.cfg.train.max_steps,
            "checkpoint": str(p.checkpoint),
            "best_checkpoint": {"path": str(best.folder), "step": best.step, "val_loss": best.val_loss},
            "val": p.val,
            "train_samples_per_s": speed,
            "wall_s": wall_s,
            "train_windows": len(run.train_set),
            "val_windows_used": len(run.val_idx),
            "episodes": {k: len(v) for k, v in run.record.splits.items()},
            "data": run.data_summary,
            "device": str(run.device),
            "world_size": run.procs.world_size,
            "parameters": run.model.num_parameters(),
        }
        (run.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return TrainResult(run_dir=run.run_dir, checkpoint=p.checkpoint, best=best.folder, step=p.step, val=p.val,
                       train_samples_per_s=speed, wall_s=wall_s, rank=run.procs.rank)


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m rpg_worldmodel.train",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="overrides: section.key=value, e.g. train.max_steps=500 model.width=128 "
        "(sections: data, model, train; unique keys may drop the section). Every key:\n\n"
        + tc.format_keys(WorldModelConfig),
    )
    p.add_argument("--data", nargs="+", action="extend", metavar="FILE",
                   help="trajectory files or globs (repeatable; several files of one game are one data "
                   "set); same as data.path=FILE or data.path=[A, B]")
    p.add_argument("--config", help="YAML file of the settings that differ from the defaults listed below "
                   "(e.g. a run folder's config.yaml); default: none")
    p.add_argument("--out", type=output_folder, help="run folder; same as out_dir=DIR")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    p.add_argument("--stop-at", type=positive_int,
                   help="stop after this step with a checkpoint (schedule: max_steps)")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    data, more = split_data_args(args.data or [])
    args.overrides = [*args.overrides, *more]
    if args.resume:
        if args.config or args.out:
            raise CheckpointError(
                "--resume continues a run with its own config and folder; drop --config / --out "
                "(or start a new run without --resume)"
            )
        cfg = resume_config(args.resume, list(args.overrides))
    else:
        cfg = load_world_model_config(args.config, list(args.overrides))
    if data:
        cfg.data.path = data[0] if len(data) == 1 else data
    if args.out:
        cfg.out_dir = str(args.out)
    result = train(cfg.validate(), resume=args.resume, stop_at=args.stop_at)
    if result.rank != 0:
        return 0
    val = result.val
    print(
        f"step {result.step}: val loss {val.get('loss', float('nan')):.4f}  "
        f"view CE {val.get('view_ce', 0):.4f}  "
        f"action acc {val.get('action_acc', 0):.3f}  ({result.train_samples_per_s:.0f} samples/s, "
        f"{result.wall_s:.0f} s)"
    )
    print(result.checkpoint)
    return 0


if __name__ == "__main__":
    run_command(main)
