"""What only the Docker backend promises: locked-down containers, labels, no leaked containers."""
from __future__ import annotations

import pytest

from mappa_envs.sandbox import make_sandbox
from mappa_envs.sandbox.docker import LABEL, OWNER_LABEL, reap_orphans
from tests.sandbox_helpers import TEST_LIMITS, require_docker

pytestmark = pytest.mark.docker


def _ours(client, sb):
    return client.containers.list(all=True, sparse=True, filters={"label": f"{LABEL}={sb.id}"})


def test_containers_are_locked_down():
    require_docker()
    sb = make_sandbox("docker", pool_size=0, preimport=(), **TEST_LIMITS)
    try:
        with sb.session():
            (listed,) = _ours(sb.client, sb)
            container = sb.client.containers.get(listed.id)
            host = container.attrs["HostConfig"]
            assert host["NetworkMode"] == "none"
            assert host["ReadonlyRootfs"] is True
            assert host["CapDrop"] == ["ALL"]
            assert "no-new-privileges" in host["SecurityOpt"]
            assert host["PidsLimit"] == TEST_LIMITS["max_processes"]
            mb = TEST_LIMITS["memory_mb"] + TEST_LIMITS["workspace_mb"]
            assert host["Memory"] == host["MemorySwap"] == mb << 20
            assert host["NanoCpus"] == 10**9
            assert container.attrs["Config"]["User"] == "0:0"  # init and supervisor; kernels drop to 1000 + index
            assert sorted(host["CapAdd"]) == ["KILL", "SETGID", "SETUID"]
            assert container.labels[OWNER_LABEL] == sb.owner
    finally:
        sb.close()


def test_inside_the_container(docker_sandbox):
    with docker_sandbox.session() as s:
        r = s.run("import os\nprint(os.getuid(), os.getcwd())\nopen('/etc/x', 'w')")
        assert r.stdout == "1000 /workspace\n"
        assert "Read-only file system" in r.error
        r = s.run("print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])")
        assert r.stdout == "0000000000000000\n"


def test_session_close_removes_its_container():
    require_docker()
    sb = make_sandbox("docker", pool_size=0, preimport=(), **TEST_LIMITS)
    try:
        with sb.session() as s:
            s.run("1")
            assert len(_ours(sb.client, sb)) == 1
    finally:
        sb.close()  # waits for pending removals
    assert _ours(sb.client, sb) == []


def test_pool_keeps_warm_containers_and_close_removes_them():
    require_docker()
    sb = make_sandbox("docker", pool_size=1, preimport=(), **TEST_LIMITS)
    with sb.session() as s:  # served from the pool (or started on the spot if it is not ready yet)
        assert s.run("print(1)").stdout == "1\n"
    sb.close()
    assert _ours(sb.client, sb) == []


def test_containers_of_dead_owners_are_reaped(docker_sandbox):
    client = docker_sandbox.client
    image = docker_sandbox.image
    orphan = client.containers.create(image, ["true"], labels={LABEL: "1", OWNER_LABEL: f"{_host()}:999999999:1"})
    alive = client.containers.create(image, ["true"], labels={LABEL: "1", OWNER_LABEL: docker_sandbox.owner})
    try:
        assert reap_orphans(client) >= 1
        ids = {c.id for c in client.containers.list(all=True, sparse=True, filters={"label": LABEL})}
        assert orphan.id not in ids
        assert alive.id in ids
    finally:
        alive.remove(force=True)


def _host() -> str:
    import socket

    return socket.gethostname()
