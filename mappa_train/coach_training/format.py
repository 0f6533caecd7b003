"""One labelled action as the LLM coach sees it and as it should answer.

The prompt is exactly `LLMCoach`'s (`coach_messages` with the env's template), and the target reply is
in the format that prompt asks for: the JSON object of the structured schema, or the RATIONALE/SCORE
lines of the text format. `parse_reply` reads the target back to the label's score (tested), so a
judge that learns the target answers in a form the coach accepts.
"""
from __future__ import annotations

import json

from mappa_envs.coach.prompts import coach_messages, load_template
from mappa_envs.coach.types import CoachRequest

REPLY_FORMATS = ("json", "text")
MAX_FIELD_CHARS = 8000  # LLMCoachConfig's default: the prompt a served judge is sent


def prompt_messages(request: CoachRequest, reply: str = "json", max_field_chars: int = MAX_FIELD_CHARS) -> list[dict]:
    """The chat messages LLMCoach sends for `request` (structured output when `reply` is "json")."""
    return coach_messages(load_template(request.env_id), request, max_field_chars, structured=reply == "json")


def target_reply(score: float, rationale: str, reply: str = "json") -> str:
    """The verdict `score` (0-10) with `rationale`, written as the coach's prompt asks for it."""
    value = round(float(score), 1)
    value = int(value) if value.is_integer() else value
    rationale = " ".join(rationale.split())
    if reply == "json":
        return json.dumps({"rationale": rationale, "score": value}, ensure_ascii=False)
    return f"RATIONALE: {rationale or '-'}\nSCORE: {value}"
