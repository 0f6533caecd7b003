"""The text-level policy Protocol shared by `mappa run`, evaluation, wrappers and examples.

A policy answers a batch of chat conversations (one per waiting agent) with one action text each.
`roles[i]` names the agent that will act on `conversations[i]`, so one object can serve a whole team.
Trainers that need token ids and logprobs use `mappa_train.generation` instead.

`checked(policy_or_factory, name)` holds a user's policy to that contract where the command line
plays it: an exception it raises, or a list of another length than the batch, becomes a one-line
`PolicyError` naming it; an answer that is not text (None) is played as the env plays it, as an
empty action, with one warning.
"""
from __future__ import annotations

import inspect
import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from mappa_envs.errors import InputError, MappaError

log = logging.getLogger(__name__)


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


class PolicyError(MappaError, RuntimeError):
    """A policy, or the factory that builds it, broke the TextPolicy contract; the message names it
    (`source`), and an exception it raised is the `__cause__`."""

    def __init__(self, message: str, source: str):
        super().__init__(message)
        self.source = source


class CheckedPolicy:
    """`policy`, with each `respond` call held to the contract (see `checked`); seeds pass through."""

    def __init__(self, policy: Any, name: str):
        if not isinstance(policy, TextPolicy):
            raise PolicyError(f"{name}: got {_kind(policy)}, not a policy with respond(conversations, roles) "
                              "-> list[str]", name)
        self.policy, self.name = policy, name
        self._seeded = "seeds" in inspect.signature(policy.respond).parameters
        self._warned = False

    def respond(self, conversations: list[list[dict]], roles: list[str],
                seeds: Sequence[int | None] | None = None) -> list[str]:
        try:
            texts = (self.policy.respond(conversations, roles, seeds=seeds) if self._seeded
                     else self.policy.respond(conversations, roles))
        except MappaError:
            raise
        except Exception as e:
            raise PolicyError(f"{self.name}: respond() raised {_brief(e)}", self.name) from e
        if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence) or len(texts) != len(conversations):
            got = f"{len(texts)} texts" if isinstance(texts, Sequence) and not isinstance(texts, str) else _kind(texts)
            raise PolicyError(f"{self.name}: respond() returned {got} for {len(conversations)} conversation(s); "
                              "it must return a list with one text per conversation", self.name)
        odd = [t for t in texts if not isinstance(getattr(t, "text", t), str)]  # a str, or an output with .text
        if odd and not self._warned:  # once: a policy that does it once does it every call
            self._warned = True
            log.warning("%s: respond() returned %s where a text belongs; the env plays it as an empty action "
                        "(its transcript says so). Return a str for every conversation", self.name, _kind(odd[0]))
        return list(texts)

    @property
    def last_usage(self):
        return getattr(self.policy, "last_usage", None)


def checked(source: Any, name: str) -> Any:
    """`source` (a TextPolicy, a `Team`, or a factory env -> either) with every policy in it a `CheckedPolicy`;
    a factory's own exception, or a result that is no policy, is a `PolicyError` naming `name` too."""
    if isinstance(source, (Team, TextPolicy)) or not callable(source):
        return _checked_policy(source, name)

    def build(env: Any) -> Any:
        try:
            built = source(env)
        except MappaError:
            raise
        except Exception as e:
            raise PolicyError(f"{name}: building the policy raised {_brief(e)}", name) from e
        return _checked_policy(built, name)

    return build


def _checked_policy(policy: Any, name: str) -> Any:
    if isinstance(policy, Team):
        members = policy.policies
        if isinstance(members, Mapping):
            return Team({role: CheckedPolicy(p, f"{name} ({role})") for role, p in members.items()})
        return Team(CheckedPolicy(members, name))
    return CheckedPolicy(policy, name)


def _brief(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


def _kind(value: Any) -> str:
    return "None" if value is None else f"a {type(value).__name__}"

