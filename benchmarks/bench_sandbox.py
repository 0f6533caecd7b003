"""Sandbox speed, per backend, with the issue's targets side by side.

    python benchmarks/bench_sandbox.py [--backends local docker] [--json out.json]

Figures: session open from the warm pool vs a cold start; trivial cell p50/p99 in a warm session;
a pandas+sklearn cell in a warm session vs a fresh Python process per call (the stateless
baseline: re-import everything every time); cells/s with 8 concurrent sessions.
Targets: trivial warm cell p50 <= 10 ms; session open from the pool p50 <= 50 ms;
pandas+sklearn warm cell >= 50x faster than a fresh process per call.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

from mappa_envs.sandbox import make_sandbox
from mappa_envs.sandbox.docker import LABEL, OWNER_LABEL, docker_status

DS_CELL = """
import numpy as np, pandas as pd
from sklearn.linear_model import LogisticRegression
df = pd.DataFrame({"a": np.arange(200) % 7, "b": np.arange(200) % 5})
clf = LogisticRegression(max_iter=200).fit(df[["a", "b"]], df.a > 3)
print(round(clf.score(df[["a", "b"]], df.a > 3), 3))
"""


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench_open(backend: str, n: int) -> dict:
    warm_sb = make_sandbox(backend, pool_size=1)
    warm = []
    for _ in range(n):
        warm_sb.wait_warm(300)
        t = time.perf_counter()
        s = warm_sb.open()
        warm.append(time.perf_counter() - t)
        s.close()
    warm_sb.close()
    cold_sb = make_sandbox(backend, pool_size=0)
    cold = []
    for _ in range(max(2, n // 4)):
        t = time.perf_counter()
        s = cold_sb.open()
        cold.append(time.perf_counter() - t)
        s.close()
    cold_sb.close()
    return {"open_pool_p50_ms": 1e3 * statistics.median(warm), "open_cold_p50_ms": 1e3 * statistics.median(cold)}


def bench_cells(backend: str, n_trivial: int, n_ds: int, n_fresh: int, concurrency: int, seconds: float) -> dict:
    sb = make_sandbox(backend, pool_size=concurrency)
    out = {}
    with sb.session() as s:
        for _ in range(20):  # warm-up
            s.run("1 + 1")
        trivial = [timed(lambda: s.run("1 + 1")) for _ in range(n_trivial)]
        out["trivial_p50_ms"], out["trivial_p99_ms"] = 1e3 * pct(trivial, 0.5), 1e3 * pct(trivial, 0.99)
        assert s.run(DS_CELL).ok
        warm_ds = [timed(lambda: s.run(DS_CELL)) for _ in range(n_ds)]
        out["ds_warm_p50_ms"] = 1e3 * statistics.median(warm_ds)
    out["ds_fresh_p50_ms"] = 1e3 * statistics.median(fresh_process_calls(sb, backend, n_fresh))
    out["ds_speedup"] = out["ds_fresh_p50_ms"] / out["ds_warm_p50_ms"]

    sb.wait_warm(300)
    sessions = [sb.open() for _ in range(concurrency)]
    counts = [0] * concurrency
    stop = time.perf_counter() + seconds

    def worker(i: int) -> None:
        while time.perf_counter() < stop:
            sessions[i].run("x = sum(range(100))")
            counts[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    out[f"cells_per_s_{concurrency}_sessions"] = sum(counts) / (time.perf_counter() - t)
    for s in sessions:
        s.close()
    sb.close()
    return out


def fresh_process_calls(sb, backend: str, n: int) -> list[float]:
    """The stateless baseline: every call is a new Python process that imports everything again."""
    if backend == "local":
        return [timed(lambda: subprocess.run([sys.executable, "-c", DS_CELL], check=True, capture_output=True))
                for _ in range(n)]
    container = sb.client.containers.run(sb.image, ["sleep", "infinity"], detach=True, network_mode="none",
                                         labels={LABEL: sb.id, OWNER_LABEL: sb.owner})  # reaped if we crash
    try:  # a warm container, so only the per-call process start and imports are measured
        return [timed(lambda: container.exec_run(["python3", "-c", DS_CELL])) for _ in range(n)]
    finally:
        container.remove(force=True)


def describe(backend: str) -> str:
    """What the measured sandbox isolates, so that figures are read with their setting."""
    sb = make_sandbox(backend, pool_size=0, preimport=())
    try:
        uids = "a uid per kernel" if sb.separate_kernel_uids else "one uid for all kernels"
        return f"{sb!r}: {uids}; memory: {getattr(sb, 'memory_limit', 'container cgroup')}"
    finally:
        sb.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", nargs="+", default=["local", "docker"], choices=["local", "docker"])
    p.add_argument("--opens", type=int, default=12)
    p.add_argument("--cells", type=int, default=300)
    p.add_argument("--ds-cells", type=int, default=20)
    p.add_argument("--fresh-calls", type=int, default=5)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()

    results: dict[str, dict] = {}
    for backend in args.backends:
        if backend == "docker" and not docker_status()[0]:
            print(f"docker: skipped ({docker_status()[1]})")
            continue
        print(f"{backend}: measuring ...", flush=True)
        print(f"  {describe(backend)}", flush=True)
        results[backend] = {**bench_open(backend, args.opens),
                            **bench_cells(backend, args.cells, args.ds_cells, args.fresh_calls, args.concurrency,
                                          args.seconds)}

    rows = [("session open, warm pool p50 (ms)", "open_pool_p50_ms", "<= 50"),
            ("session open, cold p50 (ms)", "open_cold_p50_ms", ""),
            ("trivial cell p50 (ms)", "trivial_p50_ms", "<= 10"),
            ("trivial cell p99 (ms)", "trivial_p99_ms", ""),
            ("pandas+sklearn cell, warm session p50 (ms)", "ds_warm_p50_ms", ""),
            ("pandas+sklearn, fresh process per call p50 (ms)", "ds_fresh_p50_ms", ""),
            ("  speed-up warm vs fresh (x)", "ds_speedup", ">= 50"),
            (f"cells/s, {args.concurrency} concurrent sessions", f"cells_per_s_{args.concurrency}_sessions", "")]
    names = list(results)
    print(f"\n{'':50}" + "".join(f"{n:>12}" for n in names) + f"{'target':>10}")
    for label, key, target in rows:
        print(f"{label:50}" + "".join(f"{results[n][key]:12.1f}" for n in names) + f"{target:>10}")
    if len(names) == 2:
        a, b = names
        print(f"\nratios {b}/{a}: " + ", ".join(f"{key} {results[b][key] / results[a][key]:.2f}" for _, key, _ in rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
