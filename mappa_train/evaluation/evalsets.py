"""Named eval sets, and the training source each is checked against for overlap.

| name                 | env         | problems                                             | default training source |
|----------------------|-------------|------------------------------------------------------|-------------------------|
| `aime2025`           | MathChat-v0 | `<data-dir>/aime_2025.json` (30)                     | `<data-dir>/AIME_1983_2024.json` |
| `amc`                | MathChat-v0 | `<data-dir>/amc_eval_32.json` (32)                   | `<data-dir>/AIME_1983_2024.json` |
| `synthetic[:N]`      | MathChat-v0 | N (default 64) problems of the synthetic eval stream | `synthetic` (the training stream) |
| a `*.json[l]` path   | MathChat-v0 | an AIME/AMC-format file (`prompt`, `answer`)         | `<data-dir>/AIME_1983_2024.json` |
| `dsbench`            | DSBench-v0  | the built-in offline tasks                           | `builtin` (the same tasks: no holdout) |
| `dsbench:DIR`        | DSBench-v0  | the eval split of a DSBench data folder              | `DIR` (its train split) |

`<data-dir>` is `--data-dir`, else `$MAPPA_DATA_DIR`; a default training file that does not exist
is not checked. `train_source` overrides the default ("none" turns the check off).
"""
from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from mappa_train.evaluation.runner import EvalSet

DATA_DIR_ENV = "MAPPA_DATA_DIR"
MATH_FILES = {"aime2025": "aime_2025.json", "amc": "amc_eval_32.json"}
MATH_TRAIN_FILE = "AIME_1983_2024.json"
SYNTHETIC_DEFAULT = 64
SYNTHETIC_TRAIN = 256  # MathChatEnv's default num_tasks: the stream a default training run draws


def data_dir(given: str | Path | None) -> Path | None:
    d = given or os.environ.get(DATA_DIR_ENV)
    return Path(d) if d else None


def resolve(name: str, data: str | Path | None = None, train_source: str | None = None) -> EvalSet:
    """The EvalSet for `name`; see the module docstring."""
    root = data_dir(data)
    es, default_train = _lookup(name, root)
    source = default_train if train_source is None else train_source
    if source and source != "none":
        es.train_source = source
        es.train_texts = partial(train_texts, es.env_id, source)
    return es


def _lookup(name: str, root: Path | None) -> tuple[EvalSet, str | None]:
    aime_train = root / MATH_TRAIN_FILE if root else None
    math_train = str(aime_train) if aime_train and aime_train.is_file() else None
    if name in MATH_FILES:
        path = root / MATH_FILES[name] if root else None
        if path is None or not path.is_file():
            where = f"{path} does not exist" if path else "no data directory was given"
            raise FileNotFoundError(f"eval set {name!r} needs {MATH_FILES[name]}: {where}; pass --data-dir DIR "
                                    f"(or set ${DATA_DIR_ENV}) pointing at the folder holding the AIME/AMC JSON files")
        return EvalSet(name, "MathChat-v0", {"task_source": str(path), "split": "all"}), math_train
    if name == "synthetic" or name.startswith("synthetic:"):
        size = name.partition(":")[2] or str(SYNTHETIC_DEFAULT)
        if not size.isdigit() or int(size) < 1:
            raise ValueError(f"eval set {name!r}: expected synthetic or synthetic:N with N >= 1")
        return EvalSet(name, "MathChat-v0", {"task_source": "synthetic", "split": "eval", "num_tasks": int(size)}), "synthetic"
    if name == "dsbench":
        return EvalSet(name, "DSBench-v0", {"tasks": "builtin"}), "builtin"
    if name.startswith("dsbench:"):
        folder = name.partition(":")[2]
        if not Path(folder).is_dir():
            raise FileNotFoundError(f"eval set {name!r}: {folder} is not a folder; expected a DSBench data folder "
                                    "(data_resplit/ and answers/ with the split metadata files)")
        return EvalSet(name, "DSBench-v0", {"tasks": folder, "split": "eval"}), folder
    if name.endswith((".json", ".jsonl")):
        path = Path(name)
        if not path.is_file():
            raise FileNotFoundError(f"eval set file {path} does not exist")
        return EvalSet(path.stem, "MathChat-v0", {"task_source": str(path), "split": "all"}), math_train
    raise ValueError(f"unknown eval set {name!r}; use one of {sorted(MATH_FILES)}, synthetic[:N], dsbench, "
                     "dsbench:DIR, or a path to an AIME/AMC-format .json/.jsonl file")


def train_texts(env_id: str, source: str) -> list[str]:
    """The problem texts of a training source: a MathChat task source, or a DSBench one
    ("builtin" or a data folder, whose train split is read)."""
    if env_id == "DSBench-v0":
        from mappa_envs.dsbench.env import load_task_source

        return [t.description for t in load_task_source(source, "train", None)]
    from mappa_envs.mathchat import load_tasks

    split = "train" if source == "synthetic" else "all"  # a whole training file counts, not a holdout of it
    return [t.prompt for t in load_tasks(source, split=split, num_tasks=SYNTHETIC_TRAIN)]
