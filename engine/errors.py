"""User-facing errors: one clear line, exit status 2, no traceback."""

from __future__ import annotations


class PhoenixError(Exception):
    """An error caused by input the user can fix. The message says how; ``field`` names the config field it is
    about (``max_new_tokens``, ``suffix.min_prob``) so a form can put it beside that field."""

    exit_code = 2

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field
