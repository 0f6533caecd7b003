"""`mappa ablate --prior RESULTS`: extend an ablation whose run folders are gone (another machine, a
deleted runs/) from the results.json it wrote, which holds one record per run, the start's reports and
the training config it resolved.

On two CPU cores a paired seed of a deep chain takes most of an hour, so a grid is run over several
sessions; committing results.json keeps what each one measured. The prior's runs are not trained again:
their records join the summary and their seeds join the grid. Pairing is seed by seed, so what must hold
is that every arm of a seed trained from one start at one budget:
- the preset's fields and its resolved training config match, bar the seeds, sweep values, noise rates,
  arms and baselines run; each record sits where its condition and arm put it;
- the budget the prior's pre-flight fixed is restored into start/, not fixed anew (one fixed here must
  equal it);
- the start rebuilt here is pre-flighted before anything trains. If it plays as the prior's did (the
  same share of right actions per role, the same team success), every seed shares it. If not (another
  CPU's kernels differ in the last bit, and sampling at temperature 1 turns that into other tokens), the
  prior's seeds keep their start and new seeds train from this one, which is refused when a prior seed
  lacks an arm of the grid (that run would pair two starts). Each record names its start (`start`, a
  digest of its pre-flight reports).

A prior is a file anyone can hand over, so it is read as untrusted: a regular file of bounded size, strict
JSON (no repeated key, no NaN), every field the summary reads checked for type and range, report names
that cannot leave start/, and every refusal made before anything is trained or written.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from mappa_train.config import ConfigError
from mappa_train.config.schema import TrainConfig
from mappa_train.experiments.ablate_preset import run_dir, start_file
from mappa_train.experiments.ablate_report import place, run_figures

FREE = {"seeds", "sweep", "coach_noise", "noise_at", "noise_arms", "arms", "baseline",  # the grid's extent: a cell
        "train_config"}  # outside it is refused below, one inside is compared setting by setting
IDENTITY = {"condition", "coach_noise", "arm", "reward", "seed"}  # a record's place in the grid, not its figures
REPORTS = ("preflight", "budget")  # start/<name>[_<condition>].json
REPORT_NAME = re.compile(rf"({'|'.join(REPORTS)})(_[A-Za-z0-9.+-]+)?")  # no path separator: it stays in start/
MAX_BYTES = 64 << 20  # a results.json of thousands of runs is a few MB
HINT = "pass the results.json an earlier `mappa ablate` of this preset wrote"


# ---- reading: a results.json, strictly ------------------------------------------------------------

def load_prior(path: str | Path) -> dict:
    """A results.json written by `mappa ablate`; one-line errors for anything else."""
    data = _read_json(Path(path))
    if not isinstance(data, dict) or not all(k in data for k in ("config", "records", "start_reports")):
        raise ConfigError(f"--prior {path} is not a results.json with config, records and start_reports; {HINT}")
    records, reports = data["records"], data["start_reports"]
    if not isinstance(data["config"], dict) or not isinstance(records, list) or not isinstance(reports, dict) or (
            not isinstance(data.get("train", {}), dict)):
        raise ConfigError(f"--prior {path}: its config, records, start_reports or train is not as `mappa ablate` "
                          f"writes it; {HINT}")
    wrong = {i: p for i, r in enumerate(records) if (p := _record_problem(r))}
    problems = [f"record {i}: {p}" for i, p in wrong.items()]
    problems += [f"start_reports.{name}: {p}" for name, report in reports.items()
                 if (p := _report_problem(name, report))]
    places = Counter((r["condition"], r["arm"], r["seed"]) for i, r in enumerate(records) if i not in wrong)
    twice = sorted(p for p, n in places.items() if n > 1)
    problems += [f"records hold {c or 'the run'}/{a}/seed{s} twice" for c, a, s in twice]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(f"--prior {path}: {problems[0]}{more}; {HINT}")
    return data


def _read_json(path: Path):
    """Strict JSON from a regular file of at most MAX_BYTES (a FIFO or a device would block or never end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"--prior {path}: no such file; {HINT}") from None
    except OSError as err:
        raise ConfigError(f"--prior {path} cannot be read ({err.strerror}); {HINT}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"--prior {path} is not a regular file; {HINT}")
        if info.st_size > MAX_BYTES:
            raise ConfigError(f"--prior {path} is {info.st_size} bytes, over the {MAX_BYTES >> 20} MiB a "
                              f"results.json may be; {HINT}")
        raw = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_no_repeated_key, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        said = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
        raise ConfigError(f"--prior {path} is not readable JSON ({said}); {HINT}") from None


def _no_repeated_key(pairs: list) -> dict:
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"key {key!r} appears twice in one object")
        seen.add(key)
    return dict(pairs)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number results.json holds")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _share(x) -> bool:
    return _number(x) and 0 <= x <= 1


def _count(x) -> bool:
    return _number(x) and x >= 0


def _costs(x) -> bool:
    return x is None or isinstance(x, dict) and all(_count(v) for v in x.values())


def _whole(x, least: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and least <= x < 2**63


# field -> (check, what it must be): every field `summarise` reads from a record
RECORD = {
    "condition": (lambda x: isinstance(x, str), "a string"),
    "arm": (lambda x: isinstance(x, str) and x != "", "an arm's name"),
    "reward": (lambda x: isinstance(x, str), "a string"),
    "coach_noise": (_share, "a number in [0, 1]"),
    "seed": (lambda x: _whole(x, 0), "an integer in [0, 2**63)"),
    "curve": (lambda x: isinstance(x, list) and all(isinstance(p, list) and len(p) == 2 and _count(p[0])
                                                     and _share(p[1]) for p in x), "a list of [rollouts, accuracy]"),
    "start_accuracy": (lambda x: x is None or _share(x), "null or a number in [0, 1]"),
    "auc": (lambda x: x is None or _share(x), "null or a number in [0, 1]"),
    "final_accuracy": (lambda x: x is None or _share(x), "null or a number in [0, 1]"),
    "target": (lambda x: x is None or _number(x), "null or a number"),
    "reached": (_costs, "null or costs (numbers >= 0)"),
    "to_gain": (lambda x: isinstance(x, dict) and all(_costs(v) for v in x.values()), "gains to null or costs"),
    **{k: (_count, "a number >= 0") for k in ("rollouts", "wall_s", "coach_calls", "generated_tokens")},
    "start": (lambda x: isinstance(x, str), "a string"),
}
OPTIONAL = {"start"}  # records of priors written before starts had digests
PREFLIGHT = {"right_share": (_share, "a number in [0, 1]"), "team_success": (_share, "a number in [0, 1]")}
BUDGET = {"budget_steps": (lambda x: _whole(x, 1), "a whole number of steps >= 1"),
          "start": (_share, "a number in [0, 1]"), "reached": (_share, "a number in [0, 1]"),
          "steps_to_rise": (lambda x: _whole(x, 0), "a whole number of steps"),
          "gain": (_number, "a number"), "factor": (_number, "a number"), "eval_set": (lambda x: isinstance(x, str),
                                                                                      "a string")}


def _problem(item, fields: dict, optional=frozenset()) -> str | None:
    """What is wrong with `item` against `fields` (None: nothing)."""
    if not isinstance(item, dict):
        return "is not an object"
    for key, (ok, what) in fields.items():
        if key not in item:
            if key not in optional:
                return f"lacks {key}"
        elif not ok(item[key]):
            return f"{key} must be {what}, not {json.dumps(item[key])[:40]}"
    return None


def _record_problem(r) -> str | None:
    return _problem(r, RECORD, OPTIONAL)


def _report_problem(name: str, report) -> str | None:
    if not isinstance(name, str) or not REPORT_NAME.fullmatch(name):
        return "is not a pre-flight or budget report's name (preflight[_<condition>], budget[_<condition>])"
    return _problem(report, PREFLIGHT if name.startswith("preflight") else BUDGET)


# ---- checking: the prior against the grid run here -------------------------------------------------

def check_prior(prior: dict, cfg, cells: dict, train: dict, path: str) -> list[int]:
    """Refuse a prior of another setting, with runs outside this grid or placed otherwise than it places them,
    or without the reports that tie its runs to a start and a budget; return the seeds the grid trains and
    summarises: the preset's and the prior's. `cells`: (condition name, arm name) -> (Condition, Arm) of the
    grid run here; `train`: the preset's resolved training config (ablate.train_settings)."""
    mine, theirs = asdict(cfg), prior["config"]
    # with the resolved training config at hand, overrides written otherwise (a preset's default moved into the
    # command line, or out of it) are the same setting when they resolve alike; `train` below compares that
    free = FREE | ({"overrides"} if "train" in prior else set())
    differ = [k for k in mine if k not in free and mine[k] != theirs.get(k)]
    differ += [k for k in theirs if k not in mine]  # a field this version does not know
    differ += ["train_config"] * (Path(mine["train_config"]).name != Path(str(theirs.get("train_config"))).name)
    sweep = theirs.get("sweep") if isinstance(theirs.get("sweep"), dict) else {}
    differ += ["sweep.key"] * (mine["sweep"]["key"] != sweep.get("key"))
    ran = {(r["condition"], r["arm"]) for r in prior["records"]}
    their_arms = theirs.get("arms") if isinstance(theirs.get("arms"), dict) else {}
    differ += [f"arms.{a}" for a in sorted({a for _, a in ran} & set(cfg.arms)) if cfg.arms[a] != their_arms.get(a)]
    if "train" in prior:  # the resolved training config (priors since it was written)
        # a setting added since the prior was run is the same setting there when it holds its default here
        differ += [f"train.{k}" for k in _differing(train, prior["train"], as_settings(TrainConfig()))]
    if differ:
        raise ConfigError(f"--prior {path} was run with other settings ({', '.join(differ[:6])}), so its runs cannot "
                          "be paired with this preset's; run the preset it was run with")
    outside = sorted(ran - set(cells))
    if outside:
        raise ConfigError(f"--prior {path} holds runs outside this grid (condition, arm: {outside}); add their arms "
                          "and sweep values (--arms, --sweep-values), so that results.json keeps them")
    for r in prior["records"]:
        cond, arm = cells[(r["condition"], r["arm"])]
        expected = place(cond, r["arm"], arm)
        wrong = [k for k, v in expected.items() if r.get(k) != v]
        if wrong:
            raise ConfigError(f"--prior {path}: the record of {r['condition'] or 'the run'}/{r['arm']}/seed{r['seed']} "
                              f"has {', '.join(f'{k} {r.get(k)!r}' for k in wrong)}, where this grid has "
                              f"{', '.join(f'{expected[k]!r}' for k in wrong)}; {HINT}")
    if not cfg.preflight_episodes:
        raise ConfigError(f"--prior {path}: the start rebuilt here is checked against the prior's by replaying its "
                          "pre-flight; set preflight_episodes in the preset")
    plain = {cells[cell][0].plain for cell in ran}
    needed = [start_file("preflight", c) for c in plain]
    needed += [start_file("budget", c) for c in plain] if cfg.budget_gain is not None else []
    missing = sorted(n for n in needed if n not in prior["start_reports"])
    if missing:
        raise ConfigError(f"--prior {path} has runs but not the reports that tie them to a start and a budget "
                          f"({', '.join(missing)} in start_reports); {HINT}")
    seeds = {r["seed"] for r in prior["records"]}
    if cfg.budget_gain is not None and cfg.budget_seed in seeds:
        raise ConfigError(f"--prior {path} has runs of seed {cfg.budget_seed}, the budget pre-flight's (chosen because "
                          "its run rose): a grid seed must be another; drop those records")
    return sorted({*cfg.seeds, *seeds})


def as_settings(config) -> dict:
    """A training config as results.json keeps it: JSON values, paths and the like as strings."""
    return json.loads(json.dumps(asdict(config), default=str))


def _differing(a: dict, b: dict, defaults: dict | None = None, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested dicts; a key `b` lacks reads as its `defaults` value."""
    out, defaults = [], defaults if isinstance(defaults, dict) else {}
    for key in sorted(set(a) | set(b), key=str):
        x, y = a.get(key), b.get(key, defaults.get(key))
        if isinstance(x, dict) and isinstance(y, dict):
            out += _differing(x, y, defaults.get(key), f"{prefix}{key}.")
        elif x != y:
            out.append(f"{prefix}{key}")
    return out


def check_runs_here(done: dict, cells: dict, out: Path, cfg, path: str) -> None:
    """A prior run also finished in `out` must be that run (the same curve): otherwise the summary would take one
    and silently drop the other."""
    for (c, a, s), figures in done.items():
        cond, arm = cells[(c, a)]
        if (run_dir(out, cond, a, arm, s) / "final").is_dir() and (
                run_figures(cfg, out, cond, a, arm, s)["curve"] != figures["curve"]):
            raise ConfigError(f"--prior {path}: {c or 'the run'}/{a}/seed{s} is finished in {out} with other "
                              "figures than the prior's record of it; use a fresh --out, or drop that record")


def prior_records(prior: dict, axis: str | None) -> dict[tuple, dict]:
    """(condition, arm, seed) -> that run's figures, as `ablate_report.run_summary` gives them, with the start it
    trained from (the prior's own, for records written before records named it)."""
    drop = IDENTITY | ({axis} if axis else set())
    theirs = digest(prior["start_reports"])
    return {(r["condition"], r["arm"], r["seed"]): {"start": theirs, **{k: v for k, v in r.items() if k not in drop}}
            for r in prior["records"]}


# ---- the start: its reports, its budget, whether it plays as the prior's -----------------------------

def start_reports(where: Path) -> dict:
    """The start's pre-flight and budget reports (start/*.json), by file stem, for results.json."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(where.glob("*.json")) if p.stem.startswith(REPORTS)}


def digest(reports: dict) -> str:
    """A short digest of a start's pre-flight reports: two runs with one digest trained from starts that played
    alike."""
    preflights = {k: v for k, v in reports.items() if k.startswith("preflight")}
    return hashlib.sha256(json.dumps(preflights, sort_keys=True).encode()).hexdigest()[:12]


def restore_budgets(prior: dict, where: Path, names: list[str], path: str) -> list[Path]:
    """Write the prior's budget reports of this grid's conditions (`names`) into start/ where none is; one there
    that fixed other steps is refused before the start is built. Returns the files written."""
    restore = {}
    for name in names:
        before, here = prior["start_reports"].get(name), where / f"{name}.json"
        steps = _steps(here) if before is not None and here.exists() else None
        if steps is not None and steps != before["budget_steps"]:
            raise ConfigError(f"--prior {path}: {here} fixed {steps} steps, the prior {before['budget_steps']}; "
                              "delete it (and the runs trained at it) or use a fresh --out")
        if before is not None and not here.exists():
            restore[here] = before
    for here, report in restore.items():
        where.mkdir(parents=True, exist_ok=True)
        here.write_text(json.dumps(report, indent=2))
    return list(restore)


def _steps(report: Path):
    try:
        return json.loads(report.read_text())["budget_steps"]
    except (OSError, ValueError, KeyError, TypeError):
        return "unreadable"


def check_same_start(prior: dict, where: Path, grid: set[tuple[str, str]], path: str, progress=print) -> None:
    """A start that plays otherwise than the prior's may only train seeds of its own."""
    here = start_reports(where)
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
