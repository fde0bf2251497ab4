"""Train the world model on a trajectory file.

    python -m rpg_worldmodel.train --data greedy.h5 [--config C.yaml] [key=value ...] [--resume RUN_DIR]

The run folder (``out_dir``) receives config.yaml, provenance.json, metrics.csv, tb/ (tensorboard),
checkpoints/ and summary.json. Episodes are split by game (``rpg_env.trajectories.split_episodes``);
training uses the train split only and the validation loss the val split only; the test split
is left for ``rpg_worldmodel.evaluate``. The split is written into every checkpoint.

Determinism: the batch order is a pure function of ``(seed, step)`` and the random input
masks of ``(seed, step)``, and checkpoints carry the optimizer and RNG states, so
``--resume`` continues with exactly the losses an uninterrupted run would have had.

Reading order: `setup` (config, device, seeds, data, model, optimizer, resume), then `train`'s
loop (learning rate, batch, ``model.loss``, backward / clip / step, log, evaluate, save).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
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
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from rpg_env import typed_config as tc
from rpg_env.cli import ArgumentParser, run_command
from rpg_env.provenance import package_versions, pinned_torch_threads, provenance
from rpg_worldmodel.checkpoint import (
    LATEST_FILE,
    CheckpointError,
    Resume,
    resolve_checkpoint,
    restore_training,
    resume_config,
    resume_from,
    save_checkpoint,
    training_state,
)
from rpg_worldmodel.config import DEFAULT_CONFIG_PATH, ConfigError, WorldModelConfig, load_config, save_config
from rpg_worldmodel.data import (
    DataSource,
    EpochBatchSampler,
    TrajectoryWindows,
    apply_input_mask,
    check_data_matches,
    collate_batch,
    data_record,
    item_codes,
    reward_classes,
    training_splits,
)
from rpg_worldmodel.models.world_model import LossWeights, WorldModel

METRIC_FIELDS = ("step", "split", "loss", "view_ce", "action_ce", "action_acc", "cell_acc", "reward_ce",
                 "reward_acc", "lr", "samples_per_s", "elapsed_s")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"train.device={name!r} but CUDA is not available here; use train.device=cpu or auto"
        )
    return device


def autocast_context(device: torch.device, enabled: bool):
    """bf16 autocast on CUDA GPUs that support it, else fp16; never on CPU (fp32 is faster there)."""
    if not enabled or device.type != "cuda":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.autocast("cuda", dtype=dtype)


def lr_at(step: int, cfg: WorldModelConfig) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine decay to ``lr * min_lr_ratio`` at ``max_steps``."""
    t = cfg.train
    warmup = min(t.warmup_steps, t.max_steps)
    if step < warmup:
        return t.lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, t.max_steps - warmup))
    return t.lr * (t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeds the legacy global RNG third-party code uses
    torch.manual_seed(seed)


def seed_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: derive NumPy/random seeds from torch's per-worker seed."""
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)  # noqa: NPY002 - same, per DataLoader worker
    random.seed(seed)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def loss_weights(cfg: WorldModelConfig, channel_names: Sequence[str]) -> LossWeights:
    """The config's loss weights; items are the data's channels other than empty and wall."""
    t = cfg.train
    return LossWeights(t.view_loss_weight, t.action_loss_weight, t.item_weight, item_codes(channel_names),
                       t.reward_loss_weight)


def compute_losses(
    model: WorldModel, batch: dict[str, torch.Tensor], cfg: WorldModelConfig, device: torch.device
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Compatibility (benchmarks): `WorldModel.loss` of an unmasked batch moved to ``device``,
    with the game's own channel names."""
    from rpg_env.game.constants import vocabulary

    with autocast_context(device, cfg.train.amp):
        return model.loss(to_device(batch, device), loss_weights(cfg, vocabulary().cell_names))


@torch.no_grad()
def evaluate_split(
    model: WorldModel,
    dataset: TrajectoryWindows,
    indices: np.ndarray,
    cfg: WorldModelConfig,
    device: torch.device,
    batch_size: int = 256,
) -> dict[str, float]:
    """Mean loss statistics over ``indices`` windows of ``dataset`` (eval mode, no weight update)."""
    was_training = model.training
    model.eval()
    weights = loss_weights(cfg, dataset.store.channel_names)
    totals: dict[str, float] = {}
    count = 0
    for a in range(0, len(indices), batch_size):
        batch = dataset.get_batch(indices[a : a + batch_size])
        with autocast_context(device, cfg.train.amp):
            loss, stats = model.loss(to_device(batch, device), weights)
        n = len(batch["views"])
        for key, value in {"loss": loss, **stats}.items():
            totals[key] = totals.get(key, 0.0) + float(value) * n
        count += n
    model.train(was_training)
    return {k: v / max(count, 1) for k, v in totals.items()}


@dataclass
class TrainResult:
    run_dir: Path
    checkpoint: Path
    step: int
    val: dict[str, float]
    train_samples_per_s: float
    wall_s: float


class MetricsLog:
    """metrics.csv + tensorboard; on resume, rows after the resumed step are dropped (they belong
    to the interrupted tail that the resumed run recomputes)."""

    def __init__(self, run_dir: Path, start_step: int):
        from torch.utils.tensorboard import SummaryWriter

        self.path = run_dir / "metrics.csv"
        rows: list[dict[str, str]] = []
        if start_step > 0 and self.path.exists():
            with self.path.open(newline="") as f:
                rows = [r for r in csv.DictReader(f) if int(r["step"]) <= start_step]
        with self.path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=METRIC_FIELDS)
            writer.writeheader()
            writer.writerows(rows)
        self._file = self.path.open("a", newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=METRIC_FIELDS)
        self.tb = SummaryWriter(str(run_dir / "tb"), purge_step=start_step + 1 if start_step else None)

    def log(self, step: int, split: str, values: dict[str, float]) -> None:
        row = {"step": step, "split": split, **{k: values.get(k, "") for k in METRIC_FIELDS[2:]}}
        self._csv.writerow(row)
        self._file.flush()
        for key, value in values.items():
            if key in METRIC_FIELDS[2:] and value != "":
                self.tb.add_scalar(f"{split}/{key}", float(value), step)

    def close(self) -> None:
        self._file.close()
        self.tb.close()


class Meter:
    """Training statistics averaged over the steps since the last log line, and throughput."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.steps, self.since = 0, time.perf_counter()
        self.train_time, self.train_samples = 0.0, 0

    def add(self, values: dict[str, torch.Tensor], samples: int, seconds: float) -> None:
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + float(value)
        self.steps += 1
        self.train_samples += samples
        self.train_time += seconds

    def flush(self, batch_size: int) -> dict[str, float]:
        """The window's means and samples/s; starts a new window."""
        now = time.perf_counter()
        values = {k: v / self.steps for k, v in self.sums.items()}
        values["samples_per_s"] = self.steps * batch_size / (now - self.since)
        self.sums, self.steps, self.since = {}, 0, now
        return values


@dataclass
class Run:
    """Everything `setup` prepares for the loop."""

    cfg: WorldModelConfig
    device: torch.device
    run_dir: Path
    start_step: int
    model: WorldModel
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    train_set: TrajectoryWindows
    val_set: TrajectoryWindows
    val_idx: np.ndarray  # a fixed, evenly spread subset: cheap and identical at every evaluation
    weights: LossWeights
    meta: dict[str, Any]  # what every checkpoint records besides the weights

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    def input_mask(self, generator: torch.Generator) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """The training input mask (``train.train_mask``) drawing from ``generator``; None for none."""
        t = self.cfg.train
        if t.train_mask == "none":
            return None
        return functools.partial(apply_input_mask, kind=t.train_mask, prob=t.mask_prob, generator=generator,
                                 channel_names=self.meta["data"]["channel_names"])


def setup(cfg: WorldModelConfig, resume: str | os.PathLike | None = None) -> Run:
    """Device, seeds, data (split by game), model, optimizer; a resumed run's state restored."""
    if not cfg.data.path:
        raise ConfigError("no data file: pass --data FILE (or data.path=FILE)")
    run_dir = Path(cfg.out_dir)
    if resume is None and (run_dir / "checkpoints" / LATEST_FILE).exists():
        raise ConfigError(
            f"{run_dir} already holds a run; resume it with --resume {run_dir} or choose another "
            f"out_dir (nothing was overwritten)"
        )
    device = resolve_device(cfg.train.device)
    seed_everything(cfg.train.seed)

    source = DataSource.open(cfg.data.path)
    if cfg.model.reward_head and not cfg.model.reward_values:
        # The classes are the game's: resolved from the training file once, then part of the config.
        cfg.model.reward_values = reward_classes(source.meta).values
    check_data_matches(cfg.model, source.meta, data_path=cfg.data.path)
    splits, record = training_splits(source, cfg.data), data_record(source)
    resumed: Resume | None = None
    if resume is not None:
        resumed = resume_from(resume, cfg, cfg.data.path, record["fingerprint"])
        splits, run_dir = resumed.splits, resumed.run_dir
    train_set = TrajectoryWindows(source.path, splits["train"], cfg.model.num_frames)
    val_set = TrajectoryWindows(source.path, splits["val"], cfg.model.num_frames)
    if len(val_set) == 0:
        raise ConfigError(
            f"no validation windows: val episodes are shorter than model.num_frames + 1 = "
            f"{cfg.model.num_frames + 1} steps"
        )
    val_idx = np.unique(
        np.linspace(0, len(val_set) - 1, min(cfg.data.max_val_windows, len(val_set))).astype(int)
    )

    model = WorldModel(cfg.model).to(device)
    optimizer = torch.optim.AdamW(
        model.param_groups(cfg.train.weight_decay),
        lr=cfg.train.lr,
        betas=(cfg.train.beta1, cfg.train.beta2),
        foreach=device.type == "cuda",
    )
    scaler = torch.amp.GradScaler(
        "cuda", enabled=device.type == "cuda" and cfg.train.amp and not torch.cuda.is_bf16_supported()
    )
    if resumed is not None:
        restore_training(resumed, model, optimizer, scaler, device)
    meta = {"splits": splits, "data": record, "seed": cfg.train.seed, "versions": package_versions()}
    return Run(cfg, device, run_dir, resumed.step if resumed else 0, model, optimizer, scaler, train_set,
               val_set, val_idx, loss_weights(cfg, record["channel_names"]), meta)


def start_run_folder(run: Run, resumed: bool) -> None:
    """config.yaml and the provenance of this (possibly resumed) session; the provenance is also
    recorded in every checkpoint."""
    run.run_dir.mkdir(parents=True, exist_ok=True)
    save_config(run.cfg, run.run_dir / "config.yaml")
    prov = provenance(
        seed=run.cfg.train.seed,
        data=run.meta["data"],
        resumed_from=int(run.start_step) if resumed else None,
        device=str(run.device),
        parameters=run.model.num_parameters(),
    )
    name = "provenance.json" if not resumed else f"provenance_resume_{run.start_step}.json"
    (run.run_dir / name).write_text(json.dumps(prov, indent=1))
    run.meta["provenance"] = prov


def batches(run: Run, end_step: int) -> DataLoader:
    """The training batches of steps ``start_step .. end_step - 1`` (see `EpochBatchSampler`)."""
    t = run.cfg.train
    sampler = EpochBatchSampler(len(run.train_set), t.batch_size, t.seed, run.start_step,
                                max(0, end_step - run.start_step))
    return DataLoader(
        run.train_set,
        batch_sampler=sampler,
        collate_fn=collate_batch,
        num_workers=run.cfg.data.num_workers,
        worker_init_fn=seed_worker,
        generator=torch.Generator().manual_seed(t.seed),
        pin_memory=run.device.type == "cuda",
        persistent_workers=False,
    )


def save(run: Run, step: int, val: dict[str, float]) -> Path:
    return save_checkpoint(run.checkpoint_dir, model=run.model, config=run.cfg, step=step,
                           optimizer=run.optimizer, training_state=training_state(run.device, run.scaler),
                           extra={**run.meta, "metrics": val})


def train(
    cfg: WorldModelConfig, resume: str | os.PathLike | None = None, stop_at: int | None = None
) -> TrainResult:
    """Train (or resume) a run; ``stop_at`` ends early after that step, with a checkpoint (as if
    interrupted: the schedule still follows ``max_steps``)."""
    start_time = time.perf_counter()
    with pinned_torch_threads(cfg.train.num_threads or None):
        run = setup(cfg, resume)
        start_run_folder(run, resumed=resume is not None)
        t, model, optimizer, scaler = cfg.train, run.model, run.optimizer, run.scaler
        end_step = t.max_steps if stop_at is None else min(stop_at, t.max_steps)
        log, meter = MetricsLog(run.run_dir, run.start_step), Meter()
        mask_gen = torch.Generator(device=run.device)
        amp = autocast_context(run.device, t.amp)
        step, val, last_ckpt = run.start_step, {}, None
        bar = tqdm(total=end_step, initial=step, desc="train", unit="step", disable=not t.progress,
                   dynamic_ncols=True)
        model.train()
        try:
            for batch in batches(run, end_step):
                t0 = time.perf_counter()
                lr = lr_at(step, cfg)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                mask_gen.manual_seed(t.seed * 1_000_003 + step)
                batch = to_device(batch, run.device)
                with amp:
                    loss, stats = model.loss(batch, run.weights, run.input_mask(mask_gen))
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                if t.grad_clip > 0:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
                scaler.step(optimizer)
                scaler.update()
                step += 1
                meter.add({"loss": loss.detach(), **stats}, len(batch["views"]), time.perf_counter() - t0)
                if step % t.log_every == 0 or step == end_step:
                    values = {**meter.flush(t.batch_size), "lr": lr}
                    log.log(step, "train", {**values, "elapsed_s": time.perf_counter() - start_time})
                    bar.set_postfix(loss=f"{values['loss']:.3f}", val=f"{val.get('loss', float('nan')):.3f}")
                if step % t.eval_every == 0 or step == end_step:
                    val = evaluate_split(model, run.val_set, run.val_idx, cfg, run.device)
                    log.log(step, "val", {**val, "elapsed_s": time.perf_counter() - start_time})
                if step % t.checkpoint_every == 0 or step == end_step:
                    last_ckpt = save(run, step, val)
                bar.update(1)
        finally:
            bar.close()
            log.close()
        if last_ckpt is None:  # nothing left to train (resumed at the end): still report the state
            last_ckpt = resolve_checkpoint(run.checkpoint_dir)
            val = evaluate_split(model, run.val_set, run.val_idx, cfg, run.device)
    return finish(run, step, last_ckpt, val, meter, time.perf_counter() - start_time)


def finish(run: Run, step: int, checkpoint: Path, val: dict[str, float], meter: Meter, wall_s: float
           ) -> TrainResult:
    """summary.json and the result."""
    speed = meter.train_samples / meter.train_time if meter.train_time else 0.0
    summary = {
        "step": step,
        "max_steps": run.cfg.train.max_steps,
        "checkpoint": str(checkpoint),
        "val": val,
        "train_samples_per_s": speed,
        "wall_s": wall_s,
        "train_windows": len(run.train_set),
        "val_windows_used": len(run.val_idx),
        "episodes": {k: len(v) for k, v in run.meta["splits"].items()},
        "device": str(run.device),
        "parameters": run.model.num_parameters(),
    }
    (run.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return TrainResult(run_dir=run.run_dir, checkpoint=checkpoint, step=step, val=val,
                       train_samples_per_s=speed, wall_s=wall_s)


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m rpg_worldmodel.train",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="overrides: section.key=value, e.g. train.max_steps=500 model.width=128 "
        "(sections: data, model, train; unique keys may drop the section). Every key:\n\n"
        + tc.format_keys(WorldModelConfig),
    )
    p.add_argument("--data", help="trajectory file (.h5); same as data.path=FILE")
    p.add_argument("--config", help="YAML config (default: rpg_worldmodel/configs/default.yaml)")
    p.add_argument("--out", help="run folder; same as out_dir=DIR")
    p.add_argument(
        "--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint (or a step_* folder)"
    )
    p.add_argument(
        "--stop-at", type=int, help="stop after this step with a checkpoint (schedule still max_steps)"
    )
    p.add_argument("overrides", nargs="*", metavar="key=value")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.resume:
        if args.config or args.out:
            raise CheckpointError(
                "--resume continues a run with its own config and folder; drop --config / --out "
                "(or start a new run without --resume)"
            )
        cfg = resume_config(args.resume, list(args.overrides))
    else:
        cfg = load_config(args.config or DEFAULT_CONFIG_PATH, list(args.overrides))
    if args.data:
        cfg.data.path = args.data
    if args.out:
        cfg.out_dir = args.out
    result = train(cfg.validate(), resume=args.resume, stop_at=args.stop_at)
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
