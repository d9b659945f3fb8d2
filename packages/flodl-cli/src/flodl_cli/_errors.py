"""The errors ``fdl`` expects and reports as one line (never a traceback)."""

from __future__ import annotations


class CliError(Exception):
    """An expected failure: printed as ``fdl: error: MESSAGE`` and exits with ``code``.

    ``fix`` (optional) is the command or step that repairs it, printed on the same line.
    """

    def __init__(self, message: str, *, fix: str | None = None, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.code = code

    def __str__(self) -> str:
        return f"{self.message}; fix: {self.fix}" if self.fix else self.message


class UsageError(CliError):
    """A wrong flag, a missing argument or an unknown command: usage, then a hint; exit 2."""

    def __init__(self, message: str, *, usage: str = "", hint: str = "") -> None:
        super().__init__(message, code=2)
        self.usage = usage
        self.hint = hint
