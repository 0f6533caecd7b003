"""Coaches that score each agent action 0-10: `RuleCoach` (offline), `LLMCoach`, `CachedCoach`."""
from mappa_envs.coach.rule import RuleCoach
from mappa_envs.coach.types import Coach, CoachRequest, CoachScore

__all__ = ["Coach", "CoachRequest", "CoachScore", "RuleCoach"]
