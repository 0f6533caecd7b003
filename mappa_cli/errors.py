"""Turn the errors a user can fix into one line and an exit status, in one place.

Exit status 2: the input was wrong (arguments, config, spec, data files); 1: something failed while
running (an endpoint unreachable, the sandbox, a missing package); 130: interrupted. Only the
project's own errors (`MappaError` and its subclasses, raised on purpose for bad input) and the
third-party errors listed below count; anything else, a bare ValueError or KeyError included, is a
bug, and `main` lets its traceback through.
"""
from __future__ import annotations

import json
import logging
import sys

from mappa_envs.errors import MappaError

BAD_INPUT, FAILED, INTERRUPTED = 2, 1, 130

# a missing top-level module -> the extra that installs it
EXTRAS = {"torch": "train", "transformers": "train", "accelerate": "train", "deepspeed": "train",
          "tokenizers": "train", "ray": "ray", "vllm": "vllm", "trl": "trl", "datasets": "data"}


class UsageError(MappaError, ValueError):
    """A command-line argument that cannot be used as given."""


def explain(exc: BaseException) -> tuple[str, int] | None:
    """(one-line message, exit status) for an error the user can fix; None for a bug."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", INTERRUPTED
    if _is(exc, "mappa_envs.policy", "PolicyError") and exc.__cause__ is not None:
        cause = explain(exc.__cause__)  # a failure with a known fix (an endpoint down): that, and whose it was
        if cause is not None:
            return f"{exc.source}: {cause[0]}", cause[1]
    if isinstance(exc, MappaError):
        return _text(exc), FAILED if isinstance(exc, RuntimeError) else BAD_INPUT
    if _is(exc, "yaml", "YAMLError"):
        return yaml_message(exc), BAD_INPUT
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", BAD_INPUT
    if isinstance(exc, OSError) and exc.filename and exc.strerror:  # raised by the OS, about a path
        return f"{exc.filename}: {exc.strerror.lower()}", FAILED if isinstance(exc, PermissionError) else BAD_INPUT
    if isinstance(exc, FileNotFoundError):  # raised by project code with its own message
        return _text(exc), BAD_INPUT
    if _is(exc, "openai", "APIConnectionError"):
        url = exc.request.url if getattr(exc, "request", None) is not None else "the endpoint"
        return f"cannot reach {url} ({exc}); is the server running, and is the URL right?", FAILED
    if _is(exc, "openai", "APIStatusError"):
        return f"{exc.request.url} answered HTTP {exc.status_code}: {exc.message}", FAILED
    if isinstance(exc, ConnectionError):
        return f"connection failed: {exc}", FAILED
    if _is(exc, "mappa_envs.sandbox.types", "SandboxError"):
        return f"sandbox: {exc}", FAILED
    if isinstance(exc, ModuleNotFoundError) and exc.name and not exc.name.startswith("mappa"):
        top = exc.name.split(".")[0]
        fix = f"pip install 'mappa[{EXTRAS[top]}]'" if top in EXTRAS else f"pip install {top}"
        return f"this needs the Python package {top!r}, which is not installed: {fix}", FAILED
    cause = explain(exc.__cause__) if exc.__cause__ is not None else None
    if cause is not None:  # a wrapper that says where it happened ("chat completion failed at URL: ...")
        hint = "; is the server running, and is the URL right?" if _unreachable(exc.__cause__) else ""
        return _text(exc) + hint, cause[1]
    return None


def _unreachable(exc: BaseException | None) -> bool:
    while exc is not None:
        if isinstance(exc, ConnectionError) or _is(exc, "openai", "APIConnectionError"):
            return True
        exc = exc.__cause__
    return False


class OneLineLog(logging.Formatter):
    """A logged warning as one line; its traceback (exc_info) is shown only with --debug."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


def yaml_message(exc: Exception, source: str | None = None) -> str:
    """'FILE: line L, column C: problem' for a YAML syntax error (PyYAML counts from 0, editors from 1)."""
    mark, context_mark = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    if context and context_mark is not None and context_mark is not mark:
        context += f" that starts at {_at(context_mark)}"
    name = source or (mark.name if mark is not None and not mark.name.startswith("<") else None)
    where = f" at {_at(mark)}" if mark is not None else ""
    return f"{name + ': ' if name else ''}invalid YAML{where}: {problem}" + (f" ({context})" if context else "")


def _at(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _is(exc: BaseException, module: str, name: str) -> bool:
    """isinstance(exc, module.name), without importing a module that nothing has imported yet."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(exc, getattr(loaded, name))


def _text(exc: BaseException) -> str:
    """The message as written (a KeyError's str() would add quotes)."""
    return (str(exc.args[0]) if len(exc.args) == 1 else str(exc)).strip()
