"""What a training run logs: metrics.csv and tensorboard (`MetricsLog`, rank 0 only), and the
statistics averaged between two log lines (`Meter`)."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import torch

METRIC_FIELDS = ("step", "split", "loss", "view_ce", "action_ce", "action_acc", "cell_acc", "reward_ce",
                 "reward_acc", "refiner_ce", "lr", "samples_per_s", "elapsed_s")


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
    """Training statistics summed over the steps since the last log line, and throughput."""

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
        """The window's means and samples/s (of ``batch_size``-window steps); starts a new window."""
        now = time.perf_counter()
        values = {k: v / self.steps for k, v in self.sums.items()}
        values["samples_per_s"] = self.steps * batch_size / (now - self.since)
        self.sums, self.steps, self.since = {}, 0, now
        return values
