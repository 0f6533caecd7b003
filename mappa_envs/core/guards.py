"""Misuse of an env's API, caught before it turns into a bare KeyError or a silent surprise.

Each check raises the project's one-line error saying what was wrong and how to fix it; `PipelineEnv`
calls them at the top of `reset`, `step`, `last` and `observe`. Kept apart from the turn-taking so the
rules are in one place and read as a list.
"""
from __future__ import annotations

import numbers
import warnings
from collections.abc import Sequence

from mappa_envs.errors import EnvArgumentError, ResetNeededError, UnknownTaskError

RESET_OPTIONS = ("task_id", "task_index")


def check_reset_options(env_id: str, options: dict, n_tasks: int) -> None:
    """Unknown keys (a warning), a task_index that is not an int in [0, n_tasks), or both selectors at once."""
    unknown = sorted(map(str, set(options) - set(RESET_OPTIONS)))
    if unknown:
        # A warning, not an error: PettingZoo's own conformance test (api_test) resets with options it
        # made up ({"options": 1}) and requires the env to accept them. A typo still gets said, once a call.
        warnings.warn(f"{env_id}: reset(options=...) ignores unknown key(s) {unknown}; it reads only "
                      f"{list(RESET_OPTIONS)}", UserWarning, stacklevel=3)
    if "task_id" in options and "task_index" in options:
        raise EnvArgumentError(f"{env_id}: reset(options=...) got both task_id and task_index; give one")
    if "task_index" in options:
        index = options["task_index"]
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise EnvArgumentError(f"{env_id}: reset(options={{'task_index': ...}}) takes an int, got {index!r} "
                                   f"({type(index).__name__}); use task_id= to pick a task by its id")
        if not 0 <= index < n_tasks:
            # no wrap-around: an index past the end is a bug in the caller's bookkeeping, not a request
            raise UnknownTaskError(f"{env_id}: task_index {index} is out of range; this env has {n_tasks} tasks "
                                   f"(0..{n_tasks - 1}); use index % {n_tasks} to cycle through them")


def check_live(env_id: str, agents: Sequence[str], what: str) -> None:
    """An env whose episode has ended (every agent stepped out) has no agent to act, observe or reward."""
    if not agents:
        raise ResetNeededError(f"{env_id}: the episode is over; call reset() before {what}")


def check_agent(env_id: str, agent: object, possible: Sequence[str]) -> None:
    if agent not in possible:
        raise EnvArgumentError(f"{env_id}: observe({agent!r}): no such agent; its agents are {list(possible)}")


def warn_no_render_mode(env_id: str) -> None:
    """Gymnasium's convention: render() of an env made without a render_mode warns and returns None."""
    warnings.warn(f"{env_id}: render() was called but the env was made without a render_mode; pass "
                  "render_mode='ansi' (text returned) or 'human' (printed) to make()", UserWarning, stacklevel=3)
