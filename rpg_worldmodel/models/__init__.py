"""World models: `world_model.WorldModel`, the StARformer-style ViT over (view, action) steps.

The default forward pass reads in four modules: `world_model` (the model: parts, forward, heads,
loss, one-step imagination), `transformer` (steps as tokens, rotary positions, the StARformer
layer), `steps` (what the heads read of the steps: cell kinds, the game's movement table, the
memory map's canvas) and `heads` (action and reward heads, the motion prior and the memory map).
Beside it: `refiner` (the cell refiner, trained with the heads, that draws a next view's cells
together), `sampling` (next views the game can show), `state` (imagination's cached state),
`fast_weights` (the SRWM layer, ``model.layer="srwm"``) and `legacy` (parts only checkpoints of
older schemas are built with).
"""
