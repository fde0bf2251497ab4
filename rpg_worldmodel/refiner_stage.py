"""The cell refiner's own stage: after the whole model has trained, the refiner trains alone.

The refiner reads the view head's logits detached (`rpg_worldmodel.models.refiner`), so while the
whole model trains it learns from a head that is still changing, and by the end of the default
1,200 steps it is under-trained: its conditionals leave up to a few per cent of wall on the last
cells of an incoming row whose other cells were drawn open (traced in a dream), and a dream draws
those tails. This stage gives it ``train.refiner_stage`` times ``max_steps`` steps on the final
view head, from the run's best checkpoint, and writes the result as the run's next checkpoint:
every weight but the refiner's is bit for bit what the main stage left, so the view, action and
reward figures are unchanged (docs/imagination.md, "Fidelity").

A step reads ``train.batch_size`` windows, as a step of the main stage does, and scores the refiner
on ``model.refiner_views`` of their next views; the view head's forward pass runs without a
gradient. The defaults were measured, not searched: 3,600 steps of 32 windows (``refiner_stage=3``;
against 1,200, more whole dreams stay one room and co-players stay in view as often as in the game);
400 steps, or 1,200 steps of 8 windows under the loss summed over cells that came before, changed
little (docs/imagination.md).

Under torchrun the first process runs the stage alone (the refiner is small) while the others
wait: its result is the same for any number of processes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader

from rpg_base.progress import progress_bar
from rpg_worldmodel.checkpoint import (
    choose_checkpoint,
    load_model_weights,
    mark_best,
    prune_checkpoints,
    save_checkpoint,
)
from rpg_worldmodel.config import WorldModelConfig
from rpg_worldmodel.data.windows import EpochBatchSampler, TrajectoryWindows, collate_batch
from rpg_worldmodel.distributed import autocast_context, to_device
from rpg_worldmodel.models.refiner import BatchPart, refiner_loss
from rpg_worldmodel.models.steps import view_codes
from rpg_worldmodel.models.world_model import WorldModel
from rpg_worldmodel.resume import training_state
from rpg_worldmodel.run_record import CheckpointRecord

#: The refiner's learning rate (peak, after ``REFINER_WARMUP`` steps; cosine to 0 by the last).
REFINER_LR, REFINER_WARMUP = 2e-3, 50
#: Why the stage's result is the run's best where its validation loss is not the lowest: the stage
#: trains only the refiner, which only draws imagined views, and its held-out cross-entropy (the cells
#: a view hides, given the true others) does not tell how whole dreams come out. Measured on a loop
#: iteration's world model (6,000 real steps of files): 600 steps alone raised that cross-entropy from
#: 0.101 to 0.105, and took the whole dreams one room explains from 0.02 to 0.11 (greedy play) and
#: from 0.17 to 0.28 (random play), frames valid from 0.53 to 0.69 and from 0.67 to 0.74
#: (benchmarks/results/imagination_fidelity_loop_refiner_stage.json; docs/learn.md).
REFINER_KEPT = "the refiner stage's result, kept whatever its validation loss"


def refiner_lr(step: int, steps: int) -> float:
    """Linear warm-up to `REFINER_LR`, then a cosine to 0 at ``steps``."""
    if step < REFINER_WARMUP:
        return REFINER_LR * (step + 1) / REFINER_WARMUP
    done = (step - REFINER_WARMUP) / max(1, steps - REFINER_WARMUP)
    return REFINER_LR * 0.5 * (1 + math.cos(math.pi * done))


def train_refiner(model: WorldModel, train_set: TrajectoryWindows, cfg: WorldModelConfig,
                  device: torch.device, progress: bool = True) -> float:
    """Train ``model.refiner`` alone for ``cfg.train.refiner_steps`` steps (``refiner_stage`` times
    ``max_steps``) on ``train_set``'s windows, seeded by ``cfg.train.seed`` (the same run trains
    the same refiner); every other weight is left as it is. Returns the refiner's mean
    cross-entropy (nats) over the last 50 steps."""
    steps, seed, windows = cfg.train.refiner_steps, cfg.train.seed, cfg.train.batch_size
    refiner = model.refiner
    # the windows and the masks come from generators of their own: the main stage's state is not read
    sampler = EpochBatchSampler(len(train_set), windows, seed + 1, 0, steps)
    loader = DataLoader(train_set, batch_sampler=sampler, collate_fn=collate_batch, num_workers=0)
    part = BatchPart(0, windows, torch.Generator(device).manual_seed(seed + 2))
    optimizer = torch.optim.AdamW(refiner.parameters(), lr=REFINER_LR, weight_decay=0.0)
    model.eval()  # the view head as imagination runs it
    refiner.train()
    recent: list[float] = []
    bar = progress_bar(loader, total=steps, desc="refiner", unit="step", disable=not progress,
                       dynamic_ncols=True)
    for step, batch in enumerate(bar):
        batch = to_device(batch, device)
        views, actions = batch["views"].float(), batch["actions"]
        t = actions.shape[1] - 1
        with torch.no_grad(), autocast_context(device):
            view_logits = model(views[:, :t], actions[:, :t], batch.get("extents_before")).view.float()
        for group in optimizer.param_groups:
            group["lr"] = refiner_lr(step, steps)
        loss = refiner_loss(refiner, view_logits, view_codes(views[:, 1:]), cfg.model.num_frames - 1,
                            cfg.model.refiner_views, part)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(refiner.parameters(), 1.0)
        optimizer.step()
        recent = (recent + [loss.item()])[-50:]
        if step % 50 == 0:
            bar.set_postfix(refiner_ce=f"{sum(recent) / len(recent):.4f}")
    bar.close()
    model.train()
    return sum(recent) / max(1, len(recent))


def refiner_stage_due(run: Any, stopped_at: int) -> bool:
    """Whether the refiner stage of ``run`` (`rpg_worldmodel.train.Run`) is still to run: the model
    has a refiner, the stage has steps, the main stage reached ``max_steps`` (not stopped early)
    and no checkpoint is past it yet."""
    t = run.cfg.train
    return (run.model.refiner is not None and t.refiner_steps > 0 and stopped_at >= t.max_steps
            and run.start_step < t.max_steps + t.refiner_steps)


def run_refiner_stage(run: Any, p: Any, evaluate: Callable[[WorldModel], dict[str, float]]) -> None:
    """The refiner stage of ``run`` (`rpg_worldmodel.train.Run`; first process only): from the run's
    best checkpoint, train the refiner alone, evaluate, and write the result as checkpoint
    ``max_steps + refiner_steps``, the run's best whatever its validation loss (`REFINER_KEPT`).
    ``p`` (`rpg_worldmodel.train.Progress`) takes the new checkpoint and validation figures;
    ``evaluate(model) -> dict`` is the run's validation."""
    t = run.cfg.train
    best = choose_checkpoint(run.checkpoint_dir, "best")
    load_model_weights(run.model, best.folder, run.device)
    train_refiner(run.model, run.train_set, run.cfg, run.device, progress=t.progress)
    step = t.max_steps + t.refiner_steps
    p.val = evaluate(run.model)
    if p.log is not None:
        p.log.log(step, "val", p.val)
    # the main stage's optimizer and random state, so a resumed run finds the run finished
    p.checkpoint = save_checkpoint(run.checkpoint_dir, model=run.model, optimizer=run.optimizer,
                                   record=CheckpointRecord.of(run.record, step=step, config=run.cfg,
                                                              metrics=p.val),
                                   training_state=training_state(run.device, run.scaler, None, run.draws))
    lowest = p.val["loss"] < p.best_val
    p.best_val = p.val["loss"]
    mark_best(p.checkpoint, p.best_val, chosen=None if lowest else REFINER_KEPT)
    prune_checkpoints(run.checkpoint_dir, t.keep_last_checkpoints)
    p.step = step

