"""Data for the world model: trajectory files (`sources`), the one windowing of their episodes
shared by training and evaluation (`windows`), and input masks (`masks`).

Nothing here imports the environment: the trajectory file is the contract with the game.
"""

from rpg_worldmodel.config import MASK_KINDS
from rpg_worldmodel.data.masks import CHANNEL_MASKS, MASKED_CHANNELS, apply_input_mask, masked_channels
from rpg_worldmodel.data.sources import (
    DataMismatchError,
    DataSource,
    check_data_matches,
    data_record,
    file_digest,
    item_codes,
    kind_values,
    reward_classes,
    training_splits,
)
from rpg_worldmodel.data.windows import (
    CONTEXTS,
    EpisodeStore,
    EpochBatchSampler,
    TrajectoryWindows,
    WindowPlan,
    collate_batch,
    plan_windows,
    window_plan,
)
from rpg_worldmodel.models.world_model import view_codes

__all__ = [
    "kind_values",
    "reward_classes",
    "MASK_KINDS",
    "CHANNEL_MASKS",
    "MASKED_CHANNELS",
    "CONTEXTS",
    "DataMismatchError",
    "DataSource",
    "EpisodeStore",
    "EpochBatchSampler",
    "TrajectoryWindows",
    "WindowPlan",
    "apply_input_mask",
    "check_data_matches",
    "collate_batch",
    "data_record",
    "file_digest",
    "item_codes",
    "masked_channels",
    "plan_windows",
    "training_splits",
    "view_codes",
    "window_plan",
]
