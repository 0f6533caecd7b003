"""DSBench-v0 speed: task generation, submission scoring, and scripted-team episodes.

    python benchmarks/bench_dsbench.py [--quick] [--json figures.json]

Figures:
- built-in task generation, cold (all tasks, with baseline and reference fits) vs loading the cache;
- scoring a large submission by id join and full validation vs the reference implementation's way
  (row order, second column only, no checks) — the price of honest scoring;
- scripted-team episodes through env.step() on the local sandbox: wall time per episode, and bytes
  of task files placed per episode vs re-uploading them with every cell (a stateless sandbox).
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from mappa_envs.dsbench.builtin import builtin_tasks
from mappa_envs.dsbench.env import DSBenchEnv
from mappa_envs.dsbench.metrics import compute_metric
from mappa_envs.dsbench.scoring import score_submission
from mappa_envs.dsbench.scripted import ScriptedDSPolicy
from mappa_envs.dsbench.tasks import task_from_folder


def bench_generation() -> dict:
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        builtin_tasks(d)
        cold = time.perf_counter() - t
        t = time.perf_counter()
        builtin_tasks(d)
        warm = time.perf_counter() - t
    return {"generate_all_builtin_s": cold, "load_cached_builtin_s": warm}


def bench_scoring(rows: int) -> dict:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        ids = rng.permutation(rows) + 1_000_000
        truth = pd.DataFrame({"id": ids, "target": rng.integers(0, 2, rows)})
        (root / "data_resplit" / "t").mkdir(parents=True)
        (root / "answers" / "t").mkdir(parents=True)
        truth.to_csv(root / "data_resplit" / "t" / "train.csv", index=False)
        truth[["id"]].to_csv(root / "data_resplit" / "t" / "test.csv", index=False)
        truth.to_csv(root / "answers" / "t" / "test_answer.csv", index=False)
        task = task_from_folder(root, "t", "", "roc_auc", "id")
        sub = truth.assign(target=truth.target * 0.5 + rng.random(rows) * 0.5).sample(frac=1, random_state=0)
        data = sub.to_csv(index=False).encode()
        t = time.perf_counter()
        report = score_submission(task, data)
        ours = time.perf_counter() - t
        assert report.valid
        t = time.perf_counter()  # row order, second column, no validation
        naive = pd.read_csv(root / "answers" / "t" / "test_answer.csv").iloc[:, 1]
        compute_metric("roc_auc", naive, pd.read_csv(pd.io.common.BytesIO(data)).iloc[:, 1])
        rowwise = time.perf_counter() - t
    return {"score_rows": rows, "score_by_id_s": ours, "score_row_order_s": rowwise,
            "score_by_id_over_row_order": ours / rowwise}


def bench_episodes(task_ids: list[str]) -> dict:
    env = DSBenchEnv()
    policy = ScriptedDSPolicy(env.scenario.task_list)
    walls, cells, placed = [], [], []
    try:
        for task_id in task_ids:
            t = time.perf_counter()
            env.reset(options={"task_id": task_id})
            for agent in env.agent_iter():
                _, _, term, trunc, _ = env.last()
                env.step(None if term or trunc else policy.respond([env.infos[agent]["messages"]], [agent])[0])
            walls.append(time.perf_counter() - t)
            task = next(x for x in env.scenario.task_list if x.id == task_id)
            size = sum(p.stat().st_size for p in (task.train_csv, task.test_csv, task.sample_submission_csv))
            n_cells = sum(len(a.tool_results) for a in env.episode.actions)
            placed.append(size)
            cells.append(n_cells * size)
    finally:
        env.close()
    return {"episodes": len(walls), "episode_wall_p50_s": statistics.median(walls), "episode_wall_max_s": max(walls),
            "task_bytes_placed_per_episode": statistics.mean(placed),
            "task_bytes_if_reuploaded_per_cell": statistics.mean(cells)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rows and episodes")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    tasks = [t.id for t in builtin_tasks()]
    figures = {**bench_generation(), **bench_scoring(50_000 if args.quick else 500_000),
               **bench_episodes(tasks[:3] if args.quick else tasks)}
    for k, v in figures.items():
        print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
