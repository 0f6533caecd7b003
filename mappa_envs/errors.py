"""The project's own exception types. `str(error)` is the one-line message a user sees.

A command line catches `MappaError` and prints `str(e)` (no traceback). Subclasses keep a builtin base
(ValueError, KeyError, RuntimeError) as well, so code that caught those before still does.

    MappaError
    ├── EnvArgumentError   a bad argument to make()/an env constructor (also ValueError)
    │   ├── SpecError         a team spec that cannot run (also ValueError)
    │   ├── UnknownEnvError   an env id nobody registered (also KeyError)
    │   └── UnknownTaskError  a task id the env does not have (also KeyError)
    ├── TaskDataError      a malformed or empty task file/folder (also ValueError)
    │   └── TaskDataNotFoundError  a task file/folder that does not exist (also FileNotFoundError)
    ├── InputError         any other argument, option or file the caller can fix (also ValueError)
    └── ResetNeededError   an env used before reset() (also RuntimeError)

A bare ValueError or KeyError is a bug: the command line shows its traceback.
"""
from __future__ import annotations


class MappaError(Exception):
    """Base of every error this project raises on purpose; the message says what was wrong and how to fix it."""

    def __str__(self) -> str:  # KeyError would otherwise print the message in quotes
        return str(self.args[0]) if self.args else self.__class__.__name__


class EnvArgumentError(MappaError, ValueError):
    """An environment keyword argument is unknown, of the wrong type or out of range."""


class SpecError(EnvArgumentError):
    """A team spec is malformed: a duplicate or unknown role, a cycle without a bound, a role that can never act."""


class UnknownEnvError(EnvArgumentError, KeyError):
    """`make`/`spec` got an env id that is not registered."""


class UnknownTaskError(EnvArgumentError, KeyError):
    """`reset(options={"task_id": ...})` named a task the env does not have."""


class TaskDataError(MappaError, ValueError):
    """A task file, folder or record is malformed or empty; the message names the file, line and column."""


class TaskDataNotFoundError(TaskDataError, FileNotFoundError):
    """A task file or data folder that was named does not exist."""


class InputError(MappaError, ValueError):
    """An argument, option or file that cannot be used as given and that no narrower type covers
    (a sandbox limit, a sampling parameter, a policy's roles, a prompt file, ...)."""


class ResetNeededError(MappaError, RuntimeError):
    """An env was stepped, observed or rendered before `reset()`."""


__all__ = ["EnvArgumentError", "InputError", "MappaError", "ResetNeededError", "SpecError", "TaskDataError",
           "TaskDataNotFoundError", "UnknownEnvError", "UnknownTaskError"]
