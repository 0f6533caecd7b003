"""A Markdown leaderboard across eval runs: one row per (run, eval set), best first within a set."""
from __future__ import annotations

import re
from pathlib import Path

from mappa_train.evaluation.report import RESULTS, load_results
from mappa_train.evaluation.stats import MeanSE


def find_runs(paths: list[str | Path]) -> list[Path]:
    """results.json files: each path is a run directory, a results.json, or a folder of runs."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            found.append(p)
        elif (p / RESULTS).is_file():
            found.append(p / RESULTS)
        elif p.is_dir():
            found += sorted(p.rglob(RESULTS))
        else:
            raise FileNotFoundError(f"{p} is neither a run directory, a results.json, nor a folder of runs")
    return list(dict.fromkeys(found))


def _fmt(d: dict | None) -> str:
    return MeanSE.from_dict(d).format() if d else "–"


def _overlap(s: dict) -> str:
    o = s.get("overlap")
    return f"⚠ {o['n_overlap']}/{o['n_eval']}" if o and o["n_overlap"] else ("0" if o else "–")


def _coach(s: dict) -> str:
    cost = s.get("cost", {})
    verdicts, failed = cost.get("coach_calls", 0) + cost.get("coach_cached", 0), cost.get("coach_failures", 0)
    if verdicts and failed == verdicts:  # no coach score at all: say so, do not show an empty cell like a score
        return f"✗ every coach call failed ({failed})"
    roles = s.get("coach_by_role", {})
    text = " / ".join(f"{r} {v['mean']:.1f}" for r, v in roles.items()) or "–"
    return f"{text} ({failed}/{verdicts} calls failed)" if failed else text


REFERENCE = re.compile(r"(?:^|[;=])\s*scripted\s*(?:;|$)")


def is_reference(team: str) -> bool:
    """A team that plays the env's scripted oracle on some role (`scripted` without a SKILL): it reads the
    gold answer, so its row is a ceiling to check the pipeline against, not a baseline to beat."""
    return bool(REFERENCE.search(team or ""))


def _team(res: dict) -> str:
    team = res.get("team", "")
    return f"{team} (reference: reads the gold answer)" if is_reference(team) else team


def leaderboard(results: list[dict]) -> str:
    """Markdown: an accuracy table for sets with rule-checked answers, a quality table for DSBench sets."""
    math_rows, ds_rows = [], []
    for res in results:
        for name, s in res["sets"].items():
            head = [name, res["run"], _team(res), str(res["k"])]
            tail = [_coach(s), str(s["episodes"]), _overlap(s), (res.get("commit") or "")[:12]]
            if "valid_rate" in s:
                ds = [_fmt(s["valid_rate"]), _fmt(s["quality"]), _fmt(s.get("beats_baseline"))]
                ds_rows.append((name, -s["quality"]["mean"], head + ds + tail))
            elif "avg@k" in s:
                acc = [_fmt(s["avg@k"]), _fmt(s["maj@k"]), _fmt(s["pass@k"].get(str(res["k"])))]
                math_rows.append((name, -s["avg@k"]["mean"], head + acc + tail))
    common = ["coach by role", "episodes", "train overlap", "commit"]
    parts = []
    if math_rows:
        parts.append(_table(["eval set", "run", "team", "k", "avg@k", "maj@k", "pass@k"] + common, math_rows))
    if ds_rows:
        head = ["eval set", "run", "team", "k", "valid submissions", "relative quality", "beats baseline"]
        parts.append(_table(head + common, ds_rows))
    if not parts:
        return "No eval results found.\n"
    if any(is_reference(res.get("team", "")) for res in results):
        parts.append("A reference team plays the scripted oracle, which reads each task's gold answer: its row checks "
                     "the pipeline end to end and is no baseline. `scripted:SKILL` is the noisy baseline.")
    return "\n\n".join(parts) + "\n"


def _table(header: list[str], rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for _, _, cells in sorted(rows, key=lambda r: (r[0], r[1])):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def write(runs: list[str], out: str | None) -> int:
    """Print the leaderboard of `runs` (see `find_runs`) and, given `out`, write it there too."""
    table = leaderboard([load_results(p) for p in find_runs(runs)])
    print(table, end="")
    if out:
        Path(out).write_text(table, encoding="utf-8")
    return 0
