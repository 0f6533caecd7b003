"""`mappa coach-train`: fine-tune a judge model on labelled actions (mappa_train.coach_training)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from mappa_cli.args import key_values
from mappa_cli.errors import UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    from mappa_train.coach_training.train import JudgeTrainConfig as C

    parser.add_argument("--transcripts", action="append", default=[], type=Path, metavar="PATH",
                        help="transcripts of mappa run / mappa eval / TranscriptRecorder (a file or a folder, "
                             "repeatable): every action labelled by the rule coach from its recorded checks")
    parser.add_argument("--labels", action="append", default=[], type=Path, metavar="DIR",
                        help="human verdicts exported by `mappa export labels` (repeatable)")
    parser.add_argument("--scripted", action="append", default=[], metavar="ENV",
                        help="coach-eval's scripted fault and master-key episodes of ENV, labelled by the rule "
                             "coach (repeatable), e.g. Chain-v0")
    parser.add_argument("--scripted-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a keyword for the --scripted envs (value read as YAML), e.g. view=own or split=train")
    parser.add_argument("--heldout", type=float, default=0.2,
                        help="the fraction of tasks held out (never trained on), written to OUT/heldout")
    parser.add_argument("--model", default=C.model, help="the judge to start from: anything model.path takes")
    parser.add_argument("--full", action="store_true", help="train every weight instead of LoRA adapters")
    parser.add_argument("--top-layers", type=int, default=C.top_layers, metavar="N",
                        help="with --full: train only the top N layers and the final norm (0: all); a step then "
                             "costs little more than a forward pass")
    parser.add_argument("--balance", action="store_true",
                        help="every batch draws right (verdict >= 5) and wrong actions in turn: a judge trained "
                             "on mostly-right labels as they come gives every action the majority's verdict")
    parser.add_argument("--steps", type=int, default=C.steps)
    parser.add_argument("--batch-size", type=int, default=C.batch_size)
    parser.add_argument("--lr", type=float, default=C.lr)
    parser.add_argument("--lora-rank", type=int, default=C.lora_rank)
    parser.add_argument("--reply", choices=["json", "text"], default=C.reply,
                        help="the reply format to learn: json = structured output (serve it with "
                             "--coach-set structured_output=true), text = RATIONALE/SCORE lines")
    parser.add_argument("--rationale-chars", type=int, default=C.rationale_chars,
                        help="the label's rationale cut to this many characters (0: an empty rationale)")
    parser.add_argument("--max-tokens", type=int, default=C.max_tokens,
                        help="prompt + reply tokens; a longer prompt keeps its end")
    parser.add_argument("--dtype", choices=["auto", "bfloat16", "float32"], default=C.dtype,
                        help="compute precision (auto: bf16 autocast where the CPU/GPU is fast at it)")
    parser.add_argument("--seed", type=int, default=C.seed)
    parser.add_argument("--out", type=Path, required=True, help="a new (absent or empty) folder for the judge")


def run(args: argparse.Namespace) -> int:
    from mappa_train.coach_training import examples as ex
    from mappa_train.coach_training.train import HELDOUT_DIR, JudgeTrainConfig, train_judge
    from mappa_train.export import check_new

    if not (args.transcripts or args.labels or args.scripted):
        raise UsageError("no labels: give --transcripts PATH, --labels DIR (mappa export labels) or --scripted ENV")
    if args.scripted_set and not args.scripted:
        raise UsageError("--scripted-set needs --scripted ENV")
    cfg = JudgeTrainConfig(model=args.model, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                           lora=not args.full, top_layers=args.top_layers, balance=args.balance,
                           lora_rank=args.lora_rank, reply=args.reply,
                           rationale_chars=args.rationale_chars, max_tokens=args.max_tokens, dtype=args.dtype,
                           seed=args.seed)
    cfg.check()
    check_new(args.out)  # before any label is read or model loaded
    ex.split_by_task([], args.heldout)  # a bad --heldout fails now too
    labelled = []  # read and split before the model is resolved: bad labels fail in a second, not after a build
    if args.transcripts:
        labelled += ex.from_transcripts(args.transcripts)
    for folder in args.labels:
        labelled += ex.from_labels(folder)
    scripted_kwargs = _yaml_values(args.scripted_set)
    for env_id in args.scripted:
        print(f"{env_id}: playing coach-eval's scripted episodes ...", flush=True)
        labelled += ex.from_scripted(env_id, scripted_kwargs)
    train, heldout = ex.split_by_task(labelled, args.heldout, args.seed)
    if args.heldout and not heldout:
        tasks = len({x.task_key for x in labelled})
        raise UsageError(f"--heldout {args.heldout} held out none of the {tasks} tasks; raise it (about "
                         f"{1 / tasks:.2g} or more holds one out) or pass --heldout 0 to train on every task")
    from mappa_train.model_source import resolve_model

    cfg.model = str(resolve_model(args.model, label=f"--model {args.model!r}"))
    print(f"{len(labelled)} labelled actions: {len(train)} to train on, {len(heldout)} of held-out tasks", flush=True)
    record = train_judge(train, heldout, args.out, cfg, say=lambda m: print(m, flush=True))
    print(json.dumps({k: record[k] for k in ("train_tasks", "heldout_tasks", "prompts_cut", "loss_first",
                                              "loss_last")}))
    then = ["mappa coach-eval --coach smollm2@http://127.0.0.1:8123/v1"]
    then += ["--coach-set structured_output=true"] if cfg.reply == "json" else []
    then += [f"--labels {args.out / HELDOUT_DIR}"] if heldout else []
    print(f"judge -> {args.out}; serve it: bash scripts/serve_judge.sh 8123 --model {args.out}, then {' '.join(then)}")
    return 0


def _yaml_values(pairs: list[str]) -> dict:
    from mappa_envs.yaml_data import YamlDataError, plain_yaml

    try:
        return {k: plain_yaml(v) for k, v in key_values(pairs, "--scripted-set", "view=own").items()}
    except YamlDataError as exc:
        raise UsageError(f"--scripted-set {pairs}: {exc}") from None
