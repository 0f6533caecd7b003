"""`mappa blame`: blame precision of coaches on scripted teams with one faulty role (mappa_envs.coach_eval.blame)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from mappa_cli.args import key_values
from mappa_cli.errors import UsageError

SPEC_HELP = ("a team spec to measure as Team-v0 (repeatable): a YAML file or a shipped spec name, as make('Team-v0', "
             "spec=...) takes; its scripted team, with one role always wrong per fault, plays the first --num-tasks "
             "tasks of its scenario")
ENV_SET_HELP = "a keyword for every --env env (repeatable; the value is read as YAML), e.g. view=own for Chain-v0"


def measured_envs() -> list[str]:
    """The registered envs with fault facts (`register(..., faults=...)`), sorted: what --env may name."""
    from mappa_envs.coach_eval.faults import measured_envs as registered

    return sorted(registered())


def counted_envs() -> list[str]:
    """The measured envs whose task set --num-tasks cuts as a `num_tasks` count (DSBench's is a task list)."""
    from mappa_envs.coach_eval.faults import faults

    return [env for env in measured_envs() if faults(env).first_tasks is None]


def make_coaches(specs: list[str] | None, coach_set: list[str]) -> dict:
    """The --coach specs (default: rule) built, the --coach-set settings going to the LLM coaches: the rule
    coach, noisy (`rule:noise=EPS`) or not, takes none."""
    from mappa_envs.coach import make_coach

    settings = key_values(coach_set, "--coach-set", "structured_output=true")
    return {spec: make_coach(spec, None if spec == "rule" or spec.startswith("rule:") else settings)
            for spec in (specs or ["rule"])}


def env_settings(pairs: list[str], envs: list[str] | None) -> dict[str, dict]:
    """`--env-set KEY=VALUE` pairs as extra keywords per named env, each env built with them now: a bad
    keyword fails before anything is played."""
    if not pairs:
        return {}
    if not envs:
        raise UsageError("--env-set needs --env: name the env(s) whose keywords it sets, e.g. "
                         "--env Chain-v0 --env-set view=own")
    from mappa_envs.coach_eval.blame import default_kwargs, make_env
    from mappa_envs.errors import EnvArgumentError
    from mappa_envs.yaml_data import YamlDataError, plain_yaml

    try:
        extra = {key: plain_yaml(value) for key, value in key_values(pairs, "--env-set", "view=own").items()}
    except YamlDataError as exc:
        raise UsageError(f"--env-set {pairs}: {exc}") from None
    for env in envs:
        try:
            make_env(env, **{**default_kwargs(env), **extra}).close()
        except EnvArgumentError as exc:
            raise UsageError(f"--env-set for {env}: {exc}") from None
    return dict.fromkeys(envs, extra)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", action="append", choices=measured_envs(),
                        help="env(s) to measure (default: all of them, unless --spec is given)")
    parser.add_argument("--spec", action="append", default=[], metavar="PATH",
                        help=SPEC_HELP)
    parser.add_argument("--env-set", action="append", default=[], metavar="KEY=VALUE", help=ENV_SET_HELP)
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
    from mappa_envs.coach_eval.blame import markdown, measure, spec_targets

    if args.num_tasks < 1 or args.batch < 1 or args.concurrency < 1 or args.tolerance < 0:
        raise UsageError("--num-tasks, --batch and --concurrency must be >= 1 and --tolerance >= 0")
    coaches = make_coaches(args.coach, args.coach_set)
    specs = spec_targets(args.spec, args.num_tasks)  # a bad spec fails here, before anything is played
    extra = env_settings(args.env_set, args.env)
    env_kwargs = {name: {"num_tasks": args.num_tasks} for name in counted_envs()}
    env_kwargs.update(specs)
    if args.dsbench_tasks is not None:
        from mappa_envs.dsbench import builtin_tasks

        tasks = builtin_tasks()
        if not 1 <= args.dsbench_tasks <= len(tasks):
            raise UsageError(f"--dsbench-tasks must be between 1 and {len(tasks)} (the built-in tasks), "
                             f"got {args.dsbench_tasks}")
        env_kwargs["DSBench-v0"] = {"tasks": tasks[:args.dsbench_tasks]}
    for env, keywords in extra.items():
        env_kwargs[env] = {**env_kwargs.get(env, {}), **keywords}
    targets = (args.env or ([] if specs else measured_envs())) + list(specs)
    rows = measure(targets, coaches, args.tolerance, args.batch, args.concurrency, env_kwargs,
                   say=lambda m: print(m, flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps([r.__dict__ for r in rows], indent=2))
    table = markdown(rows)
    (args.out / "blame.md").write_text(table)
    print(table)
    return 0
