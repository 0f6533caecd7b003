"""Team-v0: any team spec (`core.team`) run on any scenario, as a PettingZoo AEC env.

The spec says who acts, seeing what, in which order; the scenario (tasks, workspace set-up, checks,
outcome) is named by the spec (`scenario: module:callable`, with `scenario_args`) or given to
`make()`. A scenario built by a callable whose signature has `team` is handed the `Team`. A scenario
object with its own `roles` (written for `PipelineEnv`) plugs in as it is: with `spec=None` its roles
run as a chain; with a spec, the spec's roles and order run on its tasks, checks and outcome.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mappa_envs.core.pipeline import PipelineEnv
from mappa_envs.core.records import Scenario
from mappa_envs.core.team import Team, load_team
from mappa_envs.errors import SpecError
from mappa_envs.registration import accepted_kwargs, load_callable, resolve


def build_scenario(team: Team, scenario: Any = None, scenario_args: Mapping | None = None) -> Scenario:
    """The scenario object: `scenario` itself, or built by the "module:callable" it (or the spec) names."""
    if scenario is not None and not isinstance(scenario, str):
        if scenario_args:
            raise SpecError("scenario_args go with a scenario named as 'module:callable', not a scenario object")
        return scenario
    target = scenario or team.scenario
    if target is None:
        raise SpecError(f"{team.name}: the spec names no scenario; add scenario: 'module:callable' to it "
                        "or pass scenario= to make()")
    factory = resolve(target, f"{team.name}: scenario", SpecError)
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
            None with a scenario object: its own roles, in a chain.
        scenario: a Scenario object, or "module:callable" building one (default: the spec's).
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
    return load_callable(team.scripted)(env, **kwargs)
