"""Data for the world model: trajectory files (`sources`), several files of one game as one set of
episodes (`shards`), where the steps are held, in memory or streamed from disk (`stores`), the one
windowing of their episodes shared by training and evaluation (`windows`), what each channel is
(`kinds`, from the file's channel names) and input masks (`masks`).

Nothing here imports the environment: the trajectory file is the contract with the game.
"""

from rpg_worldmodel.data.kinds import FRAME_KINDS, entity_names, item_names, items_first, maskable_kinds
from rpg_worldmodel.data.masks import (
    MASKED_CHANNELS,
    apply_input_mask,
    check_mask,
    mask_choices,
    masked_channels,
)
from rpg_worldmodel.data.shards import (
    DataFiles,
    data_record,
    expand_paths,
    game_differences,
    split_data_args,
    training_splits,
    training_windows,
)
from rpg_worldmodel.data.sources import (
    DataMismatchError,
    DataSource,
    check_data_matches,
    file_digest,
    fill_game_settings,
    item_codes,
    kind_values,
    movement_rules,
    reward_classes,
)
from rpg_worldmodel.data.stores import EpisodeShards, EpisodeStore, StreamedEpisodes, views_nbytes
from rpg_worldmodel.data.windows import (
    CONTEXTS,
    EpochBatchSampler,
    TrajectoryWindows,
    WindowPlan,
    collate_batch,
    plan_windows,
    window_plan,
)
from rpg_worldmodel.models.world_model import view_codes

__all__ = [
    "fill_game_settings",
    "kind_values",
    "movement_rules",
    "reward_classes",
    "FRAME_KINDS",
    "MASKED_CHANNELS",
    "check_mask",
    "entity_names",
    "item_names",
    "items_first",
    "mask_choices",
    "maskable_kinds",
    "CONTEXTS",
    "DataFiles",
    "DataMismatchError",
    "DataSource",
    "EpisodeShards",
    "EpisodeStore",
    "EpochBatchSampler",
    "StreamedEpisodes",
    "TrajectoryWindows",
    "WindowPlan",
    "apply_input_mask",
    "check_data_matches",
    "collate_batch",
    "data_record",
    "expand_paths",
    "split_data_args",
    "file_digest",
    "game_differences",
    "item_codes",
    "masked_channels",
    "plan_windows",
    "training_splits",
    "training_windows",
    "view_codes",
    "views_nbytes",
    "window_plan",
]
