"""World models: `world_model.WorldModel`, the StARformer-style ViT over (view, action) steps."""

from rpg_worldmodel.models.world_model import LossWeights, WorldModel

__all__ = ["LossWeights", "WorldModel"]
