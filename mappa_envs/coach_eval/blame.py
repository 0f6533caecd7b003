"""Blame precision: does the coach credit the right agent?

    mappa blame --coach rule --coach http-model@http://127.0.0.1:8000/v1 --out runs/blame

Scripted teams play every task once per fault, with one role deliberately faulty at a time and the
others doing their job: the faults each env registers (`faults.Faults`, e.g. mappa_envs/mathchat/faults.py:
a wrong answer from the Problem Solver, an answer the Code Executor mis-copies from its own correct
output, a Verifier that overrules a right answer), or for a team spec of one's own, `spec:PATH`
(`--spec`), each role in turn always wrong, through the spec's scripted team with skill={role: 0.0}.
Every action's coach request is recorded as the env builds it; the team's actions do not depend on the
scores, so scoring them afterwards is scoring them online. Each coach under test then scores every
request (`score_many`: concurrent `ascore` calls). Per fault, over episodes:

- lowest: the faulty role's mean score is strictly the lowest of the team;
- spared: no other role scores more than `tolerance` below its own mean on the same tasks with no
  fault (a coach may not punish an agent for a failure upstream of it);
- a role the env excused in an episode (`inputs_ready` False: its inputs were broken upstream, so
  the trainer does not learn from its actions) is left out of both: it is neither blamed nor punished;
- precision: both at once.

The fault-free row ("none") shows each role's baseline. A small LLM is a weak judge; the point of the
command is the measurement, which is as good for a strong coach as for a weak one.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mappa_envs.coach.batch import score_many
from mappa_envs.coach.rule import RuleCoach
from mappa_envs.coach.types import CoachRequest, CoachScore, excused
from mappa_envs.coach_eval.faults import faults
from mappa_envs.errors import InputError

SPEC = "spec:"  # a target "spec:PATH" is Team-v0 built from the team spec PATH (a YAML file or a shipped name)


# ---- what is measured: a registered env, or Team-v0 from a user's spec -------------------------

def spec_target(spec: str) -> str:
    """The target name of Team-v0 built from `spec`, checked now: the spec loads, and the scripted team it
    names takes per-role skill (how a fault is injected: skill={faulty role: 0.0})."""
    from mappa_envs.core.team import load_team
    from mappa_envs.errors import SpecError
    from mappa_envs.teams.env import scripted

    team = load_team(spec)
    if team.scripted is None:
        raise SpecError(f"{spec}: the spec names no scripted team, so no fault can be injected; add "
                        "scripted: 'module:callable(env, skill={role: rate})' to it")
    target = SPEC + str(spec)
    env = make_env(target, sandbox="local")
    try:
        scripted(env, skill={team.names[0]: 0.0})
    except (TypeError, ValueError) as e:
        raise SpecError(f"{spec}: its scripted team {team.scripted} cannot take skill={{role: rate}}, which is how "
                        f"a fault is injected ({' '.join(str(e).split())}); e.g. mappa_envs.mathchat.scripted:for_team "
                        "does") from None
    finally:
        env.close()
    return target


def spec_targets(specs: Sequence[str], num_tasks: int) -> dict[str, dict]:
    """Spec target -> its env kwargs (the scenario cut to its first `num_tasks` tasks where it can be),
    each spec checked (`spec_target`); a spec given twice is refused."""
    from mappa_envs.errors import SpecError

    out: dict[str, dict] = {}
    for spec in specs:
        target = spec_target(spec)
        if target in out:
            raise SpecError(f"--spec {spec} is given twice")
        out[target] = first_tasks_kwargs(target, {}, num_tasks)
    return out


def faults_of(target: str) -> dict[str, str | None]:
    """fault -> the role at fault: the faults a registered env registers (`faults.faults`); for a spec,
    "none" and, per role R, "R_wrong" (R's scripted actions are wrong every time, the others right)."""
    if target.startswith(SPEC):
        from mappa_envs.core.team import load_team

        return {"none": None, **{f"{r}_wrong": r for r in load_team(target[len(SPEC):]).names}}
    return dict(faults(target).roles)


def default_kwargs(target: str) -> dict:
    """The env keywords of the measured task set: what the env registers with its faults (none for a spec)."""
    return {} if target.startswith(SPEC) else dict(faults(target).kwargs)


def make_env(target: str, **kwargs):
    """The env a target names (`mappa_envs.make`; Team-v0 with spec= for a spec target)."""
    import mappa_envs

    if target.startswith(SPEC):
        return mappa_envs.make("Team-v0", spec=target[len(SPEC):], **kwargs)
    return mappa_envs.make(target, **kwargs)


def first_tasks_kwargs(target: str, kwargs: dict, n: int) -> dict:
    """`kwargs` with the spec target's scenario cut to its first `n` tasks, when its scenario takes
    `num_tasks` (every shipped one but DSBench's); otherwise `kwargs` as they are (all its tasks)."""
    from mappa_envs.core.team import load_team
    from mappa_envs.registration import accepted_kwargs
    from mappa_envs.teams.env import scenario_factory

    team = load_team(target[len(SPEC):])
    scenario = kwargs.get("scenario") or team.scenario
    # the same resolution make() uses: a registered scenario by name, or a checked Scenario class
    accepted = accepted_kwargs(scenario_factory(scenario, "scenario")) if isinstance(scenario, str) else set()
    if accepted is not None and "num_tasks" not in accepted:
        return kwargs
    return {**kwargs, "scenario_args": {**kwargs.get("scenario_args", {}), "num_tasks": n}}


# ---- faulty scripted teams --------------------------------------------------------------------

def faulty_team(env_id: str, env, fault: str):
    """The scripted team of `env` (a made env of `env_id`, a registered id or a spec target) with `fault` injected."""
    known = faults_of(env_id)
    if fault not in known:
        raise InputError(f"unknown fault {fault!r} for {env_id}; faults: {', '.join(known)}")
    if env_id.startswith(SPEC):  # the spec's own scripted team, the faulty role always wrong
        from mappa_envs.teams.env import scripted

        return scripted(env, **({"skill": {known[fault]: 0.0}} if known[fault] else {}))
    return faults(env_id).team(env, fault)


# ---- recording the requests -------------------------------------------------------------------

class RecordingCoach:
    """The rule coach for the env's own use, keeping every request it is asked to score."""

    def __init__(self):
        self.rule, self.requests, self._lock = RuleCoach(), [], threading.Lock()

    def score(self, request: CoachRequest) -> CoachScore:
        with self._lock:
            self.requests.append(request)
        return self.rule.score(request)

    async def ascore(self, request: CoachRequest) -> CoachScore:
        return self.score(request)


def record(env_id: str, fault: str, env_kwargs: dict, batch: int = 4, sandbox: Any = None) -> list[CoachRequest]:
    """Play every task of the env once with the faulty team; return the coach requests."""
    coach = RecordingCoach()
    play_team(env_id, fault, env_kwargs, coach, batch, sandbox)
    return coach.requests


def play_team(env_id: str, fault: str, env_kwargs: dict, coach: Any, batch: int = 4, sandbox: Any = None,
              wrap: Callable[[Any, list], Any] | None = None) -> tuple[list, list]:
    """Every task of the env once with the faulty scripted team (`wrap(team, tasks)` may wrap it), scored
    by `coach`; returns (the runner's results, the tasks), raising if any scripted episode failed."""
    from mappa_envs.wrappers import VectorRunner

    envs = [make_env(env_id, coach=coach, sandbox=sandbox, **env_kwargs) for _ in range(batch)]
    try:
        tasks = envs[0].unwrapped.tasks
        team = faulty_team(env_id, envs[0], fault)
        if wrap is not None:
            team = wrap(team, tasks)
        results = VectorRunner(envs, team).play([(i, {"task_index": i}) for i in range(len(tasks))])
    finally:
        for env in envs:
            env.close()
    failed = [r.error for r in results if r.error]
    if failed:
        raise RuntimeError(f"{env_id}/{fault}: {len(failed)} scripted episodes failed, e.g. {failed[0]}")
    return results, tasks


def _roles(env_id: str, kwargs: dict) -> list[str]:
    env = make_env(env_id, **kwargs)
    try:
        return list(env.possible_agents)
    finally:
        env.close()

# ---- the measurement --------------------------------------------------------------------------

@dataclass
class FaultRow:
    env_id: str
    fault: str
    faulty_role: str | None
    coach: str
    episodes: int
    lowest: float | None
    spared: float | None
    precision: float | None
    mean_by_role: dict[str, float]  # over the actions the trainer learns from (excused ones left out)
    failed_scores: int
    excused_episodes: int = 0  # episodes in which some role was excused (its inputs broken upstream)


def role_scores(requests: Sequence[CoachRequest], scores: Sequence[CoachScore]) -> dict[str, dict[str, float]]:
    """task -> role -> mean score of the role's scored actions in that task's episode (excused ones left out)."""
    sums: dict[str, dict[str, list[float]]] = {}
    for request, score in zip(requests, scores):
        if score.ok and score.score is not None and not excused(request.checks):
            sums.setdefault(request.task, {}).setdefault(request.role, []).append(float(score.score))
    return {task: {role: sum(v) / len(v) for role, v in roles.items()} for task, roles in sums.items()}


def excused_roles(requests: Sequence[CoachRequest]) -> dict[str, set[str]]:
    """task -> the roles every one of whose actions in that episode was excused."""
    judged, seen = set(), set()
    for r in requests:
        seen.add((r.task, r.role))
        if not excused(r.checks):
            judged.add((r.task, r.role))
    out: dict[str, set[str]] = {}
    for task, role in seen - judged:
        out.setdefault(task, set()).add(role)
    return out


def blame_row(env_id: str, fault: str, coach_name: str, episodes: dict[str, dict[str, float]],
              baseline: dict[str, dict[str, float]], roles: Sequence[str], failed: int, tolerance: float,
              excused_in: dict[str, set[str]] | None = None) -> FaultRow:
    """The three fractions for one fault, over the episodes where every role that was not excused got a
    score. An excused role (its inputs broken upstream) is not trained on, so it is neither blamed nor punished."""
    faulty = faults_of(env_id)[fault]
    excused_in = excused_in or {}
    expected = {t: set(roles) - excused_in.get(t, set()) for t in episodes}
    complete = {t: s for t, s in episodes.items() if set(s) == expected[t]}
    lowest = spared = both = 0
    for task, score in complete.items():
        others = [r for r in roles if r != faulty and r in score]
        is_lowest = faulty in score and all(score[faulty] < score[r] for r in others)
        base = baseline.get(task, {})
        is_spared = all(score[r] >= base.get(r, score[r]) - tolerance for r in others)
        lowest, spared, both = lowest + is_lowest, spared + is_spared, both + (is_lowest and is_spared)
    n = len(complete)
    mean = {r: sum(s[r] for s in complete.values() if r in s) / k for r in roles
            if (k := sum(r in s for s in complete.values()))}

    def frac(k: int) -> float | None:
        return k / n if n and faulty is not None else None

    n_excused = sum(bool(excused_in.get(t)) for t in complete)
    return FaultRow(env_id, fault, faulty, coach_name, n, frac(lowest), frac(spared) if n else None, frac(both),
                    mean, failed, n_excused)


def measure(env_ids: Sequence[str], coaches: dict[str, Any], tolerance: float = 1.0, batch: int = 4,
            concurrency: int = 8, env_kwargs: dict[str, dict] | None = None, sandbox: Any = None,
            say=print) -> list[FaultRow]:
    """Record every (env, fault) once, score the requests with every coach, return the table's rows."""
    rows = []
    for env_id in env_ids:
        kwargs = {**default_kwargs(env_id), **(env_kwargs or {}).get(env_id, {})}
        roles = _roles(env_id, kwargs)
        recorded = {}
        for fault in faults_of(env_id):
            say(f"{env_id}: playing the scripted team with fault {fault!r} ...")
            recorded[fault] = record(env_id, fault, kwargs, batch, sandbox)
        for name, coach in coaches.items():
            say(f"{env_id}: scoring {sum(map(len, recorded.values()))} actions with coach {name!r} ...")
            scored = {f: score_many(coach, reqs, concurrency) for f, reqs in recorded.items()}
            per_task = {f: role_scores(recorded[f], s) for f, s in scored.items()}
            for fault in faults_of(env_id):
                failed = sum(not s.ok for s in scored[fault])
                rows.append(blame_row(env_id, fault, name, per_task[fault], per_task["none"], roles, failed, tolerance,
                                      excused_roles(recorded[fault])))
    return rows


def markdown(rows: Sequence[FaultRow]) -> str:
    def pct(x: float | None) -> str:
        return "–" if x is None else f"{100 * x:.0f}%"

    lines = ["| env | fault | faulty role | coach | episodes | faulty lowest | others spared | precision "
             "| mean score by role | episodes with a role excused |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        means = ", ".join(f"{role} {v:.1f}" for role, v in r.mean_by_role.items())
        failed = f" ({r.failed_scores} unscored)" if r.failed_scores else ""
        lines.append(f"| {r.env_id} | {r.fault} | {r.faulty_role or '–'} | {r.coach} | {r.episodes}{failed} | "
                     f"{pct(r.lowest)} | {pct(r.spared)} | {pct(r.precision)} | {means} | {r.excused_episodes} |")
    return "\n".join(lines) + "\n"
