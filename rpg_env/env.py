"""Kept because saved files name this path: Minari datasets exported before the environments moved
to `rpg_env.envs` store the entry point ``rpg_env.env:TreasurehuntEnv`` in their env spec, and
Minari rebuilds the env from it (``dataset.recover_environment()``). Nothing in the project imports
it; tests/test_minari_export.py checks that such a spec still makes the env. Import
`TreasurehuntEnv` from `rpg_env.envs.treasurehunt`."""

from rpg_env.envs.treasurehunt import TreasurehuntEnv  # noqa: F401
