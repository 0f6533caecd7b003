"""Play a team on eval sets, k seeded samples per problem, and record every episode.

One JSON line per finished episode goes to `transcripts.jsonl` (every action with the chat its agent
answered, its tool output and the coach's verdict, then the outcome). A re-run in the same
directory reads that file first and plays only the episodes it lacks, so an interrupted eval picks
up where it stopped, provided it is the same run: `run.json` records what the episodes depend on
(team, coach, sampling), and a re-run with other settings is refused rather than mixed in. Episodes
run through `VectorRunner`: every env waiting for an action is answered by one `team.respond` call,
then the envs step (tool calls, coach) in a thread pool.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mappa_envs.errors import InputError, MappaError
from mappa_envs.policy import Team, TextPolicy
from mappa_envs.seeding import sequence_seed
from mappa_envs.wrappers import EpisodeResult, VectorRunner
from mappa_envs.wrappers.transcript import with_turns
from mappa_train.evaluation.hygiene import find_overlap

TRANSCRIPTS = "transcripts.jsonl"
RUN_FILE = "run.json"


class EvalSpecError(MappaError, ValueError):
    """An eval set, team spec or output folder that cannot be used as given; the message says what would work."""


class Reporter(Protocol):
    """What `run_eval` reports as it goes (`mappa eval` draws its progress bars from it)."""

    # `done` of `total` were already played; `roles`: how many agents act in each episode, at least once each
    def set_started(self, name: str, done: int, total: int, roles: int = 1) -> None: ...
    def episode(self, record: dict) -> None: ...
    def set_finished(self, name: str) -> None: ...


@dataclass
class EvalSet:
    """A named set of problems: an env id and the env kwargs that choose its task source.

    `train_kwargs` (optional) are the env kwargs of the training task source to check overlap
    against (the same env id), and `train_source` names that source in reports.
    """

    name: str
    env_id: str
    env_kwargs: dict = field(default_factory=dict)
    train_source: str | None = None
    train_kwargs: dict | None = None
    max_problems: int | None = None


@dataclass(frozen=True)
class Job:
    set_name: str
    task_index: int
    task_id: str
    sample: int
    seed: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.set_name, self.task_id, self.sample)


def episode_seed(base_seed: int, set_name: str, task_id: str, sample: int) -> int:
    """A seed that depends on the problem and sample, not on the order episodes run in."""
    return sequence_seed(base_seed, f"{set_name}/{task_id}", sample)


def load_transcripts(path: Path) -> list[dict]:
    """Finished episodes in `path`. A torn last line (a run killed mid-write) is cut off the file."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        path.write_text(text, encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def tasks_of(env) -> list:
    """The task list of a PipelineEnv-based env (wrappers are looked through)."""
    return list(env.unwrapped.tasks)


def plan_jobs(eval_set: EvalSet, tasks: list, k: int, base_seed: int) -> list[Job]:
    if not tasks:
        raise EvalSpecError(f"eval set {eval_set.name!r} has no problems ({eval_set.env_id}, {eval_set.env_kwargs}); "
                            "an empty task file is an error, not an evaluation of nothing")
    tasks = tasks[: eval_set.max_problems] if eval_set.max_problems else tasks
    return [
        Job(eval_set.name, i, t.id, s, episode_seed(base_seed, eval_set.name, t.id, s))
        for i, t in enumerate(tasks)
        for s in range(k)
    ]


def play_jobs(team: TextPolicy, make_env: Callable[[], Any], jobs: list[Job], batch_size: int = 8,
              on_episode: Callable[[dict], None] | None = None) -> list[dict]:
    """Play `jobs` with up to `batch_size` envs at once; returns the episode records in finish order."""
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    if not jobs:
        return []
    records: list[dict] = []

    def finish(result: EpisodeResult, env) -> None:
        job = jobs[result.episode]
        if result.error is None and result.task_id != job.task_id:
            raise RuntimeError(f"task_index {job.task_index} gave task {result.task_id!r}, expected {job.task_id!r}: "
                               "the task source changed")
        record = env.unwrapped.transcript()  # task, every action with tool output and coach verdict, outcome
        record["actions"] = with_turns(record["actions"], result.turns)  # and the chat each agent answered
        record = {"set": job.set_name, "task_id": job.task_id, "task_index": job.task_index, "sample": job.sample,
                  "seed": job.seed, **record, "truncated": result.truncated}
        if result.error:  # the episode raised: recorded (as not correct) with why, never silently dropped
            record["error"] = result.error
        records.append(record)
        if on_episode:
            on_episode(record)

    envs = [make_env() for _ in range(min(batch_size, len(jobs)))]
    try:
        VectorRunner(envs, team).play([(j.seed, {"task_index": j.task_index}) for j in jobs], on_episode=finish)
    finally:
        for env in envs:
            env.close()
    return records


def claim_run(out: Path, identity: dict) -> bool:
    """Check that `identity` is the one of the episodes already in `out` (out/run.json); True when
    nothing is played there yet, so the caller records it (`_Sink`) with the first episode."""
    path, played = out / RUN_FILE, out / TRANSCRIPTS
    new = json.loads(json.dumps(identity, default=str))
    if not path.is_file() or not (played.is_file() and played.stat().st_size):  # nothing played yet: nothing to mix
        return True
    old = json.loads(path.read_text(encoding="utf-8"))
    changed = [f"{key}: {old.get(key)!r} then, {new.get(key)!r} now"
               for key in sorted({*old, *new}) if old.get(key) != new.get(key)]
    if changed:
        raise EvalSpecError(f"{out} holds a run with other settings ({'; '.join(changed)}); resuming would mix them: "
                            f"pass another --name or --out, or delete {out}")
    return False


class _Sink:
    """out/transcripts.jsonl, appended to as episodes end. The folder, run.json (`identity`, when it is
    new) and the file are made with the first episode: a run that fails before one ends leaves nothing."""

    def __init__(self, out: Path, identity: dict | None):
        self.out, self.identity, self.file = out, identity, None

    def write(self, record: dict) -> None:
        if self.file is None:
            self.out.mkdir(parents=True, exist_ok=True)
            if self.identity is not None:
                (self.out / RUN_FILE).write_text(json.dumps(self.identity, indent=1, default=str), encoding="utf-8")
            self.file = (self.out / TRANSCRIPTS).open("a", encoding="utf-8")
        self.file.write(json.dumps(record, default=str, ensure_ascii=False) + "\n")
        self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def _check_roles(policy: TextPolicy, env) -> None:
    """A per-role team must name exactly the env's roles."""
    if not (isinstance(policy, Team) and isinstance(policy.policies, Mapping)):
        return
    roles, named = set(env.possible_agents), set(policy.policies)
    if roles != named:
        raise EvalSpecError(f"the team names the roles {sorted(named)}, but {env.unwrapped.env_id} has "
                            f"{sorted(roles)}: give one ROLE=SPEC per role")


TeamSource = TextPolicy | Callable[[Any], TextPolicy]  # a team, or a builder given an env of the set


def run_eval(team: TeamSource, eval_sets: list[EvalSet], out_dir: str | Path, k: int = 1, seed: int = 0,
             batch_size: int = 8, env_kwargs: dict | None = None, reporter: Reporter | None = None,
             identity: dict | None = None) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """Play every (problem, sample) of every set not already in `out_dir/transcripts.jsonl`.

    `team` is a TextPolicy, or a callable that builds one from an env of the set (a scripted team
    that knows the set's tasks). `env_kwargs` (coach, sandbox, ...) go to every env on top of each
    set's own kwargs; a sandbox given by name (default "local") is built once for all of them and
    closed at the end. `identity` (what the episodes depend on: team, coach, sampling) is kept in
    `out_dir/run.json`; resuming a folder whose run.json differs raises `EvalSpecError`. Returns
    every set's finished episode records (old and new, in problem then sample order) and the
    train/eval overlap of the sets that name a training source.
    """
    if k < 1:
        raise InputError(f"k (samples per problem) must be >= 1, got {k}")
    kwargs = dict(env_kwargs or {})
    shared = None
    if isinstance(kwargs.get("sandbox"), (str, type(None))):
        # One sandbox for every env, with a session warming for each batch slot; otherwise each env
        # starts its own and every reset waits for a cold interpreter.
        from mappa_envs.sandbox import make_sandbox

        shared = kwargs["sandbox"] = make_sandbox(kwargs.get("sandbox") or "local", pool_size=batch_size)
    try:
        return _run_sets(team, eval_sets, Path(out_dir), k, seed, batch_size, kwargs, reporter, identity)
    finally:
        if shared is not None:
            shared.close()


def _run_sets(team: TeamSource, eval_sets: list[EvalSet], out: Path, k: int, seed: int, batch_size: int,
              kwargs: dict, reporter: Reporter | None, identity: dict | None):
    """`run_eval` once the envs' arguments are settled: claim `out`, then play each set, appending
    every finished episode to the transcripts as it ends."""
    new_run = identity is not None and claim_run(out, identity)
    path = out / TRANSCRIPTS
    done = {(r["set"], r["task_id"], r["sample"]): r for r in load_transcripts(path)}
    records: dict[str, list[dict]] = {}
    overlaps: dict[str, dict] = {}
    with closing(_Sink(out, identity if new_run else None)) as sink:

        def finished(record: dict) -> None:
            sink.write(record)
            if reporter:
                reporter.episode(record)

        for es in eval_sets:
            def make_env(es=es, task_kwargs=es.env_kwargs):
                import mappa_envs

                return mappa_envs.make(es.env_id, **{**task_kwargs, **kwargs})

            tasks, policy, roles = _probe(team, make_env)
            jobs = plan_jobs(es, tasks, k, seed)
            if es.train_kwargs is not None:
                overlaps[es.name] = _train_overlap(es, tasks, make_env(task_kwargs=es.train_kwargs))
            _check_seeds(jobs, done, path)
            todo = [j for j in jobs if j.key not in done]
            if reporter:
                reporter.set_started(es.name, len(jobs) - len(todo), len(jobs), roles=roles)
            try:
                new = play_jobs(policy, make_env, todo, batch_size, on_episode=finished) if todo else []
            finally:
                if reporter:
                    reporter.set_finished(es.name)
            fresh = {(r["set"], r["task_id"], r["sample"]): r for r in new}
            records[es.name] = [done.get(j.key) or fresh[j.key] for j in jobs]
    return records, overlaps


def _probe(team: TeamSource, make_env: Callable[[], Any]) -> tuple[list, TextPolicy, int]:
    """The set's tasks, the team that plays them and its number of roles, from one env that is closed again."""
    probe = make_env()
    try:
        tasks = tasks_of(probe)
        policy = team if isinstance(team, TextPolicy) else team(probe)
        _check_roles(policy, probe)
        return tasks, policy, len(probe.possible_agents)
    finally:
        probe.close()


def _train_overlap(es: EvalSet, tasks: list, train_env) -> dict:
    """How many of the set's chosen problems also occur in its training source (closes `train_env`)."""
    try:
        train_texts = [t.prompt for t in tasks_of(train_env)]
    finally:
        train_env.close()
    chosen = tasks[: es.max_problems] if es.max_problems else tasks
    return find_overlap(es.name, [(t.id, t.prompt) for t in chosen], es.train_source or "?", train_texts).to_dict()


def _check_seeds(jobs: list[Job], done: dict, path: Path) -> None:
    """Episodes already in `path` must have been played with the seeds these jobs would use."""
    for job in jobs:
        old = done.get(job.key)
        if old is not None and old["seed"] != job.seed:
            raise EvalSpecError(
                f"{path} was written with another seed ({old['seed']} != {job.seed} for {job.key}); "
                "use a new output directory or the run's original --seed"
            )


def same_answer(a: object, b: object) -> bool:
    """Are two samples' answers one vote (maj@k)? `answers_match` both ways: it is not symmetric,
    since a number reference refuses an expression but an expression reference takes a number, and
    "31" must not pool with "4 \\cdot 7 + 3" (which would make the expression's votes count as right)."""
    from mappa_envs.mathchat import answers_match

    return answers_match(a, b) and answers_match(b, a)


def evaluate_team(team: TeamSource, eval_sets: list[EvalSet], out_dir: str | Path, run_name: str, team_spec: str = "",
                  k: int = 1, seed: int = 0, batch_size: int = 8, env_kwargs: dict | None = None,
                  config: dict | None = None, plots: bool = True, reporter: Reporter | None = None,
                  identity: dict | None = None) -> dict:
    """`run_eval`, then write `results.json` and the plots into `out_dir`; returns the results."""
    from mappa_train.evaluation.report import build_results, write_results

    records, overlaps = run_eval(team, eval_sets, out_dir, k, seed, batch_size, env_kwargs, reporter, identity)
    results = build_results(run_name, team_spec, records, k, seed, config or {}, same=same_answer, overlaps=overlaps)
    write_results(out_dir, results)
    if plots:
        from mappa_train.evaluation.plots import write_plots

        write_plots(results, out_dir)
    return results
