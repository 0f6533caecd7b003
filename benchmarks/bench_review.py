"""Does the review page's list of 10,000 episodes render server-side in under a second?

    PYTHONPATH=<checkout> python benchmarks/bench_review.py [--episodes 10000] [--json out.json]

It plays 8 real Chain-v0 episodes (the scripted team, no sandbox calls) and repeats their records, each
with its own task id and seed, into one transcripts.jsonl of `--episodes` lines (4 actions each), then
serves them through the review app in-process (Starlette's test client: routing, filtering, Jinja2
rendering, the verdicts query; no network). Figures, medians of 7 requests after one warm-up:
- `load_s`: reading the file into the index (once, at `mappa review` start-up);
- `list_ms`: GET / (the first page of 100 rows, counts over all episodes);
- `filtered_ms`: GET /?role=step_2&max=3&disagree=1 (every filter that scans actions);
- `last_page_ms`, `queue_ms` (every unreviewed action, sorted), `episode_ms` (one episode page).
The target is `list_ms` < 1000. Medians: the machine may be shared; say the load (`uptime`) beside them.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def make_transcripts(path: Path, episodes: int) -> None:
    import mappa_envs
    from mappa_envs.chain.scripted import ScriptedChainPolicy

    env, team, records = mappa_envs.make("Chain-v0"), ScriptedChainPolicy(skill=0.8, seed=0), []
    for seed in range(8):
        env.reset(seed=seed)
        for agent in env.agent_iter():
            _, _, terminated, truncated, info = env.last()
            env.step(None if terminated or truncated else team.respond([info["messages"]], [agent])[0])
        records.append(env.unwrapped.transcript())
    env.close()
    with path.open("w", encoding="utf-8") as out:
        for i in range(episodes):
            base = records[i % len(records)]
            out.write(json.dumps({"episode": i, "seed": i, **base, "task_id": f"{base['task_id']}-{i}"}) + "\n")


def median_ms(client, url: str, repeat: int = 7) -> float:
    assert client.get(url).status_code == 200, url  # warm-up, and a check that the page renders
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - t)
        assert response.status_code == 200
    return 1e3 * statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    from starlette.testclient import TestClient

    from mappa_train.review.server import prepare

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "transcripts.jsonl"
        make_transcripts(path, args.episodes)
        t = time.perf_counter()
        served = prepare([path], Path(tmp) / "review.sqlite", "127.0.0.1", 8765, None, "bench")
        load_s = time.perf_counter() - t
        client = TestClient(served.app, base_url="http://127.0.0.1:8765")
        last = -(-args.episodes // 100)
        figures = {"episodes": len(served.index.episodes),
                   "actions": sum(len(e.actions) for e in served.index.episodes), "load_s": round(load_s, 3),
                   "list_ms": median_ms(client, "/"),
                   "filtered_ms": median_ms(client, "/?role=step_2&max=3&disagree=1"),
                   "last_page_ms": median_ms(client, f"/?page={last}"), "queue_ms": median_ms(client, "/queue"),
                   "episode_ms": median_ms(client, f"/episode/{args.episodes - 1}")}
    figures = {k: round(v, 1) if isinstance(v, float) and k != "load_s" else v for k, v in figures.items()}
    print(json.dumps(figures, indent=2))
    verdict = "under" if figures["list_ms"] < 1000 else "OVER"
    print(f"list view of {figures['episodes']} episodes: {figures['list_ms']:.0f} ms, {verdict} the 1 s target")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0 if figures["list_ms"] < 1000 else 1


if __name__ == "__main__":
    raise SystemExit(main())
