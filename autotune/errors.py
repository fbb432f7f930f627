"""The few errors autotune raises on purpose.

The CLI turns each into one line on stderr and the exit code it carries; anything
else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations


class AutotuneError(Exception):
    """Base of every error a user can cause or a machine can produce."""

    exit_code = 1


class ConfigError(AutotuneError):
    """Bad input: a scenario file, a flag value or a command-line option."""

    exit_code = 2


class EngineError(AutotuneError):
    """A vLLM server could not be started or died; `reason` classifies why."""

    def __init__(self, reason: str, message: str, log_tail: str = "", log_path: str | None = None):
        super().__init__(f"engine {reason}: {message}")
        self.reason = reason
        self.detail = message
        self.log_tail = log_tail
        self.log_path = log_path


class EngineNotInstalled(AutotuneError):
    """No vLLM build is importable in this environment."""

    exit_code = 3


class Halted(AutotuneError):
    """A measurement was cut short because the engine could no longer be used (it died,
    or the trial's time was spent); `why` is the reason its watch named."""

    def __init__(self, why: str):
        super().__init__(f"measurement stopped: {why}")
        self.why = why
