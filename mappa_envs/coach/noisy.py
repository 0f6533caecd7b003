"""NoisyCoach: a coach with a known error rate, for measuring how process rewards degrade with coach quality.

With probability `epsilon` per action the wrapped coach's verdict is corrupted:
- `mode="flip"`: the verdict is turned over: score s becomes 10 - s (a good action scores badly and
  the reverse) and `answer_correct` is negated;
- `mode="random"`: the score is drawn uniformly from [0, 10] (a judge that did not look).

Whether an action is corrupted, and the random score, are drawn from a generator seeded by `seed` and
the request's content (env, role, task, what the agent saw, its action, its position), not by call
order: concurrent episodes, retries and cache hits give the same verdict for the same action. A
verdict the coach could not give (`ok=False`) is passed on untouched. The spec word is
`rule:noise=EPS[,mode=flip|random][,seed=N]` (`make_coach`, and `coach=` of any env).
"""
from __future__ import annotations

import random
from dataclasses import replace

from mappa_envs.coach.config import CoachConfigError
from mappa_envs.coach.types import Coach, CoachRequest, CoachScore
from mappa_envs.seeding import digest_seed

MODES = ("flip", "random")


class NoisyCoach:
    """Wraps `coach`; see the module docstring."""

    def __init__(self, coach: Coach, epsilon: float, mode: str = "flip", seed: int = 0):
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 <= epsilon <= 1:
            raise CoachConfigError(f"noise must be a number in [0, 1], got {epsilon!r}")
        if mode not in MODES:
            raise CoachConfigError(f"noise mode {mode!r} is not one of {MODES}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise CoachConfigError(f"noise seed must be an integer, got {seed!r}")
        self.coach, self.epsilon, self.mode, self.seed = coach, float(epsilon), mode, seed
        self.name = f"{getattr(coach, 'name', type(coach).__name__)}+noise{self.epsilon:g}-{mode}"

    def cache_identity(self, request: CoachRequest) -> str:
        has = hasattr(self.coach, "cache_identity")
        inner = self.coach.cache_identity(request) if has else type(self.coach).__name__
        return f"{inner}/noise={self.epsilon!r},{self.mode},{self.seed}"

    def score(self, request: CoachRequest) -> CoachScore:
        return self.corrupt(request, self.coach.score(request))

    async def ascore(self, request: CoachRequest) -> CoachScore:
        return self.corrupt(request, await self.coach.ascore(request))

    def corrupt(self, request: CoachRequest, verdict: CoachScore) -> CoachScore:
        """`verdict`, corrupted at rate `epsilon` (seeded by the request's content)."""
        if not verdict.ok or verdict.score is None:
            return verdict
        rng = random.Random(self._key(request))
        if rng.random() >= self.epsilon:
            return verdict
        if self.mode == "flip":
            flipped = None if verdict.answer_correct is None else not verdict.answer_correct
            return replace(verdict, score=10.0 - verdict.score, answer_correct=flipped,
                           rationale=f"[noise: verdict flipped] {verdict.rationale}")
        return replace(verdict, score=round(rng.uniform(0.0, 10.0), 3),
                       rationale=f"[noise: random score] {verdict.rationale}")

    def _key(self, r: CoachRequest) -> int:
        return digest_seed(self.seed, r.env_id, r.role, r.task, r.context, r.action, r.action_index)


def rule_coach_from_spec(spec: str) -> Coach:
    """`"rule"`, or `"rule:noise=EPS[,mode=flip|random][,seed=N]"` (a `NoisyCoach` around the rule coach)."""
    from mappa_envs.coach.rule import RuleCoach

    name, _, options = spec.partition(":")
    if name != "rule":
        raise CoachConfigError(f"coach {spec!r} is not a rule coach spec")
    if not options:
        return RuleCoach()
    fields: dict[str, str] = {}
    for part in options.split(","):
        key, eq, value = part.partition("=")
        if not eq or key.strip() not in ("noise", "mode", "seed") or key.strip() in fields:
            raise CoachConfigError(f"coach {spec!r}: expected rule:noise=EPS[,mode=flip|random][,seed=N]")
        fields[key.strip()] = value.strip()
    if "noise" not in fields:
        raise CoachConfigError(f"coach {spec!r}: give noise=EPS, e.g. rule:noise=0.2")
    try:
        epsilon, seed = float(fields["noise"]), int(fields.get("seed", "0"))
    except ValueError:
        raise CoachConfigError(f"coach {spec!r}: noise must be a number and seed an integer") from None
    return NoisyCoach(RuleCoach(), epsilon, fields.get("mode", "flip"), seed)


__all__ = ["MODES", "NoisyCoach", "rule_coach_from_spec"]
