"""Coach throughput vs concurrency, and the client overhead per call, against the loopback OpenAI stub.

    python benchmarks/bench_coach.py [--quick] [--latency 0.1] [--json figures.json]

Throughput: N scores through `LLMCoach.score` (threads) and `ascore` (asyncio) with the server
answering each request after `--latency` seconds; the ideal is concurrency / latency requests per
second, and "vs raw" compares with the bare openai client sending the same messages at the same
concurrency (what the coach itself costs; on a loaded 2-core machine the client's CPU is the limit).
Overhead: per-call time with zero server latency for the raw `openai` client, `LLMCoach` (prompt
rendering, parsing, accounting on top), and a `CachedCoach` hit (no HTTP at all).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai

from mappa_envs.coach import CachedCoach, CoachRequest, LLMCoach, LLMCoachConfig
from mappa_envs.coach.parse import parse_reply
from mappa_envs.coach.prompts import coach_messages, load_template

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
                        task=f"Find the remainder when 7^{i} is divided by 1000.",
                        action=f"```python\nprint(pow(7, {i}, 1000))\n```",
                        tool_results=[{"stdout": f"{pow(7, i, 1000)}\n", "stderr": "", "ok": True, "timed_out": False}],
                        upstream={"problem_solver": "By Euler's theorem ... \\boxed{1}"},
                        ground_truth=str(pow(7, i, 1000)), checks={"code_present": True})


def make_coach(url: str, concurrency: int) -> LLMCoach:
    return LLMCoach(LLMCoachConfig(model="stub", base_url=url, api_key_env=None, concurrency=concurrency,
                                   max_retries=0))


def throughput(url: str, concurrency: int, n: int) -> dict[str, float]:
    """Requests per second: the coach and the bare openai client (same messages, same concurrency),
    through threads (sync) and asyncio (async)."""
    coach = make_coach(url, concurrency)
    reqs = [request(i) for i in range(n)]
    template = load_template("MathChat-v0")
    payloads = [coach_messages(template, r) for r in reqs]
    raw = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
    rates = {}

    def timed(name, fn):
        started = time.perf_counter()
        fn()
        rates[name] = n / (time.perf_counter() - started)

    with ThreadPoolExecutor(concurrency) as pool:
        timed("raw_sync", lambda: list(pool.map(lambda m: raw.chat.completions.create(model="stub", messages=m),
                                                payloads)))
        timed("coach_sync", lambda: [s.ok or sys.exit("a score failed") for s in pool.map(coach.score, reqs)])

    async def raw_async():
        client, sem = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0), asyncio.Semaphore(concurrency)

        async def one(m):
            async with sem:
                await client.chat.completions.create(model="stub", messages=m)

        await client.chat.completions.create(model="stub", messages=payloads[0])  # one connection warm, as below
        started = time.perf_counter()
        await asyncio.gather(*(one(m) for m in payloads))
        rates["raw_async"] = n / (time.perf_counter() - started)
        await client.close()

    async def coach_async():
        await coach.ascore(reqs[0])
        started = time.perf_counter()
        scores = await asyncio.gather(*(coach.ascore(r) for r in reqs))
        rates["coach_async"] = n / (time.perf_counter() - started)
        assert all(s.ok for s in scores)

    asyncio.run(raw_async())
    asyncio.run(coach_async())
    raw.close()
    coach.close()
    return rates


def overhead(url: str, n: int) -> dict[str, float]:
    """Median milliseconds per call, zero server latency. Raw and coach calls alternate so load
    spikes on a shared machine hit both alike; the raw client sends the coach's exact messages."""
    coach = make_coach(url, 1)
    raw = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
    template = load_template("MathChat-v0")
    messages = coach_messages(template, request(0))
    raw.chat.completions.create(model="stub", messages=messages)  # warm both connections
    coach.score(request(0))
    times: dict[str, list[float]] = {"raw openai call": [], "LLMCoach.score": [], "render + parse only": []}
    for i in range(n):
        t0 = time.perf_counter()
        raw.chat.completions.create(model="stub", messages=messages)
        t1 = time.perf_counter()
        coach.score(request(i))
        t2 = time.perf_counter()
        parse_reply(coach_messages(template, request(i))[1]["content"][-40:] + "\nSCORE: 7")
        t3 = time.perf_counter()
        times["raw openai call"].append(t1 - t0)
        times["LLMCoach.score"].append(t2 - t1)
        times["render + parse only"].append(t3 - t2)
    with tempfile.TemporaryDirectory() as tmp:
        cached = CachedCoach(coach, Path(tmp) / "c.sqlite")
        for i in range(n):
            cached.score(request(i))
        hits = []
        for i in range(n):
            t0 = time.perf_counter()
            cached.score(request(i))
            hits.append(time.perf_counter() - t0)
        times["CachedCoach hit"] = hits
        cached.close()
    coach.close()
    raw.close()
    return {name: 1e3 * statistics.median(ts) for name, ts in times.items()}


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
        print(f"{'concurrency':>11} {'requests':>8} {'ideal/s':>8} {'sync/s':>8} {'async/s':>8} {'sync eff':>8} "
              f"{'async eff':>9} {'sync vs raw':>11} {'async vs raw':>12}")
        base = None
        for c in levels:
            n = max(32, 8 * c)
            r = throughput(url, c, n)
            ideal = c / args.latency
            base = base or r
            report["throughput"][str(c)] = {"requests": n, "ideal_per_s": ideal,
                                            **{f"{k}_per_s": v for k, v in r.items()},
                                            "sync_speedup": r["coach_sync"] / base["coach_sync"],
                                            "async_speedup": r["coach_async"] / base["coach_async"],
                                            "sync_vs_raw": r["coach_sync"] / r["raw_sync"],
                                            "async_vs_raw": r["coach_async"] / r["raw_async"]}
            print(f"{c:>11} {n:>8} {ideal:>8.1f} {r['coach_sync']:>8.1f} {r['coach_async']:>8.1f} "
                  f"{r['coach_sync'] / ideal:>8.0%} {r['coach_async'] / ideal:>9.0%} "
                  f"{r['coach_sync'] / r['raw_sync']:>10.2f}x {r['coach_async'] / r['raw_async']:>11.2f}x")
    with stub_server(0.0) as url:
        figures = overhead(url, n_calls)
    report["overhead_ms"] = figures
    print(f"\nper-call time (median of {n_calls}), zero server latency:")
    for name, ms in figures.items():
        print(f"  {name:<20} {ms:7.3f} ms  ({ms / figures['raw openai call']:.2f}x raw)")
    extra_ms = figures["LLMCoach.score"] - figures["raw openai call"]
    print(f"  LLMCoach on top of the raw client: {extra_ms:.3f} ms per call")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
