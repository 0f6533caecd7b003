"""`mappa export`: a training checkpoint as Hugging Face models, transcripts as a `datasets` dataset.

    mappa export checkpoint runs/mathchat --step 8 --out runs/mathchat-step8   # one model folder per policy
    mappa export transcripts runs/eval/base/transcripts.jsonl --out runs/base-ds  # datasets.load_from_disk

A checkpoint (`out_dir/checkpoints/step_N/<policy>/`) is DeepSpeed's: weights and optimizer state in
its own files. `export_checkpoint` reads its weights (gathering ZeRO-3 partitions when the run used
them), puts them into a model built from the run's starting config, and saves it with the tokenizer
as a plain transformers folder, the same as the run's `final/<policy>/`: `hf:FOLDER` in `mappa eval`,
`from_pretrained` anywhere. A LoRA run's checkpoint holds one peft adapter per group; each is merged
into the base (`mappa_train.lora.merge_adapter`, as `lora.export_merged` does for final/) and saved so.

Transcripts (`mappa run`, `mappa eval`, `TranscriptRecorder` files) become one row per action: the
episode's env, task, seed and outcome, the role and its action, what the agent saw (`seen`: its last
prompt message; `messages`: the whole chat, where the file has it), the tool results and coach
verdict as JSON text, the reward. Flat typed columns, so the dataset has one Arrow schema however
the records vary.
"""
from __future__ import annotations

import json
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
    cfg = from_dict(json.loads((run_dir / "config.json").read_text()))
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} exists and is not empty; choose another --out")
    ckpt = run_dir / "checkpoints" / f"step_{step:06d}"
    policies = sorted(p.name for p in ckpt.iterdir() if p.is_dir())
    if cfg.model.policies == "lora":  # one peft adapter per group over the frozen base: merged into it
        from mappa_train.factories import resolve_model

        base = resolve_model(cfg)  # resolved once: every adapter merges into the same base
        written = {policy: _merge_lora(ckpt / policy, base, out / policy) for policy in policies}
    else:
        starts = _starting_models(cfg, policies)
        written = {policy: _export_policy(ckpt / policy, starts[policy], out / policy) for policy in policies}
    (out / "export.json").write_text(json.dumps({"run": str(run_dir.resolve()), "step": step,
                                                 "policies": policies}, indent=2))
    return written


def _starting_models(cfg, policies: list[str]) -> dict[str, Path]:
    """policy -> the folder its run started from (config and tokenizer), as training resolved it."""
    from mappa_train.factories import policy_paths, resolve_model

    return policy_paths(cfg, policies, resolve_model(cfg))


def _merge_lora(adapter: Path, base: Path, target: Path) -> Path:
    from mappa_train.lora import ADAPTER_FILE, merge_adapter

    if not (adapter / ADAPTER_FILE).is_file():
        raise ExportError(f"{adapter} holds no LoRA adapter ({ADAPTER_FILE}); was the checkpoint cut short?")
    return merge_adapter(base, adapter, target)


def _export_policy(ckpt: Path, start: Path, target: Path) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    state = _weights(ckpt)
    config = AutoConfig.from_pretrained(start)
    model = AutoModelForCausalLM.from_config(config, dtype=next(iter(state.values())).dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise ExportError(f"{ckpt} does not fit the model of {start}: missing {sorted(set(missing) - tied)[:3]}, "
                          f"unexpected {sorted(unexpected)[:3]}")
    model.tie_weights()
    with torch.no_grad():
        model.save_pretrained(target)
    AutoTokenizer.from_pretrained(start).save_pretrained(target)
    return target


def _weights(ckpt: Path) -> dict:
    """The model weights of a DeepSpeed checkpoint folder (tag "state"), full even under ZeRO-3."""
    import torch

    files = sorted((ckpt / "state").glob("mp_rank_*_model_states.pt"))
    if not files:
        raise ExportError(f"{ckpt} holds no DeepSpeed model state (state/mp_rank_00_model_states.pt)")
    module = torch.load(files[0], map_location="cpu", weights_only=False).get("module") or {}
    if module:
        return dict(module)
    # ZeRO-3 keeps no weights in the model file: gather them from the partitions
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    return dict(get_fp32_state_dict_from_zero_checkpoint(str(ckpt), tag="state"))


def transcript_rows(path: str | Path):
    """One flat row per action of every episode in a transcripts JSON-lines file."""
    path = Path(path)
    if not path.is_file():
        raise ExportError(f"{path} does not exist; give a transcripts .jsonl written by mappa run or mappa eval")
    with path.open(encoding="utf-8") as lines:
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
            outcome = record.get("outcome") or {}
            episode = {"env_id": str(record.get("env_id", "")), "task_id": str(record.get("task_id", "")),
                       "task": str(record.get("task", "")), "set": str(record.get("set", "")),
                       "episode": int(record.get("episode", number - 1)), "seed": record.get("seed"),
                       "sample": int(record.get("sample", 0)), "outcome_score": _float(outcome.get("score")),
                       "correct": outcome.get("correct"), "outcome": json.dumps(outcome, default=str)}
            for i, action in enumerate(record["actions"]):
                coach = action.get("coach") or {}
                messages = action.get("messages") or []
                yield {**episode, "action_index": i, "role": str(action.get("role", "")),
                       "messages": [{"role": str(m.get("role", "")), "content": str(m.get("content", ""))}
                                    for m in messages if isinstance(m, dict)],
                       "seen": str(action.get("seen") or (messages[-1].get("content", "") if messages else "")),
                       "text": str(action.get("text", "")), "reward": _float(action.get("reward")),
                       "coach_score": _float(coach.get("score")), "coach_ok": coach.get("ok"),
                       "tool_results": json.dumps(action.get("tool_results") or [], default=str),
                       "checks": json.dumps(action.get("checks") or {}, default=str)}


def export_transcripts(path: str | Path, out: str | Path):
    """The transcripts of `path` as a `datasets.Dataset`, saved to `out` (load it with load_from_disk)."""
    try:
        import datasets
    except ImportError:
        raise ExportError("exporting transcripts needs the datasets package: pip install 'mappa[data]'") from None
    rows = list(transcript_rows(path))
    if not rows:
        raise ExportError(f"{path} holds no actions to export")
    for row in rows:
        row["seed"] = None if row["seed"] is None else int(row["seed"])
    features = datasets.Features({
        **{k: datasets.Value("string") for k in ("env_id", "task_id", "task", "set", "outcome", "role", "seen",
                                                 "text", "tool_results", "checks")},
        **{k: datasets.Value("int64") for k in ("episode", "seed", "sample", "action_index")},
        **{k: datasets.Value("float64") for k in ("outcome_score", "reward", "coach_score")},
        **{k: datasets.Value("bool") for k in ("correct", "coach_ok")},
        "messages": [{"role": datasets.Value("string"), "content": datasets.Value("string")}],
    })
    dataset = datasets.Dataset.from_list(rows, features=features)
    dataset.save_to_disk(str(out))
    return dataset


def _float(value) -> float | None:
    return None if value is None else float(value)
