"""Untrusted text (agent actions, tool output, file names) made safe to put into prompts and logs.

- `safe_text` (the sandbox's, `mappa_envs.sandbox.text`): valid UTF-8 whatever came in (lone
  surrogates and undecodable bytes become visible escapes), control characters escaped except newline
  and tab (a `\\r` shows as the two characters backslash-r). Tokenizers, JSON writers and terminals
  then never see a surrogate, an ANSI sequence or a carriage return.
- `one_line`: `safe_text` with newlines escaped too (for values shown inside a trusted line).
- `sanitized`: `safe_text` applied to every string in a JSON-like value.
- `clip`: cut a long text to its head and tail (errors usually sit at the end).
- `indent`: every line shifted right, so untrusted text can never start a line of its own (the
  env's headings always start at column 0).
- `fence_mark` / `fenced`: quote text between a BEGIN and an END line carrying a mark derived from
  the text itself (a hash). To forge an END line a text would have to contain the hash of itself,
  so it cannot close the quote or open a section of its own; the mark is also checked and
  re-derived in the (astronomically unlikely) case the text contains it. Deterministic: the same
  text gives the same prompt, which seeded comparisons and prompt caches rely on. The mark is
  letters only (the digest's hex digits spelt a-p): an agent reading figures out of its prompt (a
  printed result, a problem's numbers) never sees the fences' 64 random bits as more digits.
"""
from __future__ import annotations

import hashlib
from typing import Any

from mappa_envs.sandbox.text import safe_text  # the one sanitizer, for all untrusted text

_MARK_CHARS = 16
_LETTERS = str.maketrans("0123456789abcdef", "abcdefghijklmnop")


def one_line(value: str | bytes) -> str:
    """`safe_text` on one line: newlines and tabs escaped as well (any object: its str())."""
    text = safe_text(value if isinstance(value, (str, bytes)) else str(value))
    return text.replace("\n", "\\n").replace("\t", "\\t")


def sanitized(value):
    """`value` with `safe_text` applied to every str in it (dict keys, list items), for JSON-like data."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {sanitized(k) if isinstance(k, str) else k: sanitized(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitized(v) for v in value]
    return value


def clip(text: str, limit: int) -> str:
    """`text` if it fits in `limit` characters, else its head and tail with a note of what was cut."""
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def indent(text: str, prefix: str = "    ") -> str:
    """Every line of `safe_text(text)` behind `prefix`."""
    return "\n".join(prefix + line for line in safe_text(text).split("\n"))


def fence_mark(*texts: str) -> str:
    """A mark none of `texts` contains, derived from their content (see the module docstring)."""
    data = "\x00".join(texts).encode("utf-8", errors="backslashreplace")
    digest = hashlib.sha256(data).hexdigest().translate(_LETTERS)
    for start in range(0, len(digest) - _MARK_CHARS + 1):
        mark = digest[start:start + _MARK_CHARS]
        if not any(mark in t for t in texts):
            return mark
    return fence_mark(digest, *texts)  # every window of the digest occurs in the texts: hash again


def fenced(text: str, mark: str) -> str:
    """`text` between `<<<BEGIN mark>>>` and `<<<END mark>>>` lines (`text` must not contain `mark`)."""
    if mark in text:
        raise ValueError("the fence mark occurs in the text it fences; derive it with fence_mark(text)")
    return f"<<<BEGIN {mark}>>>\n{text}\n<<<END {mark}>>>"


__all__ = ["clip", "fence_mark", "fenced", "indent", "one_line", "safe_text", "sanitized"]


def clean_action(action: Any, max_chars: int) -> tuple[str, str | None]:
    """Any action as valid text at most `max_chars` long, and what had to be done to it (None: nothing).
    Problems are reported, never raised: an env puts the note in infos and goes on."""
    if isinstance(action, (bytes, bytearray)):
        action = bytes(action).decode("utf-8", errors="replace")
    if not isinstance(action, str):
        return "", f"action must be a str, got {type(action).__name__}; treated as an empty action"
    notes = []
    if len(action) > max_chars:
        notes.append(f"action of {len(action)} chars cut to max_action_chars={max_chars}")
        action = action[:max_chars]
    if "\x00" in action:
        action = action.replace("\x00", "")
        notes.append("NUL characters removed")
    clean = safe_text(action)
    if clean != action.replace("\r\n", "\n"):
        notes.append("invalid UTF-8 (lone surrogates) or control characters escaped")
    if not clean.strip():
        notes = notes or ["empty action"]
    return clean, "; ".join(notes) or None
