"""`mappa eval`: evaluate agent teams on eval sets; the leaderboard; compare two runs.

    mappa eval --team scripted --sets synthetic:16,amc --k 4 --data-dir DATA
    mappa eval --team run:runs/mathchat --name trained --sets aime2025,amc --k 8 --data-dir DATA
    mappa eval --team scripted --coach qwen@http://127.0.0.1:8000/v1 --coach-set structured_output=true
    mappa eval --compare runs/eval/base runs/eval/trained
    mappa eval --leaderboard runs/eval
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from dataclasses import replace
from pathlib import Path

from mappa_cli.args import key_values, non_negative_float, positive_int, run_name
from mappa_cli.errors import UsageError
from mappa_envs.sandbox.types import SANDBOX_BACKENDS

TEAM_HELP = (
    "the team to evaluate (repeat for several): a model for every role ('hf:MODEL', 'vllm:MODEL', MODEL being what "
    "model.path takes: a folder, ORG/NAME, a .gguf, smollm2-135m, tiny; 'openai:MODEL@BASE_URL'), a finished "
    "`mappa train` run ('run:DIR'), 'scripted:SKILL' (the env's built-in noisy team, a baseline: each role errs at "
    "rate 1 - SKILL), 'scripted' (its oracle, a reference that reads the gold answer, no baseline), 'module:factory' "
    "(factory(env) -> TextPolicy), or one per role as 'ROLE=SPEC;ROLE=SPEC;...'"
)
COACH_HELP = ("'rule' (offline), an LLM coach preset (gemini-2.5-flash, gemini-2.5-pro, openai, vllm-local), "
              "PRESET:MODEL, PRESET:PORT (e.g. vllm-local:8001), or MODEL@BASE_URL (see docs/coach.md)")


def configure(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--team", action="append", help=TEAM_HELP)
    mode.add_argument("--compare", nargs=2, metavar=("RUN_A", "RUN_B"),
                      help="per-problem deltas of RUN_B over RUN_A with a paired bootstrap CI")
    mode.add_argument("--leaderboard", nargs="+", metavar="RUNS",
                      help="print the Markdown table of these runs / folders of runs")
    mode.add_argument("--list-sets", action="store_true",
                      help="list the named eval sets, their env, and whether their data is found (--data-dir)")
    parser.add_argument("--name", action="append", type=run_name,
                        help="run name per --team, in order (default: derived from the spec)")
    parser.add_argument("--sets", default="synthetic",
                        help="comma-separated eval sets: aime2025, amc, synthetic[:N], AIME/AMC-format .json/.jsonl "
                        "paths, dsbench (built-in offline tasks), dsbench:DIR (a DSBench data folder's eval split)")
    parser.add_argument("--spec", metavar="PATH",
                        help="play the sets with the team a spec describes (Team-v0: a YAML file or a shipped spec "
                        "name, as make('Team-v0', spec=...) takes); the sets' tasks go to the spec's scenario")
    parser.add_argument("--k", type=positive_int, default=1, help="samples per problem (avg@k, pass@k, maj@k)")
    parser.add_argument("--seed", type=int, default=0, help="base seed; each (problem, sample) derives its own")
    parser.add_argument("--max-problems", type=positive_int, help="evaluate only the first N problems of each set")
    parser.add_argument("--batch-size", type=positive_int, default=8,
                        help="episodes played at once (one batched generate per round)")
    parser.add_argument("--out", type=Path, default=Path("runs/eval"),
                        help="folder of runs: each team writes OUT/NAME/; "
                        "an existing OUT/NAME of the same settings resumes")
    parser.add_argument("--data-dir", help="folder with aime_2025.json, amc_eval_32.json, ... "
                        "(default: $MAPPA_DATA_DIR, else data/bench)")
    parser.add_argument("--train-source", help="training source to check overlap against: a task file, 'synthetic', "
                        "'builtin', a DSBench folder, or 'none' (default: per set, see docs/evaluation.md)")
    parser.add_argument("--temperature", type=non_negative_float, default=0.6,
                        help="model teams: sampling temperature (0 = greedy)")
    parser.add_argument("--top-p", type=float, default=1.0, help="model teams: nucleus sampling, in (0, 1]")
    parser.add_argument("--max-new-tokens", type=positive_int, default=1024, help="model teams: most tokens per action")
    parser.add_argument("--sandbox", default="local", choices=SANDBOX_BACKENDS)
    parser.add_argument("--preimport", help="comma-separated modules each sandbox interpreter imports before the "
                        "first cell ('' for none; default: the sandbox's data-science stack)")
    parser.add_argument("--coach", default="rule", help=COACH_HELP)
    parser.add_argument("--coach-set", action="append", default=[], metavar="KEY=VALUE",
                        help="an LLMCoachConfig setting (repeatable), e.g. structured_output=true max_tokens=256 "
                        "base_url=http://127.0.0.1:8001/v1")
    parser.add_argument("--coach-cache", help="SQLite verdict cache of an LLM coach "
                        "(default: OUT/coach_cache.sqlite; 'none': off)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-progress", action="store_true", help="plain progress lines instead of a progress bar")
    parser.add_argument("--n-boot", type=positive_int, default=10_000, help="--compare: bootstrap resamples")
    parser.add_argument("--level", type=float, default=0.95, help="--compare: confidence level, in (0, 1)")


def leaderboard_main(argv: list[str] | None = None) -> int:
    """benchmarks/leaderboard.py: print the leaderboard of RUNS and, with --out, write it to a Markdown file."""
    from mappa_train.evaluation.leaderboard import write

    parser = argparse.ArgumentParser(description="A Markdown leaderboard across eval runs: one row per (run, eval "
                                                 "set), best first within a set.")
    parser.add_argument("runs", nargs="+", help="run directories, results.json files, or folders holding runs")
    parser.add_argument("--out", help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    return write(args.runs, args.out)


def run(args: argparse.Namespace) -> int:
    if args.compare:
        return _compare(args)
    if args.leaderboard:
        from mappa_train.evaluation.leaderboard import write

        return write(args.leaderboard, None)
    if args.list_sets:
        return _list_sets(args)
    return _evaluate(args)


def _list_sets(args: argparse.Namespace) -> int:
    from mappa_train.evaluation.evalsets import describe_sets

    rows = describe_sets(args.data_dir)
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[3])
    print("\n--sets takes a comma-separated list of these (e.g. --sets synthetic:16,amc); see docs/evaluation.md")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from mappa_train.evaluation.compare import compare, format_comparison
    from mappa_train.evaluation.report import load_results

    if not 0 < args.level < 1:
        raise UsageError(f"--level must lie in (0, 1), got {args.level:g}")
    a, b = (load_results(p) for p in args.compare)
    print(format_comparison(a, b, compare(a, b, n_boot=args.n_boot, level=args.level, seed=args.seed)), end="")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from mappa_envs.coach import make_coach
    from mappa_envs.sandbox import make_sandbox
    from mappa_train.evaluation.evalsets import resolve
    from mappa_train.evaluation.hygiene import OverlapWarning
    from mappa_train.evaluation.leaderboard import write

    if len(args.name or []) > len(args.team):
        raise UsageError(f"--name given {len(args.name)} times for {len(args.team)} --team(s)")
    if not 0 < args.top_p <= 1:
        raise UsageError(f"--top-p must lie in (0, 1], got {args.top_p:g}")
    sets = []
    for name in filter(None, (s.strip() for s in args.sets.split(","))):
        es = resolve(name, args.data_dir, args.train_source)
        es.max_problems = args.max_problems
        sets.append(es)
    if not sets:
        raise UsageError("--sets is empty; name at least one eval set")
    if args.spec:
        from mappa_envs.core.team import load_team

        load_team(args.spec)  # the spec itself first, once: its errors name it
        sets = [_on_spec(es, args.spec) for es in sets]
    coach_settings = key_values(args.coach_set, "--coach-set", "max_tokens=256")
    cache = None if args.coach == "rule" or args.coach_cache == "none" else (
        args.coach_cache or args.out / "coach_cache.sqlite")
    coach = make_coach(args.coach, coach_settings, cache)  # a bad coach spec fails before anything is built
    options = {} if args.preimport is None else {"preimport": tuple(filter(None, args.preimport.split(",")))}
    sandbox = make_sandbox(args.sandbox, pool_size=args.batch_size, **options)  # shared by every env
    progress = EvalProgress(bar=False if args.no_progress else None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OverlapWarning)  # reported once per team below, without a traceback line
            runs = _run_teams(args, sets, {"sandbox": sandbox, "coach": coach}, coach_settings, progress)
    finally:
        sandbox.close()
    print(f"results: {', '.join(str(r / 'results.json') for r in runs)}; leaderboard of {args.out}:", file=sys.stderr)
    status = write([str(args.out)], str(args.out / "leaderboard.md"))
    if progress.coach_calls and progress.coach_failures == progress.coach_calls:
        print(f"mappa eval: every coach call failed (last error: {progress.last_error}); the results carry no coach "
              "scores. Fix --coach, then re-run under another --name (finished episodes are reused otherwise)",
              file=sys.stderr)
        return 1
    return status


def _on_spec(es, spec: str):
    """The set `es` played by the spec's team, once one env of it builds: a bad spec, or a set whose tasks the
    spec's scenario does not take, is a one-line error before anything is played."""
    import mappa_envs
    from mappa_envs.errors import MappaError
    from mappa_train.evaluation.evalsets import on_spec

    played = on_spec(es, spec)
    try:
        mappa_envs.make(played.env_id, **played.env_kwargs).close()
    except MappaError as e:
        raise UsageError(f"--spec {spec} cannot play {es.name} ({es.env_id} tasks): {e}; choose sets whose tasks "
                         "its scenario takes") from e
    return played


def _run_teams(args: argparse.Namespace, sets: list, env_kwargs: dict, coach_settings: dict,
               progress: EvalProgress) -> list[Path]:
    from mappa_envs.policy import checked
    from mappa_train.evaluation.activity import Activity, watch
    from mappa_train.evaluation.leaderboard import is_reference
    from mappa_train.evaluation.runner import evaluate_team
    from mappa_train.evaluation.teams import make_team, team_name, training_env
    from mappa_train.generation import SamplingParams

    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p)
    names = args.name or []
    config = {k: v for k, v in vars(args).items() if k not in ("team", "name", "compare", "leaderboard")}
    runs: list[Path] = []
    for i, spec in enumerate(args.team):
        run_name = names[i] if i < len(names) else team_name(spec)
        out = args.out / run_name
        _check_run_folder(spec)
        team = make_team(spec, args.seed, sampling)  # a bad spec fails here, before its header
        progress.activity = Activity()  # requests and tokens of this team, for lines between episodes
        team = watch(checked(team, f"--team {spec}"), progress.activity)  # a policy's own errors: one line
        # the scripted oracle reads the gold answer: say so where its 1.000 shows, and name the real baseline
        note = " (a reference that reads the gold answer, no baseline: see scripted:SKILL)" * is_reference(spec)
        print(f"== {run_name}: {spec}{note} -> {out}", file=sys.stderr)
        trained = training_env(spec)
        team_sets = sets
        if trained and args.train_source is None:  # check overlap against what this team was trained on
            source, env_id, kwargs = trained
            team_sets = [replace(es, train_source=source, train_kwargs=kwargs) if es.env_id == env_id else es
                         for es in sets]
        identity = {"team": spec, "coach": args.coach, "coach_settings": coach_settings, "seed": args.seed,
                    "temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens,
                    **({"spec": args.spec} if args.spec else {})}
        results = evaluate_team(team, eval_sets=team_sets, out_dir=out,
                                run_name=run_name, team_spec=spec, k=args.k, seed=args.seed,
                                batch_size=args.batch_size, env_kwargs=env_kwargs, config={**config, "out": str(out)},
                                plots=not args.no_plots, reporter=progress, identity=identity)
        runs.append(out)
        for set_name, s in results["sets"].items():
            o = s.get("overlap")
            if o and o["n_overlap"]:
                print(f"warning: {o['n_overlap']}/{o['n_eval']} problems of {set_name} also appear in the training "
                      f"source {o['train_source']} ({', '.join(o['ids'][:5])}); see results.json 'overlap'",
                      file=sys.stderr)
    return runs


def _check_run_folder(spec: str) -> None:
    """A `run:DIR` team's JSON files, shaped as the team and its training env are read from them: a damaged
    or foreign folder is one line naming the file, not a KeyError deep in loading."""
    if not spec.startswith("run:"):
        return
    folder = Path(spec[4:].partition("@")[0])
    manifest = _json_object(spec, folder / "final" / "lora.json")
    roles = (manifest or {}).get("roles")
    if manifest is not None and not (isinstance(manifest.get("base"), str) and isinstance(roles, dict)
                                     and all(isinstance(a, str) for a in roles.values())):
        raise UsageError(f"team spec {spec!r}: {folder / 'final' / 'lora.json'} is not a LoRA run's manifest "
                         "(a 'base' path and a 'roles' map of role -> adapter); was it written by `mappa train`?")
    config = _json_object(spec, folder / "config.json")
    env = (config or {}).get("env")
    if config is not None and not (isinstance(env, dict) and isinstance(env.get("id"), str)
                                   and isinstance(env.get("kwargs", {}), dict)):
        raise UsageError(f"team spec {spec!r}: {folder / 'config.json'} is not a `mappa train` config (no env.id, "
                         "or env.kwargs not a mapping); run:DIR must name a `mappa train` out_dir")


def _json_object(spec: str, path: Path) -> dict | None:
    """The JSON object in `path`; None where there is no such file (the team's own checks say what that means)."""
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"team spec {spec!r}: {path} is not valid JSON ({e}); is the run folder damaged?") from None
    if not isinstance(value, dict):
        raise UsageError(f"team spec {spec!r}: {path} holds a JSON {type(value).__name__}, not an object; "
                         "is the run folder damaged?")
    return value


class EvalProgress:
    """A `Reporter` for `run_eval`: one progress bar (or plain lines) per eval set, coach failures summed."""

    def __init__(self, bar: bool | None):
        self.bar = bar
        self.coach_calls = self.coach_failures = 0
        self.last_error: str | None = None
        self.activity = None  # the team's Activity (mappa_train.evaluation.activity), set per team
        self._set = None

    def set_started(self, name: str, done: int, total: int, roles: int = 1) -> None:
        from mappa_cli.progress import Progress

        if done:
            print(f"{name}: {done}/{total} episodes already done (resuming)", file=sys.stderr)
        activity, start = self.activity, self.activity.requests if self.activity is not None else 0

        def answered() -> int:  # this set's actions, for an ETA that moves before any episode ends
            return activity.requests - start

        self._set = None if done >= total else Progress(
            total - done, name, bar=self.bar, activity=activity.line if activity else None,
            actions=answered if activity else None, actions_per_episode=roles)

    def episode(self, record: dict) -> None:
        self._set.episode(record)

    def set_finished(self, name: str) -> None:
        if self._set is None:
            return
        self._set.close()
        self.coach_calls += self._set.coach_calls
        self.coach_failures += self._set.coach_failures
        self.last_error = self._set.last_error or self.last_error
        self._set = None
