"""Replay recorded games in the real environment, step for step, and check they come out the same.

`rpg_env.record` plays games in *waves*: every world of a `TreasurehuntVectorEnv` resets
together with one seed (recorded in each stream's ``seed``, with its ``env_index``), the
co-players act from a generator drawn from that seed, and the learners' actions are recorded.
Spawns and resets draw from the env's generator in amounts that do not depend on the actions,
so a wave replays exactly from its seed, its worlds' recorded learner actions and the co-players'
policy (the file's ``/runs`` record names it; files written before it did were recorded with the
env's default, ``random``). Worlds whose games the file does not hold step with action 0: that
changes nothing in the others.

What only a replay knows, per step of a stream: which cells of the agent's *next* view were empty
map cells when the items spawned (``spawnable``; each became an item with probability
``spawn_prob``) and which of them did (``spawned``). From them the lowest next-view
cross-entropy any predictor could reach is exact (`rpg_worldmodel.evaluation.cells`).

Levelled games (``num_levels`` > 0 in the file's ``env_kwargs``) replay the same way: each
world's level is drawn from the wave's seed at its reset, so the replay plays the recorded level
and reports its id (`ReplayedStream.level`). Games with ``item_visible_turns`` > 0 replay too:
their views are compared as the agents saw them (old items hidden), while ``spawnable`` and
``spawned`` are read from the true map.

Every replayed view, action and reward is compared with the file's, bit for bit; a stream that
differs (edited seeds or actions, another game version) raises `ReplayError` naming the stream,
the step and the seed, so nothing is ever scored against a wrong replay.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import rpg_env
from rpg_base.errors import InputError
from rpg_env.trajectories.reader import TrajectoryFile

#: The co-players' policy of files whose ``/runs`` record does not name it (the env's default).
DEFAULT_CO_POLICY = "random"


class ReplayError(InputError):
    """A recorded stream cannot be replayed, or its replay differs from the recording."""


@dataclass(frozen=True)
class ReplayedStream:
    """What the replay of one stream of ``L`` steps adds to its recording.

    ``spawnable`` ``(L, V, V)`` bool: cell (i, j) of the view after step t was an empty map cell
    when that turn's items spawned. ``spawned`` ``(L, V, V)`` bool: an item spawned there.
    ``level``: the level id the game was played on (its env draws it from the seed; the file
    does not store it), -1 for the open room (``num_levels=0``).
    """

    spawnable: np.ndarray
    spawned: np.ndarray
    level: int = -1


def _wave_key(row: np.void) -> tuple[int, int]:
    return int(row["run"]), int(row["seed"])


def replayable(tf: TrajectoryFile, episode: int) -> str | None:
    """Why stream ``episode`` of ``tf`` cannot be replayed, or None when it can."""
    row = tf.episodes[episode]
    if int(row["seed"]) < 0:
        return "it was recorded without a seed"
    if int(row["reset_count"]) != 0:
        return "it does not start at a seeded reset (recorded by a single env without waves)"
    run = tf.runs[int(row["run"])] if int(row["run"]) < len(tf.runs) else {}
    if "num_envs" not in run:
        return "its /runs record does not say how many worlds were stepped together (num_envs)"
    if str(run.get("co_policy_id") or DEFAULT_CO_POLICY) not in ("random", "greedy"):
        return f"its co-players' policy {run.get('co_policy_id')!r} is not a built-in one"
    return None


def replay_streams(path: str | Path, episodes: np.ndarray | list[int], progress: bool = False
                   ) -> dict[int, ReplayedStream]:
    """Replay the waves holding ``episodes`` (stream indices of the file at ``path``), check every
    stream of those waves against the file, and return what the replay adds to each of
    ``episodes`` (`ReplayedStream`). Raises `ReplayError` when a stream cannot be replayed
    (`replayable`) or its replay differs from the recording."""
    path = Path(path)
    with TrajectoryFile(path) as tf:
        table = tf.episodes
        wanted = sorted({int(e) for e in episodes})
        for e in wanted:
            why = replayable(tf, e)
            if why is not None:
                raise ReplayError(f"stream {e} of {path} cannot be replayed: {why}")
        waves: dict[tuple[int, int], list[int]] = defaultdict(list)
        keys = {_wave_key(table[e]) for e in wanted}
        for i in range(len(table)):
            if _wave_key(table[i]) in keys:
                waves[_wave_key(table[i])].append(i)
        out: dict[int, ReplayedStream] = {}
        items = sorted(waves.items())
        if progress:
            from rpg_base.progress import progress_bar

            items = progress_bar(items, desc=f"replay {path.name}", unit="wave", leave=False)
        for (run, seed), members in items:
            streams = tf.read_episodes(members)
            replayed = _replay_wave(tf.meta, tf.runs[run], seed, members, table[members], streams, path)
            out.update({e: replayed[e] for e in members if e in wanted})
        return {e: out[e] for e in wanted}


def _replay_wave(meta: dict[str, Any], run: dict[str, Any], seed: int, members: list[int], rows: np.ndarray,
                 streams: list[dict[str, np.ndarray]], path: Path) -> dict[int, ReplayedStream]:
    """Step one wave with its recorded actions; check and annotate its streams (``members``: their
    indices in the file, ``rows`` their table rows, ``streams`` their data)."""
    num_envs = int(run["num_envs"])
    co_policy = str(run.get("co_policy_id") or DEFAULT_CO_POLICY)
    env = gym.make_vec(meta.get("env_id", rpg_env.ENV_ID), num_envs=num_envs, co_policy=co_policy,
                       **dict(meta["env_kwargs"]))
    try:
        venv = env.unwrapped
        world = venv.world
        world.log_spawns = True
        empty, agents = world.vocab.empty, world.params.num_agents
        length = int(rows["length"].max())
        actions = np.zeros((length, num_envs), dtype=np.int64)
        for row, data in zip(rows, streams, strict=True):
            if int(row["agent_id"]) == 0:
                actions[: int(row["length"]), int(row["env_index"])] = data["actions"]
        venv.reset(seed=int(seed))
        levels = world.level.copy()
        views = [world.views().copy()]  # (N, A, V*V): before step 0, then after every step
        spawnable, spawned, rewards = [], [], []
        for t in range(length):
            _, reward, _, _, infos = venv.step(actions[t])
            before = world.cells.copy()
            before.reshape(-1)[world.spawned] = empty
            hit = np.zeros(world.cells.shape, dtype=bool)
            hit.reshape(-1)[world.spawned] = True
            spawnable.append(world.views_of(before == empty))
            spawned.append(world.views_of(hit))
            views.append(world.views().copy())
            co = infos["co_rewards"] if agents > 1 else np.zeros((num_envs, 0), np.float32)
            rewards.append(np.column_stack([reward, co]).astype(np.float32))
    finally:
        env.close()
    views_, able, hits, points = (np.stack(x) for x in (views, spawnable, spawned, rewards))
    side = world.params.view_size
    out = {}
    for index, row, data in zip(members, rows, streams, strict=True):
        world_i, agent, n = int(row["env_index"]), int(row["agent_id"]), int(row["length"])
        recorded = np.asarray(data["obs"]).argmax(1).reshape(n + 1, -1)
        bad = np.flatnonzero((recorded != views_[: n + 1, world_i, agent]).any(1))
        if bad.size or not np.array_equal(points[:n, world_i, agent], np.asarray(data["rewards"])):
            what = f"its view after step {int(bad[0]) - 1}" if bad.size else "its rewards"
            if bad.size and bad[0] == 0:
                what = "its first view"
            raise ReplayError(
                f"stream {index} of {path} (game {int(row['game_id'])}, agent {agent}) does not replay: "
                f"{what} differs from the recording (seed {int(row['seed'])}, world {world_i}). Its seed or "
                "actions were altered, or another version of the game recorded it, so it cannot be scored "
                "against a replay; use the analytic floor instead (--floor bound)")
        shape = (n, side, side)
        out[index] = ReplayedStream(able[:n, world_i, agent].reshape(shape),
                                    hits[:n, world_i, agent].reshape(shape), int(levels[world_i]))
    return out
