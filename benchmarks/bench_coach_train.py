"""Train a judge on Chain-v0 rule-coach labels and measure held-out action AUROC before and after.

    .venv/bin/python benchmarks/bench_coach_train.py --model smollm2-135m --steps 30 --out runs/bench-judge

Labels: coach-eval's scripted Chain-v0 episodes (faults and master-key probes) in `--view`, scored by
the rule coach; tasks split by a seeded hash (`--heldout`). Both judges (the base and the trained
folder) answer the coach's prompt in-process (`LocalJudge`: greedy, the coach's parse), cut to the
same `--max-tokens` the training used. Prints one JSON line with the figures, the seed and the load.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--view", default="own")
    p.add_argument("--num-tasks", type=int, default=20)
    p.add_argument("--heldout", type=float, default=0.3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--eval-actions", type=int, default=40, help="held-out actions scored by each judge (half right)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    from mappa_train.coach_training.examples import from_scripted, split_by_task
    from mappa_train.coach_training.judge import LocalJudge, auroc_of
    from mappa_train.coach_training.train import JudgeTrainConfig, train_judge
    from mappa_train.model_source import resolve_model

    started = time.time()
    labelled = from_scripted("Chain-v0", {"view": a.view, "num_tasks": a.num_tasks, "split": "train"})
    train, held = split_by_task(labelled, a.heldout, a.seed)
    cfg = JudgeTrainConfig(model=str(resolve_model(a.model)), steps=a.steps, batch_size=a.batch_size, lr=a.lr,
                           rationale_chars=0, max_tokens=a.max_tokens, seed=a.seed)
    record = train_judge(train, held, a.out, cfg, say=lambda m: print(m, flush=True))
    trained_s = time.time() - started
    rng = random.Random(a.seed)  # a balanced, seeded subset: right and wrong held-out actions alike
    right, wrong = [e for e in held if e.score >= 5], [e for e in held if e.score < 5]
    half = a.eval_actions // 2
    held = rng.sample(right, min(len(right), half)) + rng.sample(wrong, min(len(wrong), half))
    requests, labels = [e.request for e in held], [e.score >= 5 for e in held]
    trained = LocalJudge(a.out, max_new_tokens=24)
    after, after_none = auroc_of(trained, requests, labels)
    base = LocalJudge(cfg.model, max_new_tokens=24)
    base.prompt_tokens = trained.prompt_tokens  # the same prompt cut as the trained judge's
    before, before_none = auroc_of(base, requests, labels)
    print(json.dumps({"model": a.model, "view": a.view, "seed": a.seed, "steps": a.steps, "labels": len(labelled),
                      "train_tasks": record["train_tasks"], "heldout_tasks": record["heldout_tasks"],
                      "eval_actions": len(held), "positives": sum(labels), "auroc_before": before,
                      "unscored_before": before_none, "auroc_after": after, "unscored_after": after_none,
                      "loss_first": record["loss_first"], "loss_last": record["loss_last"],
                      "train_s": round(trained_s), "total_s": round(time.time() - started),
                      "load_1m": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
