"""User-facing errors.

A `UserError` is a mistake the user can fix (a missing data file, an unknown model, a bad config
value). Command-line entry points print its message on one line and exit with code 2; they never
show a traceback for it. Programming errors stay ordinary exceptions.
"""


class UserError(Exception):
    """A problem the user can fix; the message says what is wrong and how to fix it."""

    exit_code = 2
