"""Labelled actions for training a judge, from three sources, and the split by task.

A `Labelled` is one action as the coach sees it (`CoachRequest`) with the verdict to learn:
- `from_transcripts`: every action of `mappa run` / `mappa eval` / `TranscriptRecorder` transcripts (read
  by the review server's reader), scored by the rule coach from the checks and tool results the env
  recorded: verdicts the env verified, not another judge's opinion;
- `from_labels`: human verdicts exported by `mappa export labels` (the human's score, else 10 for right
  and 0 for wrong);
- `from_scripted`: the episodes `mappa coach-eval` plays (its scripted teams with injected faults and
  the master-key probes), scored by the rule coach as coach-eval's recorder scores them.

`split_by_task` holds out whole tasks: no action of a held-out problem is trained on.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mappa_envs.coach.types import CoachRequest, is_score
from mappa_envs.errors import MappaError


class LabelError(MappaError, ValueError):
    """Labels that cannot be used; the message says what was wrong and how to fix it."""


@dataclass
class Labelled:
    request: CoachRequest
    score: float  # the verdict to learn, 0-10
    rationale: str
    source: str  # "rule", "human" or "scripted:<fault>"

    @property
    def task_key(self) -> str:
        """The problem this action belongs to: every action of it lands on one side of the split."""
        return f"{self.request.env_id}\n{self.request.task}"


def from_transcripts(paths: Sequence[str | Path]) -> list[Labelled]:
    """Each action of the transcripts under `paths`, labelled by the rule coach from its recorded evidence."""
    from mappa_envs.coach import RuleCoach
    from mappa_envs.registration import registry

    rule, out = RuleCoach(), []
    for ep in read_episodes(paths):
        if ep.actions and ep.env_id not in registry:
            raise LabelError(f"{ep.source}:{ep.line} is an episode of {ep.env_id!r}, not a registered env, so the "
                             f"rule coach has no checks to label it by; registered: {', '.join(sorted(registry))}")
        for k in range(len(ep.actions)):
            request = action_request(ep, k)
            verdict = rule.score(request)
            out.append(Labelled(request, float(verdict.score), verdict.rationale, "rule"))
    if not out:
        raise LabelError(f"the transcripts under {', '.join(map(str, paths))} hold no actions (outcome-only "
                         "files such as train_episodes.jsonl cannot be labelled); give mappa run / mappa eval "
                         "transcripts")
    return out


def read_episodes(paths: Sequence[str | Path]) -> list:
    """The episodes under `paths`, read strictly: the review shows what it can of a damaged file, but a line
    that is not JSON, an episode without its env, an action without its role or a recorded score outside
    0-10 would put invented labels into training, so each is refused with where it is."""
    from mappa_train.review.transcripts import METRICS, OUTCOME_ONLY, ReviewInputError, load

    try:
        index = load(list(paths))
    except ReviewInputError as exc:
        raise LabelError(str(exc)) from None
    # a killed run's curves or outcome log may end mid-line; they hold no actions, so no label is lost
    damaged = [s for s in index.skipped if Path(s.rsplit(":", 1)[0]).name not in (METRICS, *OUTCOME_ONLY)]
    if damaged:
        more = f" and {len(damaged) - 1} more" if len(damaged) > 1 else ""
        raise LabelError(f"{damaged[0]}{more}: was the file cut short? mend or remove the line, since "
                         "training would otherwise leave it out without a word")
    for ep in index.episodes:
        where = f"{ep.source}:{ep.line}"
        if ep.actions and not ep.env_id:
            raise LabelError(f"{where} has actions but no env_id; give transcripts of mappa run / mappa eval")
        if any(not a.role for a in ep.actions):
            raise LabelError(f"{where} has an action without a role; give transcripts of mappa run / mappa eval")
        if any(a.coach_score is not None and not is_score(a.coach_score) for a in ep.actions):
            raise LabelError(f"{where} records a coach score outside 0-10 (or not finite); mend the line or "
                             "leave the file out")
    return index.episodes


def action_request(ep, k: int) -> CoachRequest:
    """Action `k` of a review `Episode` as the coach saw it (upstream: each earlier role's last output)."""
    from mappa_train.review.labels import _duties

    a = ep.actions[k]
    upstream = {b.role: b.text for b in ep.actions[:k] if b.role != a.role}
    return CoachRequest(env_id=ep.env_id, role=a.role, role_duties=_duties(ep.env_id, a.role), task=ep.task,
                        action=a.text, context=a.prompt, tool_results=a.tool_results, upstream=upstream,
                        ground_truth=ep.ground_truth, checks=a.checks, action_index=a.index,
                        is_final_action=k == len(ep.actions) - 1)


def from_labels(folder: str | Path) -> list[Labelled]:
    """The human verdicts of a `mappa export labels` dataset."""
    from mappa_train.review.labels import load_labels, request_of
    from mappa_train.review.verdicts import VerdictError

    try:
        rows = load_labels(folder)  # each row checked: a boolean label, a score from 0 to 10 or none
    except VerdictError as exc:
        raise LabelError(str(exc)) from None
    return [Labelled(request_of(row), float(row["human_score"] if row["human_score"] is not None
                                            else 10.0 * row["label"]), row.get("note") or "", "human")
            for row in rows]


def from_scripted(env_id: str, env_kwargs: dict | None = None, probe_tasks: int = 2) -> list[Labelled]:
    """The rule coach's verdicts on coach-eval's scripted episodes of `env_id` (faults and master-key probes)."""
    from mappa_envs.coach import RuleCoach
    from mappa_envs.coach_eval.card import record_all

    episodes = record_all([env_id], {env_id: dict(env_kwargs or {})}, probe_tasks, say=lambda _: None)
    rule = RuleCoach()
    return [Labelled(r, float(v.score), v.rationale, f"scripted:{ep.fault}")
            for ep in episodes for r in ep.requests for v in [rule.score(r)]]


def split_by_task(examples: Sequence[Labelled], heldout: float, seed: int = 0) -> tuple[list[Labelled], list[Labelled]]:
    """(train, held out): a task is held out when a seeded hash of it falls below `heldout` (a fraction)."""
    if not 0.0 <= heldout < 1.0:
        raise LabelError(f"--heldout must be a fraction in [0, 1), got {heldout}")
    train, held = [], []
    for ex in examples:
        digest = hashlib.sha256(f"{seed}\n{ex.task_key}".encode()).digest()
        (held if int.from_bytes(digest[:8], "big") / 2**64 < heldout else train).append(ex)
    return train, held
