"""`make_sandbox`: pick and build a backend from one flat set of keyword arguments."""
from __future__ import annotations

import logging
from dataclasses import fields

from mappa_envs.sandbox.types import Limits, Sandbox

log = logging.getLogger(__name__)

_LIMITS = {f.name for f in fields(Limits)}
_LOCAL_OPTIONS = {"pool_size", "preimport", "python", "isolation", "workspace_root", "hide"}
_DOCKER_OPTIONS = {"pool_size", "preimport", "image", "docker_url", "user"}


def make_sandbox(backend: str = "auto", **kwargs) -> Sandbox:
    """Build a sandbox: `"docker"`, `"local"`, or `"auto"` (Docker when an engine answers and the image
    exists, else local; it logs which and why).

    Keyword arguments are `Limits` fields (timeout_s, memory_mb, cpus, max_processes,
    max_output_bytes, max_file_mb, workspace_mb) and backend options: local takes pool_size,
    preimport, python, isolation ("auto" | "bwrap" | "none"), workspace_root, hide (paths masked from
    cells; default: installed benchmark-answer packages, `sandbox.hidden`); docker takes pool_size,
    preimport, image, docker_url, user.
    """
    unknown = set(kwargs) - _LIMITS - _LOCAL_OPTIONS - _DOCKER_OPTIONS
    if unknown:
        raise TypeError(f"make_sandbox got unknown argument(s) {sorted(unknown)}; limits are {sorted(_LIMITS)}, "
                        f"local options {sorted(_LOCAL_OPTIONS)}, docker options {sorted(_DOCKER_OPTIONS)}")
    limits = Limits(**{k: v for k, v in kwargs.items() if k in _LIMITS})
    options = {k: v for k, v in kwargs.items() if k not in _LIMITS}
    explicit = backend != "auto"
    if backend == "auto":
        from mappa_envs.sandbox.docker import docker_status

        ok, why = docker_status(options.get("image"), options.get("docker_url"))
        backend = "docker" if ok else "local"
        (log.info if ok else log.warning)("sandbox backend 'auto' chose %s: %s", backend, why)
    if backend not in ("local", "docker"):
        raise ValueError(f"unknown sandbox backend {backend!r}; use 'auto', 'docker' or 'local'")
    allowed = _LOCAL_OPTIONS if backend == "local" else _DOCKER_OPTIONS
    if explicit and set(options) - allowed:
        raise TypeError(f"the {backend} backend does not take {sorted(set(options) - allowed)}; "
                        f"it takes {sorted(allowed)}")
    options = {k: v for k, v in options.items() if k in allowed}  # "auto" may carry both backends' options
    if backend == "local":
        from mappa_envs.sandbox.local import LocalSandbox

        return LocalSandbox(limits, **options)
    from mappa_envs.sandbox.docker import DockerSandbox

    return DockerSandbox(limits, **options)


def accepted_arguments(backend: str = "auto") -> set[str]:
    """The keyword arguments `make_sandbox(backend, ...)` takes."""
    options = {"local": _LOCAL_OPTIONS, "docker": _DOCKER_OPTIONS}.get(backend, _LOCAL_OPTIONS | _DOCKER_OPTIONS)
    return _LIMITS | options
