"""`mappa blame`: blame precision of coaches on scripted teams with one faulty role (mappa_train.evaluation.blame)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from mappa_cli.args import key_values
from mappa_cli.errors import UsageError

# the envs mappa_train.evaluation.blame.FAULTS covers (checked in tests)
ENVS = ["Chain-v0", "CodeTest-v0", "DSBench-v0", "MathChat-v0"]
SPEC_HELP = ("a team spec to measure as Team-v0 (repeatable): a YAML file or a shipped spec name, as make('Team-v0', "
             "spec=...) takes; its scripted team, with one role always wrong per fault, plays the first --num-tasks "
             "tasks of its scenario")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", action="append", choices=ENVS,
                        help="env(s) to measure (default: all of them, unless --spec is given)")
    parser.add_argument("--spec", action="append", default=[], metavar="PATH",
                        help=SPEC_HELP)
    parser.add_argument("--coach", action="append", help="coach spec(s), as for `mappa eval --coach` (default: rule)")
    parser.add_argument("--coach-set", action="append", default=[], metavar="KEY=VALUE",
                        help="an LLMCoachConfig setting for every LLM coach (repeatable), e.g. structured_output=true")
    parser.add_argument("--tolerance", type=float, default=1.0,
                        help="how far below its fault-free score another role may fall")
    parser.add_argument("--num-tasks", type=int, default=20,
                        help="MathChat, Chain: problems; CodeTest: HumanEval eval ones (episodes per fault)")
    parser.add_argument("--dsbench-tasks", type=int, default=None,
                        help="DSBench: the first N built-in tasks (episodes per fault; default all of them)")
    parser.add_argument("--batch", type=int, default=4, help="envs played at once")
    parser.add_argument("--concurrency", type=int, default=8, help="coach calls in flight")
    parser.add_argument("--out", type=Path, default=Path("runs/blame"), help="writes results.json and blame.md here")


def run(args: argparse.Namespace) -> int:
    from mappa_envs.coach import make_coach
    from mappa_train.evaluation.blame import FAULTS, markdown, measure, spec_targets

    if args.num_tasks < 1 or args.batch < 1 or args.concurrency < 1 or args.tolerance < 0:
        raise UsageError("--num-tasks, --batch and --concurrency must be >= 1 and --tolerance >= 0")
    settings = key_values(args.coach_set, "--coach-set", "structured_output=true")
    coaches = {spec: make_coach(spec, None if spec == "rule" else settings) for spec in (args.coach or ["rule"])}
    specs = spec_targets(args.spec, args.num_tasks)  # a bad spec fails here, before anything is played
    env_kwargs = {name: {"num_tasks": args.num_tasks} for name in ("MathChat-v0", "Chain-v0", "CodeTest-v0")}
    env_kwargs.update(specs)
    if args.dsbench_tasks is not None:
        from mappa_envs.dsbench import builtin_tasks

        tasks = builtin_tasks()
        if not 1 <= args.dsbench_tasks <= len(tasks):
            raise UsageError(f"--dsbench-tasks must be between 1 and {len(tasks)} (the built-in tasks), "
                             f"got {args.dsbench_tasks}")
        env_kwargs["DSBench-v0"] = {"tasks": tasks[:args.dsbench_tasks]}
    targets = (args.env or ([] if specs else sorted(FAULTS))) + list(specs)
    rows = measure(targets, coaches, args.tolerance, args.batch, args.concurrency, env_kwargs,
                   say=lambda m: print(m, flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps([r.__dict__ for r in rows], indent=2))
    table = markdown(rows)
    (args.out / "blame.md").write_text(table)
    print(table)
    return 0
