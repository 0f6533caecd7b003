"""Seeded transcripts of the shipped envs, recorded before they became team specs, stay identical.

Each case plays whole episodes with the env's scripted team (noisy, so wrong answers, broken code and
missing files all occur) and the rule coach, and compares everything an agent saw, wrote and earned,
and the env's transcript, with the recording under tests/fixtures/golden/. Record again (only when an
episode's meaning is meant to change, with a new env version) with MAPPA_RECORD_GOLDEN=1.
"""
import json
import os
import sys
from pathlib import Path

import pytest

import mappa_envs

GOLDEN = Path(__file__).parents[1] / "fixtures" / "golden"
CASES = {
    "mathchat": ("MathChat-v0", {"num_tasks": 12}, {"skill": 0.6, "code_skill": 0.6}, 6),
    "mathchat_outcome": ("MathChat-v0", {"num_tasks": 12, "reward_mode": "process+outcome",
                                         "executor_max_actions": 2}, {"skill": 0.5, "code_skill": 0.5}, 4),
    "dsbench": ("DSBench-v0", {"max_actions": 2, "task_seed": 0}, {"skill": 0.5, "forget": ("model.pkl",)}, 2),
}


def play(env_id: str, kwargs: dict, policy_kwargs: dict, episodes: int) -> list[dict]:
    env = mappa_envs.make(env_id, sandbox="local", **kwargs)
    policy = mappa_envs.registration.load_callable(mappa_envs.spec(env_id).scripted_policy)(env, seed=7,
                                                                                            **policy_kwargs)
    out = []
    try:
        for episode in range(episodes):
            env.reset(seed=100 + episode)
            steps = []
            for i, agent in enumerate(env.agent_iter()):
                obs, reward, term, trunc, info = env.last()
                if term or trunc:
                    env.step(None)
                    continue
                action = policy.respond([info["messages"]], [agent], seeds=[1000 * episode + i])[0]
                steps.append({"agent": agent, "observation": obs["prompt"], "messages": info["messages"],
                              "action": action})
                env.step(action)
                steps[-1]["rewards"] = dict(env.rewards)
            out.append({"steps": steps, "transcript": env.transcript(),
                        "cumulative": dict(env._cumulative_rewards)})
    finally:
        env.close()
    # Tracebacks of the local sandbox name the interpreter's files; the recording must not depend on where
    # the checkout and its virtual environment live.
    text = json.dumps(out, default=str).replace(sys.prefix, "<python-prefix>")
    return json.loads(text)


@pytest.mark.parametrize("case", sorted(CASES))
def test_seeded_transcripts_unchanged(case):
    got = play(*CASES[case])
    path = GOLDEN / f"{case}.json"
    if os.environ.get("MAPPA_RECORD_GOLDEN"):
        path.write_text(json.dumps(got, indent=1, sort_keys=True))
    want = json.loads(path.read_text())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g == w
