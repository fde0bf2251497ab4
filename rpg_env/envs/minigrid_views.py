"""`OneHotMiniGrid-v0`: any MiniGrid task with its egocentric view as one-hot cells with named kinds.

MiniGrid (Farama) gives each step a symbolic view ``image`` ``(V, V, 3)`` indexed ``[x, y]``: per
cell an object, a colour and a state, the agent at the bottom middle facing up, the object it
carries drawn in its own cell. `OneHotViews` turns that into the trajectory format's view
``(C, V, V)`` uint8, rows ``y`` and columns ``x`` (the agent's cell is row ``V - 1``, column
``V // 2``), one channel per kind a cell can be, with the states that change what an agent can do
(a door open, closed or locked) as kinds of their own. ``colors=True`` splits every coloured object
(doors, keys, balls, boxes) by its colour too, for tasks where the colour matters (KeyCorridor,
ObstructedMaze); walls, floor, goal and lava keep one kind. The actions keep MiniGrid's numbers and
names (left, right, forward, pickup, drop, toggle, done).

``gymnasium.make("OneHotMiniGrid-v0", task="MiniGrid-DoorKey-5x5-v0")`` makes one; its
``metadata["rules"]`` (a trajectory file's ``env_kwargs``) are the arguments that make it again,
with MiniGrid's ``max_steps`` (the episode's length in turns) written out. Needs the optional extra
``pip install -e ".[minigrid]"``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rpg_base.errors import InputError

#: MiniGrid's object, colour and state numbers (``minigrid.core.constants``), as of minigrid 3.
OBJECTS = ("unseen", "empty", "wall", "floor", "door", "key", "ball", "box", "goal", "lava", "agent")
COLORS = ("red", "green", "blue", "purple", "yellow", "grey")
DOOR_STATES = ("open", "closed", "locked")
#: Objects whose colour ``colors=True`` keeps.
COLORED = ("door", "key", "ball", "box")
#: MiniGrid's colours (``minigrid.core.constants.COLORS``) and how its renderer colours each kind; with
#: ``colors=False`` a coloured object takes one colour per kind (`UNCOLORED`), a door's state its shade.
RGB = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255), "purple": (112, 39, 195),
       "yellow": (255, 255, 0), "grey": (100, 100, 100)}
KIND_RGB = {"unseen": (52, 52, 72), "empty": (0, 0, 0), "wall": (100, 100, 100), "floor": (30, 30, 110),
            "goal": (0, 255, 0), "lava": (255, 128, 0)}
UNCOLORED = {"door": "yellow", "key": "yellow", "ball": "blue", "box": "purple"}
SHADES = {"door_open": 0.35, "door_closed": 0.8, "door_locked": 0.55, "key": 0.95, "ball": 0.9, "box": 0.65}



def kind_names(colors: bool = False) -> tuple[str, ...]:
    """The channel names of `OneHotViews`: ``unseen``, ``empty``, ``wall``, ``floor``, doors by
    state (``door_open``...), ``key``, ``ball``, ``box``, ``goal``, ``lava``; with ``colors`` each
    coloured object by colour (``door_locked_yellow``, ``key_yellow``...)."""
    names = []
    for obj in OBJECTS[:-1]:  # the agent is never in its own view
        states = [f"{obj}_{s}" for s in DOOR_STATES] if obj == "door" else [obj]
        for state in states:
            names += [f"{state}_{c}" for c in COLORS] if colors and obj in COLORED else [state]
    return tuple(names)


def minigrid_colors(colors: bool = False) -> tuple[tuple[int, int, int], ...]:
    """The RGB colour of each channel of `kind_names` (the protocol's ``channel_colors``), as MiniGrid
    draws the kind: a coloured object in its colour, shaded by kind and a door's state."""
    rows = []
    for name in kind_names(colors):
        if name in KIND_RGB:
            rows.append(KIND_RGB[name])
            continue
        kind, _, color = name.rpartition("_") if colors else (name, "", UNCOLORED[name.split("_")[0]])
        rows.append(tuple(int(v * SHADES[kind]) for v in RGB[color]))
    return tuple(rows)


def kind_table(colors: bool = False) -> np.ndarray:
    """``(objects, colours, states)`` int64: the channel of each MiniGrid cell code, -1 for codes
    no egocentric view holds (the agent)."""
    index = {name: i for i, name in enumerate(kind_names(colors))}
    table = np.full((len(OBJECTS), len(COLORS), len(DOOR_STATES)), -1, dtype=np.int64)
    for o, obj in enumerate(OBJECTS[:-1]):
        for c, color in enumerate(COLORS):
            for s, state in enumerate(DOOR_STATES):
                name = f"door_{state}" if obj == "door" else obj
                table[o, c, s] = index[f"{name}_{color}" if colors and obj in COLORED else name]
    return table


class OneHotViews(gym.ObservationWrapper):
    """A MiniGrid env whose observation is its egocentric view as ``MultiBinary((C, V, V))`` one-hot
    cells (module docstring); the mission text and the direction are dropped (the view turns with the
    agent, so the direction is in it)."""

    def __init__(self, env: gym.Env, colors: bool = False) -> None:
        super().__init__(env)
        image = getattr(env.observation_space, "spaces", {}).get("image")
        if image is None or image.shape[2:] != (3,) or image.shape[0] != image.shape[1]:
            raise InputError(f"OneHotViews wraps a MiniGrid env whose observation holds its symbolic view "
                             f"'image' (V, V, 3), got {env.observation_space}; put it first, before "
                             f"other observation wrappers")
        self.colors = bool(colors)
        self.table = kind_table(self.colors)
        names = kind_names(self.colors)
        v = int(image.shape[0])
        self.observation_space = spaces.MultiBinary((len(names), v, v))
        actions = tuple(a.name for a in env.unwrapped.actions)
        self.action_space = env.action_space
        if int(env.action_space.n) != len(actions):
            raise InputError(f"{env.spec.id if env.spec else env}: {env.action_space.n} actions but MiniGrid "
                             f"names {len(actions)}")
        max_steps = int(env.unwrapped.max_steps)
        self.metadata = {**env.metadata, "channel_names": names, "action_names": actions,
                         "max_turns": max_steps, "channel_colors": minigrid_colors(self.colors),
                         "agent_cell": (v - 1, v // 2)}

    def observation(self, observation: dict[str, Any]) -> np.ndarray:
        image = np.asarray(observation["image"])
        kinds = self.table[image[..., 0], image[..., 1], image[..., 2]].T  # (y, x): rows are y
        if (kinds < 0).any():
            raise ValueError(f"the view holds a cell code OneHotViews has no kind for: "
                             f"{image[(kinds < 0).T][0].tolist()}")
        views = np.zeros(self.observation_space.shape, dtype=np.int8)
        np.put_along_axis(views, kinds[None], 1, axis=0)
        return views


def make_one_hot_minigrid(task: str, colors: bool = False, render_mode: str | None = None,
                          **task_kwargs: Any) -> gym.Env:
    """The entry point of ``OneHotMiniGrid-v0``: MiniGrid's ``task`` (an env id such as
    ``"MiniGrid-DoorKey-5x5-v0"``) made with ``task_kwargs``, its view one-hot (`OneHotViews`)."""
    try:
        import minigrid  # noqa: F401  (registers the MiniGrid ids)
    except ImportError:
        raise InputError("OneHotMiniGrid-v0 needs MiniGrid: pip install -e '.[minigrid]'") from None
    if not isinstance(task, str) or task not in gym.registry or \
            not str(gym.spec(task).entry_point).startswith("minigrid"):
        raise InputError(f"task must be a MiniGrid env id such as 'MiniGrid-DoorKey-5x5-v0', got {task!r}")
    try:
        inner = gym.make(task, render_mode=render_mode, **task_kwargs)
    except TypeError as err:
        raise InputError(f"{task} does not take {task_kwargs}: {err}") from None
    env = OneHotViews(inner, colors=colors)
    made = {**dict(gym.spec(task).kwargs), **task_kwargs, "max_steps": int(inner.unwrapped.max_steps)}
    env.metadata = {**env.metadata, "rules": {"task": task, "colors": bool(colors), **made}}
    return env


#: How the ids of MiniGrid's package begin (its MiniGrid and BabyAI tasks).
TASK_PREFIXES = ("MiniGrid-", "BabyAI-")


def one_hot_twin(env_id: str, env_kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(OneHotMiniGrid-v0, {"task": env_id, **env_kwargs})`` for a MiniGrid or BabyAI id
    (``minigrid:`` prefix or not), so a recording of MiniGrid's own id holds one-hot views; any
    other ``(env_id, env_kwargs)`` unchanged."""
    name = env_id.rpartition(":")[2]
    if name.startswith(TASK_PREFIXES):
        return "OneHotMiniGrid-v0", {"task": name, **env_kwargs}
    return env_id, env_kwargs


def twin_as_task(env_id: str, env_kwargs: dict[str, Any]) -> tuple[str, dict[str, Any], list[str]] | None:
    """``OneHotMiniGrid-v0``'s ``(env_id, env_kwargs)`` (a file's record) as an expert config names
    the same env: ``("minigrid:TASK", the task's own arguments, [the OneHotViews wrapper])``, since a
    config checks its env's arguments against the task's constructor, which the twin passes them on
    to unnamed. None for any other env."""
    if env_id.rpartition(":")[2] != "OneHotMiniGrid-v0":
        return None
    task_kwargs = dict(env_kwargs)
    task, colors = task_kwargs.pop("task"), bool(task_kwargs.pop("colors", False))
    wrapper = f"{__name__}:OneHotViews" + (" colors=true" if colors else "")
    return f"minigrid:{task}", task_kwargs, [wrapper]
