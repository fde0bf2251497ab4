"""RL Baselines3 Zoo's schedule notation in an expert config's ``hyperparams``.

The Zoo publishes many of its tuned settings with linear schedules, written ``lin_<start>``:
``learning_rate: lin_0.001`` starts at 0.001 and falls linearly to 0 at the last step of training
(``rl_zoo3/hyperparams/ppo_lstm.yml``, CartPoleNoVel-v1). A config here takes the same string for
the SB3 algorithms' ``learning_rate`` and ``clip_range``, so a Zoo entry is copied as it is
published; `sb3_hyperparams` hands SB3 its own `LinearSchedule` for it. trxl-ppo has its own
decays (``learning_rate_final``, ``schedule_power``) and takes numbers only.
"""

from __future__ import annotations

import re
from typing import Any

from rpg_base.typed_config.values import ConfigError

#: The SB3 arguments that take a schedule as well as a number.
SCHEDULED = ("learning_rate", "clip_range")
_LINEAR = re.compile(r"lin_(?P<start>[0-9.eE+-]+)")


def linear_start(key: str, value: str) -> float:
    """The start of ``value`` (``lin_<start>``, start > 0) for hyperparams.``key``; a ConfigError
    that says what to write for anything else."""
    match = _LINEAR.fullmatch(value.strip())
    try:
        start = float(match["start"]) if match else None
    except ValueError:
        start = None
    if start is None or not start > 0:
        raise ConfigError(f"hyperparams.{key} must be a number or RL Zoo's linear schedule 'lin_<start>' "
                          f"(start > 0, falling to 0 at the end of training), got {value!r}")
    return start


def check_schedules(algo: str, hyperparams: dict[str, Any]) -> None:
    """Refuse a schedule string where ``algo`` takes none, or one that is not ``lin_<start>``."""
    for key in SCHEDULED:
        value = hyperparams.get(key)
        if not isinstance(value, str):
            continue
        if algo == "trxl-ppo":
            raise ConfigError(f"hyperparams.{key}: trxl-ppo takes a number (its decay is {key}_final "
                              f"and schedule_power), got {value!r}")
        linear_start(key, value)


def sb3_hyperparams(hyperparams: dict[str, Any]) -> dict[str, Any]:
    """``hyperparams`` as SB3 takes them: each ``lin_<start>`` string as SB3's `LinearSchedule`
    from start to 0 over training (SB3 calls it with the progress remaining, 1 -> 0)."""
    from stable_baselines3.common.utils import LinearSchedule

    return {key: LinearSchedule(linear_start(key, value), 0.0, 1.0)
            if key in SCHEDULED and isinstance(value, str) else value
            for key, value in hyperparams.items()}
