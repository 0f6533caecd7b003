"""Rollouts: B environments at once through the episode driver, token-exact.

    rollout = collect(envs, generator, SamplingParams(max_new_tokens=256),
                      episodes=[{"seed": 1, "options": {"task_index": 0}}, ...])
    rollout.transitions   # one per action, ready for the learner

The scheduling (batched generate calls, env steps in a thread pool, no env waiting on a slower
one, failed episodes counted and skipped) is `mappa_envs.driver.Driver`'s. This module adds only
the token bookkeeping: `TokenActor` turns each request into prompt ids and samples with a
`Generator`, and `collect` turns finished episodes into `Transition`s.

Token-in, token-out. The first prompt of an agent's turn is its chat messages
(`infos[agent]["messages"]`) rendered by the chat template. A later prompt in the same turn (a tool
using agent that saw its code's output) is, by default, the previous prompt + the sampled action ids
+ the tokens of only the new messages (`mappa_train.chat_tokens`), so the learner trains on exactly
the ids that were sampled, in exactly the context they were sampled in.

What was judged: an action cut at max_new_tokens has `finish_reason="length"`; an action the env cut
(its `max_action_chars`, reported in the record's `input_error`) keeps in `judged_tokens` how many
of its ids fall within the text the sandbox and the coach saw.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mappa_envs.coach.types import excused
from mappa_envs.core.records import Outcome
from mappa_envs.driver import Driver, EpisodeResult, Request, Turn
from mappa_train.chat_tokens import ChatFormat, env_cut_chars, judged_prefix
from mappa_train.generation import Generation, Generator, SamplingParams
from mappa_train.health import use_available_cpus


@dataclass
class Transition:
    """One action: the unit the learner trains on."""

    role: str
    policy: str  # name of the policy (generator) that sampled it
    prompt_ids: list[int]
    action_ids: list[int]  # exactly the sampled ids, stop token included
    logprobs: list[float]  # the generator's logprob of each action id
    coach_reward: float  # the env's reward for this action (the coach score, 0-10; 0 in reward_mode="outcome")
    coach_ok: bool
    end_reward: float  # on the role's last action of the episode: what the env paid the role at the end
    outcome_reward: float  # the episode's ground-truth score in [0, 1], the same for all its actions (for logs)
    episode_id: int
    action_index: int  # position in the episode (counting dropped actions)
    turn_index: int  # position within the role's turn
    task_id: str
    finish_reason: str = "stop"  # "length": cut at max_new_tokens
    judged_tokens: int | None = None  # the env cut the action's text: only this many ids were judged
    excused: bool = False  # its inputs were broken upstream (checks["inputs_ready"] False): not its failure


@dataclass
class EpisodeStats:
    episode_id: int
    task_id: str
    score: float | None  # the env's `Outcome.score` (None: the episode has none)
    correct: bool | None
    actions: int
    dropped: int  # actions whose coach verdict was ok=False
    truncated: bool
    error: str | None = None  # the episode failed (nothing of it is trained on)
    stopped: str | None = None  # ended early by the curriculum rule
    answer: str | None = None  # the answer the env extracted and judged (outcome "predicted"), as written


@dataclass
class Rollout:
    transitions: list[Transition]
    episodes: list[EpisodeStats]
    dropped: int  # coach failures (ok=False): not in `transitions`
    overflow: int  # prompts over max_prompt_tokens: an empty action was sent, not trained on
    generate_calls: dict[str, int]  # policy -> number of generate() calls
    rounds: int  # driver iterations that generated (one call per policy with waiting agents)
    generate_s: float  # wall time inside generate()
    env_busy_s: float  # summed time of every reset/step; env_busy_s / wall_s is the overlap achieved
    wall_s: float
    failed: int = 0  # episodes that raised: counted, logged, skipped
    coach_errors: list[str] = field(default_factory=list)  # the first few distinct reasons for `dropped`

    @classmethod
    def empty(cls) -> Rollout:
        return cls([], [], 0, 0, {}, 0, 0.0, 0.0, 0.0)

    @classmethod
    def merge(cls, parts: Sequence[Rollout]) -> Rollout:
        """The rollouts of workers that ran side by side, as one: counts add up, the slowest worker's times."""
        merged = cls.empty()
        for p in parts:
            merged.transitions += p.transitions
            merged.episodes += p.episodes
            merged.dropped += p.dropped
            merged.overflow += p.overflow
            merged.failed += p.failed
            merged.note_coach_errors(p.coach_errors)
            merged.rounds = max(merged.rounds, p.rounds)
            for k, v in p.generate_calls.items():
                merged.generate_calls[k] = merged.generate_calls.get(k, 0) + v
            merged.generate_s = max(merged.generate_s, p.generate_s)
            merged.env_busy_s = max(merged.env_busy_s, p.env_busy_s)
            merged.wall_s = max(merged.wall_s, p.wall_s)
        return merged

    def note_coach_errors(self, errors: Sequence[str], keep: int = 3) -> None:
        """Keep the first `keep` distinct coach errors: a step that loses actions to the coach says why."""
        for error in errors:
            if error not in self.coach_errors and len(self.coach_errors) < keep:
                self.coach_errors.append(error)

    def timing(self) -> dict[str, float]:
        return {"generate_s": self.generate_s, "env_busy_s": self.env_busy_s, "wall_s": self.wall_s}

    def episode_metrics(self) -> dict[str, float]:
        """Accuracy (episodes judged correct), mean outcome score and each role's mean coach score."""
        episodes = self.episodes
        if not episodes:
            return {}
        out = {"accuracy": sum(bool(e.correct) for e in episodes) / len(episodes),
               "score": sum(e.score or 0.0 for e in episodes) / len(episodes), "episodes": float(len(episodes))}
        for role in sorted({t.role for t in self.transitions}):
            mine = [t.coach_reward for t in self.transitions if t.role == role]
            out[f"coach/{role}"] = sum(mine) / len(mine)
        return out

    def counts(self) -> dict[str, float]:
        """What went wrong or short: coach failures, prompt overflows, failed and stopped episodes, and the
        actions the envs took."""
        return {"coach_failures": float(self.dropped), "prompt_overflows": float(self.overflow),
                "episode_failures": float(self.failed), "env_actions": float(sum(e.actions for e in self.episodes)),
                "stopped_episodes": float(sum(e.stopped is not None for e in self.episodes))}


@dataclass
class TokenAction:
    """What `TokenActor` returns for a request: the env gets `text`, the learner the ids."""

    prompt_ids: list[int]
    generation: Generation | None  # None: the prompt was over max_prompt_tokens, an empty action was sent
    turn_index: int

    @property
    def text(self) -> str:
        return self.generation.text if self.generation is not None else ""


@dataclass
class _Context:
    """One agent's token context within an episode."""

    prompt: list[int] = field(default_factory=list)  # the ids of its last prompt + what it sampled
    seen: int = 0  # messages that prompt covers
    turn_index: int = 0
    stop_token: int | None = None  # the stop token that ended its last action, if one did


class TokenActor:
    """A driver `Actor` over a `Generator`: chat-templates each request (extending the agent's own
    token context within a turn), samples with one `generate` call per batch, keeps ids and logprobs."""

    def __init__(self, generator: Generator, params: SamplingParams, max_prompt_tokens: int | None = None,
                 continuation: str = "append"):
        self.generator, self.params, self.max_prompt_tokens = generator, params, max_prompt_tokens
        self.format = ChatFormat.of(generator.tokenizer, continuation)  # refuses a template it cannot handle
        self.contexts: dict[tuple[int, str], _Context] = {}  # (episode, role) -> context
        self.last_role: dict[int, str] = {}  # episode -> the role that acted last
        self.overflow = 0
        self.calls = 0
        self.seconds = 0.0

    def act(self, requests: Sequence[Request]) -> list[TokenAction]:
        prompts = [self._prompt(r) for r in requests]
        fits = [i for i, p in enumerate(prompts) if self.max_prompt_tokens is None or len(p) <= self.max_prompt_tokens]
        generations: list[Generation | None] = [None] * len(requests)
        if fits:
            use_available_cpus()
            seeds = [requests[i].seed for i in fits]
            params = replace(self.params, seeds=tuple(seeds)) if None not in seeds else self.params

            t0 = time.perf_counter()
            for i, g in zip(fits, self.generator.generate([prompts[i] for i in fits], params)):
                generations[i] = g
            self.seconds += time.perf_counter() - t0
            self.calls += 1
        self.overflow += len(requests) - len(fits)
        out = []
        for r, prompt, gen in zip(requests, prompts, generations):
            ctx = self.contexts[(r.episode, r.role)]
            sampled = list(gen.token_ids) if gen is not None else []
            ctx.prompt = prompt + sampled
            ctx.stop_token = sampled[-1] if gen is not None and gen.finish_reason == "stop" and sampled else None
            self.last_role[r.episode] = r.role
            out.append(TokenAction(prompt, gen, ctx.turn_index))
        return out

    def forget(self, episode: int) -> None:
        """Drop an ended episode's contexts."""
        self.last_role.pop(episode, None)
        for key in [k for k in self.contexts if k[0] == episode]:
            del self.contexts[key]

    def _prompt(self, r: Request) -> list[int]:
        """The ids of the prompt for the action `r` asks for."""
        ctx = self.contexts.setdefault((r.episode, r.role), _Context())
        messages = r.messages
        continuing = (self.last_role.get(r.episode) == r.role and len(messages) > ctx.seen and ctx.seen > 0
                      and messages[ctx.seen]["role"] == "assistant")
        if continuing:  # the agent saw its tool output: its next prompt in the same turn
            prompt = self.format.next_prompt_ids(ctx.prompt, messages, ctx.seen, ctx.stop_token)
            ctx.turn_index += 1
        else:
            prompt = self.format.prompt_ids(messages)
            ctx.turn_index = 0
        ctx.seen = len(messages)
        return prompt


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
    schedule: str = "async",
    stop: Callable[[EpisodeResult, Turn], str | None] | None = None,
    continuation: str = "append",
) -> Rollout:
    """Run `len(episodes)` episodes on `envs` (B = len(envs) at once) and return their transitions.

    Args:
        envs: PettingZoo AEC envs whose infos follow `mappa_envs.core.pipeline` (messages, action,
            outcome). They are reset here and left open.
        policies: one Generator for every role, or {policy name: Generator}.
        params: sampling settings. Each action is sampled with its own seed, derived from its
            episode's env seed (see `mappa_envs.driver.action_seed`); `seed` is used for episodes
            given without one.
        episodes: `env.reset(**kwargs)` for each episode, e.g. {"seed": 3, "options": {"task_id": "x"}}.
        role_policy: role -> policy name. Default: each role to the policy of the same name, or to
            the only policy.
        max_prompt_tokens: a longer prompt is not generated for (an empty action is sent and counted
            in `overflow`); set it to the engine's context length minus `max_new_tokens`.
        first_episode_id: episode ids count up from here.
        workers: threads running env.reset/step concurrently (default: one per env).
        schedule: the driver's, "async" or "rounds" (lock-step: the same batches every run).
        stop: the driver's early-stop rule (curriculum filtering), asked after every action.
        continuation: how a later action of a turn is prompted, "append" or "render" (see chat_tokens).
    """
    if not envs:
        raise ValueError("collect needs at least one env")
    policies = policies if isinstance(policies, Mapping) else {"shared": policies}
    actors = {name: TokenActor(gen, params, max_prompt_tokens, continuation) for name, gen in policies.items()}
    jobs = [(spec.get("seed", seed + k), spec.get("options")) for k, spec in enumerate(episodes)]
    driver = Driver(envs, actors, role_policy=role_policy, workers=workers, schedule=schedule, stop=stop)
    out = Rollout.empty()
    for result in driver.play(jobs):
        for actor in actors.values():
            actor.forget(result.episode)
        episode_id = first_episode_id + result.episode
        tokenizers = {name: a.generator.tokenizer for name, a in actors.items()}
        stats = _bank(result, episode_id, route=driver.route, out=out, tokenizers=tokenizers)
        out.episodes.append(stats)
    out.generate_calls = {name: a.calls for name, a in actors.items()}
    out.overflow = sum(a.overflow for a in actors.values())
    out.generate_s = sum(a.seconds for a in actors.values())
    out.rounds, out.env_busy_s, out.wall_s = driver.stats.batches, driver.stats.env_busy_s, driver.stats.wall_s
    out.failed = driver.stats.failures
    out.episodes.sort(key=lambda e: e.episode_id)
    out.transitions.sort(key=lambda t: (t.episode_id, t.action_index))
    return out


def _bank(result: EpisodeResult, episode_id: int, route: Mapping[str, str], out: Rollout,
          tokenizers: Mapping[str, Any]) -> EpisodeStats:
    """Turn a finished episode's turns into transitions (none for a failed one); return its stats."""
    outcome = result.outcome
    dropped = 0
    transitions = []
    for turn in result.turns:
        record = turn.record  # the env's typed ActionRecord
        ok = record.coach is None or record.coach.ok
        dropped += not ok
        action: TokenAction = turn.output
        if action.generation is None or not ok:
            continue
        kept = env_cut_chars(record.input_error)  # characters the env kept, if it cut the action
        tokenizer = tokenizers[route[turn.role]]
        judged = None if kept is None else judged_prefix(tokenizer, action.generation.token_ids, kept)
        transitions.append(Transition(
            role=turn.role, policy=route[turn.role], prompt_ids=action.prompt_ids,
            action_ids=list(action.generation.token_ids), logprobs=list(action.generation.logprobs),
            coach_reward=float(record.reward if record.share is None else record.share),  # backprop: its share
            coach_ok=ok, end_reward=0.0,
            outcome_reward=0.0 if outcome is None else float(outcome.score), episode_id=episode_id,
            action_index=turn.action_index, turn_index=action.turn_index, task_id=str(result.task_id or ""),
            finish_reason=action.generation.finish_reason, judged_tokens=judged,
            excused=excused(record.checks)))
    shared = any(t.record.share is not None for t in result.turns)  # backprop: on each action
    for role, bonus in result.end_rewards.items():  # AEC pays it at the end: credit the role's last action
        mine = [t for t in transitions if t.role == role]
        if mine and not shared:
            mine[-1].end_reward = bonus
    if result.error is None:
        out.transitions += transitions
        out.dropped += dropped
        out.note_coach_errors([str(t.record.coach.error) for t in result.turns
                               if t.record.coach is not None and not t.record.coach.ok])
    return EpisodeStats(episode_id, str(result.task_id or ""), None if outcome is None else outcome.score,
                        None if outcome is None else outcome.correct, len(result.turns), dropped, result.truncated,
                        result.error, result.stopped, _answer(outcome))


def _answer(outcome: Outcome | None) -> str | None:
    """The extracted answer the outcome was judged on, so a log shows what was counted."""
    predicted = None if outcome is None else outcome.details.get("predicted")
    return None if predicted is None else str(predicted)
