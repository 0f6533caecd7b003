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
        s = Sample(torch.randint(5, 2000, (p,), generator=g).tolist(),
                   torch.randint(5, 2000, (a,), generator=g).tolist())
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
        learners = {}
        for layout in ("packed", "padded"):
            cfg = LearnerConfig(lr=1e-5, packed=layout == "packed", micro_batch_tokens=args.micro_tokens,
                                micro_batch_size=args.micro_rows, train_batch_size=args.samples)
            learners[layout] = PolicyLearner(path, cfg, AlgoConfig())
        for s, lp in zip(batch, learners["packed"].logprobs(batch)):
            s.old_logp = lp
        times: dict[str, list[float]] = {"packed": [], "padded": []}
        for learner in learners.values():
            learner.train(batch, lr=1e-5)  # warm-up
        for _ in range(args.repeats):  # alternate, so a change in machine load hits both layouts alike
            for layout, learner in learners.items():
                t0 = time.perf_counter()
                learner.train(batch, lr=1e-5)
                times[layout].append(time.perf_counter() - t0)
        results = {}
        for layout, learner in learners.items():
            best = min(times[layout])
            results[layout] = tokens / best
            computed = tokens if layout == "packed" else sum(len(m) * max(map(len, m)) for m in learner._split(batch))
            print(f"{layout:>7}: {tokens / best:9.0f} tokens/s  (best update {best:.2f} s of {args.repeats}, "
                  f"{tokens} real tokens, {computed} computed)", flush=True)
        print(f"packed / padded = {results['packed'] / results['padded']:.2f}x  "
              f"({args.samples} samples, hidden {args.hidden}, {args.layers} layers, "
              f"{torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
