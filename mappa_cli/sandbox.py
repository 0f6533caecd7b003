"""`mappa sandbox build` (the Docker image, offline) and `mappa sandbox check` (is a backend usable, how fast)."""
from __future__ import annotations

import argparse
import statistics
import sys
import time

from mappa_cli.args import positive_int
from mappa_envs.sandbox.docker import DEFAULT_IMAGE
from mappa_envs.sandbox.types import SANDBOX_BACKENDS


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    b = sub.add_parser("build", help="build the Docker sandbox image offline (debootstrap + docker import), "
                       "or from docker/Dockerfile")
    b.add_argument("--image", default=DEFAULT_IMAGE, help="image name:tag to create")
    b.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    b.add_argument("--dockerfile", metavar="DIR", help="use `docker build DIR` instead (needs an image registry)")
    b.add_argument("--mirror", help="Debian mirror URL (default: the one apt uses)")
    b.add_argument("--suite", help="Debian suite, e.g. bookworm (default: the one apt uses)")
    c = sub.add_parser("check", help="report engine, image, limits and a round-trip latency")
    c.add_argument("--backend", default="auto", choices=SANDBOX_BACKENDS)
    c.add_argument("--image", default=DEFAULT_IMAGE)
    c.add_argument("--cells", type=positive_int, default=50, help="trivial cells to time")


def run(args: argparse.Namespace) -> int:
    return _build(args) if args.action == "build" else _check(args)


def _build(args: argparse.Namespace) -> int:
    import subprocess

    from mappa_envs.sandbox import image

    if image.image_exists(args.image) and not args.force:
        print(f"image {args.image} exists (use --force to rebuild)")
        return 0
    if args.dockerfile:
        return subprocess.run(["docker", "build", "-t", args.image, args.dockerfile]).returncode
    try:
        image.build(args.image, mirror=args.mirror, suite=args.suite)
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(f"mappa sandbox: the build failed: {e}", file=sys.stderr)
        return 1
    return 0


def _check(args: argparse.Namespace) -> int:
    from mappa_envs.sandbox import SandboxError, make_sandbox
    from mappa_envs.sandbox.docker import docker_status
    from mappa_envs.sandbox.local import bwrap_path

    ok, why = docker_status(args.image)
    print(f"docker: {'usable' if ok else 'unusable'} - {why}")
    print(f"local:  {'bwrap at ' + bwrap_path() if bwrap_path() else 'no bwrap: code would run UNISOLATED'}")
    options = {"image": args.image} if args.backend != "local" else {}
    try:
        t0 = time.perf_counter()
        sb = make_sandbox(args.backend, pool_size=0, **options)
    except SandboxError as e:
        print(f"mappa sandbox: the {args.backend} backend is not usable: {e}", file=sys.stderr)
        return 1
    with sb:
        print(f"backend: {sb.name} ({sb!r})")
        with sb.session() as s:
            opened = time.perf_counter() - t0
            times = []
            for _ in range(args.cells):
                t = time.perf_counter()
                r = s.run("1 + 1", timeout=10)
                times.append(time.perf_counter() - t)
                if not r.ok:
                    print(f"mappa sandbox: a trivial cell failed: {r.error} {r.stderr.strip()[-300:]}", file=sys.stderr)
                    return 1
            info = s.run("import sys, os; print(sys.version.split()[0], os.getuid(), os.getcwd())").stdout.strip()
        times.sort()
        print(f"cold session open: {opened * 1000:.0f} ms (python, uid, cwd inside: {info})")
        print(f"round trip, trivial cell: p50 {statistics.median(times) * 1000:.2f} ms, "
              f"p99 {times[int(0.99 * (len(times) - 1))] * 1000:.2f} ms over {len(times)} cells")
    return 0
