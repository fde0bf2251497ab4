"""Compatibility alias: the SB3 policy adapter moved to `rpg_env.policies.sb3`."""

from rpg_env.policies.sb3 import (  # noqa: F401
    EXPERT_FORMAT,
    ExpertLoadError,
    SB3Policy,
    describe_shape,
    expert_spec,
    load_expert,
    policy_kwargs_from_net,
)
