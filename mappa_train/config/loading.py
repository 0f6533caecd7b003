"""Loading the trainer's config: defaults, then a YAML file, then `key=value` overrides, each key and
value checked against its field's type; then the frozen tree is built and `validate` runs. Also
`help_lines` for `mappa train --help`.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal

from mappa_envs.yaml_data import YamlDataError, plain_yaml, read_yaml
from mappa_train.config.schema import ConfigError, TrainConfig
from mappa_train.config.validation import leaves_with_rules, validate


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """Defaults <- YAML file <- `key=value` overrides, then the frozen tree, then `validate`."""
    data = to_dict(TrainConfig())
    if path is not None:
        path = Path(path)
        try:
            loaded = read_yaml(path, "config file") or {}
        except YamlDataError as e:
            raise ConfigError(f"{e}{'' if path.exists() else ' (presets live in configs/*.yaml)'}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of config keys, got {type(loaded).__name__}")
        _merge(TrainConfig, data, loaded, where=f"{path}: ")
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} must look like key=value, e.g. learner.lr=1e-5")
        try:
            value = plain_yaml(raw) if raw.strip() else ""
        except YamlDataError as e:
            raise ConfigError(f"override {item!r}: {e}; quote a plain string, e.g. {key}='...'") from None
        node, parts = data, key.strip().split(".")
        within = _dict_field_depth(TrainConfig, parts)
        if within is not None:  # env.kwargs.split=eval: one key inside a dict-valued field, the rest kept
            _set_within(data, parts, within, value, key.strip())
            continue
        cls = _resolve(TrainConfig, parts)
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = _coerce(value, _field_type(cls, parts[-1]), key.strip())
    return from_dict(data)


def load_section(cls: type, data: dict, where: str) -> Any:
    """A config dataclass other than TrainConfig (e.g. `mappa ablate`'s preset) from a mapping, with
    the same key and type checks."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of {cls.__name__} keys, got {type(data).__name__}")
    full = dataclasses.asdict(cls())
    _merge(cls, full, data, where=f"{where}: ")
    node = _build(cls, full, "")
    for key, value, rule in leaves_with_rules(node):
        problem = rule(value)
        if problem:
            raise ConfigError(f"{where}: {key} {problem}, got {value!r}")
    return node


def to_dict(cfg: TrainConfig) -> dict:
    return dataclasses.asdict(cfg)


def from_dict(data: dict) -> TrainConfig:
    """Build (frozen) and validate a config from a complete or partial nested dict."""
    full = to_dict(TrainConfig())
    _merge(TrainConfig, full, data, where="")
    return validate(_build(TrainConfig, full, ""))


def help_lines(node: type = TrainConfig, prefix: str = "") -> list[str]:
    """'key (type, default): help' for every leaf field, for `mappa train --help`."""
    lines = []
    hints = typing.get_type_hints(node)
    for f in dataclasses.fields(node):
        if dataclasses.is_dataclass(hints[f.name]):
            lines += help_lines(hints[f.name], f"{prefix}{f.name}.")
        else:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            lines.append(f"{prefix}{f.name} = {default!r}  [{_type_name(hints[f.name])}]  {f.metadata.get('help', '')}")
    return lines


def _merge(cls: type, into: dict, data: dict, where: str, prefix: str = "") -> None:
    """Copy `data` over `into` (a dict shaped like `cls`), checking every key and value."""
    for key, value in data.items():
        full = f"{prefix}{key}"
        hint = _field_type(_resolve(cls, [str(key)], full_key=full, where=where), str(key))
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}{full} is a section; give it a mapping, got {value!r}")
            _merge(hint, into[key], value, where, f"{full}.")
        else:
            into[key] = _coerce(value, hint, f"{where}{full}" if where else full)


def _build(cls: type, data: dict, prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        value = data[f.name]
        kwargs[f.name] = _build(hints[f.name], value, f"{prefix}{f.name}.") if dataclasses.is_dataclass(hints[f.name]) \
            else _coerce(value, hints[f.name], f"{prefix}{f.name}")
    return cls(**kwargs)


def _dict_field_depth(cls: type, parts: list[str]) -> int | None:
    """The index of the part naming a dict-valued field when the key goes on inside it, else None."""
    node = cls
    for i, part in enumerate(parts[:-1]):
        if part not in {f.name for f in dataclasses.fields(node)}:
            return None  # _resolve says what is wrong
        hint = _field_type(node, part)
        if hint is dict:
            return i
        if not dataclasses.is_dataclass(hint):
            return None
        node = hint
    return None


def _set_within(data: dict, parts: list[str], depth: int, value: Any, key: str) -> None:
    """Set data[parts[0]]...[parts[-1]] = value, where parts[depth] is a dict field; inner dicts are made
    as needed, and an inner value that is not a mapping cannot be gone into."""
    node = data
    for part in parts[:depth + 1]:
        node = node[part]
    for i, part in enumerate(parts[depth + 1:-1], start=depth + 1):
        inner = node.setdefault(part, {})
        if not isinstance(inner, dict):
            raise ConfigError(f"override {key}: {'.'.join(parts[:i + 1])} is {inner!r}, not a mapping; "
                              f"set it whole, e.g. {'.'.join(parts[:i + 1])}={{...}}")
        node = inner
    node[parts[-1]] = value


def _resolve(cls: type, parts: list[str], full_key: str | None = None, where: str = "") -> type:
    """The dataclass that holds the last of `parts` (a dotted key), checking each part exists."""
    node = cls
    dotted = ".".join(parts)
    for i, part in enumerate(parts):
        names = [f.name for f in dataclasses.fields(node)]
        if part not in names:
            at = ".".join(parts[:i]) or "the top level"
            raise ConfigError(f"{where}unknown config key {full_key or dotted!r}: {at} has {', '.join(names)}")
        if i < len(parts) - 1:
            node = _field_type(node, part)
            if not dataclasses.is_dataclass(node):
                raise ConfigError(f"{'.'.join(parts[:i + 1])} is a value, not a section; cannot set {dotted!r}")
    if dataclasses.is_dataclass(_field_type(node, parts[-1])) and full_key is None:
        raise ConfigError(f"{dotted!r} is a section; set one of its keys, e.g. {dotted}.<key>=...")
    return node


def _field_type(cls: type, name: str) -> Any:
    return typing.get_type_hints(cls)[name]


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return " | ".join(map(str, typing.get_args(hint)))
    return getattr(hint, "__name__", str(hint))


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Check `value` against the field's type; ints become floats where a float is wanted."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        if value not in typing.get_args(hint):
            raise ConfigError(f"{key} must be one of {list(typing.get_args(hint))}, got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            try:
                return _coerce(value, option, key)
            except ConfigError:
                pass
        raise ConfigError(f"{key} must be {_type_name(hint)}, got {value!r}")
    if hint is type(None) and value is None:
        return None
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        return value
    if hint is float and isinstance(value, str):  # YAML 1.1 reads 1e-5 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is str and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    if hint is dict and isinstance(value, dict):
        return dict(value)
    if hint is list and isinstance(value, list):
        return list(value)
    raise ConfigError(f"{key} must be {_type_name(hint)}, got {value!r} ({type(value).__name__})")
