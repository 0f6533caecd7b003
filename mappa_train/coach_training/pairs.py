"""`mappa export pairs RUN --out DIR`: corrected verdicts as training data for the policy.

Every action of the run's transcripts gets a verdict: a human's from the review database where one was
given (their score, else 10 for right and 0 for wrong), else a stronger coach's where one is named
(`coach`, scored now), else the coach score the transcript recorded. Then:
- preference pairs (TRL's DPO format: `prompt`, `chosen`, `rejected`, plain text): two different
  actions of one role on the same state (same env, task, role, position and prompt) whose verdicts
  are at least `margin` apart, the better one chosen;
- SFT rows (`prompt`, `completion`): the chosen side of every pair, and every action a human or the
  stronger coach overruled the recorded coach on (the verdicts `margin` apart) to a verdict >= `good`.
Each row says why it exists (`why`: "same-state", "overruled:human", "overruled:coach").
Both are `datasets` datasets saved to DIR/pairs and DIR/sft, written aside and moved into place.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from mappa_envs.coach.types import is_score
from mappa_train.coach_training.examples import LabelError, action_request, read_episodes
from mappa_train.export import check_new, new_folder

MARGIN, GOOD = 3.0, 7.0


@dataclass
class Judged:
    key: tuple  # the state: env, task, role, position in the turn, prompt
    env_id: str
    task_id: str
    role: str
    prompt: str
    text: str
    recorded: float | None  # the transcript's coach score
    verdict: float | None  # the verdict that counts
    by: str  # "human", "coach" or "recorded"


def judged_actions(run: str | Path, db: str | Path | None = None, coach=None, concurrency: int = 8) -> list[Judged]:
    """Every action under `run` with its verdict (see the module docstring)."""
    from mappa_envs.coach.batch import score_many
    from mappa_train.review.verdicts import DEFAULT_NAME, VerdictError, open_existing

    episodes = read_episodes([run])
    db = Path(db) if db is not None else (Path(run) / DEFAULT_NAME if Path(run).is_dir() else None)
    human: dict[tuple, float] = {}
    keys: dict[str, str] = {}
    if db is not None and (db.is_file() or db.name != DEFAULT_NAME):  # a named database must exist
        try:
            store = open_existing(db)
        except VerdictError as exc:
            raise LabelError(str(exc)) from None
        try:
            for v in store.latest():
                score = v["human_score"] if v["human_score"] is not None else 10.0 * bool(v["human_right"])
                if not is_score(score):
                    raise LabelError(f"{db}: verdict {v['id']} has score {score!r}, not 0-10; the database was "
                                     "edited outside `mappa review`: mend or delete that row")
                human[(v["source"], v["line"], v["action"])] = float(score)
            keys = {ep.source: store.key_of(ep.source) for ep in episodes}
        finally:
            store.close()
    places = [(ep, k) for ep in episodes for k in range(len(ep.actions))]
    stronger = [None] * len(places)
    if coach is not None:
        verdicts = score_many(coach, [action_request(ep, k) for ep, k in places], concurrency)
        stronger = [float(v.score) if v.ok and v.score is not None else None for v in verdicts]
    out = []
    for (ep, k), strong in zip(places, stronger):
        a = ep.actions[k]
        by_human = human.get((keys[ep.source], ep.line, k)) if human else None
        verdict, by = ((by_human, "human") if by_human is not None else (strong, "coach") if strong is not None
                       else (a.coach_score, "recorded"))
        out.append(Judged((ep.env_id, ep.task, a.role, a.index, a.prompt), ep.env_id, ep.task_id, a.role, a.prompt,
                          a.text, a.coach_score, verdict, by))
    return out


def pairs_and_sft(actions: list[Judged], margin: float = MARGIN, good: float = GOOD) -> tuple[list[dict], list[dict]]:
    """(DPO pairs, SFT rows) from judged actions."""
    states: dict[tuple, list[Judged]] = defaultdict(list)
    for a in actions:
        if a.verdict is not None and a.text.strip():
            states[a.key].append(a)
    pairs, sft, seen = [], [], set()

    def add_sft(a: Judged, why: str) -> None:
        if (a.key, a.text) not in seen:
            seen.add((a.key, a.text))
            sft.append({"prompt": a.prompt, "completion": a.text, "env_id": a.env_id, "task_id": a.task_id,
                        "role": a.role, "score": a.verdict, "why": why})

    for group in states.values():
        best: dict[str, Judged] = {}
        for a in group:  # one action per distinct text: its highest verdict
            if a.text not in best or a.verdict > best[a.text].verdict:
                best[a.text] = a
        ranked = sorted(best.values(), key=lambda a: -a.verdict)
        for i, hi in enumerate(ranked):
            for lo in ranked[i + 1:]:
                if hi.verdict - lo.verdict >= margin:
                    pairs.append({"prompt": hi.prompt, "chosen": hi.text, "rejected": lo.text, "env_id": hi.env_id,
                                  "task_id": hi.task_id, "role": hi.role, "chosen_score": hi.verdict,
                                  "rejected_score": lo.verdict, "why": "same-state"})
                    add_sft(hi, "same-state")
    for a in actions:
        overruled = a.by != "recorded" and a.recorded is not None and abs(a.verdict - a.recorded) >= margin
        if overruled and a.verdict >= good and a.text.strip():
            add_sft(a, f"overruled:{a.by}")
    return pairs, sft


def export_pairs(run: str | Path, out: str | Path, db: str | Path | None = None, coach=None,
                 margin: float = MARGIN, good: float = GOOD) -> tuple[int, int]:
    """Write OUT/pairs and OUT/sft (`datasets.save_to_disk`); returns (pairs, SFT rows)."""
    import datasets

    out = Path(out)
    if not 0.0 < margin <= 10.0:
        raise LabelError(f"--margin must be above 0 and at most 10 (verdicts are 0-10), got {margin}")
    check_new(out)
    actions = judged_actions(run, db, coach)
    pairs, sft = pairs_and_sft(actions, margin, good)
    if not pairs and not sft:
        unjudged = sum(a.verdict is None for a in actions)
        raise LabelError(f"{run}: no two actions of one role on the same state differ by >= {margin:g} in verdict, "
                         f"and no verdict was overruled ({unjudged} of {len(actions)} actions carry no verdict); "
                         "review some actions (mappa review), name a stronger --coach, or lower --margin")
    with new_folder(out) as partial:
        for name, rows, columns in (("pairs", pairs, PAIR_COLUMNS), ("sft", sft, SFT_COLUMNS)):
            features = datasets.Features({k: datasets.Value(kind) for k, kind in columns.items()})
            datasets.Dataset.from_list(rows, features=features).save_to_disk(str(partial / name))
    return len(pairs), len(sft)


PAIR_COLUMNS = {"prompt": "string", "chosen": "string", "rejected": "string", "env_id": "string", "task_id": "string",
                "role": "string", "chosen_score": "float64", "rejected_score": "float64", "why": "string"}
SFT_COLUMNS = {"prompt": "string", "completion": "string", "env_id": "string", "task_id": "string",
               "role": "string", "score": "float64", "why": "string"}
