"""Task registry: importing this package registers every built-in task."""

from llmscope.engine.tasks.base import TASKS, Task, register

__all__ = ["TASKS", "Task", "register", "get_task"]


def get_task(name: str) -> type[Task]:
    """The Task class a suite names; imports task modules lazily."""
    import importlib

    if name not in TASKS:
        try:
            importlib.import_module(f"llmscope.engine.tasks.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"llmscope.engine.tasks.{name}":
                raise
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}")
    return TASKS[name]
