"""Random and scripted policies over every registered env: a smoke benchmark of the wrappers' loop.

For each env id in `mappa_envs.registry` and each policy ("random" samples the action space;
"scripted" is the env's built-in team, where it has one), plays episodes over several env instances
with `VectorRunner` (one batched policy call per round), optionally writing transcripts, and prints
one row per (env, policy): outcome score, each role's mean return, and throughput. An env that cannot
be built here (missing data, say) gets a row saying why instead.

    python examples/benchmark_policies.py --episodes 8 --envs 4 --transcripts runs/bench.jsonl
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import mappa_envs
from mappa_envs.random_policy import RandomPolicy  # well-formed random actions from the env's vocabulary
from mappa_envs.registration import load_callable
from mappa_envs.sandbox import make_sandbox
from mappa_envs.sandbox.types import SANDBOX_BACKENDS
from mappa_envs.wrappers import TranscriptRecorder, VectorRunner


def policies(env_id: str, env, seed: int) -> dict:
    spec = mappa_envs.spec(env_id)
    out = {"random": RandomPolicy(env, seed)}
    if spec.scripted_policy:
        out["scripted"] = load_callable(spec.scripted_policy)(env, seed=seed)
    return out


def bench(env_id: str, args) -> list[dict]:
    # One sandbox for all instances, a warm session per instance. Nothing preimported: code that needs
    # pandas imports it itself, and preimporting costs seconds per session on a small machine.
    sandbox = make_sandbox(args.sandbox, preimport=(), pool_size=args.envs)
    try:
        envs = [mappa_envs.make(env_id, sandbox=sandbox, **json.loads(args.env_kwargs)) for _ in range(args.envs)]
    except Exception as e:  # report and carry on: one env's missing data must not hide the others
        sandbox.close()
        return [{"env": env_id, "policy": "-", "error": f"{type(e).__name__}: {e}"}]
    rows = []
    try:
        for name, policy in policies(env_id, envs[0], args.seed).items():
            wrapped = [TranscriptRecorder(e, args.transcripts) for e in envs] if args.transcripts else envs
            started = time.perf_counter()
            results = VectorRunner(wrapped, policy).run(args.episodes, seed=args.seed)
            wall = time.perf_counter() - started
            actions = sum(len(r.turns) for r in results)
            roles = envs[0].possible_agents
            rows.append({
                "env": env_id, "policy": name, "episodes": len(results),
                "outcome": sum(r.outcome.score if r.outcome else 0.0 for r in results) / len(results),
                "returns": {a: round(sum(r.returns[a] for r in results) / len(results), 2) for a in roles},
                "actions": actions, "actions_per_s": round(actions / wall, 2), "wall_s": round(wall, 2),
            })
    finally:
        for e in envs:
            e.close()
        sandbox.close()
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=8, help="episodes per (env, policy)")
    p.add_argument("--envs", type=int, default=4, help="env instances run side by side")
    p.add_argument("--only", nargs="*", help="env ids to run (default: every registered env)")
    p.add_argument("--sandbox", default="local", choices=SANDBOX_BACKENDS)
    p.add_argument("--env-kwargs", default="{}", help='JSON kwargs for every env, e.g. \'{"num_tasks": 16}\'')
    p.add_argument("--transcripts", type=Path, help="append one JSON line per episode here")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.episodes < 1 or args.envs < 1:
        p.error(f"--episodes and --envs must be >= 1, got {args.episodes} and {args.envs}")
    unknown = sorted(set(args.only or []) - set(mappa_envs.registry))
    if unknown:
        p.error(f"unknown env ids {unknown}; registered: {sorted(mappa_envs.registry)}")
    transcripts = args.transcripts and args.transcripts.open("a", encoding="utf-8")
    args.transcripts = transcripts  # one handle shared by every recorder (they write whole lines under a lock)
    rows = [row for env_id in (args.only or sorted(mappa_envs.registry)) for row in bench(env_id, args)]
    if transcripts:
        transcripts.close()
    for row in rows:
        if "error" in row:
            print(f"{row['env']:<14} skipped: {row['error']}")
        else:
            print(f"{row['env']:<14} {row['policy']:<9} episodes={row['episodes']} outcome={row['outcome']:.3f} "
                  f"actions/s={row['actions_per_s']} wall={row['wall_s']}s returns={row['returns']}")
    return rows


if __name__ == "__main__":
    main()
