"""`mappa coach-eval`: a coach's report card on scripted episodes (mappa_envs.coach_eval.card)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from mappa_cli.blame import ENV_SET_HELP, SPEC_HELP, counted_envs, env_settings, make_coaches, measured_envs
from mappa_cli.errors import UsageError

UNSET_TASKS = {"MathChat-v0": 10}  # --num-tasks unset: these play this many tasks, the others their own default


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coach", action="append", help="coach spec(s), as for `mappa eval --coach` (default: rule)")
    parser.add_argument("--coach-set", action="append", default=[], metavar="KEY=VALUE",
                        help="an LLMCoachConfig setting for every LLM coach (repeatable), e.g. max_tokens=256")
    parser.add_argument("--env", action="append", choices=measured_envs(),
                        help="env(s) to measure (default: all of them, unless --spec is given)")
    parser.add_argument("--env-set", action="append", default=[], metavar="KEY=VALUE", help=ENV_SET_HELP)
    parser.add_argument("--spec", action="append", default=[], metavar="PATH", help=SPEC_HELP)
    parser.add_argument("--num-tasks", type=int,
                        help="tasks per fault: the first N of MathChat-v0's synthetic eval problems (default 10), of "
                             "CodeTest-v0's and Chain-v0's eval tasks (default 20), and of each --spec's scenario "
                             "(default 10)")
    parser.add_argument("--dsbench-tasks", type=int, default=3, help="DSBench: the first N built-in tasks per fault")
    parser.add_argument("--probe-tasks", type=int, default=2,
                        help="tasks per master-key probe and role (5 probes x every role)")
    parser.add_argument("--no-backprop", action="store_true", help="skip the reward back-propagation rows")
    parser.add_argument("--tolerance", type=float, default=1.0,
                        help="how far below its fault-free value another action or role may fall")
    parser.add_argument("--batch", type=int, default=4, help="envs played at once")
    parser.add_argument("--concurrency", type=int, default=8, help="coach calls in flight")
    parser.add_argument("--labels", type=Path, metavar="DIR",
                        help="also measure each coach against human labels (`mappa export labels`): AUROC, agreement, "
                             "calibration, in labels.json and labels.md")
    parser.add_argument("--out", type=Path, default=Path("runs/coach-eval"),
                        help="writes results.json, coach_eval.md, roc.png, calibration.png and transcripts.jsonl "
                             "(every action with each coach's verdict, for `mappa review`) here")


def run(args: argparse.Namespace) -> int:
    from mappa_envs.coach_eval.blame import spec_targets
    from mappa_envs.coach_eval.card import evaluate, markdown, record_all, write_plots, write_transcripts
    from mappa_envs.dsbench import builtin_tasks

    given = args.num_tasks is not None
    if min(args.num_tasks if given else 1, args.probe_tasks, args.batch, args.concurrency) < 1 or args.tolerance < 0:
        raise UsageError("--num-tasks, --probe-tasks, --batch and --concurrency must be >= 1 and --tolerance >= 0")
    tasks = builtin_tasks()
    if not 1 <= args.dsbench_tasks <= len(tasks):
        raise UsageError(f"--dsbench-tasks must be between 1 and {len(tasks)} (the built-in tasks), "
                         f"got {args.dsbench_tasks}")
    coaches = make_coaches(args.coach, args.coach_set)
    num_tasks = args.num_tasks if given else 10
    specs = spec_targets(args.spec, num_tasks)  # a bad spec fails here, before anything is played
    labels = _labels(args.labels)  # so do bad labels
    counted = counted_envs() if given else [env for env in counted_envs() if env in UNSET_TASKS]
    env_kwargs = {**{env: {"num_tasks": args.num_tasks if given else UNSET_TASKS[env]} for env in counted},
                  "DSBench-v0": {"tasks": tasks[:args.dsbench_tasks]}, **specs}
    for env, extra in env_settings(args.env_set, args.env).items():
        env_kwargs[env] = {**env_kwargs.get(env, {}), **extra}
    say = lambda m: print(m, flush=True)  # noqa: E731
    targets = (args.env or ([] if specs else measured_envs())) + list(specs)
    episodes = record_all(targets, env_kwargs, args.probe_tasks, args.batch, say=say)
    scored: dict = {}
    rows = evaluate(episodes, coaches, not args.no_backprop, args.tolerance, args.concurrency, say=say, scored=scored)
    args.out.mkdir(parents=True, exist_ok=True)
    write_transcripts(args.out / "transcripts.jsonl", episodes, scored)
    (args.out / "results.json").write_text(json.dumps({"episodes": len(episodes), "rows": rows}, indent=2))
    table = markdown(rows)
    (args.out / "coach_eval.md").write_text(table)
    write_plots(rows, args.out)
    print(table)
    if labels is not None:
        _against_labels(args, labels, coaches)
    return 0


def _labels(folder: Path | None) -> list[dict] | None:
    from mappa_train.review.labels import load_labels

    return None if folder is None else load_labels(folder)


def _against_labels(args: argparse.Namespace, labels: list[dict], coaches: dict) -> None:
    from mappa_train.review.labels import evaluate_labels
    from mappa_train.review.labels import markdown as labels_markdown

    rows = evaluate_labels(labels, coaches, args.concurrency)
    (args.out / "labels.json").write_text(json.dumps({"labels": str(args.labels), "rows": rows}, indent=2))
    table = labels_markdown(rows)
    (args.out / "labels.md").write_text(table)
    print(f"against the human labels in {args.labels}:\n{table}")
