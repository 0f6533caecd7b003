"""Environment registry: versioned ids ("Name-vN") mapped to "module:callable" entry points."""
from __future__ import annotations

import functools
import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mappa_envs.errors import EnvArgumentError, MappaError, UnknownEnvError

_ID = re.compile(r"^(?:[\w.-]+/)?[A-Za-z][\w.]*-v\d+\Z")


@dataclass(frozen=True)
class EnvSpec:
    id: str
    entry_point: str | Callable[..., Any]
    kwargs: dict = field(default_factory=dict)
    description: str = ""
    scripted_policy: str | None = None  # "module:callable(env) -> TextPolicy", used by `mappa run`
    task_sources: tuple[str, ...] = ()  # what its `tasks=` (else what picks its tasks) takes: `mappa envs`
    faults: str | None = None  # "module:attr" -> a coach_eval.faults.Faults: `mappa blame`, `mappa coach-eval`

    def make(self, **kwargs):
        """The env, built with the spec's default kwargs overridden by `kwargs` (names checked first)."""
        entry = load_callable(self.entry_point)
        merged = {**self.kwargs, **kwargs}
        accepted = accepted_kwargs(entry)
        unknown = sorted(set(merged) - accepted) if accepted is not None else []
        if unknown:
            raise EnvArgumentError(f"{self.id} got unknown keyword argument(s) {unknown}; "
                                   f"it accepts {sorted(accepted)}")
        return entry(**merged)


def accepted_kwargs(entry: Callable[..., Any]) -> set[str] | None:
    """The keyword arguments `entry` takes, or None when it takes any (a `**kwargs` that leads nowhere known).

    For a class whose `__init__` forwards `**kwargs` to its base (DSBenchEnv -> PipelineEnv), the base's
    optional parameters count too; its required ones are the subclass's to fill.
    """
    chain = [c.__init__ for c in inspect.getmro(entry) if "__init__" in vars(c)] if inspect.isclass(entry) else [entry]
    names: set[str] = set()
    for depth, fn in enumerate(chain):
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            return None
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
                  and (depth == 0 or p.default is not p.empty)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return names
        if fn is object.__init__:
            break
    return None


def resolve(target: str, what: str = "", error: type[MappaError] = EnvArgumentError,
            expected: str = "expected 'package.module:attr'") -> Any:
    """The object a "package.module:attr" string names: the one resolver of such strings (entry points,
    scripted policies, scenarios, prompts, team and policy factories). A malformed string, a module
    that does not exist or a missing attribute raise `error` with one line ("WHAT 'TARGET': why"); a
    missing dependency of the module keeps its ModuleNotFoundError, which names the package to install."""
    where = f"{what} {target!r}" if what else repr(target)
    module, sep, attr = target.partition(":") if isinstance(target, str) else ("", "", "")
    if not sep or not module or not attr:
        raise error(f"{where}: {expected}")
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or not (module == e.name or module.startswith(e.name + ".")):
            raise
        raise error(f"{where}: cannot import {module} ({e})") from None
    try:
        return getattr(loaded, attr)
    except AttributeError:
        raise error(f"{where}: {module} has no {attr!r}") from None


def load_callable(target: str | Callable[..., Any]) -> Callable[..., Any]:
    """Resolve "package.module:attr" to the object (callables pass through); see `resolve`."""
    return target if callable(target) else resolve(target)


registry: dict[str, EnvSpec] = {}

# The scenarios a team spec may name (`scenario: NAME`, or the entry point's own "module:callable"):
# trusted factories, so a spec can choose among them without naming code to call.
scenarios: dict[str, str | Callable[..., Any]] = {
    "chain": "mappa_envs.chain.env:make_scenario",
    "codetest": "mappa_envs.codetest.env:make_scenario",
    "dsbench": "mappa_envs.dsbench.env:make_scenario",
    "mathchat": "mappa_envs.mathchat.env:make_scenario",
}
_SCENARIO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def register_scenario(name: str, entry_point: str | Callable[..., Any]) -> None:
    """Let team specs name a scenario factory (`scenario: NAME`): "module:callable" or a callable that
    takes the spec's `scenario_args` (and `team`, if its signature has it) and returns a Scenario."""
    if not isinstance(name, str) or not _SCENARIO_NAME.match(name):
        raise EnvArgumentError(f"scenario name {name!r} must be an identifier (letters, digits, _)")
    scenarios[name] = entry_point


def registered_scenario(target: str) -> Callable[..., Any] | None:
    """The factory of a registered scenario, named by its name or by its "module:callable"; else None."""
    entry = scenarios.get(target)
    if entry is None:
        entry = next((e for e in scenarios.values() if isinstance(e, str) and e == target), None)
    return None if entry is None else load_callable(entry)


def register(env_id: str, entry_point: str | Callable[..., Any], *, description: str = "",
             scripted_policy: str | None = None, task_sources: tuple[str, ...] = (), faults: str | None = None,
             **default_kwargs) -> None:
    """Register `env_id` ("Name-vN"); `entry_point` is "module:callable" or a callable.

    `default_kwargs` go to the entry point (callers of `make` override them); `scripted_policy` names a
    "module:callable" that builds a built-in policy for the env (for smoke runs and tests);
    `task_sources` says in a phrase each what its `tasks=` argument takes, or, for an env without one,
    which arguments pick its tasks (`mappa envs` lists them); `faults` names a "module:attr" holding the
    env's fault facts (a `mappa_envs.coach_eval.faults.Faults`), which `mappa blame` and `mappa coach-eval`
    inject.
    """
    if not _ID.match(env_id):
        raise EnvArgumentError(f"env id {env_id!r} must look like 'Name-v0' (a name, '-v', a version number)")
    registry[env_id] = EnvSpec(env_id, entry_point, dict(default_kwargs), description, scripted_policy,
                               tuple(task_sources), faults)
    try:  # also reachable as pettingzoo.make("aec", "mappa/<id>"); the lookup happens at make time
        import pettingzoo

        pz_id = env_id if "/" in env_id else f"mappa/{env_id}"  # a namespaced id keeps its own namespace
        if pz_id not in pettingzoo.aec_registry:
            pettingzoo.register("aec", pz_id, entry_point=functools.partial(make, env_id))
    except (ImportError, AttributeError):  # PettingZoo < 1.26 has no registry
        pass
    _register_gymnasium(env_id)


def _register_gymnasium(env_id: str) -> None:
    """`gymnasium.make("mappa/<id>")`: the single-stream `TextEnv` over the env (one action per step)."""
    import gymnasium

    gym_id = env_id if "/" in env_id else f"mappa/{env_id}"
    if gym_id in gymnasium.registry:
        del gymnasium.registry[gym_id]  # re-registering an id replaces it, as in our own registry
    # no TimeLimit or env checker: an episode's length is the env's own limits, and actions are free text
    gymnasium.register(gym_id, entry_point=functools.partial(_text_env, env_id), disable_env_checker=True,
                       order_enforce=True)


def _text_env(env_id: str, **kwargs):
    from mappa_envs.wrappers.text_env import make_text_env

    return make_text_env(env_id, **kwargs)


def spec(env_id: str) -> EnvSpec:
    if env_id not in registry:
        known = ", ".join(sorted(registry)) or "(none)"
        raise UnknownEnvError(f"unknown env id {env_id!r}; registered ids: {known}")
    return registry[env_id]


def make(env_id: str, **kwargs):
    """Create a registered environment; `kwargs` override the spec's defaults."""
    return spec(env_id).make(**kwargs)
