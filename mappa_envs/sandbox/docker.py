"""The Docker backend: one locked-down container per session, started ahead of time in a warm pool.

What it isolates (each container, through the Docker engine):
- no network (`network_mode="none"`: only a loopback of its own);
- a read-only root file system; the workspace (/workspace) and /tmp are size-limited tmpfs
  mounts, the only writable places (writing past `workspace_mb` fails with ENOSPC); nothing of the
  host's file system is visible; the host reads files only through the supervisor, which never
  follows links and caps every read;
- kernels run as unprivileged uids, one per kernel (`user` is kernel 0's uid:gid, kernel i gets
  uid + i, all in one group), with no capabilities, `no-new-privileges` and Docker's default seccomp
  profile: kernels cannot signal, stop, trace or read the memory of each other or of the supervisor.
  The container's init and the supervisor run as the container's root with only CAP_SETUID,
  CAP_SETGID and CAP_KILL (to start kernels under their uids and to stop them); they run no user code;
- cgroup limits: memory (`memory_mb` for processes + `workspace_mb` for the tmpfs files it
  holds, no swap), CPU share (`cpus`), processes (`max_processes`); per-kernel rlimits on top
  (address space, CPU seconds per cell, file size); wall time per cell; only the kernel running a
  cell is awake (the others are stopped, or blocked with nothing of theirs able to run), and nothing
  a cell started outlives its cell.

What it does not: the host kernel is shared (a kernel exploit escapes, as with any container);
kernels can see each other's pids in /proc (they can do nothing with them); the image's packages
are whatever `mappa sandbox build` installed.

Speed: the pool keeps `pool_size` containers running, each with its supervisor started and the
data-science stack imported, so opening a session costs no container start; kernels are forks
of that supervisor (milliseconds), and cells travel over one `docker exec` stream per container
(a round trip of about a millisecond, against ~70 ms for an exec per cell).

Leaks: containers carry the labels `mappa.sandbox` (the sandbox's id) and `mappa.owner` (host,
pid and start time of the owning process). They are removed when their session closes, when the sandbox
closes, at interpreter exit, and, for owners that died without cleaning up, whenever a new DockerSandbox
starts on the host.
"""
from __future__ import annotations

import os
import select
import socket
import struct
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager

from mappa_envs.errors import InputError
from mappa_envs.sandbox.bwrap import SEND_TIMEOUT_S
from mappa_envs.sandbox.channel import Channel, ChannelClosed
from mappa_envs.sandbox.launch import DEFAULT_PREIMPORT, process_start, sandbox_env, supervisor_argv, supervisor_config
from mappa_envs.sandbox.pool import WarmPool
from mappa_envs.sandbox.session import Session, Slot
from mappa_envs.sandbox.types import Limits, SandboxError

DEFAULT_IMAGE = "mappa-sandbox:latest"
LABEL, OWNER_LABEL = "mappa.sandbox", "mappa.owner"
WORKSPACE = "/workspace"
# pid 1 of every container: reaps orphans (so zombies do not eat the pids limit), and as pid 1 it
# survives a `kill(-1, SIGKILL)` from inside, which is how a dead supervisor's leftovers are cleared.
SUPERVISOR_CAPS = ["SETUID", "SETGID", "KILL"]
_INIT = "import os, time\nwhile True:\n    try:\n        os.wait()\n    except ChildProcessError:\n" \
        "        time.sleep(1)\n"
_KILL_ALL = "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept ProcessLookupError:\n    pass\n"


def _client(docker_url: str | None):
    try:
        import docker
    except ImportError as e:
        raise SandboxError("the docker backend needs the docker SDK: pip install docker") from e
    kwargs = {"timeout": 60, "max_pool_size": 64}
    return docker.DockerClient(base_url=docker_url, **kwargs) if docker_url else docker.from_env(**kwargs)


def docker_status(image: str | None = None, docker_url: str | None = None) -> tuple[bool, str]:
    """(usable, why): whether a Docker engine answers and has the sandbox image."""
    image = image or DEFAULT_IMAGE
    try:
        client = _client(docker_url)
        client.ping()
    except Exception as e:
        return False, (f"no Docker engine answers ({type(e).__name__}: {str(e)[:200]}); start dockerd, "
                       "or use the local backend")
    try:
        found = client.images.get(image)
        version = client.version().get("Version", "?")
    except Exception as e:
        if type(e).__name__ == "ImageNotFound":
            return False, f"the Docker engine has no image {image!r}; build it with `mappa sandbox build`"
        return False, f"could not inspect image {image!r}: {e}"
    finally:
        client.close()
    size_mb = found.attrs.get("Size", 0) >> 20
    return True, f"Docker engine {version} answers and has image {image!r} ({found.short_id}, {size_mb} MB)"


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{process_start(os.getpid())}"


def _owner_alive(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit() or not os.path.isdir("/proc"):
        return True  # another machine's (or unreadable): not ours to judge
    return process_start(int(pid)) == started


def reap_orphans(client) -> int:
    """Remove sandbox containers whose owning process is gone (it crashed or was killed)."""
    removed = 0
    for c in client.api.containers(all=True, filters={"label": LABEL}):  # plain listing: no inspect races
        if not _owner_alive((c.get("Labels") or {}).get(OWNER_LABEL, "")):
            try:
                client.api.remove_container(c["Id"], force=True)
                removed += 1
            except Exception:  # someone else removed it first
                pass
    return removed


class ExecTransport:
    """A supervisor started by `docker exec`, its stdin/stdout carried over the exec's hijacked socket.

    Without a TTY the engine multiplexes the exec's output: 8-byte headers (stream, 0, 0, 0, size).
    They are taken apart as the bytes arrive, so no frame of the engine's is ever buffered whole.
    """

    def __init__(self, api, container_id: str, argv: list[str], env: dict[str, str]) -> None:
        self.api, self.container_id = api, container_id
        self.exec_id = api.exec_create(container_id, argv, stdin=True, stdout=True, stderr=True, user="0:0",
                                       environment=env, workdir=WORKSPACE)["Id"]
        wrapped = api.exec_start(self.exec_id, socket=True)
        self._wrapped = wrapped
        self.sock: socket.socket = getattr(wrapped, "_sock", wrapped)
        self.sock.settimeout(SEND_TIMEOUT_S)  # bounds sendall; recv waits in select first
        self.header, self.stream, self.left = bytearray(), 0, 0
        self.stderr = bytearray()

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise ChannelClosed(f"the sandbox process is gone or stuck ({self.why_closed()})") from e

    def recv(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise TimeoutError
            try:
                data = self.sock.recv(1 << 20)
            except OSError:
                data = b""
            if not data:
                return b""
            out = self._demux(data)
            if out:
                return out

    def _demux(self, data: bytes) -> bytes:
        """The stdout bytes in `data` (stderr is kept aside, its last 4000 bytes)."""
        out, view = bytearray(), memoryview(data)
        while view:
            if not self.left:
                need = 8 - len(self.header)
                self.header += view[:need]
                view = view[need:]
                if len(self.header) == 8:
                    self.stream, self.left = self.header[0], struct.unpack_from(">I", self.header, 4)[0]
                    self.header.clear()
                continue
            take = view[: self.left]
            view, self.left = view[len(take) :], self.left - len(take)
            if self.stream == 1:
                out += take
            else:
                self.stderr += take
                del self.stderr[:-4000]
        return bytes(out)

    def close(self) -> None:
        for s in (self.sock, self._wrapped):
            try:
                s.close()
            except OSError:
                pass

    def why_closed(self) -> str:
        try:
            code = self.api.exec_inspect(self.exec_id).get("ExitCode")
        except Exception:
            code = None
        lines = self.stderr.decode(errors="replace").strip().splitlines()
        return f"exit status {code}" + (f": {lines[-1]}" if lines else "")


class DockerSandbox:
    __doc__ = __doc__

    name = "docker"

    separate_kernel_uids = True
    session_cgroup = True  # the container's: one memory and one process limit per session

    def __init__(self, limits: Limits = Limits(), *, pool_size: int = 2, preimport: tuple[str, ...] = DEFAULT_PREIMPORT,
                 image: str | None = None, docker_url: str | None = None, user: str = "1000:1000") -> None:
        uid, _, gid = user.partition(":")
        if not (uid.isdigit() and gid.isdigit() and int(uid) > 0 and int(gid) > 0):
            raise InputError(f"user must be 'uid:gid' of kernel 0, both numbers > 0 (e.g. '1000:1000'), got {user!r}")
        self.limits, self.preimport, self.user = limits, tuple(preimport), user
        self.kernel_uid, self.kernel_gid = int(uid), int(gid)
        self.image = image or DEFAULT_IMAGE
        ok, why = docker_status(self.image, docker_url)
        if not ok:
            raise SandboxError(f"docker sandbox unavailable: {why}")
        self.client = _client(docker_url)
        self.owner, self.id = _owner(), uuid.uuid4().hex[:12]
        reap_orphans(self.client)
        self._removals = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mappa-docker-rm")
        self._pool = WarmPool(self._make_slot, pool_size, limits, "docker")

    def _run_container(self):
        mb = self.limits.memory_mb + self.limits.workspace_mb  # tmpfs files are charged to the container's memory
        return self.client.containers.run(
            self.image, ["python3", "-c", _INIT], detach=True, user="0:0",
            labels={LABEL: self.id, OWNER_LABEL: self.owner},
            network_mode="none", read_only=True, cap_drop=["ALL"], cap_add=SUPERVISOR_CAPS,
            security_opt=["no-new-privileges"],
            tmpfs={WORKSPACE: f"size={self.limits.workspace_mb}m,uid=0,gid={self.kernel_gid},mode=2775",
                   "/tmp": f"size={min(256, self.limits.workspace_mb)}m,mode=1777"},
            mem_limit=f"{mb}m", memswap_limit=f"{mb}m", nano_cpus=int(self.limits.cpus * 1e9),
            pids_limit=self.limits.max_processes, ipc_mode="private", hostname="sandbox",
            working_dir=WORKSPACE, environment=sandbox_env(self.limits, WORKSPACE),
        )

    def _make_slot(self) -> Slot:
        config = supervisor_config(self.limits, WORKSPACE, self.preimport, role="supervisor",
                                   kernel_uid=self.kernel_uid, kernel_gid=self.kernel_gid)
        argv, env, api = supervisor_argv("python3", config), sandbox_env(self.limits, WORKSPACE), self.client.api
        state = {"container": self._run_container()}

        def start() -> Channel:
            return Channel(ExecTransport(api, state["container"].id, argv, env), self.limits)

        def restart() -> tuple[Channel, bool]:
            """Clear the container (all but its init) and start a supervisor again; a new container if it is gone."""
            slot.channel.close()
            try:
                api.exec_start(api.exec_create(state["container"].id, ["python3", "-c", _KILL_ALL], user="0:0")["Id"])
                return start(), True
            except Exception:  # the container is gone (removed, or its init died): a fresh one, empty
                self._remove(state["container"])
                state["container"] = self._run_container()
                return start(), False

        try:
            channel = start()
        except BaseException:
            self._remove(state["container"])
            raise

        def dispose() -> None:
            slot.channel.close()
            try:
                self._removals.submit(self._remove, state["container"])
            except RuntimeError:  # the executor is shut down: we are exiting, remove inline
                self._remove(state["container"])

        slot = Slot(channel=channel, restart=restart, dispose=dispose, kernel_uid=self.kernel_uid)
        return slot

    @staticmethod
    def _remove(container) -> None:
        try:
            container.remove(force=True)
        except Exception:  # already gone
            pass

    def session(self) -> AbstractContextManager[Session]:
        """One workspace and its kernels, closed (and thrown away) when the `with` block ends."""
        return self._pool.session()

    def open(self) -> Session:
        """A session the caller closes (`session()` is the context-manager form)."""
        return self._pool.open()

    def wait_warm(self, timeout: float = 120.0) -> bool:
        """Block until the warm pool is full, e.g. before timing anything; False on timeout."""
        return self._pool.wait_full(timeout)

    def close(self) -> None:
        """Remove every container this sandbox started (pooled and in use) and wait until they are gone."""
        self._pool.close()
        self._removals.shutdown(wait=True)

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DockerSandbox(image={self.image!r}, limits={self.limits})"

