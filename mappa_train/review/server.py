"""Run the review app on uvicorn: loopback by default; any other address only with a token."""
from __future__ import annotations

import ipaddress
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

from mappa_envs.errors import MappaError
from mappa_train.review.transcripts import Index, load
from mappa_train.review.verdicts import DEFAULT_NAME, VerdictStore

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


class ServeError(MappaError, ValueError):
    """Server settings that cannot be used as given; the message says what would work."""


@dataclass
class Served:
    index: Index
    store: VerdictStore
    url: str
    app: object


def default_db(paths: list[str | Path]) -> Path:
    """The database beside the first path: in it when a folder, next to it when a file."""
    first = Path(paths[0])
    return (first if first.is_dir() else first.parent) / DEFAULT_NAME


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def prepare(paths: list[str | Path], db: str | Path | None, host: str, port: int, token: str | None,
            reviewer: str) -> Served:
    """Load the transcripts, open the database and build the app for `host:port` (port must be fixed here)."""
    from mappa_train.review.app import build_app

    if not is_loopback(host) and not token:
        token = secrets.token_urlsafe(24)  # another address is reachable by others: never without a token
    index = load(paths)
    store = VerdictStore(db or default_db(paths))
    if is_loopback(host):
        names = ("127.0.0.1", "localhost", host) if ":" not in host else ("[::1]", f"[{host}]")
        hosts = sorted({f"{name}:{port}" for name in names})  # the address it prints, and the usual loopback names
    else:
        hosts = None  # reached under whatever name the network gives it; the token guards it
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    return Served(index, store, url, build_app(index, store, hosts, token, reviewer))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def run(served: Served, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(served.app, host=host, port=port, log_level="warning", server_header=False)
