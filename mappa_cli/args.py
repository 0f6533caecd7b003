"""Argument types shared by the subcommands: each rejects a bad value with a one-line reason."""
from __future__ import annotations

import argparse
import math
import re

from mappa_cli.errors import UsageError


def positive_int(text: str) -> int:
    value = _number(text, int)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value:g}")
    return value


def unit_float(text: str) -> float:
    """A number in [0, 1] (a rate, a probability)."""
    value = _number(text, float)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {value:g}")
    return value


def key_values(pairs: list[str], flag: str, example: str) -> dict[str, str]:
    """Repeated `--flag KEY=VALUE` arguments as {KEY: VALUE} (values stay text; the consumer types them)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} {pair!r}: expected KEY=VALUE, e.g. {flag} {example}")
        out[key.strip()] = value
    return out


def load_factory(target: str, what: str, expected: str = "expected 'package.module:factory'"):
    """The object `target` ("package.module:name") names, or a one-line error saying why it cannot be had."""
    from mappa_envs.registration import resolve

    return resolve(target, what, UsageError, expected)


def run_name(text: str) -> str:
    """A run's folder name under --out: one path component, never a way out of it."""
    if not re.fullmatch(r"[A-Za-z0-9][\w.+-]{0,79}", text):
        raise argparse.ArgumentTypeError(f"must be a folder name (letters, digits, _ . + -, at most 80), got {text!r}")
    return text


def _number(text: str, kind: type):
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or (kind is float and not math.isfinite(value)):
        what = "an integer" if kind is int else "a finite number"
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    return value
