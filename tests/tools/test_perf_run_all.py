"""benchmarks/perf/run_all.py writes each result as it comes and holds each benchmark to a time limit
(issue 27): one that overruns is killed with every process it started, and the others still report."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN_ALL = ROOT / "benchmarks" / "perf" / "run_all.py"

FAST = 'print("speed: 3.5 ms")\n'
# prints a figure, starts a child that would outlive it (and hold its pipes), then hangs
HANG = '''import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[0] + ".child", "w").write(f"{child.pid} {os.getpgrp()}")
print("warm up: 2 s", flush=True)
time.sleep(600)
'''


@pytest.fixture
def bench_dir(tmp_path):
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "bench_a_fast.py").write_text(FAST)
    (folder / "bench_b_hang.py").write_text(HANG)
    (folder / "bench_c_after.py").write_text('print("after: 1")\n')
    return folder


def run_all(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(RUN_ALL), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def report(out: Path) -> dict:
    (path,) = out.glob("perf-*.json")
    return json.loads(path.read_text())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").is_file() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_an_overrun_is_killed_with_its_children_and_the_rest_report(bench_dir, tmp_path):
    out = tmp_path / "out"
    proc = run_all("--dir", str(bench_dir), "--out", str(out), "--timeout", "5")
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr  # one benchmark did not finish
    results = report(out)["benchmarks"]
    assert results["bench_a_fast.py"]["figures"] == {"speed [ms]": 3.5}
    assert results["bench_b_hang.py"]["status"] == "timeout after 5 s"
    assert results["bench_b_hang.py"]["figures"] == {"warm up [s]": 2.0}  # what it printed before the kill
    assert results["bench_c_after.py"]["status"] == "ok"
    child = int((bench_dir / "bench_b_hang.py.child").read_text().split()[0])
    assert not alive(child)
    assert "| bench_b_hang.py | timeout after 5 s |" in stdout


def test_results_are_on_disk_while_a_later_benchmark_runs(bench_dir, tmp_path):
    out = tmp_path / "out"
    proc = run_all("--dir", str(bench_dir), "--out", str(out), "--timeout", "600")
    try:
        deadline = time.monotonic() + 300
        while not list(out.glob("perf-*.json")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        partial = report(out)
        assert list(partial["benchmarks"]) == ["bench_a_fast.py"]
        assert partial["finished_at"].endswith("(partial: 1/3 benchmarks)")
        assert (next(out.glob("perf-*.md")).read_text().count("bench_a_fast.py")) == 2  # wall time + its figure
    finally:  # the runner, then the hanging benchmark's own process group (it runs in a session of its own)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 60
        marker = bench_dir / "bench_b_hang.py.child"
        while not marker.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        if marker.is_file():
            try:
                os.killpg(int(marker.read_text().split()[1]), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.slow
def test_the_cpu_step_benchmark_reports_every_figure_per_dtype(tmp_path):
    """benchmarks/bench_cpu_step.py --quick (the tiny model): the JSON holds the issue-37 figures, each per
    dtype, the step by phase (HEAD's float32 step from a worktree too), and the targets; run_all passes it
    --quick and --json (it says it takes them)."""
    out = tmp_path / "figures.json"
    script = ROOT / "benchmarks" / "bench_cpu_step.py"
    helptext = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120).stdout
    assert "--quick" in helptext
    assert "--json" in helptext
    proc = subprocess.run([sys.executable, str(script), "--quick", "--baseline-rev", "HEAD", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    dtypes = {"float32", "bfloat16"}
    for key in ("learner_tokens_per_s", "generation_tokens_per_s", "logprob_tokens_per_s",
                "learner_fraction_of_probe", "generation_bound_tokens_per_s"):
        assert set(r[key]) == dtypes, key
        assert all(v > 0 for v in r[key].values()), key
    assert set(r["probe"]["matmul_gflops"]) == dtypes
    assert set(r["step_s"]) == dtypes | {"baseline_float32"}
    assert r["step_s"]["baseline_float32"]["rev"] == "HEAD"
    trees = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout
    assert not [t for t in trees.splitlines() if t.split()[0].endswith("/baseline")]  # the baseline's is removed
    for phases in r["step_s"].values():
        assert {"generate", "env", "logprobs", "update", "sync", "total"} <= set(phases)
        assert phases["total"] >= phases["logprobs"] + phases["update"] > 0
    assert set(r["targets"]) == {"learner_bf16_over_fp32", "step_fp32_over_bf16", "learner_fraction_of_bf16_probe",
                                 "step_baseline_fp32_over_bf16"}
    probe = r["probe"]["matmul_gflops"]
    assert r["targets"]["learner_bf16_over_fp32"]["ceiling"] == pytest.approx(probe["bfloat16"] / probe["float32"])
    assert all("held_back_by" in t for t in r["targets"].values() if not t["met"])  # a miss names its cause
    assert len(r["load"]["before"]) == 3
