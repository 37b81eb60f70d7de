"""Errors the CLI turns into one-line messages instead of tracebacks."""


class ApplianceError(Exception):
    """An expected failure: the message says what went wrong and what to do next."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(ApplianceError):
    """Malformed input file (lock, profile, trace header): exit status 2."""

    exit_code = 2


class IntegrityError(ApplianceError):
    """A digest or identity did not match what was pinned: exit status 3."""

    exit_code = 3
