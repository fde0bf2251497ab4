"""World-model config: defaults, YAML + overrides, and the error messages for bad values."""

import hashlib
import json

import numpy as np
import pytest
import yaml

from rpg_base.typed_config.values import ConfigError
from rpg_worldmodel.config import (
    CONFIG_DIR,
    SECTIONS,
    ModelConfig,
    WorldModelConfig,
    load_world_model_config,
    save_config,
)

#: sha256 of the default run's config (sorted JSON), with every removed setting at the value the
#: code now always runs with (`removed_settings_restored`), pinned when the dataclasses became the one
#: source of the defaults: it equalled the retired configs/default.yaml field for field. A change of
#: any default changes the default run's numbers; update the digest only on purpose (last: the joint
#: draw's floor, model.sample_floor = 0.001, which changes how views are drawn, not how they train).
#: Removing the settings nothing varied left it as it was: they hold the values they defaulted to.
#: Schema 12 changed it on purpose: the model is told no movement table (model.move_rules, which
#: defaulted to true, now always runs as false) and adds model.fixed_cells and model.kind_limits
#: (read off the training views). Schema 13 changed it on purpose: model.extent_prior (the room's
#: size learned from each kind's extents), model.refiner_views 256 -> 1024 (all of a batch's views)
#: and model.refiner_layers 1 -> 2. Schema 14 changed it on purpose: model.end_head (whether a step
#: ended the game, learned from the files' terminated flags). Schema 15 changed it on purpose:
#: model.turns (the turns of the view, read off the training views; none in the treasurehunt game).
#: train.end_repeats changed it by its key only: at its default, 0, every window is drawn once, as before;
#: so did model.motion_reach: at its default, 1, the motion prior is the 3 x 3 kernel it was.
#: train.refiner_stage 1.0 -> 3.0 changed it on purpose: the refiner trains alone three times as long
#: (the one-step figures are the main stage's; whole dreams, docs/imagination.md "Fidelity").
#: model.train_window 16 -> empty changed it by its value only: read off the training games, it is 16
#: wherever a tenth of them are no shorter (every treasurehunt game: the default run is as it was).
#: data.unmodelled_policies (empty by default: the default run is as it was) changed it by its key;
#: so did model.motion_prior_skips_fixed (false by default: the motion prior reads the view as it did).
DEFAULT_RUN_DIGEST = "10f2a047a6059f463e30c2b45f4d70eae07e83bdbddc584156fe95263ad8212c"


def removed_settings_restored(config: dict) -> dict:
    """``config`` (a config's dict) with each section's removed settings put back, at their values."""
    restored = {name: {**config[name], **{key: gone.value for key, gone in cls.REMOVED_SETTINGS.items()}}
                for name, cls in SECTIONS.items()}
    return {**config, **restored}


def test_the_default_run_is_the_dataclass_defaults_unchanged():
    defaults = WorldModelConfig().validate().to_dict()
    assert load_world_model_config(None).to_dict() == load_world_model_config().to_dict() == defaults
    restored = json.dumps(removed_settings_restored(defaults), sort_keys=True)
    digest = hashlib.sha256(restored.encode()).hexdigest()
    assert digest == DEFAULT_RUN_DIGEST, f"a default changed: {defaults}"
    m = WorldModelConfig().model  # the reference architecture's shape at half its width
    sizes = (m.view_size, m.num_frames, m.patch_size, m.width, m.num_layers, m.num_heads)
    assert sizes == (9, 5, 3, 96, 2, 3)
    assert WorldModelConfig().train.batch_size == 32 and WorldModelConfig().model.train_window is None
    assert WorldModelConfig().model.window == 16  # until training reads it off the games


def _same_as_default(listed: dict, defaults: dict, prefix: str = "") -> list[str]:
    """Keys of the YAML mapping ``listed`` whose value is the default's (nested sections walked)."""
    same = []
    for key, value in listed.items():
        default = defaults.get(key)
        if isinstance(value, dict) and isinstance(default, dict) and default:
            same += _same_as_default(value, default, f"{prefix}{key}.")
        elif value == default:
            same.append(f"{prefix}{key}")
    return same




def test_the_shipped_configs_are_the_dream_agents_only():
    # the world model's variants are overrides of the defaults; dream_*.yaml are expert configs
    # (tests/test_typed_config.py), learn_*.yaml learn configs (tests/test_learn_other_games.py)
    assert sorted(p.name for p in CONFIG_DIR.glob("*.yaml")) == [
        "dream_dqn.yaml", "dream_ppo.yaml", "learn_doorkey.yaml", "learn_keycorridor.yaml"]


def test_a_removed_setting_reads_as_nothing_at_its_value_and_is_refused_at_another(tmp_path):
    # every record of before names them: the shipped models' meta.json, a run folder's config.yaml
    total = sum(len(cls.REMOVED_SETTINGS) for cls in SECTIONS.values())
    assert total == 28 and sum(1 for _ in _keys(WorldModelConfig().to_dict())) == 52
    old = removed_settings_restored(WorldModelConfig().to_dict())
    assert WorldModelConfig.from_dict(old).to_dict() == WorldModelConfig().to_dict()
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(old))
    assert load_world_model_config(path).to_dict() == WorldModelConfig().to_dict()
    assert load_world_model_config(None, ["model.map_reach=0", "item_weight=1", "train.amp=true"]).to_dict() \
        == WorldModelConfig().to_dict()
    old["model"]["map_reach"] = 24
    path.write_text(yaml.safe_dump(old))
    one_line = (r"model.map_reach=24 can no longer be set: model.map_reach was removed "
                r"\(.*imagination_fidelity_map_lines.*\) and the code now always runs as "
                r"model.map_reach=0; drop it")
    with pytest.raises(ConfigError, match=one_line) as refused:
        load_world_model_config(path)
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match=one_line):
        WorldModelConfig.from_dict(old)
    with pytest.raises(ConfigError, match=r"override 'memory_conv=true': model.memory_conv=True can no"):
        load_world_model_config(None, ["memory_conv=true"])
    with pytest.raises(ConfigError, match=r"train.item_weight=2 can no longer be set"):
        load_world_model_config(None, ["train.item_weight=2"])
    with pytest.raises(ConfigError, match=r"model.agent_embedding=1 can no longer be set"):  # not False
        WorldModelConfig.from_dict({"model": {"agent_embedding": 1}})
    # the game's movement and reward tables (schema <= 11's default run told the model them)
    told = {"move_rules": True, "entered_rewards": [0.0, -1.0, 10.0, -10.0, 5.0, 0.0],
            "move_deltas": [-1, 0, 1, 0, 0, -1, 0, 1], "blocking_kinds": [1, 5]}
    for key, value in told.items():
        with pytest.raises(ConfigError, match=rf"model.{key}=.* can no longer be set: .*movement table "
                                              rf"and reward table.*models/motion.py") as refused:
            WorldModelConfig.from_dict({"model": {key: value}})
        assert "\n" not in str(refused.value)


def test_the_training_file_gives_the_model_its_reward_classes_and_nothing_else():
    from rpg_worldmodel.data.sources import fill_game_settings

    meta = {"channel_names": ["empty", "wall", "gem", "bone", "food", "agent"],
            "action_names": ["up", "down", "left", "right"],
            "env_kwargs": {"gem_value": 10.0, "food_value": 5.0, "bone_value": -10.0, "wall_penalty": -1.0}}
    model = ModelConfig()
    # the game's file: its point table gives every class, even one its games never paid
    fill_game_settings(model, meta, rewards=lambda: np.array([0.0, 10.0], dtype=np.float32))
    assert model == ModelConfig(reward_values=(-10.0, -1.0, 0.0, 5.0, 10.0))  # nothing else is filled
    given = ModelConfig(reward_values=(-1.0, 0.0))
    fill_game_settings(given, meta, rewards=lambda: pytest.fail("a config's own classes need no rewards"))
    assert given.reward_values == (-1.0, 0.0)  # a config's own classes stand
    # another game's file (no agents drawn: not the game's frame): its classes are its rewards'
    other = {**meta, "channel_names": ["unseen", "empty", "wall", "goal"]}
    fill_game_settings(model := ModelConfig(), other, rewards=lambda: np.array([0.0, 0.5, 0.75], np.float32))
    assert model.reward_values == (0.0, 0.5, 0.75)


def test_overrides_parse_yaml_values_and_accept_unique_bare_keys(tmp_path):
    cfg = load_world_model_config(None, ["train.lr=3e-4", "max_steps=7", "model.memory_map=false",
                                         "data.split_fractions=[0.5, 0.25, 0.25]", "out_dir=x/y"])
    assert cfg.train.lr == pytest.approx(3e-4) and cfg.train.max_steps == 7
    assert cfg.model.memory_map is False and cfg.data.split_fractions == (0.5, 0.25, 0.25)
    assert cfg.out_dir == "x/y"
    # A file round-trips, then overrides win over the file.
    path = tmp_path / "c.yaml"
    save_config(cfg, path)
    again = load_world_model_config(path, ["train.seed=3"])
    assert again.train.seed == 3 and again.train.lr == cfg.train.lr and again.out_dir == "x/y"
    assert WorldModelConfig.from_dict(cfg.to_dict()).to_dict() == cfg.to_dict()


def test_patch_size_that_does_not_divide_the_view_names_the_sizes_that_do():
    with pytest.raises(ConfigError, match=r"view_size=9 is not divisible by model.patch_size=2.*\[1, 3, 9\]"):
        load_world_model_config(None, ["model.patch_size=2"])
    with pytest.raises(ConfigError, match=r"\[1, 2, 4, 8\]"):
        ModelConfig(view_size=8, patch_size=3).validate()


def test_width_not_divisible_by_heads_names_head_counts():
    with pytest.raises(ConfigError, match=r"width=100 is not divisible by model.num_heads=3.*\[1, 2, 4, 5"):
        load_world_model_config(None, ["model.width=100"])


@pytest.mark.parametrize("override,message", [
    ("train.lrr=1", r"unknown key 'train.lrr'; did you mean 'train.lr'"),
    ("modle.width=8", r"unknown section 'modle'; did you mean 'model'"),
    ("widht=8", r"unknown key 'widht'; did you mean 'model.width'"),
    ("train.max_steps=abc", r"train.max_steps must be an integer, got str 'abc'"),
    ("train.max_steps=1.5", r"must be an integer"),
    ("model.memory_map=3", r"must be true or false"),
    ("train.lr=fast", r"train.lr must be a number"),
    ("data.split_fractions=0.8", r"must be a list"),
    ("data.split_fractions=[0.8, 0.2]", r"must have 3 entries"),
    ("data.split_fractions=[0.8, 0.3, 0.1]", r"summing to 1"),
    ("train.train_mask=", r"train.train_mask must name a mask: none, random_cells or a channel"),
    ("train.device=tpu", r"use auto, cpu, cuda"),
    ("train.lr=-1", r"train.lr must be > 0"),
    ("model.dropout=0.1", r"model.dropout=0.1 can no longer be set: .* model.dropout=0.0; drop it"),
    ("model.action_frames=-1", r"model.action_frames must be >= 0 \(0: a linear head on the global token\)"),
    ("train.lr", r"must look like key=value or section.key=value"),
])
def test_bad_overrides_say_what_to_change(override, message):
    with pytest.raises(ConfigError, match=message):
        load_world_model_config(None, [override])


def test_bad_yaml_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_world_model_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {width: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_world_model_config(bad)
    bad.write_text("trian:\n  lr: 0.1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: unknown key 'trian'; did you mean 'train'"):
        load_world_model_config(bad)
    bad.write_text("model:\n  num_layer: 2\n")
    with pytest.raises(ConfigError, match=r"did you mean 'model.num_layers'"):
        load_world_model_config(bad)
    bad.write_text("model: 3\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_world_model_config(bad)


def _keys(mapping: dict, prefix: str = "") -> set[str]:
    return {k for key, value in mapping.items()
            for k in (_keys(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}"})}


def test_train_without_config_runs_the_defaults_and_records_every_value(tmp_path):
    from rpg_env.record import record
    from rpg_worldmodel.data.sources import DataSource, fill_game_settings
    from rpg_worldmodel.train import main

    data = tmp_path / "greedy.h5"
    record("greedy", data, 4, seed=0, num_envs=4, mode="w", progress=False)
    overrides = ["train.max_steps=2", "train.eval_every=2", "train.checkpoint_every=2",
                 "train.progress=false", "data.max_val_windows=8"]
    assert main(["--data", str(data), "--out", str(tmp_path / "run"), *overrides]) == 0
    saved = (tmp_path / "run" / "config.yaml").read_text()
    expected = load_world_model_config(None, overrides)
    expected.data.path, expected.out_dir = str(data), str(tmp_path / "run")
    # the file's settings, read from it (the game's point table: its rewards are not read)
    fill_game_settings(expected.model, DataSource.open(data).meta, rewards=lambda: pytest.fail("read"))
    expected.model.fixed_cells = (40,)  # the view's centre, the viewer: the one cell the views never change
    expected.model.kind_limits = load_world_model_config(tmp_path / "run" / "config.yaml").model.kind_limits
    assert expected.model.kind_limits[5] == 2  # two agents at most in a view: the learner and the other
    assert expected.model.turns == ()  # read off the views too: the game's views never turn, so none
    expected.model.train_window = 16  # read off the games: all of them are longer
    assert load_world_model_config(tmp_path / "run" / "config.yaml").to_dict() == expected.to_dict()
    assert _keys(yaml.safe_load(saved)) == _keys(WorldModelConfig().to_dict())  # a record: every key
