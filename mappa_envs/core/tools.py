"""Tool calls inside an action: fenced Python blocks, ignoring any that sit inside `<think>`."""
from __future__ import annotations

import re

from mappa_envs.core.untrusted import indent, one_line

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\r?\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def strip_think(text: str) -> str:
    """Drop `<think>...</think>` spans (an unclosed `<think>` runs to the end of the text)."""
    return _THINK.sub("", text)


def extract_code_blocks(text: str) -> list[str]:
    """The ```python (or ```py) blocks of `text`, in order, outside `<think>` spans.

    An unclosed final fence counts as a block: models often stop generating before the closing ```.
    """
    return [block.strip("\n") for block in _FENCE.findall(strip_think(text)) if block.strip()]


def format_tool_output(results: list) -> str:
    """Render ExecResults as the text the agent reads after its action.

    Each cell gets a `[cell N] ok` / `[cell N] error: ...` line at column 0; what the cell printed
    follows indented by four spaces, so no printed line can pose as another cell's header (or any
    heading of the env's): every line the env writes starts at column 0, none the cell writes does.
    """
    parts = []
    for i, r in enumerate(results, 1):
        head = f"[cell {i}] " + ("ok" if r.ok else f"error: {one_line(r.error or 'failed')}")
        body = "\n".join(s for s in (r.stdout.rstrip("\n"), r.stderr.rstrip("\n")) if s)
        parts.append(head + ("\n" + indent(body) if body else "\n(no output)"))
    return "\n\n".join(parts)
