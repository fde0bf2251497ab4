"""Training data from one or many trajectory files ("shards") of one game.

``data.path`` names a file, a glob (``shards/*.h5``) or a list of them. `DataFiles.open` expands
them, refuses files of different games (naming the file and the setting that differs) and puts
the files in a canonical order, by content fingerprint, so nothing below depends on the order
they were given in. Episodes of all files are numbered in that order: the episode ids of the
split, of the checkpoint and of the windows are ``file offset + the file's own episode id``
(for one file, its own ids, as before there were several).

Games are split across all files at once: a game is keyed by ``(file, game_id)`` (game ids are
per file), so every stream of a game lands in one split, and the split depends on the set of
files, not on their order. The checkpoint's data record lists every file's path, fingerprint
and episode count, which is how evaluation finds a file's part of the recorded split.
"""

from __future__ import annotations

import functools
import glob
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rpg_base.errors import InputError
from rpg_base.typed_config.values import ConfigError
from rpg_env.trajectories.format import COMPATIBILITY_KEYS
from rpg_env.trajectories.splits import split_episodes
from rpg_worldmodel.config import DEFAULT_TRAIN_WINDOW, DataConfig, ModelConfig
from rpg_worldmodel.data.sources import DataMismatchError, DataSource
from rpg_worldmodel.data.stores import EpisodeShards, EpisodeStore, StreamedEpisodes, views_nbytes
from rpg_worldmodel.data.windows import TrajectoryWindows

_GLOB_CHARS = frozenset("*?[")
MIB = 1 << 20


def expand_paths(spec: str | Sequence[str]) -> list[Path]:
    """The files a ``data.path`` names: each entry a path or a glob (sorted matches); a path
    given twice (e.g. by a glob and by name) counts once. A glob matching nothing raises
    `InputError`; a missing plain path is left for the reader to report."""
    entries = [spec] if isinstance(spec, str) else list(spec)
    if not entries or not all(entries):
        raise ConfigError("no data file: pass --data FILE (or data.path=FILE, a glob or a list)")
    paths: list[Path] = []
    for entry in entries:
        if _GLOB_CHARS & set(entry):
            matches = sorted(glob.glob(entry))
            if not matches:
                raise InputError(f"data path {entry!r} matches no file")
            paths += [Path(m) for m in matches]
        else:
            paths.append(Path(entry))
    seen: set[Path] = set()
    return [p for p in paths if not (p.resolve() in seen or seen.add(p.resolve()))]


def game_differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, a's value, b's value)`` for each game setting two files' metadata disagree on
    (`rpg_env.trajectories.format.COMPATIBILITY_KEYS`; ``env_kwargs`` entry by entry)."""
    diffs = []
    for key in COMPATIBILITY_KEYS:
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            diffs += [(f"{key}.{k}", va.get(k, "<absent>"), vb.get(k, "<absent>"))
                      for k in sorted(set(va) | set(vb)) if va.get(k, "<absent>") != vb.get(k, "<absent>")]
        elif (list(va) if isinstance(va, (list, tuple)) else va) != (
                list(vb) if isinstance(vb, (list, tuple)) else vb):
            diffs.append((key, va, vb))
    return diffs


@dataclass(frozen=True)
class DataFiles:
    """Trajectory files of one game in canonical order (by fingerprint), as one table of episodes.

    ``sources[k]``'s episode ``e`` has the id ``offsets[k] + e``; ``table`` ``(E,)`` is the
    files' episode tables concatenated in that order (their own game ids), ``meta`` the first
    file's (all files record the same game).
    """

    sources: tuple[DataSource, ...]
    fingerprints: tuple[str, ...]
    offsets: np.ndarray  # (F,) id of each file's first episode

    @classmethod
    def open(cls, spec: str | Sequence[str]) -> DataFiles:
        """Open the files ``spec`` names (`expand_paths`); refuse files of different games and
        two files with the same content (their games would count twice)."""
        sources = [DataSource.open(p) for p in expand_paths(spec)]
        for other in sources[1:]:
            diffs = game_differences(sources[0].meta, other.meta)
            if diffs:
                key, a, b = diffs[0]
                raise DataMismatchError(
                    f"{other.path} records another game than {sources[0].path}: {key} is {b!r} there but "
                    f"{a!r} in {sources[0].path}; train on files recorded with the same settings")
        prints = [s.fingerprint for s in sources]
        order = sorted(range(len(sources)), key=lambda i: prints[i])
        for i, j in zip(order, order[1:], strict=False):
            if prints[i] == prints[j]:
                raise InputError(f"{sources[i].path} and {sources[j].path} hold the same recording "
                                 f"(fingerprint {prints[i][:12]}); give each file once")
        sizes = [len(sources[i]) for i in order]
        return cls(tuple(sources[i] for i in order), tuple(prints[i] for i in order),
                   np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64))

    def __len__(self) -> int:
        return int(self.offsets[-1]) + len(self.sources[-1])

    @property
    def meta(self) -> dict[str, Any]:
        return self.sources[0].meta

    @functools.cached_property
    def table(self) -> np.ndarray:
        return np.concatenate([s.table for s in self.sources])

    def describe(self) -> str:
        """The files in words: the path of one, or ``"a.h5 (and 2 more files)"``."""
        more = len(self.sources) - 1
        return str(self.sources[0].path) + (f" (and {more} more file{'s' * (more > 1)})" if more else "")

    def game_table(self) -> np.ndarray:
        """`table` with ``game_id`` made unique across files: ``file index * stride + game_id``
        (the file's own game ids for the first file, so one file splits as it always did)."""
        table = self.table.copy()
        stride = int(table["game_id"].max()) + 1 if len(table) else 1
        file_index = np.repeat(np.arange(len(self.sources)), [len(s) for s in self.sources])
        table["game_id"] = file_index * stride + table["game_id"]
        return table

    def locate(self, ids: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """``[(file index, its episode ids)]`` of ``ids`` (ids over all files, ascending)."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            raise IndexError(f"episode ids must be in 0..{len(self) - 1}")
        owner = np.searchsorted(self.offsets, ids, side="right") - 1
        return [(k, ids[owner == k] - self.offsets[k]) for k in np.unique(owner).tolist()]

    def views_nbytes(self, ids: np.ndarray) -> int:
        """Bytes the views of episodes ``ids`` take in memory (`views_nbytes`)."""
        return views_nbytes(self.table["length"][np.asarray(ids, dtype=np.int64)], self.meta["obs_shape"])

    def store(self, ids: np.ndarray, stream: bool) -> EpisodeShards:
        """Episodes ``ids`` (ascending) as one store whose rows are ``ids``: in memory, or left in
        the files (``stream``)."""
        load = StreamedEpisodes if stream else EpisodeStore.load
        parts = [load(self.sources[k].path, local) for k, local in self.locate(ids)]
        return EpisodeShards(parts, np.asarray(ids, dtype=np.int64))


def view_statistics(files: DataFiles, ids: np.ndarray, chunk: int = 256
                    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """What the views of episodes ``ids`` show, read off them, not from the game: the cells of the
    view (flat indices) that hold one kind in every view (an egocentric view's own viewer, which
    moves with it; ``model.fixed_cells``), and the most cells of each kind (channel) one view holds
    (``model.kind_limits``)."""
    ids = np.sort(np.asarray(ids, dtype=np.int64))
    c, v = files.meta["obs_shape"][0], files.meta["obs_shape"][-1]
    same, first, most = np.ones(v * v, dtype=bool), None, np.zeros(c, dtype=np.int64)
    for start in range(0, len(ids), chunk):
        chosen = ids[start:start + chunk]
        store = files.store(chosen, stream=False)
        for row in range(len(chosen)):
            one = np.array([row])
            views = store.gather(one, np.zeros(1, dtype=np.int64), int(store.lengths[row]))[0][0]
            views = views.reshape(len(views), c, v * v)
            codes = np.where(views.max(1) > 0, views.argmax(1), -1)  # (S, V*V)
            first = codes[0] if first is None else first
            same &= (codes == first).all(0)
            most = np.maximum(most, views.sum(2).max(0))
    fixed = tuple(int(i) for i in np.flatnonzero(same & (first >= 0))) if first is not None else ()
    return fixed, tuple(int(x) for x in most)


def step_rewards(files: DataFiles, ids: np.ndarray) -> np.ndarray:
    """The rewards of every step of episodes ``ids``, concatenated ``(S,)`` float32 (points): read
    by the streamed stores, which hold the steps in memory and leave the views in the files."""
    return files.store(np.sort(np.asarray(ids, dtype=np.int64)), stream=True).rewards


def training_splits(files: DataFiles, data_cfg: DataConfig) -> dict[str, np.ndarray]:
    """Split by game across all files (``data.split_fractions``, the split's seed 0; a game is
    keyed by file and game id), then keep the streams of ``data.agent_id`` (-1: every agent);
    ``{"train", "val", "test"}`` sorted episode ids over all files."""
    table = files.game_table()
    splits = split_episodes(table, data_cfg.split_fractions)
    agents = table["agent_id"]
    if data_cfg.agent_id >= 0:
        keep = agents == data_cfg.agent_id
        if not keep.any():
            raise ConfigError(
                f"{files.describe()} has no streams of agent {data_cfg.agent_id} (agent ids present: "
                f"{sorted(set(agents.tolist()))}); set data.agent_id"
            )
        splits = {k: v[keep[v]] for k, v in splits.items()}
    for name in ("train", "val"):
        if len(splits[name]) == 0:
            raise ConfigError(
                f"the {name} split of {files.describe()} is empty ({len(table)} streams): record more "
                f"games or change data.split_fractions"
            )
    return splits


def data_record(files: DataFiles) -> dict[str, Any]:
    """What a checkpoint records about its training data: every file (``files``: path,
    fingerprint, episodes, the policy ids that played them, in the order that numbers the
    episodes), the vocabulary and size."""
    meta = files.meta
    return {
        "files": [{"path": str(s.path.resolve()), "fingerprint": fp, "num_episodes": len(s),
                   "policy_ids": sorted({str(p) for p in s.table["policy_id"]})}
                  for s, fp in zip(files.sources, files.fingerprints, strict=True)],
        "obs_shape": list(meta["obs_shape"]),
        "channel_names": files.sources[0].channel_names,
        "action_names": files.sources[0].action_names,
        "env_id": meta["env_id"],
        "env_kwargs": meta["env_kwargs"],
        "num_episodes": len(files),
    }


def training_windows(files: DataFiles, splits: dict[str, np.ndarray], data_cfg: DataConfig, model: ModelConfig
                     ) -> tuple[TrajectoryWindows, TrajectoryWindows, dict[str, Any]]:
    """Train and val windows of ``splits``, ``model.window`` steps each (``model.train_window`` left
    empty is first read off the training games, `fitted_window`, and set), and a summary of where
    they are held: in memory when the views of both splits fit ``data.max_memory_mb``
    (`DataFiles.views_nbytes`; loading briefly takes about twice that), else streamed from the
    files. A warning names the training games shorter than a window, with the window that fits them
    (never below ``model.num_frames``, the shortest window the model takes)."""
    if model.train_window is None:
        model.train_window = fitted_window(files.table["length"][splits["train"]], model.num_frames)
    window = model.window
    nbytes = files.views_nbytes(np.concatenate([splits["train"], splits["val"]]))
    stream = nbytes > data_cfg.max_memory_mb * MIB
    train_set = TrajectoryWindows.of(files.store(splits["train"], stream), window)
    val_set = TrajectoryWindows.of(files.store(splits["val"], stream), window)
    if len(val_set) == 0:
        raise ConfigError(
            f"no validation windows: val episodes are shorter than a training window of "
            f"{window} steps (model.train_window, at least model.num_frames)"
        )
    modelled = actions_modelled(files, data_cfg.unmodelled_policies)
    if modelled is not None:
        train_set.actions_modelled = modelled[splits["train"]]
        val_set.actions_modelled = modelled[splits["val"]]
    if train_set.actions_modelled is not None and not train_set.actions_modelled.any():
        raise ConfigError(f"data.unmodelled_policies={list(data_cfg.unmodelled_policies)} leaves the action "
                          f"head no training game of {files.describe()}; drop one of them")
    short = train_set.store.lengths < window
    if short.any():
        warnings.warn(short_games_message(train_set.store.lengths, window, model.num_frames), stacklevel=2)
    summary = {"files": len(files.sources), "views_mib": nbytes / MIB,
               "max_memory_mb": data_cfg.max_memory_mb, "streamed": stream,
               "games_without_window": int(short.sum())}
    return train_set, val_set, summary


def actions_modelled(files: DataFiles, unmodelled: Sequence[str]) -> np.ndarray | None:
    """Whether the action head learns the actions of each episode of ``files`` ((E,) bool, by
    episode id over all files): not where its policy id is one of ``unmodelled``
    (``data.unmodelled_policies``); None when it names none. A name no file's games were played by
    is refused (a typo would model every action), and (`training_windows`) so is a choice that
    leaves the action head no training game."""
    if not unmodelled:
        return None
    policies = files.table["policy_id"]
    present = set(policies.tolist())
    unknown = sorted(set(unmodelled) - present)
    if unknown:
        raise ConfigError(f"data.unmodelled_policies names {unknown}, which played no game of "
                          f"{files.describe()} (its policy ids: {sorted(present)})")
    return ~np.isin(policies, list(unmodelled))


def fitted_window(lengths: np.ndarray, num_frames: int) -> int:
    """The training window of games of ``lengths`` steps when ``model.train_window`` is left empty:
    `DEFAULT_TRAIN_WINDOW`, or the 10th percentile of the lengths where that is shorter, so that at
    least nine games in ten give windows (an expert that wins DoorKey-5x5 in 9-12 steps); never
    below ``num_frames``. A few quick games among long ones (random play that finds FourRooms' goal
    in two steps) leave the window as it is: one such game would otherwise shorten every window,
    and with it the ages the memory map learns; training names the games it leaves out
    (`short_games_message`)."""
    tenth = int(np.percentile(lengths, 10)) if len(lengths) else DEFAULT_TRAIN_WINDOW
    return max(num_frames, min(DEFAULT_TRAIN_WINDOW, tenth))


def short_games_message(lengths: np.ndarray, num_frames: int, least: int = 1) -> str:
    """What to change when training games of ``lengths`` steps are shorter than a window of
    ``num_frames`` steps: none of their steps is trained on (a short game may be the won one). The
    window suggested is the 10th percentile of the lengths; where fewer than a tenth of the games
    are short (that percentile is no shorter than the window), the shortest game's length; never
    below ``least`` (the model's ``num_frames``, the shortest window it takes: then the games
    shorter still are named)."""
    short = lengths < num_frames
    tenth = int(np.percentile(lengths, 10))
    few = tenth >= num_frames
    fitting = max(least, int(lengths.min()) if few else tenth)
    covered = float((lengths >= fitting).mean())
    why = "the shortest game's length" if few else "the 10th percentile of the games' lengths"
    return (f"{int(short.sum())} of {len(lengths)} training games are shorter than model.train_window = "
            f"{num_frames} steps and give no training window: none of their steps, their ends "
            f"included, is trained on; set model.train_window={fitting} ({why}, at least "
            f"model.num_frames = {least}) to train on {covered:.0%} of them"
            + ("" if fitting > least or covered >= 0.9 else "; a smaller model.num_frames reaches more"))


_OVERRIDE = re.compile(r"[A-Za-z_][\w.]*=")


def split_data_args(values: Sequence[str]) -> tuple[list[str], list[str]]:
    """``--data``'s values as (files, overrides): ``--data`` takes several files (a shell glob
    expands to many), so it also takes the ``key=value`` overrides after it; those are handed back
    (a file whose name looks like one is a file when it exists)."""
    files, overrides = [], []
    for value in values:
        (overrides if _OVERRIDE.match(value) and not Path(value).exists() else files).append(value)
    return files, overrides
