"""The text-level policy Protocol shared by `mappa run`, evaluation, wrappers and examples.

A policy answers a batch of chat conversations (one per waiting agent) with one action text each.
`roles[i]` names the agent that will act on `conversations[i]`, so one object can serve a whole team.
Trainers that need token ids and logprobs use `mappa_train.generation` instead.
"""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from mappa_envs.errors import InputError


@runtime_checkable
class TextPolicy(Protocol):
    def respond(self, conversations: list[list[dict]], roles: list[str]) -> list[str]: ...


def route_roles(policies: Mapping[str, object], roles: Sequence[str],
                role_policy: Mapping[str, str] | None = None) -> dict[str, str]:
    """role -> policy name: `role_policy` as given, else each role to the policy of its own name,
    else every role to the only policy. The one routing rule for teams, the driver and training."""
    if role_policy is None:
        if set(roles) <= set(policies):
            role_policy = {r: r for r in roles}
        elif len(policies) == 1:
            role_policy = {r: next(iter(policies)) for r in roles}
        else:
            raise InputError(f"give role_policy: the roles {list(roles)} are not all policy names {sorted(policies)}")
    missing = [r for r in roles if r not in role_policy]
    unknown = sorted({p for p in role_policy.values() if p not in policies})
    if missing or unknown:
        raise InputError(f"role_policy must map every role {list(roles)} to one of the policies {sorted(policies)}; "
                         f"roles without a policy: {missing}, unknown policies: {unknown}")
    return dict(role_policy)


def action_rngs(seed: int, fallback: random.Random, seeds: Sequence[int | None] | None, n: int) -> list[random.Random]:
    """One random stream per action of a batch: its own seed's (so an action does not depend on the batch it
    shares), or the policy's running stream for an unseeded action. Scripted teams draw their dice from it."""
    seeds = list(seeds) if seeds is not None else [None] * n
    return [fallback if s is None else random.Random(f"{seed}/{s}") for s in seeds]


class Team:
    """Route each role to its own policy (the paper: one model per agent) or one policy for all.

    The episode driver reads `policies` and routes by itself; `respond` is for direct callers."""

    def __init__(self, policies: TextPolicy | Mapping[str, TextPolicy]):
        self.policies = policies

    def respond(self, conversations: list[list[dict]], roles: list[str]) -> list[str]:
        if not isinstance(self.policies, Mapping):
            return self.policies.respond(conversations, roles)
        missing = sorted(set(roles) - set(self.policies))
        if missing:
            raise KeyError(f"no policy for role(s) {missing}; the team has {sorted(self.policies)}")
        route = route_roles(self.policies, sorted(set(roles)))
        out: list[str | None] = [None] * len(roles)
        for name, policy in self.policies.items():  # one batched call per policy
            idx = [i for i, r in enumerate(roles) if route[r] == name]
            if idx:
                for i, text in zip(idx, policy.respond([conversations[i] for i in idx], [roles[i] for i in idx])):
                    out[i] = text
        return out  # type: ignore[return-value]
