"""`mappa export`: a training checkpoint as Hugging Face models, transcripts as a `datasets` dataset.

    mappa export checkpoint runs/mathchat --step 8 --out runs/mathchat-step8   # one model folder per policy
    mappa export transcripts runs/eval/base/transcripts.jsonl --out runs/base-ds  # datasets.load_from_disk

A checkpoint's policy folder (`out_dir/checkpoints/step_N/<policy>/`) becomes a plain transformers folder,
the same as the run's `final/<policy>/` (`hf:FOLDER` in `mappa eval`, `from_pretrained` anywhere), as the
run's policy layout says (`policy_layout.PolicyLayout.export_policy`): a whole model's DeepSpeed weights
(ZeRO-3 partitions gathered) go into a model built from its starting config, saved with the tokenizer; a
LoRA run's adapter is merged into the base (as `lora.export_merged` does for final/).

Transcripts (`mappa run`, `mappa eval`, `TranscriptRecorder` files) become one row per action: the
episode's env, task, seed and outcome, the role and its action, what the agent saw (`seen`: its last
prompt message; `messages`: the whole chat it answered, which every writer of this project records;
empty for a file written before they did), the tool results and coach verdict as JSON text, the
reward. Flat typed columns, so the dataset has one Arrow schema however the records vary; a row
whose fields have other types is refused with its line number.

Either export writes into a new folder only (`--out` absent or empty), and atomically: everything
goes into a hidden temporary folder beside it, renamed to `--out` once complete, so a failed export
leaves nothing and an existing folder (a checkpoint, an earlier export) is never written into.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mappa_train.config import ConfigError
from mappa_train.runlog import EVAL_EPISODES_FILE, TRAIN_EPISODES_FILE


class ExportError(ConfigError):
    """A run folder, step or transcript file that cannot be exported as asked; the message says why."""


def checkpoint_steps(run_dir: Path) -> list[int]:
    steps = []
    for state in (run_dir / "checkpoints").glob("step_*/state.json"):
        try:
            steps.append(int(json.loads(state.read_text())["step"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # cut short: not a checkpoint
    return sorted(steps)


def export_checkpoint(run_dir: str | Path, step: int | None, out: str | Path) -> dict[str, Path]:
    """Write checkpoint `step` (None: the newest) of the run in `run_dir` as `out/<policy>/` HF folders."""
    from mappa_train.config import from_dict

    run_dir, out = Path(run_dir), Path(out)
    if not (run_dir / "config.json").is_file():
        raise ExportError(f"{run_dir} is not a `mappa train` output folder (no config.json)")
    steps = checkpoint_steps(run_dir)
    if not steps:
        raise ExportError(f"{run_dir} holds no complete checkpoint (checkpoints/step_*/state.json)")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise ExportError(f"{run_dir} has no checkpoint of step {step}; it has steps {steps} "
                          "(keep_checkpoints decides how many stay)")
    from mappa_train.factories import resolve_model
    from mappa_train.policy_layout import policy_layout

    cfg = from_dict(json.loads((run_dir / "config.json").read_text()))
    ckpt = run_dir / "checkpoints" / f"step_{step:06d}"
    policies = sorted(p.name for p in ckpt.iterdir() if p.is_dir())
    layout = policy_layout(cfg)
    with new_folder(out) as tmp:
        model_path = resolve_model(cfg)  # resolved once: every policy starts from it (or from model.role_paths)
        for policy in policies:
            try:
                layout.export_policy(policy, ckpt / policy, model_path, tmp / policy)
            except ConfigError as e:  # the folder does not hold what the layout's learners write
                raise ExportError(str(e)) from None
        (tmp / "export.json").write_text(json.dumps({"run": str(run_dir.resolve()), "step": step,
                                                     "policies": policies}, indent=2))
    return {policy: out / policy for policy in policies}


@contextmanager
def new_folder(out: Path) -> Iterator[Path]:
    """A temporary folder beside `out` to write into; renamed to `out` when the block ends, removed if it
    raises. `out` must not exist or be an empty folder: an export never writes into existing files."""
    check_new(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp's 0700 would follow the folder to `out`
    try:
        yield tmp
        check_new(out)  # something may have appeared there meanwhile
        os.rename(tmp, out)  # atomic; replaces an empty folder, refuses a non-empty one
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def check_new(out: Path) -> None:
    """`out` must be absent or an empty folder, in a place that takes a new folder: checked before any long
    work, so a run never learns only at its end that its --out cannot be written."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ExportError(f"--out {out} is a file or a link; an export writes a new folder only: choose another --out")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"--out {out} already exists and is not an empty folder; an export writes a new folder "
                          "only: choose another --out")
    above = out.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise ExportError(f"--out {out}: {above} is a file, not a folder; choose another --out")
    try:
        shutil.rmtree(tempfile.mkdtemp(prefix=".mappa-probe-", dir=above))  # what os.access cannot tell (/sys)
    except OSError as e:
        raise ExportError(f"--out {out}: cannot create a folder in {above} ({e.strerror or e}); choose a folder "
                          "you can write to") from None


def transcript_rows(path: str | Path) -> Iterator[dict]:
    """One flat row per action of every episode in a transcripts JSON-lines file."""
    path = Path(path)
    if not path.is_file():
        raise ExportError(f"{path} is not a file; give a transcripts .jsonl written by mappa run or mappa eval")
    with path.open(encoding="utf-8", errors="replace") as lines:  # a bad byte is data, not a reason to fail
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ExportError(f"{path}: line {number} is not JSON ({e.msg}); was the file cut short?") from None
            if not isinstance(record, dict) or not isinstance(record.get("actions"), list):
                hint = ("; `mappa train` logs only outcomes there: `mappa eval --team run:OUT_DIR` plays the trained "
                        "team and writes transcripts.jsonl") if path.name in (TRAIN_EPISODES_FILE,
                                                                              EVAL_EPISODES_FILE) else ""
                raise ExportError(f"{path}: line {number} is not an episode record (no 'actions' list){hint}")
            try:
                yield from _episode_rows(record, number - 1)
            except _Malformed as e:
                raise ExportError(f"{path}: line {number}: {e}; is this a transcripts file of mappa run, "
                                  "mappa eval or TranscriptRecorder?") from None


class _Malformed(Exception):
    """A field of a transcript record of the wrong type (the message names it)."""


def _episode_rows(record: dict, default_episode: int) -> Iterator[dict]:
    outcome = _field(record, "outcome", dict) or {}
    episode = {"env_id": _text(record, "env_id"), "task_id": _text(record, "task_id"), "task": _text(record, "task"),
               "set": _text(record, "set"), "episode": _int(record, "episode", default_episode),
               "seed": _int(record, "seed", None), "sample": _int(record, "sample", 0),
               "outcome_score": _number(outcome, "score", "outcome.score"),
               "correct": _field(outcome, "correct", bool, "outcome.correct"),
               "outcome": json.dumps(outcome, default=str)}
    for i, action in enumerate(record["actions"]):
        where = f"actions[{i}]"
        if not isinstance(action, dict):
            raise _Malformed(f"{where} is {type(action).__name__}, not an object")
        # TranscriptRecorder keeps the text as "action" and the env's record (coach, tools, checks) as "record"
        done = _field(action, "record", dict, f"{where}.record") or action
        coach = _field(done, "coach", dict, f"{where}.coach") or {}
        messages = _field(action, "messages", list, f"{where}.messages") or []
        if not all(isinstance(m, dict) for m in messages):
            raise _Malformed(f"{where}.messages holds something other than {{role, content}} objects")
        chat = [{"role": str(m.get("role", "")), "content": str(m.get("content", ""))} for m in messages]
        text = action.get("text", action.get("action"))
        yield {**episode, "action_index": i, "role": _text(action, "role"), "messages": chat,
               "seen": str(action.get("seen") or (chat[-1]["content"] if chat else "")),
               "text": "" if text is None else str(text), "reward": _number(action, "reward", f"{where}.reward"),
               "coach_score": _number(coach, "score", f"{where}.coach.score"),
               "coach_ok": _field(coach, "ok", bool, f"{where}.coach.ok"),
               "tool_results": json.dumps(done.get("tool_results") or [], default=str),
               "checks": json.dumps(done.get("checks") or {}, default=str)}


def _field(obj: dict, key: str, kind: type, name: str | None = None):
    value = obj.get(key)
    if value is not None and not isinstance(value, kind):
        raise _Malformed(f"{name or key} is {type(value).__name__} {_short(value)}, expected {kind.__name__} or null")
    return value


def _text(obj: dict, key: str) -> str:
    value = obj.get(key)
    if isinstance(value, (dict, list)):
        raise _Malformed(f"{key} is {type(value).__name__} {_short(value)}, expected text")
    return "" if value is None else str(value)


def _int(obj: dict, key: str, default: int | None) -> int | None:
    value = obj.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -2**63 <= value < 2**63:
        raise _Malformed(f"{key} is {_short(value)}, expected an integer")
    return value


def _number(obj: dict, key: str, name: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Malformed(f"{name} is {_short(value)}, expected a number")
    try:
        return float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise _Malformed(f"{name} is {_short(value)}, too large for a number") from None


def _short(value) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def export_transcripts(path: str | Path, out: str | Path):
    """The transcripts of `path` as a `datasets.Dataset`, saved to `out` (load it with load_from_disk)."""
    try:
        import datasets
    except ImportError:
        raise ExportError("exporting transcripts needs the datasets package: pip install 'mappa[data]'") from None
    check_new(Path(out))  # before reading a long file
    rows = list(transcript_rows(path))
    if not rows:
        raise ExportError(f"{path} holds no actions to export")
    features = datasets.Features({
        **{k: datasets.Value("string") for k in ("env_id", "task_id", "task", "set", "outcome", "role", "seen",
                                                 "text", "tool_results", "checks")},
        **{k: datasets.Value("int64") for k in ("episode", "seed", "sample", "action_index")},
        **{k: datasets.Value("float64") for k in ("outcome_score", "reward", "coach_score")},
        **{k: datasets.Value("bool") for k in ("correct", "coach_ok")},
        "messages": [{"role": datasets.Value("string"), "content": datasets.Value("string")}],
    })
    dataset = datasets.Dataset.from_list(rows, features=features)
    with new_folder(Path(out)) as tmp:
        dataset.save_to_disk(str(tmp))
    return dataset
