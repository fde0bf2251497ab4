"""Train the world model on a trajectory file.

    python -m rpg_worldmodel.train --data greedy.h5 [--config C.yaml] [key=value ...] [--resume RUN_DIR]

The run folder (``out_dir``) receives config.yaml, provenance.json, metrics.csv, tb/ (tensorboard),
checkpoints/ and summary.json. Episodes are split by game (``rpg_env.trajectories.split_episodes``);
training uses the train split only and the validation loss the val split only; the test split
is left for ``rpg_worldmodel.evaluate``. The split is written into every checkpoint.

Determinism: the batch order is a pure function of ``(seed, step)`` and the random input
masks of ``(seed, step)``, and checkpoints carry the optimizer and RNG states, so
``--resume`` continues with exactly the losses an uninterrupted run would have had.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from rpg_env.provenance import package_versions, provenance
from rpg_env.trajectories import TrajectoryFile, split_episodes
from rpg_worldmodel.checkpoint import (
    CheckpointError,
    config_differences,
    load_model_weights,
    load_training_state,
    read_meta,
    resolve_checkpoint,
    save_checkpoint,
)
from rpg_worldmodel.config import (
    DEFAULT_CONFIG_PATH,
    ConfigError,
    WorldModelConfig,
    apply_override,
    load_config,
    save_config,
)
from rpg_worldmodel.data import (
    EpochBatchSampler,
    TrajectoryWindows,
    apply_input_mask,
    check_data_matches,
    collate_batch,
    view_codes,
)
from rpg_worldmodel.model import WorldModel

#: Entity codes whose cells the loss up-weights by ``train.item_weight`` (gem, bone, food, agent).
ITEM_CODES = (2, 3, 4, 5)
METRIC_FIELDS = (
    "step",
    "split",
    "loss",
    "view_ce",
    "action_ce",
    "action_acc",
    "cell_acc",
    "lr",
    "samples_per_s",
    "elapsed_s",
)


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


def compute_losses(
    model: WorldModel,
    batch: dict[str, torch.Tensor],
    cfg: WorldModelConfig,
    device: torch.device,
    mask_kind: str = "none",
    mask_generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Forward one batch; returns the training loss and detached per-batch statistics.

    The view loss is the per-cell cross-entropy over entity kinds, with cells whose true next
    kind is an item or the co-player weighted by ``train.item_weight`` (they are rare and are
    what the model is for); ``view_ce`` reports the plain, unweighted cross-entropy.
    """
    t = cfg.model.num_frames
    views = batch["views"].to(device, non_blocking=True).float()
    actions = batch["actions"].to(device, non_blocking=True)
    agent_ids = batch["agent_id"].to(device) if cfg.model.agent_embedding else None
    inputs = apply_input_mask(views[:, :t], mask_kind, cfg.train.mask_prob, mask_generator)
    with autocast_context(device, cfg.train.amp):
        view_logits, action_logits = model(inputs, actions[:, :t], agent_ids)
    view_logits, action_logits = view_logits.float(), action_logits.float()
    target_codes = view_codes(views[:, 1:])  # (B, T, V, V)
    cell_ce = F.cross_entropy(view_logits.transpose(1, 2), target_codes, reduction="none")
    weights = torch.ones_like(cell_ce)
    if cfg.train.item_weight != 1.0:
        is_item = torch.isin(target_codes, torch.tensor(ITEM_CODES, device=device))
        weights = torch.where(is_item, cfg.train.item_weight, 1.0)
    view_loss = (cell_ce * weights).sum() / weights.sum()
    action_targets = actions[:, 1:]
    action_ce = F.cross_entropy(
        action_logits.reshape(-1, action_logits.shape[-1]), action_targets.reshape(-1)
    )
    loss = cfg.train.view_loss_weight * view_loss + cfg.train.action_loss_weight * action_ce
    with torch.no_grad():
        stats = {
            "view_ce": cell_ce.mean(),
            "action_ce": action_ce.detach(),
            "action_acc": (action_logits.argmax(-1) == action_targets).float().mean(),
            "cell_acc": (view_logits.argmax(2) == target_codes).float().mean(),
        }
    return loss, stats


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
    totals: dict[str, float] = {}
    count = 0
    for a in range(0, len(indices), batch_size):
        batch = dataset.get_batch(indices[a : a + batch_size])
        loss, stats = compute_losses(model, batch, cfg, device)
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


def _data_record(path: Path, tf: TrajectoryFile) -> dict[str, Any]:
    meta = tf.meta
    return {
        "path": str(path.resolve()),
        "fingerprint": tf.digest(),
        "obs_shape": list(meta["obs_shape"]),
        "channel_names": list(meta["channel_names"]),
        "action_names": list(meta["action_names"]),
        "env_id": meta["env_id"],
        "env_kwargs": meta["env_kwargs"],
        "num_episodes": len(tf),
    }


def select_episodes(tf: TrajectoryFile, cfg: WorldModelConfig) -> dict[str, np.ndarray]:
    """Split by game, then keep the streams of ``data.agent_id`` (-1: every agent)."""
    splits = split_episodes(tf, cfg.data.split_fractions, cfg.data.split_seed)
    if cfg.data.agent_id >= 0:
        keep = tf.episodes["agent_id"] == cfg.data.agent_id
        if not keep.any():
            raise ConfigError(
                f"{tf.path} has no streams of agent {cfg.data.agent_id} (agent ids present: "
                f"{sorted(set(tf.episodes['agent_id'].tolist()))}); set data.agent_id"
            )
        splits = {k: v[keep[v]] for k, v in splits.items()}
    for name in ("train", "val"):
        if len(splits[name]) == 0:
            raise ConfigError(
                f"the {name} split of {tf.path} is empty ({len(tf)} streams): record more games "
                f"or change data.split_fractions"
            )
    return splits


def train(
    cfg: WorldModelConfig, resume: str | os.PathLike | None = None, stop_at: int | None = None
) -> TrainResult:
    """Train (or resume) a run; ``stop_at`` ends early after that step, with a checkpoint (as if
    interrupted: the schedule still follows ``max_steps``)."""
    start_time = time.perf_counter()
    data_path = Path(cfg.data.path)
    if not cfg.data.path:
        raise ConfigError("no data file: pass --data FILE (or data.path=FILE)")
    run_dir = Path(cfg.out_dir)
    ckpt_dir = run_dir / "checkpoints"
    start_step, training_state = 0, None
    if resume is not None:
        folder = resolve_checkpoint(resume)
        meta = read_meta(folder)
        saved = WorldModelConfig.from_dict(meta["config"], source=str(folder))
        diffs = config_differences(saved.model, cfg.model)
        if diffs:
            raise CheckpointError(
                f"cannot resume {folder}: model config differs (checkpoint vs now): {'; '.join(diffs)}"
            )
        run_dir, ckpt_dir = folder.parent.parent, folder.parent
        start_step = int(meta["step"])
        training_state = load_training_state(folder)
    elif (ckpt_dir / "latest.json").exists():
        raise ConfigError(
            f"{run_dir} already holds a run; resume it with --resume {run_dir} or choose another "
            f"out_dir (nothing was overwritten)"
        )
    device = resolve_device(cfg.train.device)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    seed_everything(cfg.train.seed)

    with TrajectoryFile(data_path) as tf:
        check_data_matches(cfg.model, tf.meta, data_path=data_path)
        splits = select_episodes(tf, cfg)
        data_record = _data_record(data_path, tf)
    if resume is not None:
        if meta["data"]["fingerprint"] != data_record["fingerprint"]:
            raise CheckpointError(
                f"cannot resume {folder}: it was trained on {meta['data']['path']} (fingerprint "
                f"{meta['data']['fingerprint'][:12]}), but {data_path} has fingerprint "
                f"{data_record['fingerprint'][:12]}; pass the same data file"
            )
        splits = {k: np.asarray(v, dtype=np.int64) for k, v in meta["splits"].items()}
    train_set = TrajectoryWindows(data_path, splits["train"], cfg.model.num_frames)
    val_set = TrajectoryWindows(data_path, splits["val"], cfg.model.num_frames)
    if len(val_set) == 0:
        raise ConfigError(
            f"no validation windows: val episodes are shorter than model.num_frames + 1 = "
            f"{cfg.model.num_frames + 1} steps"
        )
    # A fixed, evenly spread subset keeps validation cheap and identical at every evaluation.
    val_idx = np.unique(
        np.linspace(0, len(val_set) - 1, min(cfg.data.max_val_windows, len(val_set))).astype(int)
    )

    model = WorldModel(cfg.model).to(device)
    decay = [
        p for n, p in model.named_parameters() if p.dim() >= 2 and "position" not in n and "temporal" not in n
    ]
    no_decay = [
        p
        for n, p in model.named_parameters()
        if not (p.dim() >= 2 and "position" not in n and "temporal" not in n)
    ]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.train.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.train.lr,
        betas=(cfg.train.beta1, cfg.train.beta2),
        foreach=device.type == "cuda",
    )
    scaler = torch.amp.GradScaler(
        "cuda", enabled=device.type == "cuda" and cfg.train.amp and not torch.cuda.is_bf16_supported()
    )
    if training_state is not None:
        load_model_weights(model, folder, device)
        optimizer.load_state_dict(training_state["optimizer"])
        torch.set_rng_state(training_state["torch_rng"])
        if device.type == "cuda" and "cuda_rng" in training_state:
            torch.cuda.set_rng_state_all(list(training_state["cuda_rng"]))
        if "scaler" in training_state:
            scaler.load_state_dict(training_state["scaler"])

    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    prov = provenance(
        seed=cfg.train.seed,
        data=data_record,
        resumed_from=int(start_step) if resume else None,
        device=str(device),
        parameters=model.num_parameters(),
    )
    (run_dir / ("provenance.json" if resume is None else f"provenance_resume_{start_step}.json")).write_text(
        json.dumps(prov, indent=1)
    )
    extra_meta = {
        "splits": splits,
        "data": data_record,
        "seed": cfg.train.seed,
        "versions": package_versions(),
        "provenance": prov,
    }

    end_step = cfg.train.max_steps if stop_at is None else min(stop_at, cfg.train.max_steps)
    sampler = EpochBatchSampler(
        len(train_set), cfg.train.batch_size, cfg.train.seed, start_step, max(0, end_step - start_step)
    )
    loader_gen = torch.Generator().manual_seed(cfg.train.seed)
    loader = DataLoader(
        train_set,
        batch_sampler=sampler,
        collate_fn=collate_batch,
        num_workers=cfg.data.num_workers,
        worker_init_fn=seed_worker,
        generator=loader_gen,
        pin_memory=device.type == "cuda",
        persistent_workers=False,
    )
    log = MetricsLog(run_dir, start_step)
    mask_gen = torch.Generator(device=device)

    def checkpoint(step: int, metrics: dict[str, float]) -> Path:
        state = {"torch_rng": torch.get_rng_state()}
        if device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state_all()
        if scaler.is_enabled():
            state["scaler"] = scaler.state_dict()
        return save_checkpoint(
            ckpt_dir,
            model=model,
            config=cfg,
            step=step,
            optimizer=optimizer,
            training_state=state,
            extra={**extra_meta, "metrics": metrics},
        )

    model.train()
    step = start_step
    window: dict[str, float] = {}
    window_steps, window_start = 0, time.perf_counter()
    train_time, train_samples = 0.0, 0
    val_metrics: dict[str, float] = {}
    last_ckpt: Path | None = None
    bar = tqdm(
        total=end_step,
        initial=start_step,
        desc="train",
        unit="step",
        disable=not cfg.train.progress,
        dynamic_ncols=True,
    )
    try:
        for batch in loader:
            t0 = time.perf_counter()
            lr = lr_at(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            mask_gen.manual_seed(cfg.train.seed * 1_000_003 + step)
            loss, stats = compute_losses(model, batch, cfg, device, cfg.train.train_mask, mask_gen)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            if cfg.train.grad_clip > 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            step += 1
            train_time += time.perf_counter() - t0
            train_samples += len(batch["views"])
            for key, value in {"loss": loss.detach(), **stats}.items():
                window[key] = window.get(key, 0.0) + float(value)
            window_steps += 1
            if step % cfg.train.log_every == 0 or step == end_step:
                now = time.perf_counter()
                values = {k: v / window_steps for k, v in window.items()}
                values.update(
                    lr=lr,
                    samples_per_s=window_steps * cfg.train.batch_size / (now - window_start),
                    elapsed_s=now - start_time,
                )
                log.log(step, "train", values)
                bar.set_postfix(
                    loss=f"{values['loss']:.3f}", val=f"{val_metrics.get('loss', float('nan')):.3f}"
                )
                window, window_steps, window_start = {}, 0, now
            if step % cfg.train.eval_every == 0 or step == end_step:
                val_metrics = evaluate_split(model, val_set, val_idx, cfg, device)
                log.log(step, "val", {**val_metrics, "elapsed_s": time.perf_counter() - start_time})
            if step % cfg.train.checkpoint_every == 0 or step == end_step:
                last_ckpt = checkpoint(step, val_metrics)
            bar.update(1)
    finally:
        bar.close()
        log.close()
    if last_ckpt is None:  # nothing left to train (resumed at the end): still report the state
        last_ckpt = resolve_checkpoint(ckpt_dir)
        val_metrics = evaluate_split(model, val_set, val_idx, cfg, device)
    result = TrainResult(
        run_dir=run_dir,
        checkpoint=last_ckpt,
        step=step,
        val=val_metrics,
        train_samples_per_s=train_samples / train_time if train_time else 0.0,
        wall_s=time.perf_counter() - start_time,
    )
    summary = {
        "step": step,
        "max_steps": cfg.train.max_steps,
        "checkpoint": str(last_ckpt),
        "val": val_metrics,
        "train_samples_per_s": result.train_samples_per_s,
        "wall_s": result.wall_s,
        "train_windows": len(train_set),
        "val_windows_used": len(val_idx),
        "episodes": {k: len(v) for k, v in splits.items()},
        "device": str(device),
        "parameters": model.num_parameters(),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m rpg_worldmodel.train",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="overrides: section.key=value, e.g. train.max_steps=500 model.width=128 "
        "(sections: data, model, train; unique keys may drop the section)",
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        overrides = list(args.overrides)
        if args.resume:
            saved = read_meta(args.resume)["config"]
            cfg = WorldModelConfig.from_dict(saved, source=str(args.resume))
            for o in overrides:  # model changes are refused by train() with both configs named
                apply_override(cfg, o)
        else:
            cfg = load_config(args.config or DEFAULT_CONFIG_PATH, overrides)
        if args.data:
            cfg.data.path = args.data
        if args.out:
            cfg.out_dir = args.out
        cfg.validate()
        result = train(cfg, resume=args.resume, stop_at=args.stop_at)
    except (ConfigError, CheckpointError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
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
    raise SystemExit(main())
