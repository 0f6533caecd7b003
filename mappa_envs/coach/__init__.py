"""Coaches that score each agent action 0-10: `RuleCoach` (offline), `LLMCoach`, `CachedCoach`.

`make_coach(spec, settings, cache)` builds any of them from one spec vocabulary ("rule", a preset,
"MODEL@BASE_URL", ...; see `mappa_envs.coach.factory`). Importing this package does not import
`openai`; `LLMCoach` imports it on its first call.
"""
from mappa_envs.coach.cache import CachedCoach
from mappa_envs.coach.config import PRESETS, CoachConfigError, LLMCoachConfig
from mappa_envs.coach.factory import make_coach
from mappa_envs.coach.llm import CoachError, CoachUsage, LLMCoach
from mappa_envs.coach.parse import parse_score
from mappa_envs.coach.rule import RuleCoach
from mappa_envs.coach.types import Coach, CoachRequest, CoachScore

__all__ = ["Coach", "CoachRequest", "CoachScore", "RuleCoach", "LLMCoach", "LLMCoachConfig", "CoachUsage",
           "CoachError", "CoachConfigError", "PRESETS", "CachedCoach", "make_coach", "parse_score"]
