"""Helpers for the sandbox tests (the fixtures `local_sandbox`, `docker_sandbox`, `sandbox`, `session`
and `loopback_server` live in conftest.py): limits, backend params, killing a sandbox process from
outside, waiting for it, and the usability check every containment test ends with.
"""
from __future__ import annotations

import os
import signal

import pytest

from mappa_envs.sandbox.docker import docker_status
from mappa_envs.sandbox.inside import procs

# small limits so that bombs hit them quickly; no pre-imports so that pools refill fast
TEST_LIMITS = dict(timeout_s=20, memory_mb=512, max_processes=32, max_output_bytes=10_000, max_file_mb=16,
                   workspace_mb=256)
BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


def require_docker() -> None:
    ok, why = docker_status()
    if not ok:
        pytest.skip(f"docker backend unavailable: {why}")


def kill_in_sandbox(session, pid: int) -> None:
    """SIGKILL the sandbox's process `pid` (as numbered inside the sandbox) from outside it, as the OOM
    killer or a crash would: the only way left to kill a kernel or a supervisor that cells cannot touch."""
    transport = session._channel.transport
    if hasattr(transport, "container_id"):  # docker: the container's root may signal anything in it
        transport.api.exec_start(transport.api.exec_create(
            transport.container_id, ["python3", "-c", f"import os; os.kill({pid}, 9)"], user="0:0")["Id"])
        return
    for host_pid in procs.descendants(transport.proc.pid):  # local: the host pid whose innermost pid is `pid`
        try:
            with open(f"/proc/{host_pid}/status") as f:
                nspid = next(line.split()[1:] for line in f if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue
        if int(nspid[-1]) == pid:
            os.kill(host_pid, signal.SIGKILL)
            return
    raise AssertionError(f"no process {pid} in this sandbox")


def wait_gone(session, pid: int, timeout: float = 10.0) -> None:
    """Until the sandbox's process `pid` is dead (a zombie counts as dead), seen from a kernel of its own."""
    code = (f"import time\nfor _ in range({int(timeout * 100)}):\n    try:\n"
            f"        if open('/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0] == 'Z':\n            break\n"
            "    except OSError:\n        break\n    time.sleep(0.01)")
    assert session.run(code, kernel="observer").ok


def assert_usable(session) -> None:
    """The property every containment test ends with: the same session still runs cells."""
    r = session.run("print(6 * 7)", timeout=20)
    assert r.ok, r
    assert r.stdout == "42\n", r
