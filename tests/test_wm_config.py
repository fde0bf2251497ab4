"""World-model config: defaults, YAML + overrides, and the error messages for bad values."""

import pytest

from rpg_base.typed_config.values import ConfigError
from rpg_worldmodel.config import DEFAULT_CONFIG_PATH, ModelConfig, WorldModelConfig, load_config, save_config


def test_shipped_default_yaml_equals_the_dataclass_defaults():
    assert load_config(DEFAULT_CONFIG_PATH).to_dict() == WorldModelConfig().validate().to_dict()
    m = WorldModelConfig().model  # the reference architecture's shape at half its width
    sizes = (m.view_size, m.num_frames, m.patch_size, m.width, m.num_layers, m.num_heads)
    assert sizes == (9, 5, 3, 96, 2, 3)
    assert WorldModelConfig().train.batch_size == 64
    reference = load_config(DEFAULT_CONFIG_PATH.parent / "reference.yaml").model
    assert (reference.width, reference.num_heads, reference.position) == (192, 3, "learned")


def test_overrides_parse_yaml_values_and_accept_unique_bare_keys(tmp_path):
    cfg = load_config(None, ["train.lr=3e-4", "max_steps=7", "model.agent_embedding=true",
                             "data.split_fractions=[0.5, 0.25, 0.25]", "out_dir=x/y"])
    assert cfg.train.lr == pytest.approx(3e-4) and cfg.train.max_steps == 7
    assert cfg.model.agent_embedding is True and cfg.data.split_fractions == (0.5, 0.25, 0.25)
    assert cfg.out_dir == "x/y"
    # A file round-trips, then overrides win over the file.
    path = tmp_path / "c.yaml"
    save_config(cfg, path)
    again = load_config(path, ["train.seed=3"])
    assert again.train.seed == 3 and again.train.lr == cfg.train.lr and again.out_dir == "x/y"
    assert WorldModelConfig.from_dict(cfg.to_dict()).to_dict() == cfg.to_dict()


def test_patch_size_that_does_not_divide_the_view_names_the_sizes_that_do():
    with pytest.raises(ConfigError, match=r"view_size=9 is not divisible by model.patch_size=2.*\[1, 3, 9\]"):
        load_config(None, ["model.patch_size=2"])
    with pytest.raises(ConfigError, match=r"\[1, 2, 4, 8\]"):
        ModelConfig(view_size=8, patch_size=3).validate()


def test_width_not_divisible_by_heads_names_head_counts():
    with pytest.raises(ConfigError, match=r"width=100 is not divisible by model.num_heads=3.*\[1, 2, 4, 5"):
        load_config(None, ["model.width=100"])


@pytest.mark.parametrize("override,message", [
    ("train.lrr=1", r"unknown key 'train.lrr'; did you mean 'train.lr'"),
    ("modle.width=8", r"unknown section 'modle'; did you mean 'model'"),
    ("widht=8", r"unknown key 'widht'; did you mean 'model.width'"),
    ("train.max_steps=abc", r"train.max_steps must be an integer, got str 'abc'"),
    ("train.max_steps=1.5", r"must be an integer"),
    ("model.agent_embedding=3", r"must be true or false"),
    ("train.lr=fast", r"train.lr must be a number"),
    ("data.split_fractions=0.8", r"must be a list"),
    ("data.split_fractions=[0.8, 0.2]", r"must have 3 entries"),
    ("data.split_fractions=[0.8, 0.3, 0.1]", r"summing to 1"),
    ("train.train_mask=gems", r"did you mean 'gem'"),
    ("train.device=tpu", r"use auto, cpu, cuda"),
    ("train.lr=-1", r"train.lr must be > 0"),
    ("model.dropout=1.0", r"dropout must be in \[0, 1\)"),
    ("model.action_frames=-1", r"model.action_frames must be >= 0 \(0: a linear head on the global token\)"),
    ("train.lr", r"must look like key=value or section.key=value"),
])
def test_bad_overrides_say_what_to_change(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_bad_yaml_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {width: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    bad.write_text("trian:\n  lr: 0.1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: unknown key 'trian'; did you mean 'train'"):
        load_config(bad)
    bad.write_text("model:\n  num_layer: 2\n")
    with pytest.raises(ConfigError, match=r"did you mean 'model.num_layers'"):
        load_config(bad)
    bad.write_text("model: 3\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(bad)
