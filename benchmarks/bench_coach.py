"""Coach throughput vs concurrency, and the client overhead per call, against the loopback OpenAI stub.

    python benchmarks/bench_coach.py [--quick] [--latency 0.1] [--json figures.json]

Throughput: N scores through `LLMCoach.score` (threads) and `ascore` (asyncio) with the server
answering each request after `--latency` seconds; the ideal is concurrency / latency requests per
second. Overhead: per-call time with zero server latency for the raw `openai` client, `LLMCoach`
(prompt rendering, parsing, accounting on top), and a `CachedCoach` hit (no HTTP at all).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai

from mappa_envs.coach import CachedCoach, CoachRequest, LLMCoach, LLMCoachConfig
from mappa_envs.coach.prompts import load_template, render_messages

STUB = Path(__file__).resolve().parents[1] / "tests" / "openai_stub.py"


@contextlib.contextmanager
def stub_server(delay_s: float):
    """The loopback OpenAI stub in its own process, so it does not compete for this one's GIL."""
    proc = subprocess.Popen([sys.executable, str(STUB), "--delay-s", str(delay_s)], stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait()


def request(i: int) -> CoachRequest:
    return CoachRequest(env_id="MathChat-v0", role="code_executor", role_duties="Check the Solver's work with Python.",
                        task=f"Find the remainder when 7^{i} is divided by 1000.", action="```python\nprint(pow(7, %d, 1000))\n```" % i,
                        tool_results=[{"stdout": f"{pow(7, i, 1000)}\n", "stderr": "", "ok": True, "timed_out": False}],
                        upstream={"problem_solver": "By Euler's theorem ... \\boxed{1}"}, ground_truth=str(pow(7, i, 1000)),
                        checks={"code_present": True})


def make_coach(url: str, concurrency: int) -> LLMCoach:
    return LLMCoach(LLMCoachConfig(model="stub", base_url=url, api_key_env=None, concurrency=concurrency, max_retries=0))


def throughput(url: str, concurrency: int, n: int) -> tuple[float, float]:
    """Requests per second through the sync (threads) and async paths."""
    coach = make_coach(url, concurrency)
    reqs = [request(i) for i in range(n)]
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        assert all(s.ok for s in pool.map(coach.score, reqs))
    sync_rate = n / (time.perf_counter() - started)

    async def run():
        return await asyncio.gather(*(coach.ascore(r) for r in reqs))

    started = time.perf_counter()
    assert all(s.ok for s in asyncio.run(run()))
    coach.close()
    return sync_rate, n / (time.perf_counter() - started)


def overhead(url: str, n: int) -> dict[str, float]:
    """Milliseconds per sequential call with zero server latency (the raw client sends the same messages)."""
    coach = make_coach(url, 1)
    raw = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
    messages = render_messages(load_template("MathChat-v0"), request(0))  # the same payload the coach sends
    raw.chat.completions.create(model="stub", messages=messages)  # warm the connection
    coach.score(request(0))
    figures = {}
    started = time.perf_counter()
    for _ in range(n):
        raw.chat.completions.create(model="stub", messages=messages)
    figures["raw openai call"] = 1e3 * (time.perf_counter() - started) / n
    started = time.perf_counter()
    for i in range(n):
        coach.score(request(i))
    figures["LLMCoach.score"] = 1e3 * (time.perf_counter() - started) / n
    with tempfile.TemporaryDirectory() as tmp:
        cached = CachedCoach(coach, Path(tmp) / "c.sqlite")
        for i in range(n):
            cached.score(request(i))
        started = time.perf_counter()
        for i in range(n):
            cached.score(request(i))
        figures["CachedCoach hit"] = 1e3 * (time.perf_counter() - started) / n
        cached.close()
    coach.close()
    raw.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests and concurrency levels")
    parser.add_argument("--latency", type=float, default=0.1, help="server latency per request, seconds")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    levels = [1, 4, 16] if args.quick else [1, 2, 4, 8, 16, 32]
    n_calls = 100 if args.quick else 300
    report: dict = {"latency_s": args.latency, "throughput": {}, "overhead_ms": {}}

    with stub_server(args.latency) as url:
        print(f"throughput vs concurrency, server latency {args.latency * 1e3:.0f} ms (ideal = concurrency / latency)")
        print(f"{'concurrency':>11} {'requests':>8} {'ideal/s':>8} {'sync/s':>8} {'async/s':>8} {'sync eff':>8} {'async eff':>9}")
        base = None
        for c in levels:
            n = max(16, 4 * c)
            sync_rate, async_rate = throughput(url, c, n)
            ideal = c / args.latency
            base = base or (sync_rate, async_rate)
            report["throughput"][str(c)] = {"requests": n, "ideal_per_s": ideal, "sync_per_s": sync_rate,
                                            "async_per_s": async_rate, "sync_speedup": sync_rate / base[0],
                                            "async_speedup": async_rate / base[1]}
            print(f"{c:>11} {n:>8} {ideal:>8.1f} {sync_rate:>8.1f} {async_rate:>8.1f} "
                  f"{sync_rate / ideal:>8.0%} {async_rate / ideal:>9.0%}")
    with stub_server(0.0) as url:
        figures = overhead(url, n_calls)
    report["overhead_ms"] = figures
    print(f"\nper-call time, zero server latency, {n_calls} sequential calls:")
    for name, ms in figures.items():
        print(f"  {name:<16} {ms:7.3f} ms  ({ms / figures['raw openai call']:.2f}x raw)")
    print(f"  LLMCoach on top of the raw client: {figures['LLMCoach.score'] - figures['raw openai call']:.3f} ms per call")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
