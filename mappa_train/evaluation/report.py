"""Turn episode records into `results.json`: per set accuracy (avg@k, pass@k, maj@k), DSBench
submission validity and quality, per-role coach scores, tokens and coach cost, all as mean ± SE.
"""
from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from mappa_train.evaluation.stats import Sample, mean_se, pass_ks, per_problem

RESULTS = "results.json"
_VALID_KEYS = ("submission_valid", "valid")  # DSBench outcome details naming a usable submission


def summarize_set(records: list[dict], k: int, same: Callable[[object, object], bool] | None = None) -> dict:
    """Aggregate one eval set's episode records (all samples of all its problems)."""
    out: dict = {"episodes": len(records), "truncated": sum(bool(r.get("truncated")) for r in records)}
    outcomes = [r["outcome"] for r in records]
    out["score"] = _per_problem_mean(records, lambda r: float(r["outcome"]["score"])).to_dict()

    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_task[r["task_id"]].append(r)
    per_task = {pid: {"n": len(rs), "score": sum(float(r["outcome"]["score"]) for r in rs) / len(rs)}
                for pid, rs in by_task.items()}

    if any(_valid(o) is not None for o in outcomes):  # DSBench: submissions scored between baseline and reference
        out["valid_rate"] = _per_problem_mean(records, lambda r: float(bool(_valid(r["outcome"])))).to_dict()
        out["quality"] = out["score"]  # the outcome score is the relative quality in [0, 1]
        out["beats_baseline"] = _per_problem_mean(records, lambda r: float(bool(r["outcome"].get("correct")))).to_dict()
    elif any(o.get("correct") is not None for o in outcomes):  # rule-checked answers
        samples = [Sample(r["task_id"], bool(r["outcome"].get("correct")), _answer(r["outcome"])) for r in records]
        table = per_problem(samples, k, same)
        out["avg@k"] = mean_se([p["avg"] for p in table.values()]).to_dict()
        out["pass@k"] = {
            str(j): mean_se([p["pass"][j] for p in table.values() if j in p["pass"]]).to_dict() for j in pass_ks(k)
        }
        out["maj@k"] = mean_se([p["maj"] for p in table.values()]).to_dict()
        for pid, p in table.items():
            per_task[pid].update(correct=p["c"], avg=p["avg"], maj=p["maj"])
    out["per_task"] = per_task
    out["problems"] = len(per_task)
    out["coach_by_role"] = _coach_by_role(records)
    out["cost"] = _cost(records)
    return out


def _per_problem_mean(records: list[dict], value: Callable[[dict], float]):
    """Mean ± SE across problems of each problem's mean over its samples."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for r in records:
        by_task[r["task_id"]].append(value(r))
    return mean_se([sum(v) / len(v) for v in by_task.values()])


def _answer(outcome: dict):
    a = outcome.get("predicted", outcome.get("answer"))
    return None if a is None else str(a)


def _valid(outcome: dict) -> bool | None:
    return next((bool(outcome[k]) for k in _VALID_KEYS if outcome.get(k) is not None), None)


def _coach_by_role(records: list[dict]) -> dict:
    """Per role: mean ± SE across episodes of the role's mean coach score in that episode."""
    per_role: dict[str, list[float]] = defaultdict(list)
    for r in records:
        scores: dict[str, list[float]] = defaultdict(list)
        for a in r["actions"]:
            c = a.get("coach")
            if c and c.get("ok") and c.get("score") is not None:
                scores[a["role"]].append(float(c["score"]))
        for role, s in scores.items():
            per_role[role].append(sum(s) / len(s))
    return {role: mean_se(v).to_dict() for role, v in per_role.items()}


def _cost(records: list[dict]) -> dict:
    actions = [a for r in records for a in r["actions"]]
    verdicts = [a["coach"] for a in actions if a.get("coach")]
    live = [v for v in verdicts if not v.get("cached")]
    prompt_toks = sum(v.get("prompt_tokens", 0) for v in live)
    completion_toks = sum(v.get("completion_tokens", 0) for v in live)
    usage = [a["usage"] for a in actions if a.get("usage")]
    out = {
        "actions": len(actions),
        "policy_chars": sum(a.get("chars", len(a.get("text", ""))) for a in actions),
        "policy_chars_per_episode": mean_se([sum(a.get("chars", 0) for a in r["actions"]) for r in records]).to_dict(),
        "coach_calls": len(live),
        "coach_cached": len(verdicts) - len(live),
        "coach_failures": sum(not v.get("ok", True) for v in verdicts),
        "coach_prompt_tokens": prompt_toks,
        "coach_completion_tokens": completion_toks,
        "coach_cost_usd": sum(v.get("cost_usd", 0.0) for v in live),  # the coach prices its own calls
    }
    if usage and len(usage) == len(actions):  # token counts only when the policy reported every action
        out["policy_prompt_tokens"] = sum(u.get("prompt_tokens", 0) for u in usage)
        out["policy_completion_tokens"] = sum(u.get("completion_tokens", 0) for u in usage)
    return out


def git_commit(cwd: str | Path | None = None) -> str | None:
    """The checkout's commit hash (with "-dirty" when tracked files changed), or None outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")


def build_results(run_name: str, team: str, records_by_set: dict[str, list[dict]], k: int, seed: int,
                  config: dict, same: Callable[[object, object], bool] | None = None,
                  overlaps: dict[str, dict] | None = None) -> dict:
    sets = {}
    for name, records in records_by_set.items():
        sets[name] = summarize_set(records, k, same)
        if overlaps and name in overlaps:
            sets[name]["overlap"] = overlaps[name]
    return {
        "run": run_name,
        "team": team,
        "k": k,
        "seed": seed,
        "commit": git_commit(Path(__file__).resolve().parent),  # the code that ran, wherever it was run from
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": config,
        "sets": sets,
    }


def write_results(out_dir: str | Path, results: dict) -> Path:
    path = Path(out_dir) / RESULTS
    path.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def load_results(run: str | Path) -> dict:
    """A run's results: `run` is its directory or its results.json."""
    path = Path(run)
    if path.is_dir():
        path = path / RESULTS
    if not path.is_file():
        raise FileNotFoundError(f"no results at {path}: pass a run directory written by `mappa eval` "
                                "or its results.json")
    return json.loads(path.read_text(encoding="utf-8"))
