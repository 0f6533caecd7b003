"""What a team's policies are doing right now, for `mappa eval`'s progress lines.

An episode of a real model on CPU can take minutes, so counting finished episodes leaves a run silent
for that long. `watch(team, activity)` wraps each of the team's policies so that every `respond` call
is counted: requests answered, tokens generated (when the policy reports them, as `last_usage`), and
the requests in flight with how long they have waited. The wrapper passes the driver's per-action
seeds through, so what is sampled does not change.
"""
from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Mapping, Sequence

from mappa_envs.policy import Team, TextPolicy


class Activity:
    """Thread-safe counters over every watched policy of a run."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests = self.tokens = self.in_flight = 0
        self._waiting_since: float | None = None

    def started(self, n: int) -> None:
        with self._lock:
            if not self.in_flight:
                self._waiting_since = time.monotonic()
            self.in_flight += n

    def finished(self, n: int, usage) -> None:
        with self._lock:
            self.in_flight -= n
            self.requests += n
            if isinstance(usage, list):
                self.tokens += sum(int(u.get("completion_tokens") or 0) for u in usage if isinstance(u, dict))
            if not self.in_flight:
                self._waiting_since = None

    def line(self) -> str:
        """e.g. "12 requests answered, 3,480 tokens generated; 8 in flight for 41 s"."""
        with self._lock:
            text = f"{self.requests} requests answered"
            if self.tokens:
                text += f", {self.tokens:,} tokens generated"
            if self.in_flight and self._waiting_since is not None:
                text += f"; {self.in_flight} in flight for {time.monotonic() - self._waiting_since:.0f} s"
        return text


class Watched:
    """A TextPolicy that reports each call to an `Activity` and otherwise is the policy it wraps."""

    def __init__(self, policy: TextPolicy, activity: Activity):
        self.policy, self.activity = policy, activity
        self._seeded = "seeds" in inspect.signature(policy.respond).parameters

    def respond(self, conversations: list[list[dict]], roles: list[str],
                seeds: Sequence[int | None] | None = None) -> list[str]:
        n = len(conversations)
        self.activity.started(n)
        usage = None
        try:
            out = (self.policy.respond(conversations, roles, seeds=seeds) if self._seeded
                   else self.policy.respond(conversations, roles))
            usage = getattr(self.policy, "last_usage", None)
            return out
        finally:
            self.activity.finished(n, usage)

    @property
    def last_usage(self):
        return getattr(self.policy, "last_usage", None)


def watch(team, activity: Activity):
    """`team` (a TextPolicy, a Team, or a builder env -> either) with every policy in it watched."""
    if isinstance(team, Team):
        members = team.policies
        if isinstance(members, Mapping):
            return Team({name: Watched(p, activity) for name, p in members.items()})
        return Team(Watched(members, activity))
    if isinstance(team, TextPolicy):
        return Watched(team, activity)
    return lambda env: watch(team(env), activity)  # built per env (scripted teams read the env's tasks)
