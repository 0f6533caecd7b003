"""`make_sandbox`: pick and build a backend from one flat set of keyword arguments."""
from __future__ import annotations

import logging
from dataclasses import fields

from mappa_envs.errors import InputError
from mappa_envs.sandbox.types import SANDBOX_BACKENDS, IsolationUnavailableError, Limits, Sandbox

log = logging.getLogger(__name__)

_LIMITS = {f.name for f in fields(Limits)}
_LOCAL_OPTIONS = {"pool_size", "preimport", "python", "isolation", "workspace_root", "hide"}
_DOCKER_OPTIONS = {"pool_size", "preimport", "image", "docker_url", "user"}


def make_sandbox(backend: str = "auto", **kwargs) -> Sandbox:
    """Build a sandbox: `"docker"`, `"local"`, or `"auto"` (Docker when an engine answers and the image
    exists, else local with bubblewrap; it logs which and why). Nothing but `isolation="none"`, asked
    for by name, runs agent code unisolated: with neither Docker nor a usable bubblewrap, "auto" and
    "local" raise `IsolationUnavailableError`, one line saying how to fix it.

    Keyword arguments are `Limits` fields (timeout_s, memory_mb, cpus, max_processes,
    max_output_bytes, max_file_mb, workspace_mb) and backend options: local takes pool_size,
    preimport, python, isolation ("auto" | "bwrap" | "none"), workspace_root, hide (paths masked from
    cells; default: installed benchmark-answer packages, `sandbox.hidden`); docker takes pool_size,
    preimport, image, docker_url, user.
    """
    return _make(backend, kwargs, prefer_local=False)


def make_default_sandbox(**kwargs) -> Sandbox:
    """What an env uses when given no sandbox: the cheapest isolated backend that runs here (local with
    bubblewrap, else Docker), else `IsolationUnavailableError`; never unisolated unless isolation="none"."""
    return _make("auto", kwargs, prefer_local=True)


def _make(backend: str, kwargs: dict, prefer_local: bool) -> Sandbox:
    unknown = set(kwargs) - _LIMITS - _LOCAL_OPTIONS - _DOCKER_OPTIONS
    if unknown:
        raise TypeError(f"make_sandbox got unknown argument(s) {sorted(unknown)}; limits are {sorted(_LIMITS)}, "
                        f"local options {sorted(_LOCAL_OPTIONS)}, docker options {sorted(_DOCKER_OPTIONS)}")
    limits = Limits(**{k: v for k, v in kwargs.items() if k in _LIMITS})
    options = {k: v for k, v in kwargs.items() if k not in _LIMITS}
    if backend == "auto":
        return _auto(limits, options, prefer_local)
    if backend not in SANDBOX_BACKENDS:
        raise InputError(f"unknown sandbox backend {backend!r}; use 'auto', 'docker' or 'local'")
    allowed = _LOCAL_OPTIONS if backend == "local" else _DOCKER_OPTIONS
    if set(options) - allowed:
        raise TypeError(f"the {backend} backend does not take {sorted(set(options) - allowed)}; "
                        f"it takes {sorted(allowed)}")
    return _build(backend, limits, options)


def _build(backend: str, limits: Limits, options: dict) -> Sandbox:
    allowed = _LOCAL_OPTIONS if backend == "local" else _DOCKER_OPTIONS
    options = {k: v for k, v in options.items() if k in allowed}  # "auto" may carry both backends' options
    if backend == "local":
        from mappa_envs.sandbox.local import LocalSandbox

        return LocalSandbox(limits, **options)
    from mappa_envs.sandbox.docker import DockerSandbox

    return DockerSandbox(limits, **options)


def _auto(limits: Limits, options: dict, prefer_local: bool) -> Sandbox:
    """Docker, then local with bubblewrap (local first when `prefer_local`); refuse when neither isolates."""
    from mappa_envs.sandbox.docker import docker_status

    if options.get("isolation") == "none":  # asked for by name: the local backend, unisolated and loud
        return _build("local", limits, options)
    local_why = None
    if prefer_local:
        try:
            sb = _build("local", limits, options)
            log.info("sandbox backend 'auto' chose local with bubblewrap")
            return sb
        except IsolationUnavailableError as e:
            local_why = str(e)
    ok, why = docker_status(options.get("image"), options.get("docker_url"))
    if ok:
        log.info("sandbox backend 'auto' chose docker: %s", why)
        return _build("docker", limits, options)
    if local_why is None:
        try:
            sb = _build("local", limits, options)
            log.info("sandbox backend 'auto' chose local with bubblewrap (docker: %s)", why)
            return sb
        except IsolationUnavailableError as e:
            local_why = str(e)
    raise IsolationUnavailableError(f"{local_why}; Docker is not usable either: {why}")


def accepted_arguments(backend: str = "auto") -> set[str]:
    """The keyword arguments `make_sandbox(backend, ...)` takes."""
    options = {"local": _LOCAL_OPTIONS, "docker": _DOCKER_OPTIONS}.get(backend, _LOCAL_OPTIONS | _DOCKER_OPTIONS)
    return _LIMITS | options
