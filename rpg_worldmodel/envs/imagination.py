"""N imagined worlds stepped together, and the real context they start from.

A world model needs ``num_frames`` real steps before it can imagine: a `Context` provides them,
either played in the real game by a burn-in policy (`RealGameContext`, the default: nothing has
to be recorded first) or cut from a trajectory file (`FileContext`). `ImaginedWorlds` then steps
all N worlds with one batched, cached forward pass per step (`WorldModel.imagine_step`) and
samples each next view per cell and each reward from the model's distributions. The
environments of `rpg_worldmodel.envs.world_model_env` are thin Gymnasium faces of it.

The context's real turns count toward the episode: an imagined episode truncates at the turn the
real game would (its length, `RealGame.max_turns`), or ends where the model's end head says the game
ended. Which game, and its length, come from the checkpoint's files (`rpg_worldmodel.envs.real_game`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from rpg_base.errors import InputError
from rpg_base.provenance import pinned_torch_threads
from rpg_env.policies.base import BatchPolicy
from rpg_env.policies.registry import make_policy
from rpg_worldmodel.checkpoint import LoadedCheckpoint
from rpg_worldmodel.data.sources import DataSource, check_data_matches
from rpg_worldmodel.data.stores import EpisodeStore
from rpg_worldmodel.envs.real_game import RealGame
from rpg_worldmodel.evaluation.episodes import select_episodes
from rpg_worldmodel.models.refiner import SAMPLE_DOUBT
from rpg_worldmodel.models.sampling import ViewSampler, sample_cells
from rpg_worldmodel.models.state import Imagination
from rpg_worldmodel.models.world_model import WorldModel


@dataclass
class Start:
    """Real context for k worlds: ``views`` (k, T, C, V, V) uint8, the ``actions`` (k, T-1) taken
    in all but the last view, and ``turns`` (k,): the game turn of the last view. Where the context
    was played from a reset (`RealGameContext`, the play window's real game): ``seeds`` (k,) int64,
    the seed each real game was reset with, and ``rewards`` (k, T-1) float, what each step paid; None
    where they are not known (a context cut from a file)."""

    views: np.ndarray
    actions: np.ndarray
    turns: np.ndarray
    seeds: np.ndarray | None = None
    rewards: np.ndarray | None = None


class Context(Protocol):
    """Where imagined worlds start: ``sample(k, rng)`` -> `Start` of k worlds."""

    def sample(self, k: int, rng: np.random.Generator) -> Start: ...


#: How often a world's real opening is played again when its game ended within it (`RealGameContext`).
OPENING_TRIES = 10


class RealGameContext:
    """Context played in the real game: a burn-in policy plays ``num_frames - 1`` turns.

    ``game``: the checkpoint's `RealGame`; ``policy``: anything `rpg_env.policies.registry.make_policy`
    takes (``"greedy"``, ``"random"`` (from the game's actions), an SB3 ``.zip``; None: the game's
    `RealGame.default_opener`); ``co_policy``: who drives the treasurehunt game's co-players. An
    opening must stay inside one game: a world whose game ends within it is played again, from a
    fresh reset, up to `OPENING_TRIES` times.
    """

    def __init__(self, num_frames: int, game: RealGame, policy: Any = None, co_policy: Any = None) -> None:
        game.co_players(co_policy)  # refused here, not at the first reset
        self.num_frames, self.game, self.co_policy = num_frames, game, co_policy
        self.policy: BatchPolicy = make_policy(game.default_opener() if policy is None else policy,
                                               spaces.Discrete(len(game.action_names)))
        if num_frames - 1 >= game.max_turns:
            raise InputError(f"a context of {num_frames} frames does not fit in an episode of "
                             f"{game.max_turns} turns")

    def sample(self, k: int, rng: np.random.Generator) -> Start:
        parts, left = [], k  # the worlds are alike: any whole opening serves any of them
        for _ in range(OPENING_TRIES):
            played = self._play(left, rng)
            ended = played.pop("ended")
            parts.append({key: value[~ended] for key, value in played.items()})
            left = int(ended.sum())
            if not left:
                break
        else:
            raise InputError(f"{self.game.env_id}'s games ended within the {self.num_frames - 1} opening "
                             f"turns {OPENING_TRIES} times in a row: a model of num_frames {self.num_frames} "
                             f"needs longer games (or start from a file: reset_from=)")
        joined = {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}
        seeds = joined["seeds"] if (joined["seeds"] >= 0).all() else None
        return Start(joined["views"], joined["actions"], np.full(k, self.num_frames - 1, dtype=np.int64),
                     seeds, joined["rewards"])

    def _play(self, k: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """``k`` openings: ``views`` ``(k, T, C, V, V)`` uint8, ``actions`` ``(k, T-1)`` int64,
        ``rewards`` ``(k, T-1)`` float64, ``seeds`` ``(k,)`` int64 (world i's reset seed, ``seed + i`` in
        Gymnasium's `SyncVectorEnv`; -1 in a vector env that draws its worlds otherwise), and
        ``ended`` ``(k,)`` bool, whether a world's game ended (terminated or truncated) within its
        opening."""
        env = self.game.make_vector(k, self.co_policy)
        self.policy.check_view_shape(tuple(env.single_observation_space.shape))
        seed = int(rng.integers(2**62))
        try:
            played = play_opening(env, self.policy, self.num_frames - 1, seed,
                                  np.random.default_rng(rng.integers(2**62)))
        finally:
            env.close()
        per_world = isinstance(env.unwrapped, gym.vector.SyncVectorEnv)
        seeds = seed + np.arange(k, dtype=np.int64) if per_world else np.full(k, -1, dtype=np.int64)
        return {**played, "seeds": seeds}


def play_opening(env: gym.vector.VectorEnv, policy: BatchPolicy, turns: int, seed: int,
                 policy_rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``env`` (k worlds) reset with ``seed`` and played ``turns`` turns by ``policy`` (seeded with
    ``policy_rng``); the env is left running. Returns ``views`` ``(k, turns + 1, C, V, V)`` uint8,
    ``actions`` ``(k, turns)`` int64, ``rewards`` ``(k, turns)`` float64 and ``ended`` ``(k,)`` bool,
    whether a world's game ended (terminated or truncated) within those turns."""
    obs, _ = env.reset(seed=seed)
    policy.seed(policy_rng)
    k = len(obs)
    views, actions, rewards, ended = [obs], [], [], np.zeros(k, dtype=bool)
    start = np.ones(k, dtype=bool)
    for _ in range(turns):
        action = np.asarray(policy.act(obs, start), dtype=np.int64)
        start[:] = False
        obs, reward, terminated, truncated, _ = env.step(action)
        ended |= np.asarray(terminated) | np.asarray(truncated)
        views.append(obs)
        actions.append(action)
        rewards.append(np.asarray(reward, dtype=np.float64))
    taken = np.stack(actions, 1) if actions else np.zeros((k, 0), dtype=np.int64)
    paid = np.stack(rewards, 1) if rewards else np.zeros((k, 0), dtype=np.float64)
    return {"views": np.stack(views, 1).astype(np.uint8), "actions": taken, "rewards": paid, "ended": ended}


class FileContext:
    """Context cut from a trajectory file: ``num_frames`` consecutive recorded steps of a stream.

    ``split="auto"``: on the checkpoint's own training file only its test split is used (the model
    never trained on those games); on any other file, every stream of the checkpoint's
    ``data.agent_id``. ``split="all"``: every game of the file, trained on or not (a learner
    imagining from its own experience).
    """

    def __init__(self, path: str | Path, loaded: LoadedCheckpoint, split: str = "auto") -> None:
        path = Path(path)
        if split not in ("auto", "all"):
            raise InputError(f"reset_split must be 'auto' or 'all', got {split!r}")
        cfg, record = loaded.config, loaded.record
        check_data_matches(cfg.model, DataSource.open(path).meta, data_path=path,
                           model_source=f"checkpoint {loaded.path}", trained_on=record.data.to_dict())
        with warnings.catch_warnings():  # "all" asks for trained-on games: nothing is being scored
            warnings.simplefilter("ignore")
            chosen = select_episodes(record, path, split, allow_training_episodes=True,
                                     agent_id=cfg.data.agent_id)
        keep = chosen.agent_ids == cfg.data.agent_id if cfg.data.agent_id >= 0 else slice(None)
        episodes = np.asarray(chosen.episodes)[keep]
        self.num_frames = cfg.model.num_frames
        self.store = EpisodeStore.load(path, episodes)
        long_enough = self.store.lengths >= self.num_frames
        if not long_enough.any():
            raise InputError(f"{path} has no episode of {self.num_frames} steps or more to start from")
        self.rows = np.flatnonzero(long_enough)

    def sample(self, k: int, rng: np.random.Generator) -> Start:
        rows = self.rows[rng.integers(0, len(self.rows), size=k)]
        # Views s .. s+T-1 and the actions taken in them all lie inside the episode (and at least one
        # recorded step follows: the imagined episode has turns left).
        starts = (rng.random(k) * (self.store.lengths[rows] - self.num_frames + 1)).astype(np.int64)
        views, actions, _ = self.store.gather(rows, starts, self.num_frames)
        return Start(views, actions[:, :-1], starts + self.num_frames - 1)


class GivenContext:
    """Context someone else played: `sample` returns the `Start` last handed to `give` (e.g. the
    real game's own opening, so that a dream and the real game continue from the same state)."""

    def __init__(self) -> None:
        self.start: Start | None = None

    def give(self, start: Start) -> None:
        self.start = start

    def sample(self, k: int, rng: np.random.Generator) -> Start:
        if self.start is None or len(self.start.views) != k:
            raise InputError(f"no real context of {k} world(s) was given before the reset")
        return self.start


#: torch intra-op threads of a step. A step is small matrix work per world: on CPU one thread beat
#: two at N = 1, 16 and 256, by ~10x once another process competed for the cores (docs/imagination.md).
DEFAULT_TORCH_THREADS = 1


class ImaginedWorlds:
    """N worlds imagined by a world model, stepped by one batched forward pass per step.

    ``reset(rows, rng)`` starts the worlds ``rows`` from the context; ``step(actions)`` advances
    every world one turn. The next view is sampled from the model's distribution (softened by
    ``temperature``) or taken as the likeliest (``sample=False``: the refiner's joint arg-max,
    `ViewSampler.likeliest`; the reward class's arg-max). With
    the model's cell refiner a sampled view is one joint draw in at most ``sample_rounds`` rounds of
    at most ``sample_doubt`` each, no kind below ``sample_floor`` drawn in a cell (None: the model's
    settings, and `rpg_worldmodel.models.refiner.SAMPLE_DOUBT`); without, each cell is drawn on its
    own (`rpg_worldmodel.models.sampling`). No rule places the agents: the model's draw does. The
    generator is reseeded by each full reset, so the same seed and actions give the same imagined worlds, bit
    for bit on CPU.

    ``horizon``: most imagined turns of an episode before it is truncated (None: until the game's
    last turn). IRIS imagines 20 steps from each real start: the shorter a dream, the less room a
    learner has to exploit the model's mistakes; the truncation is a time limit (an agent's value
    bootstraps past it), so the return it learns is still the game's.

    ``opening``: the `Start` the last reset of every world drew (with the real games' reset seeds and
    rewards where the context knows them: a replay of the real game can then judge a whole dream,
    `rpg_worldmodel.envs.replay_consistency`).

    ``torch_threads``: torch's intra-op threads while a reset or step runs (the caller's setting is
    restored after each); None leaves torch's setting alone. The thread count can change the last
    bits of a prediction (the order of a reduction), not what the model computes.
    """

    def __init__(self, loaded: LoadedCheckpoint, num_worlds: int, context: Context, *, sample: bool = True,
                 temperature: float = 1.0, device: str | torch.device = "cpu",
                 torch_threads: int | None = DEFAULT_TORCH_THREADS, sample_rounds: int | None = None,
                 sample_doubt: float | None = None, sample_floor: float | None = None,
                 horizon: int | None = None) -> None:
        cfg = loaded.config.model
        if not cfg.reward_head or not cfg.reward_values:
            raise InputError(f"checkpoint {loaded.path} has no reward head (schema 1 or reward_head=false): "
                             f"an imagined game needs rewards; retrain it with this version")
        if not temperature > 0:
            raise InputError(f"temperature must be > 0, got {temperature}")
        positive = type(torch_threads) is int and torch_threads >= 1  # not a bool, not a float
        if torch_threads is not None and not positive:
            raise InputError(f"torch_threads must be a positive int or None (torch's setting), "
                             f"got {torch_threads!r}")
        self.torch_threads = torch_threads
        if horizon is not None and (type(horizon) is not int or horizon < 1):
            raise InputError(f"horizon must be a positive int or None (until the game's last turn), "
                             f"got {horizon!r}")
        self.horizon = horizon
        rounds = cfg.sample_rounds if sample_rounds is None else sample_rounds
        if type(rounds) is not int or not 1 <= rounds <= cfg.view_size**2:
            raise InputError(f"sample_rounds must be an int in 1..{cfg.view_size**2} (one cell a round), "
                             f"got {sample_rounds!r}")
        doubt = SAMPLE_DOUBT if sample_doubt is None else sample_doubt
        if isinstance(doubt, bool) or not isinstance(doubt, int | float) or not 0 <= doubt < float("inf"):
            raise InputError(f"sample_doubt must be a number >= 0 (0: one cell a round), "
                             f"got {sample_doubt!r}")
        floor = cfg.sample_floor if sample_floor is None else sample_floor
        if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 <= floor < 1:
            raise InputError(f"sample_floor must be a probability in [0, 1) (0: no kind left out), "
                             f"got {sample_floor!r}")
        self.sample_rounds = rounds if cfg.refiner_layers else None  # None: cells drawn on their own
        self.sample_doubt = float(doubt) if cfg.refiner_layers else None
        self.sample_floor = float(floor) if cfg.refiner_layers else None
        self.model: WorldModel = loaded.model.to(device).eval()
        self.device, self.context, self.num_worlds = torch.device(device), context, int(num_worlds)
        self.sample, self.temperature = bool(sample), float(temperature)
        data = loaded.record.data
        self.num_frames, self.max_turns = cfg.num_frames, RealGame.of(data).max_turns
        self.reward_values = torch.tensor(cfg.reward_values, dtype=torch.float32, device=self.device)
        refiner = self.model.refiner
        self.sample_view = ViewSampler(refiner, rounds, doubt, float(floor), self.model.kind_limits)
        self.generator = torch.Generator(device=self.device)
        self.views = torch.zeros(self.num_worlds, cfg.num_channels, cfg.view_size, cfg.view_size,
                                 device=self.device)  # the view each world is in, one-hot float
        self.turns = np.zeros(self.num_worlds, dtype=np.int64)
        self.imagined = np.zeros(self.num_worlds, dtype=np.int64)  # turns since each world's start
        self.returns = np.zeros(self.num_worlds, dtype=np.float64)
        self.entropy = np.zeros(self.num_worlds, dtype=np.float64)
        self.ended = np.zeros(self.num_worlds, dtype=bool)  # the last step ended the game (the end head)
        self.state: Imagination | None = None
        self.opening: Start | None = None  # the real context the last full reset started from

    def reset(self, rows: np.ndarray, rng: np.random.Generator) -> None:
        """Start worlds ``rows`` from fresh real context (all worlds: the generator is reseeded)."""
        with pinned_torch_threads(self.torch_threads):
            self._reset(rows, rng)

    def _reset(self, rows: np.ndarray, rng: np.random.Generator) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) == self.num_worlds:
            self.generator.manual_seed(int(rng.integers(2**62)))
        start = self.context.sample(len(rows), rng)
        if len(rows) == self.num_worlds:
            self.opening = start
        views = torch.as_tensor(start.views, device=self.device).float()
        actions = torch.as_tensor(start.actions, device=self.device)
        joining = self.state is not None and len(rows) < self.num_worlds
        first = self.state.step - actions.shape[1] if joining else 0
        fresh = self.model.imagine_context(views, actions, first_step=first)
        index = torch.as_tensor(rows, device=self.device)
        self.state = self.state.with_rows(index, fresh) if joining else fresh
        self.views[index] = views[:, -1]
        self.turns[rows], self.returns[rows], self.entropy[rows] = start.turns, 0.0, 0.0
        self.imagined[rows], self.ended[rows] = 0, False

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Advance every world by its action ``(N,)``; returns rewards ``(N,)`` float32 (points) and
        truncated ``(N,)`` bool (the game's last turn or the horizon, where the game did not end).
        Views, turns, returns, entropies and ``ended`` (the model's end head puts the chance that the
        step ended the game above one half, sampling or not: a rare event drawn at every step would
        end long games by chance; never for a model without one; and where the training files paid
        only as games ended, ``model.pays_only_at_ends``, every step that pays) are updated in place."""
        with pinned_torch_threads(self.torch_threads):
            return self._step(actions)

    def _step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        act = torch.as_tensor(np.asarray(actions, dtype=np.int64), device=self.device)
        out, self.state = self.model.imagine_step(self.views, act, self.state)
        logits = out.view[:, 0].float().movedim(1, -1)  # (N, V, V, C)
        log_probs = torch.log_softmax(logits, -1)
        self.entropy = -(log_probs.exp() * log_probs).sum(-1).mean((1, 2)).double().cpu().numpy()
        reward_logits = out.reward[:, 0].float()
        if self.sample:
            cells = self.sample_view(logits, self.generator, self.temperature)
            reward_class = sample_cells(torch.softmax(reward_logits / self.temperature, -1), self.generator)
        else:
            cells, reward_class = self.sample_view.likeliest(logits), reward_logits.argmax(-1)
        self.views = torch.nn.functional.one_hot(cells, logits.shape[-1]).movedim(-1, 1).float()
        rewards = self.reward_values[reward_class].cpu().numpy()
        self.ended = self._ends(out.end)
        if self.model.cfg.pays_only_at_ends:  # the files never paid but as a game ended
            self.ended |= rewards != 0
        self.turns += 1
        self.imagined += 1
        self.returns += rewards
        truncated = self.turns >= self.max_turns
        if self.horizon is not None:
            truncated |= self.imagined >= self.horizon
        return rewards, truncated & ~self.ended

    def _ends(self, end_logits: torch.Tensor | None) -> np.ndarray:
        """``(N,)`` bool: whether this step ended each world's game, as the end head says."""
        if end_logits is None:
            return np.zeros(self.num_worlds, dtype=bool)
        return (end_logits[:, 0].float() > 0).cpu().numpy()

    def observations(self) -> np.ndarray:
        """``(N, C, V, V)`` int8 one-hot views (exactly one class per cell)."""
        return self.views.to(torch.int8).cpu().numpy()
