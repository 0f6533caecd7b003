"""Text that leaves the sandbox: always valid UTF-8, never a terminal control sequence.

`safe_text` is for free text (stdout, stderr, error lines, any other untrusted string): it keeps
newlines and tabs and escapes, as visible backslash sequences,
- bytes that are not UTF-8 (`\\xNN`, the raw byte) and lone surrogates (`\\udNNN`),
- C0 controls but newline and tab (`\\r`; NUL, ESC and so ANSI sequences, backspace, ... as `\\xNN`),
  DEL and C1 controls,
- Unicode characters that reorder or break lines when rendered (bidi controls, U+2028/U+2029).
It is idempotent, so applying it twice is harmless; it is not reversible (a cell can print a literal
backslash-x too).

`safe_name` / `raw_name` are the same escaping for file names, made reversible: backslashes, newlines
and tabs are escaped as well, so every raw name (bytes) has exactly one str form and back. Names that
are printable UTF-8 without a backslash, i.e. nearly all, are unchanged.
"""
from __future__ import annotations

import re

from mappa_envs.errors import InputError

_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE_TEXT = re.compile(f"[{_CONTROLS}]")
_UNSAFE_NAME = re.compile(f"[{_CONTROLS}\\\\\t\n]")
_ESCAPE = re.compile(r"\\(?:x([0-9a-f]{2})|u([0-9a-f]{4})|([\\nrt]))|\\")
_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\"}
_LONG = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\"}


def _escape(m: re.Match) -> str:
    if m.group() in _SHORT:
        return _SHORT[m.group()]
    c = ord(m.group())
    if 0xDC80 <= c <= 0xDCFF:  # a byte that was not UTF-8 (decoded with surrogateescape)
        return f"\\x{c - 0xDC00:02x}"
    return f"\\x{c:02x}" if c < 0x80 else f"\\u{c:04x}"


def safe_text(s: str | bytes) -> str:
    """Untrusted text (or bytes, read as UTF-8) made safe to show, log, tokenize or put in a prompt."""
    if isinstance(s, (bytes, bytearray, memoryview)):
        s = bytes(s).decode("utf-8", "surrogateescape")
    elif not isinstance(s, str):
        raise TypeError(f"safe_text takes str or bytes, got {type(s).__name__}")
    return _UNSAFE_TEXT.sub(_escape, s) if _UNSAFE_TEXT.search(s) else s


def safe_name(raw: bytes | str) -> str:
    """The str form of a file name (raw bytes, or a str from os.fsdecode): escaped, reversible."""
    s = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
    return _UNSAFE_NAME.sub(_escape, s) if _UNSAFE_NAME.search(s) else s


def raw_name(name: str) -> bytes:
    """The raw bytes a `safe_name` form stands for; ValueError on a backslash that is not an escape."""
    if "\\" not in name:
        return name.encode("utf-8", "surrogateescape")
    out, pos = bytearray(), 0
    for m in _ESCAPE.finditer(name):
        out += name[pos : m.start()].encode("utf-8", "surrogateescape")
        byte, char, short = m.groups()
        if byte is not None:
            out.append(int(byte, 16))
        elif char is not None:
            out += chr(int(char, 16)).encode("utf-8", "surrogatepass")
        elif short is not None:
            out += _LONG[short]
        else:
            raise InputError(f"path {name!r} has a backslash that is not an escape; write a backslash in a "
                             "name as '\\\\' (the form list_files returns)")
        pos = m.end()
    return bytes(out + name[pos:].encode("utf-8", "surrogateescape"))
