"""Train an expert (SB3's DQN, PPO, RecurrentPPO, or TrXL-PPO) on Treasurehunt-v0, MemoryCue-v0 or
any registered Gymnasium env, and write one self-describing run folder.

Run folder layout (``--out DIR``, default ``runs/experts/<algo>-<UTC time>-s<seed>``)::

    model.zip           final model (with the JSON ``rpg_expert`` record, see rpg_env/policies/sb3.py)
    config.yaml         the resolved config (file + overrides), enough to rerun
    provenance.json     seeds, package versions, command line, git revision, training time
    eval.json           model vs greedy (the project's games only) vs random on fixed evaluation
                        seeds (evaluate.py)
    best/               EvalCallback's best model and evaluations.npz
    checkpoints/        CheckpointCallback snapshots
    tb/                 tensorboard logs (``tensorboard --logdir DIR/tb``)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import TransformObservation
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, CheckpointCallback, EvalCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecEnv,
    VecFrameStack,
    VecTransposeImage,
)

from rpg_base.errors import InputError
from rpg_base.provenance import pinned_torch_threads, portable_path, provenance
from rpg_base.typed_config.values import ConfigError
from rpg_env.envs.any_env import PROJECT_GAMES, make_wrapped_env, resolve_env_id
from rpg_env.experts.config import ExpertConfig, env_defaults
from rpg_env.experts.schedules import sb3_hyperparams
from rpg_env.policies.sb3 import (
    POLICY_ALIASES,
    algo_class,
    expert_spec,
    is_channels_last,
    network_frame_space,
    policy_kwargs_from_net,
    stack_order,
)

#: Offset of the EvalCallback's env seeds from the training seed (disjoint streams).
EVAL_CALLBACK_SEED_OFFSET = 1_000_003


def default_run_dir(cfg: ExpertConfig) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return Path("runs") / "experts" / f"{cfg.algo}-{stamp}-s{cfg.seed}"


def stackable_views(env: gym.Env) -> gym.Env:
    """The one-hot view as the ``Box(0, 1, (C, V, V), uint8)`` that SB3's `VecFrameStack` can stack
    (it stacks only Box and Dict spaces, not the env's `MultiBinary`); the values are unchanged."""
    space = spaces.Box(0, 1, env.observation_space.shape, dtype=np.uint8)
    return TransformObservation(env, lambda obs: obs.astype(np.uint8), space)


def network_frames_env(env: gym.Env) -> gym.Env:
    """``env`` giving each observation as the frame the SB3 network stacks
    (`rpg_env.policies.sb3.network_frame_space`): a MultiBinary as a uint8 Box (`stackable_views`),
    an image ``(H, W, C)`` channels first; a Box vector, grid or channels-first image unchanged."""
    space = env.observation_space
    if isinstance(space, spaces.MultiBinary):
        return stackable_views(env)
    if not is_channels_last(space):
        return env
    return TransformObservation(env, lambda obs: np.ascontiguousarray(np.moveaxis(obs, -1, 0)),
                                network_frame_space(space))


def make_training_env(cfg: ExpertConfig, n_envs: int, seed: int) -> VecEnv:
    """``n_envs`` Monitor-wrapped envs of ``cfg.env_id``, frame-stacked: Treasurehunt's and MemoryCue's
    views channels-first, ``(C * k, V, V)``; any other env's observations as `network_frames_env`
    makes them, stacked along their channels (grids, images: ``(C * k, H, W)``) or end to end
    (vectors: ``(D * k,)``)."""
    vec_cls = SubprocVecEnv if cfg.vec_env == "subproc" else DummyVecEnv
    name = resolve_env_id(cfg.env_id)
    if name in PROJECT_GAMES:
        # "module:id" makes gymnasium import rpg_env (which registers the env) in SubprocVecEnv workers.
        venv = make_vec_env(f"rpg_env:{name}", n_envs=n_envs, seed=seed, vec_env_cls=vec_cls,
                            env_kwargs=dict(cfg.env), wrapper_class=stackable_views)
        return VecFrameStack(venv, n_stack=cfg.frame_stack, channels_order="first")
    # The config's wrappers go inside Monitor (any_env.make_wrapped_env applies them), so Monitor and the
    # EvalCallback count the rewards and episode ends the agent sees, as the final evaluation does; a
    # module-level function with plain arguments pickles by reference into SubprocVecEnv workers,
    # where make_wrapped_env imports the package of a "package:Id" id before making the env.
    factory = functools.partial(make_wrapped_env, cfg.env_id, dict(cfg.env), tuple(cfg.wrappers))
    venv = make_vec_env(factory, n_envs=n_envs, seed=seed, vec_env_cls=vec_cls,
                        wrapper_class=network_frames_env)
    frame = venv.observation_space
    venv = VecFrameStack(venv, n_stack=cfg.frame_stack, channels_order=stack_order(frame))
    if is_image_space(venv.observation_space):
        # The stack is channels first already; skip=True keeps SB3 from guessing otherwise (it would
        # transpose a stack with more channels than pixels on a side).
        venv = VecTransposeImage(venv, skip=True)
    return venv


def _trained_spaces(cfg: ExpertConfig) -> tuple[spaces.Space, spaces.Space]:
    """One observation's space and the action space of ``cfg``'s env (with its wrappers), as its
    record keeps them (before any frame stack)."""
    with make_wrapped_env(cfg.env_id, cfg.env, cfg.wrappers) as env:
        return env.observation_space, env.action_space


def build_model(cfg: ExpertConfig, venv: VecEnv, tensorboard_log: str | None):
    """The SB3 model for ``cfg`` with the JSON record `load_expert` needs set on it: the project's
    games recorded by their vision radius, any other env by its spaces and wrappers."""
    cls = algo_class(cfg.algo)
    recurrent = cfg.algo == "recurrent-ppo"
    memory = dataclasses.asdict(cfg.memory) if recurrent else None
    project_game = resolve_env_id(cfg.env_id) in PROJECT_GAMES
    try:
        policy_kwargs = policy_kwargs_from_net(vars(cfg.net), memory, venv.observation_space)
    except InputError as err:
        raise ConfigError(f"net: {err}") from None
    try:
        model = cls(POLICY_ALIASES[cfg.algo], venv, seed=cfg.seed, verbose=0, device=cfg.device,
                    tensorboard_log=tensorboard_log, policy_kwargs=policy_kwargs,
                    **sb3_hyperparams(cfg.hyperparams))
    except (ValueError, TypeError, AssertionError) as err:  # SB3 validates its arguments here
        raise ConfigError(f"Stable-Baselines3 refused the {cfg.algo.upper()} settings: {err}; change the "
                          f"hyperparams in the config or overrides") from err
    if project_game:
        radius = cfg.env.get("vision_radius", env_defaults(cfg.env_id)["vision_radius"])
        model.rpg_expert = expert_spec(cfg.algo, cfg.frame_stack, radius, vars(cfg.net), cfg.env, cfg.seed,
                                       env_id=cfg.env_id)
    else:
        obs_space, action_space = _trained_spaces(cfg)
        model.rpg_expert = expert_spec(cfg.algo, cfg.frame_stack, None, vars(cfg.net), cfg.env, cfg.seed,
                                       env_id=cfg.env_id, observation_space=obs_space,
                                       action_space=action_space, wrappers=cfg.wrappers)
    if recurrent:
        model.rpg_expert["memory"] = memory
    return model


def start_from_params(model, path: str | Path) -> None:
    """Load ``path``'s (a ``model.zip``) policy weights and optimizer state into ``model``; refused
    with a `ConfigError` naming the file when they do not fit (another algorithm or network)."""
    try:
        model.set_parameters(str(path), exact_match=True, device="cpu")
    except (ValueError, RuntimeError, KeyError, FileNotFoundError) as err:
        first = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise ConfigError(f"cannot start from {path}: its weights do not fit this "
                          f"{type(model).__name__} ({first}); give a model.zip of the same algorithm and net "
                          "settings") from err


def resolve_run_dir(out: str | Path | None, cfg: ExpertConfig) -> Path:
    """The run folder to write; refuses a non-empty one (runs are never overwritten)."""
    run_dir = Path(out) if out is not None else default_run_dir(cfg)
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise FileExistsError(f"run folder {run_dir} already exists and is not empty; choose another "
                              f"--out (runs are never overwritten)")
    return run_dir


class LogProgress(BaseCallback):
    """SB3's progress bar off a terminal: `rpg_base.progress` lines (its own is a live display)."""

    def _on_training_start(self) -> None:
        from rpg_base.progress import progress_bar

        self.bar = progress_bar(total=self.locals["total_timesteps"] - self.model.num_timesteps, unit="step",
                                desc=f"train {type(self.model).__name__}")

    def _on_step(self) -> bool:
        self.bar.update(self.training_env.num_envs)
        return True

    def _on_training_end(self) -> None:
        self.bar.close()


#: ``(cfg, n_envs, seed) -> VecEnv`` of frame-stacked, monitored envs (`make_training_env`'s shape).
EnvFactory = Callable[[ExpertConfig, int, int], VecEnv]


def train(cfg: ExpertConfig, out: str | Path | None = None, command: str | None = None,
          make_env: EnvFactory = make_training_env,
          final_eval: Callable[[Path], dict[str, dict[str, Any]]] | None = None,
          extra_provenance: dict[str, Any] | None = None, init_params: str | Path | None = None) -> Path:
    """Train per ``cfg``; return the run folder (see module docstring for its contents).

    ``make_env`` builds the training and EvalCallback envs (default: the real game; the world
    model's ``dream`` passes imagined ones); ``final_eval(model.zip)`` gives ``eval.json``
    (default: `compare` in the real game); ``extra_provenance`` joins provenance.json;
    ``init_params``: a ``model.zip`` of the same algorithm and network whose weights (and optimizer
    state) the run starts from instead of fresh ones (a learner trained on, round after round).
    Runs with torch on ``cfg.torch_threads`` threads and restores the caller's setting after."""
    run_dir = resolve_run_dir(out, cfg)
    with pinned_torch_threads(cfg.torch_threads):
        if cfg.algo == "trxl-ppo":
            return _train_trxl_run(cfg, run_dir, command, final_eval, extra_provenance or {}, init_params,
                                   make_env is not make_training_env)
        return _train_run(cfg, run_dir, command, make_env, final_eval, extra_provenance or {}, init_params)


def _train_trxl_run(cfg: ExpertConfig, run_dir: Path, command: str | None,
                    final_eval: Callable[[Path], dict[str, dict[str, Any]]] | None,
                    extra_provenance: dict[str, Any], init_params: str | Path | None, own_envs: bool) -> Path:
    """TrXL-PPO (`rpg_env.experts.trxl_ppo`): its own loop, this module's run folder."""
    from rpg_env.experts.trxl_ppo import train_trxl

    if init_params is not None or own_envs:
        raise ConfigError("trxl-ppo trains only in the real game from fresh weights (no make_env or "
                          "init_params); use ppo or dqn for that")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(cfg.to_yaml())
    eval_seed = cfg.seed + EVAL_CALLBACK_SEED_OFFSET
    train_seconds, steps = train_trxl(cfg, run_dir, eval_seed)
    return _write_results(cfg, run_dir, command, final_eval, extra_provenance, None, train_seconds, steps,
                          eval_seed)


def _train_run(cfg: ExpertConfig, run_dir: Path, command: str | None, make_env: EnvFactory,
               final_eval: Callable[[Path], dict[str, dict[str, Any]]] | None,
               extra_provenance: dict[str, Any], init_params: str | Path | None = None) -> Path:
    venv = make_env(cfg, cfg.n_envs, cfg.seed)
    eval_seed = cfg.seed + EVAL_CALLBACK_SEED_OFFSET
    eval_env = make_env(cfg, 1, eval_seed)
    try:
        # SB3 checks the hyperparameters here, before the run folder exists.
        model = build_model(cfg, venv, tensorboard_log=str(run_dir / "tb"))
        if init_params is not None:
            start_from_params(model, init_params)
    except Exception:
        venv.close()
        eval_env.close()
        raise
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(cfg.to_yaml())
    per_call = max(cfg.n_envs, 1)  # callbacks count vectorized steps, the config counts env steps
    callbacks = CallbackList([
        EvalCallback(eval_env, n_eval_episodes=cfg.eval.episodes, eval_freq=max(cfg.eval.freq // per_call, 1),
                     best_model_save_path=str(run_dir / "best"), log_path=str(run_dir / "best"),
                     deterministic=True, verbose=0),
        CheckpointCallback(save_freq=max(cfg.checkpoint_freq // per_call, 1),
                           save_path=str(run_dir / "checkpoints"), name_prefix=cfg.algo),
        *([LogProgress()] if cfg.progress_bar and not sys.stderr.isatty() else []),
    ])
    started = time.perf_counter()
    try:
        model.learn(total_timesteps=cfg.total_timesteps, callback=callbacks, tb_log_name=cfg.algo,
                    progress_bar=cfg.progress_bar and sys.stderr.isatty())  # SB3's live bar: terminals only
    finally:
        venv.close()
        eval_env.close()
    train_seconds = time.perf_counter() - started
    model.save(run_dir / "model.zip")
    return _write_results(cfg, run_dir, command, final_eval, extra_provenance, init_params, train_seconds,
                          int(model.num_timesteps), eval_seed)


def _write_results(cfg: ExpertConfig, run_dir: Path, command: str | None,
                   final_eval: Callable[[Path], dict[str, dict[str, Any]]] | None,
                   extra_provenance: dict[str, Any], init_params: str | Path | None, train_seconds: float,
                   timesteps: int, eval_seed: int) -> Path:
    """provenance.json and eval.json of a finished run whose ``model.zip`` is written."""
    from rpg_env.experts.evaluate import compare, print_table

    record = provenance(
        seed=cfg.seed, algo=cfg.algo, train_seconds=round(train_seconds, 2),
        total_timesteps=timesteps,
        seeds={"model": cfg.seed, "train_envs": [cfg.seed + i for i in range(cfg.n_envs)],
               "eval_callback_env": eval_seed, "final_eval_first_seed": cfg.eval.seed},
        torch_threads=cfg.torch_threads, **extra_provenance,
    )
    if init_params is not None:
        record["init_params"] = portable_path(init_params)
    if command is not None:
        record["command"] = command
    (run_dir / "provenance.json").write_text(json.dumps(record, indent=2) + "\n")

    results = (final_eval(run_dir / "model.zip") if final_eval is not None else
               compare(run_dir / "model.zip", episodes=cfg.eval.final_episodes, seed=cfg.eval.seed))
    # Same schema as `evaluate --json`; the seeds and timing live in provenance.json.
    (run_dir / "eval.json").write_text(json.dumps(results, indent=2) + "\n")
    print_table(results, title=f"{run_dir / 'model.zip'} ({cfg.eval.final_episodes} episodes, "
                               f"seeds from {cfg.eval.seed}; trained in {train_seconds:.0f} s)")
    return run_dir
