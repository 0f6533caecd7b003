"""Named eval sets, and the training source each is checked against for overlap.

| name                | env          | problems |
|---------------------|--------------|----------|
| `aime2025`          | MathChat-v0  | `<data-dir>/aime_2025.json` (30) |
| `amc`               | MathChat-v0  | `<data-dir>/amc_eval_32.json` (32) |
| `synthetic[:N]`     | MathChat-v0  | N (default 64) generated problems of the eval stream |
| any `*.json[l]` path | MathChat-v0 | an AIME/AMC-format file (`prompt`/`problem`, `answer`) |

`<data-dir>` is `--data-dir`, else `$MAPPA_DATA_DIR`. The default training source of the file sets
is `<data-dir>/AIME_1983_2024.json` (the paper's training problems) when it exists; the synthetic
set is checked against the synthetic training stream.
"""
from __future__ import annotations

import os
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
    """The EvalSet for `name` (see the module docstring); `train_source` overrides the default
    training source to check overlap against ("none" turns the check off)."""
    root = data_dir(data)
    if name in MATH_FILES:
        if root is None or not (root / MATH_FILES[name]).is_file():
            where = f"{root / MATH_FILES[name]} does not exist" if root else "no data directory was given"
            raise FileNotFoundError(f"eval set {name!r} needs {MATH_FILES[name]}: {where}; pass --data-dir DIR "
                                    f"(or set ${DATA_DIR_ENV}) pointing at the folder holding the AIME/AMC JSON files")
        es = _math_file(name, root / MATH_FILES[name])
    elif name == "synthetic" or name.startswith("synthetic:"):
        size = name.partition(":")[2] or str(SYNTHETIC_DEFAULT)
        if not size.isdigit() or int(size) < 1:
            raise ValueError(f"eval set {name!r}: expected synthetic or synthetic:N with N >= 1")
        es = EvalSet(name, "MathChat-v0", {"task_source": "synthetic", "split": "eval", "num_tasks": int(size)})
        if train_source is None:
            es.train_source = f"synthetic train stream ({SYNTHETIC_TRAIN} problems)"
            es.train_texts = lambda: _math_texts("synthetic", SYNTHETIC_TRAIN)
    elif name.endswith((".json", ".jsonl")):
        path = Path(name)
        if not path.is_file():
            raise FileNotFoundError(f"eval set file {path} does not exist")
        es = _math_file(path.stem, path)
    else:
        raise ValueError(f"unknown eval set {name!r}; use one of {sorted(MATH_FILES)}, synthetic[:N], "
                         "or a path to an AIME/AMC-format .json/.jsonl file")
    if es.train_texts is None and train_source is None and root is not None and (root / MATH_TRAIN_FILE).is_file():
        train_source = str(root / MATH_TRAIN_FILE)
    if train_source and train_source != "none":
        es.train_source = train_source
        es.train_texts = lambda: _math_texts(train_source, SYNTHETIC_TRAIN)
    elif train_source == "none":
        es.train_source, es.train_texts = None, None
    return es


def _math_file(name: str, path: Path) -> EvalSet:
    return EvalSet(name, "MathChat-v0", {"task_source": str(path), "split": "all"})


def _math_texts(source: str, num_tasks: int) -> list[str]:
    from mappa_envs.mathchat import load_tasks

    split = "train" if source == "synthetic" else "all"  # a whole training file counts, not a holdout of it
    return [t.prompt for t in load_tasks(source, split=split, num_tasks=num_tasks)]
