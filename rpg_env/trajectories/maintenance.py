"""Checking (`validate`) and repairing (`repair`) trajectory files."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from rpg_base.errors import InputError
from rpg_env.trajectories.format import FLAG_TERMINATED, FLAG_TRUNCATED, superblock
from rpg_env.trajectories.reader import TrajectoryFile
from rpg_env.trajectories.writer import TrajectoryWriter


def validate(path: str | os.PathLike, *, deep: bool = False) -> list[str]:
    """Check a trajectory file; returns a list of problems (empty when it is sound).

    Structural checks always run (format, version, table order and extents, uncommitted
    tails). ``deep`` also reads every step: returns match the rewards, the last step's
    terminated/truncated match the flags, actions are in range, views are one-hot.
    Unreadable files raise `TrajectoryFormatError` instead.
    """
    problems: list[str] = []
    with TrajectoryFile(path) as tf:  # first: it says clearly what is wrong with a bad path
        flags, _ = superblock(Path(path))
        if flags:
            problems.append(f"not closed by its writer (superblock flags {flags:#x}): being recorded "
                            f"or the writer was killed; run `repair` before appending")
        if tf.uncommitted_rows:
            problems.append(f"{tf.uncommitted_rows} table rows after the committed ones are ignored")
        problems += _table_problems(tf.episodes, len(tf.runs))
        if tf.uncommitted_steps > 0:
            problems.append(f"{tf.uncommitted_steps} steps after the last committed episode (a partial "
                            f"episode of a killed writer); readers ignore them")
        if deep:
            problems += _step_problems(tf)
    return problems


def _table_problems(ep: np.ndarray, num_runs: int) -> list[str]:
    """What is wrong with the committed table ``ep`` of a file with ``num_runs`` runs."""
    if not len(ep):
        return []
    problems = []
    steps_expected = np.concatenate([[0], np.cumsum(ep["length"])[:-1]])
    if not np.array_equal(ep["step_start"], steps_expected):
        problems.append("step_start is not contiguous in table order")
    if not np.array_equal(ep["obs_start"], steps_expected + np.arange(len(ep))):
        problems.append("obs_start is not contiguous in table order (L + 1 rows each)")
    if (ep["length"] < 1).any():
        problems.append(f"{int((ep['length'] < 1).sum())} episodes have no steps")
    if (np.diff(ep["game_id"]) < 0).any():
        problems.append("game ids decrease in table order")
    if (ep["run"] >= num_runs).any() or (ep["run"] < 0).any():
        problems.append("some rows point to a /runs entry that does not exist")
    return problems


def _step_problems(tf: TrajectoryFile) -> list[str]:
    """What is wrong with the step data of each committed stream (reads every step)."""
    problems = []
    n_act = len(tf.meta["action_names"])
    for i in range(len(tf)):
        e, row = tf.episode(i), tf.episodes[i]
        if not math.isclose(float(e["rewards"].astype(np.float64).sum()), float(row["return"]),
                            rel_tol=0, abs_tol=1e-6):
            problems.append(f"episode {i}: return {row['return']} != sum of rewards")
        if bool(e["terminated"][-1]) != bool(row["flags"] & FLAG_TERMINATED) or bool(
                e["truncated"][-1]) != bool(row["flags"] & FLAG_TRUNCATED):
            problems.append(f"episode {i}: flags disagree with the last step's terminated/truncated")
        if (e["actions"] >= n_act).any():
            problems.append(f"episode {i}: actions out of range 0..{n_act - 1}")
        if not (e["obs"].sum(axis=1) == 1).all():
            problems.append(f"episode {i}: observations are not one-hot")
    return problems


def repair(src: str | os.PathLike, dst: str | os.PathLike, *, overwrite: bool = False,
           batch_streams: int = 512, progress: bool = False) -> int:
    """Copy the committed episodes of ``src`` into a fresh file ``dst``; returns their number.

    For files whose writer was killed (they read fine but refuse appending): ``dst`` is a
    clean, appendable copy with the same attributes, game ids and ``/runs`` records, plus one
    record of the repair. ``src`` is opened read-only and never modified. Copies
    ``batch_streams`` streams at a time, so memory stays bounded; ``progress`` shows a bar.
    """
    src, dst = Path(src), Path(dst)
    if dst.exists() and dst.resolve() == src.resolve():
        raise InputError(f"repair writes a new file: the destination {dst} must differ from the source")
    if dst.is_dir():
        raise InputError(f"the destination {dst} is a folder: name the new file (e.g. {dst / src.name})")
    if dst.exists() and not overwrite:
        raise FileExistsError(f"{dst} exists; choose a new path (or pass overwrite=True / --overwrite)")
    tmp = dst.with_name(dst.name + ".partial")
    with TrajectoryFile(src) as tf:
        writer = TrajectoryWriter(tmp, tf.meta, mode="w", run_info={"repaired_from": str(src)})
        bar = None
        try:
            if progress:
                from rpg_base.progress import progress_bar

                bar = progress_bar(total=len(tf), desc=f"repair {src.name}", unit="stream")
            copied = writer.copy_from(tf, batch_streams=batch_streams,
                                      on_batch=None if bar is None else bar.update)
            writer.close()
        except BaseException:
            writer.close()
            tmp.unlink(missing_ok=True)
            raise
        finally:
            if bar is not None:
                bar.close()
    try:
        os.replace(tmp, dst)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return copied
