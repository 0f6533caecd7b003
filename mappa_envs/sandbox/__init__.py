"""Sandboxes that run agents' Python: `make_sandbox("auto" | "docker" | "local", **limits)`."""
from mappa_envs.sandbox.types import ExecResult, Limits, Sandbox, SandboxError, SandboxSession


def make_sandbox(backend: str = "auto", **limits) -> Sandbox:
    """Build a sandbox. `limits` are `Limits` fields (timeout_s, memory_mb, ...) plus backend options."""
    from mappa_envs.sandbox.factory import make_sandbox as _make

    return _make(backend, **limits)


__all__ = ["ExecResult", "Limits", "Sandbox", "SandboxError", "SandboxSession", "make_sandbox"]
