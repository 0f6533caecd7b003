"""PNG plots of one run's results: accuracy by eval set, coach score by role, DSBench per-task quality."""
from __future__ import annotations

import math
from pathlib import Path


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ImportError("eval plots need matplotlib: pip install matplotlib "
                          "(or pip install 'mappa[train]')") from None
    matplotlib.use("Agg")  # files only; never open a window
    import matplotlib.pyplot as plt

    return plt


def _err(d: dict) -> float:
    return 0.0 if d.get("se") is None or math.isnan(d["se"]) else d["se"]


def write_plots(results: dict, out_dir: str | Path) -> list[Path]:
    """Write the run's plots into `out_dir`; returns the files written (a plot with no data is skipped)."""
    plt = _pyplot()
    out, written = Path(out_dir), []
    sets = results["sets"]
    title = f"{results['run']} (k={results['k']})"

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        written.append(out / name)

    scored = {name: s for name, s in sets.items() if "avg@k" in s}
    if scored:
        fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(scored) + 3), 3.5))
        names = list(scored)
        metrics = [("avg@k", lambda s: s["avg@k"]), ("maj@k", lambda s: s["maj@k"]),
                   (f"pass@{results['k']}", lambda s: s["pass@k"][str(results["k"])])]
        width = 0.8 / len(metrics)
        for m, (label, get) in enumerate(metrics):
            xs = [i + (m - 1) * width for i in range(len(names))]
            ax.bar(xs, [get(scored[n])["mean"] for n in names], width, yerr=[_err(get(scored[n])) for n in names],
                   label=label, capsize=3)
        ax.set_xticks(range(len(names)), names)
        ax.set_ylim(0, 1)
        ax.set_ylabel("accuracy (mean ± SE over problems)")
        ax.set_title(f"Accuracy by eval set — {title}")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        save(fig, "accuracy_by_set.png")

    roles = sorted({r for s in sets.values() for r in s["coach_by_role"]})
    if roles:
        fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(roles) + 3), 3.5))
        width = 0.8 / len(sets)
        for j, (name, s) in enumerate(sets.items()):
            xs = [i + (j - (len(sets) - 1) / 2) * width for i in range(len(roles))]
            vals = [s["coach_by_role"].get(r, {"mean": 0.0}) for r in roles]
            ax.bar(xs, [v["mean"] for v in vals], width, yerr=[_err(v) for v in vals], label=name, capsize=3)
        ax.set_xticks(range(len(roles)), roles)
        ax.set_ylim(0, 10)
        ax.set_ylabel("coach score 0-10 (mean ± SE)")
        ax.set_title(f"Coach score by role — {title}")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        save(fig, "coach_by_role.png")

    for name, s in sets.items():
        if "valid_rate" not in s:
            continue
        tasks = list(s["per_task"])
        fig, ax = plt.subplots(figsize=(max(4, 0.7 * len(tasks) + 2), 4))
        ax.bar(range(len(tasks)), [s["per_task"][t]["score"] for t in tasks])
        ax.set_xticks(range(len(tasks)), tasks, rotation=45, ha="right", fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_ylabel("relative quality (mean over samples)")
        ax.set_title(f"{name}: per-task quality — {title}")
        save(fig, f"quality_{_slug(name)}.png")
    return written


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
