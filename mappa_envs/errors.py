class MappaError(Exception):
    """An error whose message is a complete, one-line explanation for the user."""
