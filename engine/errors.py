"""User-facing errors: one clear line, exit status 2, no traceback."""


class PhoenixError(Exception):
    """An error caused by input the user can fix. The message says how."""

    exit_code = 2
