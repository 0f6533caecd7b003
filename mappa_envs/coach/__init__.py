"""Coaches that score each agent action 0-10: `RuleCoach` (offline), `LLMCoach`, `CachedCoach`.

Importing this package does not import `openai`; `LLMCoach` imports it on its first call.
"""
from mappa_envs.coach.cache import CachedCoach
from mappa_envs.coach.llm import PRESETS, CoachError, CoachUsage, LLMCoach, LLMCoachConfig
from mappa_envs.coach.parse import parse_score
from mappa_envs.coach.rule import RuleCoach
from mappa_envs.coach.types import Coach, CoachRequest, CoachScore

__all__ = ["Coach", "CoachRequest", "CoachScore", "RuleCoach", "LLMCoach", "LLMCoachConfig", "CoachUsage",
           "CoachError", "PRESETS", "CachedCoach", "parse_score"]
