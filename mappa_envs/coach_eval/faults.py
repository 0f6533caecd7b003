"""An env's fault facts: what `mappa blame` and `mappa coach-eval` inject into it, registered with the env.

    register("MyEnv-v0", "my_pkg.env:MyEnv", faults="my_pkg.faults:FAULTS")   # FAULTS: a `Faults`

The facts are the env's own: the faults its scripted team can play and the role each one is in, how
to build that team with one fault injected, the keywords of the fixed, seeded task set the measurement
plays, and, where the env differs from the rule, how to cut that set to its first tasks and how to
group its tasks by type. The measurement reads them through the registry, so a new env gets blame and
coach-eval by registering its own.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mappa_envs.errors import InputError
from mappa_envs.registration import registry, resolve, spec

NONE = "none"  # the fault-free team: every measurement's baseline


@dataclass(frozen=True)
class Faults:
    roles: Mapping[str, str | None]  # fault -> the role at fault; NONE -> None (the fault-free team)
    team: Callable[[Any, str], Any]  # (a made env, fault) -> its scripted TextPolicy with the fault injected
    kwargs: Mapping[str, Any] = field(default_factory=dict)  # the env's keywords for the measured task set
    first_tasks: Callable[[dict, int], dict] | None = None  # kwargs cut to the first n tasks; None: num_tasks=n
    task_type: Callable[[Any], str] | None = None  # a task's group in calibration; None: its family (or "math")

    def type_of(self, task) -> str:
        return self.task_type(task) if self.task_type is not None else family(task)


def family(task) -> str:
    """A task's group when its env names none: its `family` (MathChat's problem families), else "math"."""
    return str(task.meta.get("family", "math"))


def faults(env_id: str) -> Faults:
    """The fault facts `env_id` registered (`EnvSpec.faults`); a one-line InputError when it registered none."""
    target = spec(env_id).faults
    if target is None:
        raise InputError(f"{env_id} registers no fault facts (EnvSpec.faults), so no fault can be injected into it: "
                         f"register it with faults='package.module:FAULTS', a mappa_envs.coach_eval.faults.Faults "
                         "(e.g. mappa_envs.chain.faults:FAULTS)")
    facts = resolve(target, f"{env_id}'s faults", InputError)
    if not isinstance(facts, Faults) or facts.roles.get(NONE, "") is not None:
        raise InputError(f"{env_id}'s faults {target!r} must be a mappa_envs.coach_eval.faults.Faults whose roles "
                         f"map {NONE!r} (the fault-free team) to None")
    return facts


def measured_envs() -> list[str]:
    """The registered env ids with fault facts, in registration order."""
    return [env_id for env_id, s in registry.items() if s.faults is not None]
