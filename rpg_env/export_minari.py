"""Export a trajectory file to a Minari dataset (Farama's standard for offline RL data).

    python -m rpg_env.export_minari data/dqn.h5 --dataset-id treasurehunt/expert-v0

Needs the optional extra ``minari`` (``pip install "rpg-treasurehunt[minari]"``; the core
``minari`` package is enough, no JAX). Datasets go to Minari's local store
(``MINARI_DATASETS_PATH``, default ``~/.minari/datasets``) and open with
``minari.load_dataset(dataset_id)``.

Minari datasets are single-agent, so by default only the learner's streams (agent 0) are
exported; ``--agents all`` adds co-players' streams as further episodes and ``--policy-id``
keeps only one policy's streams. Each Minari episode holds the stream's ``L + 1``
observations, ``L`` actions/rewards/terminations/truncations, its reset seed when the stream
began with a seeded reset, and per-step infos ``game_id``, ``agent_id`` and ``source_index``
(the stream's row in the trajectory file). Data is copied losslessly (no JPEG encoding).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import rpg_env
from rpg_base.cli import ArgumentParser, existing_file, positive_int, run_command
from rpg_base.errors import InputError
from rpg_env.trajectories.reader import TrajectoryFile

BATCH_EPISODES = 256


def _require_minari():
    try:
        import minari
    except ModuleNotFoundError as err:
        raise InputError(
            "exporting to Minari needs the optional dependency 'minari': "
            "pip install 'rpg-treasurehunt[minari]' (or: pip install minari)") from err
    return minari


def select_streams(tf: TrajectoryFile, agents: str = "0", policy_id: str | None = None) -> np.ndarray:
    """Indices of the streams to export: ``agents`` is ``"all"`` or comma-separated agent ids."""
    ep = tf.episodes
    keep = np.ones(len(ep), dtype=bool)
    if agents != "all":
        try:
            wanted = [int(a) for a in agents.split(",") if a.strip()]
        except ValueError as err:
            raise InputError(f"--agents must be 'all' or comma-separated agent ids like '0' or "
                             f"'0,1', got {agents!r}") from err
        keep &= np.isin(ep["agent_id"], wanted)
    if policy_id is not None:
        keep &= ep["policy_id"] == policy_id
    return np.flatnonzero(keep)


def check_dataset_id(dataset_id: str) -> str:
    """``dataset_id`` if Minari's own parser takes it as ``(namespace/)name-vN``; else `InputError`.
    Checked before the file is read, so a bad id writes nothing."""
    _require_minari()
    from minari.dataset.minari_dataset import parse_dataset_id

    try:
        _, _, version = parse_dataset_id(dataset_id)
    except (ValueError, TypeError):  # TypeError: Minari 0.5 parses a missing version as int(None)
        version = None
    if version is None:
        raise InputError(f"--dataset-id {dataset_id!r} is not a Minari id: use namespace/name-vN, e.g. "
                         "treasurehunt/expert-v0 (letters, digits, - and _; a namespace of two characters or "
                         "more; the version is required)")
    return dataset_id


def export(
    src: str | Path,
    dataset_id: str,
    *,
    agents: str = "0",
    policy_id: str | None = None,
    max_episodes: int | None = None,
    overwrite: bool = False,
    author: str | None = None,
    code_permalink: str | None = None,
    description: str | None = None,
    progress: bool = True,
):
    """Write the selected streams of ``src`` as Minari dataset ``dataset_id``; returns the
    `minari.MinariDataset`."""
    minari = _require_minari()
    check_dataset_id(dataset_id)
    if max_episodes is not None and max_episodes < 1:
        raise InputError(f"--max-episodes must be >= 1 (or left out for all), got {max_episodes}")
    with TrajectoryFile(src) as tf:
        if tf.meta["env_id"] not in gym.registry:
            raise InputError(f"{src} was recorded in {tf.meta['env_id']!r}, which is not registered")
        indices = _chosen_streams(tf, src, agents, policy_id, max_episodes)
        _make_room(minari, dataset_id, overwrite)
        spec = dataclasses.replace(gym.spec(tf.meta["env_id"]), kwargs=dict(tf.meta["env_kwargs"]))
        env = gym.make(spec)
        policies = sorted(set(tf.episodes["policy_id"][indices].tolist()))
        text = description or (f"Treasurehunt trajectories exported from {Path(src).name} "
                               f"(agents {agents}, policies {', '.join(policies)}) by rpg_env "
                               f"{rpg_env.__version__}.")
        try:
            return _write(minari, tf, indices, progress, dataset_id=dataset_id, env=spec,
                          algorithm_name=", ".join(policies), author=author, code_permalink=code_permalink,
                          description=text, jpeg_encoding=False, observation_space=env.observation_space,
                          action_space=env.action_space)
        finally:
            env.close()


def _chosen_streams(tf: TrajectoryFile, src: str | Path, agents: str, policy_id: str | None,
                    max_episodes: int | None) -> np.ndarray:
    """The stream indices to export, the first ``max_episodes`` of them; `InputError` if none."""
    indices = select_streams(tf, agents, policy_id)
    if max_episodes is not None:
        indices = indices[: int(max_episodes)]
    if not len(indices):
        raise InputError(f"no streams of {src} match agents={agents!r}, policy_id={policy_id!r}; "
                         f"the file has policies {sorted(set(tf.episodes['policy_id'].tolist()))} "
                         f"and agents {sorted(set(tf.episodes['agent_id'].tolist()))}")
    return indices


def _make_room(minari, dataset_id: str, overwrite: bool) -> None:
    """Refuse an existing local dataset ``dataset_id``, or delete it with ``overwrite``."""
    if dataset_id in minari.list_local_datasets():
        if not overwrite:
            raise FileExistsError(f"Minari dataset {dataset_id!r} already exists locally; choose "
                             f"another id or pass --overwrite")
        minari.delete_dataset(dataset_id)


def _write(minari, tf: TrajectoryFile, indices: np.ndarray, progress: bool, **create: Any):
    """The streams ``indices`` of ``tf`` as a new Minari dataset, `BATCH_EPISODES` at a time;
    ``create`` are `minari.create_dataset_from_buffers`'s arguments."""
    from minari.data_collector import EpisodeBuffer

    bar = None
    if progress:
        from rpg_base.progress import progress_bar

        bar = progress_bar(total=len(indices), desc=f"export {create['dataset_id']}", unit="episode")
    dataset = None
    try:
        for a in range(0, len(indices), BATCH_EPISODES):
            buffers = [_buffer(tf, int(i), n, EpisodeBuffer)
                       for n, i in enumerate(indices[a:a + BATCH_EPISODES], start=a)]
            if dataset is None:
                dataset = minari.create_dataset_from_buffers(buffer=buffers, **create)
            else:
                dataset.update_dataset_from_buffer(buffers)
            if bar is not None:
                bar.update(len(buffers))
    finally:
        if bar is not None:
            bar.close()
    return dataset


def _buffer(tf: TrajectoryFile, i: int, episode_id: int, buffer_cls: Any):
    row = tf.episodes[i]
    e = tf.episode(i)
    steps = len(e["actions"]) + 1
    return buffer_cls(
        id=episode_id,
        seed=int(row["seed"]) if row["seed"] >= 0 and row["reset_count"] == 0 else None,
        observations=e["obs"],
        actions=e["actions"],
        rewards=e["rewards"].astype(np.float64).tolist(),
        terminations=e["terminated"].tolist(),
        truncations=e["truncated"].tolist(),
        infos={"game_id": np.full(steps, row["game_id"], dtype=np.int64),
               "agent_id": np.full(steps, row["agent_id"], dtype=np.int64),
               "source_index": np.full(steps, i, dtype=np.int64)},
    )


def _dataset_id_arg(text: str) -> str:
    try:
        return check_dataset_id(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--dataset-id ")) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m rpg_env.export_minari",
                                     description="Export a trajectory file to a Minari dataset.")
    parser.add_argument("path", type=existing_file, help="trajectory file (.h5)")
    parser.add_argument("--dataset-id", required=True, type=_dataset_id_arg,
                        help="Minari id, e.g. treasurehunt/expert-v0 (namespace/name-version)")
    parser.add_argument("--agents", default="0",
                        help="agent ids to export, comma-separated, or 'all' (default: 0, the learner)")
    parser.add_argument("--policy-id", default=None, help="export only streams of this policy")
    parser.add_argument("--max-episodes", type=positive_int, default=None, help="export at most this many")
    parser.add_argument("--author", default=None)
    parser.add_argument("--code-permalink", default=None,
                        help="link to the versioned code that made the data (Minari recommends one)")
    parser.add_argument("--description", default=None)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing local dataset")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    dataset = export(args.path, args.dataset_id, agents=args.agents, policy_id=args.policy_id,
                     max_episodes=args.max_episodes, overwrite=args.overwrite, author=args.author,
                     code_permalink=args.code_permalink, description=args.description,
                     progress=not args.no_progress)
    print(f"exported {dataset.total_episodes} episodes ({dataset.total_steps} steps) to Minari dataset "
          f"{args.dataset_id!r}; open it with minari.load_dataset({args.dataset_id!r})")
    return 0


if __name__ == "__main__":
    run_command(main)
