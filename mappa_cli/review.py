"""`mappa review PATH...`: a local web page over the transcripts of training, eval and coach-eval runs."""
from __future__ import annotations

import argparse
import getpass
from pathlib import Path

from mappa_cli.errors import UsageError
from mappa_envs.errors import MappaError


class MissingExtraError(MappaError, RuntimeError):
    """The server's packages are not installed (exit status 1: nothing the arguments could fix)."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="run folders or transcripts .jsonl files (searched recursively; several at once)")
    parser.add_argument("--db", type=Path, help="verdicts database (default: review.sqlite beside the first PATH)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on; any but loopback needs a token (made if --token is not given)")
    parser.add_argument("--port", type=int, default=8765, help="port to listen on (0: any free one)")
    parser.add_argument("--token", help="a secret every request must carry (?token=... once, then a cookie)")
    parser.add_argument("--reviewer", default=None, help="the name verdicts are recorded under (default: your login)")


def run(args: argparse.Namespace) -> int:
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401

        from mappa_train.review import server
    except ImportError as e:
        raise MissingExtraError(f"the review server needs {e.name}, which is not installed: "
                                "pip install 'mappa[review]'") from None
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, got {args.port}")
    if args.token is not None and len(args.token) < 16:
        raise UsageError("--token must be at least 16 characters (a guessable token guards nothing)")
    port = args.port or server.free_port(args.host)
    reviewer = args.reviewer or _login()
    served = server.prepare(args.paths, args.db, args.host, port, args.token, reviewer)
    store = served.store
    mode = f"verdicts -> {store.path}" if store.writable else f"read-only: {store.path} cannot be written"
    print(f"{len(served.index.episodes)} episodes from {', '.join(map(str, args.paths))}; {mode}", flush=True)
    for skipped in served.index.skipped[:5]:
        print(f"skipped {skipped}", flush=True)
    print(f"open {served.url}  (Ctrl-C stops)", flush=True)
    server.run(served, args.host, port)
    return 0


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "reviewer"
