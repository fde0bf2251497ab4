"""Typed training configuration: YAML file + ``key=value`` command-line overrides.

A config has four sections besides the top-level run settings::

    algo: dqn                 # dqn | ppo
    seed: 0
    total_timesteps: 150000   # learner env steps, summed over the vectorized envs
    n_envs: 8
    env: {...}                # keyword arguments of TreasurehuntEnv (vision_radius, co_policy, ...)
    net: {...}                # features extractor and heads
    hyperparams: {...}        # keyword arguments of the SB3 algorithm (learning_rate, gamma, ...)

Overrides use dotted keys (``env.vision_radius=3``, ``hyperparams.gamma=0.95``); a bare key
that names exactly one field (``seed=1``, ``vision_radius=3``, ``learning_rate=3e-4``) is
resolved to it, and ``timesteps`` is short for ``total_timesteps``. Values are parsed as
YAML scalars/lists. Every unknown key or ill-typed value raises `ConfigError` saying what to
change.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rpg_env.policies import sb3

ALGOS = ("dqn", "ppo")
VEC_ENVS = ("dummy", "subproc")
CONFIG_DIR = Path(__file__).resolve().parent / "configs"
ALIASES = {"timesteps": "total_timesteps", "steps": "total_timesteps"}

# Environment arguments that are fixed by the expert pipeline (one-hot views, no window).
_ENV_FIXED = {"obs_mode", "render_mode", "tile_size"}
# SB3 constructor arguments that the pipeline sets itself.
_HYPER_FIXED = {"policy", "env", "seed", "tensorboard_log", "policy_kwargs", "verbose", "device",
                "_init_setup_model", "replay_buffer_class", "rollout_buffer_class", "stats_window_size"}


# Ranges SB3 itself does not check up front (a bad value would only show up as a failed run).
_HYPER_RANGES: dict[str, tuple[float | None, float | None]] = {
    "learning_rate": (0.0, None), "buffer_size": (1, None), "learning_starts": (0, None),
    "batch_size": (1, None), "tau": (0.0, 1.0), "gamma": (0.0, 1.0), "gradient_steps": (-1, None),
    "target_update_interval": (1, None), "exploration_fraction": (0.0, 1.0),
    "exploration_initial_eps": (0.0, 1.0), "exploration_final_eps": (0.0, 1.0),
    "n_steps": (1, None), "n_epochs": (1, None), "gae_lambda": (0.0, 1.0), "ent_coef": (0.0, None),
    "vf_coef": (0.0, None), "max_grad_norm": (0.0, None),
}


class ConfigError(ValueError):
    """A config file or override is malformed; the message says what to change."""


@dataclass
class NetConfig:
    """Network shape. ``extractor``: ``cnn`` (3x3 convs at full resolution) or ``mlp``."""

    extractor: str = "cnn"
    channels: list[int] = field(default_factory=lambda: [32, 16])
    features_dim: int = 64
    #: Hidden layers after the extractor: a list (shared / Q-net) as in SB3's ``net_arch``.
    net_arch: list[int] = field(default_factory=list)


@dataclass
class EvalConfig:
    """EvalCallback during training and the final ``eval.json`` comparison."""

    freq: int = 20_000          # learner env steps between EvalCallback evaluations
    episodes: int = 20          # episodes per EvalCallback evaluation
    final_episodes: int = 100   # episodes per policy in eval.json
    seed: int = 10_000          # first evaluation seed (fixed, disjoint from training seeds)


@dataclass
class ExpertConfig:
    """Everything needed to reproduce one training run."""

    algo: str = "dqn"
    seed: int = 0
    total_timesteps: int = 150_000
    n_envs: int = 8
    vec_env: str = "dummy"
    frame_stack: int = 2
    torch_threads: int = 1
    checkpoint_freq: int = 50_000
    progress_bar: bool = True
    env: dict[str, Any] = field(default_factory=dict)
    net: NetConfig = field(default_factory=NetConfig)
    hyperparams: dict[str, Any] = field(default_factory=dict)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# --------------------------------------------------------------------------- valid keys
def env_defaults() -> dict[str, Any]:
    """`TreasurehuntEnv` keyword arguments a config may set, with their defaults."""
    from rpg_env.envs.treasurehunt import TreasurehuntEnv

    params = inspect.signature(TreasurehuntEnv.__init__).parameters
    return {n: p.default for n, p in params.items() if n != "self" and n not in _ENV_FIXED}


def algo_class(algo: str):
    """The SB3 class for ``algo`` (``dqn`` or ``ppo``)."""
    if algo not in ALGOS:
        raise ConfigError(f"algo must be one of {ALGOS}, got {algo!r}")
    return sb3.algo_class(algo)


def hyperparam_defaults(algo: str) -> dict[str, Any]:
    """SB3 constructor arguments of ``algo`` a config may set, with SB3's defaults."""
    params = inspect.signature(algo_class(algo).__init__).parameters
    return {n: p.default for n, p in params.items() if n != "self" and n not in _HYPER_FIXED}


# --------------------------------------------------------------------------- validation
def _type_name(value: Any) -> str:
    return type(value).__name__


def _check_like(key: str, value: Any, default: Any) -> Any:
    """Check ``value`` against the type of ``default`` (ints may stand for floats)."""
    if default is None or default is inspect.Parameter.empty:
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 2e5 steps
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, got {_type_name(value)} {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key} must be a number, got {_type_name(value)} {value!r}")
        return float(value)
    if isinstance(default, str) and not isinstance(value, str):
        raise ConfigError(f"{key} must be a string, got {_type_name(value)} {value!r}")
    return value


def _unknown(key: str, valid: list[str], where: str) -> ConfigError:
    close = difflib.get_close_matches(key.split(".")[-1], valid, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return ConfigError(f"unknown {where} key {key!r}{hint} (valid: {', '.join(sorted(valid))})")


def _build_dataclass(cls, data: Any, where: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping, got {_type_name(data)} {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    defaults = cls()
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise _unknown(f"{where}.{key}" if where else key, list(fields), where or "top-level")
        default = getattr(defaults, key)
        name = f"{where}.{key}" if where else key
        if isinstance(default, list):
            if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                      for v in value):
                raise ConfigError(f"{name} must be a list of integers, got {value!r}")
        elif not dataclasses.is_dataclass(default) and not isinstance(default, dict):
            value = _check_like(name, value, default)
        kwargs[key] = value
    return kwargs


def from_dict(data: dict[str, Any]) -> ExpertConfig:
    """Validate a nested mapping (e.g. parsed YAML) into an `ExpertConfig`."""
    if data is None:
        data = {}
    top = _build_dataclass(ExpertConfig, data, "")
    algo = top.get("algo", "dqn")
    if algo not in ALGOS:
        raise ConfigError(f"algo must be one of {ALGOS}, got {algo!r}")
    cfg = ExpertConfig(**{k: v for k, v in top.items() if k not in ("net", "eval", "env", "hyperparams")})
    cfg.net = NetConfig(**_build_dataclass(NetConfig, top.get("net", {}), "net"))
    cfg.eval = EvalConfig(**_build_dataclass(EvalConfig, top.get("eval", {}), "eval"))

    env = top.get("env", {}) or {}
    if not isinstance(env, dict):
        raise ConfigError(f"env must be a mapping of TreasurehuntEnv arguments, got {env!r}")
    env = dict(env)  # never modify the caller's mapping
    valid_env = env_defaults()
    for key, value in env.items():
        if key not in valid_env:
            fixed = " (the expert pipeline sets it)" if key in _ENV_FIXED else ""
            if fixed:
                raise ConfigError(f"env.{key} cannot be set{fixed}")
            raise _unknown(f"env.{key}", list(valid_env), "env")
        env[key] = _check_like(f"env.{key}", value, valid_env[key])
    if not isinstance(env.get("co_policy", "random"), str):
        raise ConfigError("env.co_policy must be 'random', 'greedy' or a path to an expert .zip")
    cfg.env = dict(env)

    hyper = top.get("hyperparams", {}) or {}
    if not isinstance(hyper, dict):
        raise ConfigError(f"hyperparams must be a mapping of {algo.upper()} arguments, got {hyper!r}")
    hyper = dict(hyper)
    valid_hyper = hyperparam_defaults(algo)
    for key, value in hyper.items():
        if key not in valid_hyper:
            if key in _HYPER_FIXED:
                raise ConfigError(f"hyperparams.{key} cannot be set: the training pipeline sets it "
                                  f"(use the top-level seed / net section instead)")
            raise _unknown(f"hyperparams.{key}", list(valid_hyper), f"{algo.upper()} hyperparams")
        if key == "train_freq" and isinstance(value, list):
            continue  # SB3 accepts (n, "step" | "episode")
        hyper[key] = _check_like(f"hyperparams.{key}", value, valid_hyper[key])
    cfg.hyperparams = dict(hyper)
    validate(cfg)
    return cfg


def validate(cfg: ExpertConfig) -> None:
    """Range checks that types alone do not catch."""
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
    if cfg.net.extractor not in ("cnn", "mlp"):
        raise ConfigError(f"net.extractor must be 'cnn' or 'mlp', got {cfg.net.extractor!r}")
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


# --------------------------------------------------------------------------- loading
def default_config_path(algo: str) -> Path:
    if algo not in ALGOS:
        raise ConfigError(f"algo must be one of {ALGOS}, got {algo!r}")
    return CONFIG_DIR / f"{algo}.yaml"


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {err}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level, "
                          f"got {_type_name(data)}")
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """``"env.vision_radius=3"`` -> ``("env.vision_radius", 3)`` (value parsed as YAML)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r} must look like key=value (e.g. seed=1, "
                          f"env.vision_radius=3, hyperparams.learning_rate=3e-4)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        raise ConfigError(f"override {text!r}: cannot parse value {raw!r}: {err}") from err
    if isinstance(value, str):
        # YAML reads "3e-4" as a string; accept scientific notation as a float.
        try:
            value = float(value) if any(ch in value.lower() for ch in "e.") else value
        except ValueError:
            pass
    return key, value


def _resolve_key(key: str, algo: str) -> list[str]:
    key = ALIASES.get(key, key)
    if "." in key:
        return key.split(".")
    top = {f.name for f in dataclasses.fields(ExpertConfig)}
    if key in top:
        return [key]
    owners = []
    if key in env_defaults():
        owners.append(["env", key])
    if key in {f.name for f in dataclasses.fields(NetConfig)}:
        owners.append(["net", key])
    if key in hyperparam_defaults(algo):
        owners.append(["hyperparams", key])
    if len(owners) == 1:
        return owners[0]
    if len(owners) > 1:
        raise ConfigError(f"override key {key!r} is ambiguous; write one of "
                          f"{', '.join('.'.join(o) for o in owners)}")
    valid = sorted(top | set(ALIASES) | set(env_defaults()) | set(hyperparam_defaults(algo)))
    raise _unknown(key, valid, "override")


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with each ``key=value`` override applied."""
    import copy

    data = copy.deepcopy(data)
    for text in overrides:
        key, value = parse_override(text)
        algo = data.get("algo", "dqn")
        path = _resolve_key(key, algo if algo in ALGOS else "dqn")
        node = data
        for part in path[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {text!r}: {part} is not a section")
            node = nxt
        node[path[-1]] = value
    return data


def load_config(algo: str | None = None, path: str | Path | None = None,
                overrides: list[str] | None = None) -> ExpertConfig:
    """Resolve a config: ``path`` (or the shipped ``configs/<algo>.yaml``) + ``overrides``."""
    if path is None:
        path = default_config_path(algo or "dqn")
    data = read_yaml(path)
    if algo is not None:
        if "algo" in data and data["algo"] != algo:
            raise ConfigError(f"--algo {algo} conflicts with algo: {data['algo']} in {path}; "
                              f"drop one of them")
        data["algo"] = algo
    data = apply_overrides(data, list(overrides or []))
    return from_dict(data)
