"""Imported as `llmscope`, the root package (pyproject.toml's package-dir maps the others in).

llmscope: a terminal microscope for the behaviour of large language models. This folder holds
the command line (cli/) and the app services (report, export, figures, importers, live channel).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmscope.notebook import Database

__version__ = "0.1.0"


def open(path: Any) -> Database:  # noqa: A001 - `llmscope.open(path)` reads like the builtin
    """Open an llmscope database for reading in a notebook (`llmscope.notebook.Database`:
    `runs()`, `results(run)`, `metrics(run)`). Imported on first use: `import llmscope` stays light."""
    from llmscope.notebook import open_db

    return open_db(path)
