"""The project's own error types: their message is the whole story for the user, in one line."""
from __future__ import annotations


class MappaError(Exception):
    """An error whose message is a complete, one-line explanation for the user."""
