"""Rollouts: B environments at once, one batched generate call per policy per round, token-exact.

    rollout = collect(envs, generator, SamplingParams(max_new_tokens=256),
                      episodes=[{"seed": 1, "options": {"task_index": 0}}, ...])
    rollout.transitions   # one per action, ready for the learner

A round: every env waiting for an action contributes its agent's prompt; the prompts of each policy
go to that policy's generator in one `generate` call; then all the envs `step()` at once in a thread
pool, so sandbox and coach latency overlap across envs. An env whose episode ends takes the next
entry of `episodes` (its `reset` kwargs) until none are left.

Token-in, token-out. The first prompt of an agent's turn is its chat messages
(`infos[agent]["messages"]`) rendered by the chat template. A later prompt in the same turn (a tool
using agent that saw its code's output) is the previous prompt + the sampled action ids + the tokens
of only the new messages, so the learner trains on exactly the ids that were sampled, in exactly the
context they were sampled in; earlier text is never re-tokenized.

Only the public PettingZoo AEC API is used: reset, step, agent_selection, agents, possible_agents,
terminations, truncations, infos.
"""
from __future__ import annotations

import random
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from mappa_train.generation import Generation, Generator, SamplingParams, chat_prompt_ids


@dataclass
class Transition:
    """One action: the unit the learner trains on."""

    role: str
    policy: str  # name of the policy (generator) that sampled it
    prompt_ids: list[int]
    action_ids: list[int]  # exactly the sampled ids, stop token included
    logprobs: list[float]  # the generator's logprob of each action id
    coach_reward: float  # the env's reward for this action (the coach score, 0-10)
    coach_ok: bool
    outcome_reward: float  # the episode's ground-truth score in [0, 1], the same for all its actions
    episode_id: int
    action_index: int  # position in the episode (counting dropped actions)
    turn_index: int  # position within the role's turn
    task_id: str


@dataclass
class EpisodeStats:
    episode_id: int
    task_id: str
    score: float | None  # infos[agent]["outcome"]["score"]
    correct: bool | None
    actions: int
    dropped: int  # actions whose coach verdict was ok=False
    truncated: bool
    stopped: bool = False  # ended early by `collect(stop_episode=...)`: no outcome, counted as failed


@dataclass
class Rollout:
    transitions: list[Transition]
    episodes: list[EpisodeStats]
    dropped: int  # coach failures (ok=False): not in `transitions`
    overflow: int  # prompts over max_prompt_tokens: an empty action was sent, not trained on
    generate_calls: dict[str, int]  # policy -> number of generate() calls
    rounds: int
    generate_s: float  # wall time inside generate()
    env_s: float  # wall time of the parallel reset/step phases (sandbox + coach)
    env_busy_s: float  # summed time of every reset/step: env_busy_s / env_s is the overlap achieved
    wall_s: float

    def timing(self) -> dict[str, float]:
        return {"generate_s": self.generate_s, "env_s": self.env_s, "env_busy_s": self.env_busy_s,
                "wall_s": self.wall_s}


@dataclass
class _Slot:
    """One env and the state of the episode it is running."""

    env: Any
    episode_id: int = -1
    task_id: str = ""
    prompts: dict[str, list[int]] = field(default_factory=dict)  # agent -> its current prompt ids
    seen: dict[str, int] = field(default_factory=dict)  # agent -> messages its prompt covers
    turn_index: dict[str, int] = field(default_factory=dict)
    last_actor: str | None = None
    stop_token: int | None = None  # the stop token that ended the last action, if one did
    actions: int = 0
    dropped: int = 0
    pending: list[Transition] = field(default_factory=list)
    stats: EpisodeStats | None = None  # set when the episode ends
    busy_s: float = 0.0
    stop_episode: Any = None  # collect's stop_episode rule


def collect(
    envs: Sequence[Any],
    policies: Generator | Mapping[str, Generator],
    params: SamplingParams,
    episodes: Sequence[dict],
    role_policy: Mapping[str, str] | None = None,
    seed: int = 0,
    max_prompt_tokens: int | None = None,
    first_episode_id: int = 0,
    workers: int | None = None,
    stop_episode: Callable[[Transition], bool] | None = None,
) -> Rollout:
    """Run `len(episodes)` episodes on `envs` (B = len(envs) at once) and return their transitions.

    Args:
        envs: PettingZoo AEC envs whose infos follow `mappa_envs.core.pipeline` (messages, action,
            outcome). They are reset here and left open.
        policies: one Generator for every role, or {policy name: Generator}.
        params: sampling settings; each generate call gets a fresh seed drawn from `seed`.
        episodes: `env.reset(**kwargs)` for each episode, e.g. {"seed": 3, "options": {"task_id": "x"}}.
        role_policy: role -> policy name. Default: each role to the policy of the same name, or to
            the only policy.
        max_prompt_tokens: a longer prompt is not generated for (an empty action is sent and counted
            in `overflow`); set it to the engine's context length minus `max_new_tokens`.
        first_episode_id: episode ids count up from here.
        workers: threads running env.reset/step concurrently (default: one per env).
        stop_episode: curriculum filtering: an episode ends right after an action for which this
            returns True (a doomed episode: no later generation or coach call is spent on it). Its
            outcome is then unknown: `EpisodeStats.stopped`, not correct, outcome reward 0.
    """
    if not envs:
        raise ValueError("collect needs at least one env")
    policies = policies if isinstance(policies, Mapping) else {"shared": policies}
    route = _route(policies, role_policy, envs[0].possible_agents)
    rng = random.Random(seed)
    queue = deque((first_episode_id + i, spec) for i, spec in enumerate(episodes))
    slots = [_Slot(env, stop_episode=stop_episode) for env in envs]
    out = Rollout([], [], 0, 0, {name: 0 for name in policies}, 0, 0.0, 0.0, 0.0, 0.0)
    started = time.perf_counter()

    with ThreadPoolExecutor(max_workers=workers or len(envs)) as pool:
        _parallel(pool, out, [(_start, s, queue.popleft()) for s in slots if queue])
        while True:
            active = [s for s in slots if s.episode_id >= 0]
            if not active:
                break
            out.rounds += 1
            waiting = [(s, s.env.agent_selection) for s in active]
            for s, agent in waiting:
                _refresh_prompt(s, agent, policies[route[agent]].tokenizer)
            actions = _generate(policies, route, waiting, params, rng, max_prompt_tokens, out)
            _parallel(pool, out, [(_act, s, (a, route[a], g)) for (s, a), g in zip(waiting, actions)])
            ended = [s for s in active if s.stats is not None]
            for s in ended:  # bank the episode; the env takes the next one, if any
                out.episodes.append(s.stats)
                out.transitions += s.pending
                out.dropped += s.dropped
                s.episode_id = -1
            _parallel(pool, out, [(_start, s, queue.popleft()) for s in ended if queue])
    out.wall_s = time.perf_counter() - started
    out.episodes.sort(key=lambda e: e.episode_id)
    out.transitions.sort(key=lambda t: (t.episode_id, t.action_index))
    return out


def _generate(policies: Mapping[str, Generator], route: dict[str, str], waiting: list[tuple[_Slot, str]],
              params: SamplingParams, rng: random.Random, max_prompt_tokens: int | None,
              out: Rollout) -> list[Generation | None]:
    """One generate call per policy for all its waiting agents; None where the prompt is too long."""
    actions: list[Generation | None] = [None] * len(waiting)
    for name, gen in policies.items():
        mine = [i for i, (s, a) in enumerate(waiting) if route[a] == name
                and (max_prompt_tokens is None or len(s.prompts[a]) <= max_prompt_tokens)]
        if not mine:
            continue
        t0 = time.perf_counter()
        results = gen.generate([waiting[i][0].prompts[waiting[i][1]] for i in mine],
                               replace(params, seed=rng.randrange(2**31)))
        out.generate_s += time.perf_counter() - t0
        out.generate_calls[name] += 1
        for i, g in zip(mine, results):
            actions[i] = g
    out.overflow += actions.count(None)
    return actions


def _route(policies: Mapping[str, Generator], role_policy: Mapping[str, str] | None, roles: list[str]) -> dict[str, str]:
    if role_policy is None:
        if set(roles) <= set(policies):
            role_policy = {r: r for r in roles}
        elif len(policies) == 1:
            role_policy = {r: next(iter(policies)) for r in roles}
        else:
            raise ValueError(f"give role_policy: the roles {roles} are not all policy names {sorted(policies)}")
    missing = [r for r in roles if r not in role_policy]
    unknown = sorted({p for p in role_policy.values() if p not in policies})
    if missing or unknown:
        raise ValueError(f"role_policy must map every role {roles} to one of the policies {sorted(policies)}; "
                         f"roles without a policy: {missing}, unknown policies: {unknown}")
    return dict(role_policy)


def _parallel(pool: ThreadPoolExecutor, out: Rollout, calls: list[tuple]) -> None:
    """Run `fn(slot, arg)` for each call concurrently; add the phase's wall time to `out.env_s`."""
    if not calls:
        return
    t0 = time.perf_counter()
    for future in [pool.submit(_timed, fn, slot, arg) for fn, slot, arg in calls]:
        future.result()
    out.env_s += time.perf_counter() - t0
    out.env_busy_s += sum(slot.busy_s for _, slot, _ in calls)
    for _, slot, _ in calls:
        slot.busy_s = 0.0


def _timed(fn, slot: _Slot, arg) -> None:
    t0 = time.perf_counter()
    fn(slot, arg)
    slot.busy_s += time.perf_counter() - t0


def _start(slot: _Slot, item: tuple[int, dict]) -> None:
    episode_id, reset_kwargs = item
    slot.env.reset(**reset_kwargs)
    agent = slot.env.agent_selection
    slot.episode_id = episode_id
    slot.task_id = str(slot.env.infos[agent].get("task_id", ""))
    slot.prompts, slot.seen, slot.turn_index = {}, {}, {}
    slot.last_actor, slot.stop_token, slot.actions, slot.dropped, slot.pending, slot.stats = None, None, 0, 0, [], None


def _refresh_prompt(slot: _Slot, agent: str, tokenizer) -> None:
    """Set `slot.prompts[agent]` for the action the agent is about to take."""
    messages = slot.env.infos[agent]["messages"]
    seen = slot.seen.get(agent, 0)
    continuing = (slot.last_actor == agent and len(messages) > seen
                  and messages[seen]["role"] == "assistant")
    if continuing:  # the agent saw its tool output: extend its own tokens with the new messages only
        slot.prompts[agent] = slot.prompts[agent] + appended_ids(tokenizer, messages[seen + 1:], slot.stop_token)
        slot.turn_index[agent] += 1
    else:
        slot.prompts[agent] = chat_prompt_ids(tokenizer, messages)
        slot.turn_index[agent] = 0
    slot.seen[agent] = len(messages)


def _act(slot: _Slot, arg: tuple[str, str, Generation | None]) -> None:
    """Step the env with the agent's action; record the transition; finish the episode if it ended."""
    agent, policy, gen = arg
    env = slot.env
    prompt = slot.prompts[agent]
    env.step(gen.text if gen is not None else "")
    info = env.infos[agent]["action"]
    coach = info.get("coach")
    ok = coach is None or bool(coach.get("ok", True))
    transition = None
    if gen is not None and ok:
        transition = Transition(
            role=agent, policy=policy, prompt_ids=prompt, action_ids=list(gen.token_ids),
            logprobs=list(gen.logprobs), coach_reward=float(info["reward"]), coach_ok=ok, outcome_reward=0.0,
            episode_id=slot.episode_id, action_index=slot.actions, turn_index=slot.turn_index[agent],
            task_id=slot.task_id)
        slot.pending.append(transition)
    slot.dropped += not ok
    slot.actions += 1
    slot.last_actor = agent
    slot.prompts[agent] = prompt + (list(gen.token_ids) if gen is not None else [])
    slot.stop_token = gen.token_ids[-1] if gen is not None and gen.finish_reason == "stop" else None
    if env.agents and all(env.terminations[a] or env.truncations[a] for a in env.agents):
        _finish(slot)
    elif transition is not None and slot.stop_episode is not None and slot.stop_episode(transition):
        # curriculum filtering: the env is left mid-episode; its next reset starts a fresh one
        slot.stats = EpisodeStats(slot.episode_id, slot.task_id, None, False, slot.actions, slot.dropped, False, True)


def _finish(slot: _Slot) -> None:
    env = slot.env
    outcome = env.infos[env.agents[0]].get("outcome") or {}
    truncated = any(env.truncations[a] for a in env.agents)
    while env.agents:  # AEC: every done agent is stepped out with None
        env.step(None)
    score = outcome.get("score")
    for t in slot.pending:
        t.outcome_reward = float(score or 0.0)
    slot.stats = EpisodeStats(slot.episode_id, slot.task_id, score, outcome.get("correct"), slot.actions,
                              slot.dropped, truncated)


# --- appending tokens for a continuing turn ---------------------------------------------------------

_SENTINEL = "\u2063MAPPA-ACTION\u2063"
_BASE = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
         {"role": "assistant", "content": _SENTINEL}]


def appended_ids(tokenizer, new_messages: list[dict], stop_token: int | None) -> list[int]:
    """Tokens that follow a sampled action when `new_messages` join the chat and the assistant is
    prompted again: the template's end of the assistant turn (minus the stop token the model already
    sampled), the new messages, and the opening of the next assistant turn. Only this text is
    tokenized; it is found by rendering the template around a fixed stand-in conversation.
    """
    base = tokenizer.apply_chat_template(_BASE, tokenize=False)
    full = tokenizer.apply_chat_template(_BASE + list(new_messages), tokenize=False, add_generation_prompt=True)
    if not full.startswith(base):
        raise ValueError("the chat template renders earlier turns differently once messages are added; "
                         "token-exact appending needs a template that only appends (e.g. ChatML)")
    end_of_turn = base[base.rindex(_SENTINEL) + len(_SENTINEL):]
    if stop_token is not None:
        stop_text = tokenizer.decode([stop_token], skip_special_tokens=False)
        if stop_text and end_of_turn.startswith(stop_text):
            end_of_turn = end_of_turn[len(stop_text):]
    return tokenizer.encode(end_of_turn + full[len(base):], add_special_tokens=False)
