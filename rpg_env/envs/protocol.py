"""The protocol of an environment shaped like Treasurehunt-v0.

Playing by keyboard, recording to trajectory files, `python -m rpg_env.record` and the experts'
evaluator work with *any* env (single or vector, wrapped or not) that has:

1. a one-hot egocentric observation space of shape ``(C, V, V)`` (``MultiBinary((C, V, V))``
   as Treasurehunt-v0 declares it, or an integer ``Box(0, 1, (C, V, V))``) and a ``Discrete(A)``
   action space (a vector env: as its ``single_*`` spaces);
2. ``render()`` returning an ``(H, W, 3)`` uint8 frame when made with ``render_mode="rgb_array"``
   (a vector env: one frame per world);
3. these ``metadata`` keys (they travel through Gymnasium wrappers, unlike attributes of
   ``env.unwrapped``): ``"channel_names"`` and ``"action_names"``, what the C channels and the A
   actions mean; and optionally:

   - ``"max_turns"``: the episode length in turns (also taken from ``spec.max_episode_steps``);
   - ``"rules"``: the JSON-ready settings of the game it plays, as ``gymnasium.make`` keyword
     arguments (recorded as a trajectory file's ``env_kwargs``);
   - ``"co_policy_id"``: the label of the policy that drives the co-players, if any;
   - ``"channel_colors"``: an RGB triple per channel, how a drawing of a view colours each kind
     (`rpg_env.render.render_kinds`; without it, colours are chosen from the names);
   - ``"agent_cell"``: ``(row, col)`` of the agent's own cell in its view (the centre if absent);

4. optionally these ``info`` keys: ``turn``, ``episode_return``, and for co-players ``co_obs``
   ``(A-1, C, V, V)`` (the views they act on next), ``co_actions`` and ``co_rewards`` ``(A-1,)``
   after a step (a vector env: with a leading world axis).

`describe` reads all of it, so callers never reach into ``env.unwrapped``. Game-free: the
trajectory recorders use it without importing the game.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces


@dataclass(frozen=True)
class EnvDescription:
    """What the protocol says about an env (see the module docstring)."""

    env_id: str | None
    obs_shape: tuple[int, ...]
    num_actions: int
    channel_names: tuple[str, ...]
    action_names: tuple[str, ...]
    max_turns: int | None
    rules: dict[str, Any] = field(default_factory=dict)
    co_policy_id: str | None = None
    channel_colors: tuple[tuple[int, int, int], ...] | None = None
    agent_cell: tuple[int, int] | None = None

    @property
    def view_size(self) -> int:
        return int(self.obs_shape[-1])


def is_one_hot_view_space(space: spaces.Space) -> bool:
    """Whether ``space`` holds one-hot views ``(C, V, V)``: `MultiBinary`, or an integer Box in [0, 1]."""
    if isinstance(space, spaces.MultiBinary):
        return len(space.shape) == 3
    return (isinstance(space, spaces.Box) and len(space.shape) == 3 and space.dtype.kind in "iu"
            and bool(np.all(space.low == 0)) and bool(np.all(space.high == 1)))


def _spaces(env: Any) -> tuple[spaces.Space, spaces.Space]:
    obs = getattr(env, "single_observation_space", None) or env.observation_space
    act = getattr(env, "single_action_space", None) or env.action_space
    return obs, act


def describe(env: Any) -> EnvDescription:
    """Read the protocol of ``env`` (a `gymnasium.Env` or `gymnasium.vector.VectorEnv`, wrapped
    or not). Raises ValueError when its spaces are not a one-hot view and discrete actions."""
    obs_space, act_space = _spaces(env)
    if not is_one_hot_view_space(obs_space):
        raise ValueError(f"expected an env with one-hot egocentric views MultiBinary((C, V, V)), got "
                         f"observation space {obs_space}; make it with obs_mode='onehot'")
    if not isinstance(act_space, spaces.Discrete):
        raise ValueError(f"expected a Discrete action space, got {act_space}")
    meta = dict(getattr(env, "metadata", None) or {})
    missing = [key for key in ("channel_names", "action_names") if not meta.get(key)]
    if missing:
        raise ValueError(f"{type(env).__name__} does not declare metadata {missing}: an env shaped like "
                         f"Treasurehunt-v0 names its observation channels and actions there "
                         f"(see rpg_env.envs.protocol)")
    channels = tuple(meta["channel_names"])
    actions = tuple(meta["action_names"])
    if len(channels) != obs_space.shape[0]:
        raise ValueError(f"the env declares {len(channels)} channel names for {obs_space.shape[0]} "
                         f"observation channels; set metadata['channel_names'] to one name per channel")
    if len(actions) != int(act_space.n):
        raise ValueError(f"the env declares {len(actions)} action names for {act_space.n} actions; set "
                         f"metadata['action_names'] to one name per action")
    spec = getattr(env, "spec", None)
    max_turns = meta.get("max_turns") or getattr(spec, "max_episode_steps", None)
    colors = meta.get("channel_colors")
    if colors is not None and (len(colors) != len(channels) or any(len(c) != 3 for c in colors)):
        raise ValueError(f"the env declares {len(colors)} channel colours for {len(channels)} channels; set "
                         f"metadata['channel_colors'] to one RGB triple per channel")
    agent_cell = meta.get("agent_cell")
    return EnvDescription(
        env_id=getattr(spec, "id", None),
        obs_shape=tuple(int(x) for x in obs_space.shape),
        num_actions=int(act_space.n),
        channel_names=channels,
        action_names=actions,
        max_turns=None if max_turns is None else int(max_turns),
        rules=dict(meta.get("rules") or {}),
        co_policy_id=meta.get("co_policy_id"),
        channel_colors=None if colors is None else tuple(tuple(int(x) for x in c) for c in colors),
        agent_cell=None if agent_cell is None else (int(agent_cell[0]), int(agent_cell[1])),
    )
