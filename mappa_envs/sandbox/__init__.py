"""Sandboxes that run agents' Python: `make_sandbox("auto" | "docker" | "local", **limits)`.

`safe_text` is the one sanitizer for text that leaves a sandbox (and any other untrusted text):
valid UTF-8, control sequences escaped. See docs/sandbox.md for what each backend isolates.
"""
from mappa_envs.sandbox.text import raw_name, safe_name, safe_text
from mappa_envs.sandbox.types import (
    ExecResult,
    FileInfo,
    FileTooLargeError,
    Inventory,
    IsolationUnavailableError,
    Limits,
    NotRegularFileError,
    Sandbox,
    SandboxError,
    SandboxSession,
)


def make_sandbox(backend: str = "auto", **limits) -> Sandbox:
    """Build a sandbox. `limits` are `Limits` fields (timeout_s, memory_mb, ...) plus backend options."""
    from mappa_envs.sandbox.factory import make_sandbox as _make

    return _make(backend, **limits)


__all__ = ["ExecResult", "FileInfo", "FileTooLargeError", "Inventory", "IsolationUnavailableError", "Limits",
           "NotRegularFileError", "Sandbox", "SandboxError", "SandboxSession", "make_sandbox", "raw_name",
           "safe_name", "safe_text"]
