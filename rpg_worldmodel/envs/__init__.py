"""The world model as an environment: `world_model_env` (``TreasurehuntImagined-v0``, single and
vector) over `imagination` (N imagined worlds and the real context they start from); and how far a
dream stays the game over whole episodes: `fidelity` (the measures, read from the game itself) and
`whole_games` (a dream and the real game played from the same opening and measured alike)."""
