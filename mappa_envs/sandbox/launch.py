"""What a backend needs to start the inside of a sandbox: its command line, its config, its environment."""
from __future__ import annotations

import json
from importlib import resources

from mappa_envs.sandbox.types import Limits

DEFAULT_PREIMPORT = ("numpy", "pandas", "scipy", "sklearn", "sklearn.ensemble", "sklearn.linear_model",
                     "sklearn.model_selection")
INSIDE_MODULES = ("protocol", "procs", "files", "cell", "kernel", "supervisor", "entry")  # in import order
MAX_CODE_BYTES = 16 << 20  # one cell's source
_ARG_MAX = 120_000  # Linux caps one argv string at 128 KiB
_BOOT = """\
import json, sys, types
pkg = types.ModuleType("mappa_inside")
pkg.__path__ = []
sys.modules["mappa_inside"] = pkg
for name, source in SOURCES:
    mod = types.ModuleType("mappa_inside." + name)
    mod.__package__ = "mappa_inside"
    sys.modules[mod.__name__] = mod
    setattr(pkg, name, mod)
    exec(compile(source, "<sandbox " + name + ".py>", "exec"), mod.__dict__)
del pkg, name, source, mod
sys.modules["mappa_inside.entry"].main(json.loads(sys.argv[1]))
"""


def supervisor_config(limits: Limits, workspace: str, preimport: tuple[str, ...], **extra) -> dict:
    """The JSON `inside.entry.main` reads: where the workspace is, what to import, which limits to enforce."""
    return {
        "workspace": workspace, "preimport": list(preimport), "memory_mb": limits.memory_mb,
        "max_file_mb": limits.max_file_mb, "max_output_bytes": limits.max_output_bytes, "cpus": limits.cpus,
        "max_code": MAX_CODE_BYTES, **extra,
    }


def boot_source() -> str:
    """One script holding the inside modules, which imports them as the package `mappa_inside`."""
    package = resources.files("mappa_envs.sandbox.inside")
    sources = [(name, (package / f"{name}.py").read_text(encoding="utf-8")) for name in INSIDE_MODULES]
    return f"SOURCES = {sources!r}\n{_BOOT}"


def supervisor_argv(python: str, config: dict) -> list[str]:
    """Run the inside modules from the command line: the sandbox has Python, not this project.

    `-I` keeps the workspace off sys.path while the sandbox starts (a module a cell planted there
    must never be imported by the keeper or the supervisor).
    """
    source = boot_source()
    if len(source.encode()) > _ARG_MAX:
        raise RuntimeError(f"the sandbox's inside modules are {len(source.encode())} bytes, over the {_ARG_MAX} "
                           "bytes one command-line argument may hold; trim them")
    return [python, "-I", "-c", source, json.dumps(config)]


def sandbox_env(limits: Limits, home: str) -> dict[str, str]:
    """A clean environment: nothing of the host's (API keys!) leaks in; BLAS threads match the CPU limit."""
    threads = str(max(1, int(limits.cpus)))
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp",
        "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
    }


def process_start(pid: int) -> str | None:
    """The process's start time (clock ticks since boot): with its pid, this names a process uniquely.
    None when no such process exists."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2 :].split()[19].decode()
    except (OSError, IndexError):
        return None
