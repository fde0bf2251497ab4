"""Any registered Gymnasium env, made the way the experts here train and play in it.

An expert config names an env id (``CartPole-v1``; ``minigrid:MiniGrid-MemoryS9-v0`` imports
``minigrid`` first, which registers it), its keyword arguments, and a list of Gymnasium wrappers
given as entry points (``minigrid.wrappers:ImgObsWrapper``), applied in order. The agents here
act on `Box` or `MultiBinary` observations (a vector, a one-hot grid ``(C, V, V)``, or an image)
and take `Discrete` or flat `MultiDiscrete` actions; `check_agent_spaces` refuses anything else
saying which wrapper would help. The project's own games are `PROJECT_GAMES`; only those have the
greedy baseline and the Treasurehunt-specific tools.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium import spaces

import rpg_env
from rpg_base.errors import InputError
from rpg_base.spaces import action_dims

#: The games of this package: the ones with a greedy baseline and one-hot views of its vocabulary.
PROJECT_GAMES = (rpg_env.ENV_ID, rpg_env.MEMORY_ENV_ID)


def resolve_env_id(env_id: str) -> str:
    """``env_id`` without its ``module:`` prefix, once that module is imported (it registers the
    id); `InputError` naming the closest registered ids when the id is unknown."""
    if not isinstance(env_id, str) or not env_id:
        raise InputError(f"env_id must be a Gymnasium env id such as 'CartPole-v1', got {env_id!r}")
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise InputError(f"env_id {env_id!r}: cannot import {module!r} ({err}); install the package "
                             f"that registers {name!r}") from None
    if name not in gym.registry:
        close = difflib.get_close_matches(name, list(gym.registry), n=3, cutoff=0.75)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise InputError(f"env_id {name!r} is not a registered Gymnasium env{hint} (an env of another "
                         f"package: 'package:{name}' imports the package first)")
    return name


def wrapper_factories(specs: Sequence[str]) -> list[Callable[[gym.Env], gym.Wrapper]]:
    """The Gymnasium wrappers named by ``specs``, in order: each an entry point
    ``"package.module:Class"``, optionally followed by keyword arguments as ``key=value`` words
    (values read as YAML scalars), e.g. ``"minigrid.wrappers:RGBImgPartialObsWrapper tile_size=28"``."""
    return [_wrapper_factory(str(spec)) for spec in specs]


def _wrapper_factory(spec: str) -> Callable[[gym.Env], gym.Wrapper]:
    import functools

    import yaml

    entry, *words = spec.split()
    module, _, attribute = entry.partition(":")
    if not module or not attribute or any("=" not in word for word in words):
        raise InputError(f"wrapper {spec!r} must be 'package.module:WrapperClass' followed by optional "
                         "key=value arguments")
    try:
        factory = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as err:
        raise InputError(f"wrapper {spec!r} cannot be loaded ({err}); install its package or fix the "
                         "name") from None
    if not callable(factory):
        raise InputError(f"wrapper {spec!r} is not a class or function taking an env")
    kwargs = {}
    for word in words:
        key, _, text = word.partition("=")
        try:
            kwargs[key] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise InputError(f"wrapper {spec!r}: cannot read {word!r} as key=value") from None
    return functools.partial(factory, **kwargs) if kwargs else factory


def registered_id(env_id: str) -> str:
    """``env_id`` with the ``package:`` prefix that registers it, where a bare id names its package
    (``MiniGrid-...`` and ``BabyAI-...``: ``minigrid``); any other id unchanged."""
    from rpg_env.envs.minigrid_views import TASK_PREFIXES

    if ":" not in env_id and env_id.startswith(TASK_PREFIXES):
        return f"minigrid:{env_id}"
    return env_id


def recorded_env(env_id: str, env_kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The env id and arguments whose games `rpg_env.record` writes for ``(env_id, env_kwargs)``: a
    MiniGrid or BabyAI task as its one-hot twin (`rpg_env.envs.minigrid_views.one_hot_twin`), any
    other env as it is."""
    from rpg_env.envs.minigrid_views import one_hot_twin

    return one_hot_twin(env_id, env_kwargs)


def expert_env(env_id: str, env_kwargs: dict[str, Any]) -> tuple[str, dict[str, Any], list[str]]:
    """The ``(env id, keyword arguments, wrappers)`` an expert config (`rpg_env.experts.config`)
    names to play the env a file recorded as ``(env_id, env_kwargs)``: a one-hot MiniGrid twin as its
    task under the one-hot wrapper (`rpg_env.envs.minigrid_views.twin_as_task`), any other env as it
    is, unwrapped."""
    from rpg_env.envs.minigrid_views import twin_as_task

    return twin_as_task(env_id, env_kwargs) or (env_id, dict(env_kwargs), [])


def env_kwarg_defaults(env_id: str) -> dict[str, Any]:
    """The keyword arguments ``env_id``'s env takes, with the defaults its registration gives them
    (its constructor's named parameters and the id's registered keyword arguments)."""
    spec = gym.spec(resolve_env_id(env_id))
    creator = spec.entry_point if callable(spec.entry_point) else \
        gym.envs.registration.load_env_creator(spec.entry_point)
    # A class whose constructor passes **kwargs on (MiniGrid's envs do) takes its bases' too.
    targets = [c.__init__ for c in inspect.getmro(creator) if "__init__" in vars(c)] \
        if inspect.isclass(creator) else [creator]
    named: dict[str, Any] = {}
    for target in targets:
        params = inspect.signature(target).parameters
        for n, p in params.items():
            if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                named.setdefault(n, None if p.default is inspect.Parameter.empty else p.default)
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return {**named, **dict(spec.kwargs)}


def check_agent_spaces(observation_space: spaces.Space, action_space: spaces.Space, env_id: str) -> None:
    """`InputError` unless an agent here can act in these spaces (module docstring)."""
    if isinstance(observation_space, spaces.Dict):
        raise InputError(f"{env_id} gives Dict observations ({', '.join(observation_space.spaces)}); add a "
                         "wrapper that keeps one array, e.g. wrappers=[minigrid.wrappers:ImgObsWrapper] for "
                         "MiniGrid or gymnasium.wrappers:FlattenObservation")
    if not isinstance(observation_space, (spaces.Box, spaces.MultiBinary)) or \
            len(observation_space.shape) not in (1, 3):
        raise InputError(f"{env_id} gives observations {observation_space}; agents here read a vector, a "
                         "grid (C, V, V) or an image (H, W, C) as a Box or MultiBinary")
    try:
        action_dims(action_space)
    except InputError as err:
        raise InputError(f"{env_id}: {err}") from None


def make_wrapped_env(env_id: str, env_kwargs: dict[str, Any] | None = None, wrappers: Sequence[str] = (),
             **make_kwargs: Any) -> gym.Env:
    """One env of ``env_id`` with ``wrappers`` applied; bad keyword arguments are `InputError`s."""
    name = resolve_env_id(env_id)
    try:
        env = gym.make(name, **{**(env_kwargs or {}), **make_kwargs})
    except TypeError as err:
        raise InputError(f"env ({name}): {err}; see the env's keyword arguments") from None
    for wrap in wrapper_factories(wrappers):
        env = wrap(env)
    return env


def make_vector(env_id: str, num_envs: int, env_kwargs: dict[str, Any] | None = None,
                wrappers: Sequence[str] = (), **vector_kwargs: Any) -> gym.vector.VectorEnv:
    """``num_envs`` worlds of ``env_id``: an env with a vector entry point (Treasurehunt-v0) through
    it, any other (or one with ``wrappers``) in Gymnasium's `SyncVectorEnv`, wrapped in every world;
    ``vector_kwargs`` go to the vector env (e.g. ``autoreset_mode``)."""
    name = resolve_env_id(env_id)
    kwargs = dict(env_kwargs or {})
    if gym.spec(name).vector_entry_point is not None and not wrappers:
        return gym.make_vec(name, num_envs=num_envs, **vector_kwargs, **kwargs)
    return gym.make_vec(name, num_envs=num_envs, vectorization_mode="sync", vector_kwargs=vector_kwargs,
                        wrappers=wrapper_factories(wrappers), **kwargs)
