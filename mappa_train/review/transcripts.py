"""The episodes a review serves: every transcript file under the given paths, read once into one index.

Three record shapes are read, each into the same `Episode`/`Action`:
- `mappa run` / `mappa eval` transcripts: `{"env_id", "task_id", "task", "actions": [{"text", "role",
  "coach", "reward", "share", "seen"?...}], "outcome"}` (eval adds "set", "sample", "seen");
- `TranscriptRecorder` lines: actions are `{"role", "messages", "action", "reward", "record"}`, the
  env's own record (tool results, checks, coach verdict) under "record";
- `mappa coach-eval` transcripts: the first shape with a known "fault" and "faulty_role" per episode,
  and per action a "faulty" label and "coaches": {coach spec: {"score", "rationale", "ok"}} in place
  of one "coach" (the first spec's verdict is the action's coach score);
- a training run's `train_episodes.jsonl` / `eval_episodes.jsonl`: outcomes only (step, task,
  correct, score), listed without actions.
`metrics.jsonl` files are a run's curves. Anything else is skipped. An episode's key is its file and
line, so verdicts stay attached to it while an eval appends more lines to the same file.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from mappa_envs.errors import MappaError

OUTCOME_ONLY = ("train_episodes.jsonl", "eval_episodes.jsonl")
METRICS = "metrics.jsonl"
LOW, HIGH = 3.0, 7.0  # a score at or below LOW calls an action wrong, at or above HIGH right
COACHES_APART = 3.0  # two coaches this far apart on the same action disagree
DISAGREEMENTS = ("outcome", "blame", "coaches", "fault")


class ReviewInputError(MappaError, ValueError):
    """A review path that holds nothing to review; the message says what it looked for."""


@dataclass
class Action:
    role: str
    index: int  # position within the role's turn
    text: str
    prompt: str  # what the agent saw before acting (its last message, or the whole chat)
    tool_results: list[dict]
    checks: dict
    coach_score: float | None
    rationale: str
    coach_ok: bool | None
    reward: float | None  # what the env paid, i.e. what a trainer trains on
    share: float | None  # the action's share of the outcome by blame (backprop reward mode)
    disagreements: list[str] = field(default_factory=list)  # "outcome", "blame", "coaches", "fault"
    coaches: dict[str, dict] = field(default_factory=dict)  # coach-eval: every coach's verdict, by spec
    faulty: bool | None = None  # coach-eval: the known fault lives in this action


@dataclass
class Episode:
    id: int  # position in the index: the only handle the browser ever sends
    source: str  # the transcript file, as given
    line: int  # 1-based line in that file
    env_id: str
    task_id: str
    task: str
    set: str
    step: int | None
    seed: int | None
    sample: int
    correct: bool | None
    outcome_score: float | None
    actions: list[Action]
    outcome: dict
    ground_truth: object = None
    fault: str = ""  # coach-eval: the injected fault ("none", a fault name, "probe:<kind>:<role>")
    faulty_role: str = ""  # coach-eval: the role the fault is in (the known culprit)

    @property
    def roles(self) -> set[str]:
        return {a.role for a in self.actions}

    @property
    def disagreements(self) -> int:
        return sum(bool(a.disagreements) for a in self.actions)

    def scores(self) -> list[float]:
        return [a.coach_score for a in self.actions if a.coach_score is not None]


@dataclass
class Index:
    episodes: list[Episode]
    curves: dict[str, list[dict]]  # metrics.jsonl path -> its rows
    skipped: list[str]  # files found but not read, with why

    def envs(self) -> list[str]:
        return sorted({e.env_id for e in self.episodes})

    def roles(self) -> list[str]:
        return sorted({r for e in self.episodes for r in e.roles})

    def steps(self) -> list[int]:
        return sorted({e.step for e in self.episodes if e.step is not None})


def load(paths: list[str | Path]) -> Index:
    """Read every transcript under `paths` (files or folders, searched recursively)."""
    episodes: list[Episode] = []
    curves: dict[str, list[dict]] = {}
    skipped: list[str] = []
    for file in _files(paths):
        if file.name == METRICS:
            curves[str(file)] = _rows(file, skipped)
            continue
        for line, row in enumerate(_rows(file, skipped), 1):
            episode = _episode(row, len(episodes), file, line)
            if episode is not None:
                episodes.append(episode)
    if not episodes and not curves:
        raise ReviewInputError(f"no transcripts under {', '.join(map(str, paths))}: give a folder or file holding "
                               "transcripts.jsonl (mappa run / mappa eval), train_episodes.jsonl or metrics.jsonl")
    mark_disagreements(episodes)
    return Index(episodes, curves, skipped)


def _files(paths: list[str | Path]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            files += sorted(f for f in p.rglob("*.jsonl") if f.is_file())
        else:
            raise ReviewInputError(f"{p} does not exist; give a run folder or a transcripts .jsonl file")
    return list(dict.fromkeys(files))


def _rows(file: Path, skipped: list[str]) -> list[dict]:
    rows = []
    with file.open(encoding="utf-8", errors="replace") as lines:
        for number, text in enumerate(lines, 1):
            try:
                row = json.loads(text)
            except json.JSONDecodeError:
                if text.strip():
                    skipped.append(f"{file}:{number} (not JSON)")
                row = None
            rows.append(row if isinstance(row, dict) else {})  # keeps line numbers aligned
    return rows


def _episode(row: dict, eid: int, file: Path, line: int) -> Episode | None:
    outcome_only = file.name in OUTCOME_ONLY
    if not outcome_only and not isinstance(row.get("actions"), list):
        return None
    if outcome_only and "task_id" not in row:
        return None
    outcome = row.get("outcome") if isinstance(row.get("outcome"), dict) else {}
    if outcome_only:
        outcome = {"score": row.get("score"), "correct": row.get("correct"), "answer": row.get("answer")}
    actions = [_action(a) for a in row.get("actions") or [] if isinstance(a, dict)]
    correct = outcome.get("correct")
    return Episode(
        id=eid, source=str(file), line=line, env_id=_text(row.get("env_id") or ""),
        task_id=_text(row.get("task_id") or ""), task=_text(row.get("task") or ""),
        set=_text(row.get("set") or ("eval" if file.name == "eval_episodes.jsonl" else "")),
        step=_int(row.get("step")) if row.get("step") is not None else _step_of(file),
        seed=_int(row.get("seed")), sample=_int(row.get("sample")) or 0,
        correct=None if correct is None else bool(correct), outcome_score=_num(outcome.get("score")),
        actions=actions, outcome=outcome, ground_truth=row.get("ground_truth"), fault=_text(row.get("fault") or ""),
        faulty_role=_text(row.get("faulty_role") or ""))


def _action(a: dict) -> Action:
    record = a.get("record") if isinstance(a.get("record"), dict) else a  # TranscriptRecorder nests the env's record
    coaches = _coaches(record.get("coaches"))
    coach = record.get("coach") if isinstance(record.get("coach"), dict) else next(iter(coaches.values()), {})
    messages = a.get("messages") if isinstance(a.get("messages"), list) else []
    prompt = a.get("seen") or "\n\n".join(f"[{m.get('role', '')}]\n{m.get('content', '')}"
                                          for m in messages if isinstance(m, dict))
    text = a.get("text") if "text" in a else a.get("action")
    results = record.get("tool_results")
    return Action(
        role=_text(a.get("role") or record.get("role") or ""), index=_int(record.get("index")) or 0,
        text=_text(text or ""), prompt=_text(prompt or ""),
        tool_results=[_result(r) for r in results if isinstance(r, dict)] if isinstance(results, list) else [],
        checks=record.get("checks") if isinstance(record.get("checks"), dict) else {},
        coach_score=_num(coach.get("score")), rationale=_text(coach.get("rationale") or coach.get("error") or ""),
        coach_ok=coach.get("ok"), reward=_num(a.get("reward")), share=_num(record.get("share")), coaches=coaches,
        faulty=record["faulty"] if isinstance(record.get("faulty"), bool) else None)


def _result(r: dict) -> dict:
    """A recorded tool result with the fields every reader uses, typed (a writer may leave some out)."""
    return {**r, **{k: _text(r.get(k) or "") for k in ("stdout", "stderr", "error")},
            "ok": r.get("ok") is not False, "timed_out": bool(r.get("timed_out"))}


def _coaches(given) -> dict[str, dict]:
    """A coach-eval action's verdicts by coach spec, each reduced to a score, a rationale and ok."""
    if not isinstance(given, dict):
        return {}
    return {_text(k): {"score": _num(v.get("score")), "rationale": _text(v.get("rationale") or v.get("error") or ""),
                       "ok": v.get("ok") if isinstance(v.get("ok"), bool) else None}
            for k, v in given.items() if isinstance(v, dict)}


def mark_disagreements(episodes: list[Episode]) -> None:
    """Flag actions whose coach score contradicts the outcome (the final action, whose answer the outcome
    judged, scored high in a failed episode or low in a solved one), the blame (a negative share of the
    outcome with a high score, a positive one with a low score), another coach on the same action (of this
    record or another file) or the known fault (coach-eval: an action the fault lives in scored high)."""
    same: dict[tuple, list[Action]] = defaultdict(list)  # the same episode scored from several files
    for ep in episodes:
        for k, a in enumerate(ep.actions):
            s, scores = a.coach_score, _scores(a)
            if not scores:
                continue
            final = k == len(ep.actions) - 1
            if s is not None and final and ep.correct is not None and \
                    ((ep.correct and s <= LOW) or (not ep.correct and s >= HIGH)):
                a.disagreements.append("outcome")
            if s is not None and a.share is not None and ((a.share < 0 and s >= HIGH) or (a.share > 0 and s <= LOW)):
                a.disagreements.append("blame")
            if a.faulty and max(scores) >= HIGH:
                a.disagreements.append("fault")
            if _apart(scores):
                a.disagreements.append("coaches")
            same[(ep.env_id, ep.task_id, ep.fault, ep.seed, ep.sample, k, a.text)].append(a)
    for actions in same.values():
        if _apart([a.coach_score for a in actions if a.coach_score is not None]):
            for a in actions:
                if "coaches" not in a.disagreements:
                    a.disagreements.append("coaches")


def _scores(a: Action) -> list[float]:
    """Every coach's score of `a`: the one coach's, or each of a coach-eval record's coaches'."""
    got = [s for v in a.coaches.values() if (s := _num(v.get("score"))) is not None]
    return got or ([a.coach_score] if a.coach_score is not None else [])


def _apart(scores: list[float]) -> bool:
    return len(scores) > 1 and max(scores) - min(scores) >= COACHES_APART


def priority(a: Action) -> float:
    """How much a human verdict on `a` would matter: disagreements first, then unsure or missing scores."""
    unsure = 1.0 if a.coach_score is None or a.coach_ok is False else 1.0 - abs(a.coach_score - 5.0) / 5.0
    return 2.0 * len(a.disagreements) + unsure


def _step_of(file: Path) -> int | None:
    for part in reversed(file.parts):
        m = re.fullmatch(r"step[_-]?0*(\d+)", part)
        if m:
            return int(m.group(1))
    return None


def _text(x) -> str:
    return x if isinstance(x, str) else json.dumps(x, default=str)


def _num(x) -> float | None:
    try:
        return None if x is None or isinstance(x, bool) else float(x)
    except (TypeError, ValueError):
        return None


def _int(x) -> int | None:
    try:
        return None if x is None or isinstance(x, bool) else int(x)
    except (TypeError, ValueError):
        return None
