"""Environment registry: versioned ids ("Name-vN") mapped to "module:callable" entry points."""
from __future__ import annotations

import functools
import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

_ID = re.compile(r"^(?:[\w.-]+/)?[A-Za-z][\w.]*-v\d+$")


@dataclass(frozen=True)
class EnvSpec:
    id: str
    entry_point: str | Callable[..., Any]
    kwargs: dict = field(default_factory=dict)
    description: str = ""
    scripted_policy: str | None = None  # "module:callable(env) -> TextPolicy", used by `mappa run`

    def make(self, **kwargs):
        return load_callable(self.entry_point)(**{**self.kwargs, **kwargs})


def load_callable(target: str | Callable[..., Any]) -> Callable[..., Any]:
    """Resolve "package.module:attr" to the object (callables pass through)."""
    if callable(target):
        return target
    module, sep, attr = target.partition(":")
    if not sep:
        raise ValueError(f"{target!r} is not of the form 'package.module:attr'")
    return getattr(importlib.import_module(module), attr)


registry: dict[str, EnvSpec] = {}


def register(env_id: str, entry_point: str | Callable[..., Any], *, description: str = "",
             scripted_policy: str | None = None, **default_kwargs) -> None:
    """Register `env_id` ("Name-vN"); `entry_point` is "module:callable" or a callable.

    `default_kwargs` go to the entry point (callers of `make` override them); `scripted_policy` names a
    "module:callable" that builds a built-in policy for the env (for smoke runs and tests).
    """
    if not _ID.match(env_id):
        raise ValueError(f"env id {env_id!r} must look like 'Name-v0' (a name, '-v', a version number)")
    registry[env_id] = EnvSpec(env_id, entry_point, dict(default_kwargs), description, scripted_policy)
    try:  # also reachable as pettingzoo.make("aec", "mappa/<id>"); the lookup happens at make time
        import pettingzoo

        pz_id = env_id if "/" in env_id else f"mappa/{env_id}"  # a namespaced id keeps its own namespace
        if pz_id not in pettingzoo.aec_registry:
            pettingzoo.register("aec", pz_id, entry_point=functools.partial(make, env_id))
    except (ImportError, AttributeError):  # PettingZoo < 1.26 has no registry
        pass


def spec(env_id: str) -> EnvSpec:
    if env_id not in registry:
        known = ", ".join(sorted(registry)) or "(none)"
        raise KeyError(f"unknown env id {env_id!r}; registered ids: {known}")
    return registry[env_id]


def make(env_id: str, **kwargs):
    """Create a registered environment; `kwargs` override the spec's defaults."""
    return spec(env_id).make(**kwargs)
