"""DSBench tasks: the `DSTask` record and the loader for a DSBench-layout directory.

Layout (what DSBench ships and what the built-in generator writes):

    <root>/data_resplit/<task>/train.csv, test.csv [, sample_submission.csv]
    <root>/answers/<task>/test_answer.csv          # id column + target column(s); never shown to agents

Task metadata comes from the MAPPA reference implementation's files: the JSON-lines split files
(`dsbench_modeling_train.json` / `_eval.json`: `prompt` plus `metadata.task_id`) and the cleaned
prompt file (`dsbench_modeling_cleaned_prompts.json`: task id -> cleaned_prompt, metric,
target_column, id_column). Their known errors are corrected here (`CORRECTIONS`), and the task kind
is derived from the metric, not from the files' `data_type` label (which is wrong for several tasks).
The target columns are those of the answer file, so "30_labels"-style metadata needs no special case.
"""
from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mappa_envs.core.datafiles import read_json_records
from mappa_envs.dsbench.metrics import LABEL, NUMBER, ORDINAL, PROBABILITY, RANKED_LABELS, get_metric
from mappa_envs.errors import EnvArgumentError, TaskDataError, TaskDataNotFoundError

SPLIT_FILES = {"train": "dsbench_modeling_train.json", "eval": "dsbench_modeling_eval.json"}
PROMPTS_FILE = "dsbench_modeling_cleaned_prompts.json"

# Known errors in the reference metadata (see the bench data README).
CORRECTIONS: dict[str, dict[str, Any]] = {
    # its cleaned prompt describes Spaceship Titanic; the raw Kaggle text is right
    "titanic": {"metric": "accuracy", "target_column": "Survived", "id_column": "PassengerId", "use_raw_prompt": True},
    # no cleaned prompt at all; Kaggle scores it by macro F1 on open_channels
    "liverpool-ion-switching": {"metric": "f1_macro", "target_column": "open_channels", "id_column": "time",
                                "use_raw_prompt": True},
}


class DSBenchFormatError(TaskDataError):
    """A task folder, answer file or metadata record is malformed; the message says which and how."""


@dataclass(frozen=True)
class DSTask:
    """One modeling task. The answer file stays on the host; only train/test/sample go to the sandbox."""

    id: str
    description: str  # Kaggle-style text: overview, evaluation, submission format, files
    metric: str
    id_column: str
    target_columns: tuple[str, ...]
    train_csv: Path
    test_csv: Path
    answers_csv: Path
    sample_submission_csv: Path | None = None  # made from test ids when the folder has none
    pos_label: Any = None  # positive class for binary F1 / probability metrics on string labels
    baseline_score: float | None = None  # the metric of a trivial submission (computed once)
    reference_score: float | None = None  # the metric of a strong reference model (computed once)
    source: str = "dsbench"
    meta: dict = field(default_factory=dict)

    @property
    def kind(self) -> str:
        predicts = get_metric(self.metric).predicts
        if predicts in (LABEL, ORDINAL, PROBABILITY, RANKED_LABELS):
            return "classification"
        return "regression" if predicts == NUMBER else "extraction"

    def with_scores(self, baseline: float | None, reference: float | None) -> DSTask:
        return replace(self, baseline_score=baseline, reference_score=reference)


def read_records(path: str | Path) -> list[dict]:
    """A JSON array or JSON-lines file of objects; a `metadata` given as a JSON string is decoded."""
    path = Path(path)
    try:
        records = read_json_records(path, "DSBench metadata file")
    except TaskDataError as e:
        raise DSBenchFormatError(str(e)) from None
    rows = []
    for _, where, row in records:
        if not isinstance(row, dict):
            raise DSBenchFormatError(f"{path}: {where} is a {type(row).__name__}, expected an object")
        if isinstance(row.get("metadata"), str):
            try:
                row["metadata"] = json.loads(row["metadata"])
            except json.JSONDecodeError as e:
                raise DSBenchFormatError(f"{path}: {where} has a 'metadata' string that is not JSON ({e.msg})") \
                    from None
        task_id = (row.get("metadata") or {}).get("task_id") if isinstance(row.get("metadata"), dict) else None
        if not task_id:
            raise DSBenchFormatError(f"{path}: {where} has no metadata.task_id; keys: {sorted(row)}")
        rows.append(row)
    return rows


def csv_header(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as f:
        try:
            return next(csv.reader(f))
        except StopIteration:
            raise DSBenchFormatError(f"{path} is empty (expected a CSV header line)") from None
        except (UnicodeDecodeError, csv.Error) as e:
            raise DSBenchFormatError(f"{path}: the header line is not readable CSV ({e})") from None


def data_root(root: Path) -> Path:
    """`root` itself, or the folder under it that holds data_resplit/ and answers/."""
    for candidate in (root, root / "data", root / "data_modeling" / "data"):
        if (candidate / "data_resplit").is_dir() and (candidate / "answers").is_dir():
            return candidate
    raise DSBenchFormatError(
        f"{root} is not a DSBench data folder: expected data_resplit/<task>/ and answers/<task>/ under it "
        "(or under its data/ folder)")


def task_from_folder(root: Path, task_id: str, description: str, metric: str, id_column: str,
                     pos_label: Any = None, source: str = "dsbench", meta: dict | None = None) -> DSTask:
    """Check a task's files (headers only; rows are checked when a submission is scored) and build it."""
    folder, answers = root / "data_resplit" / task_id, root / "answers" / task_id / "test_answer.csv"
    get_metric(metric)  # unknown metric names fail here, with the list of known ones
    for path in (folder / "train.csv", folder / "test.csv", answers):
        if not path.is_file():
            raise DSBenchFormatError(f"task {task_id!r}: missing {path}")
    answer_cols = csv_header(answers)
    if id_column not in answer_cols:
        raise DSBenchFormatError(f"task {task_id!r}: {answers} has no id column {id_column!r} (columns: {answer_cols})")
    targets = tuple(c for c in answer_cols if c != id_column)
    if not targets:
        raise DSBenchFormatError(f"task {task_id!r}: {answers} has only the id column; it needs the target column(s)")
    test_cols = csv_header(folder / "test.csv")
    if id_column not in test_cols:
        raise DSBenchFormatError(f"task {task_id!r}: {folder / 'test.csv'} has no id column {id_column!r}")
    leaked = [t for t in targets if t in test_cols]
    if leaked:
        raise DSBenchFormatError(f"task {task_id!r}: test.csv contains the target column(s) {leaked}")
    sample = folder / "sample_submission.csv"
    return DSTask(task_id, description, get_metric(metric).name, id_column, targets, folder / "train.csv",
                  folder / "test.csv", answers, sample if sample.is_file() else None, pos_label, source=source,
                  meta=meta or {})


def load_dsbench(root: str | Path, split: str = "eval", metadata: str | Path | None = None,
                 prompts: str | Path | None = None) -> list[DSTask]:
    """Tasks of a DSBench split from a DSBench data folder.

    Args:
        root: the folder with data_resplit/ and answers/ (or its parent).
        split: "train" (64 tasks), "eval" (8) or "all", read from the reference's split files.
        metadata: a split file to use instead (JSON lines or array of {prompt, metadata.task_id}).
        prompts: the cleaned-prompt file (metric, id and target columns per task).
        Both files are looked for in `root` (and its parent) when not given.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise TaskDataNotFoundError(f"DSBench folder {root} does not exist")
    data = data_root(root)
    if metadata is None:
        if split not in (*SPLIT_FILES, "all"):
            raise EnvArgumentError(f"split={split!r} is not one of 'train', 'eval', 'all'")
        names = list(SPLIT_FILES.values()) if split == "all" else [SPLIT_FILES[split]]
        records = [r for name in names for r in read_records(_find(root, name))]
    else:
        records = read_records(Path(metadata).expanduser())
    prompts_path = Path(prompts).expanduser() if prompts else _find(root, PROMPTS_FILE)
    cleaned = read_json_records(prompts_path, "DSBench cleaned-prompt file")[0].value
    if not isinstance(cleaned, dict):
        raise DSBenchFormatError(f"{prompts_path}: expected an object task_id -> record")
    tasks, errors = [], []
    for record in records:
        task_id = record["metadata"]["task_id"]
        info = {**cleaned.get(task_id, {}), **CORRECTIONS.get(task_id, {})}
        if "metric" not in info or "id_column" not in info:
            errors.append(f"task {task_id!r}: no metric/id_column in the cleaned-prompt file and no known correction")
            continue
        raw = info.get("use_raw_prompt") or not info.get("cleaned_prompt")
        text = record.get("prompt") if raw else info["cleaned_prompt"]
        try:
            tasks.append(task_from_folder(data, task_id, text or "", info["metric"], info["id_column"],
                                          meta={"url": record["metadata"].get("url"),
                                                "declared_target": info.get("target_column")}))
        except ValueError as e:  # DSBenchFormatError, or an unknown metric name
            errors.append(str(e))
    if errors:
        shown = "; ".join(errors[:3]) + (f"; and {len(errors) - 3} more" if len(errors) > 3 else "")
        raise DSBenchFormatError(f"{len(errors)} DSBench task(s) under {data} cannot be loaded: {shown}")
    if not tasks:
        raise DSBenchFormatError(f"no DSBench tasks in split {split!r} under {data}")
    return tasks


def metadata_file(root: str | Path, name: str) -> Path | None:
    """Where `load_dsbench` finds the metadata file `name` for the folder `root`: in it, its parent, or
    $MAPPA_DSBENCH_META; None when nowhere."""
    root = Path(root).expanduser()
    for folder in (root, root.parent, Path(os.environ.get("MAPPA_DSBENCH_META", root))):
        if (folder / name).is_file():
            return folder / name
    return None


def _find(root: Path, name: str) -> Path:
    found = metadata_file(root, name)
    if found is not None:
        return found
    raise TaskDataNotFoundError(
        f"{name} not found in {root} or its parent: put the reference implementation's DSBench metadata files "
        f"there, point MAPPA_DSBENCH_META at their folder, or name your own: "
        f"make('DSBench-v0', tasks=..., metadata=SPLIT_FILE, prompts=PROMPTS_FILE) (docs/dsbench.md)")
