"""rpg_worldmodel: a Vision-Transformer world model of Treasurehunt, trained on trajectory files
written by `rpg_env` (the HDF5 schema in docs/trajectory-format.md).

``import rpg_worldmodel`` registers ``TreasurehuntImagined-v0``: the model as a Gymnasium
environment (`rpg_worldmodel.envs.world_model_env`). `rpg_worldmodel.shipped.pretrained_path`
finds the world model (and the agent trained in it) that ship with the package. Nothing else is
imported here.
"""

from gymnasium.envs.registration import register, registry

__version__ = "0.2.0"

IMAGINED_ENV_ID = "TreasurehuntImagined-v0"

if IMAGINED_ENV_ID not in registry:
    register(
        id=IMAGINED_ENV_ID,
        entry_point="rpg_worldmodel.envs.world_model_env:TreasurehuntImaginedEnv",
        vector_entry_point="rpg_worldmodel.envs.world_model_env:TreasurehuntImaginedVectorEnv",
    )

__all__ = ["IMAGINED_ENV_ID", "__version__"]
