"""The one exception tree of sglang-tuner.

    TunerError                      every error the tool raises on purpose; str() is one line
    ├── ConfigError                 a bad search-space / scenario file or CLI value   (exit 2)
    │   └── FlagError               a setting SGLang (that version) would reject        (exit 2)
    ├── ServerError                 an SGLang (or simulated) server did not come up / died
    │   ├── ServerStartError        exited or logged a failure signature during startup
    │   └── ServerTimeoutError      not ready within the startup timeout
    ├── BenchmarkError              a measurement failed (too many failed requests, no tokens, ...)
    ├── StoreError                  the results database could not be read or written
    │   └── NotADatabaseError       --db names no sweep database (missing, damaged, not SQLite) (exit 2)
    ├── StudyError                  nothing to show/export (unknown study, no feasible trial)
    └── ClusterError                Ray could not provide the GPU groups asked for

Messages name the file, key path, flag or URL at fault and, where possible, what is allowed.
Lower-level errors are chained with ``raise ... from exc``.
"""

from __future__ import annotations

from core.types import FailureKind


class TunerError(Exception):
    """Base of every error the tool raises on purpose. ``exit_code`` is what the CLI returns."""

    exit_code = 1


class ConfigError(TunerError):
    """A search-space, scenario or command-line value is invalid. Nothing was launched or written."""

    exit_code = 2


class FlagError(ConfigError):
    """A setting is not an option (or not an allowed value) of the SGLang version that will run it."""


class ServerError(TunerError):
    """An inference server failed; ``kind`` is a failure kind, ``log_tail`` the last log lines."""

    def __init__(self, message: str, kind: FailureKind = FailureKind.CRASHED, log_tail: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.log_tail = log_tail


class ServerStartError(ServerError):
    """The server exited, or printed a known failure signature, before it was ready."""


class ServerTimeoutError(ServerError):
    """The server did not become ready within the startup timeout."""


class BenchmarkError(TunerError):
    """A benchmark run could not produce a valid measurement; the message says why."""


class StoreError(TunerError):
    """The results database could not be opened, read or written."""


class NotADatabaseError(StoreError):
    """``--db`` names something that is not a sweep database: missing (for readers), not SQLite,
    damaged, or another program's."""

    exit_code = 2


class StudyError(TunerError):
    """A study has nothing to offer for the request (unknown name, no feasible trial, ...)."""


class ClusterError(TunerError):
    """The Ray cluster cannot provide the GPU groups the sweep needs."""
