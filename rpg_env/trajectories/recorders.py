"""Record the games of any env shaped like Treasurehunt-v0 to trajectory files.

- `HDF5Recorder`: a `gymnasium.Wrapper` around one env (``gymnasium.make("Treasurehunt-v0")``).
- `HDF5VectorRecorder`: a `gymnasium.vector.VectorWrapper` around a vector env (e.g. the
  native ``gymnasium.make_vec("Treasurehunt-v0", num_envs=N)``), both autoreset modes.

Game-free: everything about the env comes from its spaces, ``metadata`` and ``spec`` through
`rpg_env.envs.protocol.describe`, so an env that hides the game (a remote game, a learned
model of it) records the same way as the real one.

Every finished game is written as one stream per agent: the learner (agent 0, labelled with
the recorder's ``policy_id``) and each co-player (agent k, labelled with the env's
``metadata["co_policy_id"]``), sharing a game id. Co-player data comes from the env's info:
``co_obs`` (the views they act on next), ``co_actions`` and ``co_rewards``. A game is buffered
in memory while it runs and committed to the file when it ends, so a killed process loses at
most the games in progress.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorWrapper

from rpg_env.envs.protocol import EnvDescription, describe, is_one_hot_view_space
from rpg_env.trajectories.format import Stream, encode_policy_id
from rpg_env.trajectories.writer import TrajectoryWriter


def env_meta(env: Any) -> dict[str, Any]:
    """The file attributes describing ``env`` (an env or vector env following
    `rpg_env.envs.protocol`, maybe wrapped): ``env_id``, ``env_kwargs`` (the env's
    ``metadata["rules"]``, so ``gymnasium.make(env_id, **env_kwargs)`` rebuilds the game),
    ``obs_shape`` ``(C, V, V)``, ``channel_names`` and ``action_names``.

    ``env_id`` is the id of the env's ``spec``; an env made without ``gymnasium.make`` has no
    spec and is named by the class name of ``env.unwrapped`` instead.
    """
    return _file_meta(describe(env), env)


def _file_meta(description: EnvDescription, env: Any) -> dict[str, Any]:
    return {
        "env_id": description.env_id or type(getattr(env, "unwrapped", env)).__name__,
        "env_kwargs": dict(description.rules),
        "obs_shape": description.obs_shape,
        "channel_names": list(description.channel_names),
        "action_names": list(description.action_names),
    }


def _check_onehot_space(space: gym.Space, metadata: Mapping[str, Any], where: str) -> None:
    """Refuse anything but the one-hot view ``(C, V, V)`` (`is_one_hot_view_space`) with one channel
    per ``metadata["channel_names"]`` (a full-map observation is a 3-D one-hot grid too)."""
    names = metadata.get("channel_names")
    onehot = (is_one_hot_view_space(space) and space.shape[1] == space.shape[2]
              and (not names or len(names) == space.shape[0]))
    if not onehot:
        raise ValueError(
            f"{where} records one-hot egocentric views (C, V, V) with one channel per "
            f"metadata['channel_names'], but the env's observation space is {space}; create the env "
            f"with obs_mode='onehot' and put the recorder directly around it (before observation "
            f"wrappers)")


class _GameBuffer:
    """One world's game in progress: per step, the views, actions and rewards of all agents.

    ``obs[t]`` is ``(A, C, V, V)``: the views before step ``t`` (the last entry follows the last
    step); ``actions[t]``/``rewards[t]`` are ``(A,)``.
    """

    def __init__(self, first_obs: np.ndarray, seed: int, reset_count: int, env_index: int,
                 level: int = -1) -> None:
        self.obs = [first_obs]
        self.level = level
        self.actions: list[np.ndarray] = []
        self.rewards: list[np.ndarray] = []
        self.terminated: list[bool] = []
        self.truncated: list[bool] = []
        self.seed, self.reset_count, self.env_index = seed, reset_count, env_index

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, terminated: bool,
            truncated: bool) -> None:
        self.obs.append(obs)
        self.actions.append(actions)
        self.rewards.append(rewards)
        self.terminated.append(bool(terminated))
        self.truncated.append(bool(truncated))

    def __len__(self) -> int:
        return len(self.actions)

    def streams(self, policy_ids: Sequence[str], interrupted: bool = False) -> list[Stream]:
        obs = np.stack(self.obs)  # (L+1, A, C, V, V)
        actions = np.stack(self.actions)  # (L, A)
        rewards = np.stack(self.rewards)
        term, trunc = np.asarray(self.terminated), np.asarray(self.truncated)
        return [Stream(obs=np.ascontiguousarray(obs[:, a]), actions=actions[:, a], rewards=rewards[:, a],
                       terminated=term, truncated=trunc, agent_id=a, policy_id=policy_ids[a],
                       seed=self.seed, reset_count=self.reset_count, env_index=self.env_index,
                       interrupted=interrupted, level=self.level)
                for a in range(len(policy_ids))]


class _RecorderCore:
    """What both recorders share: the writer, policy ids, and which agents to record."""

    def _setup(self, env: Any, path: str | os.PathLike, policy_id: str, mode: str,
               record_co_players: bool, keep_interrupted: bool, run_info: Mapping[str, Any] | None,
               writer_kwargs: dict[str, Any]) -> None:
        encode_policy_id(policy_id)
        self.policy_id = policy_id
        self.record_co_players = bool(record_co_players)
        self.keep_interrupted = bool(keep_interrupted)
        description = describe(env)
        self._co_policy_id = description.co_policy_id or "unknown"
        declared = description.rules.get("num_agents")
        # None: counted at the first reset, from the co-players' views in its info.
        self._num_agents: int | None = (1 if not self.record_co_players
                                        else None if declared is None else int(declared))
        self._check_co_id()  # fails before the file is touched when the agents are known
        # The co-players' policy is part of how the games went (a replay needs it), recorded or not.
        info = {"policy_id": policy_id, "co_policy_id": description.co_policy_id,
                "recorder": type(self).__name__, **dict(run_info or {})}
        self.writer = TrajectoryWriter(path, _file_meta(description, env), mode=mode, run_info=info,
                                       **writer_kwargs)
        self.path = self.writer.path

    def _check_co_id(self) -> None:
        if self._num_agents is not None and self._num_agents > 1:
            encode_policy_id(self._co_policy_id)

    def _count_agents(self, co_obs: np.ndarray | None) -> None:
        """Learn the number of agents from a reset's ``co_obs`` ``(..., A-1, C, V, V)`` when the
        env's rules do not declare it."""
        if self._num_agents is None:
            self._num_agents = 1 + (0 if co_obs is None else int(np.shape(co_obs)[-4]))
            self._check_co_id()

    def _policy_ids(self) -> list[str]:
        return [self.policy_id] + [self._co_policy_id] * (self.agents_recorded - 1)

    @property
    def agents_recorded(self) -> int:
        """Streams written per game: every agent, or only the learner. For an env whose
        ``metadata["rules"]`` lack ``num_agents`` the co-players are counted at the first
        reset; until then this is 1."""
        return 1 if self._num_agents is None else self._num_agents

    @property
    def episodes_recorded(self) -> int:
        """Streams committed to the file (by this recorder or before it, when appending)."""
        return self.writer.num_episodes

    @property
    def games_recorded(self) -> int:
        """Games committed by this recorder."""
        return self._games

    def _stack_views(self, learner_obs: np.ndarray, co_obs: np.ndarray | None) -> np.ndarray:
        """(..., C, V, V) learner + (..., A-1, C, V, V) co-players -> (..., A, C, V, V)."""
        learner = np.asarray(learner_obs, dtype=np.uint8)[..., None, :, :, :]
        if self.agents_recorded == 1:
            return learner.copy()
        return np.concatenate([learner, np.asarray(co_obs, dtype=np.uint8)], axis=-4)


class HDF5Recorder(_RecorderCore, gym.Wrapper):
    """Writes every game played through a single env to a trajectory file.

    Args:
        env: an env following `rpg_env.envs.protocol` with one-hot observations
            (``gymnasium.make("Treasurehunt-v0")``, or any env shaped like it).
        path: the ``.h5`` file; an existing file is appended to (``mode="a"``) after checking
            that it was recorded with the same game settings.
        policy_id: label of whatever chooses the learner's actions (``"human"``, ``"greedy"``,
            ``"sb3-dqn"``...). Co-players are labelled with the env's ``metadata["co_policy_id"]``
            (``"unknown"`` when it has none).
        mode: ``"a"`` append/create, ``"w"`` replace, ``"x"`` create new only.
        record_co_players: also write a stream per co-player (default) or only the learner.
        keep_interrupted: a game cut short by ``reset()``/``close()`` before the env ended it is
            dropped by default; with ``True`` it is written with `FLAG_INTERRUPTED`.
        run_info: extra JSON-ready provenance stored in the file's ``/runs`` record.
        **writer_kwargs: `TrajectoryWriter` options (``compression_level``, chunk sizes).

    The file's ``env_id`` and ``env_kwargs`` come from `env_meta`. Seeds: each stream records
    the seed of the last ``reset(seed=...)`` (-1 if the env was never seeded) and
    ``reset_count``, the number of resets since then.
    """

    def __init__(self, env: gym.Env, path: str | os.PathLike, policy_id: str = "unknown", *,
                 mode: str = "a", record_co_players: bool = True, keep_interrupted: bool = False,
                 run_info: Mapping[str, Any] | None = None, **writer_kwargs: Any) -> None:
        gym.Wrapper.__init__(self, env)
        _check_onehot_space(env.observation_space, env.metadata or {}, "HDF5Recorder")
        self._setup(env, path, policy_id, mode, record_co_players, keep_interrupted, run_info,
                    writer_kwargs)
        self._game: _GameBuffer | None = None
        self._seed, self._reset_count, self._games = -1, -1, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._finish_interrupted()
        if seed is not None:
            self._seed, self._reset_count = int(seed), 0
        else:
            self._reset_count += 1
        self._count_agents(info.get("co_obs"))
        self._game = _GameBuffer(self._stack_views(obs, info.get("co_obs")), self._seed,
                                 self._reset_count, 0, int(info.get("level", -1)))
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._game is not None:
            a = self.agents_recorded
            actions = np.empty(a, dtype=np.int64)
            rewards = np.empty(a, dtype=np.float32)
            actions[0], rewards[0] = int(np.asarray(action)), reward
            if a > 1:
                actions[1:] = info["co_actions"][: a - 1]
                rewards[1:] = info["co_rewards"][: a - 1]
            self._game.add(self._stack_views(obs, info.get("co_obs")), actions, rewards,
                           terminated, truncated)
            if terminated or truncated:
                self.writer.write_game(self._game.streams(self._policy_ids()))
                self._games += 1
                self._game = None
        return obs, reward, terminated, truncated, info

    def _finish_interrupted(self) -> None:
        game, self._game = self._game, None
        if game is not None and len(game) and self.keep_interrupted:
            self.writer.write_game(game.streams(self._policy_ids(), interrupted=True))
            self._games += 1

    def close(self) -> None:
        try:
            if not self.writer.closed:
                self._finish_interrupted()
        finally:
            self.writer.close()
            super().close()


class HDF5VectorRecorder(_RecorderCore, VectorWrapper):
    """Writes every game of every world of a vector env to a trajectory file.

    Same arguments as `HDF5Recorder` (``env``: a vector env following `rpg_env.envs.protocol`),
    plus ``max_games``: stop writing after that many games (later games are played but not
    recorded, so a batch of worlds that finish together gives exactly ``max_games``; the lowest
    world indices win). Games that end in the same step are committed together. Handles
    ``NEXT_STEP`` and ``SAME_STEP`` autoreset (``metadata["autoreset_mode"]``).

    ``episode_start`` ``(N,)`` bool marks the worlds whose current observation begins a game
    (pass it to `rpg_env.policies.base.BatchPolicy.act`).
    """

    def __init__(self, env: gym.vector.VectorEnv, path: str | os.PathLike, policy_id: str = "unknown",
                 *, mode: str = "a", record_co_players: bool = True, keep_interrupted: bool = False,
                 max_games: int | None = None, run_info: Mapping[str, Any] | None = None,
                 **writer_kwargs: Any) -> None:
        VectorWrapper.__init__(self, env)
        _check_onehot_space(env.single_observation_space, env.metadata or {}, "HDF5VectorRecorder")
        self.autoreset_mode = AutoresetMode(env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
        if self.autoreset_mode == AutoresetMode.DISABLED:
            raise ValueError("HDF5VectorRecorder needs an autoresetting vector env (NEXT_STEP or SAME_STEP)")
        if max_games is not None and int(max_games) < 1:
            raise ValueError(f"max_games must be >= 1 or None, got {max_games}")
        self.max_games = None if max_games is None else int(max_games)
        self._setup(env, path, policy_id, mode, record_co_players, keep_interrupted, run_info,
                    writer_kwargs)
        n = self.num_envs
        self._games_buf: list[_GameBuffer | None] = [None] * n
        self._seeds = np.full(n, -1, dtype=np.int64)
        self._reset_counts = np.full(n, -1, dtype=np.int64)
        self._autoreset = np.zeros(n, dtype=bool)
        self._started = False
        self._levels = np.full(n, -1, dtype=np.int64)
        self.episode_start = np.ones(n, dtype=bool)
        self._games = 0

    @property
    def done(self) -> bool:
        """True once ``max_games`` games have been written."""
        return self.max_games is not None and self._games >= self.max_games

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, infos = self.env.reset(seed=seed, options=options)
        mask = (options or {}).get("reset_mask")
        # Like the env: a reset_mask applies only once every world has started.
        mask = np.ones(self.num_envs, dtype=bool) if mask is None or not self._started else \
            np.asarray(mask, dtype=bool)
        self._started = True
        self._count_agents(infos.get("co_obs"))
        views = self._stack_views(obs, infos.get("co_obs"))
        self._levels = _levels(infos, self.num_envs)
        interrupted = []
        for w in np.flatnonzero(mask):
            game = self._games_buf[w]
            if game is not None and len(game) and self.keep_interrupted:
                interrupted.append(game.streams(self._policy_ids(), interrupted=True))
            self._start(w, views[w], seed)
        self._commit(interrupted)
        self._autoreset[mask] = False
        self.episode_start = mask.copy()
        return obs, infos

    def _start(self, w: int, views: np.ndarray, seed: int | None) -> None:
        if seed is not None:
            self._seeds[w], self._reset_counts[w] = int(seed), 0
        else:
            self._reset_counts[w] += 1
        self._games_buf[w] = _GameBuffer(views, int(self._seeds[w]), int(self._reset_counts[w]), int(w),
                                         int(self._levels[w]))

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        n, a = self.num_envs, self.agents_recorded
        views = self._stack_views(obs, infos.get("co_obs"))
        self._levels = _levels(infos, n)  # of the games that start at this step
        step_actions = np.empty((n, a), dtype=np.int64)
        step_rewards = np.empty((n, a), dtype=np.float32)
        step_actions[:, 0] = np.asarray(actions)
        step_rewards[:, 0] = rewards
        if a > 1:
            step_actions[:, 1:] = infos["co_actions"][:, : a - 1]
            step_rewards[:, 1:] = infos["co_rewards"][:, : a - 1]
        step = (views, step_actions, step_rewards, np.asarray(terminations, dtype=bool),
                np.asarray(truncations, dtype=bool))
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            finished = self._step_next_step_autoreset(*step)
        else:
            finished = self._step_same_step_autoreset(*step, infos)
        self._commit(finished)
        return obs, rewards, terminations, truncations, infos

    def _step_next_step_autoreset(self, views: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                                  terminated: np.ndarray, truncated: np.ndarray) -> list[list[Stream]]:
        """Add a NEXT_STEP env's step ``(N, A, ...)`` to the games; returns the finished ones."""
        finished = []
        # Worlds that ended last step were reset by this step (their action was ignored).
        for w in np.flatnonzero(self._autoreset):
            self._start(w, views[w], None)
        stepped = ~self._autoreset
        ended = terminated | truncated
        for w in np.flatnonzero(stepped):
            game = self._games_buf[w]
            game.add(views[w], actions[w], rewards[w], terminated[w], truncated[w])
            if ended[w]:
                finished.append(game.streams(self._policy_ids()))
                self._games_buf[w] = None
        self.episode_start = self._autoreset.copy()
        self._autoreset = ended & stepped
        return finished

    def _step_same_step_autoreset(self, views: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                                  terminated: np.ndarray, truncated: np.ndarray,
                                  infos: dict[str, Any]) -> list[list[Stream]]:
        """Add a SAME_STEP env's step to the games; returns the finished ones. Ending worlds are
        already reset: their last views and co-player moves are in ``final_obs``/``final_info``,
        and ``views`` holds the first views of their next games."""
        a = self.agents_recorded
        ended = terminated | truncated
        ended_idx = np.flatnonzero(ended)
        finished = []
        if ended_idx.size:
            # final_obs is an object array (one entry per world, None where not ended).
            final_info = infos["final_info"]
            final = self._stack_views(np.stack([infos["final_obs"][w] for w in ended_idx]),
                                      final_info["co_obs"][ended_idx] if a > 1 else None)
            if a > 1:
                actions[ended_idx, 1:] = final_info["co_actions"][ended_idx, : a - 1]
                rewards[ended_idx, 1:] = final_info["co_rewards"][ended_idx, : a - 1]
        for j, w in enumerate(ended_idx):
            game = self._games_buf[w]
            game.add(final[j], actions[w], rewards[w], terminated[w], truncated[w])
            finished.append(game.streams(self._policy_ids()))
            self._start(w, views[w], None)
        for w in np.flatnonzero(~ended):
            self._games_buf[w].add(views[w], actions[w], rewards[w], False, False)
        self.episode_start = ended.copy()
        return finished

    def _commit(self, games: list[list[Stream]]) -> None:
        if self.max_games is not None:
            games = games[: max(self.max_games - self._games, 0)]
        if games:
            self.writer.write_games(games)
            self._games += len(games)

    def close(self, **kwargs: Any) -> None:
        try:
            if not self.writer.closed and self.keep_interrupted:
                self._commit([g.streams(self._policy_ids(), interrupted=True)
                              for g in self._games_buf if g is not None and len(g)])
        finally:
            self.writer.close()
            self.env.close(**kwargs)


def _levels(infos: Mapping[str, Any], num_envs: int) -> np.ndarray:
    """``(N,)`` level id of each world's current game from a vector env's ``infos`` (-1 where the
    env reports none: the open room, or an env without levels)."""
    levels = infos.get("level")
    return np.full(num_envs, -1, dtype=np.int64) if levels is None else np.asarray(levels, dtype=np.int64)
