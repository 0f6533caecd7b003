"""Run every performance benchmark and write one table (Markdown + JSON) stamped with the commit.

    python benchmarks/perf/run_all.py                      # quick mode, table in runs/perf/
    python benchmarks/perf/run_all.py --full --baseline runs/perf/perf-<old commit>.json

The sandbox, coach, rollout and learner benchmarks, and any other benchmarks/bench_*.py, each run
in their own process with their quick flag (unless --full). A script that accepts `--json PATH`
reports its figures there; otherwise its figures are read from the "name: number [unit]" lines it
prints. With --baseline, each figure is shown next to the same
figure of an earlier run and their ratio, so speed can be compared across commits.

Each benchmark has a time limit (--timeout, default 600 s quick / 1800 s full): past it, the script
and every process it started (its process group) are killed, and its row says "timeout after N s"
with whatever figures it had printed. The table and JSON are rewritten after every benchmark, so an
overrun, a crash or Ctrl-C loses only the benchmark that was running.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from mappa_train.evaluation.report import git_commit

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = ["bench_sandbox.py", "bench_coach.py", "bench_rollout.py", "bench_learner.py",
            "bench_cpu_step.py"]  # reported even when missing
QUICK_FLAGS = ("--quick", "--short")
_FIGURE = re.compile(r"^\s*([A-Za-z][^:=]{0,80}?)\s*[:=]\s*"  # name, then ':' or '='
                     r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/%µ]*)(?:\s.*)?$")  # number, unit


def benchmarks(folder: Path = ROOT / "benchmarks") -> list[str]:
    """The expected scripts, then any other bench_*.py of `folder` (new ones join the table unasked)."""
    found = sorted(p.name for p in folder.glob("bench_*.py"))
    expected = EXPECTED if folder == ROOT / "benchmarks" else []
    return expected + [name for name in found if name not in expected]


def flatten(d: object, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a JSON object as {"a.b.c": value}."""
    if isinstance(d, bool):
        return {}
    if isinstance(d, (int, float)):
        return {prefix: float(d)}
    if isinstance(d, dict):
        return {k: v for key, val in d.items()
                for k, v in flatten(val, f"{prefix}.{key}" if prefix else str(key)).items()}
    if isinstance(d, list):
        return {k: v for i, val in enumerate(d) for k, v in flatten(val, f"{prefix}[{i}]").items()}
    return {}


def parse_printed(stdout: str) -> dict[str, float]:
    """Figures from printed "name: 12.3 ms [anything]" lines (the unit joins the name); lines with a
    "|" (tables, progress bars) are skipped."""
    figures = {}
    for line in stdout.splitlines():
        m = None if "|" in line else _FIGURE.match(line)
        if m:
            name = m.group(1).strip() + (f" [{m.group(3)}]" if m.group(3) else "")
            figures[name] = float(m.group(2))
    return figures


def run_one(script: Path, full: bool, timeout: float) -> dict:
    """Run one benchmark script; returns {status, wall_s, figures, output_tail}."""
    if not script.is_file():
        return {"status": "missing", "wall_s": 0.0, "figures": {}, "output_tail": f"{script} does not exist"}
    # which flags it takes; a script that ignores --help and runs (or hangs) is held to the same limit
    helptext = _run_limited([sys.executable, str(script), "--help"], min(timeout, 60.0))[0]
    cmd = [sys.executable, str(script)]
    if not full:
        cmd += [f for f in QUICK_FLAGS if f in helptext][:1]
    with tempfile.TemporaryDirectory() as tmp:
        json_path = Path(tmp) / "figures.json"
        if "--json" in helptext:
            cmd += ["--json", str(json_path)]
        started = time.monotonic()
        stdout, stderr, returncode = _run_limited(cmd, timeout)
        wall = time.monotonic() - started
        try:
            figures = flatten(json.loads(json_path.read_text())) if json_path.is_file() else parse_printed(stdout)
        except ValueError:  # a JSON file cut short by the kill: what it printed is what there is
            figures = parse_printed(stdout)
    output = (stdout + stderr).strip().splitlines()
    status = "ok" if returncode == 0 else f"timeout after {timeout:.0f} s" if returncode is None \
        else f"failed (exit {returncode})"
    return {"status": status, "wall_s": round(wall, 2), "figures": figures, "output_tail": "\n".join(output[-20:]),
            "command": ["python", *cmd[1:]]}


def _run_limited(cmd: list[str], timeout: float) -> tuple[str, str, int | None]:
    """(stdout, stderr, exit status or None on a timeout). The script runs in its own process group,
    killed whole on a timeout: a child it started (a sandbox, a server) would otherwise hold the pipes
    open and the wait would never end."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return out, err, proc.returncode
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.returncode is None or proc.poll() is None:
            _kill_group(proc)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # a grandchild left the group and holds the pipes: give up on them
        out, err = "", ""
    return out or "", err or "", None


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def table(report: dict, baseline: dict | None) -> str:
    head = ["benchmark", "figure", "value"] + (["baseline", "ratio"] if baseline else [])
    lines = [f"# Performance — {report['commit'][:12]} ({report['mode']}, {report['finished_at']})", "",
             f"Python {report['python']} on {report['machine']}"
             + (f"; baseline {baseline['commit'][:12]}" if baseline else ""), "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, res in report["benchmarks"].items():
        old = (baseline or {}).get("benchmarks", {}).get(name, {}).get("figures", {})
        rows = [("wall time [s]", res["wall_s"], (baseline or {}).get("benchmarks", {}).get(name, {}).get("wall_s"))]
        rows += [(fig, val, old.get(fig)) for fig, val in res["figures"].items()]
        if res["status"] != "ok":
            rows = [(res["status"], None, None)]
        for fig, val, was in rows:
            cells = [name, fig, "" if val is None else f"{val:.4g}"]
            if baseline:
                cells += ["" if was is None else f"{was:.4g}", f"{val / was:.2f}×" if val is not None and was else ""]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true",
                        help="run the benchmarks at full size (default: their quick mode)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these scripts (e.g. bench_coach.py)")
    parser.add_argument("--timeout", type=float, help="seconds allowed per benchmark (default 600, --full 1800); "
                        "past it the benchmark and its processes are killed and the next one runs")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "perf", help="folder for perf-<commit>.md/.json")
    parser.add_argument("--baseline", type=Path, help="an earlier perf-*.json to compare against")
    parser.add_argument("--dir", type=Path, default=ROOT / "benchmarks", help="folder of bench_*.py scripts")
    args = parser.parse_args(argv)
    timeout = args.timeout or (1800.0 if args.full else 600.0)
    if timeout <= 0:
        parser.error(f"--timeout must be > 0, got {timeout:g}")
    known = benchmarks(args.dir)
    names = args.only or known
    if not names:
        parser.error(f"no bench_*.py scripts in {args.dir}")
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {known}")
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None

    report = {"commit": git_commit(ROOT) or "unknown", "mode": "full" if args.full else "quick",
              "python": platform.python_version(), "machine": f"{platform.machine()}, {_cpus()} CPUs",
              "benchmarks": {}}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"perf-{report['commit'][:12]}"
    for i, name in enumerate(names):
        print(f"== {name}", file=sys.stderr, flush=True)
        res = run_one(args.dir / name, args.full, timeout)
        report["benchmarks"][name] = res
        print(f"   {res['status']} in {res['wall_s']} s, {len(res['figures'])} figures", file=sys.stderr, flush=True)
        done = i + 1 == len(names)
        report["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds") + \
            ("" if done else f" (partial: {i + 1}/{len(names)} benchmarks)")
        text = _write(stem, report, baseline)  # after each benchmark: an overrun or Ctrl-C later loses nothing
    print(text, end="")
    print(f"wrote {stem}.md and {stem}.json", file=sys.stderr)
    return 0 if all(r["status"] == "ok" for r in report["benchmarks"].values()) else 1


def _write(stem: Path, report: dict, baseline: dict | None) -> str:
    text = table(report, baseline)
    for suffix, content in ((".md", text), (".json", json.dumps(report, indent=2) + "\n")):
        tmp = stem.with_suffix(suffix + ".tmp")
        tmp.write_text(content, encoding="utf-8")
        tmp.replace(stem.with_suffix(suffix))  # whole files only, even if killed mid-write
    return text


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


if __name__ == "__main__":
    sys.exit(main())
