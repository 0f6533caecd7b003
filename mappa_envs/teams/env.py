"""Team-v0: any team spec (`core.team`) run on any scenario, as a PettingZoo AEC env.

The spec says who acts, seeing what, in which order; the scenario (tasks, workspace set-up, checks,
outcome) is named by the spec (`scenario:`, with `scenario_args`) or given to `make()`: the name of
a registered scenario (`mappa_envs.registration.scenarios`: chain, codetest, dsbench, mathchat, or
its own "module:callable"), a "package.module:Class" implementing the `Scenario` protocol, or a
scenario object. Nothing else is called: a name that resolves to anything but those is refused
before any call. A factory or class whose signature has `team` is handed the `Team`. A scenario
object with its own `roles` (written for `PipelineEnv`) plugs in as it is: with `spec=None` its roles
run as a chain; with a spec, the spec's roles and order run on its tasks, checks and outcome.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from mappa_envs.core.pipeline import PipelineEnv
from mappa_envs.core.records import Scenario
from mappa_envs.core.team import Team, load_team
from mappa_envs.errors import SpecError
from mappa_envs.registration import accepted_kwargs, registered_scenario, resolve, scenarios

SCENARIO_METHODS = ("tasks", "prepare", "task_prompt", "checks", "outcome", "coach_evidence")


def scenario_factory(target: str, where: str) -> Callable[..., Scenario]:
    """What a spec's `scenario` names, checked before anything is called: a registered scenario's
    factory, or a class with every method of the `Scenario` protocol. Anything else (a function, a
    class of some other kind: `os:system`, `subprocess:Popen`) is one `SpecError` line."""
    factory = registered_scenario(target)
    if factory is not None:
        return factory
    what = (f"{where} {target!r} is neither a registered scenario ({', '.join(sorted(scenarios))}) nor a "
            f"'package.module:Class' implementing the Scenario protocol")
    if ":" not in target:
        raise SpecError(f"{what}; register it with mappa_envs.registration.register_scenario(name, factory)")
    found = resolve(target, where, SpecError)  # imports the module; calls nothing
    missing = [m for m in SCENARIO_METHODS if not callable(getattr(found, m, None))]
    if not inspect.isclass(found) or missing:
        why = f"it lacks {missing}" if inspect.isclass(found) else f"it is a {type(found).__name__}, not a class"
        raise SpecError(f"{what} ({why}); register a factory with "
                        "mappa_envs.registration.register_scenario(name, factory)")
    return found


def build_scenario(team: Team, scenario: Any = None, scenario_args: Mapping | None = None) -> Scenario:
    """The scenario object: `scenario` itself, or built by what it (or the spec) names (`scenario_factory`)."""
    if scenario is not None and not isinstance(scenario, str):
        if scenario_args:
            raise SpecError("scenario_args go with a scenario named by the spec or by scenario='NAME', "
                            "not a scenario object")
        return scenario
    target = scenario or team.scenario
    if target is None:
        raise SpecError(f"{team.name}: the spec names no scenario; add scenario: NAME ({', '.join(sorted(scenarios))}) "
                        "to it or pass scenario= to make()")
    factory = scenario_factory(target, f"{team.name}: scenario")
    args = {**(team.scenario_args if scenario is None else {}), **dict(scenario_args or {})}
    accepted = accepted_kwargs(factory)
    if accepted is not None:
        unknown = sorted(set(args) - accepted)
        if unknown:
            raise SpecError(f"{team.name}: scenario {target} takes no argument(s) {unknown}; "
                            f"it takes {sorted(accepted - {'team'})}")
        if "team" in accepted:
            args["team"] = team
    return factory(**args)


class TeamEnv(PipelineEnv):
    """Team-v0. See the module docstring.

    Args:
        spec: a YAML path, a shipped spec name ("mathchat", "dsbench", "review"), a dict or a `Team`;
            None with a scenario object: its own roles, in a chain. `make("Team-v0")` without spec=
            builds the shipped review team: a registered default (`spec("Team-v0").kwargs`), so that
            every registered id makes an env for PettingZoo's checks and `mappa run`.
        scenario: a scenario object, or what builds one (`scenario_factory`; default: the spec's).
        scenario_args: keyword arguments for that callable (on top of the spec's `scenario_args`).
        Everything else goes to `PipelineEnv` (coach, sandbox, reward_mode, limits, render_mode).
    """

    def __init__(self, spec: str | Mapping | Team | None, scenario: Any = None,
                 scenario_args: Mapping | None = None, **kwargs: Any):
        if "team" in kwargs:
            raise SpecError("Team-v0 takes its team as spec= (a YAML path, a shipped name or a dict), not team=")
        if spec is None:
            if scenario is None or isinstance(scenario, str) or not getattr(scenario, "roles", None):
                raise SpecError("spec=None needs a scenario object with its own roles; otherwise give a spec")
            team = Team.chain(scenario.roles, name=scenario.env_id)
        else:
            team = load_team(spec)
        super().__init__(build_scenario(team, scenario, scenario_args), team=team, **kwargs)


def scripted(env, **kwargs: Any):
    """The scripted team the env's spec names (`scripted:`), built for `env` (for `mappa run`, tests)."""
    team = env.unwrapped.team
    if team.scripted is None:
        raise SpecError(f"{team.name}: the spec names no scripted team; add scripted: 'module:callable' to it")
    factory = resolve(team.scripted, f"{team.name}: scripted", SpecError)  # imports the module; calls nothing
    try:
        if not inspect.isfunction(factory):
            raise TypeError(f"it is a {type(factory).__name__}, not a Python function")
        signature = inspect.signature(factory)
        params = signature.parameters
        unnamed = [k for k in kwargs if k not in params or params[k].kind is inspect.Parameter.POSITIONAL_ONLY]
        if unnamed:  # a **kw catch-all (json:dumps, subprocess:run) is not a scripted team's signature
            raise TypeError(f"it takes no parameter named {', '.join(unnamed)}")
        signature.bind(env, **kwargs)
    except TypeError as e:  # os:system, a class, a function of other arguments: refused before any call
        raise SpecError(f"{team.name}: scripted {team.scripted!r} must be a function (env, {', '.join(kwargs)}) "
                        f"returning the scripted team ({e})") from None
    return factory(env, **kwargs)
