"""One typed configuration for the world model: dataclasses, YAML files and ``key=value`` overrides.

    cfg = load_world_model_config(None, ["train.max_steps=500", "lr=3e-4"])  # the default run, two changes
    cfg = load_world_model_config("run/config.yaml")                         # a run's settings

The dataclasses below hold every default; a YAML file lists only what differs from them, and a
run folder's ``config.yaml`` records every value the run used.
Overrides name a field as ``section.key`` (sections: data, model, train) or, when the key is
unique, just ``key``; values are parsed as YAML (``true``, ``3e-4``, ``[0.8, 0.1, 0.1]``).
The rules are `rpg_base.typed_config`'s: every mistake (unknown key, wrong type, incompatible
sizes) raises ``ConfigError`` saying what to change, and
``typed_config.format_keys(WorldModelConfig)`` lists every key with its type, default and help.

Every setting is one the default run reads, one a shipped model or agent was made with, or one a
feature needs (the SRWM layer, the first version's parts, what is read off the training views). Settings that
were measured and not kept, or never varied, are gone, with the value the code now always runs
with (each section's ``REMOVED_SETTINGS``): a checkpoint, run folder or override that names one
with that value reads as before, with another value it is refused in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from rpg_base.cli import check_device
from rpg_base.errors import InputError
from rpg_base.typed_config import config as tc
from rpg_base.typed_config.config import section, setting
from rpg_base.typed_config.values import ConfigError, Removed

__all__ = ["CONFIG_DIR", "DataConfig", "ModelConfig", "TrainConfig",
           "WorldModelConfig", "SECTIONS", "apply_override", "load_world_model_config", "save_config"]

POSITIONS = ("rope", "learned")
#: Steps of a training window where the training games are long enough (``model.train_window``).
DEFAULT_TRAIN_WINDOW = 16
LAYERS = ("attention", "srwm")
#: Side of the memory map's canvas (cells; a torus): a world whose walks span more than
#: ``MAP_SIZE - view_size`` cells wraps onto itself (`rpg_worldmodel.models.steps.canvas_step`).
MAP_SIZE = 64
#: Shipped configs: the dream agents' (``dream_<algo>.yaml``, `rpg_worldmodel.dream.dream_config_path`).
CONFIG_DIR = Path(__file__).resolve().parent / "configs"


@dataclass
class DataConfig:
    """Where the trajectories come from and how episodes are split (by game) into train/val/test."""

    REMOVED_SETTINGS: ClassVar[dict[str, Removed]] = {
        "split_seed": Removed(0, "never varied: the split's seed is 0"),
        "num_workers": Removed(0, "never varied: batches are read in the training process"),
    }

    path: str | list[str] = setting(
        "", "HDF5 trajectory file(s) written by rpg_env's recorder: a path, a glob (shards/*.h5) or a "
        "list of them, all of one game")
    split_fractions: tuple[float, float, float] = setting(
        (0.8, 0.1, 0.1), "train, val and test shares of the games (split by game, sum 1)")
    agent_id: int = setting(0, "train on this agent's streams (0 = the recorded learner); -1 = every stream")
    max_val_windows: int = setting(
        2048, "validation windows used per evaluation (fixed subset, val split only)")
    max_memory_mb: int = setting(
        2048, "MiB of views (uint8) the train and val episodes may take in memory, per process; "
        "beyond it windows are streamed from the files (0: always stream)")
    unmodelled_policies: tuple[str, ...] = setting(
        (), "policy ids (the files' policy_id) whose actions the action head does not learn: their "
        "games still train the views, rewards and ends they show (random play recorded for the bumps "
        "an expert never makes), but a model of the expert is not pulled towards random actions")

    def validate(self) -> None:
        """Shares that make a split with a training and a validation part; sane loader sizes."""
        fr = self.split_fractions
        if len(fr) != 3 or any(f < 0 for f in fr) or abs(sum(fr) - 1.0) > 1e-6:
            raise ConfigError(
                f"data.split_fractions must be three non-negative fractions (train, val, test) "
                f"summing to 1, got {list(fr)}"
            )
        if fr[0] <= 0 or fr[1] <= 0:
            raise ConfigError(
                f"data.split_fractions needs a train and a validation share > 0, got {list(fr)}"
            )
        if self.agent_id < -1:
            raise ConfigError(
                f"data.agent_id must be an agent index >= 0, or -1 for all, got {self.agent_id}"
            )
        if self.max_val_windows < 1:
            raise ConfigError(f"data.max_val_windows must be >= 1, got {self.max_val_windows}")
        if self.max_memory_mb < 0:
            raise ConfigError(f"data.max_memory_mb must be >= 0 (0: always stream), got {self.max_memory_mb}")
        if any(not p for p in self.unmodelled_policies):
            raise ConfigError(f"data.unmodelled_policies holds an empty id: {list(self.unmodelled_policies)}")


@dataclass
class ModelConfig:
    """Sizes of the StARformer-style world model (reference: 6x9x9 view, 5 frames, patch 3, 192 wide)."""

    REMOVED_SETTINGS: ClassVar[dict[str, Removed]] = {
        "dropout": Removed(0.0, "never varied"),
        "agent_embedding": Removed(False, "an agent-identity embedding of the first version, never shipped"),
        "max_agents": Removed(8, "the size of model.agent_embedding's table"),
        "action_conv": Removed(True, "the motion prior is part of every model"),
        "memory_conv": Removed(False, "the two-step convolution, subsumed by the memory map: measured in "
                                      "benchmarks/results/worldmodel_context.json and "
                                      "worldmodel_time_to_quality.json"),
        "map_size": Removed(MAP_SIZE, "never varied: the memory map's canvas is 64 cells a side"),
        "map_reach": Removed(0, "the map read along rows and columns (schema 10), measured and not kept: "
                                "benchmarks/results/imagination_fidelity_map_lines*.json"),
        "refiner_width": Removed(32, "the cell refiner is 32 wide (schema 7's 2 x 64 one is not read; "
                                     "benchmarks/results/imagination_fidelity_refiner_1x32.json)"),
        "refiner_heads": Removed(2, "the cell refiner has 2 heads"),
        **{name: Removed(value, "the game's movement table and reward table, which the model was told "
                                "(schema <= 11); it learns its moves and rewards from the training files "
                                "now (models/motion.py)")
           for name, value in (("move_rules", False), ("entered_rewards", ()), ("move_deltas", ()),
                               ("blocking_kinds", ()))},
        "sample_doubt": Removed(0.2, "the joint draw's doubt budget; the imagined env's sample_doubt "
                                    "keyword changes it"),
    }

    view_size: int = setting(9, "egocentric view side V (views are (C, V, V))")
    num_channels: int = setting(6, "entity kinds C: empty, wall, gem, bone, food, agent")
    num_actions: int = setting(4, "size of the action space")
    num_frames: int = setting(5, "steps of context T")
    patch_size: int = setting(3, "side of the square view patches (must divide view_size)")
    width: int = setting(96, "token width of the transformer")
    num_layers: int = setting(2, "transformer layers")
    num_heads: int = setting(3, "attention heads (must divide width)")
    layer: str = setting(
        "attention", "the global layer across steps: attention (causal, over the last num_frames steps) or "
        "srwm (a self-referential weight matrix, seed 003: a fast-weight state of constant size carries "
        "the whole past; models/fast_weights.py)")
    srwm_heads: int = setting(
        1, "with layer=srwm: heads of the self-referential matrix (must divide width); one head of the "
        "full width has the parameters of the attention it replaces")
    position: str = setting(
        "rope", "how steps know their order: rope (rotary, relative: imagination caches past steps "
        "while its window slides) or learned (an absolute table, as in checkpoints of schema 1)")
    reward_head: bool = setting(True, "predict the learner's reward of each step as a class")
    end_head: bool = setting(
        True, "predict whether each step ended the game (the file's terminated flag; a time limit is "
        "no end), learned from the files: an imagined game ends where the model says it does")
    action_frames: int = setting(
        5, "the next-action head's frame stack, as a policy sees it: a small CNN over the last "
        "action_frames - 1 views and the predicted next view, beside the step's global token; 0: a "
        "linear head on the global token alone (checkpoints of schema <= 3)")
    reward_values: tuple[float, ...] = setting(
        (), "the rewards the game can give, one class each, ascending; filled from the training "
        "file's env_kwargs when empty")
    pays_only_at_ends: bool = setting(
        False, "whether every paying step of the training files was its game's last, the game ending "
        "there (a game that pays only as it ends, as a goal reached): an imagined step that pays then "
        "ends the imagined game too, so a dream pays at most once; read off the training split by "
        "training (data/stores.py, pays_only_at_ends)")
    motion_reach: int = setting(
        1, "cells the motion prior's kernel reaches from each cell of view t (a (2 r + 1)-square "
        "convolution per motion, models/heads.py MoveConv): 1, a 3 x 3 kernel, holds the view's shift; 2 "
        "also holds another inhabitant's own move the other way, two cells in all, which the head learns "
        "only with motion_prior_skips_fixed (measured: docs/imagination.md, \"Co-players\")")
    motion_prior_skips_fixed: bool = setting(
        False, "the motion prior reads view t without its fixed cells (model.fixed_cells): the viewer "
        "stays where it is whatever the view does, and read by the same kernel as any other agent it "
        "teaches the kernel that an agent in view does not move with the world, against every "
        "co-player's own move; with motion_reach=2 the view head then learns the co-player's two-cell "
        "moves (measured: docs/imagination.md, \"Co-players\"); false: as every model before it")
    memory_map: bool = setting(
        True, "add a prior from an egocentric map of the cells seen in the last num_frames steps, "
        "placed by dead reckoning (models/heads.py)")
    memory_steps: int = setting(
        1000, "how many steps the memory map keeps a cell: 0 for the attention window (num_frames "
        "steps); more keeps every cell seen in that many steps, placed by dead reckoning on a canvas "
        "(a torus of MAP_SIZE = 64 cells a side: in imagination at one step's cost, whatever the turn); "
        "a cell seen num_frames or more steps ago reads as seen num_frames - 1 steps ago")
    extent_prior: bool = setting(
        True, "add a prior from how far each cell of the next view lies from the rows and columns "
        "where each kind was ever seen in the game so far, placed by dead reckoning with the motion "
        "head's shifts (models/heads.py, ExtentPrior): how far a room reaches is learned from the files")
    train_window: int | None = setting(
        None, "steps of each training window (at least num_frames; learned positions: num_frames): "
        "attention slides its num_frames steps along it, and the memory map learns what an old "
        "sighting is worth where attention no longer sees it (ages below num_frames one by one, older "
        "ones in doubling bins up to this; older still read as the last bin); empty: read off the "
        "training games when training starts (data/shards.py, fitted_window): 16, or the 10th "
        "percentile of their lengths where that is shorter (a game shorter than the window gives "
        "none), and written to the run's config")
    refiner_layers: int = setting(
        2, "layers of the cell refiner, which draws a next view as one joint sample over its cells "
        "(models/refiner.py: each layer 32 wide, 2 heads); 0: every cell is drawn on its own")
    refiner_views: int = setting(
        1024, "next views of each training batch the cell refiner is scored on (drawn, with "
        "replacement, among the window's steps that attention sees whole; at most as many as there "
        "are: 384 at the defaults, 32 windows x 12 steps)")
    sample_rounds: int = setting(
        32, "most rounds of a joint draw (the last takes every cell still open); 1: the refined cells "
        "drawn independently; each round keeps the surest cells while the sum of their "
        "1 - p(likeliest kind) stays within 0.2 (models/refiner.py, SAMPLE_DOUBT; the imagined env's "
        "sample_doubt changes it)")
    fixed_cells: tuple[int, ...] = setting(
        (), "cells of the view (flat indices) that show one kind in every view of the training files (an "
        "egocentric view's own viewer, which moves with it): the memory map keeps them as a kind of their "
        "own and the shift read off two views ignores them; filled from the training split when empty")
    turns: tuple[tuple[int, int, int], ...] = setting(
        (), "the turns of the view the training files show, each (quarter turns, row, col) "
        "(models/motion.py, Motion): the motion family beyond the one-cell shifts, which the motion "
        "head, the memory map and the extent prior follow; read off the training split when "
        "model.kind_limits is (a game whose views never turn has none)")
    kind_limits: tuple[int, ...] = setting(
        (), "the most cells of each kind (channel) any training view holds: a sampled view holds no more "
        "(models/refiner.py, joint_sample); filled from the training split when empty")
    sample_floor: float = setting(
        0.001, "in a joint draw, a kind whose refined probability in a cell is below this is not drawn "
        "there (epsilon sampling; the likeliest kind always may be): the tails a likelihood-trained "
        "refiner leaves on every cell; 0: the refined distributions as they are. It must stay below "
        "the rarest event the data has (benchmarks/imagination_fidelity.py's spawn rate shows it when "
        "it is not)")

    def validate(self) -> None:
        """Positive sizes; patches that tile the view and heads that split the width."""
        for name in (
            "view_size",
            "num_channels",
            "num_frames",
            "patch_size",
            "width",
            "num_layers",
            "num_heads",
            "motion_reach",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.num_actions < 2:
            raise ConfigError(f"model.num_actions must be >= 2, got {self.num_actions}")
        if self.view_size % self.patch_size:
            good = [p for p in range(1, self.view_size + 1) if self.view_size % p == 0]
            raise ConfigError(
                f"model.view_size={self.view_size} is not divisible by model.patch_size="
                f"{self.patch_size}; patch sizes that divide it: {good}"
            )
        if self.width % self.num_heads:
            good = [h for h in range(1, min(self.width, 64) + 1) if self.width % h == 0]
            raise ConfigError(
                f"model.width={self.width} is not divisible by model.num_heads={self.num_heads};"
                f" head counts that divide it: {good}"
            )
        if self.position not in POSITIONS:
            raise ConfigError(f"model.position must be one of {', '.join(POSITIONS)}, got {self.position!r}")
        self._validate_layer()
        if self.position == "rope" and (self.width // self.num_heads) % 2:
            raise ConfigError(f"model.position=rope rotates pairs of channels: width / num_heads = "
                              f"{self.width // self.num_heads} must be even")
        if self.action_frames < 0:
            raise ConfigError(f"model.action_frames must be >= 0 (0: a linear head on the global token), "
                              f"got {self.action_frames}")
        self._validate_memory_and_refiner()
        if self.kind_limits and (len(self.kind_limits) != self.num_channels or min(self.kind_limits) < 0):
            raise ConfigError(f"model.kind_limits holds a count >= 0 per channel ({self.num_channels}), got "
                              f"{list(self.kind_limits)}; leave it empty to read it from the training file")
        if any(not 0 <= k < self.view_size**2 for k in self.fixed_cells):
            raise ConfigError(f"model.fixed_cells must be cells of the view, 0..{self.view_size**2 - 1}, "
                              f"got {list(self.fixed_cells)}; leave it empty to read it from the training "
                              f"file")
        if any(len(t) != 3 or t[0] not in (1, 2, 3) or max(map(abs, t[1:])) >= self.view_size
               for t in self.turns):
            raise ConfigError(f"model.turns holds (quarter turns 1..3, row, col) with |row|, |col| < "
                              f"{self.view_size}, got {[list(t) for t in self.turns]}; leave it empty to "
                              f"read it from the training file")
        values = list(self.reward_values)
        if values != sorted(set(values)):
            raise ConfigError(f"model.reward_values must be distinct and ascending, got {values}")

    @property
    def window(self) -> int:
        """Steps of a training window: ``train_window`` (left empty: `DEFAULT_TRAIN_WINDOW`, until
        training reads it off the files), at least ``num_frames`` (learned positions, which number
        at most ``num_frames`` steps: exactly that)."""
        window = DEFAULT_TRAIN_WINDOW if self.train_window is None else self.train_window
        return self.num_frames if self.position == "learned" else max(window, self.num_frames)

    def _validate_layer(self) -> None:
        """The global layer's name and heads; the SRWM orders steps itself (no learned table)."""
        if self.layer not in LAYERS:
            raise ConfigError(f"model.layer must be one of {', '.join(LAYERS)}, got {self.layer!r}")
        if self.srwm_heads < 1 or self.width % self.srwm_heads:
            raise ConfigError(f"model.srwm_heads must be >= 1 and divide model.width={self.width}, "
                              f"got {self.srwm_heads}")
        if self.layer == "srwm" and self.position != "rope":
            raise ConfigError("model.layer=srwm orders steps by its own recurrence and reads no learned "
                              f"position table: leave model.position at rope, got {self.position!r}")

    def _validate_memory_and_refiner(self) -> None:
        """The memory map's canvas, the training window, the cell refiner and its draw."""
        if self.refiner_layers < 0:
            raise ConfigError(f"model.refiner_layers must be >= 0, got {self.refiner_layers}")
        if self.refiner_views < 1:
            raise ConfigError(f"model.refiner_views must be >= 1, got {self.refiner_views}")
        if not 1 <= self.sample_rounds <= self.view_size**2:
            raise ConfigError(f"model.sample_rounds must be in 1..{self.view_size**2} (view_size**2), "
                              f"got {self.sample_rounds}")
        if not 0 <= self.sample_floor < 1:
            raise ConfigError(f"model.sample_floor must be a probability in [0, 1), got {self.sample_floor}")
        if self.train_window is not None and self.train_window < 0:
            raise ConfigError(f"model.train_window must be >= 0, got {self.train_window}")
        if self.memory_steps < 0:
            raise ConfigError(f"model.memory_steps must be >= 0 (0: the attention window), "
                              f"got {self.memory_steps}")
        if self.memory_map and 2 * self.view_size > MAP_SIZE:
            raise ConfigError(f"model.view_size={self.view_size} is too wide for the memory map's canvas "
                              f"({MAP_SIZE} cells a side, at least twice the view): set "
                              f"model.memory_map=false")


@dataclass
class TrainConfig:
    """Optimisation, logging and checkpointing (AdamW, linear warm-up then cosine decay)."""

    REMOVED_SETTINGS: ClassVar[dict[str, Removed]] = {
        **{name: Removed(value, "never varied: the optimiser's constant in rpg_worldmodel/train.py")
           for name, value in (("min_lr_ratio", 0.05), ("weight_decay", 0.05), ("beta1", 0.9),
                               ("beta2", 0.95), ("grad_clip", 1.0))},
        **{name: Removed(value, "never varied: the loss's weights are constants of "
                                "rpg_worldmodel/models/world_model.py")
           for name, value in (("view_loss_weight", 1.0), ("action_loss_weight", 0.5),
                               ("reward_loss_weight", 1.0), ("refiner_loss_weight", 1.0))},
        "item_weight": Removed(1.0, "item cells weighed up in the view loss, never shipped"),
        "mask_prob": Removed(0.15, "never varied: random_cells hides a cell with probability 0.15"),
        "amp": Removed(True, "never varied: training autocasts on CUDA"),
    }

    batch_size: int = setting(32, "training windows per step")
    lr: float = setting(5e-3, "peak learning rate (AdamW; the rest of the optimiser: train.py)")
    warmup_steps: int = setting(100, "linear warm-up steps (capped at max_steps), then cosine decay")
    max_steps: int = setting(1200, "optimisation steps; the schedule spans them")
    refiner_stage: float = setting(
        3.0, "steps of the cell refiner alone after max_steps, as a multiple of max_steps (rounded): "
        "on the final view head, from the run's best checkpoint, every other weight unchanged "
        "(rpg_worldmodel/refiner_stage.py); the result is the run's next checkpoint; 0: none (a model "
        "without a refiner has none)")
    seed: int = setting(0, "seed of initialisation and batch order")
    end_repeats: int = setting(
        0, "extra draws, each epoch, of every training window that holds a game's end (its terminated "
        "flag): where a game pays only as it ends (a goal reached) and few games do, those windows are "
        "all the reward and end heads learn from; 0: every window once")
    device: str = setting("auto", "auto, cpu, cuda, cuda:N or mps")
    num_threads: int = setting(0, "torch CPU threads; 0 keeps torch's default")
    log_every: int = setting(50, "steps between training-metric rows")
    eval_every: int = setting(400, "steps between validation evaluations")
    checkpoint_every: int = setting(400, "steps between checkpoints (and at every new best validation loss)")
    keep_last_checkpoints: int = setting(1, "newest step_* folders kept besides the best; 0 keeps all")
    train_mask: str = setting(
        "none", "input mask during training: none, random_cells (each cell hidden with probability "
        "0.15), or the name of a channel of the data to hide (an item or wall, e.g. gem; checked "
        "against the data's channel names when training starts)")
    progress: bool = setting(
        True, "show progress: a bar on a terminal, a plain line every few seconds in a log")
    init_from: str = setting(
        "", "checkpoint (or run folder: its best) whose weights start this run, to fine-tune it: same "
        "model config, its data files (and maybe more); its split is kept (new files' games are split "
        "as the settings draw); fresh optimizer and schedule; empty = random init")

    @property
    def refiner_steps(self) -> int:
        """The refiner stage's steps: ``refiner_stage * max_steps``, rounded."""
        return round(self.refiner_stage * self.max_steps)

    def validate(self) -> None:
        """Ranges of the optimiser, logging and checkpointing, mask and device."""
        positive = ("batch_size", "max_steps", "log_every", "eval_every", "checkpoint_every")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ConfigError(f"train.lr must be > 0, got {self.lr}")
        for name in ("warmup_steps", "num_threads", "keep_last_checkpoints", "seed", "end_repeats",
                     "refiner_stage"):
            if getattr(self, name) < 0:
                raise ConfigError(f"train.{name} must be >= 0, got {getattr(self, name)}")
        if not self.train_mask:
            raise ConfigError("train.train_mask must name a mask: none, random_cells or a channel of the "
                              "data")
        try:  # the name only: a saved run's config may name a GPU this machine lacks
            check_device(self.device, what="train.device", here=False)
        except InputError as err:
            raise ConfigError(str(err)) from None


@dataclass
class WorldModelConfig:
    """The whole run: data, model, training and the run folder."""

    data: DataConfig = section(DataConfig, "trajectories and their train/val/test split")
    model: ModelConfig = section(ModelConfig, "sizes of the world model")
    train: TrainConfig = section(TrainConfig, "optimisation, logging and checkpointing")
    out_dir: str = setting("runs/worldmodel", "run folder (config.yaml, metrics.csv, checkpoints/, tb/)")

    def validate(self) -> WorldModelConfig:
        """Range and consistency checks of every section; returns the config."""
        self.data.validate()
        self.model.validate()
        self.train.validate()
        if not self.out_dir:
            raise ConfigError("out_dir must name a folder for the run")
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML-ready dict (tuples become lists)."""
        return tc.to_dict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> WorldModelConfig:
        """Build and validate from a nested dict (e.g. a loaded YAML file or a checkpoint's config)."""
        return tc.build(cls, values, source).validate()


SECTIONS = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig}


def apply_override(cfg: WorldModelConfig, override: str) -> None:
    """Apply one ``section.key=value`` (or unique ``key=value``) override in place (not validated)."""
    updated = tc.with_overrides(cfg, [override])
    for f in fields(cfg):
        setattr(cfg, f.name, getattr(updated, f.name))


def load_world_model_config(path: str | Path | None = None,
                            overrides: Sequence[str] = ()) -> WorldModelConfig:
    """The dataclass defaults <- YAML file at ``path`` (if given) <- ``overrides``; validated."""
    return tc.load(WorldModelConfig, path, overrides)


def save_config(cfg: WorldModelConfig, path: str | Path) -> None:
    """Write the config as YAML; `load_world_model_config` reads it back to an equal config."""
    tc.write_yaml(cfg, path)
