"""Fields, building, overrides, YAML and listing of typed configs (see `rpg_base.typed_config`)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import functools
import inspect
import sys
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import yaml

from rpg_base.typed_config.values import ConfigError, Removed, _got, check_removed, check_value, infer_type

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class DictKeys:
    """What a dict section accepts: the keys ``defaults(root)`` returns, typed like their defaults."""

    defaults: Callable[[Any], Mapping[str, Any]]  #: root config -> valid key -> default
    types: Mapping[str, Any] = dataclasses.field(default_factory=dict)  #: types defaults cannot tell
    fixed: Mapping[str, str] = dataclasses.field(default_factory=dict)  #: key -> why it cannot be set
    label: Callable[[Any], str] | None = None  #: root config -> what the keys are, for messages

    def type_of(self, key: str, default: Any) -> Any:
        return self.types.get(key, infer_type(default))

    def what(self, root: Any, path: str) -> str:
        return self.label(root) if self.label else f"keys of {path}"


class Setting(NamedTuple):
    """One settable key, as `describe_settings` lists it."""

    path: str
    type: Any
    default: Any
    help: str
    aliases: tuple[str, ...] = ()
    formerly: tuple[str, ...] = ()


class _Field(NamedTuple):
    kind: str  # "value", "section" or "dict"
    type: Any
    help: str
    aliases: tuple[str, ...]
    keys: DictKeys | None
    formerly: tuple[str, ...] = ()


# --------------------------------------------------------------------------- declaring fields
def setting(default: Any, help: str, *, aliases: Sequence[str] = (), formerly: Sequence[str] = ()) -> Any:
    """A typed field with its default and one-line help; ``aliases`` are extra override keys;
    ``formerly`` the names the key had before: a file or an override that still uses one sets the
    key, with a one-line note (`renamed`)."""
    meta = {"help": help, "aliases": tuple(aliases), "formerly": tuple(formerly)}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def section(cls: type, help: str) -> Any:
    """A nested dataclass section with its one-line help."""
    return dataclasses.field(default_factory=cls, metadata={"help": help})


def dict_section(help: str, defaults: Callable[[Any], Mapping[str, Any]], *,
                 types: Mapping[str, Any] | None = None, fixed: Mapping[str, str] | None = None,
                 label: Callable[[Any], str] | None = None) -> Any:
    """A ``dict[str, Any]`` section whose valid keys come from ``defaults(root)`` (see `DictKeys`)."""
    keys = DictKeys(defaults, dict(types or {}), dict(fixed or {}), label)
    return dataclasses.field(default_factory=dict, metadata={"help": help, "keys": keys})


@functools.cache
def _fields(cls: type) -> dict[str, _Field]:
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if not f.metadata.get("help"):
            raise TypeError(f"{cls.__name__}.{f.name} has no help: declare it with setting()/section()")
        kind = "dict" if "keys" in f.metadata else "section" if dataclasses.is_dataclass(hints[f.name]) \
            else "value"
        out[f.name] = _Field(kind, hints[f.name], f.metadata["help"], f.metadata.get("aliases", ()),
                             f.metadata.get("keys"), f.metadata.get("formerly", ()))
    return out


# --------------------------------------------------------------------------- renamed and removed keys
#: Old key names already noted in this process: each is noted once.
_NOTED: set[str] = set()


def note_renamed(old: str, new: str, what: str = "config key") -> None:
    """Say once per process, on stderr, that ``old`` (still accepted) is now called ``new``."""
    if old not in _NOTED:
        _NOTED.add(old)
        print(f"note: {what} {old} is now {new} (the old name still works)", file=sys.stderr)


def renamed(cls: type, data: Any, prefix: str = "") -> Any:
    """The raw mapping ``data`` (a file's, a record's) with each key under the name it has now: a
    field's ``formerly`` names become its own (noted), a removed key holding the value the code now
    always runs with is dropped (`check_removed`: any other value is refused); anything else is left
    as it is."""
    if not isinstance(data, Mapping):
        return data
    fields, out, gone = _fields(cls), {}, getattr(cls, "REMOVED_SETTINGS", {})
    old_names = {old: name for name, info in fields.items() for old in info.formerly}
    for key, value in data.items():
        if key in gone and key not in fields:
            check_removed(_join(prefix, key), value, gone[key])
            continue
        name = old_names.get(key, key)
        if name != key:
            if name in data:
                raise ConfigError(f"{_join(prefix, key)} is the old name of {_join(prefix, name)}: give one")
            note_renamed(_join(prefix, key), _join(prefix, name))
        info = fields.get(name)
        section_ = info is not None and info.kind == "section"
        out[name] = renamed(info.type, value, _join(prefix, name)) if section_ else value
    return out


# --------------------------------------------------------------------------- messages
def _unknown(path: str, valid: Sequence[str], label: str, what: str = "key") -> ConfigError:
    """Unknown ``path`` among the sibling paths ``valid``: the closest ones, then all of them."""
    by_leaf = {p.rsplit(".", 1)[-1]: p for p in valid}
    close = difflib.get_close_matches(path.rsplit(".", 1)[-1], list(by_leaf), n=3)
    hint = f"; did you mean {', '.join(repr(by_leaf[c]) for c in close)}?" if close else ""
    return ConfigError(f"unknown {what} {path!r}{hint} (valid {label}: {', '.join(sorted(by_leaf))})")


def _siblings_label(prefix: str) -> str:
    return f"keys of {prefix}" if prefix else "top-level keys"


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


# --------------------------------------------------------------------------- building
@contextlib.contextmanager
def _named(source: str | None) -> Iterator[None]:
    """Prefix the message of a `ConfigError` raised inside with ``source`` (a file, an override)."""
    try:
        yield
    except ConfigError as err:
        if not source:
            raise
        raise ConfigError(f"{source}: {err}") from None


def build(cls: type[T], data: Mapping[str, Any] | None, source: str | None = None) -> T:
    """Type-check a nested mapping (e.g. parsed YAML) into ``cls``; missing keys keep their defaults.

    Range checks are the config's own ``validate()``, which this does not call; ``source``
    (a file name) prefixes every error.
    """
    with _named(source):
        pending: list[tuple[Any, str, DictKeys, Any, str]] = []
        cfg = _build_section(cls, renamed(cls, data), "", pending)
        for owner, name, keys, values, path in pending:
            setattr(owner, name, _build_dict(cfg, keys, values, path))
        return cfg


def _build_section(cls: type[T], data: Any, prefix: str, pending: list) -> T:
    """Build ``cls`` from ``data``; dict sections are queued in ``pending`` until the root exists."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        where = f"{prefix} must be a mapping" if prefix else "expected a mapping at the top level"
        raise ConfigError(f"{where}, got {_got(data)}")
    fields = _fields(cls)
    kwargs, dicts = {}, []
    for key, value in data.items():
        path = _join(prefix, key)
        info = fields.get(key)
        if info is None:
            raise _unknown(path, [_join(prefix, f) for f in fields], _siblings_label(prefix))
        if info.kind == "section":
            kwargs[key] = _build_section(info.type, value, path, pending)
        elif info.kind == "dict":
            dicts.append((key, info.keys, value, path))
        else:
            kwargs[key] = check_value(value, info.type, path)
    obj = cls(**kwargs)
    pending.extend((obj, *entry) for entry in dicts)
    return obj


def _dict_key_type(keys: DictKeys, root: Any, path: str, key: str) -> Any:
    """The type of ``path.key`` in a dict section, or `ConfigError` when the key is not allowed."""
    if key in keys.fixed:
        raise ConfigError(f"{path}.{key} cannot be set: {keys.fixed[key]}")
    valid = keys.defaults(root)
    if key not in valid:
        raise _unknown(f"{path}.{key}", [f"{path}.{k}" for k in valid], keys.what(root, path))
    return keys.type_of(key, valid[key])


def _build_dict(root: Any, keys: DictKeys, values: Any, path: str) -> dict[str, Any]:
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ConfigError(f"{path} must be a mapping of {keys.what(root, path)}, got {_got(values)}")
    return {str(k): check_value(v, _dict_key_type(keys, root, path, str(k)), f"{path}.{k}")
            for k, v in values.items()}


# --------------------------------------------------------------------------- plain data and YAML
def to_dict(cfg: Any) -> dict[str, Any]:
    """The config as plain YAML/JSON-ready data (tuples become lists)."""
    return _plain(dataclasses.asdict(cfg))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def to_yaml(cfg: Any) -> str:
    """The resolved config as YAML, in field order; `load` reads it back to an equal config."""
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def write_yaml(cfg: Any, path: str | Path) -> None:
    """Write `to_yaml` of ``cfg`` to ``path``."""
    Path(path).write_text(to_yaml(cfg))


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML file (empty file: ``{}``), or `ConfigError` saying what is wrong."""
    path = Path(path)
    if not path.is_file():
        why = "is a folder, not a YAML file" if path.is_dir() else "does not exist"
        raise ConfigError(f"config file {path} {why}")
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ConfigError(f"config file {path} is not valid YAML: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level (key: value lines), "
                          f"got {type(data).__name__}")
    return data


# --------------------------------------------------------------------------- overrides
def parse_override(text: str) -> tuple[str, Any]:
    """``"env.vision_radius=3"`` -> ``("env.vision_radius", 3)``: the value is read as YAML, empty as ''."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r} must look like key=value or section.key=value "
                          f"(e.g. seed=1, train.lr=3e-4)")
    try:
        return key, yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"override {text!r}: cannot read value {raw!r} as YAML ({err}); "
                          f"quote it if it is a string") from None


def aliases(cls: type) -> dict[str, str]:
    """Every alias of ``cls`` and its nested sections -> the dotted key it stands for."""
    out = {}
    for name, info in _fields(cls).items():
        out.update(dict.fromkeys(info.aliases, name))
        if info.kind == "section":
            out.update({a: f"{name}.{target}" for a, target in aliases(info.type).items()})
    return out


def former_keys(cls: type) -> dict[str, str]:
    """Every dotted key ``cls`` and its nested sections once had (``formerly``) -> the key now."""
    out = {}
    for name, info in _fields(cls).items():
        out.update(dict.fromkeys(info.formerly, name))
        if info.kind == "section":
            out.update({f"{name}.{old}": f"{name}.{new}" for old, new in former_keys(info.type).items()})
    return out


def apply_overrides(cls: type, data: Mapping[str, Any] | None, overrides: Sequence[str],
                    source: str | None = None) -> dict[str, Any]:
    """A copy of the raw mapping ``data`` with each ``key=value`` override checked and applied.

    ``source`` names ``data`` in errors about the data itself.
    """
    with _named(source):
        data = copy.deepcopy(dict(renamed(cls, data or {})))
    for text in overrides:
        key, value = parse_override(text)
        if (gone := _removed_key(cls, key)) is not None:
            with _named(f"override {text!r}"):
                check_removed(gone[0], value, gone[1])
            continue  # the value the code always runs with: nothing to set
        with _named(source):  # dict-key callbacks get the config with its dict sections empty
            root = _build_section(cls, data, "", [])
        with _named(f"override {text!r}"):
            _apply(cls, data, _resolve(cls, key, root), value, root)
    return data


def _keys_and_removed(cls: type, prefix: str = "") -> Iterator[tuple[str, Removed | None]]:
    """Every dotted key of ``cls`` and its sections, each removed one with its `Removed` (else None)."""
    yield from ((_join(prefix, key), gone) for key, gone in getattr(cls, "REMOVED_SETTINGS", {}).items())
    for name, info in _fields(cls).items():
        yield _join(prefix, name), None
        if info.kind == "section":
            yield from _keys_and_removed(info.type, _join(prefix, name))


def _removed_key(cls: type, key: str) -> tuple[str, Removed] | None:
    """The removed key an override names (dotted, or by its last part where no other key ends so)
    and what it was; None for any other key."""
    if key in aliases(cls) or key in former_keys(cls):
        return None
    named = [(path, gone) for path, gone in _keys_and_removed(cls)
             if path == key or ("." not in key and path.rsplit(".", 1)[-1] == key)]
    return named[0] if len(named) == 1 and named[0][1] is not None else None


def _resolve(cls: type, key: str, root: Any) -> list[str]:
    """The dotted path an override key names (see the module docstring for the rules)."""
    if key in former_keys(cls):
        note_renamed(key, former_keys(cls)[key])
        key = former_keys(cls)[key]
    key = aliases(cls).get(key, key)
    if "." in key or key in _fields(cls):
        return key.split(".")
    found = [s.path for s in _settings(cls, root) if s.path.rsplit(".", 1)[-1] == key]
    if not found:  # resolved so that the error says why the key cannot be set
        found = [p for p in _fixed_paths(cls) if p.rsplit(".", 1)[-1] == key]
    if len(found) > 1:
        raise ConfigError(f"key {key!r} is ambiguous; write one of {', '.join(found)}")
    if not found:
        raise _unknown_bare(cls, key, root)
    return found[0].split(".")


def _unknown_bare(cls: type, key: str, root: Any) -> ConfigError:
    spellings: dict[str, list[str]] = {alias: [alias] for alias in aliases(cls)}
    for s in _settings(cls, root):
        spellings.setdefault(s.path.rsplit(".", 1)[-1], []).append(s.path)
        spellings.setdefault(s.path, []).append(s.path)
    close = [p for c in difflib.get_close_matches(key, list(spellings), n=3) for p in spellings[c]]
    hint = f"; did you mean {', '.join(repr(p) for p in dict.fromkeys(close))}?" if close else ""
    sections = [n for n, f in _fields(cls).items() if f.kind != "value"]
    top = [n for n, f in _fields(cls).items() if f.kind == "value"]
    return ConfigError(f"unknown key {key!r}{hint} (write section.key with a section among "
                       f"{', '.join(sections)}, or a top-level key: {', '.join(top)})")


def _apply(cls: type, data: dict[str, Any], parts: list[str], value: Any, root: Any) -> None:
    """Check ``value`` for the key ``parts`` and store it in ``data``; a mapping fills a section."""
    kind, annotation = _lookup(cls, parts, root)
    path = ".".join(parts)
    if kind != "value":
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path} is a section: set one of its keys ({path}.KEY=value) "
                              f"or give a mapping ({path}={{KEY: value}})")
        for key, item in value.items():
            _apply(cls, data, [*parts, str(key)], item, root)
        return
    checked = check_value(value, annotation, path)
    node = data
    for depth, part in enumerate(parts[:-1]):
        if node.get(part) is None:
            node[part] = {}
        if not isinstance(node[part], dict):
            raise ConfigError(f"{'.'.join(parts[:depth + 1])} must be a mapping, got {_got(node[part])}")
        node = node[part]
    node[parts[-1]] = checked


def _lookup(cls: type, parts: list[str], root: Any, prefix: str = "") -> tuple[str, Any]:
    """(kind, type) of the key ``parts``: "value" and its type, or "section"/"dict" for a section."""
    path, rest = _join(prefix, parts[0]), parts[1:]
    info = _fields(cls).get(parts[0])
    if info is None:
        raise _unknown(path, [_join(prefix, f) for f in _fields(cls)], _siblings_label(prefix),
                       "section" if rest else "key")
    if info.kind == "section" and rest:
        return _lookup(info.type, rest, root, path)
    if info.kind == "dict" and len(rest) == 1:
        return "value", _dict_key_type(info.keys, root, path, rest[0])
    if rest:
        leaf = path if info.kind == "value" else f"{path}.{rest[0]}"
        raise ConfigError(f"{leaf} is a setting, not a section; write {leaf}=value")
    return info.kind, info.type


def with_overrides(cfg: T, overrides: Sequence[str]) -> T:
    """A new config: ``cfg`` with ``overrides`` applied (type-checked, not ``validate()``-d)."""
    return build(type(cfg), apply_overrides(type(cfg), to_dict(cfg), overrides))


def resolve(cls: type[T], data: Mapping[str, Any] | None, overrides: Sequence[str] = (),
            source: str | None = None, values: Mapping[str, Any] | None = None) -> T:
    """Defaults <- ``data`` (named ``source`` in errors) <- ``overrides`` <- ``values`` (typed
    top-level fields a program sets, e.g. from its command-line flags), then ``validate()`` if any."""
    cfg = build(cls, data, source)  # a bad file is named as such, before any override touches it
    if overrides:
        merged = apply_overrides(cls, data, overrides, source)
        cfg = build(cls, merged, f"{source or 'config'} with its overrides")
    if values:
        fields = _fields(cls)
        cfg = dataclasses.replace(cfg, **{key: check_value(value, fields[key].type, key)
                                          for key, value in values.items()})
    validate = getattr(cfg, "validate", None)
    if callable(validate):
        validate()
    return cfg


def load(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = (),
         values: Mapping[str, Any] | None = None) -> T:
    """`resolve` the YAML file at ``path`` (defaults alone when None) with ``overrides`` and ``values``."""
    data = read_yaml(path) if path is not None else {}
    return resolve(cls, data, overrides, None if path is None else str(path), values)


# --------------------------------------------------------------------------- listing
def _settings(cls: type, root: Any, obj: Any = None, prefix: str = "") -> Iterator[Setting]:
    """Every settable key below ``obj`` (an instance of ``cls``; default: its defaults)."""
    obj = cls() if obj is None else obj
    for name, info in _fields(cls).items():
        path = _join(prefix, name)
        if info.kind == "section":
            yield from _settings(info.type, root, getattr(obj, name), path)
        elif info.kind == "dict":
            for key, default in info.keys.defaults(root).items():
                yield Setting(f"{path}.{key}", info.keys.type_of(key, default), default, info.help)
        else:
            yield Setting(path, info.type, getattr(obj, name), info.help, info.aliases, info.formerly)


def _fixed_paths(cls: type, prefix: str = "") -> Iterator[str]:
    for name, info in _fields(cls).items():
        if info.kind == "section":
            yield from _fixed_paths(info.type, _join(prefix, name))
        elif info.kind == "dict":
            yield from (f"{_join(prefix, name)}.{key}" for key in info.keys.fixed)


def describe_settings(cls: type, root: Any = None) -> list[Setting]:
    """Every key of ``cls`` with its type, default and help; dict sections list the keys their
    callback gives for ``root`` (default: the default config)."""
    root = cls() if root is None else root
    return list(_settings(cls, root))


def format_keys(cls: type, root: Any = None) -> str:
    """`describe_settings` as aligned text lines (``key  type  default  help``), e.g. for a ``--help``
    epilog."""
    rows = [(s.path, _type_label(s.type), _show(s.default),
             s.help + (f" (also: {', '.join(s.aliases)})" if s.aliases else "")
             + (f" (formerly: {', '.join(s.formerly)})" if s.formerly else ""))
            for s in describe_settings(cls, root)]
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(3)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r[:3], widths, strict=True)) + "  " + r[3]
                     for r in rows)


def _type_label(annotation: Any) -> str:
    if annotation is Any:
        return "any"
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _show(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return "(required)"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return (value or "''") if isinstance(value, str) else repr(value)
