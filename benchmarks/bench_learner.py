"""Learner throughput: tokens/s of a PPO update, packed vs padded micro-batches, on a tiny model.

    python benchmarks/bench_learner.py [--samples 64] [--hidden 256] [--layers 4] [--repeats 3]

Samples have the uneven lengths of multi-agent transcripts (long prompts, short actions), which is
where padding wastes compute. Prints tokens/s for each layout and their ratio.
"""
from __future__ import annotations

import argparse
import tempfile
import time

import torch

from mappa_train.config import AlgoConfig, LearnerConfig
from mappa_train.learner import PolicyLearner, Sample
from mappa_train.tiny_model import build_tiny_model


def samples(n: int, seed: int = 0) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        p = int(torch.randint(64, 768, (1,), generator=g))
        a = int(torch.randint(8, 192, (1,), generator=g))
        s = Sample(torch.randint(5, 2000, (p,), generator=g).tolist(), torch.randint(5, 2000, (a,), generator=g).tolist())
        s.advantages = torch.randn(a, generator=g)
        out.append(s)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--micro-tokens", type=int, default=4096, help="packed token budget per forward")
    ap.add_argument("--micro-rows", type=int, default=4, help="padded rows per forward")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(tmp, hidden_size=args.hidden, layers=args.layers, heads=args.hidden // 64, kv_heads=1)
        batch = samples(args.samples)
        tokens = sum(len(s) for s in batch)
        results = {}
        for packed in (True, False):
            cfg = LearnerConfig(lr=1e-5, packed=packed, micro_batch_tokens=args.micro_tokens,
                                micro_batch_size=args.micro_rows, train_batch_size=args.samples)
            learner = PolicyLearner(path, cfg, AlgoConfig())
            for s, lp in zip(batch, learner.logprobs(batch)):
                s.old_logp = lp
            learner.train(batch, lr=1e-5)  # warm-up
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                learner.train(batch, lr=1e-5)
                times.append(time.perf_counter() - t0)
            best = min(times)
            results["packed" if packed else "padded"] = tokens / best
            layout = "packed" if packed else "padded"
            padded_tokens = sum(len(m) * max(map(len, m)) for m in learner._split(batch)) if not packed else tokens
            print(f"{layout:>7}: {tokens / best:9.0f} tokens/s  (update {best:.2f} s, {tokens} real tokens, "
                  f"{padded_tokens} computed)", flush=True)
            del learner
        print(f"packed / padded = {results['packed'] / results['padded']:.2f}x  "
              f"({args.samples} samples, hidden {args.hidden}, {args.layers} layers, {torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
