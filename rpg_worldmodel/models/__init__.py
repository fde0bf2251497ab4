"""World models: `world_model.WorldModel`, the StARformer-style ViT over (view, action) steps."""
