"""YAML that people hand us (trainer configs, team specs, KEY=VALUE settings), read as plain data only.

Refused, each as one `YamlDataError` line the caller prefixes with where the text came from: aliases
(`*name`: a few bytes of them expand to billions of items), a key given twice in one mapping (the last
would win without a word), nesting deeper than the parser's stack, and files that are not UTF-8 text.
The loader is PyYAML's safe one (libyaml's where installed): tags such as `!!python/object` are errors.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1 << 20  # a config or a spec is a page of text, not a data set

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster


class YamlDataError(ValueError):
    """YAML text that is not plain data; the message says what to change."""


class _StrictLoader(_Base):
    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: the safe loader's own error says so
                break
            if repeated:
                raise YamlDataError(f"key {key!r} is given twice (line {key_node.start_mark.line + 1}); keep one")
            seen.add(key)
        return super().construct_mapping(node, deep)


def plain_yaml(text: str) -> Any:
    """The data in `text`; see the module docstring for what is refused."""
    try:
        for event in yaml.parse(text, Loader=_Base):
            if isinstance(event, yaml.AliasEvent):
                raise YamlDataError(f"YAML aliases (*{event.anchor}) are not allowed; write the value out "
                                    "where it is used")
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise YamlDataError(f"not valid YAML{where}: {' '.join(str(getattr(e, 'problem', None) or e).split())}") \
            from None
    except RecursionError:
        raise YamlDataError("the YAML is nested too deeply to be a config or a spec") from None


def read_yaml(path: Path, what: str) -> Any:
    """The plain data in the file at `path` (`read_text`, then `plain_yaml`); a parse error names the path."""
    text = read_text(path, what)
    try:
        return plain_yaml(text)
    except YamlDataError as e:
        raise YamlDataError(f"{path}: {e}") from None


def read_text(path: Path, what: str) -> str:
    """A regular file of at most MAX_BYTES of UTF-8 text; `what` names it in the errors ("config file")."""
    if not path.exists():
        raise YamlDataError(f"{what} {path} does not exist")
    if not path.is_file():
        raise YamlDataError(f"{what} {path} is not a regular file")
    with path.open("rb") as f:  # read no further than the cap: /proc files report size 0, others may grow
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise YamlDataError(f"{what} {path} has over {MAX_BYTES} bytes; a config or spec is at most that")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlDataError(f"{what} {path} is not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start})") \
            from None
