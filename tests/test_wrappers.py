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
from mappa_envs.wrappers import OutcomeReward, ScaleReward, TextEnv, TranscriptRecorder, VectorRunner, reward, text_env, transcript, vector

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


@pytest.mark.parametrize("module", [reward, text_env, vector, transcript], ids=lambda m: m.__name__)
def test_doctests(module, monkeypatch):
    # The examples build envs with their own default local sandbox; only the preimport is skipped (see above).
    monkeypatch.setattr(mappa_envs.sandbox, "make_sandbox",
                        lambda backend="local", **kw: _real_make_sandbox(backend, **{"preimport": (), **kw}))
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


WRAPPERS = {
    "scale": lambda env: ScaleReward(env, 0.1),
    "outcome": OutcomeReward,
    "transcript": lambda env: TranscriptRecorder(env, io.StringIO()),
    "stacked": lambda env: TranscriptRecorder(ScaleReward(OutcomeReward(env), 0.5), io.StringIO()),
}


@pytest.mark.parametrize("name", WRAPPERS)
def test_pettingzoo_api_and_seed_tests(name):
    envs = []

    def build():
        envs.append(WRAPPERS[name](make()))
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


def test_scale_reward_scales_step_and_cumulative_rewards():
    raw_env, scaled_env = make(), ScaleReward(make(), 0.1)
    try:
        raw_steps, raw_reported = play_aec(raw_env, for_env(raw_env))
        steps, reported = play_aec(scaled_env, for_env(scaled_env))
        assert [a for a, _ in steps] == SCRIPTED_ROLES
        for (_, raw), (_, scaled) in zip(raw_steps, steps):
            assert scaled == pytest.approx({a: 0.1 * r for a, r in raw.items()})
        assert [a for a, _ in reported] == [a for a, _ in raw_reported]
        assert [r for _, r in reported] == pytest.approx([0.1 * r for _, r in raw_reported])
        assert any(r > 0 for _, r in reported)
    finally:
        raw_env.close()
        scaled_env.close()


@pytest.mark.parametrize("skill", [1.0, 0.0])
def test_outcome_reward_equals_outcome_reward_mode(skill):
    """The wrapper over a process-reward env pays exactly what reward_mode="outcome" pays, step by step."""
    native, wrapped = make(reward_mode="outcome"), OutcomeReward(make(reward_mode="process"))
    try:
        native_steps, native_reported = play_aec(native, for_env(native, skill=skill))
        steps, reported = play_aec(wrapped, for_env(wrapped, skill=skill))
        assert steps == native_steps and reported == native_reported
        score = wrapped.unwrapped.episode.outcome.score
        assert steps[-1][1] == {a: 10.0 * score for a in ROLES}
        assert all(r == 0.0 for _, rewards in steps[:-1] for r in rewards.values())
        # the coach still scored every action, for logging
        assert wrapped.unwrapped.episode.actions[0].coach is not None
    finally:
        native.close()
        wrapped.close()


def test_text_env_plays_an_episode_like_the_aec_loop():
    aec, env = make(), TextEnv(make())
    try:
        aec_steps, _ = play_aec(aec, for_env(aec))
        policy = for_env(env.env)
        obs, info = env.reset(seed=0)
        assert isinstance(obs, str) and obs and info["role"] == "problem_solver"
        seen, rewards, done = [], [], False
        while not done:
            text = policy.respond([info["messages"]], [info["role"]])[0]
            seen.append(info["role"])
            obs, r, terminated, truncated, info = env.step(text)
            assert info["last_role"] == seen[-1] and info["action"]["role"] == seen[-1]
            rewards.append(r)
            done = terminated or truncated
        assert seen == SCRIPTED_ROLES and terminated and not truncated
        assert rewards == [step_rewards[agent] for agent, step_rewards in aec_steps]
        assert obs == "" and info["role"] is None and info["outcome"]["correct"] is True
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
        assert not (terminated or truncated)
        _, _, terminated, truncated, info = env.step("more thinking")
        assert truncated and not terminated and "outcome" in info
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
        assert max(len(c) for c in policy.calls) == 3 and sum(map(len, policy.calls)) == 5 * len(SCRIPTED_ROLES)
        one = VectorRunner(envs[:1], for_env(envs[0])).run(episodes=5, seed=10)
        assert [r.episode for r in many] == list(range(5))
        for a, b in zip(many, one):
            assert (a.task_id, a.seed, a.returns, a.outcome) == (b.task_id, b.seed, b.returns, b.outcome)
            assert [(t.role, t.action, t.reward) for t in a.turns] == [(t.role, t.action, t.reward) for t in b.turns]
        r = many[0]
        assert [t.role for t in r.turns] == SCRIPTED_ROLES and r.outcome["correct"] is True
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
        assert all(r.outcome["correct"] for r in results)

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
    env = TranscriptRecorder(ScaleReward(make(), 0.1), path)
    policy = for_env(env)
    play_aec(env, policy, seed=0)
    play_aec(env, policy, seed=1)
    env.reset(seed=2)
    env.step("an unfinished episode")
    env.close()  # writes the cut-off episode
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(x["seed"], x["finished"]) for x in lines] == [(0, True), (1, True), (2, False)]
    first = lines[0]
    assert first["env_id"] == "MathChat-v0" and first["outcome"]["correct"] is True
    assert [a["role"] for a in first["actions"]] == SCRIPTED_ROLES
    for a in first["actions"]:  # outermost recorder: the rewards the trainer saw (scaled), raw coach kept
        assert a["reward"] == pytest.approx(0.1 * a["record"]["coach"]["score"])
        assert a["messages"][0]["role"] == "system"
    assert first["returns"] == pytest.approx({r: sum(a["reward"] for a in first["actions"] if a["role"] == r)
                                              for r in ROLES})
    assert "```python" in first["actions"][1]["action"] and first["actions"][1]["record"]["tool_results"][0]["ok"]
