"""The one error hierarchy. The CLI catches `MtiaTraceError`, prints one line, exits non-zero.

A message reads ``<input>: <what is wrong>; <what to do>``. Anything else raised is a bug and
keeps its traceback.
"""

from __future__ import annotations


class MtiaTraceError(Exception):
    """Base of every user-fixable error; carries the process exit code."""

    exit_code = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class TraceFormatError(MtiaTraceError):
    """A trace file is unreadable, malformed or not a profiler trace."""


class SchemaVersionError(MtiaTraceError):
    """A stored run was written by an incompatible schema version."""


class RunExistsError(MtiaTraceError):
    """The output run directory exists and --force was not given."""


class RunNotFoundError(MtiaTraceError):
    """A path given as a run is not a run directory."""


class HardwareSpecError(MtiaTraceError):
    """A hardware spec file or --set override is invalid."""


class UsageError(MtiaTraceError):
    """Options or arguments that cannot work together."""


class QueryError(MtiaTraceError):
    """A SQL query failed."""


class BaselineMissingError(MtiaTraceError):
    """`compare` was given a baseline that does not exist."""

    exit_code = 3
