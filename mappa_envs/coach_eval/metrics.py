"""The report card's metrics, on plain lists: each has a brute-force twin in
tests/envs/coach_eval/test_coach_eval.py.

- `auroc`: the probability that a random positive outscores a random negative (ties count half);
- `step_blame`: per faulty episode, is a faulty action (one whose verifiable facts the fault changed)
  strictly the lowest-valued, and is every other action within `tolerance` of its counterpart (same
  role, same index in the role's turn) in the same task's fault-free episode?
- `master_key_rate`: the fraction of no-work actions scored at or above `threshold`;
- `calibration`: mean value per group (role, task type) at equal ground truth (right / wrong), and the
  largest gap between groups at each.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Mann-Whitney AUROC of `scores` for the True labels; None without both classes."""
    pairs = sorted(zip(scores, labels), key=lambda p: p[0])
    pos = sum(1 for _, y in pairs if y)
    neg = len(pairs) - pos
    if not pos or not neg:
        return None
    rank_sum, i = 0.0, 0
    while i < len(pairs):  # average ranks over ties
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        mean_rank = (i + 1 + j) / 2
        rank_sum += mean_rank * sum(1 for _, y in pairs[i:j] if y)
        i = j
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


def roc_points(scores: Sequence[float], labels: Sequence[bool]) -> list[tuple[float, float]]:
    """(false-positive rate, true-positive rate) at every threshold, from (0, 0) to (1, 1)."""
    pos = sum(labels) or 1
    neg = (len(labels) - sum(labels)) or 1
    points = [(0.0, 0.0)]
    for t in sorted(set(scores), reverse=True):
        tp = sum(1 for s, y in zip(scores, labels) if y and s >= t)
        fp = sum(1 for s, y in zip(scores, labels) if not y and s >= t)
        points.append((fp / neg, tp / pos))
    return points + [(1.0, 1.0)]


@dataclass(frozen=True)
class Step:
    """One judged action of an episode: where it sits and the value the coach gave it (None: unscored)."""

    role: str
    index: int  # position within the role's turn
    value: float | None
    excused: bool = False


@dataclass
class StepBlame:
    episodes: int
    lowest: float | None
    spared: float | None
    precision: float | None


def step_blame(faulty: Sequence[tuple[Sequence[Step], Sequence[int], Sequence[Step]]],
               tolerance: float = 1.0) -> StepBlame:
    """`faulty`: (the faulty episode's steps, the faulty steps' positions, the same task's fault-free steps).
    An episode counts when its faulty steps and every non-excused step got a value."""
    n = lowest = spared = both = 0
    for steps, at, clean in faulty:
        judged = [(k, s) for k, s in enumerate(steps) if not s.excused or k in at]
        if not at or any(s.value is None for _, s in judged):
            continue
        base = {(s.role, s.index): s.value for s in clean if s.value is not None and not s.excused}
        others = [s for k, s in judged if k not in at]
        worst = min(steps[k].value for k in at)
        is_lowest = all(worst < s.value for s in others)
        is_spared = all(s.value >= base.get((s.role, s.index), s.value) - tolerance for s in others)
        n, lowest, spared, both = n + 1, lowest + is_lowest, spared + is_spared, both + (is_lowest and is_spared)
    return StepBlame(n, lowest / n if n else None, spared / n if n else None, both / n if n else None)


def master_key_rate(scores: Sequence[float], threshold: float = 5.0) -> float | None:
    """The fraction of no-work actions scored >= threshold (0 is the goal)."""
    return sum(s >= threshold for s in scores) / len(scores) if scores else None


def calibration(values: Sequence[float], labels: Sequence[bool], groups: Sequence[str]) -> dict:
    """{"right"/"wrong": {group: {"mean", "n"}}, "gap": {"right"/"wrong": max - min of the group means}}."""
    out: dict = {"right": {}, "wrong": {}, "gap": {}}
    cells: dict[tuple[str, str], list[float]] = {}
    for v, y, g in zip(values, labels, groups):
        cells.setdefault(("right" if y else "wrong", g), []).append(v)
    for (kind, g), vs in sorted(cells.items()):
        out[kind][g] = {"mean": sum(vs) / len(vs), "n": len(vs)}
    for kind in ("right", "wrong"):
        means = [c["mean"] for c in out[kind].values()]
        out["gap"][kind] = max(means) - min(means) if len(means) > 1 else None
    return out
