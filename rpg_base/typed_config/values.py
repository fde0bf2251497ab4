"""Checking one config value against its field's type (see `rpg_base.typed_config`)."""

from __future__ import annotations

import re
import typing
from types import UnionType
from typing import Any, NamedTuple

from rpg_base.errors import InputError

_NONE = type(None)
_UNIONS = (typing.Union, UnionType)
# The scientific notation YAML 1.1 reads as a string: no dot or no exponent sign (3e-4, 1e5).
_SCIENTIFIC = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
_NOUNS = {bool: ("true or false", "true/false values"), int: ("an integer", "integers"),
          float: ("a number", "numbers"), str: ("a string", "strings")}


class ConfigError(InputError):
    """A config file, value or override that cannot be used; the message says what to change."""


class Removed(NamedTuple):
    """A key a config no longer has: the ``value`` its code now always runs with, and ``why`` the
    setting went (what was measured, and where). A config class lists them by name in a class
    attribute ``REMOVED_SETTINGS``."""

    value: Any
    why: str


def _same_value(a: Any, b: Any) -> bool:
    """Equal as config values: lists and tuples alike, a bool only equal to a bool."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def check_removed(path: str, value: Any, gone: Removed) -> None:
    """Nothing when ``value`` of the removed key ``path`` is the one the code now always runs with
    (a record or file of before simply named it); else `ConfigError` in one line: which key, which
    value, what to do."""
    if not _same_value(value, gone.value):
        raise ConfigError(f"{path}={value!r} can no longer be set: {path} was removed ({gone.why}) and "
                          f"the code now always runs as {path}={gone.value!r}; drop it, or use an older "
                          f"version of the package for what needs it")


def infer_type(default: Any) -> Any:
    """The config type a default stands for: its scalar type, else `Any` (None, objects, ...)."""
    return type(default) if type(default) in _NOUNS else Any


def check_value(value: Any, annotation: Any, path: str) -> Any:
    """``value`` as ``annotation`` asks for it, or `ConfigError` naming ``path``."""
    if annotation is Any:
        return _number(value)
    origin = typing.get_origin(annotation)
    if origin in _UNIONS:
        arms = typing.get_args(annotation)
        if value is None and _NONE in arms:
            return None
        for arm in arms:
            try:
                return check_value(value, arm, path)
            except ConfigError:
                continue
        raise _type_error(path, annotation, value)
    if origin in (list, tuple):
        return _check_sequence(value, annotation, path)
    if annotation not in _NOUNS:
        raise TypeError(f"{path}: config fields cannot be of type {annotation!r}")
    checked = _number(value) if annotation in (int, float) else value
    if annotation is int and isinstance(checked, float) and checked.is_integer():
        checked = int(checked)
    if annotation is float and isinstance(checked, int) and not isinstance(checked, bool):
        checked = float(checked)
    if not isinstance(checked, annotation) or (annotation is not bool and isinstance(checked, bool)):
        raise _type_error(path, annotation, value)
    return checked


def _number(value: Any) -> Any:
    return float(value) if isinstance(value, str) and _SCIENTIFIC.fullmatch(value.strip()) else value


def _check_sequence(value: Any, annotation: Any, path: str) -> list | tuple:
    if not isinstance(value, (list, tuple)):
        raise _type_error(path, annotation, value)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list or (len(args) == 2 and args[1] is Ellipsis):
        items = [args[0] if args else Any] * len(value)
    else:
        if len(value) != len(args):
            raise ConfigError(f"{path} must have {len(args)} entries, got {len(value)}: {list(value)}")
        items = list(args)
    checked = [check_value(v, t, f"{path}[{i}]") for i, (v, t) in enumerate(zip(value, items, strict=True))]
    return checked if origin is list else tuple(checked)


def _phrase(annotation: Any, plural: bool = False) -> str:
    if annotation is Any:
        return "any values" if plural else "any value"
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in _UNIONS:
        words = [_phrase(a, plural) for a in args if a is not _NONE]
        return " or ".join(words + (["null"] if _NONE in args else []))
    if typing.get_origin(annotation) in (list, tuple):
        if typing.get_origin(annotation) is tuple and args and args[-1] is not Ellipsis:
            fixed = len(set(args)) == 1
            inner = f"of {len(args)} {_phrase(args[0], True)}" if fixed else \
                "[" + ", ".join(_phrase(a) for a in args) + "]"
        else:
            inner = f"of {_phrase(args[0] if args else Any, True)}"
        return f"{'lists' if plural else 'a list'} {inner}"
    return _NOUNS[annotation][plural]


def _got(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {value!r}"


def _type_error(path: str, annotation: Any, value: Any) -> ConfigError:
    return ConfigError(f"{path} must be {_phrase(annotation)}, got {_got(value)}")
