"""Errors shared by the suite loader (data/) and the tasks that own item rules (engine/tasks/).

`SuiteError` lives here, below both, so a task can reject an item with the file, line and
field without importing the loader; `llmscope.data.suites.SuiteError` is the same class.
"""

from __future__ import annotations

from pathlib import Path


class SuiteError(Exception):
    """Malformed suite spec or items; names file, line and field."""

    def __init__(
        self,
        message: str,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path or "<suite>"
        if self.line:
            where += f", line {self.line}"
        if self.field:
            where += f", field '{self.field}'"
        return f"{where}: {self.message}"


class SuiteDataMissing(SuiteError):
    """A loader's default data (under ../shared) is absent and no `--suite-path` was given.

    A listing of suites shows such a suite as needing a path; running it still refuses."""
