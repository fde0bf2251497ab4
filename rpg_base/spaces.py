"""Gymnasium spaces as JSON, so a saved agent can rebuild the spaces it was trained on without
unpickling anything.

Only the spaces an agent here can act in are written: `Box`, `MultiBinary`, `Discrete` and
`MultiDiscrete`. A Box whose bounds are one value everywhere keeps that value; otherwise its
bounds are written cell by cell.

    >>> space_from_json(space_to_json(spaces.Discrete(3)))
    Discrete(3)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from rpg_base.errors import InputError

__all__ = ["space_to_json", "space_from_json", "action_dims"]


def _bound(values: np.ndarray) -> Any:
    flat = values.reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return _number(flat[0])
    return [_number(v) for v in flat]


def _number(value: Any) -> float | int | str:
    value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return "inf" if value > 0 else "-inf"
    return value


def space_to_json(space: spaces.Space) -> dict[str, Any]:
    """JSON-ready description of ``space``; `InputError` for a space no agent here acts in."""
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": [int(n) for n in space.nvec.reshape(-1)]}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "shape": [int(s) for s in space.shape]}
    if isinstance(space, spaces.Box):
        return {"type": "Box", "shape": [int(s) for s in space.shape], "dtype": str(space.dtype),
                "low": _bound(space.low), "high": _bound(space.high)}
    raise InputError(f"cannot save the space {space}: agents here act on Box or MultiBinary observations "
                     "and Discrete or MultiDiscrete actions")


def space_from_json(data: dict[str, Any]) -> spaces.Space:
    """The space `space_to_json` described; `InputError` for a description it did not write."""
    try:
        kind = data["type"]
        if kind == "Discrete":
            return spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)))
        if kind == "MultiDiscrete":
            return spaces.MultiDiscrete([int(n) for n in data["nvec"]])
        if kind == "MultiBinary":
            return spaces.MultiBinary([int(s) for s in data["shape"]])
        if kind == "Box":
            shape = tuple(int(s) for s in data["shape"])
            dtype = np.dtype(data["dtype"])

            def bound(value: Any) -> np.ndarray:
                values = np.broadcast_to(np.asarray(value, dtype=np.float64), shape)
                return values.reshape(shape).astype(dtype)

            return spaces.Box(bound(data["low"]), bound(data["high"]), shape, dtype=dtype)
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(f"malformed space description {data!r} ({err}); the file was not written by "
                         "this package or is damaged") from err
    raise InputError(f"unknown space type {kind!r} in {data!r}")


def action_dims(space: spaces.Space) -> tuple[int, ...]:
    """The choices of each action dimension: ``(n,)`` for `Discrete`, ``nvec`` for a flat
    `MultiDiscrete`; `InputError` for any other action space."""
    if isinstance(space, spaces.Discrete):
        if int(space.start) != 0:
            raise InputError(f"action space {space} starts at {space.start}; agents here need actions 0..n-1 "
                             "(wrap the env to shift them)")
        return (int(space.n),)
    if isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim == 1:
        return tuple(int(n) for n in space.nvec)
    raise InputError(f"action space {space} is not supported: agents here take Discrete or a flat "
                     "MultiDiscrete action space")
