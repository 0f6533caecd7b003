"""The text-level policy Protocol shared by `mappa run`, evaluation, wrappers and examples.

A policy answers a batch of chat conversations (one per waiting agent) with one action text each.
`roles[i]` names the agent that will act on `conversations[i]`, so one object can serve a whole team.
Trainers that need token ids and logprobs use `mappa_train.generation` instead.
"""
from __future__ import annotations

from typing import Mapping, Protocol, runtime_checkable


@runtime_checkable
class TextPolicy(Protocol):
    def respond(self, conversations: list[list[dict]], roles: list[str]) -> list[str]: ...


class Team:
    """Route each role to its own policy (the paper: one model per agent) or one policy for all."""

    def __init__(self, policies: TextPolicy | Mapping[str, TextPolicy]):
        self.policies = policies

    def respond(self, conversations: list[list[dict]], roles: list[str]) -> list[str]:
        if not isinstance(self.policies, Mapping):
            return self.policies.respond(conversations, roles)
        missing = sorted(set(roles) - set(self.policies))
        if missing:
            raise KeyError(f"no policy for role(s) {missing}; the team has {sorted(self.policies)}")
        out: list[str | None] = [None] * len(roles)
        for role, policy in self.policies.items():  # one batched call per policy
            idx = [i for i, r in enumerate(roles) if r == role]
            if idx:
                for i, text in zip(idx, policy.respond([conversations[i] for i in idx], [role] * len(idx))):
                    out[i] = text
        return out  # type: ignore[return-value]
