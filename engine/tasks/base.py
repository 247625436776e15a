"""Task base class: a task turns a Work unit into backend calls and a Result."""

from __future__ import annotations

import abc
from typing import Any, ClassVar

from llmscope.engine.backend import Backend
from llmscope.engine.tasks.options import OptionSpec, validate_task_options
from llmscope.engine.types import Result, Work


# Shared by the tasks that can use a chat template (each states its own default).
def chat_option(default: bool) -> OptionSpec:
    """The ``chat`` option with a task's default."""
    return OptionSpec("chat", "bool", default, "pass the prompt through the model's chat template")


class Task(abc.ABC):
    """A scoring method a suite can name (`task:` in its spec)."""

    name: ClassVar[str]
    # Every option the task reads; anything else is rejected (engine/tasks/options.py).
    option_specs: ClassVar[tuple[OptionSpec, ...]] = ()

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options: dict[str, Any] = validate_task_options(type(self), dict(options or {}))

    def describe(self) -> dict[str, Any]:
        """Options recorded with the run (they make part of the run's identity)."""
        return {"task": self.name, **self.options}

    async def prepare(self, backend: Backend) -> None:  # noqa: B027
        """Once per run before any item (e.g. content-free calibration passes)."""

    @abc.abstractmethod
    async def score(self, work: Work, backend: Backend) -> Result:
        """Score one item under one prompt variant."""


TASKS: dict[str, type[Task]] = {}


def register(cls: type[Task]) -> type[Task]:
    TASKS[cls.name] = cls
    return cls
