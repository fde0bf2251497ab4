"""Trajectory recording: file size, recording time, and random-window reading throughput.

The issue's workload: 1024 games of 100 steps, 2 agents, 9x9 one-hot views, recorded with
``python -m rpg_env.record`` (native vector env, 64 worlds at a time). For each policy:

- recording wall time (target <= 60 s with the shipped DQN expert) and games/s;
- file size (target <= 20 MB) and bytes per agent-step, against two references: the same
  data as raw uint8/float32 NumPy arrays measured in this run, and the reference pipeline's
  pickled replay buffers (about 1.5 GB for 1024 games, quoted from shared/ANCHORS.md, not
  re-measured here);
- reading random ``k``-step windows through `TrajectoryFile.window` (windows/s): *cold* is a
  freshly opened file (empty HDF5 chunk cache; the OS page cache may still hold the file),
  *warm* re-reads the same windows; the reference is slicing the same windows out of NumPy
  arrays already in memory, in the same run.

``--sweep`` also rewrites the first file with other gzip levels and ``/obs`` chunk lengths to
show the size / read-speed trade-off behind the defaults.

Usage::

    python benchmarks/recording.py                       # greedy, random, and any shipped expert
    python benchmarks/recording.py --policy rpg_env/experts/pretrained/dqn/model.zip
    python benchmarks/recording.py --quick               # 64 games, a few seconds

Writes ``benchmarks/results/recording.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rpg_base.cli import ArgumentParser, output_file, output_folder, positive_int, run_command
from rpg_base.provenance import provenance
from rpg_base.results import write_results
from rpg_env.record import record
from rpg_env.trajectories.format import (
    DEFAULT_COMPRESSION_LEVEL,
    DEFAULT_OBS_CHUNK_ROWS,
    STEP_DATASETS,
    Stream,
)
from rpg_env.trajectories.reader import TrajectoryFile
from rpg_env.trajectories.writer import TrajectoryWriter

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results" / "recording.json"
PRETRAINED = ROOT / "rpg_env" / "experts" / "pretrained"
TARGET_BYTES = 20e6
TARGET_SECONDS = 60.0
PICKLE_REFERENCE_BYTES = 1.5e9  # shared/ANCHORS.md: Sorrel's pickled memories, 1024 games


def default_policies() -> list[str]:
    experts = sorted(str(p) for p in PRETRAINED.glob("*/model.zip")) if PRETRAINED.is_dir() else []
    return [*experts, "greedy", "random"]


def raw_bytes(tf: TrajectoryFile) -> int:
    """Bytes of the same committed data as plain NumPy arrays (uint8 obs/actions, float32 rewards,
    bool flags)."""
    steps, rows = tf.num_steps, tf.num_steps + len(tf)
    return rows * int(np.prod(tf.meta["obs_shape"])) + steps * (1 + 4 + 1 + 1)


def window_throughput(path: Path, k: int, n_windows: int, seed: int) -> dict[str, float]:
    """Windows/s of random k-step windows: cold and warm file reads, and in-memory NumPy."""
    rng = np.random.default_rng(seed)
    with TrajectoryFile(path) as tf:
        index = tf.window_index(k)
        picks = index[rng.integers(0, len(index), size=n_windows)]
        start = time.perf_counter()
        for ep, s in picks:
            tf.window(int(ep), int(s), k)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        for ep, s in picks:
            tf.window(int(ep), int(s), k)
        warm = time.perf_counter() - start
        start = time.perf_counter()
        tf.read_episodes()
        load = time.perf_counter() - start
        obs = tf._obs[()]
        actions, rewards = tf._actions[()], tf._rewards[()]
        step_start, obs_start = tf.episodes["step_start"], tf.episodes["obs_start"]
    start = time.perf_counter()
    for ep, s in picks:
        o, a = obs_start[ep] + s, step_start[ep] + s
        _ = (obs[o:o + k + 1].copy(), actions[a:a + k].astype(np.int64), rewards[a:a + k].copy())
    memory = time.perf_counter() - start
    return {"k": k, "windows": n_windows, "cold_windows_per_s": n_windows / cold,
            "warm_windows_per_s": n_windows / warm, "numpy_windows_per_s": n_windows / memory,
            "full_load_s": load}


def rewrite(src: Path, dst: Path, level: int, obs_rows: int, games_per_commit: int) -> None:
    """Copy ``src`` into ``dst`` with other compression settings (same content), committing
    ``games_per_commit`` games at a time like the recorders do."""
    with TrajectoryFile(src) as tf, TrajectoryWriter(dst, tf.meta, mode="w", compression_level=level,
                                                     obs_chunk_rows=obs_rows) as w:
        ep = tf.episodes
        episodes = tf.read_episodes()
        games = []
        for g in np.unique(ep["game_id"]):
            games.append([Stream(agent_id=int(ep["agent_id"][i]), policy_id=str(ep["policy_id"][i]),
                                 **episodes[i]) for i in np.flatnonzero(ep["game_id"] == g)])
            if len(games) == games_per_commit:
                w.write_games(games)
                games = []
        w.write_games(games)


def _policy_arg(value: str) -> str:
    if value in ("random", "greedy") or (value.endswith(".zip") and Path(value).is_file()):
        return value
    if value.endswith(".zip"):
        raise argparse.ArgumentTypeError(f"no such model file: {value}")
    raise argparse.ArgumentTypeError(f"{value!r} is not a policy: use random, greedy or an SB3 .zip")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/recording.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", action="append", default=None, type=_policy_arg,
                        help="random, greedy or an SB3 .zip (repeatable; default: shipped experts, "
                             "greedy, random)")
    parser.add_argument("--games", type=positive_int, default=1024)
    parser.add_argument("--num-envs", type=positive_int, default=64)
    parser.add_argument("--k", type=positive_int, default=8, help="window length in steps")
    parser.add_argument("--windows", type=positive_int, default=20_000, help="random windows to read")
    parser.add_argument("--sweep", action="store_true", help="also compare gzip levels and chunk sizes")
    parser.add_argument("--quick", action="store_true", help="64 games, 2,000 windows")
    parser.add_argument("--keep", type=output_folder, default=None,
                        help="keep the recorded files in this folder")
    parser.add_argument("--out", type=output_file, default=RESULTS)
    return parser


def measure_policy(policy: str, path: Path, args: argparse.Namespace) -> dict:
    """One row: record ``args.games`` games of ``policy`` into ``path``, then read windows back."""
    summary = record(policy, path, args.games, seed=0, num_envs=args.num_envs, mode="w",
                     progress=sys.stderr.isatty())
    with TrajectoryFile(path) as tf:
        raw = raw_bytes(tf)
    size = path.stat().st_size
    reading = window_throughput(path, args.k, args.windows, seed=1)
    print(f"{summary['policy_id']}: recorded in {summary['seconds']:.1f} s, {size / 1e6:.2f} MB",
          file=sys.stderr)
    return {
        "policy": summary["policy_id"], "games": summary["games"], "agent_steps": summary["agent_steps"],
        "record_s": summary["seconds"], "games_per_s": summary["games"] / summary["seconds"],
        "policy_s": summary["policy_seconds"],
        "env_and_recording_s": summary["seconds"] - summary["policy_seconds"],
        "load_average_1min_after": os.getloadavg()[0],
        "file_bytes": size, "bytes_per_agent_step": size / summary["agent_steps"],
        "raw_numpy_bytes": raw, "compression_ratio": raw / size,
        "vs_pickle_reference": PICKLE_REFERENCE_BYTES * (summary["games"] / 1024) / size,
        "learner_mean_return": summary["mean_return"], **reading,
        "meets_size_target": size * (1024 / summary["games"]) <= TARGET_BYTES,
        "meets_time_target": summary["seconds"] * (1024 / summary["games"]) <= TARGET_SECONDS,
    }


def sweep_settings(src: Path, folder: Path, args: argparse.Namespace) -> list[dict]:
    """``src`` rewritten with each gzip level and observation chunk size; size and read speed."""
    sweep = []
    for level in (1, DEFAULT_COMPRESSION_LEVEL, 9):
        for obs_rows in (16, DEFAULT_OBS_CHUNK_ROWS, 128):
            dst = folder / f"sweep_l{level}_c{obs_rows}.h5"
            start = time.perf_counter()
            rewrite(src, dst, level, obs_rows, args.num_envs)
            seconds = time.perf_counter() - start
            reading = window_throughput(dst, args.k, min(args.windows, 5_000), seed=1)
            sweep.append({"gzip_level": level, "obs_chunk_rows": obs_rows,
                          "games_per_commit": args.num_envs,
                          "file_bytes": dst.stat().st_size, "rewrite_s": seconds,
                          "cold_windows_per_s": reading["cold_windows_per_s"],
                          "warm_windows_per_s": reading["warm_windows_per_s"]})
            dst.unlink()
    return sweep


def print_results(rows: list[dict], sweep: list[dict], args: argparse.Namespace) -> None:
    print(f"\nRecording {args.games} games x 100 steps x 2 agents, 9x9 views; windows of k={args.k} "
          f"({args.windows} random)")
    header = (f"{'policy':<22} {'record s':>9} {'policy s':>9} {'games/s':>8} {'MB':>7} {'B/step':>7} "
              f"{'vs raw':>7} {'vs pickle':>9} {'cold w/s':>9} {'warm w/s':>9} {'numpy w/s':>10}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['policy']:<22} {r['record_s']:>9.1f} {r['policy_s']:>9.1f} {r['games_per_s']:>8.0f} "
              f"{r['file_bytes'] / 1e6:>7.2f} {r['bytes_per_agent_step']:>7.1f} "
              f"{r['compression_ratio']:>6.1f}x {r['vs_pickle_reference']:>8.0f}x "
              f"{r['cold_windows_per_s']:>9.0f} {r['warm_windows_per_s']:>9.0f} "
              f"{r['numpy_windows_per_s']:>10.0f}")
    print(f"targets (1024 games): <= {TARGET_BYTES / 1e6:.0f} MB, <= {TARGET_SECONDS:.0f} s with the shipped "
          f"DQN expert; 'policy s' is time inside the policy's act (the rest is env + recording); "
          f"'vs pickle' uses the quoted 1.5 GB reference scaled to the games recorded; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if sweep:
        print(f"\n{'gzip':>4} {'chunk':>6} {'MB':>7} {'rewrite s':>9} {'cold w/s':>9} {'warm w/s':>9}")
        for s in sweep:
            print(f"{s['gzip_level']:>4} {s['obs_chunk_rows']:>6} {s['file_bytes'] / 1e6:>7.2f} "
                  f"{s['rewrite_s']:>9.1f} {s['cold_windows_per_s']:>9.0f} {s['warm_windows_per_s']:>9.0f}")


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.games, args.windows = min(args.games, 64), min(args.windows, 2_000)
    policies = args.policy or default_policies()
    tmp = tempfile.TemporaryDirectory(prefix="rpg_recording_")
    folder = args.keep or Path(tmp.name)
    folder.mkdir(parents=True, exist_ok=True)
    rows = [measure_policy(policy, folder / f"rec{i}_{Path(policy).stem}.h5", args)
            for i, policy in enumerate(policies)]
    first = folder / f"rec0_{Path(policies[0]).stem}.h5"
    sweep = sweep_settings(first, folder, args) if args.sweep and rows else []
    print_results(rows, sweep, args)
    report = {"benchmark": "recording", "quick": args.quick, "games": args.games, "num_envs": args.num_envs,
              "store": {"step_datasets": list(STEP_DATASETS), "gzip_level": DEFAULT_COMPRESSION_LEVEL,
                        "obs_chunk_rows": DEFAULT_OBS_CHUNK_ROWS},
              "targets": {"file_bytes": TARGET_BYTES, "record_s": TARGET_SECONDS},
              "pickle_reference_bytes_quoted": PICKLE_REFERENCE_BYTES,
              "results": rows, "sweep": sweep, "provenance": provenance(seed=0)}
    print()
    write_results(args.out, report, indent=2)
    tmp.cleanup()
    return report


if __name__ == "__main__":
    run_command(main)
