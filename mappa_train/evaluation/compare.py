"""Did training help? Per-problem deltas between two runs and a paired bootstrap CI of the mean delta.

Problems are paired by task id within each eval set both runs share. The per-problem figure is
avg@k (rule-checked accuracy over its samples), or the outcome score (DSBench quality) where a set
has no rule-checked answers.
"""
from __future__ import annotations

from mappa_envs.errors import InputError
from mappa_train.evaluation.stats import PairedCI, paired_bootstrap


def compare(a: dict, b: dict, n_boot: int = 10_000, level: float = 0.95, seed: int = 0) -> dict:
    """`a`, `b`: two runs' results. Returns {set: {"metric", "ci", "deltas": {task_id: (a, b)}}}."""
    shared = [s for s in a["sets"] if s in b["sets"]]
    if not shared:
        raise InputError(f"runs {a['run']!r} and {b['run']!r} share no eval set "
                         f"({sorted(a['sets'])} vs {sorted(b['sets'])})")
    out = {}
    for name in shared:
        ta, tb = a["sets"][name]["per_task"], b["sets"][name]["per_task"]
        metric = "avg" if all("avg" in t for t in (*ta.values(), *tb.values())) else "score"
        ids = [t for t in ta if t in tb]
        if not ids:
            raise InputError(f"eval set {name!r}: the runs share no problem ids; "
                             "were they run on the same task source?")
        xa, xb = [ta[t][metric] for t in ids], [tb[t][metric] for t in ids]
        out[name] = {
            "metric": metric,
            "ci": paired_bootstrap(xa, xb, n_boot=n_boot, level=level, seed=seed),
            "deltas": {t: (x, y) for t, x, y in zip(ids, xa, xb)},
            "unpaired": len(set(ta) ^ set(tb)),
        }
    return out


def format_comparison(a: dict, b: dict, comparison: dict) -> str:
    """Markdown: a summary row per set, then the problems whose figure changed, biggest change first."""
    lines = [f"# {b['run']} vs {a['run']}", "",
             "| eval set | metric | problems | A | B | B − A | CI | verdict |", "|---|---|---|---|---|---|---|---|"]
    for name, c in comparison.items():
        ci: PairedCI = c["ci"]
        mean_a = sum(x for x, _ in c["deltas"].values()) / ci.n
        verdict = ("B better" if ci.delta > 0 else "B worse") if ci.significant else "no significant difference"
        lines.append(f"| {name} | {c['metric']} | {ci.n} | {mean_a:.3f} | {mean_a + ci.delta:.3f} | {ci.delta:+.3f} | "
                     f"[{ci.low:+.3f}, {ci.high:+.3f}] ({ci.level:.0%}) | {verdict} |")
    for name, c in comparison.items():
        changed = sorted(((y - x, t, x, y) for t, (x, y) in c["deltas"].items() if x != y),
                         key=lambda r: (-abs(r[0]), r[1]))
        lines += ["", f"## {name}: {len(changed)} of {len(c['deltas'])} problems changed"
                  + (f" ({c['unpaired']} in only one run, left out)" if c["unpaired"] else "")]
        if changed:
            lines += ["", "| problem | A | B | B − A |", "|---|---|---|---|"]
            lines += [f"| {t} | {x:.3f} | {y:.3f} | {d:+.3f} |" for d, t, x, y in changed]
    return "\n".join(lines) + "\n"
