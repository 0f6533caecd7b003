"""The env arguments that name things (`coach=`, `sandbox=`), turned into objects or rejected at make() time."""
from __future__ import annotations

from typing import Any

from mappa_envs.coach.types import Coach
from mappa_envs.errors import EnvArgumentError
from mappa_envs.sandbox.types import SANDBOX_BACKENDS, Sandbox


def coach_from(coach: Any) -> Coach:
    from mappa_envs.coach.rule import RuleCoach

    if coach is None or (isinstance(coach, str) and coach == "rule"):
        return RuleCoach()
    if isinstance(coach, str) and coach.startswith("rule:"):  # the rule coach with a known error rate
        from mappa_envs.coach.noisy import rule_coach_from_spec

        return rule_coach_from_spec(coach)
    if isinstance(coach, str):
        raise EnvArgumentError(f"coach={coach!r}: the only coach named by a string is 'rule' (or 'rule:noise=EPS'); "
                               "for an LLM judge pass "
                               "a coach object, e.g. coach=mappa_envs.coach.LLMCoach.from_preset('gemini-2.5-flash')")
    if not callable(getattr(coach, "score", None)):
        raise EnvArgumentError(f"coach must be 'rule', None or an object with score(request) -> CoachScore; "
                               f"got {type(coach).__name__}")
    return coach


def sandbox_from(sandbox: Any) -> tuple[Sandbox | None, str | None]:
    """(a caller's sandbox or None, the backend to make lazily when None: None for the default, the
    cheapest isolated backend that runs here; see `make_default_sandbox`)."""
    if sandbox is None:
        return None, None
    if isinstance(sandbox, str):
        if sandbox not in SANDBOX_BACKENDS:
            raise EnvArgumentError(f"sandbox={sandbox!r} is not a backend; use one of {SANDBOX_BACKENDS} or a "
                                   "Sandbox object from mappa_envs.sandbox.make_sandbox(...)")
        return None, sandbox
    if not callable(getattr(sandbox, "session", None)):
        raise EnvArgumentError(f"sandbox must be a backend name {SANDBOX_BACKENDS} or a Sandbox (with session()); "
                               f"got {type(sandbox).__name__}")
    return sandbox, getattr(sandbox, "name", "custom")


__all__ = ["SANDBOX_BACKENDS", "coach_from", "sandbox_from"]
