"""Typed training configuration: YAML file + ``key=value`` command-line overrides.

A config has four sections besides the top-level run settings::

    algo: dqn                 # dqn | ppo | recurrent-ppo | trxl-ppo
    env_id: Treasurehunt-v0   # any registered Gymnasium id ("package:Id" imports the package first)
    wrappers: []              # Gymnasium wrappers applied in order, as "package.module:Class"
    seed: 0
    total_timesteps: 150000   # learner env steps, summed over the vectorized envs
    n_envs: 8
    env: {...}                # keyword arguments of the env (Treasurehunt's: vision_radius, co_policy, ...)
    net: {...}                # features extractor and heads
    memory: {...}             # the memory core: TransformerXL (trxl-ppo) or LSTM (recurrent-ppo)
    hyperparams: {...}        # keyword arguments of the algorithm (SB3's, or TrXLHyperparams below)
    eval: {...}               # EvalCallback and the final eval.json

Overrides use dotted keys (``env.vision_radius=3``, ``hyperparams.gamma=0.95``); a bare key
that names exactly one setting (``seed=1``, ``vision_radius=3``, ``learning_rate=3e-4``) is
resolved to it, and ``timesteps`` is short for ``total_timesteps``. Values are parsed as
YAML scalars/lists. The rules are `rpg_base.typed_config`'s; every unknown key or ill-typed
value raises `ConfigError` saying what to change. ``typed_config.format_keys(ExpertConfig)``
lists every key with its type, default and help.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpg_base.cli import check_device, yaml_mapping
from rpg_base.errors import InputError
from rpg_base.typed_config import config as tc
from rpg_base.typed_config.config import dict_section, read_yaml, section, setting
from rpg_base.typed_config.values import ConfigError
from rpg_env.experts.schedules import SCHEDULED, check_schedules
from rpg_env.policies import sb3

__all__ = ["TRAINABLE_ALGOS", "VEC_ENVS", "EXTRACTORS", "EXPERT_CONFIG_DIR", "ALIASES", "NetConfig",
           "MemoryConfig",
           "EvalConfig", "ExpertConfig", "TrXLHyperparams", "env_defaults", "hyperparam_defaults",
           "from_dict", "expert_config_path", "load_expert_config"]

#: The algorithms an expert config trains: SB3's (`rpg_env.policies.sb3.SB3_ALGOS`, which
#: `SB3Policy` loads) and this package's own TransformerXL PPO (`rpg_env.experts.trxl_ppo`).
TRAINABLE_ALGOS = (*sb3.SB3_ALGOS, "trxl-ppo")
VEC_ENVS = ("dummy", "subproc")
#: The shipped expert configs, ``<algo>.yaml`` (`expert_config_path`) and the memory task's.
EXPERT_CONFIG_DIR = Path(__file__).resolve().parent / "configs"

#: ``net.extractor``: ``auto`` picks cnn for a grid or an image, mlp for a vector.
EXTRACTORS = ("auto", "cnn", "mlp", "flatten")

# Environment arguments that are fixed by the expert pipeline (one-hot views, no window).
_ENV_FIXED = dict.fromkeys(("obs_mode", "render_mode", "tile_size"), "the expert pipeline sets it")
# SB3 constructor arguments that the pipeline sets itself, and where to set them instead.
_PIPELINE = "the training pipeline sets it"
_HYPER_FIXED = {
    **dict.fromkeys(("policy", "env", "tensorboard_log", "verbose", "device", "_init_setup_model",
                     "replay_buffer_class", "rollout_buffer_class", "stats_window_size"), _PIPELINE),
    "seed": f"{_PIPELINE} (use the top-level seed)",
    "policy_kwargs": f"{_PIPELINE} (use the net section)",
}
# SB3 arguments whose default does not tell their type: a float default of 10, a (n, unit) pair.
# learning_rate and clip_range: a number, or RL Zoo's "lin_<start>" (`rpg_env.experts.schedules`).
_HYPER_TYPES = {"max_grad_norm": float, "train_freq": int | tuple[int, str],
                **dict.fromkeys(SCHEDULED, float | str)}

# Ranges SB3 itself does not check up front (a bad value would only show up as a failed run).
_HYPER_RANGES: dict[str, tuple[float | None, float | None]] = {
    "learning_rate": (0.0, None), "buffer_size": (1, None), "learning_starts": (0, None),
    "batch_size": (1, None), "tau": (0.0, 1.0), "gamma": (0.0, 1.0), "gradient_steps": (-1, None),
    "target_update_interval": (1, None), "exploration_fraction": (0.0, 1.0),
    "exploration_initial_eps": (0.0, 1.0), "exploration_final_eps": (0.0, 1.0),
    "n_steps": (1, None), "n_epochs": (1, None), "gae_lambda": (0.0, 1.0), "ent_coef": (0.0, None),
    "vf_coef": (0.0, None), "max_grad_norm": (0.0, None),
    # trxl-ppo's (TrXLHyperparams)
    "learning_rate_final": (0.0, None), "ent_coef_final": (0.0, None), "clip_range": (0.0, None),
    "clip_range_final": (0.0, None), "schedule_power": (0.0, None), "n_minibatches": (1, None),
}


# --------------------------------------------------------------------------- valid keys
def env_defaults(env_id: str = "Treasurehunt-v0") -> dict[str, Any]:
    """Keyword arguments of ``env_id``'s env a config may set, with their defaults (the ones its
    constructor names and its registration sets; `rpg_env.envs.any_env.env_kwarg_defaults`)."""
    from rpg_env.envs.any_env import env_kwarg_defaults

    try:
        defaults = env_kwarg_defaults(env_id)
    except InputError as err:
        raise ConfigError(str(err)) from None
    return {n: value for n, value in defaults.items() if n not in _ENV_FIXED}


def hyperparam_defaults(algo: str) -> dict[str, Any]:
    """Constructor arguments of ``algo`` a config may set, with their defaults: SB3's (or
    sb3-contrib's), or `TrXLHyperparams` for ``trxl-ppo``."""
    if algo not in TRAINABLE_ALGOS:
        raise ConfigError(f"algo must be one of {TRAINABLE_ALGOS}, got {algo!r}")
    if algo == "trxl-ppo":
        return dataclasses.asdict(TrXLHyperparams())
    params = inspect.signature(sb3.algo_class(algo).__init__).parameters
    return {n: p.default for n, p in params.items() if n != "self" and n not in _HYPER_FIXED}


# --------------------------------------------------------------------------- the config
@dataclass
class TrXLHyperparams:
    """PPO's settings for ``trxl-ppo`` (the config's ``hyperparams`` section; the loop is
    `rpg_env.experts.trxl_ppo`). The ``_final`` values end polynomial decays (power ``schedule_power``)
    over ``total_timesteps``; equal to the initial value, the setting stays constant."""

    learning_rate: float = 3e-4
    learning_rate_final: float = 3e-4
    ent_coef: float = 0.01
    ent_coef_final: float = 0.01
    clip_range: float = 0.2
    clip_range_final: float = 0.2
    schedule_power: float = 1.0
    n_steps: int = 128
    n_epochs: int = 4
    n_minibatches: int = 8
    gamma: float = 0.99
    gae_lambda: float = 0.95
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantage: bool = True
    #: The value's change per update is clipped to the clip range too (PPO2's and seed 002's loss:
    #: the larger of the clipped and unclipped squared errors).
    clip_value: bool = False
    #: A time limit's end bootstraps from the final view's value; False: it ends the episode as the
    #: game's own end does (seed 002 and CleanRL treat it so), worth nothing after it.
    bootstrap_truncation: bool = True


@dataclass
class NetConfig:
    """Network shape: the features extractor, then SB3's heads."""

    extractor: str = setting("auto", "features extractor: cnn (3x3 convs at full resolution; an image of "
                                    "36+ pixels: SB3's NatureCNN), mlp, flatten (the observation as it "
                                    "is: SB3's MlpPolicy), or auto (cnn for a grid or an image, mlp for "
                                    "a vector)")
    channels: list[int] = setting([32, 16], "output channels of each conv layer (cnn extractor)")
    features_dim: int = setting(64, "size of the extractor's output (one linear layer; flatten: unused)")
    net_arch: list[int] = setting([], "hidden layers after the extractor, as SB3's net_arch (shared / Q-net)")


@dataclass
class MemoryConfig:
    """The memory core of the memory algorithms (the others ignore it): a TransformerXL over a
    sliding episodic window for ``trxl-ppo`` (seed 002; rpg_env/policies/transformer_xl.py), an
    LSTM for ``recurrent-ppo`` (sb3-contrib)."""

    memory_length: int = setting(16, "trxl-ppo: steps of the sliding episodic memory window")
    num_blocks: int = setting(2, "trxl-ppo: transformer blocks (width: net.features_dim)")
    num_heads: int = setting(4, "trxl-ppo: attention heads (divides net.features_dim)")
    positional_encoding: str = setting("relative", "trxl-ppo: relative (sinusoidal by age), learned or none")
    layer_norm: str = setting("pre", "trxl-ppo: layer norm before (pre) or after (post) each component")
    gtrxl: bool = setting(False, "trxl-ppo: GRU gates instead of residual sums (Gated TransformerXL)")
    gtrxl_bias: float = setting(0.0, "trxl-ppo: initial bias of the GTrXL update gates")
    hidden_size: int = setting(128, "trxl-ppo: hidden layer before the policy and value heads")
    previous_action: bool = setting(True, "trxl-ppo: the network also reads its last action (where it went)")
    input_layer: bool = setting(False, "trxl-ppo: a linear layer and ReLU from the extractor's features to "
                                       "the memory, orthogonal with gain sqrt(2) (seed 002's embedding)")
    separate_heads: bool = setting(False, "trxl-ppo: a hidden layer each for the policy and the value, "
                                          "orthogonal as seed 002's (gains sqrt(2); 0.1 logits, 1 value)")
    lstm_hidden_size: int = setting(128, "recurrent-ppo: LSTM units (sb3-contrib's lstm_hidden_size)")


@dataclass
class EvalConfig:
    """EvalCallback during training and the final ``eval.json`` comparison."""

    freq: int = setting(20_000, "learner env steps between EvalCallback evaluations")
    episodes: int = setting(20, "episodes per EvalCallback evaluation")
    final_episodes: int = setting(100, "episodes per policy in eval.json (>= 2, for the 95% interval)")
    seed: int = setting(10_000, "first evaluation seed (fixed, disjoint from training seeds)")


@dataclass
class ExpertConfig:
    """Everything needed to reproduce one training run."""

    algo: str = setting("dqn", "learning algorithm: dqn, ppo, recurrent-ppo (LSTM), trxl-ppo (TransformerXL)")
    env_id: str = setting("Treasurehunt-v0", "the env: Treasurehunt-v0, MemoryCue-v0 (memory proof task), or "
                                             "any registered Gymnasium id ('package:Id' imports package)")
    wrappers: list[str] = setting([], "Gymnasium wrappers applied to every env in order, as "
                                      "'package.module:Class' (e.g. minigrid.wrappers:ImgObsWrapper)")
    seed: int = setting(0, "seed of the model; training env i gets seed + i")
    total_timesteps: int = setting(150_000, "learner env steps, summed over the vectorized envs",
                                   aliases=("timesteps", "steps"))
    n_envs: int = setting(8, "training envs stepped together")
    vec_env: str = setting("dummy", "how the training envs run: dummy (one process) or subproc")
    frame_stack: int = setting(2, "frames stacked into each observation (VecFrameStack)")
    torch_threads: int = setting(1, "torch CPU threads while training")
    device: str = setting("cpu", "torch device of the network and its updates: cpu or cuda[:N] (the envs "
                                 "step on the CPU)")
    checkpoint_freq: int = setting(50_000, "learner env steps between checkpoints")
    progress_bar: bool = setting(
        True, "show progress: SB3's bar on a terminal, a plain line every few seconds in a log")
    env: dict[str, Any] = dict_section(
        "keyword argument of the env", lambda cfg: env_defaults(cfg.env_id), fixed=_ENV_FIXED,
        label=lambda cfg: f"{cfg.env_id} arguments")
    net: NetConfig = section(NetConfig, "features extractor and heads")
    memory: MemoryConfig = section(MemoryConfig, "memory core of recurrent-ppo and trxl-ppo")
    hyperparams: dict[str, Any] = dict_section(
        "keyword argument of the algorithm", lambda cfg: hyperparam_defaults(cfg.algo),
        types=_HYPER_TYPES, fixed=_HYPER_FIXED, label=lambda cfg: f"{str(cfg.algo).upper()} arguments")
    eval: EvalConfig = section(EvalConfig, "EvalCallback during training and the final eval.json")

    def to_dict(self) -> dict[str, Any]:
        """Plain YAML/JSON-ready data."""
        return tc.to_dict(self)

    def to_yaml(self) -> str:
        """The resolved config as YAML; `from_dict` of it gives this config back."""
        return tc.to_yaml(self)

    def validate(self) -> ExpertConfig:
        """Range checks that types alone do not catch; returns the config."""
        _validate(self)
        return self


ALIASES = tc.aliases(ExpertConfig)


# --------------------------------------------------------------------------- validation
def from_dict(data: dict[str, Any] | None) -> ExpertConfig:
    """Validate a nested mapping (e.g. parsed YAML) into an `ExpertConfig`."""
    return tc.build(ExpertConfig, data).validate()


def _validate(cfg: ExpertConfig) -> None:
    """Range checks that types alone do not catch."""
    if cfg.algo not in TRAINABLE_ALGOS:
        raise ConfigError(f"algo must be one of {TRAINABLE_ALGOS}, got {cfg.algo!r}")
    positive = {"total_timesteps": cfg.total_timesteps, "n_envs": cfg.n_envs,
                "frame_stack": cfg.frame_stack, "torch_threads": cfg.torch_threads,
                "checkpoint_freq": cfg.checkpoint_freq, "net.features_dim": cfg.net.features_dim,
                "eval.freq": cfg.eval.freq, "eval.episodes": cfg.eval.episodes,
                "eval.final_episodes": cfg.eval.final_episodes}
    for name, value in positive.items():
        if value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
    if cfg.vec_env not in VEC_ENVS:
        raise ConfigError(f"vec_env must be one of {VEC_ENVS}, got {cfg.vec_env!r}")
    if cfg.net.extractor not in EXTRACTORS:
        raise ConfigError(f"net.extractor must be one of {EXTRACTORS}, got {cfg.net.extractor!r}")
    if any(c < 1 for c in cfg.net.channels + cfg.net.net_arch):
        raise ConfigError("net.channels and net.net_arch entries must be >= 1")
    for key, value in cfg.hyperparams.items():
        low, high = _HYPER_RANGES.get(key, (None, None))
        if isinstance(value, (int, float)) and ((low is not None and value < low)
                                                or (high is not None and value > high)):
            bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
            raise ConfigError(f"hyperparams.{key} must be {bounds}, got {value}")
    if cfg.eval.final_episodes < 2:
        raise ConfigError("eval.final_episodes must be >= 2 for a confidence interval")
    if cfg.device == "auto":
        raise ConfigError("device must name a device: cpu, cuda or cuda:N (a trained expert is the same "
                          "file on either)")
    check_device(cfg.device, what="device", here=False)
    for name, seed in (("seed", cfg.seed), ("eval.seed", cfg.eval.seed)):
        if seed < 0:
            raise ConfigError(f"{name} must be >= 0 (Gymnasium seeds are non-negative), got {seed}")
    check_schedules(cfg.algo, cfg.hyperparams)
    _check_memory(cfg)
    _check_env(cfg)


def _check_memory(cfg: ExpertConfig) -> None:
    mem = cfg.memory
    if cfg.algo == "trxl-ppo" and cfg.frame_stack != 1:
        raise ConfigError(f"trxl-ppo sees one frame a step (its memory replaces the stack); set "
                          f"frame_stack=1, got {cfg.frame_stack}")
    for name in ("memory_length", "num_blocks", "num_heads", "hidden_size", "lstm_hidden_size"):
        if getattr(mem, name) < 1:
            raise ConfigError(f"memory.{name} must be >= 1, got {getattr(mem, name)}")
    if mem.positional_encoding not in ("relative", "learned", "none"):
        raise ConfigError(f"memory.positional_encoding must be relative, learned or none, got "
                          f"{mem.positional_encoding!r}")
    if mem.layer_norm not in ("pre", "post"):
        raise ConfigError(f"memory.layer_norm must be pre or post, got {mem.layer_norm!r}")
    if cfg.algo == "trxl-ppo" and cfg.net.features_dim % mem.num_heads:
        raise ConfigError(f"net.features_dim ({cfg.net.features_dim}) is the transformer's width and must be "
                          f"a multiple of memory.num_heads ({mem.num_heads})")


def _check_env(cfg: ExpertConfig) -> None:
    """The env exists, takes the env section's arguments, and gives spaces ``cfg.algo`` acts in; made
    once here so that a config for another env fails before any model or run folder is made."""
    from rpg_env.envs.any_env import PROJECT_GAMES, check_agent_spaces, make_wrapped_env, resolve_env_id

    try:
        name = resolve_env_id(cfg.env_id)
        if name == PROJECT_GAMES[0] and not cfg.wrappers:
            _check_treasurehunt(cfg.env)
            return
        if name in PROJECT_GAMES and cfg.wrappers:
            raise ConfigError(f"{name} takes no wrappers (its tools read its own views); drop wrappers")
        with make_wrapped_env(cfg.env_id, cfg.env, cfg.wrappers) as env:
            check_agent_spaces(env.observation_space, env.action_space, name)
            obs_space, act_space = env.observation_space, env.action_space
    except (TypeError, ValueError) as err:  # InputError is a ValueError
        raise ConfigError(f"env ({cfg.env_id}): {err}") from None
    from gymnasium import spaces

    if cfg.algo == "dqn" and not isinstance(act_space, spaces.Discrete):
        raise ConfigError(f"dqn takes Discrete actions and {name} has {act_space}; use ppo, recurrent-ppo "
                          "or trxl-ppo")
    if cfg.net.extractor == "cnn" and len(obs_space.shape) != 3:
        raise ConfigError(f"net.extractor=cnn needs a grid or an image and {name} gives {obs_space}; set "
                          "net.extractor=mlp (or auto)")


def _check_treasurehunt(env: dict[str, Any]) -> None:
    """The env section's game settings, checked by the game's own rules (`WorldParams`) here,
    so a bad size fails before any env, model or run folder is made."""
    from dataclasses import fields

    from rpg_env.game.world import WorldParams

    names = {f.name for f in fields(WorldParams)}
    try:
        WorldParams(**{k: v for k, v in env.items() if k in names})
    except (TypeError, ValueError) as err:
        raise ConfigError(f"env: {err}") from None


# --------------------------------------------------------------------------- loading
def expert_config_path(algo: str) -> Path:
    """The shipped config of ``algo``: ``configs/<algo>.yaml``, which lists what ``algo``'s runs
    change of `ExpertConfig`'s defaults (and its whole env and hyperparams sections)."""
    if algo not in TRAINABLE_ALGOS:
        raise ConfigError(f"algo must be one of {TRAINABLE_ALGOS}, got {algo!r}")
    return EXPERT_CONFIG_DIR / f"{algo}.yaml"


def load_expert_config(algo: str | None = None, path: str | Path | None = None,
                       overrides: Sequence[str] | None = None, *, env_id: str | None = None,
                       env_kwargs: str | dict[str, Any] | None = None,
                       wrappers: Sequence[str] | None = None) -> ExpertConfig:
    """Resolve a config: ``path`` (or the shipped ``configs/<algo>.yaml``), then ``env_id``,
    ``env_kwargs`` (a mapping or its YAML text) and ``wrappers`` where given, then ``overrides``.

    With another ``env_id`` than the file's, the shipped config's env section and wrappers (which
    belong to its own env) are left out; a config file given by ``path`` that sets them for another
    env is refused. ``env_kwargs`` and ``wrappers`` replace the file's."""
    shipped = path is None
    if path is None:
        path = expert_config_path(algo or "dqn")
    data = read_yaml(path)
    if algo is not None:
        if "algo" in data and data["algo"] != algo:
            raise ConfigError(f"--algo {algo} conflicts with algo: {data['algo']} in {path}; "
                              f"drop one of them")
        data["algo"] = algo
    own_env = data.get("env_id", ExpertConfig.env_id)
    if env_id is not None and env_id != own_env:
        for key, replaced in (("env", env_kwargs), ("wrappers", wrappers)):
            if data.get(key) and not shipped and replaced is None:
                raise ConfigError(f"{path} sets {key} for {own_env}, not for --env-id {env_id}; give "
                                  f"--env-kwargs/--wrappers for {env_id}, or a config written for it")
            data.pop(key, None)
        data["env_id"] = env_id
    if env_kwargs is not None:
        data["env"] = yaml_mapping(env_kwargs, "--env-kwargs")
    if wrappers is not None:
        data["wrappers"] = list(wrappers)
    return tc.resolve(ExpertConfig, data, list(overrides or []), str(path))
