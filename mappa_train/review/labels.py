"""Verdicts as data: `mappa export labels DB --out DIR` and `mappa coach-eval --labels DIR`.

A label row is one action's newest human verdict with the action as the coach saw it (`request`: the
CoachRequest fields as JSON, rebuilt from the transcript), the coach's recorded score and rationale,
and ids back to the transcript (source file, line, action position). `label` is the verdict as
right/wrong: the reviewer's right/wrong where given, else their score >= 5.

Against the labels a coach is measured three ways: AUROC of its score for `label`; agreement, the
share of actions where its score >= 5 says what the label says (and the mean distance to the human
score where one was given); calibration, its mean score per role at equal label (`mappa_envs.coach_eval.metrics`).
The row named `recorded` is the coach whose scores the transcripts hold, measured without a call.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from mappa_envs.coach.types import is_score
from mappa_envs.coach_eval import metrics as cm
from mappa_train.export import check_new, new_folder
from mappa_train.review.verdicts import VerdictError, open_existing

THRESHOLD = 5.0
REQUEST_FIELDS = ("env_id", "role", "task", "action", "context", "tool_results", "upstream", "ground_truth",
                  "checks", "action_index", "is_final_action")


def label_rows(db: str | Path) -> list[dict]:
    store = open_existing(db)
    try:
        verdicts = store.latest()
    finally:
        store.close()
    rows = []
    for v in verdicts:
        right = None if v["human_right"] is None else bool(v["human_right"])
        score = v["human_score"]
        request = json.loads(v["request"] or "{}")
        rows.append({
            "verdict_id": v["id"], "source": v["source"], "line": v["line"], "action_index": v["action"],
            "env_id": v["env_id"] or "", "task_id": v["task_id"] or "", "role": v["role"] or "",
            "seed": v["seed"], "sample": v["sample"],
            "human_score": score, "human_right": right,
            "label": right if right is not None else score >= THRESHOLD,
            "note": v["note"], "reviewer": v["reviewer"], "created_at": v["created_at"],
            "coach_score": v["coach_score"], "coach_rationale": v["coach_rationale"] or "",
            "task": str(request.get("task", "")), "context": str(request.get("context", "")),
            "action": str(request.get("action", "")), "request": json.dumps(request, ensure_ascii=False)})
    return rows


def export_labels(db: str | Path, out: str | Path):
    """The newest verdict of every action in `db` as a `datasets.Dataset` saved to `out` (a new folder)."""
    try:
        import datasets
    except ImportError:
        raise VerdictError("exporting labels needs the datasets package: pip install 'mappa[data]'") from None
    out = Path(out)
    check_new(out)
    rows = label_rows(db)
    if not rows:
        raise VerdictError(f"{db} holds no verdicts yet; record some with `mappa review`")
    features = datasets.Features({
        **{k: datasets.Value("int64") for k in ("verdict_id", "line", "action_index", "seed", "sample")},
        **{k: datasets.Value("float64") for k in ("human_score", "coach_score")},
        **{k: datasets.Value("bool") for k in ("human_right", "label")},
        **{k: datasets.Value("string") for k in ("source", "env_id", "task_id", "role", "note", "reviewer",
                                                 "created_at", "coach_rationale", "task", "context", "action",
                                                 "request")}})
    dataset = datasets.Dataset.from_list(rows, features=features)
    with new_folder(out) as partial:  # written aside, then moved: never a half-written --out
        dataset.save_to_disk(str(partial))
    return dataset


def load_labels(folder: str | Path) -> list[dict]:
    """The rows of a labels dataset; a missing, foreign or empty one is a one-line error."""
    try:
        import datasets
    except ImportError:
        raise VerdictError("reading labels needs the datasets package: pip install 'mappa[data]'") from None
    folder = Path(folder)
    try:
        dataset = datasets.load_from_disk(str(folder))
    except FileNotFoundError:
        raise VerdictError(f"{folder} is not a labels dataset; write one with `mappa export labels DB --out "
                           f"{folder}`") from None
    missing = sorted(LABEL_COLUMNS - set(getattr(dataset, "column_names", ())))
    if not isinstance(dataset, datasets.Dataset) or missing:
        raise VerdictError(f"{folder} is a dataset but not of labels (no {', '.join(missing) or 'single split'}); "
                           "write one with `mappa export labels`")
    if not dataset.num_rows:
        raise VerdictError(f"{folder} holds no labels")
    rows = list(dataset)
    for number, row in enumerate(rows):
        wrong = _wrong_in(row)
        if wrong:
            raise VerdictError(f"{folder}: row {number} {wrong}; fix that row or export the labels again with "
                               "`mappa export labels`")
    return rows


LABEL_COLUMNS = {"label", "human_score", "coach_score", "request", "env_id", "role", "task", "action"}
REQUEST_TYPES = {"context": str, "tool_results": list, "upstream": dict, "checks": dict, "action_index": int,
                 "is_final_action": bool}


def _wrong_in(row: dict) -> str:
    """What makes a label row unusable for training or measuring a judge ("" when nothing does)."""
    if not isinstance(row["label"], bool):
        return f"has label {row['label']!r}, not true or false"
    for column in ("human_score", "coach_score"):
        score = row[column]
        if score is not None and not is_score(score):
            return f"has {column} {score!r}, not a number from 0 to 10"
    try:
        request = json.loads(row["request"])
    except (TypeError, ValueError) as e:
        return f"has a request that is not JSON ({e})"
    if not isinstance(request, dict):
        return f"has a request that is a JSON {type(request).__name__}, not an object of the coach's fields"
    for key, kind in REQUEST_TYPES.items():
        value = request.get(key, kind())
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return f"has request field {key!r} of type {type(value).__name__}, not {kind.__name__}"
    if any(not isinstance(r, dict) for r in request.get("tool_results", [])):
        return "has a request whose tool_results are not all objects"
    return ""


def request_of(row: dict):
    """The row's CoachRequest, with the role's duties looked up from its env where the env can be built."""
    from mappa_envs.coach import CoachRequest

    fields = json.loads(row["request"])
    known = {k: fields[k] for k in REQUEST_FIELDS if k in fields}
    return CoachRequest(**{"env_id": row["env_id"], "role": row["role"], "task": row["task"], "action": row["action"],
                           **known, "role_duties": _duties(known.get("env_id", ""), known.get("role", ""))})


def measure(name: str, scores: Sequence[float | None], rows: Sequence[dict]) -> dict:
    """One coach's row against the human labels."""
    pairs = [(s, r) for s, r in zip(scores, rows) if s is not None]
    values, labels = [s for s, _ in pairs], [bool(r["label"]) for _, r in pairs]
    dist = [abs(s - r["human_score"]) for s, r in pairs if r["human_score"] is not None]
    return {"coach": name, "labels": len(rows), "scored": len(pairs),
            "auroc": cm.auroc(values, labels),
            "agreement": sum((s >= THRESHOLD) == y for s, y in zip(values, labels)) / len(pairs) if pairs else None,
            "mean_abs_diff": sum(dist) / len(dist) if dist else None,
            "calibration": cm.calibration(values, labels, [r["role"] for _, r in pairs])}


def evaluate_labels(rows: Sequence[dict], coaches: dict, concurrency: int = 8) -> list[dict]:
    """The recorded coach and every coach of `coaches` measured against label `rows` (`load_labels`)."""
    from mappa_envs.coach.batch import score_many

    out = [measure("recorded", [r["coach_score"] for r in rows], rows)]
    requests = [request_of(r) for r in rows]
    for name, coach in coaches.items():
        verdicts = score_many(coach, requests, concurrency)
        out.append(measure(name, [float(v.score) if v.ok and v.score is not None else None for v in verdicts], rows))
    return out


def markdown(rows: Sequence[dict]) -> str:
    def f(x) -> str:
        return "–" if x is None else f"{x:.3f}"

    lines = ["| coach | labels | scored | AUROC | agreement | mean abs diff | calibration gap (right / wrong) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        gap = r["calibration"]["gap"]
        lines.append(f"| {r['coach']} | {r['labels']} | {r['scored']} | {f(r['auroc'])} | {f(r['agreement'])} | "
                     f"{f(r['mean_abs_diff'])} | {f(gap.get('right'))} / {f(gap.get('wrong'))} |")
    return "\n".join(lines) + "\n"


_DUTIES: dict[tuple[str, str], str] = {}


def _duties(env_id: str, role: str) -> str:
    """The role's duties from its registered env (built without a sandbox, never reset); "" where it cannot be."""
    if (env_id, role) not in _DUTIES:
        duties = ""
        try:
            import mappa_envs

            env = mappa_envs.make(env_id)
            try:
                duties = next((r.duties for r in env.unwrapped.team.roles if r.name == role), "")
            finally:
                env.close()
        except Exception:  # an env id of a spec file, or one that needs kwargs: the coach goes without duties
            duties = ""
        _DUTIES[(env_id, role)] = duties
    return _DUTIES[(env_id, role)]
