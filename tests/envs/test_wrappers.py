"""The wrappers over real MathChat-v0 envs (local sandbox, rule coach), against PettingZoo/Gymnasium conventions."""
import doctest
import io
import json

import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo.test import api_test, seed_test

import mappa_envs
from mappa_envs.core.pipeline import EpisodeLimits
from mappa_envs.mathchat.scripted import for_env
from mappa_envs.policy import Team
from mappa_envs.sandbox import make_sandbox
from mappa_envs.wrappers import TextEnv, TranscriptRecorder, VectorRunner, text_env, transcript, vector

ROLES = ["problem_solver", "code_executor", "verifier"]
# The scripted team: the Code Executor runs the task's solution code in the sandbox, then reports it.
SCRIPTED_ROLES = ["problem_solver", "code_executor", "code_executor", "verifier"]


# MathChat's code needs only the standard library; the sandbox's default numpy/pandas/sklearn preimport
# costs seconds per session on a small machine, so these tests share one real local sandbox without it.
_real_make_sandbox = make_sandbox
SANDBOX = None


@pytest.fixture(scope="module", autouse=True)
def sandbox():
    global SANDBOX
    SANDBOX = make_sandbox("local", preimport=(), pool_size=2)
    yield SANDBOX
    SANDBOX.close()


def make(**kwargs):
    kwargs.setdefault("num_tasks", 8)
    kwargs.setdefault("sandbox", SANDBOX)
    return mappa_envs.make("MathChat-v0", task_source="synthetic", **kwargs)


def play_aec(env, policy, seed=0):
    """Play one episode through agent_iter/last; return [(agent, step reward)] and what last() reported."""
    env.reset(seed=seed)
    steps, reported = [], []
    for agent in env.agent_iter(max_iter=50):
        _, cumulative, terminated, truncated, info = env.last()
        reported.append((agent, cumulative))
        if terminated or truncated:
            env.step(None)
            continue
        env.step(policy.respond([info["messages"]], [agent])[0])
        steps.append((agent, dict(env.rewards)))
    return steps, reported


@pytest.mark.parametrize("module", [text_env, vector, transcript], ids=lambda m: m.__name__)
def test_doctests(module, monkeypatch):
    # The examples build envs with their own default local sandbox; only the preimport is skipped (see above).
    monkeypatch.setattr(mappa_envs.sandbox, "make_sandbox",
                        lambda backend="local", **kw: _real_make_sandbox(backend, **{"preimport": (), **kw}))
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


WRAPPERS = {
    "transcript": lambda: TranscriptRecorder(make(), io.StringIO()),
    "transcript-outcome-mode": lambda: TranscriptRecorder(make(reward_mode="outcome"), io.StringIO()),
    "stacked": lambda: TranscriptRecorder(TranscriptRecorder(make(), io.StringIO()), io.StringIO()),
}


@pytest.mark.parametrize("name", WRAPPERS)
def test_pettingzoo_api_and_seed_tests(name):
    envs = []

    def build():
        envs.append(WRAPPERS[name]())
        return envs[-1]

    try:
        api_test(build(), num_cycles=30)
        seed_test(build, num_cycles=10)
    finally:
        for env in envs:
            env.close()


def test_text_env_passes_gymnasium_check_env():
    env = TextEnv(make())
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


@pytest.mark.parametrize("skill", [1.0, 0.0])
def test_outcome_reward_mode_pays_only_the_outcome(skill):
    """reward_mode="outcome" (the ablation): 0 per action, 10 x the outcome score to every agent at the end,
    and what last() reports follows; the coach is not asked."""
    process, outcome = make(reward_mode="process"), make(reward_mode="outcome")
    try:
        process_steps, _ = play_aec(process, for_env(process, skill=skill))
        steps, reported = play_aec(outcome, for_env(outcome, skill=skill))
        assert [a for a, _ in steps] == [a for a, _ in process_steps] == SCRIPTED_ROLES
        score = outcome.unwrapped.outcome.score
        assert score == process.unwrapped.outcome.score
        assert steps[-1][1] == {a: 10.0 * score for a in ROLES}
        assert all(r == 0.0 for _, rewards in steps[:-1] for r in rewards.values())
        assert [r for _, r in reported[-3:]] == [10.0 * score] * 3  # every agent's last() after the end
        assert all(a.coach is None and a.reward == 0.0 for a in outcome.unwrapped.episode.actions)
    finally:
        process.close()
        outcome.close()


def test_text_env_plays_an_episode_like_the_aec_loop():
    aec, env = make(), TextEnv(make())
    try:
        aec_steps, _ = play_aec(aec, for_env(aec))
        policy = for_env(env.env)
        obs, info = env.reset(seed=0)
        assert isinstance(obs, str)
        assert obs
        assert info["role"] == "problem_solver"
        seen, rewards, done = [], [], False
        while not done:
            text = policy.respond([info["messages"]], [info["role"]])[0]
            seen.append(info["role"])
            obs, r, terminated, truncated, info = env.step(text)
            assert info["last_role"] == seen[-1]
            assert info["action"]["role"] == seen[-1]
            rewards.append(r)
            done = terminated or truncated
        assert seen == SCRIPTED_ROLES
        assert terminated
        assert not truncated
        assert rewards == [step_rewards[agent] for agent, step_rewards in aec_steps]
        assert obs == ""
        assert info["role"] is None
        assert info["outcome"]["correct"] is True
        with pytest.raises(RuntimeError, match="reset"):
            env.step("more")
    finally:
        aec.close()
        env.close()


def test_text_env_reports_truncation_and_rejects_bad_envs():
    env = TextEnv(make(limits=EpisodeLimits(max_total_actions=2)))
    try:
        env.reset(seed=0)
        _, _, terminated, truncated, _ = env.step("thinking")
        assert not terminated
        assert not truncated
        _, _, terminated, truncated, info = env.step("more thinking")
        assert truncated
        assert not terminated
        assert "outcome" in info
    finally:
        env.close()
    with pytest.raises(TypeError, match="AECEnv"):
        TextEnv(object())


class Recording:
    """A TextPolicy that records the size and roles of every batched call."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def respond(self, conversations, roles):
        self.calls.append(list(roles))
        return self.inner.respond(conversations, roles)


def test_vector_runner_batches_every_waiting_env_and_is_schedule_independent():
    envs = [make() for _ in range(3)]
    try:
        policy = Recording(for_env(envs[0]))
        many = VectorRunner(envs, policy).run(episodes=5, seed=10)
        assert policy.calls[0] == ["problem_solver"] * 3  # one call for all three waiting envs
        assert max(len(c) for c in policy.calls) == 3
        assert sum(map(len, policy.calls)) == 5 * len(SCRIPTED_ROLES)
        one = VectorRunner(envs[:1], for_env(envs[0])).run(episodes=5, seed=10)
        assert [r.episode for r in many] == list(range(5))
        for a, b in zip(many, one):
            assert (a.task_id, a.seed, a.returns, a.outcome) == (b.task_id, b.seed, b.returns, b.outcome)
            assert [(t.role, t.action, t.reward) for t in a.turns] == [(t.role, t.action, t.reward) for t in b.turns]
        r = many[0]
        assert [t.role for t in r.turns] == SCRIPTED_ROLES
        assert r.outcome.correct is True
        assert r.returns == {a: sum(t.reward for t in r.turns if t.role == a) for a in ROLES}
        assert r.turns[1].info["tool_results"][0]["ok"]  # the executor's code ran in the sandbox
    finally:
        for env in envs:
            env.close()


class Counting(Recording):
    """Reports token counts the way model policies may: `last_usage`, one entry per conversation."""

    def respond(self, conversations, roles):
        texts = super().respond(conversations, roles)
        self.last_usage = [{"prompt_tokens": len(c), "completion_tokens": len(t.split())}
                           for c, t in zip(conversations, texts)]
        return texts


def test_vector_runner_plays_chosen_jobs_and_reports_each_episode_with_its_env():
    envs = [make() for _ in range(2)]
    try:
        seen = []
        jobs = [(7, {"task_index": 3}), (7, {"task_index": 5}), (2, None)]
        results = VectorRunner(envs, Counting(for_env(envs[0]))).play(
            jobs, on_episode=lambda r, env: seen.append((r.episode, env.unwrapped.transcript()["task_id"])))
        assert sorted(seen) == sorted((r.episode, r.task_id) for r in results)  # the env was not reset yet
        tasks = envs[0].unwrapped.scenario.tasks()
        by = {r.episode: r for r in results}
        assert (by[0].seed, by[0].task_id, by[1].task_id, by[2].seed) == (7, tasks[3].id, tasks[5].id, 2)
        turn = by[0].turns[0]
        assert turn.usage == {"prompt_tokens": len(turn.messages), "completion_tokens": len(turn.action.split())}
        assert VectorRunner(envs, for_env(envs[0])).run(episodes=1)[0].turns[0].usage is None  # no last_usage
    finally:
        for env in envs:
            env.close()


def test_vector_runner_routes_roles_through_a_team_and_checks_the_policy():
    envs = [make() for _ in range(2)]
    try:
        scripted = for_env(envs[0])
        members = {role: Recording(scripted) for role in ROLES}
        results = VectorRunner(envs, Team(members)).run(episodes=2, seed=0)
        assert all(set(call) == {role} for role, p in members.items() for call in p.calls)
        assert members["problem_solver"].calls == [["problem_solver", "problem_solver"]]
        assert all(r.outcome.correct for r in results)

        class Short:
            def respond(self, conversations, roles):
                return []

        with pytest.raises(ValueError, match="returned 0 texts for 2"):
            VectorRunner(envs, Short()).run(episodes=2)
        with pytest.raises(TypeError, match="respond"):
            VectorRunner(envs, object())
        with pytest.raises(ValueError, match="at least one env"):
            VectorRunner([], scripted)
    finally:
        for env in envs:
            env.close()


def test_transcript_recorder_writes_each_episode_once(tmp_path):
    path = tmp_path / "runs" / "t.jsonl"
    env = TranscriptRecorder(make(reward_mode="process+outcome"), path)
    policy = for_env(env)
    play_aec(env, policy, seed=0)
    play_aec(env, policy, seed=1)
    env.reset(seed=2)
    env.step("an unfinished episode")
    env.close()  # writes the cut-off episode
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(x["seed"], x["finished"]) for x in lines] == [(0, True), (1, True), (2, False)]
    first = lines[0]
    assert first["env_id"] == "MathChat-v0"
    assert first["outcome"]["correct"] is True
    assert [a["role"] for a in first["actions"]] == SCRIPTED_ROLES
    bonus = 10.0 * first["outcome"]["score"]
    for i, a in enumerate(first["actions"]):  # the rewards the env paid: the coach's, plus the outcome at the end
        assert a["reward"] == pytest.approx(a["record"]["coach"]["score"] + (bonus if i == 3 else 0.0))
        assert a["messages"][0]["role"] == "system"
    assert first["returns"] == pytest.approx({r: bonus + sum(a["record"]["coach"]["score"] for a in first["actions"]
                                                              if a["role"] == r) for r in ROLES})
    assert "```python" in first["actions"][1]["action"]
    assert first["actions"][1]["record"]["tool_results"][0]["ok"]
