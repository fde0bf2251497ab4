"""The world model as a Gymnasium environment, beside the real one: ``rpg_worldmodel/Imagined-v0``
for a checkpoint of any game, ``TreasurehuntImagined-v0`` for the treasurehunt game's.

    env = gym.make("rpg_worldmodel/Imagined-v0", checkpoint="runs/worldmodel/run")
    venv = gym.make_vec("TreasurehuntImagined-v0", num_envs=256, checkpoint="runs/worldmodel/run")

Its spaces and names are those of the game the checkpoint's files recorded (for the treasurehunt
game exactly ``Treasurehunt-v0``'s with ``obs_mode="onehot"``), so any policy of the real game (the
shipped experts, greedy, SB3 models) acts in it unchanged. A reset plays ``num_frames - 1`` real
turns (``burn_in_policy``: greedy in the treasurehunt game and random elsewhere by default) in that
game, made again from the files' env id and arguments (`rpg_worldmodel.envs.real_game`), or cuts
them from a file (``reset_from="games.h5"``); those turns count toward the episode, which truncates
at the same turn as the real game, or terminates where the model's end head says the game ended
(a model trained on games that end, such as a goal reached; treasurehunt games only run out of
turns). ``info`` carries ``turn``, ``episode_return`` and ``entropy`` (the model's mean per-cell
entropy of the view it just imagined, nats: its uncertainty). There is no training code here and
no game code in the model: `rpg_worldmodel.envs.imagination` does the work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rpg_base.errors import InputError
from rpg_worldmodel.checkpoint import LoadedCheckpoint, load_checkpoint
from rpg_worldmodel.envs.imagination import (
    DEFAULT_TORCH_THREADS,
    Context,
    FileContext,
    ImaginedWorlds,
    RealGameContext,
)
from rpg_worldmodel.envs.real_game import RealGame


def _worlds(env_name: str, checkpoint: str | Path, num_envs: int, burn_in_policy: Any,
            reset_from: str | Path | None, reset_split: str, co_policy: Any,
            **imagination: Any) -> tuple[ImaginedWorlds, LoadedCheckpoint, RealGame]:
    """The imagined worlds, their checkpoint and its real game; ``imagination``: `ImaginedWorlds`'s
    keywords. ``TreasurehuntImagined-v0`` refuses a checkpoint of another game."""
    loaded = load_checkpoint(checkpoint, map_location=imagination["device"])
    game = RealGame.of(loaded.record.data)
    if env_name == TREASUREHUNT_NAME and not game.treasurehunt:
        raise InputError(f"checkpoint {loaded.path} learned {game.env_id}, not the treasurehunt game: make "
                         f"{GENERIC_NAME} with it")
    context: Context
    if reset_from is not None:
        context = FileContext(reset_from, loaded, reset_split)
    else:
        context = RealGameContext(loaded.config.model.num_frames, game, burn_in_policy, co_policy)
    return ImaginedWorlds(loaded, num_envs, context, **imagination), loaded, game


def _metadata(base: dict[str, Any], loaded: LoadedCheckpoint, game: RealGame) -> dict[str, Any]:
    """The env protocol's keys (`rpg_env.envs.protocol`): the imagined game's names, length, rules
    and colours; and ``checkpoint``: which checkpoint imagines it (for a run folder, its best)."""
    data = loaded.record.data
    described = None if game.treasurehunt else game.description  # the treasurehunt game draws its own
    drawing = {} if described is None else {"channel_colors": described.channel_colors,
                                            "agent_cell": described.agent_cell}
    return {**base, "channel_names": tuple(data.channel_names),
            "action_names": tuple(data.action_names), "max_turns": game.max_turns,
            "rules": dict(data.env_kwargs), "co_policy_id": None, "checkpoint": loaded.choice,
            "game_id": game.env_id, **{k: v for k, v in drawing.items() if v is not None}}


def _spaces(loaded: LoadedCheckpoint) -> tuple[spaces.MultiBinary, spaces.Discrete]:
    m = loaded.config.model
    return spaces.MultiBinary((m.num_channels, m.view_size, m.view_size)), spaces.Discrete(m.num_actions)


GENERIC_NAME = "rpg_worldmodel/Imagined-v0"
TREASUREHUNT_NAME = "TreasurehuntImagined-v0"


class ImaginedEnv(gym.Env[np.ndarray, np.int64]):
    """One imagined world of a checkpoint's game (see the module docstring).

    Args:
        checkpoint: a world-model run folder or checkpoint (a model with a reward head).
        burn_in_policy: who plays the real turns before imagination starts (``"greedy"``,
            ``"random"``, an SB3 ``.zip``; None: greedy in the treasurehunt game, random in
            another); ignored with ``reset_from``.
        reset_from: a trajectory file to cut the starting context from instead.
        reset_split: which of its games: ``"auto"`` (on the checkpoint's own training file its
            held-out test games, every game elsewhere) or ``"all"`` (every game, e.g. a learner's
            own experience, as IRIS starts imagination from its replay buffer).
        co_policy: the treasurehunt game's co-player during the burn-in (None: random; another
            game refuses one).
        sample: sample the next view per cell and the reward (True) or take the arg-max.
        temperature: softens (> 1) or sharpens (< 1) the sampled distributions.
        torch_threads: torch's CPU threads while a step runs (1: best for these small steps, even
            on a busy machine; None: torch's own setting); restored after each step.
        sample_rounds: most rounds of a joint draw of the next view, for a model with a cell
            refiner (None: the model's ``sample_rounds``; `rpg_worldmodel.models.refiner`).
        sample_doubt: doubt one round of that draw takes on (None: 0.2,
            `rpg_worldmodel.models.refiner.SAMPLE_DOUBT`; 0: one cell a round).
        sample_floor: no kind whose refined probability in a cell is below this is drawn there
            (None: the model's ``sample_floor``; 0: the refined distributions as they are).
        horizon: most imagined turns of an episode before it truncates (None: the game's last turn
            ends it; `ImaginedWorlds`).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 8}
    env_name = GENERIC_NAME

    def __init__(self, checkpoint: str | Path, *, burn_in_policy: Any = None,
                 reset_from: str | Path | None = None, reset_split: str = "auto", co_policy: Any = None,
                 sample: bool = True, temperature: float = 1.0, device: str = "cpu",
                 render_mode: str | None = None,
                 torch_threads: int | None = DEFAULT_TORCH_THREADS, sample_rounds: int | None = None,
                 sample_doubt: float | None = None, sample_floor: float | None = None,
                 horizon: int | None = None) -> None:
        if render_mode not in (None, "rgb_array"):
            raise InputError(f"render_mode must be 'rgb_array' or None, got {render_mode!r}")
        self.worlds, loaded, self.game = _worlds(self.env_name, checkpoint, 1, burn_in_policy, reset_from,
                                                 reset_split, co_policy, sample=sample,
                                                 temperature=temperature, device=device,
                                                 torch_threads=torch_threads, sample_rounds=sample_rounds,
                                                 sample_doubt=sample_doubt, sample_floor=sample_floor,
                                                 horizon=horizon)
        self.metadata = _metadata(type(self).metadata, loaded, self.game)
        self.observation_space, self.action_space = _spaces(loaded)
        self.render_mode = render_mode
        self._needs_reset = True

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if options:
            raise InputError(f"{self.env_name} takes no reset options, got {sorted(options)}")
        self.worlds.reset(np.arange(1), self.np_random)
        self._needs_reset = False
        return self.worlds.observations()[0], self._info()

    def step(self, action: Any):
        if self._needs_reset:
            raise ResetNeeded("cannot call step(): the episode has ended (or reset() was never called)")
        action = _check_actions(np.asarray(action), (), self.action_space.n)
        rewards, truncated = self.worlds.step(action.reshape(1))
        terminated = bool(self.worlds.ended[0])
        self._needs_reset = terminated or bool(truncated[0])
        return self.worlds.observations()[0], float(rewards[0]), terminated, bool(truncated[0]), self._info()

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='rgb_array'")
            return None
        return self.game.render_view(self.worlds.views[0].argmax(0).cpu().numpy())

    def _info(self) -> dict[str, Any]:
        w = self.worlds
        return {"turn": int(w.turns[0]), "episode_return": float(w.returns[0]),
                "entropy": float(w.entropy[0])}


class TreasurehuntImaginedEnv(ImaginedEnv):
    """`ImaginedEnv` of a treasurehunt checkpoint (``TreasurehuntImagined-v0``): another game's is refused."""

    env_name = TREASUREHUNT_NAME


class ImaginedVectorEnv(VectorEnv):
    """``num_envs`` imagined worlds, one batched forward pass per step (see the module docstring).

    Autoreset (``autoreset_mode``), as ``Treasurehunt-v0``'s vector env: ``NEXT_STEP`` (the
    default) restarts a world from fresh context in the step after its episode ended, ignoring its
    action and returning its first observation with reward 0; ``SAME_STEP`` restarts it within the
    ending step and hands the last observation over in ``info["final_obs"]`` (what SB3 expects,
    `rpg_env.experts.sb3_vec`). Infos are arrays over worlds with ``_key`` masks. The other
    arguments are `ImaginedEnv`'s.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 8, "autoreset_mode": AutoresetMode.NEXT_STEP}
    env_name = GENERIC_NAME

    def __init__(self, num_envs: int = 1, *, checkpoint: str | Path, burn_in_policy: Any = None,
                 reset_from: str | Path | None = None, reset_split: str = "auto", co_policy: Any = None,
                 sample: bool = True, temperature: float = 1.0, device: str = "cpu",
                 render_mode: str | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                 torch_threads: int | None = DEFAULT_TORCH_THREADS, sample_rounds: int | None = None,
                 sample_doubt: float | None = None, sample_floor: float | None = None,
                 horizon: int | None = None) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise InputError(f"num_envs must be a positive int, got {num_envs!r}")
        if render_mode not in (None, "rgb_array"):
            raise InputError(f"render_mode must be 'rgb_array' or None, got {render_mode!r}")
        self.num_envs = int(num_envs)
        self.worlds, loaded, self.game = _worlds(self.env_name, checkpoint, self.num_envs, burn_in_policy,
                                                 reset_from, reset_split, co_policy,
                                                 sample=sample, temperature=temperature, device=device,
                                                 torch_threads=torch_threads, sample_rounds=sample_rounds,
                                                 sample_doubt=sample_doubt, sample_floor=sample_floor,
                                                 horizon=horizon)
        self.metadata = _metadata(type(self).metadata, loaded, self.game)
        self.autoreset_mode = _autoreset_mode(autoreset_mode)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.single_observation_space, self.single_action_space = _spaces(loaded)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = render_mode
        self._needs_reset = np.zeros(self.num_envs, dtype=bool)
        self._started = False

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if isinstance(seed, (list, tuple)):
            raise InputError(f"{self.env_name} draws every world from one generator: pass one int seed")
        if options:
            raise InputError(f"{self.env_name} takes no reset options, got {sorted(options)}")
        super().reset(seed=seed)
        self.worlds.reset(np.arange(self.num_envs), self.np_random)
        self._needs_reset[:] = False
        self._started = True
        return self.worlds.observations(), self._infos()

    def step(self, actions: Any):
        if not self._started:
            raise ResetNeeded("cannot call step() before reset()")
        actions = _check_actions(np.asarray(actions), (self.num_envs,), self.single_action_space.n)
        resetting = self._needs_reset.copy()
        rewards, truncated = self.worlds.step(actions)
        terminated = self.worlds.ended.copy()
        if resetting.any():  # these worlds ended last step: they restart now and ignore their actions
            self.worlds.reset(np.flatnonzero(resetting), self.np_random)
            rewards = np.where(resetting, 0.0, rewards).astype(np.float32)
            truncated, terminated = truncated & ~resetting, terminated & ~resetting
        done = terminated | truncated
        if self.autoreset_mode == AutoresetMode.SAME_STEP and done.any():
            ended = np.flatnonzero(done)
            last, infos = self.worlds.observations(), self._infos()
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in ended:
                final_obs[i] = last[i]
            self.worlds.reset(ended, self.np_random)
            infos = {**self._infos(), "final_obs": final_obs, "_final_obs": done.copy(),
                     "final_info": infos, "_final_info": done.copy()}
            return self.worlds.observations(), rewards.astype(np.float32), terminated, truncated, infos
        self._needs_reset = done
        return self.worlds.observations(), rewards.astype(np.float32), terminated, truncated, self._infos()

    def render(self) -> tuple[np.ndarray, ...] | None:
        if self.render_mode is None:
            return None
        codes = self.worlds.views.argmax(1).cpu().numpy()
        return tuple(self.game.render_view(c) for c in codes)

    def _infos(self) -> dict[str, Any]:
        w, everywhere = self.worlds, np.ones(self.num_envs, dtype=bool)
        return {"turn": w.turns.copy(), "_turn": everywhere, "episode_return": w.returns.copy(),
                "_episode_return": everywhere, "entropy": w.entropy.copy(), "_entropy": everywhere}


class TreasurehuntImaginedVectorEnv(ImaginedVectorEnv):
    """`ImaginedVectorEnv` of a treasurehunt checkpoint (``TreasurehuntImagined-v0``)."""

    env_name = TREASUREHUNT_NAME


def _autoreset_mode(mode: AutoresetMode | str) -> AutoresetMode:
    """``AutoresetMode.NEXT_STEP``/``SAME_STEP`` from the enum or its name (``"same_step"``)."""
    names = {m.name.replace("_", "").lower(): m for m in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)}
    key = mode.name if isinstance(mode, AutoresetMode) else str(mode)
    parsed = names.get(key.replace("_", "").replace("-", "").lower())
    if parsed is None:
        raise InputError(f"autoreset_mode must be 'next_step' or 'same_step', got {mode!r}")
    return parsed


def _check_actions(actions: np.ndarray, shape: tuple[int, ...], n: int) -> np.ndarray:
    """Integer actions of ``shape`` in ``0..n-1``, or `InputError` saying what is wrong."""
    if actions.shape != shape:
        raise InputError(f"actions must have shape {shape}, got {actions.shape}")
    if actions.dtype.kind not in "iu":
        raise InputError(f"actions must be integers in 0..{n - 1}, got dtype {actions.dtype}")
    if actions.size and (actions.min() < 0 or actions.max() >= n):
        raise InputError(f"actions must be in 0..{n - 1}, got {actions.reshape(-1)[:8].tolist()}")
    return actions.astype(np.int64)
