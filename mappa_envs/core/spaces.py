"""A Text space for LLM text: any unicode string is a member; samples draw from a wide charset."""
from __future__ import annotations

import string
from typing import Any

from gymnasium.spaces import Dict, Text

# Sampling charset: printable ASCII, newlines and tabs, Latin-1, Greek, arrows, math operators, a few CJK.
SAMPLE_CHARSET = "".join(
    [string.printable]
    + [chr(c) for c in range(0xA1, 0x100)]
    + [chr(c) for c in range(0x391, 0x3CA)]
    + [chr(c) for c in range(0x2190, 0x2200)]
    + [chr(c) for c in range(0x2200, 0x2300)]
    + [chr(c) for c in range(0x4E00, 0x4E40)]
)


class LLMText(Text):
    """`Text` whose members are all strings up to `max_length` (LLM output is arbitrary unicode).

    gymnasium's `Text.contains` only admits characters of its charset; model output can hold any code
    point, so membership here checks type and length only. `sample()` still uses `SAMPLE_CHARSET`.
    """

    def __init__(self, max_length: int, seed: Any = None):
        super().__init__(max_length=max_length, min_length=0, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"LLMText(max_length={self.max_length})"


def prompt_space(max_length: int) -> Dict:
    """The observation space: `{"prompt": text}` (a Dict so PettingZoo's api_test accepts it)."""
    return Dict({"prompt": LLMText(max_length)})
