"""Where training runs: the device, mixed precision, and the processes of a ``torchrun`` launch.

    torchrun --standalone --nproc_per_node 4 -m rpg_worldmodel.train --data shards/*.h5

As in nanoGPT's train.py: ``torchrun`` starts one process per device and sets ``RANK``,
``LOCAL_RANK`` and ``WORLD_SIZE``; `Processes.from_env` reads them (none set: one process, no
process group at all), `process_group` joins the group (NCCL on CUDA, gloo on CPU) and leaves it
on the way out, and the model is trained inside `DistributedDataParallel`
(`wrap`), which averages the gradients of the ranks. Rank 0 (``master``) alone writes: logs,
progress bar, tensorboard, metrics.csv, config, provenance and checkpoints.

The global batch (``train.batch_size``) is cut into one equal slice per rank
(`rpg_worldmodel.data.windows.EpochBatchSampler`), so the mean of the ranks' losses is the loss of the
global batch. The random draws of a step (input masks, the cell refiner's views and reveal masks:
`shared_generator`) are made for the whole global batch on every rank, each rank taking its slice,
so a run of N processes trains as one process does; each rank also keeps a random stream of its
own (`rank_seed`), which no draw of the model's reads.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from rpg_base.typed_config.values import ConfigError
from rpg_worldmodel.models.refiner import BatchPart
from rpg_worldmodel.models.world_model import WorldModel


class RankMismatchError(ConfigError):
    """The processes of one run disagree on something they must share (e.g. the data)."""


def resolve_device(name: str, local_rank: int = 0, launched: bool = False) -> torch.device:
    """The device ``train.device`` names; ``auto`` and ``cuda`` take GPU ``local_rank`` under
    torchrun (one GPU per process), and ``auto`` the CPU when there is no GPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"train.device={name!r} but CUDA is not available here; use train.device=cpu or auto"
        )
    if device.type == "cuda" and launched:
        if device.index is not None:
            raise ConfigError(f"train.device={name!r} pins every process to one GPU; use cuda or auto "
                              "(under torchrun each process takes GPU LOCAL_RANK)")
        device = torch.device("cuda", local_rank)
    return device


def backend_for(device: torch.device) -> str:
    """The process-group backend for ``device``: NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device.type == "cuda" else "gloo"


def autocast_dtype(device: torch.device, enabled: bool = True) -> torch.dtype | None:
    """bf16 on CUDA GPUs that support it, else fp16; None (fp32) when disabled or off CUDA (on
    CPU fp32 is faster)."""
    if not enabled or device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def autocast_context(device: torch.device, enabled: bool = True) -> contextlib.AbstractContextManager:
    """Autocast to `autocast_dtype`, or nothing."""
    dtype = autocast_dtype(device, enabled)
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def pinned(device: torch.device) -> bool:
    """Whether batches go through pinned (page-locked) memory: on CUDA, so that the copy to the
    GPU can be asynchronous (`to_device`)."""
    return device.type == "cuda"


def to_device(batch: Mapping[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """``batch`` on ``device``; asynchronous copies on CUDA (from the loader's pinned memory)."""
    return {k: v.to(device, non_blocking=pinned(device)) for k, v in batch.items()}


@dataclass(frozen=True)
class Processes:
    """This process's place in the run: ``rank`` of ``world_size`` (``local_rank`` on its node),
    its ``device``, and whether torchrun ``launched`` it (then a process group is used)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    launched: bool = False

    @classmethod
    def from_env(cls, device: str, environ: Mapping[str, str] = os.environ) -> Processes:
        """Read torchrun's ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``; without them, one process."""
        if "RANK" not in environ:
            return cls(device=resolve_device(device))
        local = int(environ.get("LOCAL_RANK", 0))
        return cls(int(environ["RANK"]), local, int(environ.get("WORLD_SIZE", 1)),
                   resolve_device(device, local, launched=True), launched=True)

    @property
    def master(self) -> bool:
        """Rank 0: the one process that writes."""
        return self.rank == 0

    def check_batch(self, batch_size: int) -> None:
        """Refuse a global batch that does not split into equal per-rank slices."""
        if batch_size % self.world_size:
            raise ConfigError(
                f"train.batch_size={batch_size} is the global batch and must be divisible by the "
                f"{self.world_size} processes (WORLD_SIZE); choose a multiple of {self.world_size}")

    def rows(self, batch_size: int) -> tuple[int, int] | None:
        """``(first, total)``: this rank's slice of a global batch of ``batch_size`` is rows
        ``first`` .. ``first + batch_size // world_size - 1`` of ``total``; None in one process."""
        return (self.rank * batch_size // self.world_size, batch_size) if self.world_size > 1 else None

    def part(self, batch_size: int, draws: torch.Generator | None) -> BatchPart | None:
        """This rank's `rows` and the ranks' shared generator ``draws`` (`shared_generator`), for
        the cell refiner's draws; None in one process (it draws from torch's default generator)."""
        rows = self.rows(batch_size)
        return None if rows is None or draws is None else BatchPart(*rows, draws)

    def gather(self, value: Any) -> list[Any]:
        """``value`` of every rank, in rank order (a collective: every rank must call it)."""
        if not self.launched:
            return [value]
        values: list[Any] = [None] * self.world_size
        dist.all_gather_object(values, value)
        return values

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (a collective)."""
        if not self.launched:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def same_everywhere(self, value: Any, what: str, shown: Any = None) -> None:
        """Raise `RankMismatchError` unless every rank has the same ``value`` (a collective); the
        message names rank 0's and the first differing rank's ``shown`` (default: ``value``)."""
        pairs = self.gather((value, value if shown is None else shown))
        for rank, (other, seen) in enumerate(pairs):
            if other != pairs[0][0]:
                raise RankMismatchError(f"the processes disagree on {what}: rank 0 has {pairs[0][1]}, "
                                        f"rank {rank} has {seen}; give every process the same")

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Elementwise sum of ``values`` over the ranks (a collective; float64 on the device)."""
        total = values.to(self.device, torch.float64, copy=True)  # all_reduce works in place
        if self.launched:
            dist.all_reduce(total)
        return total

    def mean(self, values: Mapping[str, float]) -> dict[str, float]:
        """The ranks' mean of each value (a collective); one process's values as they are."""
        if not self.launched:
            return dict(values)
        keys = sorted(values)
        sums = self.sum(torch.tensor([float(values[k]) for k in keys], dtype=torch.float64))
        means = sums / self.world_size
        return dict(zip(keys, means.tolist(), strict=True))


@contextlib.contextmanager
def process_group(procs: Processes) -> Iterator[None]:
    """Join the run's process group for the block (`backend_for` its device) and leave it after,
    all ranks together (a barrier) when the block ends normally, at once on error; nothing for a
    process torchrun did not launch."""
    if not procs.launched:
        yield
        return
    if procs.device.type == "cuda":
        torch.cuda.set_device(procs.device)
    dist.init_process_group(backend_for(procs.device), rank=procs.rank, world_size=procs.world_size)
    try:
        yield
        # Leave together: a rank whose last collective was a broadcast may still have its peer's
        # buffers in flight on gloo's worker threads, and interpreter exit with work on those threads
        # aborts the process ("terminate called without an active exception", seen once in CI).
        dist.barrier()
    finally:
        gc.collect()  # wrappers caught in reference cycles release the group before it is destroyed
        dist.destroy_process_group()


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank ``rank``'s own random stream in a run seeded ``seed``."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def shared_generator(device: torch.device) -> torch.Generator:
    """A generator in the state ``device``'s default generator is in now. Made by every rank
    before a rank reseeds its own stream (`rank_seed`), it is the same on every rank and draws what
    one process's default generator would: the cell refiner's training draws, made for the whole
    global batch (`rpg_worldmodel.models.refiner.BatchPart`), so that they are the same on every
    rank and the same as one process's."""
    state = torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()
    return torch.Generator(device=device).set_state(state)


class LossModule(nn.Module):
    """``model.loss`` as a module's ``forward``: DistributedDataParallel synchronises the
    gradients of what runs inside its wrapped module's forward, so the loss is computed there."""

    def __init__(self, model: WorldModel):
        super().__init__()
        self.model = model

    def forward(self, batch: dict[str, torch.Tensor],
                input_mask: Callable[[torch.Tensor], torch.Tensor] | None = None,
                part: BatchPart | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.model.loss(batch, input_mask, part)


def wrap(model: WorldModel, procs: Processes) -> nn.Module:
    """The module the training step calls: `LossModule` of ``model``, inside
    `DistributedDataParallel` under torchrun (it starts from rank 0's weights). Save and evaluate
    ``model`` itself."""
    module = LossModule(model)
    if not procs.launched:
        return module
    ids = [procs.device.index] if procs.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(module, device_ids=ids)
