"""Build the sandbox image without an image registry: debootstrap a Debian root, then `docker import` it.

Needs root, `debootstrap` and the `docker` CLI, and reaches only the Debian mirror apt already uses
(read from /etc/apt/sources.list and /etc/apt/sources.list.d/). On a machine that reaches a
registry, `docker build -t mappa-sandbox:latest docker/` gives the same image from docker/Dockerfile.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile

REQUIRED = ("python3", "python3-numpy", "python3-pandas", "python3-scipy", "python3-sklearn")
OPTIONAL = ("python3-xgboost", "python3-statsmodels")  # gradient boosting and statistics, where Debian has them
CACHE_DIR = "/var/cache/mappa-debootstrap"  # downloaded .debs, so a rebuild needs no network
SANDBOX_UID = 1000
TRIM = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "var/cache/apt", "var/lib/apt/lists")


def debian_mirror(apt_dir: str = "/etc/apt") -> tuple[str, str]:
    """(mirror URI, suite) of the first Debian main archive apt is configured with (not -security/-updates)."""
    entries: list[tuple[str, list[str]]] = []
    for path in [f"{apt_dir}/sources.list", *sorted(glob.glob(f"{apt_dir}/sources.list.d/*.list"))]:
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except OSError:
            continue
        for line in lines:
            m = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
            if m:
                entries.append((m.group(1), [m.group(2)]))
    for path in sorted(glob.glob(f"{apt_dir}/sources.list.d/*.sources")):
        try:
            text = open(path, encoding="utf-8").read()
        except OSError:
            continue
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.MULTILINE))
            if "deb" in fields.get("Types", "").split() and fields.get("Enabled", "yes").lower() != "no":
                for uri in fields.get("URIs", "").split():
                    entries.append((uri, fields.get("Suites", "").split()))
    for uri, suites in entries:
        for suite in suites:
            if "-" not in suite and "/" not in suite and "debian" in uri and "security" not in uri:
                return uri.rstrip("/"), suite
    raise RuntimeError(f"no Debian archive found in {apt_dir}/sources.list{{,.d/}}; pass --mirror URL and --suite NAME")


def available(package: str) -> bool:
    """Whether apt on this host knows the package (the host's suite stands in for the image's)."""
    if not shutil.which("apt-cache"):
        return False
    out = subprocess.run(["apt-cache", "show", "--no-all-versions", package], capture_output=True, text=True)
    return out.returncode == 0 and "Package:" in out.stdout


def image_exists(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def _add_user(root: str) -> None:
    with open(os.path.join(root, "etc/passwd"), "a", encoding="utf-8") as f:
        f.write(f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:/workspace:/usr/sbin/nologin\n")
    with open(os.path.join(root, "etc/group"), "a", encoding="utf-8") as f:
        f.write(f"sandbox:x:{SANDBOX_UID}:\n")
    os.makedirs(os.path.join(root, "workspace"), exist_ok=True)


def build(image: str, mirror: str | None = None, suite: str | None = None, workdir: str | None = None,
          log=print) -> None:
    """Debootstrap a minimal Debian with Python and the data-science stack, import it as `image`."""
    missing = [tool for tool in ("debootstrap", "docker", "tar") if not shutil.which(tool)]
    if missing:
        raise RuntimeError(f"missing {missing}: apt-get install debootstrap docker.io")
    if os.geteuid() != 0:
        raise RuntimeError("debootstrap needs root: run `sudo mappa sandbox build`")
    if not (mirror and suite):
        found_mirror, found_suite = debian_mirror()
        mirror, suite = mirror or found_mirror, suite or found_suite
    packages = list(REQUIRED) + [p for p in OPTIONAL if available(p)]
    log(f"debootstrap {suite} from {mirror} with {', '.join(packages)} (about 2 minutes)")
    os.makedirs(CACHE_DIR, exist_ok=True)
    root = tempfile.mkdtemp(prefix="mappa-rootfs-", dir=workdir)
    try:
        subprocess.run(["debootstrap", "--variant=minbase", f"--cache-dir={CACHE_DIR}",
                        f"--include={','.join(packages)}", suite, root, mirror], check=True)
        _add_user(root)
        for rel in TRIM:
            shutil.rmtree(os.path.join(root, rel), ignore_errors=True)
        log(f"importing {root} as {image}")
        tar = subprocess.Popen(["tar", "-C", root, "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        changes = [f"USER {SANDBOX_UID}:{SANDBOX_UID}", "WORKDIR /workspace", "ENV LANG=C.UTF-8",
                   'CMD ["python3"]', f"LABEL mappa.sandbox.packages={','.join(packages)}"]
        argv = ["docker", "import", *[a for c in changes for a in ("--change", c)], "-", image]
        imported = subprocess.run(argv, stdin=tar.stdout, capture_output=True, text=True)
        tar.stdout.close()
        if tar.wait() != 0 or imported.returncode != 0:
            raise RuntimeError(f"docker import failed: {imported.stderr.strip()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    probe = ("import numpy, pandas, scipy, sklearn, sys; "
             "print(sys.version.split()[0], numpy.__version__, pandas.__version__, sklearn.__version__)")
    out = subprocess.run(["docker", "run", "--rm", "--network", "none", image, "python3", "-c", probe],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the new image cannot import the data-science stack: {out.stderr.strip()[-500:]}")
    log(f"built {image}: python, numpy, pandas, sklearn = {out.stdout.strip()}")
