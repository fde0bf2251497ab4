"""World models: `world_model.WorldModel`, the StARformer-style ViT over (view, action) steps.

The default forward pass reads in six modules: `world_model` (the model: parts, forward, heads,
loss, one-step imagination), `transformer` (steps as tokens, rotary positions, the StARformer
layer), `motion` (the family of motions: one-cell shifts and the turns the files show, dead
reckoning by them, and the motion head that learns which one an action causes), `steps` (what the
heads read of the steps: cell kinds, each step's motion, the memory map and its canvas), `extents`
(each kind's lowest and highest row and column seen since a game's start: over a window, a step at a
time, or read off recorded games) and `heads` (action and reward heads, the motion prior, the memory
map and the extent prior).
Beside it: `refiner` (the cell refiner, trained with the heads, that draws a next view's cells
together), `sampling` (drawing next views), `state` (imagination's cached state), `fast_weights`
(the SRWM layer, ``model.layer="srwm"``) and `legacy` (the first version's parts: learned
positions, the linear action head). Nothing here imports the game's package: the model learns
its game from the trajectory files.
"""
