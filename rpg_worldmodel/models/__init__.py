"""World models: `world_model.WorldModel`, the StARformer-style ViT over (view, action) steps.

`world_model` composes the parts its config names: `embedding` (steps as tokens, their order),
`blocks` (attention, the StARformer layer), `steps` (what the heads read of the steps), `heads`
(action and reward heads, the motion prior), `moves` (the game's movement table), `memory` (the
memory map), and `variants` (the first version's parts, for old checkpoints and the reference
row); `state` holds imagination's cached state and `sampling` draws next views the game can show.
"""
