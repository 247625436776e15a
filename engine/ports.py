"""What the run loop needs from a suite and from a store, as protocols.

The run loop (engine/runner.py) drives a suite (data/suites.py `Suite`) into a store
(store/db.py `Store`); both of those import the engine's types, so the engine names only
these protocols and never imports data/ or store/ (tests/test_architecture.py keeps it so).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from llmscope.engine.types import Item, Work


class RunSuite(Protocol):
    """A loaded suite as the run loop reads it (data/suites.py `Suite`)."""

    name: str
    task: str
    spec: dict[str, Any]
    source: str
    templates: dict[str, str]
    text_field: str
    answers: list[str] | None
    task_options: dict[str, Any]
    spec_path: Path | None
    items_path: Path | None

    @property
    def suite_id(self) -> str: ...

    def items(self) -> list[Item]: ...

    def work(
        self, limit: int | None = None, task_options: dict[str, Any] | None = None
    ) -> list[Work]: ...

    def describe(self) -> dict[str, Any]: ...


class RunStore(Protocol):
    """The store operations a run makes (store/db.py `Store`); signatures are the store's own."""

    def add_suite(self, *args: Any, **kwargs: Any) -> Any: ...
    def get_run(self, *args: Any, **kwargs: Any) -> Any: ...
    def create_run(self, *args: Any, **kwargs: Any) -> Any: ...
    def update_run(self, *args: Any, **kwargs: Any) -> Any: ...
    def done_keys(self, *args: Any, **kwargs: Any) -> Any: ...
    def delete_error_results(self, *args: Any, **kwargs: Any) -> Any: ...
    def count_results(self, *args: Any, **kwargs: Any) -> Any: ...
    def execute(self, *args: Any, **kwargs: Any) -> Any: ...
    def write_results(self, *args: Any, **kwargs: Any) -> Any: ...
    def max_seq(self, *args: Any, **kwargs: Any) -> Any: ...
