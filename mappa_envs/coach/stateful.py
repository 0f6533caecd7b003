"""StatefulCoach: a coach that watches its own score balance and corrects it.

The paper's coach is stateless: it scores each action alone and never sees that it pays one kind of
task more than another for work of the same quality (its DSBench coach favoured regression tasks,
and the agents specialised). This wrapper keeps running statistics of the scores its inner coach
gives, by role, task type and check outcome (did the env's checks say the action did its job?), and:

- detects imbalance: per task type, the mean gap of its scores from the mean over task types at the
  SAME check outcome (work of equal verifiable quality), pooled over outcomes by count;
- corrects it once a gap exceeds `threshold` (with at least `min_count` scores per cell):
  "recenter" lowers each type's scores by its gap above the least-paid type's (clipped to 0-10; the
  least-paid type is left as it is: raising it would be lost wherever it already scores 10), "note" adds a calibration
  note to the judge's prompt ("you have scored regression tasks +1.2 above classification at equal
  quality"), "both" does both. Offsets are re-estimated every `every` scores from the raw scores
  (the inner coach's, before correction), so a correction cannot feed on itself.

Every correction is logged (python logging and `corrections`), and `state_dict()` /
`load_state_dict()` carry everything across a checkpoint (the trainer saves it with its own).
`plot_corrections` draws the offsets and the gaps over time.
"""
from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Literal

from mappa_envs.coach.config import CoachConfigError
from mappa_envs.coach.types import Coach, CoachRequest, CoachScore, excused
from mappa_envs.core.untrusted import clip, one_line

log = logging.getLogger(__name__)
STATE_VERSION = 1


@dataclass(frozen=True)
class BalanceConfig:
    threshold: float = 0.5  # a task type's gap (score points at equal check outcome) that triggers a correction
    min_count: int = 20  # scores per (task type, outcome) cell before it is compared
    every: int = 25  # re-estimate the offsets every this many scores
    mode: Literal["recenter", "note", "both"] = "recenter"

    def __post_init__(self) -> None:
        if not (isinstance(self.threshold, (int, float)) and self.threshold >= 0):
            raise CoachConfigError(f"stateful coach: threshold must be a number >= 0, got {self.threshold!r}")
        for name in ("min_count", "every"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
                raise CoachConfigError(f"stateful coach: {name} must be an integer >= 1, got {getattr(self, name)!r}")
        if self.mode not in ("recenter", "note", "both"):
            raise CoachConfigError(f"stateful coach: mode must be recenter, note or both, got {self.mode!r}")


def metric_kind(metric: str) -> str:
    """classification / regression / extraction, from a DSBench metric name."""
    from mappa_envs.dsbench.metrics import NUMBER, TEXT, get_metric

    predicts = get_metric(metric).predicts
    return "regression" if predicts == NUMBER else "extraction" if predicts == TEXT else "classification"


def task_type(request: CoachRequest) -> str:
    """The default grouping: DSBench's task kind from its metric; otherwise the env id."""
    metric = (request.metrics or {}).get("metric")
    if metric:
        try:
            return metric_kind(str(metric))
        except Exception:  # an unknown metric name: its own group
            return str(metric)
    return request.env_id


def check_outcome(request: CoachRequest) -> str:
    """"right" / "wrong" when the env's checks judge the action, "excused" or "unknown" otherwise."""
    from mappa_envs.coach.backprop import rule_quality

    if excused(request.checks):
        return "excused"
    judged = [c for c in request.checks if c not in ("inputs_ready", "printed_answer_correct")]
    if not judged and not request.tool_results:
        return "unknown"
    return "right" if rule_quality(request) == 1.0 else "wrong"


class _Running:
    """Count and mean (and M2, Welford) of a stream of numbers."""

    __slots__ = ("n", "mean", "m2")

    def __init__(self, n: int = 0, mean: float = 0.0, m2: float = 0.0):
        self.n, self.mean, self.m2 = n, mean, m2

    def add(self, x: float) -> None:
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)


class StatefulCoach:
    """A `Coach` wrapping `inner`; see the module docstring."""

    name = "stateful"

    def __init__(self, inner: Coach, config: BalanceConfig | None = None,
                 group: Callable[[CoachRequest], str] = task_type):
        if not callable(getattr(inner, "score", None)):
            raise CoachConfigError(f"StatefulCoach wraps a coach, got {type(inner).__name__}")
        self.inner, self.config, self.group = inner, config or BalanceConfig(), group
        self.raw: dict[tuple[str, str, str], _Running] = {}  # (role, task type, outcome) -> inner scores
        self.served: dict[tuple[str, str, str], _Running] = {}  # the same, as returned (after correction)
        self.offsets: dict[str, float] = {}  # task type -> what is added to its scores
        self.corrections: list[dict] = []  # every change of the offsets, with the gaps that caused it
        self.seen = 0
        self._lock = threading.RLock()  # envs score from many worker threads at once

    # ---- the Coach protocol ----------------------------------------------------------------------

    def score(self, request: CoachRequest) -> CoachScore:
        return self._settle(request, self.inner.score(self._noted(request)))

    async def ascore(self, request: CoachRequest) -> CoachScore:
        return self._settle(request, await self.inner.ascore(self._noted(request)))

    # ---- statistics and corrections --------------------------------------------------------------

    def gaps(self, scores: str = "raw") -> dict[str, float]:
        """task type -> its mean gap from the mean over task types at equal check outcome (count-pooled)."""
        table = self.raw if scores == "raw" else self.served
        cells: dict[tuple[str, str], _Running] = {}  # (outcome, type) pooled over roles
        for (_, kind, outcome), r in table.items():
            if outcome in ("right", "wrong") and r.n:
                c = cells.setdefault((outcome, kind), _Running())
                total = c.n + r.n
                c.mean, c.n = (c.mean * c.n + r.mean * r.n) / total, total
        sums: dict[str, list[float]] = {}
        for outcome in ("right", "wrong"):
            ready = {k: c for (o, k), c in cells.items() if o == outcome and c.n >= self.config.min_count}
            if len(ready) < 2:
                continue
            center = sum(c.mean for c in ready.values()) / len(ready)  # each type weighs the same
            for kind, c in ready.items():
                s = sums.setdefault(kind, [0.0, 0.0])
                s[0], s[1] = s[0] + (c.mean - center) * c.n, s[1] + c.n
        return {kind: s / n for kind, (s, n) in sums.items()}

    def note(self, kind: str) -> str:
        """The calibration note shown to the judge for a task of `kind` ("" when balanced)."""
        gaps = self.gaps()
        gap = gaps.get(kind, 0.0)
        if abs(gap) <= self.config.threshold or self.config.mode == "recenter":
            return ""
        others = ", ".join(sorted(k for k in gaps if k != kind)) or "other tasks"
        return (f"Calibration note: you have scored {kind} tasks {gap:+.1f} points relative to {others} at equal "
                "verified quality. Score this action on its evidence alone.")

    def _noted(self, request: CoachRequest) -> CoachRequest:
        if self.config.mode == "recenter":
            return request
        with self._lock:
            text = self.note(self.group(request))
        return replace(request, role_duties=f"{request.role_duties}\n\n{text}") if text else request

    def _settle(self, request: CoachRequest, verdict: CoachScore) -> CoachScore:
        if not verdict.ok or verdict.score is None or not (math.isfinite(verdict.score) and 0 <= verdict.score <= 10):
            return verdict  # a failure stays a failure, and is not counted (nor is a score off the 0-10 scale)
        kind = self.group(request)
        key = (request.role, kind, check_outcome(request))
        with self._lock:
            return self._count(key, kind, verdict)

    def _count(self, key: tuple[str, str, str], kind: str, verdict: CoachScore) -> CoachScore:
        self.raw.setdefault(key, _Running()).add(float(verdict.score))
        offset = self.offsets.get(kind, 0.0) if self.config.mode != "note" else 0.0
        out = verdict if not offset else replace(
            verdict, score=min(10.0, max(0.0, verdict.score + offset)),
            rationale=f"{verdict.rationale} [recentred {offset:+.2f} for {kind} tasks]".strip())
        self.served.setdefault(key, _Running()).add(float(out.score))
        self.seen += 1
        if self.seen % self.config.every == 0:
            self._rebalance()
        return out

    def _rebalance(self) -> None:
        gaps = self.gaps()
        if not gaps or max(abs(g) for g in gaps.values()) <= self.config.threshold:
            new = {}
        else:  # down to the least-paid type: a raise would be clipped away at 10, a cut rarely reaches 0
            low = min(gaps.values())
            new = {kind: round(low - g, 3) for kind, g in gaps.items()}
        if set(new) == set(self.offsets) and all(abs(new[k] - v) < 0.05 for k, v in self.offsets.items()):
            return  # no change, or one below 0.05 points: noise, not a correction worth logging
        event = {"at": self.seen, "gaps": {k: round(g, 3) for k, g in gaps.items()}, "offsets": new,
                 "mode": self.config.mode}
        self.offsets = new
        self.corrections.append(event)
        log.info("stateful coach: after %d scores, gaps %s -> offsets %s (%s)", self.seen, event["gaps"], new,
                 self.config.mode)

    # ---- checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        def table(t):
            return [[*k, r.n, r.mean, r.m2] for k, r in sorted(t.items())]

        with self._lock:
            return self._state(table)

    def _state(self, table) -> dict:
        return {"version": STATE_VERSION, "config": asdict(self.config), "seen": self.seen,
                "raw": table(self.raw), "served": table(self.served), "offsets": dict(self.offsets),
                "corrections": list(self.corrections)}

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict()`. All or nothing: a state that is not what this coach writes (a NaN, a mean
        outside 0-10, counts that disagree, ...) is a one-line `CoachConfigError` and leaves the coach as it was."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            got = state.get("version") if isinstance(state, dict) else type(state).__name__
            raise CoachConfigError(f"stateful coach: not a version-{STATE_VERSION} coach state "
                                   f"(got {clip(repr(got), 80)})")
        try:
            raw, served = _table(state["raw"], "raw"), _table(state["served"], "served")
            offsets = _numbers(state["offsets"], "offsets", OFFSET_LIMIT)
            corrections = [_correction(e, i) for i, e in enumerate(_list(state["corrections"], "corrections"))]
            seen = _count_of(state["seen"], "seen")
            for name, table in (("raw", raw), ("served", served)):
                if sum(r.n for r in table.values()) != seen:
                    raise ValueError(f"{name} counts {sum(r.n for r in table.values())} scores but seen is {seen}")
        except KeyError as e:
            raise CoachConfigError(f"stateful coach: a damaged coach state (no {e}); delete coach_state.json to "
                                   "start the statistics afresh") from None
        except (TypeError, ValueError) as e:
            raise CoachConfigError(f"stateful coach: a damaged coach state ({clip(one_line(e), 300)}); delete "
                                   "coach_state.json to start the statistics afresh") from None
        with self._lock:
            self.raw, self.served, self.offsets, self.corrections, self.seen = raw, served, offsets, corrections, seen


# ---- checking a loaded state: every number finite and in the range this coach can produce ----------

OUTCOMES = ("right", "wrong", "excused", "unknown")
OFFSET_LIMIT = 10.0  # an offset moves a 0-10 score: beyond +-10 it is not one this coach computes


def _list(x, what: str) -> list:
    if not isinstance(x, list):
        raise TypeError(f"{what} must be a list, got {type(x).__name__}")
    return x


def _count_of(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise ValueError(f"{what} must be an integer >= 0, got {clip(repr(x), 60)}")
    return x


def _number(x, what: str, low: float, high: float) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not (math.isfinite(x) and low <= x <= high):
        raise ValueError(f"{what} must be a finite number in [{low:g}, {high:g}], got {clip(repr(x), 60)}")
    return float(x)


def _numbers(x, what: str, limit: float) -> dict[str, float]:
    if not isinstance(x, dict):
        raise TypeError(f"{what} must be an object, got {type(x).__name__}")
    return {str(k): _number(v, f"{what}[{clip(repr(k), 40)}]", -limit, limit) for k, v in x.items()}


def _table(rows, name: str) -> dict[tuple[str, str, str], _Running]:
    out: dict[tuple[str, str, str], _Running] = {}
    for i, row in enumerate(_list(rows, name)):
        where = f"{name} row {i}"
        if not isinstance(row, list) or len(row) != 6 or not all(isinstance(x, str) for x in row[:3]):
            raise ValueError(f"{where} must be [role, type, outcome, n, mean, m2], got {clip(repr(row), 80)}")
        key = (row[0], row[1], row[2])
        if key[2] not in OUTCOMES:
            raise ValueError(f"{where}: outcome {clip(repr(key[2]), 40)} is not one of {', '.join(OUTCOMES)}")
        if key in out:
            raise ValueError(f"{where} repeats {clip(repr(key), 80)}")
        n = _count_of(row[3], f"{where} n")
        if n == 0:
            raise ValueError(f"{where} counts no scores")
        mean = _number(row[4], f"{where} mean", 0.0, 10.0)
        m2 = _number(row[5], f"{where} m2", 0.0, 25.0 * n * (1 + 1e-9))  # a 0-10 stream's variance is <= 25
        out[key] = _Running(n, mean, m2)
    return out


def _correction(event, i: int) -> dict:
    where = f"corrections[{i}]"
    if not isinstance(event, dict):
        raise TypeError(f"{where} must be an object, got {type(event).__name__}")
    return {**event, "at": _count_of(event["at"], f"{where}.at"),
            "gaps": _numbers(event["gaps"], f"{where}.gaps", OFFSET_LIMIT),
            "offsets": _numbers(event["offsets"], f"{where}.offsets", OFFSET_LIMIT)}


def plot_corrections(coach: StatefulCoach, path, title: str = "stateful coach") -> None:
    """The offsets (solid) and the raw gaps that caused them (dotted) per task type, over scores seen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    kinds = sorted({k for e in coach.corrections for k in e["gaps"]})
    for i, kind in enumerate(kinds):
        xs = [0] + [e["at"] for e in coach.corrections] + [coach.seen]
        offs = [0.0] + [e["offsets"].get(kind, 0.0) for e in coach.corrections]
        ax.step(xs, offs + offs[-1:], where="post", color=f"C{i}", label=f"offset {kind}")
        ax.plot([e["at"] for e in coach.corrections], [e["gaps"].get(kind, math.nan) for e in coach.corrections],
                "o:", color=f"C{i}", label=f"raw gap {kind}")
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.set(xlabel="scores seen", ylabel="score points", title=title)
    if kinds:
        ax.legend(fontsize=7)
    else:  # a balanced run: say so rather than draw an empty frame
        ax.text(0.5, 0.5, f"no correction in {coach.seen} scores", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def coach_metrics(coach) -> dict[str, float]:
    """For the run's metrics each step: a stateful coach's offset per task type it has seen (0 until it
    corrects one) and how many corrections it has made; {} for a coach without state."""
    if not isinstance(coach, StatefulCoach):
        return {}
    with coach._lock:
        kinds = sorted({key[1] for key in coach.raw} | set(coach.offsets))
        out = {f"coach_offset/{k}": float(coach.offsets.get(k, 0.0)) for k in kinds}
        out["coach_corrections"] = float(len(coach.corrections))
    return out


def plot_run_corrections(coach, out_dir) -> None:
    """At the end of a run: OUT_DIR/coach_corrections.png for a stateful coach (nothing for another)."""
    from pathlib import Path

    if isinstance(coach, StatefulCoach):
        plot_corrections(coach, Path(out_dir) / "coach_corrections.png", title="stateful coach corrections")


def save_coach_state(coach, directory) -> None:
    """Write `coach.state_dict()` to DIRECTORY/coach_state.json when the coach keeps state (else nothing);
    whole or not at all (written beside it, then renamed over it)."""
    import json
    import os
    from pathlib import Path

    if callable(getattr(coach, "state_dict", None)):
        path = Path(directory) / "coach_state.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f".{path.name}.part")
        part.write_text(json.dumps(coach.state_dict(), allow_nan=False))
        os.replace(part, path)


def load_coach_state(coach, directory) -> None:
    """Restore what `save_coach_state` wrote, when both the coach and the file have state; a file that is
    not such a state is a one-line `CoachConfigError` (the coach is left as it was)."""
    import json
    from pathlib import Path

    path = Path(directory) / "coach_state.json"
    if callable(getattr(coach, "load_state_dict", None)) and path.is_file():
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise CoachConfigError(f"{path}: not a coach state ({type(e).__name__}: {clip(one_line(e), 200)}); "
                                   "delete it to start the statistics afresh") from None
        coach.load_state_dict(state)
