"""The shared config mechanism (rpg_base.typed_config), and the project's configs built on it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from rpg_base.errors import InputError
from rpg_base.typed_config import config as tc
from rpg_base.typed_config.config import dict_section, section, setting
from rpg_base.typed_config.values import ConfigError, Removed

KIND_KEYS = {"a": {"alpha": 0.5, "count": 3, "mode": "x", "anything": None},
             "b": {"beta": 1.0, "count": 2}}


@dataclass
class Opt:
    """An optimiser section."""

    lr: float = setting(1e-3, "learning rate", aliases=("learning_rate",))
    steps: int = setting(100, "optimiser steps")
    betas: tuple[float, float] = setting((0.9, 0.99), "Adam betas")
    layers: list[int] = setting([8, 8], "hidden sizes")
    seed: int = setting(0, "optimiser seed")


@dataclass
class Probe:
    """A second section sharing a key with the first."""

    steps: int = setting(10, "probe steps")
    pair: int | tuple[int, str] = setting(4, "a count, or a (count, unit) pair")


@dataclass
class Root:
    """A config with every kind of field."""

    name: str = setting("run", "run name")
    kind: str = setting("a", "which keys `extra` takes (a or b)")
    seed: int = setting(0, "seed of everything")
    verbose: bool = setting(False, "talk while running")
    opt: Opt = section(Opt, "optimiser")
    probe: Probe = section(Probe, "probe")
    extra: dict[str, Any] = dict_section(
        "kind-specific argument", lambda root: KIND_KEYS[root.kind], types={"count": float},
        fixed={"device": "the runner sets it"}, label=lambda root: f"kind {root.kind} arguments")


def _load(*overrides: str) -> Root:
    return tc.load(Root, None, overrides)


# --------------------------------------------------------------------------- round trips
def test_yaml_round_trip_keeps_types(tmp_path):
    cfg = _load("opt.betas=[0.5, 0.6]", "opt.layers=[4]", "extra.alpha=2", "probe.pair=[3, episode]",
                "verbose=true")
    assert cfg.opt.betas == (0.5, 0.6) and cfg.opt.layers == [4] and cfg.probe.pair == (3, "episode")
    assert cfg.extra == {"alpha": 2.0} and isinstance(cfg.extra["alpha"], float)
    path = tmp_path / "run.yaml"
    tc.write_yaml(cfg, path)
    assert yaml.safe_load(path.read_text())["opt"]["betas"] == [0.5, 0.6]  # plain YAML, no tuples
    assert tc.load(Root, path) == cfg
    assert tc.build(Root, tc.to_dict(cfg)) == cfg
    assert list(tc.to_dict(cfg)) == ["name", "kind", "seed", "verbose", "opt", "probe", "extra"]
    assert tc.load(Root) == Root() and tc.build(Root, None) == Root()


def test_overrides_win_over_the_file_and_never_touch_the_input(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("seed: 1\nopt:\n  lr: 0.1\n")
    cfg = tc.load(Root, path, ["opt.lr=3e-4", "learning_rate=5e-4"])
    assert cfg.seed == 1 and cfg.opt.lr == pytest.approx(5e-4)
    data = {"opt": {"lr": 0.1}}
    assert tc.apply_overrides(Root, data, ["opt.steps=5"]) == {"opt": {"lr": 0.1, "steps": 5}}
    assert data == {"opt": {"lr": 0.1}}
    assert tc.with_overrides(cfg, ["name=other"]).name == "other" and cfg.name == "run"


# --------------------------------------------------------------------------- override parsing
def test_override_values_are_yaml_with_strict_types():
    cfg = _load("opt.steps=2e5", "opt.lr=1", "extra.mode=y", "extra.anything=3e-4", "name=")
    assert cfg.opt.steps == 200_000 and isinstance(cfg.opt.steps, int)
    assert cfg.opt.lr == 1.0 and isinstance(cfg.opt.lr, float)
    assert cfg.extra == {"mode": "y", "anything": pytest.approx(3e-4)}  # untyped keys still read numbers
    assert cfg.name == ""
    assert tc.parse_override(" opt.lr = 3e-4") == ("opt.lr", "3e-4")  # YAML 1.1: a string, read at check
    assert tc.build(Opt, {"lr": "1e-3"}).lr == pytest.approx(1e-3)  # the same in a file


@pytest.mark.parametrize("override, message", [
    ("opt.steps=1.5", "opt.steps must be an integer, got float 1.5"),
    ("opt.steps=true", "opt.steps must be an integer, got bool True"),
    ("opt.lr=fast", "opt.lr must be a number, got str 'fast'"),
    ("verbose=1", "verbose must be true or false, got int 1"),
    ("name=3", "name must be a string, got int 3"),
    ("opt.layers=8", "opt.layers must be a list of integers, got int 8"),
    ("opt.layers=[8, x]", r"opt.layers\[1\] must be an integer, got str 'x'"),
    ("opt.betas=[0.9]", r"opt.betas must have 2 entries, got 1: \[0.9\]"),
    ("opt.betas=0.9", "opt.betas must be a list of 2 numbers"),
    ("probe.pair=[3]", r"probe.pair must be an integer or a list \[an integer, a string\], got list"),
    ("extra.count=x", "extra.count must be a number"),  # `types` overrides the int default
    ("opt.steps", "must look like key=value"),
    ("=3", "must look like key=value"),
    ("opt.lr=[1,", "cannot read value"),
])
def test_ill_typed_values_say_what_is_expected(override, message):
    with pytest.raises(ConfigError, match=message):
        _load(override)


# --------------------------------------------------------------------------- keys
@pytest.mark.parametrize("override, message", [
    ("nme=x", r"unknown key 'nme'; did you mean 'name'\?"),
    ("opt.lrr=1", r"unknown key 'opt.lrr'; did you mean 'opt.lr'\? \(valid keys of opt: betas,"),
    ("otp.lr=1", r"unknown section 'otp'; did you mean 'opt'\? \(valid top-level keys:"),
    ("layer=[1]", r"unknown key 'layer'; did you mean 'opt.layers'\?"),
    ("extra.alpah=1", r"unknown key 'extra.alpah'; did you mean 'extra.alpha'\? \(valid kind a arguments"),
    ("alpah=1", r"unknown key 'alpah'; did you mean 'extra.alpha'\?"),
    ("learning_rat=1", r"unknown key 'learning_rat'; did you mean 'learning_rate'"),  # aliases too
    ("zzz=1", r"unknown key 'zzz' \(write section.key with a section among opt, probe, extra, or a "
              r"top-level key: name, kind, seed, verbose\)"),
])
def test_unknown_keys_are_refused_with_suggestions(override, message):
    with pytest.raises(ConfigError, match=rf"override '{re.escape(override)}': {message}"):
        _load(override)


def test_bare_keys_resolve_when_unique_and_ambiguous_ones_name_the_candidates():
    cfg = _load("lr=0.5", "layers=[2]", "pair=7", "alpha=1.5", "seed=3")
    assert (cfg.opt.lr, cfg.opt.layers, cfg.probe.pair, cfg.extra["alpha"]) == (0.5, [2], 7, 1.5)
    assert cfg.seed == 3 and cfg.opt.seed == 0  # a top-level key is a full key, never ambiguous
    with pytest.raises(ConfigError, match="key 'steps' is ambiguous; write one of opt.steps, probe.steps"):
        _load("steps=5")
    assert tc.aliases(Root) == {"learning_rate": "opt.lr"}


def test_dict_section_keys_come_from_the_callback_for_the_config_at_hand():
    assert _load("kind=b", "beta=2").extra == {"beta": 2.0}
    with pytest.raises(ConfigError, match=r"unknown key 'extra.alpha' \(valid kind b arguments: beta, count"):
        _load("kind=b", "extra.alpha=1")
    # Keys a file sets are checked against the file's own `kind`.
    with pytest.raises(ConfigError, match=r"unknown key 'extra.alpha' \(valid kind b"):
        tc.build(Root, {"kind": "b", "extra": {"alpha": 1}})
    with pytest.raises(ConfigError, match="extra.device cannot be set: the runner sets it"):
        _load("extra.device=cpu")
    with pytest.raises(ConfigError, match="extra.device cannot be set"):
        _load("device=cpu")  # a bare key the program sets is resolved so that the refusal says why
    with pytest.raises(ConfigError, match="extra must be a mapping of kind a arguments, got list"):
        tc.build(Root, {"extra": [1]})


def test_overrides_that_name_nothing_are_refused():
    cases = {
        "opt.lr.x=1": "opt.lr is a setting, not a section; write opt.lr=value",
        "extra.alpha.x=1": "extra.alpha is a setting, not a section",
        "opt=3": r"opt is a section: set one of its keys \(opt.KEY=value\)",
        "extra=3": "extra is a section",
        "opt={lrr: 1}": "unknown key 'opt.lrr'",
    }
    for override, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            _load(override)
    assert _load("opt={lr: 0.5, steps: 3}").opt == Opt(lr=0.5, steps=3)  # a mapping fills a section


# --------------------------------------------------------------------------- files
def test_yaml_files_with_clear_errors(tmp_path):
    path = tmp_path / "c.yaml"
    with pytest.raises(ConfigError, match="c.yaml does not exist"):
        tc.load(Root, path)
    with pytest.raises(ConfigError, match="is a folder"):
        tc.read_yaml(tmp_path)
    path.write_text("opt: {lr: [1,\n")
    with pytest.raises(ConfigError, match="c.yaml is not valid YAML"):
        tc.load(Root, path)
    path.write_text("- 1\n")
    with pytest.raises(ConfigError, match="must hold a mapping at the top level"):
        tc.load(Root, path)
    path.write_text("opt: 3\n")
    with pytest.raises(ConfigError, match="c.yaml: opt must be a mapping, got int 3"):
        tc.load(Root, path)
    path.write_text("opt:\n  lrr: 1\n")
    with pytest.raises(ConfigError, match=r"c.yaml: unknown key 'opt.lrr'; did you mean 'opt.lr'"):
        tc.load(Root, path, ["seed=1"])  # the file is named even when overrides follow
    path.write_text("")
    assert tc.read_yaml(path) == {} and tc.load(Root, path) == Root()
    assert issubclass(ConfigError, InputError) and issubclass(ConfigError, ValueError)


# --------------------------------------------------------------------------- renamed keys, typed values
@dataclass
class Renamed:
    """A config one of whose keys was renamed."""

    num_threads: int = setting(0, "the key's name now", formerly=("threads",))
    opt: Opt = section(Opt, "optimiser")


def test_a_renamed_key_keeps_its_old_name_working_with_a_note(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tc, "_NOTED", set())
    assert tc.build(Renamed, {"threads": 2}).num_threads == 2  # a record that names the old key
    path = tmp_path / "old.yaml"
    path.write_text("threads: 2\n")
    assert tc.load(Renamed, path).num_threads == 2
    assert tc.load(Renamed, path, ["threads=3"]).num_threads == 3  # an override wins, either name
    assert tc.load(Renamed, path, ["num_threads=3"]).num_threads == 3
    assert capsys.readouterr().err.count("note: config key threads is now num_threads") == 1  # noted once
    with pytest.raises(ConfigError, match="threads is the old name of num_threads: give one"):
        tc.build(Renamed, {"threads": 2, "num_threads": 3})
    assert "(formerly: threads)" in tc.format_keys(Renamed)


@dataclass
class Trimmed:
    """An optimiser section two of whose settings were removed."""

    REMOVED_SETTINGS: ClassVar[dict[str, Removed]] = {
        "warmup": Removed(100, "never varied"), "fused": Removed(True, "always on")}

    lr: float = setting(1e-3, "learning rate")


@dataclass
class Slimmed:
    """A config whose section lost two settings."""

    opt: Trimmed = section(Trimmed, "optimiser")
    seed: int = setting(0, "seed")


def test_a_removed_key_at_its_value_reads_as_nothing_and_at_another_is_refused(tmp_path):
    assert tc.build(Slimmed, {"opt": {"warmup": 100, "fused": True, "lr": 0.1}}) == Slimmed(Trimmed(0.1))
    path = tmp_path / "old.yaml"
    path.write_text("opt:\n  warmup: 50\n")
    with pytest.raises(ConfigError, match=r"old.yaml: opt.warmup=50 can no longer be set: opt.warmup was "
                                          r"removed \(never varied\) and the code now always runs as "
                                          r"opt.warmup=100; drop it"):
        tc.load(Slimmed, path)
    assert tc.load(Slimmed, None, ["opt.warmup=100", "fused=true", "opt.lr=0.5"]) == Slimmed(Trimmed(0.5))
    with pytest.raises(ConfigError, match=r"override 'fused=1': opt.fused=1 can no longer be set"):
        tc.load(Slimmed, None, ["fused=1"])  # 1 is not True
    with pytest.raises(ConfigError, match=r"unknown key 'fuse'"):
        tc.load(Slimmed, None, ["fuse=true"])
    assert "warmup" not in tc.format_keys(Slimmed)


def test_typed_values_are_set_after_the_overrides_and_checked():
    cfg = tc.load(Root, None, ["seed=3", "verbose=true"], {"seed": 5})
    assert cfg.seed == 5 and cfg.verbose is True
    with pytest.raises(ConfigError, match="seed"):
        tc.load(Root, None, (), {"seed": "five"})


# --------------------------------------------------------------------------- listing
def test_describe_lists_every_key_with_type_default_and_help():
    rows = {s.path: s for s in tc.describe_settings(Root)}
    assert rows["opt.betas"] == tc.Setting("opt.betas", tuple[float, float], (0.9, 0.99), "Adam betas")
    assert rows["opt.lr"].aliases == ("learning_rate",)
    assert rows["extra.count"].type is float and rows["extra.anything"].type is Any
    assert "extra.beta" not in rows
    assert "extra.beta" in {s.path for s in tc.describe_settings(Root, _load("kind=b"))}
    text = tc.format_keys(Root)
    assert "opt.lr" in text and "learning rate (also: learning_rate)" in text and "[0.9, 0.99]" in text
    assert len(text.splitlines()) == len(rows)


def test_a_field_without_help_is_a_programming_error():
    @dataclass
    class Bare:
        """No help."""

        x: int = 1

    with pytest.raises(TypeError, match="Bare.x has no help"):
        tc.build(Bare, {})


# --------------------------------------------------------------------------- the project's configs
def test_project_configs_document_every_key():
    from rpg_env.experts.config import ExpertConfig
    from rpg_worldmodel.config import WorldModelConfig

    for cls in (ExpertConfig, WorldModelConfig):
        assert all(s.help for s in tc.describe_settings(cls))


ROOT = Path(__file__).resolve().parents[1]
#: Shipped expert configs: each lists what differs from ExpertConfig's defaults (its dict sections,
#: env and hyperparams, whole).
EXPERT_CONFIGS = sorted([*ROOT.glob("rpg_env/experts/configs/*.yaml"),
                         *ROOT.glob("rpg_worldmodel/configs/dream_*.yaml")])
#: What shipped expert runs used, every value written out by to_yaml (records, not sources).
EXPERT_RECORDS = sorted([*ROOT.glob("rpg_env/experts/pretrained/*/config.yaml"),
                         *ROOT.glob("rpg_worldmodel/pretrained/*/config.yaml")])


def _defaults_restated(listed: dict, defaults: dict, prefix: str = "") -> list[str]:
    """Keys of a YAML mapping whose value is the config's default (dict sections, empty by
    default, are not defaults restated)."""
    same = []
    for key, value in listed.items():
        default = defaults.get(key)
        if isinstance(value, dict) and isinstance(default, dict):
            same += _defaults_restated(value, default, f"{prefix}{key}.") if default else []
        elif value == default:
            same.append(f"{prefix}{key}")
    return same


@pytest.mark.parametrize("path", EXPERT_CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_expert_configs_list_only_what_differs(path):
    from rpg_env.experts.config import ExpertConfig, load_expert_config

    listed = yaml.safe_load(path.read_text())
    if ":" in listed.get("env_id", ""):  # an env of another package (an extra, or Memory Gym)
        pytest.importorskip(listed["env_id"].split(":")[0])
    assert _defaults_restated(listed, ExpertConfig().to_dict()) == []
    assert load_expert_config(path=path).to_dict() == tc.to_dict(tc.build(ExpertConfig, listed))


#: Expert settings added after the shipped experts were trained, at the value they trained with.
ADDED_SINCE_SHIPPED = {"device": "cpu", "wrappers": []}
#: The same for the memory section (a record of before lacks them).
MEMORY_ADDED_SINCE_SHIPPED = {"input_layer": False, "separate_heads": False}


def _with_added(recorded: dict) -> dict:
    """``recorded`` with the settings added since it was written, at the values it trained with."""
    memory = {**MEMORY_ADDED_SINCE_SHIPPED, **recorded["memory"]} if "memory" in recorded else None
    return {**ADDED_SINCE_SHIPPED, **recorded, **({"memory": memory} if memory else {})}


@pytest.mark.parametrize("path", EXPERT_RECORDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_expert_records_load_unchanged(path):
    from rpg_env.experts.config import load_expert_config

    cfg = load_expert_config(path=path)
    recorded = yaml.safe_load(path.read_text())
    assert cfg.to_dict() == _with_added(recorded)  # a record of before lacks them
    # written by to_yaml: the same text again, once the settings added since it was written are left out
    written = yaml.safe_load(cfg.to_yaml())
    again = {k: v for k, v in written.items() if k in recorded or k not in ADDED_SINCE_SHIPPED}
    if "memory" in again:
        again["memory"] = {k: v for k, v in again["memory"].items()
                           if k in recorded["memory"] or k not in MEMORY_ADDED_SINCE_SHIPPED}
    assert again == recorded


def test_algorithm_configs_resolve_to_their_shipped_settings():
    """What `load_expert_config(algo)` gives, pinned when the files were cut down to their differences."""
    from rpg_env.experts.config import load_expert_config

    dqn, ppo = load_expert_config("dqn"), load_expert_config("ppo")
    def run(cfg):
        return cfg.algo, cfg.seed, cfg.total_timesteps, cfg.frame_stack, cfg.checkpoint_freq

    assert run(dqn) == ("dqn", 0, 200_000, 5, 50_000) and run(ppo) == ("ppo", 1, 300_000, 2, 100_000)
    assert (dqn.eval.freq, ppo.eval.freq, dqn.eval.episodes, ppo.eval.episodes) == (20_000, 40_000, 20, 20)
    assert dqn.env == ppo.env == {"vision_radius": 4, "co_policy": "random"}
    assert dqn.hyperparams["exploration_final_eps"] == 0.02 and ppo.hyperparams["n_steps"] == 128
    assert len(EXPERT_CONFIGS) == 22 and len(EXPERT_RECORDS) >= 3
