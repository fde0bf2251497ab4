"""One typed configuration for the world model: dataclasses, YAML files and ``key=value`` overrides.

    cfg = load_config("rpg_worldmodel/configs/default.yaml", ["train.max_steps=500", "lr=3e-4"])

Overrides name a field as ``section.key`` (sections: data, model, train) or, when the key is
unique, just ``key``; values are parsed as YAML (``true``, ``3e-4``, ``[0.8, 0.1, 0.1]``).
Every mistake (unknown key, wrong type, incompatible sizes) raises ``ConfigError`` saying
what to change.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MASK_KINDS = ("none", "random_cells", "gem", "bone", "food", "wall")
DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent / "configs" / "default.yaml"


class ConfigError(ValueError):
    """A configuration value or file that cannot be used; the message says what to change."""


@dataclass
class DataConfig:
    """Where the trajectories come from and how episodes are split (by game) into train/val/test."""

    path: str = ""  # HDF5 trajectory file written by rpg_env's recorder
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)  # train, val, test (by game)
    split_seed: int = 0
    agent_id: int = 0  # train on this agent's streams (0 = the recorded learner); -1 = every stream
    num_workers: int = 0  # DataLoader workers; 0 is fastest here (episodes are cached in memory)
    max_val_windows: int = 2048  # validation windows used per evaluation (fixed subset, val split only)

    def validate(self) -> None:
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
        if self.num_workers < 0:
            raise ConfigError(f"data.num_workers must be >= 0, got {self.num_workers}")
        if self.max_val_windows < 1:
            raise ConfigError(f"data.max_val_windows must be >= 1, got {self.max_val_windows}")


@dataclass
class ModelConfig:
    """Sizes of the StARformer-style world model (reference: 6x9x9 view, 5 frames, patch 3, 192 wide)."""

    view_size: int = 9  # egocentric view side V (views are (C, V, V))
    num_channels: int = 6  # entity kinds: empty, wall, gem, bone, food, agent
    num_actions: int = 4
    num_frames: int = 5  # steps of context T
    patch_size: int = 3
    width: int = 192
    num_layers: int = 2
    num_heads: int = 3
    dropout: float = 0.0
    agent_embedding: bool = False  # add a learned agent-identity embedding to every step
    max_agents: int = 8  # size of that embedding table (agent ids must be < max_agents)
    action_conv: bool = True  # add an action-conditioned 3x3 conv of view t to the view-t+1 logits
    memory_conv: bool = True  # add a 5x5 conv of view t-1, conditioned on actions (t-1, t), to them

    def validate(self) -> None:
        for name in (
            "view_size",
            "num_channels",
            "num_frames",
            "patch_size",
            "width",
            "num_layers",
            "num_heads",
            "max_agents",
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
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout must be in [0, 1), got {self.dropout}")


@dataclass
class TrainConfig:
    """Optimisation, logging and checkpointing (AdamW, linear warm-up then cosine decay)."""

    batch_size: int = 64
    lr: float = 2e-3
    min_lr_ratio: float = 0.05  # cosine decays to lr * min_lr_ratio
    weight_decay: float = 0.05
    beta1: float = 0.9
    beta2: float = 0.95
    warmup_steps: int = 100  # capped at max_steps
    max_steps: int = 2000
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    view_loss_weight: float = 1.0
    action_loss_weight: float = 0.5
    item_weight: float = 1.0  # weight of cells whose true next kind is an item (gem, bone, food) or agent
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    amp: bool = True  # bf16 (or fp16) autocast, only on CUDA
    num_threads: int = 0  # torch CPU threads; 0 keeps torch's default
    log_every: int = 50
    eval_every: int = 400
    checkpoint_every: int = 400
    train_mask: str = "none"  # input mask during training: one of MASK_KINDS
    mask_prob: float = 0.15  # fraction of cells hidden by the random_cells mask
    progress: bool = True  # tqdm progress bar

    def validate(self) -> None:
        positive = ("batch_size", "max_steps", "log_every", "eval_every", "checkpoint_every")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("lr",):
            if getattr(self, name) <= 0:
                raise ConfigError(f"train.{name} must be > 0, got {getattr(self, name)}")
        for name in (
            "weight_decay",
            "grad_clip",
            "view_loss_weight",
            "action_loss_weight",
            "warmup_steps",
            "num_threads",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"train.{name} must be >= 0, got {getattr(self, name)}")
        if self.view_loss_weight == 0 and self.action_loss_weight == 0:
            raise ConfigError("train.view_loss_weight and train.action_loss_weight cannot both be 0")
        if self.item_weight <= 0:
            raise ConfigError(f"train.item_weight must be > 0 (1 means unweighted), got {self.item_weight}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError(f"train.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        for name in ("beta1", "beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"train.{name} must be in [0, 1), got {getattr(self, name)}")
        if self.train_mask not in MASK_KINDS:
            hint = difflib.get_close_matches(self.train_mask, MASK_KINDS, n=1)
            raise ConfigError(
                f"train.train_mask={self.train_mask!r} is not one of {list(MASK_KINDS)}"
                + (f"; did you mean {hint[0]!r}?" if hint else "")
            )
        if not 0.0 <= self.mask_prob <= 1.0:
            raise ConfigError(f"train.mask_prob must be in [0, 1], got {self.mask_prob}")
        dev = self.device
        if not (dev in ("auto", "cpu", "cuda", "mps") or (dev.startswith("cuda:") and dev[5:].isdigit())):
            raise ConfigError(f"train.device={dev!r}: use auto, cpu, cuda, cuda:N or mps")


@dataclass
class WorldModelConfig:
    """The whole run: data, model, training and the run folder."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    out_dir: str = "runs/worldmodel"  # run folder (config.yaml, metrics.csv, checkpoints/, tb/)

    def validate(self) -> WorldModelConfig:
        self.data.validate()
        self.model.validate()
        self.train.validate()
        if not self.out_dir:
            raise ConfigError("out_dir must name a folder for the run")
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML-ready dict (tuples become lists)."""
        return _plain(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> WorldModelConfig:
        """Build and validate from a nested dict (e.g. a loaded YAML file or a checkpoint's config)."""
        cfg = cls()
        _merge(cfg, values, prefix="", source=source)
        return cfg.validate()


SECTIONS = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """Check ``value`` against a field annotation (int, float, bool, str, tuple[float, ...])."""
    origin = typing.get_origin(annotation)
    if origin in (tuple, list):
        args = typing.get_args(annotation)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list like [0.8, 0.1, 0.1], got {value!r}")
        if args and args[-1] is not Ellipsis and len(value) != len(args):
            raise ConfigError(f"{where} must have {len(args)} entries, got {len(value)}: {list(value)}")
        item = args[0] if args else Any
        return tuple(_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        raise ConfigError(f"{where}: union types are not supported in configs")
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return str(value)
    return value


def _unknown(key: str, known: list[str], where: str) -> ConfigError:
    hint = difflib.get_close_matches(key, known, n=3)
    msg = f"unknown key {where}{key!r}"
    if hint:
        msg += f"; did you mean {', '.join(repr(h) for h in hint)}?"
    return ConfigError(msg + f" (known: {', '.join(known)})")


def _merge(cfg: WorldModelConfig, values: dict[str, Any], prefix: str, source: str) -> None:
    if not isinstance(values, dict):
        raise ConfigError(
            f"{source}: expected a mapping of sections (data, model, train), got {type(values).__name__}"
        )
    hints = typing.get_type_hints(WorldModelConfig)
    for key, value in values.items():
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: section {key!r} must be a mapping, got {value!r}")
            section = getattr(cfg, key)
            fields = typing.get_type_hints(type(section))
            for sub, sub_value in value.items():
                if sub not in fields:
                    raise _unknown(sub, list(fields), f"in {source}: {key}.")
                setattr(section, sub, _coerce(sub_value, fields[sub], f"{source}: {key}.{sub}"))
        elif key == "out_dir":
            cfg.out_dir = _coerce(value, hints["out_dir"], f"{source}: out_dir")
        else:
            raise _unknown(key, [*SECTIONS, "out_dir"], f"in {source}: ")


def apply_override(cfg: WorldModelConfig, override: str) -> None:
    """Apply one ``section.key=value`` (or unique ``key=value``) override in place."""
    if "=" not in override:
        raise ConfigError(f"override {override!r} must look like section.key=value, e.g. train.lr=3e-4")
    key, raw = override.split("=", 1)
    key = key.strip()
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {override!r}: cannot parse value {raw!r} ({exc})") from None
    if key == "out_dir":
        _merge(cfg, {"out_dir": value}, "", "override")
        return
    if "." in key:
        section, sub = key.split(".", 1)
        if section not in SECTIONS:
            raise _unknown(section, [*SECTIONS, "out_dir"], "section ")
        _merge(cfg, {section: {sub: value}}, "", "override")
        return
    owners = [name for name, klass in SECTIONS.items() if key in typing.get_type_hints(klass)]
    if len(owners) == 1:
        _merge(cfg, {owners[0]: {key: value}}, "", "override")
        return
    every = {"out_dir": "out_dir"}
    every.update({k: f"{s}.{k}" for s, klass in SECTIONS.items() for k in typing.get_type_hints(klass)})
    hint = [every[h] for h in difflib.get_close_matches(key, list(every), n=3)]
    raise ConfigError(
        f"unknown key {key!r}"
        + (f"; did you mean {', '.join(repr(h) for h in hint)}?" if hint else "")
        + " (write section.key=value with a section among data, model, train)"
    )


def load_config(
    path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> WorldModelConfig:
    """Defaults <- YAML file at ``path`` (if given) <- ``overrides``; validated."""
    cfg = WorldModelConfig()
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        try:
            values = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}") from None
        _merge(cfg, values, "", str(path))
    for override in overrides:
        apply_override(cfg, override)
    return cfg.validate()


def save_config(cfg: WorldModelConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
