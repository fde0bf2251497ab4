"""World-model training and inference throughput (CPU by default), beside Sorrel's reference implementation.

Reference configuration (seed 000): 6x9x9 one-hot view, 5 frames, patch 3, width 192, 2 layers,
3 heads, batch 64. Rows, all measured in this run on the same views and actions:

- ``rpg_worldmodel``: one optimisation step of ``python -m rpg_worldmodel.train`` (batch from the
  cached `TrajectoryWindows`, loss, backward, gradient clipping, AdamW), as training
  sequences/s (one sequence = one 5-frame window with its 5 next-view/next-action targets);
  and forward-only batches/s (eval mode, no grad);
- ``sorrel``: ``sorrel.models.pytorch.transformer.ViTOneHot.train_model()`` (its own buffer
  sampling, loss, backward, Adam) and its forward pass under ``torch.no_grad``; run in a
  subprocess with the interpreter of a separate virtualenv (``--sorrel-python``), because
  Sorrel is never a dependency of this project (set-up: shared/ANCHORS.md).

Measurements alternate between the two implementations (``--repeats`` rounds) and report the
median and the best round, so that load from other processes hits both alike. Threads: torch's
default for the machine unless ``--threads``. ``--device cuda`` runs both on the GPU (ours with
bf16/fp16 autocast, as training does), timing to a synchronised GPU.

Usage::

    python benchmarks/worldmodel_throughput.py --sorrel-python /work/sorrel-venv/bin/python
    python benchmarks/worldmodel_throughput.py --quick      # a few seconds, no Sorrel unless given

Writes ``benchmarks/results/worldmodel_throughput.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "worldmodel_throughput.json"
REFERENCE = dict(
    view=(6, 9, 9), num_frames=5, patch_size=3, width=192, num_layers=2, num_heads=3, batch_size=64
)
TARGET_RATIO = 3.0


def _time_loop(fn, steps: int, warmup: int, sync=lambda: None) -> float:
    """Seconds per call of ``fn`` over ``steps`` timed calls after ``warmup`` untimed ones
    (``sync`` waits for queued GPU work before the clock is read)."""
    for _ in range(warmup):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    sync()
    return (time.perf_counter() - start) / steps


def _sync(torch, device: str):
    return (lambda: torch.cuda.synchronize()) if device.startswith("cuda") else (lambda: None)


# --------------------------------------------------------------------------- Sorrel (subprocess)
def sorrel_worker(data_dir: str, steps: int, warmup: int, threads: int, mode: str,
                  device: str = "cpu") -> dict:
    """Runs inside Sorrel's virtualenv: only torch, numpy and sorrel are imported here."""
    import numpy as np
    import torch
    from sorrel.buffers import TransformerBuffer
    from sorrel.models.pytorch.transformer import ViTOneHot

    if threads:
        torch.set_num_threads(threads)
    views = np.load(Path(data_dir) / "views.npy")
    actions = np.load(Path(data_dir) / "actions.npy")
    buffer = TransformerBuffer(
        capacity=len(views), obs_shape=REFERENCE["view"], n_frames=REFERENCE["num_frames"]
    )
    buffer.states[:] = views
    buffer.actions[:] = actions
    buffer.idx, buffer.size = 0, len(views)
    np.random.seed(0)  # noqa: NPY002 - Sorrel samples from NumPy's global RNG
    torch.manual_seed(0)
    model = ViTOneHot(
        state_size=REFERENCE["view"],
        action_space=4,
        layer_size=REFERENCE["width"],
        patch_size=REFERENCE["patch_size"],
        num_frames=REFERENCE["num_frames"],
        batch_size=REFERENCE["batch_size"],
        num_layers=REFERENCE["num_layers"],
        num_heads=REFERENCE["num_heads"],
        memory=buffer,
        LR=1e-3,
        device=device,
        seed=0,
    )
    sync = _sync(torch, device)
    if mode == "train":
        model.train()
        seconds = _time_loop(model.train_model, steps, warmup, sync)
    else:
        model.eval()
        states, acts, _, _, _ = model.get_batch()
        with torch.no_grad():
            seconds = _time_loop(lambda: model(states, acts), steps, warmup, sync)
    return {
        "seconds_per_call": seconds,
        "parameters": sum(p.numel() for p in model.parameters()),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def run_sorrel(python: str, data_dir: str, steps: int, warmup: int, threads: int, mode: str,
               device: str) -> dict:
    cmd = [
        python,
        str(Path(__file__).resolve()),
        "--worker",
        "sorrel",
        "--worker-data",
        data_dir,
        "--worker-mode",
        mode,
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
        "--threads",
        str(threads),
        "--device",
        device,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode:
        raise RuntimeError(f"Sorrel worker failed ({' '.join(cmd)}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- ours
class Ours:
    """The project's training step and forward pass, reusing one model across rounds."""

    def __init__(self, data: Path, threads: int, device: str):
        import numpy as np
        import torch

        from rpg_worldmodel.config import WorldModelConfig
        from rpg_worldmodel.data.windows import EpochBatchSampler, TrajectoryWindows
        from rpg_worldmodel.distributed import autocast_context, to_device
        from rpg_worldmodel.models.world_model import WorldModel
        from rpg_worldmodel.train import GRAD_CLIP

        if threads:
            torch.set_num_threads(threads)
        self.torch, self.autocast, self.to_device = torch, autocast_context, to_device
        # The default model at the reference (Sorrel's) size: the default grew past it since.
        shape = {k: REFERENCE[k] for k in ("width", "num_layers", "num_heads", "num_frames", "patch_size")}
        base = WorldModelConfig()
        self.cfg = replace(base, data=replace(base.data, path=str(data)),
                           model=replace(base.model, **shape)).validate()
        self.grad_clip = GRAD_CLIP
        from rpg_env.trajectories.reader import TrajectoryFile

        with TrajectoryFile(data) as tf:
            episodes = np.arange(len(tf))
        self.dataset = TrajectoryWindows(data, episodes, self.cfg.model.num_frames)
        self.batches = iter(EpochBatchSampler(len(self.dataset), REFERENCE["batch_size"], 0, 0, 10**9))
        torch.manual_seed(0)
        self.device = torch.device(device)
        self.model = WorldModel(self.cfg.model).to(self.device)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=1e-3, weight_decay=0.05, betas=(0.9, 0.95)
        )
        self.sync = _sync(torch, device)
        fixed = self.dataset.get_batch(next(self.batches))
        self.fixed_views = fixed["views"][:, :-1].float().to(self.device)
        self.fixed_actions = fixed["actions"][:, :-1].to(self.device)

    def train_step(self) -> None:
        batch = self.dataset.get_batch(next(self.batches))
        with self.autocast(self.device):
            loss, _ = self.model.loss(self.to_device(batch, self.device))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()

    def time(self, mode: str, steps: int, warmup: int) -> float:
        if mode == "train":
            self.model.train()
            return _time_loop(self.train_step, steps, warmup, self.sync)
        self.model.eval()
        with self.torch.no_grad():
            forward = lambda: self.model(self.fixed_views, self.fixed_actions)  # noqa: E731
            return _time_loop(forward, steps, warmup, self.sync)


def _summary(seconds: list[float], per_call: int) -> dict:
    rates = [per_call / s for s in seconds]
    return {"median": statistics.median(rates), "best": max(rates), "rounds": rates}


def build_parser() -> argparse.ArgumentParser:
    # rpg_env is imported here, not at the top: the Sorrel worker runs this file in Sorrel's own
    # virtualenv, where only torch, numpy and sorrel are installed.
    from rpg_base.cli import (
        ArgumentParser,
        device_name,
        existing_file,
        non_negative_int,
        output_file,
        positive_int,
    )

    p = ArgumentParser(prog="python benchmarks/worldmodel_throughput.py",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="few steps, one round: a smoke check")
    p.add_argument("--sorrel-python", type=existing_file,
                   help="python of a virtualenv with sorrel==1.6.0 (see shared/ANCHORS.md)")
    p.add_argument("--steps", type=positive_int, default=None,
                   help="timed calls per round (default 30, quick 3)")
    p.add_argument("--warmup", type=non_negative_int, default=None,
                   help="untimed calls first (default 3, quick 1)")
    p.add_argument("--repeats", type=positive_int, default=None,
                   help="alternating rounds (default 3, quick 1)")
    p.add_argument("--threads", type=non_negative_int, default=0,
                   help="torch threads for both (0: torch's default)")
    p.add_argument("--device", type=device_name, default="cpu",
                   help="cpu (the reference comparison) or cuda[:N], for both")
    p.add_argument("--out", type=output_file, default=RESULTS)
    return p


def worker_main(argv: list[str] | None = None) -> int:
    """The Sorrel side of one round, in Sorrel's virtualenv (`run_sorrel` starts it): its
    seconds per call as one JSON line."""
    p = argparse.ArgumentParser(description="Sorrel worker of benchmarks/worldmodel_throughput.py")
    p.add_argument("--worker", choices=["sorrel"], required=True)
    p.add_argument("--worker-data", required=True)
    p.add_argument("--worker-mode", choices=["train", "forward"], required=True)
    for name in ("--steps", "--warmup", "--threads"):
        p.add_argument(name, type=int, required=True)
    p.add_argument("--device", required=True)
    args = p.parse_args(argv)
    print(json.dumps(sorrel_worker(args.worker_data, args.steps, args.warmup, args.threads, args.worker_mode,
                                   args.device)))
    return 0


def time_rounds(args: argparse.Namespace, steps: int, warmup: int, repeats: int, threads: int
                ) -> tuple[dict[str, list[float]], dict | None, int]:
    """Seconds per call of each (side, mode), alternating ``repeats`` rounds over the same greedy
    games; Sorrel's last report (or None) and our model's parameter count."""
    import numpy as np

    from rpg_base.progress import progress_bar
    from rpg_env.record import record
    from rpg_env.trajectories.reader import TrajectoryFile

    with tempfile.TemporaryDirectory(prefix="wm_bench_") as tmp:
        data = Path(tmp) / "greedy.h5"
        record("greedy", data, 16 if args.quick else 64, seed=0, num_envs=16, mode="w", progress=False)
        with TrajectoryFile(data) as tf:  # the same views and actions for Sorrel's buffer
            episodes = [tf.episode(i) for i in range(len(tf))]
        np.save(Path(tmp) / "views.npy", np.concatenate([e["obs"][:-1] for e in episodes]).astype(np.float32))
        np.save(Path(tmp) / "actions.npy", np.concatenate([e["actions"] for e in episodes]).astype(np.int64))
        ours = Ours(data, threads, args.device)
        timings: dict[str, list[float]] = {
            "ours_train": [],
            "ours_forward": [],
            "sorrel_train": [],
            "sorrel_forward": [],
        }
        sorrel_info: dict | None = None
        total = repeats * (4 if args.sorrel_python else 2)
        with progress_bar(total=total, desc="rounds", disable=args.quick) as bar:
            for _ in range(repeats):
                for mode in ("train", "forward"):
                    timings[f"ours_{mode}"].append(ours.time(mode, steps, warmup))
                    bar.update(1)
                    if args.sorrel_python:
                        sorrel_info = run_sorrel(str(args.sorrel_python), tmp, steps, warmup, threads, mode,
                                                 args.device)
                        timings[f"sorrel_{mode}"].append(sorrel_info["seconds_per_call"])
                        bar.update(1)
    return timings, sorrel_info, ours.model.num_parameters()


def rates(timings: dict[str, list[float]], sorrel_info: dict | None) -> tuple[dict, dict]:
    """Per-second rows of each side and mode, and ours over Sorrel's medians."""
    batch = REFERENCE["batch_size"]
    rows = {
        "ours_train_sequences_per_s": _summary(timings["ours_train"], batch),
        "ours_forward_batches_per_s": _summary(timings["ours_forward"], 1),
    }
    if sorrel_info:
        rows["sorrel_train_sequences_per_s"] = _summary(timings["sorrel_train"], batch)
        rows["sorrel_forward_batches_per_s"] = _summary(timings["sorrel_forward"], 1)
    ratios = {}
    if sorrel_info:
        ratios = {
            "train_median": rows["ours_train_sequences_per_s"]["median"]
            / rows["sorrel_train_sequences_per_s"]["median"],
            "forward_median": rows["ours_forward_batches_per_s"]["median"]
            / rows["sorrel_forward_batches_per_s"]["median"],
        }
    return rows, ratios


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    steps = args.steps or (3 if args.quick else 30)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    repeats = args.repeats or (1 if args.quick else 3)

    import torch

    from rpg_base.provenance import device_description, pinned_torch_threads, portable_path, provenance
    from rpg_base.results import write_results

    # Both sides run with the same thread count (record() below may change torch's setting).
    threads = args.threads or torch.get_num_threads()
    sorrel_note = None if args.sorrel_python else "skipped: pass --sorrel-python PATH (see shared/ANCHORS.md)"
    with pinned_torch_threads(threads):  # and the caller's setting back after
        timings, sorrel_info, parameters = time_rounds(args, steps, warmup, repeats, threads)
    rows, ratios = rates(timings, sorrel_info)
    batch = REFERENCE["batch_size"]
    result = {
        "reference_config": REFERENCE,
        "ours_parameters": parameters,
        "sorrel_parameters": sorrel_info["parameters"] if sorrel_info else None,
        "device": args.device,
        "device_name": device_description(args.device),
        "threads": threads,
        "sorrel_threads": sorrel_info["threads"] if sorrel_info else None,
        "steps_per_round": steps,
        "rounds": repeats,
        "rows": rows,
        "ratios_vs_sorrel": ratios,
        "target_ratio": TARGET_RATIO,
        "sorrel": sorrel_note or (f"sorrel 1.6.0 via {portable_path(args.sorrel_python)} "
                                  f"(torch {sorrel_info['torch']})"),
        "load_average": os.getloadavg(),
        "provenance": provenance(seed=0, quick=args.quick),
    }
    print(
        f"\nWorld-model throughput on {args.device}, reference config (batch {batch}, "
        f"{threads} threads, "
        f"{repeats} rounds x {steps} calls; load average {os.getloadavg()[0]:.1f})"
    )
    print(f"{'':34s}{'median':>10s}{'best':>10s}")
    for name, row in rows.items():
        print(f"{name:34s}{row['median']:10.1f}{row['best']:10.1f}")
    for name, ratio in ratios.items():
        print(f"ours / sorrel ({name}): {ratio:.2f}x (target >= {TARGET_RATIO:.0f}x for training)")
    if sorrel_note:
        print(f"sorrel: {sorrel_note}")
    write_results(args.out, result)
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv[1:]:
        sys.exit(worker_main())
    from rpg_base.cli import run_command

    run_command(main)
