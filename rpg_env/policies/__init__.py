"""Policies over batches of one-hot views: the protocol (`base`), scripted ones (`scripted`),
trained Stable-Baselines3 experts (`sb3`, with their features extractors in `features`), and
`make_policy` (`registry`), which builds any of them from a name, a model or a ``.zip``."""

from rpg_env.policies.base import BatchPolicy, CallablePolicy, check_policy_actions
from rpg_env.policies.registry import POLICY_NAMES, make_policy
from rpg_env.policies.sb3 import ExpertLoadError, SB3Policy, load_expert
from rpg_env.policies.scripted import GreedyPolicy, RandomPolicy

__all__ = ["POLICY_NAMES", "BatchPolicy", "CallablePolicy", "ExpertLoadError", "GreedyPolicy", "RandomPolicy",
           "SB3Policy", "check_policy_actions", "load_expert", "make_policy"]
