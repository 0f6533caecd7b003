"""`mappa ablate --prior RESULTS`: extend an ablation whose run folders are gone (another machine, a
deleted runs/) from the results.json it wrote, which holds one record per run and the start's reports.

On two CPU cores a paired seed of a deep chain takes most of an hour, so a grid is run over several
sessions; committing results.json keeps what each one measured. The prior's runs are not trained again:
their records join the summary and their seeds join the grid. Pairing is seed by seed, so what must hold
is that every arm of a seed trained from one start at one budget:
- the preset's fields match, bar the seeds, sweep values, noise rates, arms and baselines run;
- the budget the prior's pre-flight fixed is restored into start/, not fixed anew (one fixed here must
  equal it);
- the start rebuilt here is pre-flighted before anything trains. If it plays as the prior's did (the
  same share of right actions per role, the same team success), every seed shares it. If not (another
  CPU's kernels differ in the last bit, and sampling at temperature 1 turns that into other tokens), the
  prior's seeds keep their start and new seeds train from this one, which is refused when a prior seed
  lacks an arm of the grid (that run would pair two starts). Each record names its start (`start`, a
  digest of its pre-flight reports).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from mappa_train.config import ConfigError

FREE = {"seeds", "sweep", "coach_noise", "noise_at", "arms", "baseline", "train_config"}  # --arms and co. set them
IDENTITY = {"condition", "coach_noise", "arm", "reward", "seed"}  # a record's place in the grid, not its figures
REPORTS = ("preflight", "budget")  # start/<name>[_<condition>].json


def load_prior(path: str | Path) -> dict:
    """A results.json written by `mappa ablate`; one-line errors for anything else."""
    hint = "pass the results.json an earlier `mappa ablate` of this preset wrote"
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"--prior {path}: no such file; {hint}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"--prior {path} is not readable JSON ({err.__class__.__name__}); {hint}") from None
    if not isinstance(data, dict) or not all(k in data for k in ("config", "records", "start_reports")):
        raise ConfigError(f"--prior {path} is not a results.json with config, records and start_reports; {hint}")
    records, reports = data["records"], data["start_reports"]
    bad = next((i for i, r in enumerate(records) if not _is_record(r)), None) if isinstance(records, list) else -1
    if bad is not None or not isinstance(data["config"], dict) or not isinstance(reports, dict) or not all(
            isinstance(v, dict) for v in reports.values()):
        where = f"record {bad}" if bad is not None and bad >= 0 else "its config, records or start_reports"
        raise ConfigError(f"--prior {path}: {where} is not as `mappa ablate` writes it; {hint}")
    return data


def _is_record(r) -> bool:
    """A run's record: its place in the grid and the figures the summary reads."""
    return (isinstance(r, dict) and isinstance(r.get("condition"), str) and isinstance(r.get("arm"), str)
            and isinstance(r.get("seed"), int) and not isinstance(r.get("seed"), bool)
            and isinstance(r.get("curve"), list) and "auc" in r and "final_accuracy" in r)


def start_reports(where: Path) -> dict:
    """The start's pre-flight and budget reports (start/*.json), by file stem, for results.json."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(where.glob("*.json")) if p.stem.startswith(REPORTS)}


def prior_records(prior: dict, axis: str | None) -> dict[tuple, dict]:
    """(condition, arm, seed) -> that run's figures, as `ablate_report.run_summary` gives them."""
    drop = IDENTITY | ({axis} if axis else set())
    return {(r["condition"], r["arm"], r["seed"]): {k: v for k, v in r.items() if k not in drop}
            for r in prior["records"]}


def check_prior(prior: dict, cfg, grid: set[tuple[str, str]], path: str) -> list[int]:
    """Refuse a prior of another setting or with runs outside this grid ((condition, arm) pairs run here);
    return the seeds the grid trains and summarises: the preset's and the prior's."""
    mine, theirs = asdict(cfg), prior["config"]
    differ = [k for k in mine if k not in FREE and mine[k] != theirs.get(k)]
    differ += ["train_config"] * (Path(mine["train_config"]).name != Path(str(theirs.get("train_config"))).name)
    differ += ["sweep.key"] * (mine["sweep"]["key"] != theirs.get("sweep", {}).get("key"))
    ran = {(r["condition"], r["arm"]) for r in prior["records"]}
    differ += [f"arms.{a}" for a in sorted({a for _, a in ran} & set(cfg.arms))
               if cfg.arms[a] != theirs.get("arms", {}).get(a)]
    if differ:
        raise ConfigError(f"--prior {path} was run with other settings ({', '.join(differ)}), so its runs cannot be "
                          "paired with this preset's; run the preset it was run with")
    outside = sorted(ran - grid)
    if outside:
        raise ConfigError(f"--prior {path} holds runs outside this grid (condition, arm: {outside}); add their arms "
                          "and sweep values (--arms, --sweep-values), so that results.json keeps them")
    if not cfg.preflight_episodes:
        raise ConfigError(f"--prior {path}: the start rebuilt here is checked against the prior's by replaying its "
                          "pre-flight; set preflight_episodes in the preset")
    return sorted({*cfg.seeds, *(r["seed"] for r in prior["records"])})


def restore_budgets(prior: dict, where: Path) -> None:
    """Write the prior's budget reports into start/ (where none is): the budget stays the one it fixed."""
    where.mkdir(parents=True, exist_ok=True)
    for name, report in prior["start_reports"].items():
        if name.startswith("budget") and not (where / f"{name}.json").exists():
            (where / f"{name}.json").write_text(json.dumps(report, indent=2))


def start_digest(where: Path) -> str:
    """A short digest of the start's pre-flight reports: two runs with one digest trained from starts that
    played alike."""
    reports = {k: v for k, v in start_reports(where).items() if k.startswith("preflight")}
    return hashlib.sha256(json.dumps(reports, sort_keys=True).encode()).hexdigest()[:12]


def check_same_start(prior: dict, where: Path, grid: set[tuple[str, str]], path: str, progress=print) -> None:
    """The budget here must be the prior's; a start that plays otherwise may only train seeds of its own."""
    here = start_reports(where)
    for name, report in here.items():
        before = prior["start_reports"].get(name)
        if name.startswith("budget") and before is not None and before["budget_steps"] != report["budget_steps"]:
            raise ConfigError(f"--prior {path}: {where / name}.json fixed {report['budget_steps']} steps, the prior "
                              f"{before['budget_steps']}; delete it (and the runs trained at it) or use a fresh --out")
    differ = [name for name, report in here.items()
              if name.startswith("preflight") and prior["start_reports"].get(name, report) != report]
    if not differ:
        return
    ran = {(r["condition"], r["arm"], r["seed"]) for r in prior["records"]}
    torn = sorted({s for _, _, s in ran if any((c, a, s) not in ran for c, a in grid)})
    name = differ[0]
    said = (f"the start built here plays differently from the prior's ({name}: {here[name]['right_share']:.3f} of "
            f"actions right against {prior['start_reports'][name]['right_share']:.3f})")
    if torn:
        raise ConfigError(f"--prior {path}: {said}, and its seeds {torn} lack arms of this grid, whose runs would "
                          "pair two starts; run them where the prior ran, or leave those arms out (--arms)")
    progress(f"note: {said}; the prior's seeds keep their start, new seeds train from this one")
