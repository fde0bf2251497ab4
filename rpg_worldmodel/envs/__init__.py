"""The world model as an environment: `world_model_env` (``TreasurehuntImagined-v0``, single and
vector) over `imagination` (N imagined worlds and the real context they start from)."""
