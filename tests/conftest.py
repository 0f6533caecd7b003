"""Fixtures shared across test modules (session-scoped: built once per test run)."""
from __future__ import annotations

import socket
import threading

import pytest

from mappa_envs.sandbox import make_sandbox
from tests.sandbox_helpers import BACKENDS, TEST_LIMITS, require_docker


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """The offline tiny Qwen2 model + tokenizer (mappa_train.tiny_model), saved once per session."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from mappa_train.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_model")))


# ---- sandboxes: one real sandbox per backend (Docker skips, saying why, without an engine) ----

@pytest.fixture(scope="session")
def local_sandbox():
    sb = make_sandbox("local", pool_size=2, preimport=(), **TEST_LIMITS)
    yield sb
    sb.close()


@pytest.fixture(scope="session")
def docker_sandbox():
    require_docker()
    sb = make_sandbox("docker", pool_size=2, preimport=(), **TEST_LIMITS)
    yield sb
    sb.close()


@pytest.fixture(params=BACKENDS)
def sandbox(request):
    return request.getfixturevalue(f"{request.param}_sandbox")


@pytest.fixture
def session(sandbox):
    with sandbox.session() as s:
        yield s


@pytest.fixture
def loopback_server():
    """A TCP server on the host's 127.0.0.1; yields (port, list of accepted peer addresses)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    accepted: list = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except OSError:
                continue
            accepted.append(peer)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()
