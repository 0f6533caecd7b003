"""Benchmark metrics over k samples per problem, and the statistics that make runs comparable.

The unit of every standard error and bootstrap is the *problem*: each problem contributes one
per-problem figure (its avg@k, pass@k or maj@k), and the spread is taken across problems.
`accuracy_change` compares two evaluations of one training run problem by problem.

- avg@k: the mean correctness of a problem's k samples (rule-checked, never the coach's opinion).
- pass@k: the unbiased estimator of "at least one of k samples is right" from n >= k samples with
  c correct: 1 - C(n-c, k) / C(n, k) (Chen et al., 2021). Not 1 - (1 - c/n)^k, which is biased.
- maj@k: a vote over the *extracted answers* of one problem's samples. Samples with no answer do
  not vote; answers that `same(a, b)` says are equal pool their votes. A tie between classes counts
  as the expected value of a fair tie-break (1/2 for a tie of one right and one wrong class), so the
  figure does not depend on sample order.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mappa_envs.errors import InputError
from mappa_train.runlog import eval_outcomes


@dataclass(frozen=True)
class MeanSE:
    """A mean with its standard error (sample std / sqrt(n)); `se` is NaN when n < 2."""

    mean: float
    se: float
    n: int

    def to_dict(self) -> dict:
        return {"mean": self.mean, "se": None if math.isnan(self.se) else self.se, "n": self.n}

    @classmethod
    def from_dict(cls, d: dict) -> MeanSE:
        return cls(d["mean"], math.nan if d.get("se") is None else d["se"], d["n"])

    def format(self, digits: int = 3) -> str:
        if self.n == 0:
            return "–"
        if math.isnan(self.se):
            return f"{self.mean:.{digits}f} (n={self.n})"
        return f"{self.mean:.{digits}f} ± {self.se:.{digits}f}"


def mean_se(values: Sequence[float]) -> MeanSE:
    """Mean and standard error of the mean; empty input gives NaN mean and n = 0."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return MeanSE(math.nan, math.nan, 0)
    se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan
    return MeanSE(float(x.mean()), se, int(x.size))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with n samples, c of them correct."""
    if not 0 <= c <= n:
        raise InputError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise InputError(f"pass_at_k: need 1 <= k <= n, got k={k} with n={n} samples; sample more or lower k")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_vote(answers: Sequence[Hashable | None], correct: Sequence[bool],
                  same: Callable[[object, object], bool] | None = None) -> float:
    """maj@k of one problem: the chance that a vote over its samples' answers picks a right one.

    `answers[i]` is sample i's extracted answer (None: it gave none) and `correct[i]` whether it is
    right. `same` decides which answers are one vote (default: ==); the first answer seen names its
    class. A class counts as right when any of its samples is (equal answers share correctness).
    """
    if len(answers) != len(correct):
        raise ValueError(f"majority_vote: {len(answers)} answers but {len(correct)} correctness flags")
    same = same or (lambda a, b: a == b)
    classes: list[list[int]] = []  # sample indices, one list per answer class
    for i, a in enumerate(answers):
        if a is None:
            continue
        for members in classes:
            if same(answers[members[0]], a):
                members.append(i)
                break
        else:
            classes.append([i])
    if not classes:
        return 0.0
    top = max(len(m) for m in classes)
    winners = [m for m in classes if len(m) == top]
    return sum(any(correct[i] for i in m) for m in winners) / len(winners)


@dataclass(frozen=True)
class Sample:
    """One finished episode as the metrics see it."""

    problem: str
    correct: bool
    answer: Hashable | None = None


def group_by_problem(samples: Sequence[Sample]) -> dict[str, list[Sample]]:
    """Samples per problem id, in input order (the key is the id, never the position)."""
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.problem, []).append(s)
    return groups


def per_problem(samples: Sequence[Sample], k: int,
                same: Callable[[object, object], bool] | None = None) -> dict[str, dict]:
    """Per-problem figures: n samples, c correct, avg, pass@j for j = 1..min(k, n), maj@k.

    maj@k votes over the problem's first k samples (all of them when fewer).
    """
    out = {}
    for pid, group in group_by_problem(samples).items():
        n, c = len(group), sum(s.correct for s in group)
        voters = group[:k]
        out[pid] = {
            "n": n,
            "c": c,
            "avg": c / n,
            "pass": {j: pass_at_k(n, c, j) for j in range(1, min(k, n) + 1)},
            "maj": majority_vote([s.answer for s in voters], [s.correct for s in voters], same),
        }
    return out


def pass_ks(k: int) -> list[int]:
    """The pass@j figures reported for k samples: 1, 2, 4, ... and k itself."""
    js, j = [], 1
    while j < k:
        js.append(j)
        j *= 2
    return js + [k]


@dataclass(frozen=True)
class PairedCI:
    """Mean of (b - a) over paired problems with a bootstrap confidence interval."""

    delta: float
    low: float
    high: float
    n: int
    level: float

    def to_dict(self) -> dict:
        return {"delta": self.delta, "low": self.low, "high": self.high, "n": self.n, "level": self.level}

    @property
    def significant(self) -> bool:
        """The interval excludes zero."""
        return self.low > 0 or self.high < 0


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n_boot: int = 10_000, level: float = 0.95,
                     seed: int = 0) -> PairedCI:
    """Percentile bootstrap CI of mean(b - a): problems are resampled with replacement, pairs kept."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired_bootstrap: need two equal-length 1-D sequences, got {x.shape} and {y.shape}")
    if x.size == 0:
        raise InputError("paired_bootstrap: no paired problems (do the runs share an eval set?)")
    d = y - x
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return PairedCI(float(d.mean()), float(low), float(high), int(d.size), level)


def problem_means(outcomes: dict[str, list[float]], tasks: list[str]) -> list[float]:
    """Each problem's mean correctness over its samples, in `tasks` order (the unit a paired bootstrap resamples)."""
    return [sum(outcomes[t]) / len(outcomes[t]) for t in tasks]


def accuracy_change(out_dir: str | Path, eval_set: str, first: int, last: int, n_boot: int = 10_000,
                    seed: int = 0) -> tuple[list[str], list[float], list[float], PairedCI]:
    """Held-out accuracy at the evaluations of steps `first` and `last` of one run: the problems, each
    one's accuracy before and after, and the paired bootstrap of the change, read from the run's log
    (mappa_train.runlog). Both evaluations must have played the same problems and samples, else the
    comparison would not be paired."""
    before, after = eval_outcomes(out_dir, first, eval_set), eval_outcomes(out_dir, last, eval_set)
    tasks = sorted(before)
    if sorted(after) != tasks or any(len(before[t]) != len(after[t]) for t in tasks):
        raise RuntimeError(f"the evaluations at steps {first} and {last} of {out_dir} did not play the same "
                           f"problems and samples; re-run in a fresh output directory")
    b, a = problem_means(before, tasks), problem_means(after, tasks)
    return tasks, b, a, paired_bootstrap(b, a, n_boot=n_boot, seed=seed)


@dataclass(frozen=True)
class RatioCI:
    """mean(a) / mean(b) of paired values with a percentile bootstrap interval over the pairs."""

    ratio: float
    low: float
    high: float
    n: int
    level: float
    exhaustive: bool  # every one of the n^n resamples was taken (small n), not a random n_boot of them

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "n": self.n, "level": self.level,
                "exhaustive": self.exhaustive}


def ratio_bootstrap(a: Sequence[float], b: Sequence[float], n_boot: int = 10_000, level: float = 0.95,
                    seed: int = 0) -> RatioCI:
    """Percentile bootstrap interval of mean(a) / mean(b) (e.g. process / outcome rollouts to a target, one
    pair per seed): pairs are resampled with replacement, kept together. With n^n <= n_boot every resample
    is enumerated once (exact for the handful of seeds an ablation has); else n_boot random ones."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise InputError(f"ratio_bootstrap: need two equal-length, non-empty 1-D sequences, got {x.shape} and "
                         f"{y.shape}")
    if not (y > 0).all():
        raise InputError("ratio_bootstrap: the denominators must be > 0 (rollouts to a target are)")
    n = x.size
    exhaustive = n ** n <= n_boot
    if exhaustive:
        index = np.indices((n,) * n).reshape(n, -1).T  # [n^n, n]: every resample
    else:
        index = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    ratios = x[index].mean(axis=1) / y[index].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return RatioCI(float(x.mean() / y.mean()), float(low), float(high), n, level, exhaustive)
