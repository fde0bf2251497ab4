"""World-model training throughput with the windows streamed from disk, against the same windows
held in memory.

Data: ten times the pipeline's default recording (``PipelineSettings().self_games`` = 1500 games
of the DQN expert, learner streams only, as `rpg_worldmodel.pipeline` records them), so 15,000
games, recorded once with `rpg_env.record.record` (greedy if the expert is not shipped). The train
split (``rpg_worldmodel.data.shards.training_splits``, default ``data`` settings) is served two ways:

- ``memory``: decoded into memory (`EpisodeStore`), what training does when the views fit
  ``data.max_memory_mb``;
- ``disk``: left in the file (`StreamedEpisodes`, as with ``data.max_memory_mb=0``): every window's
  views are read through h5py's chunk cache. Before each disk round the file's pages are dropped
  from the OS page cache (``posix_fadvise(DONTNEED)``, Linux), so reads start from the disk.

Each round times ``--steps`` training steps of the default model (`rpg_worldmodel.config`'s defaults:
width 96, 2 layers, batch 64, 5 frames; DataLoader with ``--workers`` workers, loss, backward, clipping,
AdamW, as
``rpg_worldmodel.train``) after ``--warmup`` untimed ones, alternating memory and disk rounds in
the same run so that load from other processes hits both alike; the batches continue one epoch
order across rounds. Also timed: the data alone (batches/s without the model). Goal: disk
training throughput >= 0.8x memory.

Usage::

    python benchmarks/worldmodel_streaming.py            # 15,000 games (records ~2 min), 5 rounds
    python benchmarks/worldmodel_streaming.py --quick    # smoke check: 300 games, 1 round, 3 steps

Writes ``benchmarks/results/worldmodel_streaming.json`` (``--out`` elsewhere).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from rpg_base.cli import ArgumentParser, device_name, non_negative_int, output_file, positive_int, run_command
from rpg_base.errors import InputError
from rpg_base.results import write_results

RESULTS = Path(__file__).resolve().parent / "results" / "worldmodel_streaming.json"
SCALE = 10  # times the pipeline's default number of games
GOAL = 0.8


def drop_page_cache(path: Path) -> bool:
    """Ask the OS to forget the file's cached pages (so the next reads hit the disk); False where
    it cannot (no ``posix_fadvise``)."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def record_data(path: Path, games: int, num_envs: int) -> dict:
    from rpg_env.record import record
    from rpg_worldmodel.pipeline import resolve_expert

    policy, label = resolve_expert("dqn")
    return record(policy, path, games, seed=0, num_envs=num_envs, mode="w", policy_id=label,
                  record_co_players=False, progress=False)


class Trainer:
    """The default model's training step on batches from one of two datasets (same windows)."""

    def __init__(self, device: str):
        import torch

        from rpg_worldmodel.config import load_world_model_config
        from rpg_worldmodel.distributed import autocast_dtype, resolve_device
        from rpg_worldmodel.models.world_model import WorldModel
        from rpg_worldmodel.train import GRAD_CLIP, WEIGHT_DECAY

        self.torch = torch
        self.cfg = load_world_model_config(None, [])
        self.device = resolve_device(device)
        torch.manual_seed(0)
        self.model = WorldModel(self.cfg.model).to(self.device).train()
        self.grad_clip = GRAD_CLIP
        self.optimizer = torch.optim.AdamW(self.model.param_groups(WEIGHT_DECAY), lr=1e-3,
                                           betas=(0.9, 0.95), foreach=self.device.type == "cuda")
        self.scaler = torch.amp.GradScaler("cuda", enabled=autocast_dtype(self.device, True) == torch.float16)

    def loader(self, dataset, start_step: int, num_steps: int, workers: int):
        from torch.utils.data import DataLoader

        from rpg_worldmodel.data.windows import EpochBatchSampler, collate_batch
        from rpg_worldmodel.distributed import pinned

        sampler = EpochBatchSampler(len(dataset), self.cfg.train.batch_size, 0, start_step, num_steps)
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_batch, num_workers=workers,
                          pin_memory=pinned(self.device))

    def step(self, batch) -> None:
        from rpg_worldmodel.distributed import autocast_context, to_device

        with autocast_context(self.device, True):
            loss, _ = self.model.loss(to_device(batch, self.device))
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)


def timed_round(trainer: Trainer, dataset, start: int, steps: int, warmup: int, workers: int,
                train: bool) -> float:
    """Seconds per step over ``steps`` steps after ``warmup`` untimed ones (batches from step
    ``start`` on); without ``train``, the batches alone."""
    batches = iter(trainer.loader(dataset, start, warmup + steps, workers))
    for _ in range(warmup):
        batch = next(batches)
        if train:
            trainer.step(batch)
    trainer.sync()
    begin = time.perf_counter()
    for batch in batches:
        if train:
            trainer.step(batch)
    trainer.sync()
    return (time.perf_counter() - begin) / steps


def summary(seconds: list[float], per_step: int) -> dict:
    rates = [per_step / s for s in seconds]
    return {"median": statistics.median(rates), "best": max(rates), "rounds": rates}


def measure(data: Path, args: argparse.Namespace) -> tuple[dict, dict]:
    """Alternating memory / disk rounds; the rows and what was measured on."""
    import numpy as np

    from rpg_worldmodel.data.shards import DataFiles, training_splits
    from rpg_worldmodel.data.windows import TrajectoryWindows

    trainer = Trainer(args.device)
    cfg = trainer.cfg
    files = DataFiles.open(str(data))
    train_ids = training_splits(files, cfg.data)["train"]
    start = time.perf_counter()
    memory = TrajectoryWindows.of(files.store(train_ids, stream=False), cfg.model.num_frames)
    load_s = time.perf_counter() - start
    disk = TrajectoryWindows.of(files.store(train_ids, stream=True), cfg.model.num_frames)
    assert np.array_equal(memory.window_episode, disk.window_episode)
    timings: dict[str, list[float]] = {f"{m}_{k}": [] for m in ("memory", "disk") for k in ("train", "data")}
    dropped, step = False, 0
    for _ in range(args.repeats):
        for name, dataset in (("memory", memory), ("disk", disk)):
            for kind in ("train", "data"):
                if name == "disk":
                    dropped = drop_page_cache(data)
                timings[f"{name}_{kind}"].append(timed_round(trainer, dataset, step, args.steps,
                                                             args.warmup, args.workers, kind == "train"))
                step += args.warmup + args.steps
    batch = cfg.train.batch_size
    rows = {f"{key}_{'sequences' if key.endswith('train') else 'batches'}_per_s":
            summary(seconds, batch if key.endswith("train") else 1) for key, seconds in timings.items()}
    info = {"games": int(len(files)), "train_episodes": int(len(train_ids)), "train_windows": len(memory),
            "views_in_memory_mib": files.views_nbytes(train_ids) / 2**20, "memory_load_s": load_s,
            "file_mib": data.stat().st_size / 2**20, "page_cache_dropped_before_disk_rounds": dropped,
            "device": str(trainer.device), "parameters": trainer.model.num_parameters()}
    return rows, info


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python benchmarks/worldmodel_streaming.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="300 games, one round of 3 steps: a smoke check")
    p.add_argument("--games", type=positive_int, default=None,
                   help=f"games to record (default {SCALE}x the pipeline's)")
    p.add_argument("--steps", type=positive_int, default=None,
                   help="timed steps per round (default 20, quick 3)")
    p.add_argument("--warmup", type=non_negative_int, default=None,
                   help="untimed steps first (default 3, quick 1)")
    p.add_argument("--repeats", type=positive_int, default=None,
                   help="alternating rounds (default 5, quick 1)")
    p.add_argument("--workers", type=non_negative_int, default=0,
                   help="DataLoader workers for both (data.num_workers)")
    p.add_argument("--threads", type=non_negative_int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--device", type=device_name, default="auto", help="auto, cpu or cuda")
    p.add_argument("--data", type=_data_arg,
                   help="use (or record once into) this file instead of a temporary one")
    p.add_argument("--out", type=output_file, default=RESULTS)
    return p


def _data_arg(text: str) -> Path:
    """A trajectory file that exists and opens, or a new path to record into."""
    from rpg_env.trajectories.reader import TrajectoryFile

    path = output_file(text)
    if path.exists():
        try:
            with TrajectoryFile(path):
                pass
        except InputError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return path


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    import torch

    from rpg_base.provenance import pinned_torch_threads, provenance
    from rpg_worldmodel.pipeline import PipelineSettings

    pipeline_games = PipelineSettings().self_games
    games = args.games or (300 if args.quick else SCALE * pipeline_games)
    args.steps = args.steps or (3 if args.quick else 20)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    args.repeats = args.repeats or (1 if args.quick else 5)
    with pinned_torch_threads(args.threads or None):  # and the caller's setting back after
        threads = torch.get_num_threads()
        with tempfile.TemporaryDirectory(prefix="wm_stream_") as tmp:
            data = args.data or Path(tmp) / "dqn.h5"
            recorded = record_data(data, games, PipelineSettings().num_envs) if not data.exists() else None
            rows, info = measure(data, args)
    ratio = rows["disk_train_sequences_per_s"]["median"] / rows["memory_train_sequences_per_s"]["median"]
    result = {"games": games, "pipeline_games": pipeline_games, "scale": games / pipeline_games,
              "recording": recorded, **info, "threads": threads, "workers": args.workers,
              "steps_per_round": args.steps, "rounds": args.repeats, "rows": rows,
              "disk_over_memory_train_median": ratio, "goal": GOAL, "load_average": os.getloadavg(),
              "provenance": provenance(seed=0, quick=args.quick)}
    print(f"\nWorld-model training from memory vs streamed from disk ({info['games']} games, "
          f"{info['train_windows']} train windows, {info['views_in_memory_mib']:.0f} MiB of views, file "
          f"{info['file_mib']:.0f} MiB; {info['device']}, {threads} threads, {args.workers} workers; "
          f"{args.repeats} rounds x {args.steps} steps; load average {os.getloadavg()[0]:.1f})")
    print(f"{'':34s}{'median':>10s}{'best':>10s}")
    for name, row in rows.items():
        print(f"{name:34s}{row['median']:10.1f}{row['best']:10.1f}")
    print(f"disk / memory (training, median): {ratio:.2f}x (goal >= {GOAL}x)")
    write_results(args.out, result)
    return 0


if __name__ == "__main__":
    run_command(main)
