"""`mappa quickstart --seeds 0,1,2`: the headline over training seeds, not one seed's luck.

Each seed is a whole quickstart (its own warm start, teacher, coached and control arms, all seeded by
it) under OUT/seed_N. The summary (OUT/seeds.json, OUT/seeds.md) gives, for the dev set and the
confirmation set: each seed's before, after (coached and control) and paired-bootstrap intervals
(over problems), and the mean over seeds of after − before and of coached − control with a 95%
Student-t interval over seeds (mean ± t·s/√n, n − 1 degrees of freedom), which is what should hold
on another machine: a single seed's figure need not.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def t_quantile(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom (a table to 10, then Cornish-Fisher)."""
    if df in T975:
        return T975[df]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def over_seeds(values: list[float]) -> dict:
    """Mean, sample standard deviation and 95% t-interval of one figure over seeds."""
    n, mean = len(values), statistics.fmean(values)
    sd = statistics.stdev(values)
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    return {"mean": mean, "sd": sd, "ci95": [mean - half, mean + half], "n": n}


def summarise(out: Path, seeds: list[int]) -> str:
    """Write OUT/seeds.json and OUT/seeds.md from the seeds' report.json files; returns the markdown."""
    reports = {s: json.loads((out / f"seed_{s}" / "report.json").read_text()) for s in seeds}
    sets = {"dev": {s: r for s, r in reports.items()},
            "confirmation": {s: r["confirmation"] for s, r in reports.items() if r.get("confirmation")}}
    summary: dict = {"seeds": seeds, "interval_over_seeds": "mean ± t(0.975, n−1)·sd/√n over training seeds"}
    for name, per_seed in sets.items():
        if len(per_seed) != len(seeds):
            continue
        summary[name] = {
            "problems": next(iter(per_seed.values())).get("problems", reports[seeds[0]]["heldout_problems"]),
            "delta": over_seeds([r["accuracy_delta"] for r in per_seed.values()]),
            "before": over_seeds([r["accuracy_before"] for r in per_seed.values()]),
            "after": over_seeds([r["accuracy_after"] for r in per_seed.values()]),
            "per_seed": {s: {k: r[k] for k in ("accuracy_before", "accuracy_after", "accuracy_delta",
                                               "accuracy_delta_ci95")} for s, r in per_seed.items()}}
        if all("control" in r for r in per_seed.values()):
            summary[name]["coached_minus_control"] = over_seeds([r["control"]["coached_minus_control"]
                                                                 for r in per_seed.values()])
            for s, r in per_seed.items():
                summary[name]["per_seed"][s]["control"] = {k: r["control"][k] for k in (
                    "accuracy_after", "coached_minus_control", "coached_minus_control_ci95")}
    summary["wall_s"] = {s: r["wall_s"] for s, r in reports.items()}
    summary["cpu_s"] = {s: r["cpu_s"] for s, r in reports.items()}
    (out / "seeds.json").write_text(json.dumps(summary, indent=2))
    text = format_summary(summary)
    (out / "seeds.md").write_text(text)
    return text


def _control_line(d: dict) -> list[str]:
    if "coached_minus_control" not in d:
        return []
    v = d["coached_minus_control"]
    return [f"Mean coached − control over seeds: {v['mean']:+.3f}, 95% t-interval over seeds "
            f"[{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}] (sd {v['sd']:.3f}).", ""]


def format_summary(s: dict) -> str:
    lines = [f"# MAPPA quickstart over {len(s['seeds'])} training seeds ({', '.join(map(str, s['seeds']))})", ""]
    for name in ("dev", "confirmation"):
        if name not in s:
            continue
        d = s[name]
        lo, hi = d["delta"]["ci95"]
        lines += [f"## {name} set ({d['problems']} problems)", "",
                  f"Mean after − before over seeds: {d['delta']['mean']:+.3f}, 95% t-interval over seeds "
                  f"[{lo:+.3f}, {hi:+.3f}] (sd {d['delta']['sd']:.3f}); before {d['before']['mean']:.3f}, "
                  f"after {d['after']['mean']:.3f}.", "",
                  *_control_line(d),
                  "| seed | before | after | after − before [95% paired bootstrap over problems] | control after "
                  "| coached − control [95% paired bootstrap] |", "|---|---|---|---|---|---|"]
        for seed, r in d["per_seed"].items():
            blo, bhi = r["accuracy_delta_ci95"]
            c = r.get("control")
            vs = "| – | – |" if c is None else (
                f"| {c['accuracy_after']:.3f} | {c['coached_minus_control']:+.3f} "
                f"[{c['coached_minus_control_ci95'][0]:+.3f}, {c['coached_minus_control_ci95'][1]:+.3f}] |")
            lines.append(f"| {seed} | {r['accuracy_before']:.3f} | {r['accuracy_after']:.3f} | "
                         f"{r['accuracy_delta']:+.3f} [{blo:+.3f}, {bhi:+.3f}] {vs}")
        lines.append("")
    lines.append("Wall / CPU minutes per seed: " + ", ".join(
        f"{k}: {s['wall_s'][k] / 60:.1f} / {s['cpu_s'][k] / 60:.1f}" for k in s["wall_s"]))
    return "\n".join(lines) + "\n"
