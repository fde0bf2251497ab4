"""Kept because saved files name this path: the expert zips trained before the features extractors
moved to `rpg_env.policies.features` (the shipped rpg_env/experts/pretrained/{dqn,ppo}/model.zip
among them) record ``rpg_env.experts.features.GridCNN`` in their cloudpickled ``policy_kwargs``, so
Stable-Baselines3's own ``DQN.load`` of such a file imports this path. Nothing in the project
imports it (`SB3Policy` loads without unpickling); tests/test_experts.py checks that ``DQN.load``
still reads the shipped zip. Import the extractors from `rpg_env.policies.features`."""

from rpg_env.policies.features import GridCNN, GridMLP  # noqa: F401
