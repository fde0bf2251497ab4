"""rpg_worldmodel: a Vision-Transformer world model of Treasurehunt, trained on trajectory files
written by `rpg_env` (the HDF5 schema in docs/trajectory-format.md).

``import rpg_worldmodel`` registers the model as a Gymnasium environment
(`rpg_worldmodel.envs.world_model_env`): ``rpg_worldmodel/Imagined-v0`` for a checkpoint of any game
its files recorded, ``TreasurehuntImagined-v0`` for a treasurehunt checkpoint.
`rpg_worldmodel.shipped.pretrained_path` finds the world model (and the agent trained in it) that
ship with the package. Nothing else is
imported here.
"""

from gymnasium.envs.registration import register, registry

__version__ = "0.2.0"

IMAGINED_ENV_ID = "TreasurehuntImagined-v0"
ANY_IMAGINED_ENV_ID = "rpg_worldmodel/Imagined-v0"

for _id, _name in ((IMAGINED_ENV_ID, "TreasurehuntImagined"), (ANY_IMAGINED_ENV_ID, "Imagined")):
    if _id not in registry:
        register(id=_id, entry_point=f"rpg_worldmodel.envs.world_model_env:{_name}Env",
                 vector_entry_point=f"rpg_worldmodel.envs.world_model_env:{_name}VectorEnv")

__all__ = ["ANY_IMAGINED_ENV_ID", "IMAGINED_ENV_ID", "__version__"]
