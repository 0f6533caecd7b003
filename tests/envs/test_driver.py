"""The episode driver on real MathChat-v0 envs (local sandbox, rule coach): batching without a global
barrier, schedule-independent results, failures counted and skipped, the early-stop rule."""
from __future__ import annotations

import random
import threading
import time

import pytest

import mappa_envs
from mappa_envs.coach.rule import RuleCoach
from mappa_envs.driver import Driver, action_seed
from mappa_envs.mathchat import synthetic_tasks
from mappa_envs.mathchat.answers import extract_answer
from mappa_envs.sandbox import make_sandbox

TASKS = synthetic_tasks(12, seed=3)


class SeededTeam:
    """A text policy whose every answer depends only on the request's seed and conversation:
    the solver is right when its seed says so, the executor prints the solver's answer."""

    def __init__(self):
        self.calls: list[list[str]] = []
        self.seeds: list[int | None] = []

    def respond(self, conversations, roles, seeds):
        self.calls.append(list(roles))
        self.seeds += seeds
        return [self._one(c, r, s) for c, r, s in zip(conversations, roles, seeds)]

    def _one(self, conversation, role, seed):
        rng = random.Random(seed)
        user = conversation[1]["content"]
        if role == "problem_solver":
            task = next(t for t in TASKS if t.prompt in user)
            guess = task.answer if rng.random() < 0.5 else str(rng.randint(1000, 9999))
            return f"I think it is \\boxed{{{guess}}}"
        if role == "code_executor":
            if conversation[-1]["content"].startswith("Output of your code"):
                return "The code printed it. \\boxed{" + (extract_answer(user) or "0") + "}"
            return f"```python\nprint({extract_answer(user) or 0!r})\n```"
        return f"Agreed: \\boxed{{{extract_answer(user) or 0}}}"


class LatencyCoach:
    """The rule coach after a sleep chosen per action by `latency(request)`."""

    def __init__(self, latency):
        self.rule, self.latency = RuleCoach(), latency

    def score(self, request):
        time.sleep(self.latency(request))
        return self.rule.score(request)

    async def ascore(self, request):
        return self.score(request)


@pytest.fixture(scope="module")
def sandbox():
    sb = make_sandbox("local", pool_size=4, preimport=(), timeout_s=20)
    yield sb
    sb.close()


def make_envs(sandbox, n, coach=None):
    return [mappa_envs.make("MathChat-v0", tasks=TASKS, sandbox=sandbox, coach=coach or RuleCoach())
            for _ in range(n)]


def play(envs, policy, jobs, **kwargs):
    driver = Driver(envs, policy, **kwargs)
    try:
        return sorted(driver.play(jobs), key=lambda r: r.episode), driver
    finally:
        for env in envs:
            env.close()


def summary(results):
    return [(r.episode, r.task_id, r.seed, [(t.role, t.action, t.reward) for t in r.turns], r.outcome, r.returns)
            for r in results]


def test_results_do_not_depend_on_the_schedule_or_the_number_of_envs(sandbox):
    jobs = [(100 + k, {"task_index": k}) for k in range(6)]
    rounds, _ = play(make_envs(sandbox, 3), SeededTeam(), jobs, schedule="rounds")
    free, _ = play(make_envs(sandbox, 3), SeededTeam(), jobs, schedule="async")
    alone, _ = play(make_envs(sandbox, 1), SeededTeam(), jobs)
    assert summary(rounds) == summary(free) == summary(alone)
    outcomes = [r.outcome.correct for r in free]
    assert True in outcomes
    assert False in outcomes  # the seeds did make a difference between episodes


def test_each_action_gets_a_seed_fixed_by_its_episode_seed_and_position(sandbox):
    team = SeededTeam()
    results, _ = play(make_envs(sandbox, 2), team, [(5, {"task_index": 0}), (None, {"task_index": 1})])
    by_seed = {r.seed: r for r in results}
    assert len(by_seed[5].turns) == 4
    assert all(t.action_index == i for i, t in enumerate(by_seed[5].turns))
    assert sorted(s for s in team.seeds if s is not None) == sorted(action_seed(5, i) for i in range(4))
    assert team.seeds.count(None) == len(by_seed[None].turns)  # an unseeded episode samples unseeded
    assert len({action_seed(5, i) for i in range(100)} | {action_seed(6, i) for i in range(100)}) == 200


def test_a_slow_env_does_not_hold_the_others_back(sandbox):
    """One task's coach calls are slow; the others' take none. In lock-step rounds every env waits
    for it at every action; without the barrier the fast envs finish their episodes meanwhile.
    "Slow" is an ordering, not a duration, so the verdict does not depend on the machine's load: in
    async mode the slow task's first coach call returns only once five fast episodes have ended (or
    after 120 s, when the driver would have held them back); in rounds mode it takes 1.5 s."""
    jobs = [(k, {"task_index": k % len(TASKS)}) for k in range(12)]
    order: dict[str, list[int]] = {}
    for schedule in ("async", "rounds"):
        five_done = threading.Event()

        def latency(request, schedule=schedule, five_done=five_done):
            if request.task != TASKS[0].prompt:
                return 0.0
            if schedule == "rounds":
                return 1.5
            five_done.wait(120)
            return 0.0

        envs = make_envs(sandbox, 3, LatencyCoach(latency))
        driver = Driver(envs, SeededTeam(), schedule=schedule)
        finished = []
        try:
            for result in driver.play(jobs):
                finished.append(result.episode)
                if len(finished) >= 5:
                    five_done.set()
        finally:
            for env in envs:
                env.close()
        order[schedule] = finished
    # async: the slow episode (job 0) ends after the fast ones that started with it and after it
    assert order["async"].index(0) >= 5, order["async"]
    assert order["rounds"].index(0) <= 2, order["rounds"]  # rounds: everyone waited for it


def test_a_batch_serves_every_env_that_is_ready(sandbox):
    team = SeededTeam()
    results, driver = play(make_envs(sandbox, 3), team, [(k, {"task_index": k}) for k in range(3)])
    assert team.calls[0] == ["problem_solver"] * 3
    assert driver.stats.calls == {"shared": len(team.calls)}
    assert driver.stats.batches == len(team.calls)
    assert sum(map(len, team.calls)) == sum(len(r.turns) for r in results)


class Exploding(SeededTeam):
    """Writes an action that makes the env raise on the given tasks (a bug an episode hits)."""

    def __init__(self, bad: set[str]):
        super().__init__()
        self.bad = bad

    def _one(self, conversation, role, seed):
        if role == "code_executor" and any(t.prompt in conversation[1]["content"] for t in TASKS if t.id in self.bad):
            return BOOM
        return super()._one(conversation, role, seed)


class Boom(str):
    pass


BOOM = Boom("boom")


class FragileEnvs:
    """MathChat envs whose step raises on the Boom action, like an env bug hit by one episode."""

    def __init__(self, env):
        self.env = env

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, action):
        if isinstance(action, Boom):
            raise RuntimeError("the env broke on this action")
        self.env.step(action)


def test_a_failing_episode_is_counted_and_skipped_and_the_others_go_on(sandbox, caplog):
    envs = [FragileEnvs(e) for e in make_envs(sandbox, 2)]
    jobs = [(k, {"task_index": k}) for k in range(5)]
    results, driver = play(envs, Exploding({TASKS[1].id}), jobs)
    failed = [r for r in results if r.error]
    assert [r.episode for r in failed] == [1]
    assert "the env broke" in failed[0].error
    assert driver.stats.failures == 1
    assert all(r.outcome is not None for r in results if not r.error)
    assert len(results) == 5
    assert any("failed and is skipped" in m for m in caplog.messages)


def test_failures_in_a_row_mean_a_broken_setup_and_stop_the_run(sandbox):
    envs = [FragileEnvs(e) for e in make_envs(sandbox, 2)]
    with pytest.raises(RuntimeError, match="3 episodes in a row failed"):
        play(envs, Exploding({t.id for t in TASKS}), [(k, {"task_index": k}) for k in range(8)])


def test_the_stop_rule_ends_an_episode_early_and_spends_nothing_more_on_it(sandbox):
    calls = []
    coach = RuleCoach()

    class Counting:
        def score(self, request):
            calls.append(request.role)
            return coach.score(request)

        async def ascore(self, request):
            return self.score(request)

    def doomed(result, turn):
        return "solver scored below 5" if turn.role == "problem_solver" and turn.reward < 5 else None

    team = SeededTeam()
    results, driver = play(make_envs(sandbox, 2, Counting()), team, [(k, {"task_index": k}) for k in range(6)],
                           stop=doomed)
    stopped = [r for r in results if r.stopped]
    assert stopped
    assert driver.stats.stopped == len(stopped)
    for r in stopped:
        assert [t.role for t in r.turns] == ["problem_solver"]
        assert r.outcome is None
    played = sum(len(r.turns) for r in results)
    assert len(calls) == played == sum(map(len, team.calls))  # no coach call or action after the stop


def test_the_driver_checks_its_inputs(sandbox):
    envs = make_envs(sandbox, 1)
    try:
        with pytest.raises(ValueError, match="at least one env"):
            Driver([], SeededTeam())
        with pytest.raises(ValueError, match="schedule"):
            Driver(envs, SeededTeam(), schedule="fast")
        with pytest.raises(ValueError, match="role_policy"):
            Driver(envs, {"a": SeededTeam(), "b": SeededTeam()})
        with pytest.raises(TypeError, match="respond"):
            Driver(envs, object())
    finally:
        envs[0].close()


def test_stepping_happens_in_worker_threads_while_the_main_thread_batches(sandbox):
    seen = set()

    class Where(SeededTeam):
        def respond(self, conversations, roles, seeds):
            seen.add(threading.current_thread().name)
            return super().respond(conversations, roles, seeds)

    class Probe(LatencyCoach):
        def score(self, request):
            seen.add(threading.current_thread().name)
            return super().score(request)

    play(make_envs(sandbox, 2, Probe(lambda r: 0.0)), Where(), [(0, None), (1, None)])
    assert threading.main_thread().name in seen
    assert any(n.startswith("mappa-env") for n in seen)


class Hanging:
    """The rule coach, except that scoring any action of `task` blocks until `release` is set (a
    hung sandbox or judge). The block releases the GIL, as a stuck socket or child process does."""

    def __init__(self, task, release: threading.Event, limit_s: float = 60.0):
        self.rule, self.task, self.release, self.limit_s = RuleCoach(), task, release, limit_s

    def score(self, request):
        if request.task == self.task.prompt:
            self.release.wait(self.limit_s)
        return self.rule.score(request)

    async def ascore(self, request):
        return self.score(request)


def test_a_step_past_the_deadline_fails_its_episode_and_the_others_finish(sandbox):
    """One poisoned episode among healthy ones: its step overruns, it is reported failed with why,
    and every healthy episode finishes."""
    release = threading.Event()
    envs = make_envs(sandbox, 2, Hanging(TASKS[0], release))
    driver = Driver(envs, SeededTeam(), step_deadline_s=4.0)
    jobs = [(k, {"task_index": k}) for k in range(6)]
    results = []
    try:
        for result in driver.play(jobs):
            results.append(result)
            if result.error:
                release.set()  # the hung step returns now: its env may be used again
    finally:
        release.set()
        for env in envs:
            env.close()
    assert len(results) == 6
    failed = [r for r in results if r.error]
    assert [r.episode for r in failed] == [0]
    assert "ran past the driver's deadline of 4 s" in failed[0].error
    assert (driver.stats.overran, driver.stats.failures) == (1, 1)
    healthy = [r for r in results if not r.error]
    assert all(r.outcome is not None and len(r.turns) == 4 for r in healthy)


def test_an_env_set_aside_comes_back_once_its_step_returns(sandbox):
    release = threading.Event()
    envs = make_envs(sandbox, 1, Hanging(TASKS[0], release))
    results = []
    try:
        for result in Driver(envs, SeededTeam(), step_deadline_s=3.0).play([(k, {"task_index": k}) for k in range(3)]):
            results.append(result)
            release.set()  # the hung step returns now: the driver, waiting for its only env, takes it back
    finally:
        release.set()
        envs[0].close()
    assert [bool(r.error) for r in results] == [True, False, False]
    assert all(len(r.turns) == 4 for r in results[1:])


def test_when_every_env_is_stuck_the_driver_says_so(sandbox):
    release = threading.Event()
    envs = make_envs(sandbox, 1, Hanging(TASKS[0], release))
    results = []
    try:
        with pytest.raises(RuntimeError, match="stuck in steps that ran past the deadline"):
            for result in Driver(envs, SeededTeam(), step_deadline_s=3.0).play([(k, {"task_index": k})
                                                                                 for k in range(3)]):
                results.append(result)
    finally:
        release.set()
        time.sleep(0.2)  # let the released step finish before its env closes
        envs[0].close()
    assert [bool(r.error) for r in results] == [True]


def test_the_deadline_is_checked(sandbox):
    envs = make_envs(sandbox, 1)
    try:
        for bad in (0, -1, True, float("nan")):
            with pytest.raises(ValueError, match="step_deadline_s"):
                Driver(envs, SeededTeam(), step_deadline_s=bad)
    finally:
        envs[0].close()


def test_a_play_ends_only_once_its_set_aside_steps_have_returned(sandbox):
    """The next play must never share an env with a step still running in it: a play whose jobs ran
    out waits (up to the deadline) for its set-aside steps, and names the env that never returns."""
    release = threading.Event()
    envs = make_envs(sandbox, 2, Hanging(TASKS[0], release))
    jobs = [(k, {"task_index": k}) for k in range(2)]
    try:
        timer = threading.Timer(8.0, release.set)  # the hung step returns after its deadline, within the wait
        timer.start()
        late = list(Driver(envs, SeededTeam(), step_deadline_s=5.0).play(jobs))
        timer.join()
        release.clear()
        hung = []
        with pytest.raises(RuntimeError, match=r"env\(s\) \[\d\] are still inside a step that ran past"):
            for result in Driver(envs, SeededTeam(), step_deadline_s=4.0).play(jobs):
                hung.append(result)
    finally:
        release.set()
        time.sleep(0.5)  # let the released step finish before its env closes
        for env in envs:
            env.close()
    assert sorted(bool(r.error) for r in late) == [False, True]
    assert sorted(bool(r.error) for r in hung) == [False, True]
