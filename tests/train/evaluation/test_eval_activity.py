"""`mappa eval` says what the team is doing before the first episode ends (issue 27): requests
answered, tokens generated, requests in flight, in a line every 10 s, not only per finished episode."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mappa_cli.progress import Progress
from mappa_envs.policy import Team
from mappa_train.evaluation.activity import Activity, Watched, watch

ROOT = Path(__file__).resolve().parents[3]
ANSWER = "The answer is \\boxed{1}."


class Reporting:
    """A seeded policy that reports token counts, and can be held mid-call."""

    def __init__(self, hold: threading.Event | None = None):
        self.hold, self.seen_seeds, self.last_usage = hold, [], []

    def respond(self, conversations, roles, seeds=None):
        self.seen_seeds.append(seeds)
        if self.hold is not None:
            self.hold.wait(60)
        self.last_usage = [{"prompt_tokens": 10, "completion_tokens": 7} for _ in conversations]
        return [ANSWER for _ in conversations]


def factory(env):
    """For the CLI test: the first call takes 25 s, as a slow model's first round would."""
    policy = Reporting()
    first = [True]
    inner = policy.respond

    def respond(conversations, roles, seeds=None):
        if first[0]:
            first[0] = False
            time.sleep(25)
        return inner(conversations, roles, seeds=seeds)

    policy.respond = respond
    return policy


def test_watched_counts_requests_and_tokens_and_passes_seeds_through():
    activity, inner = Activity(), Reporting()
    policy = Watched(inner, activity)
    assert policy.respond([[{"role": "user", "content": "q"}]] * 3, ["solver"] * 3, seeds=[1, 2, 3]) == [ANSWER] * 3
    assert inner.seen_seeds == [[1, 2, 3]]
    assert policy.last_usage == inner.last_usage
    assert activity.line() == "3 requests answered, 21 tokens generated"


def test_watch_wraps_every_member_of_a_team():
    activity = Activity()
    team = watch(Team({"solver": Reporting(), "verifier": Reporting()}), activity)
    assert all(isinstance(p, Watched) for p in team.policies.values())
    built = watch(lambda env: Reporting(), activity)(None)
    assert isinstance(built, Watched)


def test_a_line_comes_while_a_call_is_in_flight():
    """Deterministic: the policy is held until the progress stream has printed a line."""
    activity, hold = Activity(), threading.Event()
    printed = threading.Event()

    class Stream(io.StringIO):
        def write(self, text):
            if "in flight" in text:
                printed.set()
            return super().write(text)

        def isatty(self):
            return False

    stream = Stream()
    policy = Watched(Reporting(hold), activity)
    with Progress(1, "synthetic:1", bar=False, every_s=0.05, stream=stream, activity=activity.line):
        caller = threading.Thread(target=policy.respond, args=([[{"role": "user", "content": "q"}]] * 2, ["s"] * 2))
        caller.start()
        assert printed.wait(60), stream.getvalue()
        hold.set()
        caller.join()
    first = next(line for line in stream.getvalue().splitlines() if "in flight" in line)
    assert first.startswith("synthetic:1: 0/1 episodes, 0.00 episodes/s, ETA ?; 0 requests answered; 2 in flight for ")


@pytest.mark.slow
def test_mappa_eval_prints_activity_before_the_first_episode_ends(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "mappa_cli", "eval", "--team", "tests.train.evaluation.test_eval_activity:factory",
         "--sets", "synthetic:1", "--batch-size", "1", "--out", str(tmp_path), "--no-plots", "--no-progress",
         "--preimport", ""],
        capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    waiting = [line for line in lines if line.startswith("synthetic:1: 0/1 episodes")]
    assert waiting, result.stderr
    assert "0 requests answered; 1 in flight for " in waiting[0]
    final = next(line for line in lines if line.startswith("synthetic:1: 1/1 episodes"))
    assert "requests answered, " in final
    assert "tokens generated" in final
